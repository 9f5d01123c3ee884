//! Dashboard users: made ready for the operator's `user create`
//! (`operator_actions::users`), created at the first start and by sign-up,
//! and the changes people make in the dashboard: an owner inviting a
//! person, changing a role or removing a person, and anyone changing their
//! own password. Each change is made with its audit row (actor
//! `dashboard:<email>`) in one store transaction, which also decides the
//! checks that a concurrent change could otherwise slip past (the actor is
//! still an owner, the account keeps an owner, the email is free).

use std::time::Duration;

use serde_json::json;

use crate::application::accounts::AccountChangeError;
use crate::application::keys_and_secrets::dashboard_actor;
use crate::ids::{new_account_id, new_webhook_secret, random_token};
use crate::store::{
    Account, AuditAction, KeysOfRemovedPerson, NewAccount, NewAuditEntry, PeopleActor,
    PeopleRefusal, RemovedPerson, Session, Store, StoreError, User, UserRole, now_millis,
};

use super::passwords::{self, PasswordError};

/// Length of a generated one-time password: 24 characters of 36 symbols,
/// about 124 bits.
const ONE_TIME_PASSWORD_CHARS: usize = 24;
/// How long a one-time password signs in: three days, time for an invited
/// person to find the message in a week's mail, and short enough that a
/// password shown once and then left in a chat or a ticket stops working.
/// After it, the person asks for a new invitation (or the operator for a
/// new `user create`).
pub const ONE_TIME_PASSWORD_LIFETIME: Duration = Duration::from_secs(72 * 60 * 60);
/// What a sign-in with an expired one-time password is told. The password
/// was right, so saying that it expired tells a guesser nothing.
pub const ONE_TIME_PASSWORD_EXPIRED: &str = "This one-time password has expired: one-time \
    passwords sign in for 72 hours. Ask an owner of the account to remove you and invite you \
    again, or the operator to create your user again.";
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

impl UserError {
    /// How long to wait before trying again, when the password could not be
    /// hashed because every hashing slot was taken.
    pub fn busy_retry_after(&self) -> Option<std::time::Duration> {
        match self {
            UserError::Password(error) => error.busy_retry_after(),
            _ => None,
        }
    }
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
/// without one, a generated one-time password that is returned once and
/// must be changed at the first sign-in. The email is checked for its shape
/// here and for being free when it is stored.
pub async fn prepare_user(
    store: &Store,
    account_id: &str,
    email: &str,
    password: Option<String>,
    role: UserRole,
) -> Result<CreatedUser, UserError> {
    let email = normalize_email(email)?;
    crate::application::accounts::changeable_account(store, account_id)
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
    let created_at = now_millis();
    let user = User {
        id: new_user_id(),
        account_id: account_id.to_owned(),
        email,
        password_hash: passwords::hash(password).await?,
        created_at,
        role,
        must_change_password: one_time_password.is_some(),
        one_time_password_expires_at: one_time_password
            .is_some()
            .then(|| created_at + ONE_TIME_PASSWORD_LIFETIME.as_millis() as i64),
    };
    Ok(CreatedUser {
        user,
        one_time_password,
    })
}

/// Creates an owner of an existing account, as `prepare_user` makes it.
pub async fn create_user(
    store: &Store,
    account_id: &str,
    email: &str,
    password: Option<String>,
) -> Result<CreatedUser, UserError> {
    let prepared = prepare_user(store, account_id, email, password, UserRole::Owner).await?;
    let user = store
        .users()
        .create(&prepared.user)
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
        // The first person of a new account owns it, and chose the password.
        role: UserRole::Owner,
        must_change_password: false,
        one_time_password_expires_at: None,
    };
    store
        .users()
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

fn people_actor(session: &Session) -> PeopleActor<'_> {
    PeopleActor {
        account_id: &session.account_id,
        user_id: &session.user_id,
    }
}

/// Why a change to an account's people was refused, in words for the
/// person who asked.
#[derive(Debug, thiserror::Error)]
pub enum PeopleError {
    #[error("Only an owner of the account can invite people, change roles or remove people.")]
    NotAnOwner,
    #[error("There is nobody with that id in this account.")]
    UserNotFound,
    #[error(
        "The account must keep an owner: make someone else an owner before you step down \
         or leave."
    )]
    LastOwner,
    /// The same words whether the email is this account's or another's,
    /// so the answer does not tell which emails other accounts have.
    #[error("This email cannot be invited: it already signs in to vidgate. Invite another email.")]
    EmailTaken,
    #[error(transparent)]
    User(#[from] UserError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<PeopleRefusal> for PeopleError {
    fn from(refusal: PeopleRefusal) -> PeopleError {
        match refusal {
            PeopleRefusal::NotAnOwner => PeopleError::NotAnOwner,
            PeopleRefusal::UserNotFound => PeopleError::UserNotFound,
            PeopleRefusal::LastOwner => PeopleError::LastOwner,
            PeopleRefusal::EmailTaken => PeopleError::EmailTaken,
        }
    }
}

/// An owner invites a person to their account with a role: a new user with
/// a one-time password, returned once, that the person must change at
/// their first sign-in.
pub async fn invite(
    store: &Store,
    inviter: &Session,
    email: &str,
    role: UserRole,
) -> Result<CreatedUser, PeopleError> {
    let prepared = prepare_user(store, &inviter.account_id, email, None, role).await?;
    let audit = NewAuditEntry {
        actor: dashboard_actor(inviter),
        action: AuditAction::UserCreate,
        target: prepared.user.id.clone(),
        detail: json!({
            "account_id": inviter.account_id,
            "email": prepared.user.email,
            "role": role.as_str(),
        }),
    };
    let user = store
        .users()
        .invite_user_audited(people_actor(inviter), &prepared.user, &audit)
        .await??;
    Ok(CreatedUser {
        user,
        one_time_password: prepared.one_time_password,
    })
}

