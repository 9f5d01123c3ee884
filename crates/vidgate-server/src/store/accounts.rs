//! Accounts, their limits and API keys, the authentication of a key, and
//! the pause state of models.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::AssertSqlSafe;
use vidgate_core::Micros;

use crate::spend_limits::SpendLimit;

use super::database::{RowLocking, WriteTransaction};
use super::ledger::Movement;
use super::{Store, StoreError, now_millis};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountLimits {
    pub requests_per_second: u32,
    pub burst: u32,
    pub max_concurrent: u32,
}

impl Default for AccountLimits {
    /// The limits of SPEC.md section 8.
    fn default() -> Self {
        AccountLimits {
            requests_per_second: 10,
            burst: 20,
            max_concurrent: 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: String,
    pub name: String,
    pub balance: Micros,
    pub held: Micros,
    pub captured: Micros,
    pub credited: Micros,
    /// What a payment system took back after the account had spent it
    /// (migration 0020); the money that next reaches the balance pays it
    /// first. The customer sees `balance - debt` as the balance.
    pub debt: Micros,
    pub limits: AccountLimits,
    pub webhook_secret: String,
    /// The secret before the last rotation, still used to sign deliveries
    /// (beside the current one) until `previous_webhook_secret_expires_at`.
    pub previous_webhook_secret: Option<String>,
    pub previous_webhook_secret_expires_at: Option<i64>,
    pub created_at: i64,
    /// When an operator deleted the account; its row stays as a tombstone.
    pub deleted_at: Option<i64>,
    /// The threshold below which the account is warned (migration 0023),
    /// if it set one.
    pub low_balance_alert: Option<LowBalanceAlert>,
}

/// An account's low-balance alert: the dashboard warns while the balance the
/// customer sees is below `threshold`, and the event `account.balance_low`
/// goes to `webhook_url` (if set) each time the balance falls below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowBalanceAlert {
    pub threshold: Micros,
    pub webhook_url: Option<String>,
    /// The balance is below the threshold and its event was written; the
    /// next one is written only after the balance went back up to the
    /// threshold.
    pub raised: bool,
}

impl Account {
    /// The balance the customer sees: what is spendable less the debt,
    /// negative while a debt is owed.
    pub fn shown_balance(&self) -> Micros {
        Micros(self.balance.0 - self.debt.0)
    }

    /// Whether the balance the customer sees is below the account's
    /// low-balance threshold, which the dashboard warns about.
    pub fn is_below_low_balance_threshold(&self) -> bool {
        self.low_balance_alert
            .as_ref()
            .is_some_and(|alert| self.shown_balance() < alert.threshold)
    }

    /// The secrets deliveries are signed with at `now`: the current one, and
    /// the previous one while its grace period after a rotation lasts.
    pub fn signing_secrets(&self, now: i64) -> Vec<String> {
        let mut secrets = vec![self.webhook_secret.clone()];
        if let (Some(previous), Some(expires_at)) = (
            &self.previous_webhook_secret,
            self.previous_webhook_secret_expires_at,
        ) && now < expires_at
        {
            secrets.push(previous.clone());
        }
        secrets
    }
}

pub struct NewAccount {
    pub id: String,
    pub name: String,
    pub initial_credit: Micros,
    pub webhook_secret: String,
}

pub struct NewApiKey {
    pub id: String,
    pub account_id: String,
    pub name: String,
    pub prefix: String,
    pub secret_sha256: String,
    /// The dashboard user who made the key; `None` when the operator or
    /// the first start made it. Removing that user can revoke it.
    pub created_by_user_id: Option<String>,
}

/// What a dashboard session's caller id starts with, before the session's id.
pub const SESSION_CALLER_PREFIX: &str = "session:";

/// The authenticated caller behind an API key or a dashboard session.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The API key's id, or `session:<session id>` for a signed-in dashboard
    /// session. It names the caller's rate-limit bucket and is recorded on
    /// the generations the caller submits.
    pub key_id: String,
    pub account_id: String,
    pub limits: AccountLimits,
}

