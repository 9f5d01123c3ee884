//! Dashboard users and their sessions.

use std::time::Duration;

use super::accounts::{Account, AccountLimits, KEY_USE_RESOLUTION, NewAccount, caller_limits};
use super::database::WriteTransaction;
use super::{Store, StoreError, now_millis};

/// A person who signs in to an account's dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub account_id: String,
    /// Lowercased.
    pub email: String,
    /// Argon2id, in PHC string form.
    pub password_hash: String,
    pub created_at: i64,
}

pub struct NewSession {
    pub id: String,
    pub token_sha256: String,
    pub user_id: String,
    pub account_id: String,
    pub csrf_token: String,
    /// The session ends at this time however active it is (Unix ms).
    pub expires_at: i64,
}

/// A live dashboard session, with what its pages and API calls need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: String,
    pub user_id: String,
    pub email: String,
    pub account_id: String,
    pub csrf_token: String,
    pub limits: AccountLimits,
}

/// A session row with its user's email and its account's limits: id, user,
/// email, account, CSRF token, last use, rate per second, burst, concurrency.
type SessionRow = (String, String, String, String, String, i64, i64, i64, i64);

impl Store {
    /// Inserts a user unless the email is taken, inside the caller's
    /// transaction.
    pub(super) async fn insert_user_in(
        transaction: &mut WriteTransaction,
        user: &User,
    ) -> Result<bool, StoreError> {
        let inserted = execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO users (id, account_id, email, password_hash, created_at) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (email) DO NOTHING",
            )
            .bind(&user.id)
            .bind(&user.account_id)
            .bind(&user.email)
            .bind(&user.password_hash)
            .bind(user.created_at)
        )?;
        Ok(inserted == 1)
    }
}

