//! Dashboard users and their sessions, and the changes an account's owners
//! make to its people (each with its audit row, in one transaction).

use std::time::Duration;

use super::accounts::{Account, AccountLimits, KEY_USE_RESOLUTION, NewAccount, caller_limits};
use super::database::WriteTransaction;
use super::operator::NewAuditEntry;
use super::{Store, StoreError, now_millis};

/// What a user may do in their account's dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserRole {
    /// Everything, the account's people included: inviting, changing
    /// roles, removing, and whether members manage keys and secrets.
    Owner,
    /// Everything but changing the account's people, and creating or
    /// revoking keys, changing their spend limits and reading or rotating
    /// the webhook secret unless the account's owners allow members to.
    Member,
}

impl UserRole {
    /// The name kept in the `role` column and sent by the dashboard's forms.
    pub fn as_str(self) -> &'static str {
        match self {
            UserRole::Owner => "owner",
            UserRole::Member => "member",
        }
    }

    /// The role a form names, if it names one.
    pub fn parse(text: &str) -> Option<UserRole> {
        match text {
            "owner" => Some(UserRole::Owner),
            "member" => Some(UserRole::Member),
            _ => None,
        }
    }

    fn from_stored(text: &str) -> Result<UserRole, StoreError> {
        UserRole::parse(text).ok_or_else(|| StoreError::Corrupt(format!("user role {text:?}")))
    }
}

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
    pub role: UserRole,
    /// The password was generated and shown to someone (a one-time
    /// password): the dashboard asks for a new one before anything else.
    pub must_change_password: bool,
    /// When the one-time password stops signing in (Unix ms); `None` for a
    /// password the user chose.
    pub one_time_password_expires_at: Option<i64>,
}

impl User {
    /// Whether the user's password is a one-time password that has
    /// expired at `now` (Unix ms): it no longer signs in.
    pub fn one_time_password_expired(&self, now: i64) -> bool {
        self.must_change_password
            && self
                .one_time_password_expires_at
                .is_some_and(|expires_at| expires_at <= now)
    }
}

database_row! {
    /// A user as stored.
    struct UserRow {
        id: String,
        account_id: String,
        email: String,
        password_hash: String,
        created_at: i64,
        role: String,
        must_change_password: bool,
        one_time_password_expires_at: Option<i64>,
    }
}

fn user_from_row(row: UserRow) -> Result<User, StoreError> {
    Ok(User {
        role: UserRole::from_stored(&row.role)?,
        id: row.id,
        account_id: row.account_id,
        email: row.email,
        password_hash: row.password_hash,
        created_at: row.created_at,
        must_change_password: row.must_change_password,
        one_time_password_expires_at: row.one_time_password_expires_at,
    })
}

/// Why a change to an account's people was not made. Nothing was changed
/// and no audit row was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeopleRefusal {
    /// The user asking is not (or no longer) an owner of the account.
    NotAnOwner,
    /// The account has no user with that id (another account's user
    /// included).
    UserNotFound,
    /// The change would leave the account without an owner.
    LastOwner,
    /// The email already has a user, in this account or another.
    EmailTaken,
}

/// What removing a person does with the API keys they made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysOfRemovedPerson {
    /// Revoked with the removal: whoever the person gave them to, or kept
    /// them for, is refused from then on.
    Revoke,
    /// Kept working, for programs of the account that use them.
    Keep,
}

/// A person removed, as they were, with the ids of the keys revoked with
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovedPerson {
    pub user: User,
    pub revoked_key_ids: Vec<String>,
}

/// Who changes an account's people: one of its users, named by id.
#[derive(Debug, Clone, Copy)]
pub struct PeopleActor<'a> {
    pub account_id: &'a str,
    pub user_id: &'a str,
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
    /// The user's `must_change_password`, read with the session so that
    /// the dashboard can hold them at the password page without a second
    /// query per request.
    pub must_change_password: bool,
}

