//! The operator's actions on API keys: create one for an account (its
//! secret shown once), revoke one, set or remove its spend limit.

use serde_json::json;

use super::{OperatorActionError, bounded_text};
use crate::accounts::{self, CreatedKey};
use crate::spend_limits::{SpendLimit, parse_spend_limit};
use crate::store::{AuditAction, NewAuditEntry, Store};

pub const MAX_KEY_NAME_LENGTH: usize = 100;
/// The name of a key created without one.
const DEFAULT_KEY_NAME: &str = "default";

/// A key created by the operator, with the name it was given.
pub struct NamedKey {
    pub key: CreatedKey,
    pub name: String,
}

/// Creates an API key for an account that is not deleted, named `name` or
/// "default".
pub async fn create(
    store: &Store,
    actor: &str,
    account_id: &str,
    name: Option<&str>,
) -> Result<NamedKey, OperatorActionError> {
    let name = bounded_text(
        "name",
        name.unwrap_or(DEFAULT_KEY_NAME),
        MAX_KEY_NAME_LENGTH,
    )?;
    accounts::changeable_account(store, account_id).await?;
    let issued = accounts::issue_api_key(account_id, name);
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::KeyCreate,
        target: issued.record.id.clone(),
        detail: json!({ "account_id": account_id, "name": name }),
    };
    store.create_api_key_audited(&issued.record, &audit).await?;
    Ok(NamedKey {
        key: CreatedKey {
            key_id: issued.record.id,
            api_key: issued.secret,
        },
        name: name.to_owned(),
    })
}

/// Revokes an API key; it is refused from then on (by this process at
/// once, by the others within `CALLER_CACHE_TTL`).
pub async fn revoke(store: &Store, actor: &str, key_id: &str) -> Result<(), OperatorActionError> {
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::KeyRevoke,
        target: key_id.to_owned(),
        detail: json!({}),
    };
    if !store.revoke_api_key_audited(key_id, &audit).await? {
        return Err(OperatorActionError::KeyNotFound(key_id.to_owned()));
    }
    Ok(())
}

/// Sets a key's spend limit (`amount_usd` per `period`), or removes it when
/// `amount_usd` is absent; answers the limit now in force.
pub async fn set_spend_limit(
    store: &Store,
    actor: &str,
    key_id: &str,
    amount_usd: Option<&str>,
    period: Option<&str>,
) -> Result<Option<SpendLimit>, OperatorActionError> {
    let limit =
        parse_spend_limit(amount_usd, period).map_err(|error| OperatorActionError::Invalid {
            param: error.param,
            message: error.message,
        })?;
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::KeyLimit,
        target: key_id.to_owned(),
        detail: json!({
            "spend_limit_micros": limit.map(|limit| limit.amount.0),
            "spend_limit_period": limit.map(|limit| limit.period.as_str()),
        }),
    };
    if !store.set_spend_limit_audited(key_id, limit, &audit).await? {
        return Err(OperatorActionError::KeyNotFound(key_id.to_owned()));
    }
    Ok(limit)
}
