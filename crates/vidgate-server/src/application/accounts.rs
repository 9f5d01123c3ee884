//! Accounts and keys as the first start of `vidgate serve`, the dashboard
//! and the operator's actions (`operator_actions`) make them.

use std::time::Duration;

use vidgate_core::Micros;

use crate::ids::{new_account_id, new_api_key, new_key_id, new_webhook_secret};
use crate::store::{Account, LowBalanceSetting, NewAccount, NewApiKey, Store, StoreError};

/// Credit given to the account created on the first start, so a newcomer can
/// run generations straight away.
pub const DEVELOPMENT_CREDIT: Micros = Micros(25_000_000);

/// How long the previous webhook secret keeps signing after a rotation, so
/// that receivers can switch to the new one without rejecting anything.
pub const ROTATION_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

pub struct CreatedAccount {
    pub account: Account,
    pub key_id: String,
    /// The API key secret; shown once, never stored.
    pub api_key: String,
}

pub struct CreatedKey {
    pub key_id: String,
    pub api_key: String,
}

/// Why an operator change to an account is refused.
#[derive(Debug, thiserror::Error)]
pub enum AccountChangeError {
    #[error("no account {0}")]
    NotFound(String),
    #[error("the account {0} was deleted; it cannot be changed")]
    Deleted(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The account an operator change (a key, a user, limits) applies to. A
/// deleted account keeps only its books: a change would bring the deleted
/// customer back, so it is refused.
pub async fn changeable_account(
    store: &Store,
    account_id: &str,
) -> Result<Account, AccountChangeError> {
    let account = store
        .accounts()
        .get(account_id)
        .await?
        .ok_or_else(|| AccountChangeError::NotFound(account_id.to_owned()))?;
    if account.deleted_at.is_some() {
        return Err(AccountChangeError::Deleted(account_id.to_owned()));
    }
    Ok(account)
}

/// A new API key before it is stored: its row, and its secret, which is
/// shown once and never stored.
pub struct IssuedKey {
    pub record: NewApiKey,
    pub secret: String,
}

/// Makes a new API key for `account_id`, to be stored by the caller.
pub fn issue_api_key(account_id: &str, name: &str) -> IssuedKey {
    let secret = new_api_key();
    IssuedKey {
        record: NewApiKey {
            id: new_key_id(),
            account_id: account_id.to_owned(),
            name: name.to_owned(),
            prefix: secret.display_prefix,
            secret_sha256: secret.sha256,
            created_by_user_id: None,
        },
        secret: secret.secret,
    }
}

pub async fn create_api_key(
    store: &Store,
    account_id: &str,
    name: &str,
) -> Result<CreatedKey, StoreError> {
    let issued = issue_api_key(account_id, name);
    let key_id = issued.record.id.clone();
    store.accounts().create_api_key(issued.record).await?;
    Ok(CreatedKey {
        key_id,
        api_key: issued.secret,
    })
}

/// A new account's row, with fresh ids and webhook secret, to be stored by
/// the caller.
pub fn new_account(name: &str, initial_credit: Micros) -> NewAccount {
    NewAccount {
        id: new_account_id(),
        name: name.to_owned(),
        initial_credit,
        webhook_secret: new_webhook_secret(),
    }
}

/// Creates an account with an initial credit and its first API key.
pub async fn create_account(
    store: &Store,
    name: &str,
    initial_credit: Micros,
) -> Result<CreatedAccount, StoreError> {
    let account = store
        .accounts()
        .create(new_account(name, initial_credit))
        .await?;
    let key = create_api_key(store, &account.id, "default").await?;
    Ok(CreatedAccount {
        account,
        key_id: key.key_id,
        api_key: key.api_key,
    })
}

pub async fn create_development_account(store: &Store) -> Result<CreatedAccount, StoreError> {
    create_account(store, "development", DEVELOPMENT_CREDIT).await
}

/// The longest low-balance webhook URL an account may give.
pub const MAX_LOW_BALANCE_URL_LENGTH: usize = 2048;

/// Whether `url` has the form of a webhook target: an http or https URL
/// with a host, of at most `MAX_LOW_BALANCE_URL_LENGTH` characters. Where it
/// points is checked by the webhook senders' address guard at each attempt.
pub fn has_webhook_url_form(url: &str) -> bool {
    url.len() <= MAX_LOW_BALANCE_URL_LENGTH
        && url::Url::parse(url).is_ok_and(|parsed| {
            matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some()
        })
}

/// Why a low-balance alert as given (by the dashboard or the operator) is
/// refused: the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct LowBalanceInputError {
    pub param: &'static str,
    pub message: String,
}

/// The low-balance alert `threshold_usd` (`"5.00"`) with its optional
/// `webhook_url`, or no alert when the threshold is absent or empty. The
/// URL is checked for its form only; where it points is checked by the
/// webhook senders' address guard at each attempt, as a generation's is.
pub fn parse_low_balance_setting(
    threshold_usd: Option<&str>,
    webhook_url: Option<&str>,
) -> Result<LowBalanceSetting, LowBalanceInputError> {
    let threshold = match threshold_usd.map(str::trim).filter(|text| !text.is_empty()) {
        None => None,
        Some(text) => Some(
            Micros::parse_usd(text).map_err(|error| LowBalanceInputError {
                param: "low_balance_threshold_usd",
                message: format!("low_balance_threshold_usd: {error}, such as \"5.00\"."),
            })?,
        ),
    };
    let webhook_url = webhook_url.map(str::trim).filter(|text| !text.is_empty());
    if let Some(webhook_url) = webhook_url {
        let refused = || LowBalanceInputError {
            param: "low_balance_webhook_url",
            message: format!(
                "low_balance_webhook_url must be an http or https URL of at most \
                 {MAX_LOW_BALANCE_URL_LENGTH} characters."
            ),
        };
        if !has_webhook_url_form(webhook_url) {
            return Err(refused());
        }
        if threshold.is_none() {
            return Err(LowBalanceInputError {
                param: "low_balance_threshold_usd",
                message: "A low-balance webhook URL needs a threshold to be sent at.".into(),
            });
        }
    }
    Ok(LowBalanceSetting {
        threshold,
        webhook_url: webhook_url.map(str::to_owned),
    })
}
