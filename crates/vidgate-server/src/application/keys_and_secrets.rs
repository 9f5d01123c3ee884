//! Changes to an account's API keys (creation, revocation, spend limits)
//! and to its webhook secret, whoever makes them: the operator
//! (`operator_actions`, for the CLI and the operator API) or a person in the
//! dashboard. Each is one function, so the two make the same checks and
//! write the same audit row in the change's transaction, naming the
//! operator's actor or `dashboard:<email>`. A person's change is also
//! checked, in that transaction, against what the account's owners allow
//! members (`Store::may_manage_keys_and_secrets`).
//!
//! These live below `operator_actions` and `dashboard` alike because the
//! operator's actions sit above the dashboard (their `user create`
//! prepares its user there): the dashboard cannot call them, and both call
//! these.

use serde_json::json;

use crate::application::accounts::{self, AccountChangeError, CreatedKey, ROTATION_GRACE};
use crate::ids::new_webhook_secret;
use crate::spend_limits::SpendLimit;
use crate::store::{
    Account, AuditAction, KeyChangeRefusal, KeyChanger, NewAuditEntry, PeopleActor, Session, Store,
    StoreError,
};

/// Who makes a change to keys or a webhook secret.
#[derive(Debug, Clone, Copy)]
pub enum Changer<'a> {
    /// The operator, with the actor the audit log names.
    Operator(&'a str),
    /// A person signed in to the dashboard.
    Person(&'a Session),
    /// An account's own API key (its id), changing its own account.
    ApiKey(&'a str),
}

impl Changer<'_> {
    fn actor(&self) -> String {
        match self {
            Changer::Operator(actor) => (*actor).to_owned(),
            Changer::Person(session) => dashboard_actor(session),
            Changer::ApiKey(key_id) => format!("api_key:{key_id}"),
        }
    }

    fn for_store(&self) -> KeyChanger<'_> {
        match self {
            Changer::Operator(_) | Changer::ApiKey(_) => KeyChanger::Trusted,
            Changer::Person(session) => KeyChanger::Person(PeopleActor {
                account_id: &session.account_id,
                user_id: &session.user_id,
            }),
        }
    }
}

/// Who the audit log names for a change made in the dashboard.
pub fn dashboard_actor(session: &Session) -> String {
    format!("dashboard:{}", session.email)
}

/// Why a change to keys or a webhook secret was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyChangeError {
    /// Only a person can be refused this: a member of an account whose
    /// owners have not allowed members to manage keys and secrets.
    #[error(
        "Only an owner of the account can create or revoke keys, change spend limits or read \
         or rotate the webhook secret, unless the owners allow members to (on the People page)."
    )]
    NotAllowed,
    #[error("no active key {0}")]
    KeyNotFound(String),
    #[error(transparent)]
    Account(#[from] AccountChangeError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Creates an API key named `name` for an account that is not deleted; a
/// person's key records them as its maker, so that removing them can
/// revoke it. The secret is in the answer, shown once.
pub async fn create_key(
    store: &Store,
    changer: Changer<'_>,
    account_id: &str,
    name: &str,
) -> Result<CreatedKey, KeyChangeError> {
    accounts::changeable_account(store, account_id).await?;
    let mut issued = accounts::issue_api_key(account_id, name);
    if let Changer::Person(session) = changer {
        issued.record.created_by_user_id = Some(session.user_id.clone());
    }
    let audit = NewAuditEntry {
        actor: changer.actor(),
        action: AuditAction::KeyCreate,
        target: issued.record.id.clone(),
        detail: json!({
            "account_id": account_id,
            "name": name,
            "created_by_user_id": issued.record.created_by_user_id,
        }),
    };
    store
        .operator()
        .create_api_key_audited(changer.for_store(), &issued.record, &audit)
        .await?
        .map_err(|refused| refusal(refused, &issued.record.id))?;
    Ok(CreatedKey {
        key_id: issued.record.id,
        api_key: issued.secret,
    })
}

/// Revokes an API key; it is refused from then on (by this process at
/// once, by the others within `CALLER_CACHE_TTL`).
pub async fn revoke_key(
    store: &Store,
    changer: Changer<'_>,
    key_id: &str,
) -> Result<(), KeyChangeError> {
    let audit = NewAuditEntry {
        actor: changer.actor(),
        action: AuditAction::KeyRevoke,
        target: key_id.to_owned(),
        detail: json!({}),
    };
    store
        .operator()
        .revoke_api_key_audited(changer.for_store(), key_id, &audit)
        .await?
        .map_err(|refused| refusal(refused, key_id))
}

/// Sets a key's spend limit, or removes it (`None`).
pub async fn set_spend_limit(
    store: &Store,
    changer: Changer<'_>,
    key_id: &str,
    limit: Option<SpendLimit>,
) -> Result<(), KeyChangeError> {
    let audit = NewAuditEntry {
        actor: changer.actor(),
        action: AuditAction::KeyLimit,
        target: key_id.to_owned(),
        detail: json!({
            "spend_limit_micros": limit.map(|limit| limit.amount.0),
            "spend_limit_period": limit.map(|limit| limit.period.as_str()),
        }),
    };
    store
        .operator()
        .set_spend_limit_audited(changer.for_store(), key_id, limit, &audit)
        .await?
        .map_err(|refused| refusal(refused, key_id))
}

/// Issues a new webhook signing secret; the replaced one keeps signing
/// deliveries beside it for `ROTATION_GRACE`, so receivers can switch over
/// without rejecting anything. Answers the account with its new secret.
pub async fn rotate_webhook_secret(
    store: &Store,
    changer: Changer<'_>,
    account_id: &str,
) -> Result<Account, KeyChangeError> {
    accounts::changeable_account(store, account_id).await?;
    let audit = NewAuditEntry {
        actor: changer.actor(),
        action: AuditAction::AccountRotateWebhookSecret,
        target: account_id.to_owned(),
        detail: json!({}),
    };
    store
        .operator()
        .rotate_webhook_secret_audited(
            changer.for_store(),
            account_id,
            &new_webhook_secret(),
            ROTATION_GRACE,
            &audit,
        )
        .await?
        .map_err(|refused| match refused {
            KeyChangeRefusal::NotAllowed => KeyChangeError::NotAllowed,
            KeyChangeRefusal::NotFound => {
                AccountChangeError::NotFound(account_id.to_owned()).into()
            }
        })
}

/// Whether a signed-in person may create and revoke keys, change spend
/// limits and read or rotate the webhook secret; reading the secret, which
/// changes nothing, is checked with this alone.
pub async fn person_may_manage(store: &Store, session: &Session) -> Result<bool, StoreError> {
    store
        .users()
        .may_manage_keys_and_secrets(PeopleActor {
            account_id: &session.account_id,
            user_id: &session.user_id,
        })
        .await
}

fn refusal(refused: KeyChangeRefusal, key_id: &str) -> KeyChangeError {
    match refused {
        KeyChangeRefusal::NotAllowed => KeyChangeError::NotAllowed,
        KeyChangeRefusal::NotFound => KeyChangeError::KeyNotFound(key_id.to_owned()),
    }
}