/// An owner gives a person of their account a role; the account keeps at
/// least one owner. Answers the person with the role.
pub async fn set_role(
    store: &Store,
    owner: &Session,
    user_id: &str,
    role: UserRole,
) -> Result<User, PeopleError> {
    let changed = store
        .users()
        .set_user_role_audited(people_actor(owner), user_id, role, |user| NewAuditEntry {
            actor: dashboard_actor(owner),
            action: AuditAction::UserRole,
            target: user.id.clone(),
            detail: json!({
                "account_id": user.account_id,
                "email": user.email,
                "from": user.role.as_str(),
                "to": role.as_str(),
            }),
        })
        .await??;
    Ok(changed)
}

/// An owner removes a person of their account, whose sessions end at once,
/// and revokes the API keys the person made or keeps them, as `keys` says;
/// the account keeps at least one owner. Answers the person as they were,
/// with the keys revoked.
pub async fn remove(
    store: &Store,
    owner: &Session,
    user_id: &str,
    keys: KeysOfRemovedPerson,
) -> Result<RemovedPerson, PeopleError> {
    let removed = store
        .users()
        .remove_account_user_audited(
            people_actor(owner),
            user_id,
            keys,
            |user, revoked_key_ids| NewAuditEntry {
                actor: dashboard_actor(owner),
                action: AuditAction::UserRemove,
                target: user.id.clone(),
                detail: json!({
                    "account_id": user.account_id,
                    "email": user.email,
                    "keys_revoked": revoked_key_ids,
                }),
            },
        )
        .await??;
    Ok(removed)
}

/// An owner lets the account's members create and revoke keys, change
/// their spend limits and read or rotate the webhook secret, or stops them.
pub async fn set_members_manage_keys_and_secrets(
    store: &Store,
    owner: &Session,
    allowed: bool,
) -> Result<(), PeopleError> {
    let audit = NewAuditEntry {
        actor: dashboard_actor(owner),
        action: AuditAction::AccountMemberPermissions,
        target: owner.account_id.clone(),
        detail: json!({ "members_manage_keys_and_secrets": allowed }),
    };
    store
        .users()
        .set_members_manage_keys_and_secrets_audited(people_actor(owner), allowed, &audit)
        .await??;
    Ok(())
}

/// Why a password change was refused, in words for the person, with the
/// form field at fault.
#[derive(Debug, thiserror::Error)]
pub enum PasswordChangeError {
    #[error("The current password is wrong.")]
    WrongCurrentPassword,
    /// `check_new_password`'s words, which speak of "the password", led by
    /// the field they are about.
    #[error("New password: {0}")]
    InvalidNewPassword(String),
    #[error("The repeated password is not the same as the new password.")]
    RepeatMismatch,
    #[error("The new password must differ from the current one.")]
    SameAsCurrent,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Password(#[from] PasswordError),
}

impl PasswordChangeError {
    /// How long to wait before trying again, when every hashing slot was
    /// taken.
    pub fn busy_retry_after(&self) -> Option<std::time::Duration> {
        match self {
            PasswordChangeError::Password(error) => error.busy_retry_after(),
            _ => None,
        }
    }

    /// The form field the refusal is about; `None` for a failure on our
    /// side.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            PasswordChangeError::WrongCurrentPassword => Some("current_password"),
            PasswordChangeError::InvalidNewPassword(_) | PasswordChangeError::SameAsCurrent => {
                Some("new_password")
            }
            PasswordChangeError::RepeatMismatch => Some("repeat_password"),
            PasswordChangeError::Store(_) | PasswordChangeError::Password(_) => None,
        }
    }
}

/// The signed-in user replaces their password, proving the current one.
/// Their other sessions end (whoever knew the old password is signed out
/// everywhere); this one stays. Answers how many other sessions ended.
pub async fn change_password(
    store: &Store,
    session: &Session,
    current_password: String,
    new_password: String,
    repeated_password: &str,
) -> Result<u64, PasswordChangeError> {
    passwords::check_new_password(&new_password)
        .map_err(PasswordChangeError::InvalidNewPassword)?;
    if new_password != repeated_password {
        return Err(PasswordChangeError::RepeatMismatch);
    }
    if new_password == current_password {
        return Err(PasswordChangeError::SameAsCurrent);
    }
    // A session outlives no user (removing one ends its sessions), so a
    // missing user is only a removal racing this request.
    let Some(previous_hash) = store
        .users()
        .by_id(&session.user_id)
        .await?
        .map(|user| user.password_hash)
    else {
        return Err(PasswordChangeError::WrongCurrentPassword);
    };
    if !passwords::verify(current_password, Some(previous_hash.clone())).await? {
        return Err(PasswordChangeError::WrongCurrentPassword);
    }
    let new_hash = passwords::hash(new_password).await?;
    store
        .users()
        .change_password_audited(
            &session.user_id,
            &previous_hash,
            &new_hash,
            &session.id,
            |revoked| NewAuditEntry {
                actor: dashboard_actor(session),
                action: AuditAction::UserPassword,
                target: session.user_id.clone(),
                detail: json!({ "account_id": session.account_id, "sessions_revoked": revoked }),
            },
        )
        .await?
        // Changed by another session since it was read: the current
        // password given is no longer the current one.
        .ok_or(PasswordChangeError::WrongCurrentPassword)
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