/// A session row with its user's email and its account's limits: id, user,
/// email, account, CSRF token, last use, rate per second, burst,
/// concurrency, whether the user must change their password.
type SessionRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    bool,
);

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
                "INSERT INTO users (id, account_id, email, password_hash, created_at, role, \
                 must_change_password, one_time_password_expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (email) DO NOTHING",
            )
            .bind(&user.id)
            .bind(&user.account_id)
            .bind(&user.email)
            .bind(&user.password_hash)
            .bind(user.created_at)
            .bind(user.role.as_str())
            .bind(user.must_change_password)
            .bind(user.one_time_password_expires_at)
        )?;
        Ok(inserted == 1)
    }
}

/// The operations of `users` (see `Store::users`).
#[derive(Clone, Copy)]
pub struct Users<'store> {
    pub(super) store: &'store Store,
}

impl Users<'_> {
    /// Creates a user; `None` when the email is already taken.
    pub async fn create(self, user: &User) -> Result<Option<User>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::insert_user_in(&mut transaction, user).await? {
            return Ok(None);
        }
        transaction.commit().await?;
        Ok(Some(user.clone()))
    }

    /// Creates an account with no credit and its first user in one
    /// transaction; `None` (and no account) when the email is taken.
    pub async fn sign_up(
        self,
        account: NewAccount,
        user: &User,
    ) -> Result<Option<(Account, User)>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let created = Store::create_account_in(&mut transaction, &account).await?;
        // Dropping the transaction rolls the account back when the
        // email is taken.
        if !Store::insert_user_in(&mut transaction, user).await? {
            return Ok(None);
        }
        transaction.commit().await?;
        Ok(Some((created, user.clone())))
    }

    pub async fn by_email(self, email: &str) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as(statement!(
                "SELECT ",
                UserRow::COLUMNS,
                " FROM users WHERE email = $1"
            ))
            .bind(email)
        )?;
        row.map(user_from_row).transpose()
    }

    pub async fn by_id(self, user_id: &str) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as(statement!(
                "SELECT ",
                UserRow::COLUMNS,
                " FROM users WHERE id = $1"
            ))
            .bind(user_id)
        )?;
        row.map(user_from_row).transpose()
    }

    /// An account's users, oldest first.
    pub async fn account_users(self, account_id: &str) -> Result<Vec<User>, StoreError> {
        let rows: Vec<UserRow> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(statement!(
                "SELECT ",
                UserRow::COLUMNS,
                " FROM users WHERE account_id = $1 ORDER BY created_at, id"
            ))
            .bind(account_id)
        )?;
        rows.into_iter().map(user_from_row).collect()
    }

    pub async fn create_session(self, session: &NewSession) -> Result<(), StoreError> {
        let now = now_millis();
        // The user's sessions that ended (expired, or revoked a day
        // ago or more) go, so the table grows with active sessions
        // only. Sessions ended by idleness stay until their
        // absolute expiry (30 days after sign-in at most).
        execute_on_writer!(
            self.store,
            sqlx::query(
                "DELETE FROM sessions WHERE user_id = $1 \
                 AND (expires_at <= $2 OR revoked_at <= $3)",
            )
            .bind(&session.user_id)
            .bind(now)
            .bind(now - 24 * 60 * 60 * 1000)
        )?;
        execute_on_writer!(
            self.store,
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
        self,
        token_sha256: &str,
        idle_timeout: Duration,
    ) -> Result<Option<Session>, StoreError> {
        let now = now_millis();
        let row: Option<SessionRow> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as(
                "SELECT s.id, s.user_id, u.email, s.account_id, s.csrf_token, \
                 s.last_seen_at, a.rate_per_second, a.rate_burst, a.max_concurrent, \
                 u.must_change_password FROM sessions s JOIN users u ON u.id = s.user_id \
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
            must_change_password,
        )) = row
        else {
            return Ok(None);
        };
        // As for keys, the idle clock is moved on at most once per
        // resolution, so a busy session does not write on every call.
        if now - last_seen_at >= KEY_USE_RESOLUTION.as_millis() as i64 {
            execute_on_writer!(
                self.store,
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
            must_change_password,
        }))
    }

    /// Revokes a session; false when it was already revoked or unknown.
    pub async fn revoke_session(self, session_id: &str) -> Result<bool, StoreError> {
        let changed = execute_on_writer!(
            self.store,
            sqlx::query("UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_millis())
                .bind(session_id)
        )?;
        Ok(changed == 1)
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

/// A person's role and their account's choice for members, read by
/// `may_manage_keys_and_secrets`: the user, then the account.
const MAY_MANAGE_KEYS_AND_SECRETS: &str = "SELECT u.role, a.members_manage_keys_and_secrets \
     FROM users u JOIN accounts a ON a.id = u.account_id WHERE u.id = $1 AND u.account_id = $2";

fn may_manage_keys_and_secrets((role, members_may): (String, bool)) -> bool {
    role == UserRole::Owner.as_str() || members_may
}

impl Store {
    /// Locks the actor's account and answers whether the actor is one of
    /// its owners. The lock makes every change to one account's people
    /// wait for the one before it, on every node, so two owners demoting
    /// or removing each other at once cannot both pass the count of
    /// owners that follows the change.
    async fn actor_is_owner_in(
        transaction: &mut WriteTransaction,
        actor: PeopleActor<'_>,
    ) -> Result<bool, StoreError> {
        if Self::account_in(&mut *transaction, actor.account_id)
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let role: Option<String> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_scalar("SELECT role FROM users WHERE id = $1 AND account_id = $2")
                .bind(actor.user_id)
                .bind(actor.account_id)
        )?;
        Ok(role.as_deref() == Some(UserRole::Owner.as_str()))
    }

    /// A user of one account, inside the caller's transaction; another
    /// account's user is `None`, as an unknown one is.
    async fn account_user_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
        user_id: &str,
    ) -> Result<Option<User>, StoreError> {
        let row: Option<UserRow> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(statement!(
                "SELECT ",
                UserRow::COLUMNS,
                " FROM users WHERE id = $1 AND account_id = $2"
            ))
            .bind(user_id)
            .bind(account_id)
        )?;
        row.map(user_from_row).transpose()
    }

    /// What a change to one of the account's people starts with: the
    /// account locked (`actor_is_owner_in`), the actor one of its owners,
    /// and the user one of its people.
    async fn owners_user_in(
        transaction: &mut WriteTransaction,
        actor: PeopleActor<'_>,
        user_id: &str,
    ) -> Result<Result<User, PeopleRefusal>, StoreError> {
        if !Self::actor_is_owner_in(&mut *transaction, actor).await? {
            return Ok(Err(PeopleRefusal::NotAnOwner));
        }
        Ok(
            Self::account_user_in(transaction, actor.account_id, user_id)
                .await?
                .ok_or(PeopleRefusal::UserNotFound),
        )
    }

    async fn owner_count_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
    ) -> Result<i64, StoreError> {
        Ok(fetch_in_transaction!(
            transaction,
            fetch_one,
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE account_id = $1 AND role = $2")
                .bind(account_id)
                .bind(UserRole::Owner.as_str())
        )?)
    }

    /// Revokes the unrevoked keys of an account that a user made, inside
    /// the caller's transaction; their ids. The caller forgets its
    /// remembered callers after the commit.
    pub(super) async fn revoke_keys_made_by_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
        user_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let mut revoked: Vec<String> = fetch_in_transaction!(
            transaction,
            fetch_all,
            sqlx::query_scalar(
                "UPDATE api_keys SET revoked_at = $1 \
                 WHERE account_id = $2 AND created_by_user_id = $3 AND revoked_at IS NULL \
                 RETURNING id",
            )
            .bind(now_millis())
            .bind(account_id)
            .bind(user_id)
        )?;
        revoked.sort();
        Ok(revoked)
    }

    /// As `may_manage_keys_and_secrets`, inside the caller's transaction,
    /// with the account locked first (`actor_is_owner_in`), so that a
    /// change of the person's role or of the account's choice made at the
    /// same time is decided before or after this one, never beside it.
    pub(super) async fn may_manage_keys_and_secrets_in(
        transaction: &mut WriteTransaction,
        actor: PeopleActor<'_>,
    ) -> Result<bool, StoreError> {
        if Self::account_in(&mut *transaction, actor.account_id)
            .await?
            .is_none()
        {
            return Ok(false);
        }
        let row: Option<(String, bool)> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(MAY_MANAGE_KEYS_AND_SECRETS)
                .bind(actor.user_id)
                .bind(actor.account_id)
        )?;
        Ok(row.is_some_and(may_manage_keys_and_secrets))
    }
}

