//! The operator's actions: one function per action, called by both
//! `vidgate admin` (the CLI) and the operator API (`/admin/v1`), so the two
//! offer the same actions with the same checks. Each function takes the
//! store and the actor (who the audit log names), checks what it is told,
//! and makes the change and its audit row in one store transaction
//! (`store::operator_changes`), so a change is never kept without its line
//! in the audit log. The audit log's action names are `store::AuditAction`.
//!
//! A new action is a function in the file of its resource, a variant of
//! `AuditAction`, a store method that makes its change with
//! `record_audit_in` in one transaction, a CLI subcommand in
//! `crates/vidgate/src/admin.rs`, and a route with its description in
//! `http/admin/`; its refusals are variants of `OperatorActionError`, which
//! `http/error.rs` maps to answers.

pub mod accounts;
pub mod keys;
pub mod models;
pub mod users;

use vidgate_core::Micros;

use crate::application::accounts::AccountChangeError;
use crate::application::keys_and_secrets::KeyChangeError;
use crate::application::users::UserError;
use crate::store::StoreError;

/// Why an operator action was refused. The texts are the CLI's; the
/// operator API answers each with its own status and message.
#[derive(Debug, thiserror::Error)]
pub enum OperatorActionError {
    /// A figure or text out of its bounds; `param` names it as the
    /// operator API's body or header does.
    #[error("{message}")]
    Invalid {
        param: &'static str,
        message: String,
    },
    #[error("no account {0}")]
    AccountNotFound(String),
    /// A deleted account keeps only its books: a change would bring the
    /// deleted customer back.
    #[error("the account {0} was deleted; it cannot be changed")]
    AccountDeleted(String),
    /// A credit or debit for a deleted account, whose books are closed.
    #[error("the account {0} was deleted; its books are closed")]
    BooksClosed(String),
    #[error("the idempotency key was used for another account, kind or amount")]
    IdempotencyKeyReused,
    #[error("the balance is ${}; a debit cannot take it below zero", .balance.to_usd())]
    InsufficientBalance { balance: Micros },
    /// An account with generations queued or running is not deleted: their
    /// holds and results still belong to it.
    #[error(
        "account {account_id} has {generations} generations queued or running: \
         cancel them or wait until they finish"
    )]
    AccountBusy {
        account_id: String,
        generations: i64,
    },
    #[error("no active key {0}")]
    KeyNotFound(String),
    /// A person in the dashboard whom the account's owners do not let
    /// manage keys and secrets; the operator is never refused it, but the
    /// change it shares with the dashboard (`keys_and_secrets`) can be.
    #[error("{0}")]
    NotAllowed(String),
    #[error("no model {0} in the catalog")]
    ModelNotFound(String),
    #[error("no user {0}")]
    UserNotFound(String),
    #[error(transparent)]
    User(#[from] UserError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<AccountChangeError> for OperatorActionError {
    fn from(error: AccountChangeError) -> Self {
        match error {
            AccountChangeError::NotFound(account_id) => {
                OperatorActionError::AccountNotFound(account_id)
            }
            AccountChangeError::Deleted(account_id) => {
                OperatorActionError::AccountDeleted(account_id)
            }
            AccountChangeError::Store(error) => OperatorActionError::Store(error),
        }
    }
}

impl From<KeyChangeError> for OperatorActionError {
    fn from(error: KeyChangeError) -> Self {
        match error {
            KeyChangeError::NotAllowed => OperatorActionError::NotAllowed(error.to_string()),
            KeyChangeError::KeyNotFound(key_id) => OperatorActionError::KeyNotFound(key_id),
            KeyChangeError::Account(error) => error.into(),
            KeyChangeError::Store(error) => OperatorActionError::Store(error),
        }
    }
}

/// `text` trimmed, when it is 1 to `max_characters` characters; otherwise
/// the refusal that names `param`.
fn bounded_text<'a>(
    param: &'static str,
    text: &'a str,
    max_characters: usize,
) -> Result<&'a str, OperatorActionError> {
    let text = text.trim();
    if text.is_empty() || text.chars().count() > max_characters {
        return Err(OperatorActionError::Invalid {
            param,
            message: format!("{param} must be 1 to {max_characters} characters."),
        });
    }
    Ok(text)
}