impl Store {
    /// Creates a user; `None` when the email is already taken.
    pub async fn create_user(&self, user: &User) -> Result<Option<User>, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::insert_user_in(&mut transaction, user).await? {
            return Ok(None);
        }
        transaction.commit().await?;
        Ok(Some(user.clone()))
    }

    /// Creates an account with no credit and its first user in one
    /// transaction; `None` (and no account) when the email is taken.
    pub async fn sign_up(
        &self,
        account: NewAccount,
        user: &User,
    ) -> Result<Option<(Account, User)>, StoreError> {
        let mut transaction = self.begin_write().await?;
        let created = Self::create_account_in(&mut transaction, &account).await?;
        // Dropping the transaction rolls the account back when the
        // email is taken.
        if !Self::insert_user_in(&mut transaction, user).await? {
            return Ok(None);
        }
        transaction.commit().await?;
        Ok(Some((created, user.clone())))
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError> {
        let row: Option<(String, String, String, String, i64)> = fetch_on_reader!(
            self,
            fetch_optional,
            sqlx::query_as(
                "SELECT id, account_id, email, password_hash, created_at \
                 FROM users WHERE email = $1",
            )
            .bind(email)
        )?;
        Ok(
            row.map(|(id, account_id, email, password_hash, created_at)| User {
                id,
                account_id,
                email,
                password_hash,
                created_at,
            }),
        )
    }

    pub async fn create_session(&self, session: &NewSession) -> Result<(), StoreError> {
        let now = now_millis();
        // The user's sessions that ended (expired, or revoked a day
        // ago or more) go, so the table grows with active sessions
        // only. Sessions ended by idleness stay until their
        // absolute expiry (30 days after sign-in at most).
        execute_on_writer!(
            self,
            sqlx::query(
                "DELETE FROM sessions WHERE user_id = $1 \
                 AND (expires_at <= $2 OR revoked_at <= $3)",
            )
            .bind(&session.user_id)
            .bind(now)
            .bind(now - 24 * 60 * 60 * 1000)
        )?;
        execute_on_writer!(
            self,
            sqlx::query(
                "INSERT INTO sessions (id, token_sha256, user_id, account_id, csrf_token, \
                 created_at, last_seen_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $6, $7)",
            )
            .bind(&session.id)
            .bind(&session.token_sha256)
            .bind(&session.user_id)
            .bind(&session.account_id)
            .bind(&session.csrf_token)
            .bind(now)
            .bind(session.expires_at)
        )?;
        Ok(())
    }

    /// The live session with this token digest: not revoked, not past its
    /// absolute expiry, and used within `idle_timeout`. Records the use.
    pub async fn session(
        &self,
        token_sha256: &str,
        idle_timeout: Duration,
    ) -> Result<Option<Session>, StoreError> {
        let now = now_millis();
        let row: Option<SessionRow> = fetch_on_reader!(
            self,
            fetch_optional,
            sqlx::query_as(
                "SELECT s.id, s.user_id, u.email, s.account_id, s.csrf_token, \
                 s.last_seen_at, a.rate_per_second, a.rate_burst, a.max_concurrent \
                 FROM sessions s JOIN users u ON u.id = s.user_id \
                 JOIN accounts a ON a.id = s.account_id \
                 WHERE s.token_sha256 = $1 AND s.revoked_at IS NULL \
                 AND s.expires_at > $2 AND s.last_seen_at > $3",
            )
            .bind(token_sha256)
            .bind(now)
            .bind(now - idle_timeout.as_millis() as i64)
        )?;
        let Some((
            id,
            user_id,
            email,
            account_id,
            csrf_token,
            last_seen_at,
            per_second,
            burst,
            max_concurrent,
        )) = row
        else {
            return Ok(None);
        };
        // As for keys, the idle clock is moved on at most once per
        // resolution, so a busy session does not write on every call.
        if now - last_seen_at >= KEY_USE_RESOLUTION.as_millis() as i64 {
            execute_on_writer!(
                self,
                sqlx::query("UPDATE sessions SET last_seen_at = $1 WHERE id = $2")
                    .bind(now)
                    .bind(&id)
            )?;
        }
        Ok(Some(Session {
            id,
            user_id,
            email,
            account_id,
            csrf_token,
            limits: caller_limits(per_second, burst, max_concurrent),
        }))
    }

    /// Revokes a session; false when it was already revoked or unknown.
    pub async fn revoke_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let changed = execute_on_writer!(
            self,
            sqlx::query("UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_millis())
                .bind(session_id)
        )?;
        Ok(changed == 1)
    }

    /// Removes a user and its sessions in one transaction, so none of its
    /// cookies works afterwards; false when there is no such user.
    pub async fn remove_user(&self, user_id: &str) -> Result<bool, StoreError> {
        let mut transaction = self.begin_write().await?;
        let removed = Self::remove_user_in(&mut transaction, user_id).await?;
        transaction.commit().await?;
        Ok(removed)
    }
}

impl Store {
    /// Revokes every live session of a user (wherever its cookies are)
    /// inside the caller's transaction; how many were live.
    pub(super) async fn revoke_user_sessions_in(
        transaction: &mut WriteTransaction,
        user_id: &str,
    ) -> Result<u64, StoreError> {
        Ok(execute_in_transaction!(
            transaction,
            sqlx::query(
                "UPDATE sessions SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL",
            )
            .bind(now_millis())
            .bind(user_id)
        )?)
    }

    /// Removes a user and its sessions inside the caller's transaction;
    /// false when there is no such user.
    pub(super) async fn remove_user_in(
        transaction: &mut WriteTransaction,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        // Sessions refer to their user, so they go first.
        execute_in_transaction!(
            &mut *transaction,
            sqlx::query("DELETE FROM sessions WHERE user_id = $1").bind(user_id)
        )?;
        let removed = execute_in_transaction!(
            transaction,
            sqlx::query("DELETE FROM users WHERE id = $1").bind(user_id)
        )?;
        Ok(removed == 1)
    }
}