impl Users<'_> {
    /// Adds `user` to the actor's account, when the actor is one of its
    /// owners and the email is free.
    pub async fn invite_user_audited(
        self,
        actor: PeopleActor<'_>,
        user: &User,
        audit: &NewAuditEntry,
    ) -> Result<Result<User, PeopleRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::actor_is_owner_in(&mut transaction, actor).await? {
            return Ok(Err(PeopleRefusal::NotAnOwner));
        }
        if !Store::insert_user_in(&mut transaction, user).await? {
            return Ok(Err(PeopleRefusal::EmailTaken));
        }
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Ok(user.clone()))
    }

    /// Gives a user of the actor's account a role, when the actor is one
    /// of its owners and the account keeps an owner after it. Giving a
    /// user the role they have changes nothing and writes no audit row.
    pub async fn set_user_role_audited(
        self,
        actor: PeopleActor<'_>,
        user_id: &str,
        role: UserRole,
        audit: impl FnOnce(&User) -> NewAuditEntry,
    ) -> Result<Result<User, PeopleRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let user = match Store::owners_user_in(&mut transaction, actor, user_id).await? {
            Ok(user) => user,
            Err(refused) => return Ok(Err(refused)),
        };
        if user.role == role {
            return Ok(Ok(user));
        }
        execute_in_transaction!(
            &mut transaction,
            sqlx::query("UPDATE users SET role = $1 WHERE id = $2")
                .bind(role.as_str())
                .bind(user_id)
        )?;
        // Dropping the transaction rolls the change back.
        if Store::owner_count_in(&mut transaction, actor.account_id).await? == 0 {
            return Ok(Err(PeopleRefusal::LastOwner));
        }
        Store::record_audit_in(&mut transaction, &audit(&user)).await?;
        transaction.commit().await?;
        Ok(Ok(User { role, ..user }))
    }

    /// Removes a user of the actor's account and its sessions, and
    /// revokes the keys the user made unless `keys` keeps them, when the
    /// actor is one of its owners and the account keeps an owner after
    /// it. The audit row is made from the user and the keys revoked.
    pub async fn remove_account_user_audited(
        self,
        actor: PeopleActor<'_>,
        user_id: &str,
        keys: KeysOfRemovedPerson,
        audit: impl FnOnce(&User, &[String]) -> NewAuditEntry,
    ) -> Result<Result<RemovedPerson, PeopleRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let user = match Store::owners_user_in(&mut transaction, actor, user_id).await? {
            Ok(user) => user,
            Err(refused) => return Ok(Err(refused)),
        };
        Store::remove_user_in(&mut transaction, user_id).await?;
        // Dropping the transaction rolls the removal back.
        if Store::owner_count_in(&mut transaction, actor.account_id).await? == 0 {
            return Ok(Err(PeopleRefusal::LastOwner));
        }
        let revoked_key_ids = match keys {
            KeysOfRemovedPerson::Revoke => {
                Store::revoke_keys_made_by_in(&mut transaction, actor.account_id, user_id).await?
            }
            KeysOfRemovedPerson::Keep => Vec::new(),
        };
        Store::record_audit_in(&mut transaction, &audit(&user, &revoked_key_ids)).await?;
        transaction.commit().await?;
        if !revoked_key_ids.is_empty() {
            self.store.callers().forget_all();
        }
        Ok(Ok(RemovedPerson {
            user,
            revoked_key_ids,
        }))
    }

    /// Whether a person may create and revoke the account's keys, change
    /// their spend limits and read or rotate its webhook secret: an owner
    /// always, a member when the account's owners allow members to.
    pub async fn may_manage_keys_and_secrets(
        self,
        actor: PeopleActor<'_>,
    ) -> Result<bool, StoreError> {
        let row: Option<(String, bool)> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as(MAY_MANAGE_KEYS_AND_SECRETS)
                .bind(actor.user_id)
                .bind(actor.account_id)
        )?;
        Ok(row.is_some_and(may_manage_keys_and_secrets))
    }

    /// Whether the account's members may manage its keys and secrets.
    pub async fn members_manage_keys_and_secrets(
        self,
        account_id: &str,
    ) -> Result<bool, StoreError> {
        let allowed: Option<bool> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar(
                "SELECT members_manage_keys_and_secrets FROM accounts WHERE id = $1"
            )
            .bind(account_id)
        )?;
        Ok(allowed.unwrap_or(false))
    }

    /// Lets the account's members manage its keys and secrets, or stops
    /// them, when the actor is one of its owners. Setting what is already
    /// set changes nothing and writes no audit row.
    pub async fn set_members_manage_keys_and_secrets_audited(
        self,
        actor: PeopleActor<'_>,
        allowed: bool,
        audit: &NewAuditEntry,
    ) -> Result<Result<(), PeopleRefusal>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::actor_is_owner_in(&mut transaction, actor).await? {
            return Ok(Err(PeopleRefusal::NotAnOwner));
        }
        let changed = execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "UPDATE accounts SET members_manage_keys_and_secrets = $1 \
                 WHERE id = $2 AND members_manage_keys_and_secrets <> $1",
            )
            .bind(allowed)
            .bind(actor.account_id)
        )?;
        if changed == 0 {
            return Ok(Ok(()));
        }
        Store::record_audit_in(&mut transaction, audit).await?;
        transaction.commit().await?;
        Ok(Ok(()))
    }

    /// Replaces a user's password hash, if it is still `previous_hash`
    /// (the one the current password was verified against), clears
    /// `must_change_password` and revokes the user's other sessions, all
    /// with the audit row. Answers how many other sessions were live, or
    /// `None` (nothing changed) when the password changed meanwhile.
    pub async fn change_password_audited(
        self,
        user_id: &str,
        previous_hash: &str,
        new_hash: &str,
        kept_session_id: &str,
        audit: impl FnOnce(u64) -> NewAuditEntry,
    ) -> Result<Option<u64>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let changed = execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "UPDATE users SET password_hash = $1, must_change_password = $2, \
                 one_time_password_expires_at = NULL WHERE id = $3 AND password_hash = $4",
            )
            .bind(new_hash)
            .bind(false)
            .bind(user_id)
            .bind(previous_hash)
        )?;
        if changed != 1 {
            return Ok(None);
        }
        let revoked = execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "UPDATE sessions SET revoked_at = $1 \
                 WHERE user_id = $2 AND id <> $3 AND revoked_at IS NULL",
            )
            .bind(now_millis())
            .bind(user_id)
            .bind(kept_session_id)
        )?;
        Store::record_audit_in(&mut transaction, &audit(revoked)).await?;
        transaction.commit().await?;
        Ok(Some(revoked))
    }
}