/// An API key as the dashboard lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    /// Accurate to `KEY_USE_RESOLUTION`.
    pub last_used_at: Option<i64>,
    pub revoked_at: Option<i64>,
    /// At most this much per period (migration 0021).
    pub spend_limit: Option<SpendLimit>,
    /// The dashboard user who made it (migration 0027), who may since have
    /// been removed; `None` for a key the operator or the first start made.
    pub created_by_user_id: Option<String>,
}

/// An API key row: id, name, prefix, creation, last use, revocation, spend
/// limit amount and period, maker.
type ApiKeyRow = (
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

/// How often a key's or a session's last use is written: at most once per
/// this interval, so authenticated reads stay reads.
pub const KEY_USE_RESOLUTION: Duration = Duration::from_secs(60);

database_row! {
    pub(super) struct AccountRow {
        id: String,
        name: String,
        balance_micros: i64,
        held_micros: i64,
        captured_micros: i64,
        credited_micros: i64,
        debt_micros: i64,
        rate_per_second: i64,
        rate_burst: i64,
        max_concurrent: i64,
        webhook_secret: String,
        previous_webhook_secret: Option<String>,
        previous_webhook_secret_expires_at: Option<i64>,
        created_at: i64,
        deleted_at: Option<i64>,
        low_balance_threshold_micros: Option<i64>,
        low_balance_webhook_url: Option<String>,
        low_balance_alerted: bool,
    }
}

impl From<AccountRow> for Account {
    fn from(row: AccountRow) -> Self {
        Account {
            id: row.id,
            name: row.name,
            balance: Micros(row.balance_micros),
            held: Micros(row.held_micros),
            captured: Micros(row.captured_micros),
            credited: Micros(row.credited_micros),
            debt: Micros(row.debt_micros),
            limits: AccountLimits {
                requests_per_second: row.rate_per_second as u32,
                burst: row.rate_burst as u32,
                max_concurrent: row.max_concurrent as u32,
            },
            webhook_secret: row.webhook_secret,
            previous_webhook_secret: row.previous_webhook_secret,
            previous_webhook_secret_expires_at: row.previous_webhook_secret_expires_at,
            created_at: row.created_at,
            deleted_at: row.deleted_at,
            low_balance_alert: row
                .low_balance_threshold_micros
                .map(|threshold| LowBalanceAlert {
                    threshold: Micros(threshold),
                    webhook_url: row.low_balance_webhook_url,
                    raised: row.low_balance_alerted,
                }),
        }
    }
}

database_row! {
    /// The owner of an unrevoked API key, as authentication reads it.
    struct KeyOwnerRow {
        key_id: String,
        account_id: String,
        rate_per_second: i64,
        rate_burst: i64,
        max_concurrent: i64,
        last_used_at: Option<i64>,
    }
}

/// The owner of the unrevoked key with a secret digest, in a live account:
/// authentication when the caller cache has no fresh entry (a point read,
/// inline on SQLite).
const KEY_OWNER: &str = "SELECT k.id AS key_id, a.id AS account_id, a.rate_per_second, \
     a.rate_burst, a.max_concurrent, k.last_used_at \
     FROM api_keys k JOIN accounts a ON a.id = k.account_id \
     WHERE k.secret_sha256 = $1 AND k.revoked_at IS NULL AND a.deleted_at IS NULL";

pub(super) fn caller_limits(per_second: i64, burst: i64, max_concurrent: i64) -> AccountLimits {
    AccountLimits {
        requests_per_second: per_second as u32,
        burst: burst as u32,
        max_concurrent: max_concurrent as u32,
    }
}

impl Store {
    /// Inserts an account with the default limits and credits its
    /// initial credit, inside the caller's transaction.
    pub(super) async fn create_account_in(
        transaction: &mut WriteTransaction,
        account: &NewAccount,
    ) -> Result<Account, StoreError> {
        let defaults = AccountLimits::default();
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO accounts (id, name, rate_per_second, rate_burst, max_concurrent, \
                 webhook_secret, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&account.id)
            .bind(&account.name)
            .bind(defaults.requests_per_second as i64)
            .bind(defaults.burst as i64)
            .bind(defaults.max_concurrent as i64)
            .bind(&account.webhook_secret)
            .bind(now_millis())
        )?;
        Self::move_money(
            transaction,
            &account.id,
            None,
            Movement::Credit,
            account.initial_credit,
        )
        .await?;
        Self::account_in(transaction, &account.id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("account vanished after insert".into()))
    }

    /// Reads the account inside a write transaction and keeps it
    /// locked until the transaction ends, so that its balance and its
    /// count of active generations stay true until the hold is taken.
    pub(super) async fn account_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
    ) -> Result<Option<Account>, StoreError> {
        let statement = format!(
            "SELECT {columns} FROM accounts WHERE id = $1 {locking}",
            columns = AccountRow::COLUMNS,
            locking = transaction.row_locking(RowLocking::ForUpdate),
        );
        let row: Option<AccountRow> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(AssertSqlSafe(statement)).bind(account_id)
        )?;
        Ok(row.map(Account::from))
    }

    /// Sets an account's limits inside the caller's transaction and
    /// answers the account after it; `None` when there is no such account.
    /// The caller forgets its remembered callers after the commit, since
    /// they carry their account's limits.
    pub(super) async fn set_account_limits_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
        limits: AccountLimits,
    ) -> Result<Option<Account>, StoreError> {
        execute_in_transaction!(
            &mut *transaction,
            sqlx::query(
                "UPDATE accounts SET rate_per_second = $1, rate_burst = $2, \
                 max_concurrent = $3 WHERE id = $4",
            )
            .bind(limits.requests_per_second as i64)
            .bind(limits.burst as i64)
            .bind(limits.max_concurrent as i64)
            .bind(account_id)
        )?;
        Self::account_in(transaction, account_id).await
    }

    pub(super) async fn insert_api_key_in(
        transaction: &mut WriteTransaction,
        key: &NewApiKey,
    ) -> Result<(), StoreError> {
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO api_keys (id, account_id, name, prefix, secret_sha256, \
                 created_at, created_by_user_id) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(&key.id)
            .bind(&key.account_id)
            .bind(&key.name)
            .bind(&key.prefix)
            .bind(&key.secret_sha256)
            .bind(now_millis())
            .bind(&key.created_by_user_id)
        )?;
        Ok(())
    }

    /// Revokes a key inside the caller's transaction; false when no
    /// unrevoked key has that id. The caller forgets its remembered
    /// callers after the commit.
    pub(super) async fn revoke_api_key_in(
        transaction: &mut WriteTransaction,
        key_id: &str,
    ) -> Result<bool, StoreError> {
        let changed = execute_in_transaction!(
            transaction,
            sqlx::query("UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
                .bind(now_millis())
                .bind(key_id)
        )?;
        Ok(changed == 1)
    }

    pub(super) async fn set_model_paused_in(
        transaction: &mut WriteTransaction,
        model_id: &str,
        paused: bool,
    ) -> Result<(), StoreError> {
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO model_states (model_id, paused, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (model_id) DO UPDATE SET paused = excluded.paused, \
                 updated_at = excluded.updated_at",
            )
            .bind(model_id)
            .bind(paused)
            .bind(now_millis())
        )?;
        Ok(())
    }
}

