//! The operator's actions on API keys: create one for an account (its
//! secret shown once), revoke one.

use serde_json::json;

use super::{OperatorActionError, bounded_text};
use crate::accounts::{self, CreatedKey};
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
