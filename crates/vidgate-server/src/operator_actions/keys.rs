//! The operator's actions on API keys: create one for an account (its
//! secret shown once), revoke one, set or remove its spend limit. Each is
//! the change `keys_and_secrets` makes for a person in the dashboard too.

use super::{OperatorActionError, bounded_text};
use crate::application::accounts::CreatedKey;
use crate::application::keys_and_secrets::{self, Changer};
use crate::spend_limits::{SpendLimit, parse_spend_limit};
use crate::store::Store;

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
    let key =
        keys_and_secrets::create_key(store, Changer::Operator(actor), account_id, name).await?;
    Ok(NamedKey {
        key,
        name: name.to_owned(),
    })
}

/// Revokes an API key; it is refused from then on (by this process at
/// once, by the others within `CALLER_CACHE_TTL`).
pub async fn revoke(store: &Store, actor: &str, key_id: &str) -> Result<(), OperatorActionError> {
    keys_and_secrets::revoke_key(store, Changer::Operator(actor), key_id).await?;
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
    keys_and_secrets::set_spend_limit(store, Changer::Operator(actor), key_id, limit).await?;
    Ok(limit)
}