/// A key's spend limit columns: the amount and the period, both or neither.
pub(super) type SpendLimitRow = (Option<i64>, Option<String>);

/// Reads a key's spend limit columns.
pub(super) const SPEND_LIMIT_OF_KEY: &str =
    "SELECT spend_limit_micros, spend_limit_period FROM api_keys WHERE id = $1";

pub(super) fn spend_limit_from_row((amount, period): SpendLimitRow) -> Option<SpendLimit> {
    Some(SpendLimit {
        amount: Micros(amount?),
        period: period?.parse().ok()?,
    })
}

impl Store {
    /// The key's spend limit inside a write transaction (a submit's).
    pub(super) async fn spend_limit_in(
        transaction: &mut WriteTransaction,
        key_id: &str,
    ) -> Result<Option<SpendLimit>, StoreError> {
        let row: Option<SpendLimitRow> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(SPEND_LIMIT_OF_KEY).bind(key_id)
        )?;
        Ok(row.and_then(spend_limit_from_row))
    }

    /// Sets or (with `None`) removes a key's spend limit, inside the
    /// operator's transaction; false when no such key exists.
    pub(super) async fn set_spend_limit_in(
        transaction: &mut WriteTransaction,
        key_id: &str,
        limit: Option<SpendLimit>,
    ) -> Result<bool, StoreError> {
        let changed = execute_in_transaction!(
            transaction,
            sqlx::query(
                "UPDATE api_keys SET spend_limit_micros = $2, spend_limit_period = $3 \
                 WHERE id = $1",
            )
            .bind(key_id)
            .bind(limit.map(|limit| limit.amount.0))
            .bind(limit.map(|limit| limit.period.as_str()))
        )?;
        Ok(changed == 1)
    }
}

