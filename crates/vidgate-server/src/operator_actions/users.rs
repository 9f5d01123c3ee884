//! The operator's actions on dashboard users: create one, remove one, end
//! every session of one. Users are named by their email, which is unique.

use serde_json::json;

use super::OperatorActionError;
use crate::application::users::{self, CreatedUser, UserError};
use crate::store::{AuditAction, NewAuditEntry, Store, User, UserRole};

/// Creates a dashboard user of an account that is not deleted, an owner of
/// it, with `password` or, without one, a one-time password returned once,
/// which the user must change at their first sign-in.
pub async fn create(
    store: &Store,
    actor: &str,
    account_id: &str,
    email: &str,
    password: Option<String>,
) -> Result<CreatedUser, OperatorActionError> {
    let prepared = users::prepare_user(store, account_id, email, password, UserRole::Owner).await?;
    let audit = NewAuditEntry {
        actor: actor.to_owned(),
        action: AuditAction::UserCreate,
        target: prepared.user.id.clone(),
        detail: json!({ "account_id": account_id, "email": prepared.user.email }),
    };
    let user = store
        .operator()
        .create_user_audited(&prepared.user, &audit)
        .await?
        .ok_or_else(|| UserError::EmailTaken(prepared.user.email.clone()))?;
    Ok(CreatedUser {
        user,
        one_time_password: prepared.one_time_password,
    })
}

/// The user with this email (emails are kept lowercased).
async fn user_named(store: &Store, email: &str) -> Result<User, OperatorActionError> {
    let email = email.trim().to_lowercase();
    store
        .users()
        .by_email(&email)
        .await?
        .ok_or(OperatorActionError::UserNotFound(email))
}

/// Removes a dashboard user; its sessions end at once, and the API keys
/// they made in the dashboard are revoked (an owner removing a person in
/// the dashboard may keep them instead). Answers the user as it was. Unlike
/// an owner in the dashboard, the operator may remove an account's last
/// owner: that is how an account whose people have left is handed to new
/// ones (`user create` makes the new owner).
pub async fn remove(store: &Store, actor: &str, email: &str) -> Result<User, OperatorActionError> {
    let user = user_named(store, email).await?;
    let removed = store
        .operator()
        .remove_user_audited(&user, |revoked_key_ids| NewAuditEntry {
            actor: actor.to_owned(),
            action: AuditAction::UserRemove,
            target: user.id.clone(),
            detail: json!({ "account_id": user.account_id, "keys_revoked": revoked_key_ids }),
        })
        .await?;
    if removed.is_none() {
        return Err(OperatorActionError::UserNotFound(user.email));
    }
    Ok(user)
}

/// Ends every session of a dashboard user (signed in anywhere); the user
/// can sign in again. Answers the user and how many sessions were live.
pub async fn revoke_sessions(
    store: &Store,
    actor: &str,
    email: &str,
) -> Result<(User, u64), OperatorActionError> {
    let user = user_named(store, email).await?;
    let revoked = store
        .operator()
        .revoke_user_sessions_audited(&user.id, |revoked| NewAuditEntry {
            actor: actor.to_owned(),
            action: AuditAction::UserRevokeSessions,
            target: user.id.clone(),
            detail: json!({ "account_id": user.account_id, "sessions_revoked": revoked }),
        })
        .await?;
    Ok((user, revoked))
}
