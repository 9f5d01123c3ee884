//! Dashboard users: made ready for the operator's `user create`
//! (`operator_actions::users`), and created at the first start and by
//! sign-up.

use crate::accounts::AccountChangeError;
use crate::ids::{new_account_id, new_webhook_secret, random_token};
use crate::store::{Account, NewAccount, Store, StoreError, User, now_millis};

use super::passwords::{self, PasswordError};

/// Length of a generated one-time password: 24 characters of 36 symbols,
/// about 124 bits.
const ONE_TIME_PASSWORD_CHARS: usize = 24;
/// The dashboard user of the development account `vidgate serve` creates
/// on a first start.
pub const DEVELOPMENT_EMAIL: &str = "developer@localhost";
/// Emails longer than this are refused (RFC 5321's path limit).
const MAX_EMAIL_BYTES: usize = 254;

#[derive(Debug, thiserror::Error)]
pub enum UserError {
    #[error("{0}")]
    InvalidEmail(String),
    #[error("{0}")]
    InvalidPassword(String),
    #[error("a user with the email {0} already exists")]
    EmailTaken(String),
    #[error("no account {0}")]
    NoAccount(String),
    #[error("the account {0} was deleted")]
    AccountDeleted(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Password(#[from] PasswordError),
}

pub struct CreatedUser {
    pub user: User,
    /// The generated password, when none was given; shown once.
    pub one_time_password: Option<String>,
}

/// Emails are compared lowercased and without surrounding spaces. Only the
/// shape is checked (something@something, no spaces or control characters):
/// whether it receives mail is not the dashboard's concern.
pub fn normalize_email(email: &str) -> Result<String, UserError> {
    let email = email.trim().to_lowercase();
    let well_formed = email.len() <= MAX_EMAIL_BYTES
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
        && !email
            .chars()
            .any(|character| character.is_whitespace() || character.is_control());
    if well_formed {
        Ok(email)
    } else {
        Err(UserError::InvalidEmail(
            "Enter an email address such as name@example.com.".into(),
        ))
    }
}

fn new_user_id() -> String {
    format!("usr_{}", random_token(20))
}

/// A user of an existing account made ready to store, with `password` or,
/// without one, a generated one-time password that is returned once. The
/// email is checked for its shape here and for being free when it is
/// stored.
pub async fn prepare_user(
    store: &Store,
    account_id: &str,
    email: &str,
    password: Option<String>,
) -> Result<CreatedUser, UserError> {
    let email = normalize_email(email)?;
    crate::accounts::changeable_account(store, account_id)
        .await
        .map_err(|error| match error {
            AccountChangeError::NotFound(account_id) => UserError::NoAccount(account_id),
            AccountChangeError::Deleted(account_id) => UserError::AccountDeleted(account_id),
            AccountChangeError::Store(error) => UserError::Store(error),
        })?;
    let (password, one_time_password) = match password {
        Some(password) => {
            passwords::check_new_password(&password).map_err(UserError::InvalidPassword)?;
            (password, None)
        }
        None => {
            let generated = random_token(ONE_TIME_PASSWORD_CHARS);
            (generated.clone(), Some(generated))
        }
    };
    let user = User {
        id: new_user_id(),
        account_id: account_id.to_owned(),
        email,
        password_hash: passwords::hash(password).await?,
        created_at: now_millis(),
    };
    Ok(CreatedUser {
        user,
        one_time_password,
    })
}

/// Creates a user of an existing account, as `prepare_user` makes it.
pub async fn create_user(
    store: &Store,
    account_id: &str,
    email: &str,
    password: Option<String>,
) -> Result<CreatedUser, UserError> {
    let prepared = prepare_user(store, account_id, email, password).await?;
    let user = store
        .create_user(&prepared.user)
        .await?
        .ok_or_else(|| UserError::EmailTaken(prepared.user.email.clone()))?;
    Ok(CreatedUser {
        user,
        one_time_password: prepared.one_time_password,
    })
}

/// Creates an account with no credit and its first user, in one
/// transaction.
pub async fn sign_up(
    store: &Store,
    email: &str,
    password: String,
) -> Result<(Account, User), UserError> {
    let email = normalize_email(email)?;
    passwords::check_new_password(&password).map_err(UserError::InvalidPassword)?;
    let account_id = new_account_id();
    let user = User {
        id: new_user_id(),
        account_id: account_id.clone(),
        email: email.clone(),
        password_hash: passwords::hash(password).await?,
        created_at: now_millis(),
    };
    store
        .sign_up(
            NewAccount {
                id: account_id,
                name: email.clone(),
                initial_credit: vidgate_core::Micros::ZERO,
                webhook_secret: new_webhook_secret(),
            },
            &user,
        )
        .await?
        .ok_or(UserError::EmailTaken(email))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_lowercased_and_checked() {
        assert_eq!(
            normalize_email("  Ada@Example.COM ").unwrap(),
            "ada@example.com"
        );
        for bad in ["", "ada", "@example.com", "ada@", "a da@example.com"] {
            assert!(normalize_email(bad).is_err(), "{bad:?}");
        }
        assert!(normalize_email(&format!("{}@x.y", "a".repeat(300))).is_err());
    }
}