/// The operations of `accounts` (see `Store::accounts`).
#[derive(Clone, Copy)]
pub struct Accounts<'store> {
    pub(super) store: &'store Store,
}

impl Accounts<'_> {
    pub async fn create(self, account: NewAccount) -> Result<Account, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let created = Store::create_account_in(&mut transaction, &account).await?;
        transaction.commit().await?;
        Ok(created)
    }

    pub async fn get(self, account_id: &str) -> Result<Option<Account>, StoreError> {
        let row: Option<AccountRow> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as(statement!(
                "SELECT ",
                AccountRow::COLUMNS,
                " FROM accounts WHERE id = $1"
            ))
            .bind(account_id)
        )?;
        Ok(row.map(Account::from))
    }

    pub async fn count(self) -> Result<i64, StoreError> {
        Ok(fetch_on_reader!(
            self.store,
            fetch_one,
            sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
        )?)
    }

    pub async fn create_api_key(self, key: NewApiKey) -> Result<(), StoreError> {
        let mut transaction = self.store.begin_write().await?;
        Store::insert_api_key_in(&mut transaction, &key).await?;
        transaction.commit().await?;
        Ok(())
    }

    /// The caller owning an unrevoked key with this secret digest; a caller
    /// found within the last `CALLER_CACHE_TTL` is answered from memory.
    pub async fn authenticate(self, secret_sha256: &str) -> Result<Option<Caller>, StoreError> {
        if let Some(caller) = self.store.callers().get(secret_sha256) {
            return Ok(Some(caller));
        }
        let ticket = self.store.callers().ticket();
        let row: Option<KeyOwnerRow> = self.store.point_read(KEY_OWNER, &[secret_sha256]).await?;
        // The last use is written only when the recorded one is
        // older than the resolution the dashboard shows, so most
        // authenticated requests do not write at all.
        let now = now_millis();
        if let Some(owner) = &row
            && owner
                .last_used_at
                .is_none_or(|last| now - last >= KEY_USE_RESOLUTION.as_millis() as i64)
        {
            execute_on_writer!(
                self.store,
                sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                    .bind(now)
                    .bind(&owner.key_id)
            )?;
        }
        let caller = row.map(|owner| Caller {
            limits: caller_limits(
                owner.rate_per_second,
                owner.rate_burst,
                owner.max_concurrent,
            ),
            key_id: owner.key_id,
            account_id: owner.account_id,
        });
        if let Some(caller) = &caller {
            self.store.callers().remember(ticket, secret_sha256, caller);
        }
        Ok(caller)
    }

    /// Of `caller_ids` (API key ids, and `session:<id>` for dashboard
    /// sessions), those whose key or session is still live (not revoked,
    /// a session not expired) in an account not deleted: the callers whose
    /// open waits and event streams may go on. A few hundred ids to a
    /// statement.
    pub async fn live_callers(self, caller_ids: &[String]) -> Result<HashSet<String>, StoreError> {
        /// Well under SQLite's and PostgreSQL's limits on bound values.
        const IDS_PER_STATEMENT: usize = 500;
        let (sessions, keys): (Vec<&str>, Vec<&str>) = caller_ids
            .iter()
            .map(String::as_str)
            .partition(|caller_id| caller_id.starts_with(SESSION_CALLER_PREFIX));
        let mut live = HashSet::new();
        for chunk in keys.chunks(IDS_PER_STATEMENT) {
            let rows: Vec<(String,)> = on_reader!(self.store, |reader| {
                let mut query = sqlx::QueryBuilder::new(
                    "SELECT k.id FROM api_keys k JOIN accounts a ON a.id = k.account_id \
                     WHERE k.revoked_at IS NULL AND a.deleted_at IS NULL AND k.id IN (",
                );
                let mut separated = query.separated(", ");
                for key_id in chunk {
                    separated.push_bind(*key_id);
                }
                query.push(")");
                query.build_query_as().fetch_all(reader).await
            })?;
            live.extend(rows.into_iter().map(|(key_id,)| key_id));
        }
        let now = now_millis();
        for chunk in sessions.chunks(IDS_PER_STATEMENT) {
            let rows: Vec<(String,)> = on_reader!(self.store, |reader| {
                let mut query = sqlx::QueryBuilder::new(
                    "SELECT s.id FROM sessions s JOIN accounts a ON a.id = s.account_id \
                     WHERE s.revoked_at IS NULL AND a.deleted_at IS NULL AND s.expires_at > ",
                );
                query.push_bind(now).push(" AND s.id IN (");
                let mut separated = query.separated(", ");
                for caller_id in chunk {
                    separated.push_bind(&caller_id[SESSION_CALLER_PREFIX.len()..]);
                }
                query.push(")");
                query.build_query_as().fetch_all(reader).await
            })?;
            live.extend(
                rows.into_iter()
                    .map(|(session_id,)| format!("{SESSION_CALLER_PREFIX}{session_id}")),
            );
        }
        Ok(live)
    }

    /// Changes after every revocation of a key on this node (an account's
    /// deletion among them).
    pub fn revocations(self) -> tokio::sync::watch::Receiver<u64> {
        self.store.callers().revocations()
    }

    /// The account's keys, newest first.
    pub async fn api_keys(self, account_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows: Vec<ApiKeyRow> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT id, name, prefix, created_at, last_used_at, revoked_at, \
                 spend_limit_micros, spend_limit_period, created_by_user_id \
                 FROM api_keys WHERE account_id = $1 ORDER BY created_at DESC, id DESC",
            )
            .bind(account_id)
        )?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    id,
                    name,
                    prefix,
                    created_at,
                    last_used_at,
                    revoked_at,
                    limit_amount,
                    limit_period,
                    created_by_user_id,
                )| ApiKeyRecord {
                    id,
                    name,
                    prefix,
                    created_at,
                    last_used_at,
                    revoked_at,
                    spend_limit: spend_limit_from_row((limit_amount, limit_period)),
                    created_by_user_id,
                },
            )
            .collect())
    }

    pub async fn is_model_paused(self, model_id: &str) -> Result<bool, StoreError> {
        let paused: Option<bool> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar("SELECT paused FROM model_states WHERE model_id = $1")
                .bind(model_id)
        )?;
        Ok(paused.unwrap_or(false))
    }
}
