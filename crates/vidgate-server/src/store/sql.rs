//! What the SQLite and PostgreSQL stores share: the rows, the SQL and the
//! bodies of every store operation.
//!
//! The two databases agree on almost every statement (both take `$1`
//! placeholders, `RETURNING` and `ON CONFLICT`), and sqlx's typed drivers do
//! not share one generic connection type without a wall of trait bounds, so
//! the operations are written once in `impl_sql_store!` and expanded for
//! each store. What differs is passed in: how a write transaction begins,
//! which pools read and write, the row-locking clauses PostgreSQL needs for
//! exact limits across nodes (SQLite's single writer makes them unnecessary),
//! and how a newly queued job is announced to other processes.

use std::str::FromStr;

use serde_json::Value;
use vidgate_core::{GenerationStatus, Micros};

use super::{
    Account, AccountLimits, AttemptRecord, ClaimedDelivery, DeliveryStatus, Generation, StoreError,
    WebhookAttempt, WebhookDelivery,
};

/// The columns of a generation, in the order `GenerationRow` expects.
macro_rules! generation_columns {
    () => {
        "id, account_id, model, endpoint, mode, status, input, output, error, price_micros, \
         official_micros, source, webhook_url, attempts, created_at, started_at, completed_at"
    };
}

macro_rules! account_columns {
    () => {
        "id, name, balance_micros, held_micros, captured_micros, credited_micros, \
         rate_per_second, rate_burst, max_concurrent, webhook_secret, \
         previous_webhook_secret, previous_webhook_secret_expires_at, created_at"
    };
}

/// The columns of a webhook delivery, in the order `DeliveryRow` expects.
macro_rules! delivery_columns {
    () => {
        "id, generation_id, account_id, event_type, url, status, attempts, next_attempt_at, \
         lease_owner, created_at, completed_at"
    };
}

#[derive(sqlx::FromRow)]
pub(super) struct GenerationRow {
    id: String,
    account_id: String,
    model: String,
    endpoint: String,
    mode: String,
    status: String,
    input: String,
    output: Option<String>,
    error: Option<String>,
    price_micros: i64,
    official_micros: i64,
    source: String,
    webhook_url: Option<String>,
    attempts: i64,
    created_at: i64,
    started_at: Option<i64>,
    completed_at: Option<i64>,
}

impl TryFrom<GenerationRow> for Generation {
    type Error = StoreError;

    fn try_from(row: GenerationRow) -> Result<Self, StoreError> {
        let parse_json = |text: &str| {
            serde_json::from_str::<Value>(text)
                .map_err(|error| StoreError::Corrupt(format!("generation {}: {error}", row.id)))
        };
        Ok(Generation {
            status: GenerationStatus::from_str(&row.status)
                .map_err(|error| StoreError::Corrupt(error.to_string()))?,
            input: parse_json(&row.input)?,
            output: row.output.as_deref().map(parse_json).transpose()?,
            error: row.error.as_deref().map(parse_json).transpose()?,
            price: Micros(row.price_micros),
            official_price: Micros(row.official_micros),
            id: row.id,
            account_id: row.account_id,
            model: row.model,
            endpoint: row.endpoint,
            mode: row.mode,
            source: row.source,
            webhook_url: row.webhook_url,
            attempts: row.attempts,
            created_at: row.created_at,
            started_at: row.started_at,
            completed_at: row.completed_at,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AccountRow {
    id: String,
    name: String,
    balance_micros: i64,
    held_micros: i64,
    captured_micros: i64,
    credited_micros: i64,
    rate_per_second: i64,
    rate_burst: i64,
    max_concurrent: i64,
    webhook_secret: String,
    previous_webhook_secret: Option<String>,
    previous_webhook_secret_expires_at: Option<i64>,
    created_at: i64,
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
            limits: AccountLimits {
                requests_per_second: row.rate_per_second as u32,
                burst: row.rate_burst as u32,
                max_concurrent: row.max_concurrent as u32,
            },
            webhook_secret: row.webhook_secret,
            previous_webhook_secret: row.previous_webhook_secret,
            previous_webhook_secret_expires_at: row.previous_webhook_secret_expires_at,
            created_at: row.created_at,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct DeliveryRow {
    pub(super) id: String,
    pub(super) generation_id: String,
    pub(super) account_id: String,
    event_type: String,
    url: String,
    status: String,
    attempts: i64,
    next_attempt_at: Option<i64>,
    lease_owner: Option<String>,
    created_at: i64,
    completed_at: Option<i64>,
}

impl DeliveryRow {
    /// The delivery for the log; `now` tells a live lease from one whose
    /// sender died.
    pub(super) fn into_delivery(self, now: i64) -> Result<WebhookDelivery, StoreError> {
        let status = DeliveryStatus::from_str(&self.status)?;
        Ok(WebhookDelivery {
            in_flight: status == DeliveryStatus::Pending
                && self.lease_owner.is_some()
                && self
                    .next_attempt_at
                    .is_some_and(|lease_end| lease_end > now),
            id: self.id,
            event_type: self.event_type,
            url: self.url,
            status,
            attempts: self.attempts,
            next_attempt_at: self.next_attempt_at,
            created_at: self.created_at,
            completed_at: self.completed_at,
            attempt_log: Vec::new(),
        })
    }

    pub(super) fn into_claimed(
        self,
        generation: Generation,
        signing_secrets: Vec<String>,
    ) -> ClaimedDelivery {
        ClaimedDelivery {
            id: self.id,
            event_type: self.event_type,
            url: self.url,
            attempts: self.attempts,
            generation,
            signing_secrets,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct AttemptRow {
    pub(super) delivery_id: String,
    attempt: i64,
    started_at: i64,
    duration_ms: i64,
    status_code: Option<i64>,
    error: Option<String>,
    response_body: Option<String>,
    next_attempt_at: Option<i64>,
}

impl From<AttemptRow> for WebhookAttempt {
    fn from(row: AttemptRow) -> Self {
        WebhookAttempt {
            attempt: row.attempt,
            record: AttemptRecord {
                started_at: row.started_at,
                duration_ms: row.duration_ms,
                status_code: row.status_code.map(|code| code as u16),
                error: row.error,
                response_body: row.response_body,
            },
            next_attempt_at: row.next_attempt_at,
        }
    }
}

/// The four ways money moves. Each is one ledger entry plus the matching
/// change of the account's running totals, always in the caller's transaction.
#[derive(Clone, Copy)]
pub(super) enum Movement {
    Credit,
    Hold,
    Capture,
    Release,
}

impl Movement {
    /// The ledger kind and the update of the account's totals.
    pub(super) fn statements(self) -> (&'static str, &'static str) {
        match self {
            Movement::Credit => (
                "credit",
                "UPDATE accounts SET balance_micros = balance_micros + $1, \
                 credited_micros = credited_micros + $1 WHERE id = $2",
            ),
            Movement::Hold => (
                "hold",
                "UPDATE accounts SET balance_micros = balance_micros - $1, \
                 held_micros = held_micros + $1 WHERE id = $2",
            ),
            Movement::Capture => (
                "capture",
                "UPDATE accounts SET held_micros = held_micros - $1, \
                 captured_micros = captured_micros + $1 WHERE id = $2",
            ),
            Movement::Release => (
                "release",
                "UPDATE accounts SET held_micros = held_micros - $1, \
                 balance_micros = balance_micros + $1 WHERE id = $2",
            ),
        }
    }
}

/// A ledger row: id, generation, kind, amount in micro-dollars, time.
pub(super) type LedgerRow = (i64, Option<String>, String, i64, i64);

pub(super) fn ledger_entry_from_row(
    (id, generation_id, kind, amount, created_at): LedgerRow,
) -> super::LedgerEntry {
    super::LedgerEntry {
        id,
        generation_id,
        kind,
        amount: Micros(amount),
        created_at,
    }
}

pub(super) fn caller_limits(per_second: i64, burst: i64, max_concurrent: i64) -> AccountLimits {
    AccountLimits {
        requests_per_second: per_second as u32,
        burst: burst as u32,
        max_concurrent: max_concurrent as u32,
    }
}

/// Implements `Store` for a store type with these inherent methods:
/// `begin_write(&self)` (a write transaction), `reader(&self)` and
/// `writer(&self)` (pools), and `announce_work(transaction, generation_id)`
/// (tell other processes a job was queued, when the transaction commits).
/// `lock_account` is appended to the account reads of write transactions, so
/// concurrent submits of one account take turns; `skip_locked` is appended to
/// the selects of the queue, so concurrent claimers and rescuers pass over
/// each other's rows instead of waiting or taking them twice.
macro_rules! impl_sql_store {
    (
        store: $store:ty,
        database: $database:ty,
        lock_account: $lock_account:literal,
        skip_locked: $skip_locked:literal $(,)?
    ) => {
        impl $store {
            async fn move_money(
                transaction: &mut sqlx::Transaction<'static, $database>,
                account_id: &str,
                generation_id: Option<&str>,
                movement: Movement,
                amount: Micros,
            ) -> Result<(), StoreError> {
                if amount == Micros::ZERO {
                    return Ok(());
                }
                let (kind, update) = movement.statements();
                sqlx::query(update)
                    .bind(amount.0)
                    .bind(account_id)
                    .execute(&mut **transaction)
                    .await?;
                sqlx::query(
                    "INSERT INTO ledger_entries \
                     (account_id, generation_id, kind, amount_micros, created_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(account_id)
                .bind(generation_id)
                .bind(kind)
                .bind(amount.0)
                .bind(now_millis())
                .execute(&mut **transaction)
                .await?;
                Ok(())
            }

            /// Inserts an account with the default limits and credits its
            /// initial credit, inside the caller's transaction.
            async fn create_account_in(
                transaction: &mut sqlx::Transaction<'static, $database>,
                account: &NewAccount,
            ) -> Result<Account, StoreError> {
                let defaults = AccountLimits::default();
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
                .execute(&mut **transaction)
                .await?;
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

            /// Inserts a user unless the email is taken, inside the caller's
            /// transaction.
            async fn insert_user_in(
                transaction: &mut sqlx::Transaction<'static, $database>,
                user: &User,
            ) -> Result<bool, StoreError> {
                let inserted = sqlx::query(
                    "INSERT INTO users (id, account_id, email, password_hash, created_at) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (email) DO NOTHING",
                )
                .bind(&user.id)
                .bind(&user.account_id)
                .bind(&user.email)
                .bind(&user.password_hash)
                .bind(user.created_at)
                .execute(&mut **transaction)
                .await?;
                Ok(inserted.rows_affected() == 1)
            }

            async fn generation_in(
                transaction: &mut sqlx::Transaction<'static, $database>,
                generation_id: &str,
            ) -> Result<Option<Generation>, StoreError> {
                let row: Option<GenerationRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    generation_columns!(),
                    " FROM generations WHERE id = $1"
                ))
                .bind(generation_id)
                .fetch_optional(&mut **transaction)
                .await?;
                row.map(Generation::try_from).transpose()
            }

            /// Reads the account inside a write transaction and keeps it
            /// locked until the transaction ends, so that its balance and its
            /// count of active generations stay true until the hold is taken.
            async fn account_in(
                transaction: &mut sqlx::Transaction<'static, $database>,
                account_id: &str,
            ) -> Result<Option<Account>, StoreError> {
                let row: Option<AccountRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    account_columns!(),
                    " FROM accounts WHERE id = $1 ",
                    $lock_account
                ))
                .bind(account_id)
                .fetch_optional(&mut **transaction)
                .await?;
                Ok(row.map(Account::from))
            }

            /// Fails an active generation and refunds its hold, inside the
            /// caller's transaction. The guard clause makes a lost race a no-op.
            async fn fail_in(
                transaction: &mut sqlx::Transaction<'static, $database>,
                generation_id: &str,
                worker: &str,
                failure: &FailureDetail,
            ) -> Result<bool, StoreError> {
                let error =
                    serde_json::json!({ "code": failure.code, "message": failure.message });
                let guard_sql = "UPDATE generations SET status = 'failed', error = $1, completed_at = $2, \
                     lease_owner = NULL, lease_expires_at = NULL \
                     WHERE id = $3 AND status = 'running' AND lease_owner = $4 \
                     RETURNING account_id, price_micros";
                let finished: Option<(String, i64)> = sqlx::query_as(guard_sql)
                    .bind(error.to_string())
                    .bind(now_millis())
                    .bind(generation_id)
                    .bind(worker)
                    .fetch_optional(&mut **transaction)
                    .await?;
                let Some((account_id, price)) = finished else {
                    return Ok(false);
                };
                Self::move_money(
                    transaction,
                    &account_id,
                    Some(generation_id),
                    Movement::Release,
                    Micros(price),
                )
                .await?;
                Self::enqueue_webhook_in(transaction, generation_id).await?;
                Ok(true)
            }

            /// Writes the webhook delivery of a generation that was just put
            /// in a final state, inside the transaction that did it, when the
            /// generation has a webhook URL. The event type follows from the
            /// final status (`generation.succeeded`, `.failed`, `.canceled`).
            async fn enqueue_webhook_in(
                transaction: &mut sqlx::Transaction<'static, $database>,
                generation_id: &str,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO webhook_deliveries (id, generation_id, account_id, event_type, \
                     url, status, next_attempt_at, created_at) \
                     SELECT $1, id, account_id, 'generation.' || status, webhook_url, 'pending', \
                     $2, $2 FROM generations WHERE id = $3 AND webhook_url IS NOT NULL",
                )
                .bind(crate::ids::new_webhook_message_id())
                .bind(now_millis())
                .bind(generation_id)
                .execute(&mut **transaction)
                .await?;
                Ok(())
            }
        }

        #[async_trait]
        impl Store for $store {
            async fn create_account(&self, account: NewAccount) -> Result<Account, StoreError> {
                let mut transaction = self.begin_write().await?;
                let created = Self::create_account_in(&mut transaction, &account).await?;
                transaction.commit().await?;
                Ok(created)
            }

            async fn account(&self, account_id: &str) -> Result<Option<Account>, StoreError> {
                let row: Option<AccountRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    account_columns!(),
                    " FROM accounts WHERE id = $1"
                ))
                .bind(account_id)
                .fetch_optional(self.reader())
                .await?;
                Ok(row.map(Account::from))
            }

            async fn count_accounts(&self) -> Result<i64, StoreError> {
                Ok(sqlx::query_scalar("SELECT COUNT(*) FROM accounts")
                    .fetch_one(self.reader())
                    .await?)
            }

            async fn credit_account(
                &self,
                account_id: &str,
                amount: Micros,
            ) -> Result<Option<Account>, StoreError> {
                let mut transaction = self.begin_write().await?;
                if Self::account_in(&mut transaction, account_id).await?.is_none() {
                    return Ok(None);
                }
                Self::move_money(&mut transaction, account_id, None, Movement::Credit, amount)
                    .await?;
                let account = Self::account_in(&mut transaction, account_id).await?;
                transaction.commit().await?;
                Ok(account)
            }

            async fn set_account_limits(
                &self,
                account_id: &str,
                limits: AccountLimits,
            ) -> Result<Option<Account>, StoreError> {
                let mut transaction = self.begin_write().await?;
                sqlx::query(
                    "UPDATE accounts SET rate_per_second = $1, rate_burst = $2, \
                     max_concurrent = $3 WHERE id = $4",
                )
                .bind(limits.requests_per_second as i64)
                .bind(limits.burst as i64)
                .bind(limits.max_concurrent as i64)
                .bind(account_id)
                .execute(&mut *transaction)
                .await?;
                let account = Self::account_in(&mut transaction, account_id).await?;
                transaction.commit().await?;
                Ok(account)
            }

            async fn ledger_entries(
                &self,
                account_id: &str,
            ) -> Result<Vec<LedgerEntry>, StoreError> {
                let rows: Vec<LedgerRow> = sqlx::query_as(
                    "SELECT id, generation_id, kind, amount_micros, created_at \
                     FROM ledger_entries WHERE account_id = $1 ORDER BY id",
                )
                .bind(account_id)
                .fetch_all(self.reader())
                .await?;
                Ok(rows.into_iter().map(ledger_entry_from_row).collect())
            }

            async fn create_api_key(&self, key: NewApiKey) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO api_keys (id, account_id, name, prefix, secret_sha256, \
                     created_at) VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&key.id)
                .bind(&key.account_id)
                .bind(&key.name)
                .bind(&key.prefix)
                .bind(&key.secret_sha256)
                .bind(now_millis())
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn revoke_api_key(&self, key_id: &str) -> Result<bool, StoreError> {
                let result = sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                )
                .bind(now_millis())
                .bind(key_id)
                .execute(self.writer())
                .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn authenticate(
                &self,
                secret_sha256: &str,
            ) -> Result<Option<Caller>, StoreError> {
                let row: Option<(String, String, i64, i64, i64, Option<i64>)> = sqlx::query_as(
                    "SELECT k.id, a.id, a.rate_per_second, a.rate_burst, a.max_concurrent, \
                     k.last_used_at \
                     FROM api_keys k JOIN accounts a ON a.id = k.account_id \
                     WHERE k.secret_sha256 = $1 AND k.revoked_at IS NULL",
                )
                .bind(secret_sha256)
                .fetch_optional(self.reader())
                .await?;
                // The last use is written only when the recorded one is
                // older than the resolution the dashboard shows, so most
                // authenticated requests do not write at all.
                let now = now_millis();
                if let Some((key_id, _, _, _, _, last_used_at)) = &row
                    && last_used_at.is_none_or(|last| {
                        now - last >= KEY_USE_RESOLUTION.as_millis() as i64
                    })
                {
                    sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(key_id)
                        .execute(self.writer())
                        .await?;
                }
                Ok(row.map(|(key_id, account_id, per_second, burst, max_concurrent, _)| Caller {
                    key_id,
                    account_id,
                    limits: caller_limits(per_second, burst, max_concurrent),
                }))
            }

            async fn set_model_paused(
                &self,
                model_id: &str,
                paused: bool,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO model_states (model_id, paused, updated_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (model_id) DO UPDATE SET paused = excluded.paused, \
                     updated_at = excluded.updated_at",
                )
                .bind(model_id)
                .bind(paused)
                .bind(now_millis())
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn create_upload(&self, upload: &NewUpload) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO uploads (id, account_id, relative_path, content_type, \
                     size_bytes, media, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(&upload.id)
                .bind(&upload.account_id)
                .bind(&upload.relative_path)
                .bind(&upload.content_type)
                .bind(upload.size_bytes)
                .bind(upload.media.to_string())
                .bind(upload.created_at)
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn upload_owner(&self, relative_path: &str) -> Result<Option<String>, StoreError> {
                Ok(sqlx::query_scalar("SELECT account_id FROM uploads WHERE relative_path = $1")
                    .bind(relative_path)
                    .fetch_optional(self.reader())
                    .await?)
            }

            async fn create_direct_upload(
                &self,
                upload: &NewDirectUpload,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO direct_uploads (id, account_id, relative_path, created_at) \
                     VALUES ($1, $2, $3, $4)",
                )
                .bind(&upload.id)
                .bind(&upload.account_id)
                .bind(&upload.relative_path)
                .bind(upload.created_at)
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn direct_upload(
                &self,
                relative_path: &str,
            ) -> Result<Option<DirectUpload>, StoreError> {
                let row: Option<(String, String)> = sqlx::query_as(
                    "SELECT id, account_id FROM direct_uploads WHERE relative_path = $1",
                )
                .bind(relative_path)
                .fetch_optional(self.reader())
                .await?;
                Ok(row.map(|(id, account_id)| DirectUpload { id, account_id }))
            }

            async fn record_direct_upload(&self, upload: &NewUpload) -> Result<(), StoreError> {
                sqlx::query(
                    "INSERT INTO uploads (id, account_id, relative_path, content_type, \
                     size_bytes, media, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (id) DO NOTHING",
                )
                .bind(&upload.id)
                .bind(&upload.account_id)
                .bind(&upload.relative_path)
                .bind(&upload.content_type)
                .bind(upload.size_bytes)
                .bind(upload.media.to_string())
                .bind(upload.created_at)
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn upload_content_type(
                &self,
                relative_path: &str,
            ) -> Result<Option<String>, StoreError> {
                Ok(sqlx::query_scalar("SELECT content_type FROM uploads WHERE relative_path = $1")
                    .bind(relative_path)
                    .fetch_optional(self.reader())
                    .await?)
            }

            async fn is_model_paused(&self, model_id: &str) -> Result<bool, StoreError> {
                let paused: Option<bool> =
                    sqlx::query_scalar("SELECT paused FROM model_states WHERE model_id = $1")
                        .bind(model_id)
                        .fetch_optional(self.reader())
                        .await?;
                Ok(paused.unwrap_or(false))
            }

            async fn submit_generation(
                &self,
                generation: NewGeneration,
            ) -> Result<SubmitOutcome, SubmitRefusal> {
                let mut transaction = self.begin_write().await?;
                let now = now_millis();
                // The account is locked first, so everything below (the
                // idempotent replay, the concurrency count and the balance)
                // is decided by one submit of this account at a time.
                let account = Self::account_in(&mut transaction, &generation.account_id)
                    .await?
                    .ok_or(SubmitRefusal::AccountNotFound)?;
                if let Some(idempotency) = &generation.idempotency {
                    // A key older than the window is forgotten so that it can
                    // be used again, as the Idempotency-Key convention expects.
                    sqlx::query(
                        "UPDATE generations SET idempotency_key = NULL \
                         WHERE account_id = $1 AND idempotency_key = $2 AND created_at < $3",
                    )
                    .bind(&generation.account_id)
                    .bind(&idempotency.key)
                    .bind(now - IDEMPOTENCY_WINDOW.as_millis() as i64)
                    .execute(&mut *transaction)
                    .await
                    .map_err(StoreError::from)?;
                    let earlier: Option<(String, Option<String>)> = sqlx::query_as(
                        "SELECT id, request_sha256 FROM generations \
                         WHERE account_id = $1 AND idempotency_key = $2",
                    )
                    .bind(&generation.account_id)
                    .bind(&idempotency.key)
                    .fetch_optional(&mut *transaction)
                    .await
                    .map_err(StoreError::from)?;
                    if let Some((earlier_id, earlier_digest)) = earlier {
                        if earlier_digest.as_deref() != Some(idempotency.request_sha256.as_str()) {
                            return Err(SubmitRefusal::IdempotencyMismatch);
                        }
                        let original = Self::generation_in(&mut transaction, &earlier_id)
                            .await?
                            .ok_or_else(|| {
                                StoreError::Corrupt("replayed generation vanished".into())
                            })?;
                        return Ok(SubmitOutcome::Replayed(original));
                    }
                }

                let active: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM generations \
                     WHERE account_id = $1 AND status IN ('queued', 'running')",
                )
                .bind(&generation.account_id)
                .fetch_one(&mut *transaction)
                .await
                .map_err(StoreError::from)?;
                let limit = account.limits.max_concurrent as i64;
                if active >= limit {
                    return Err(SubmitRefusal::ConcurrencyLimit { limit });
                }
                if account.balance < generation.price {
                    return Err(SubmitRefusal::InsufficientBalance {
                        balance: account.balance,
                        price: generation.price,
                    });
                }
                let (idempotency_key, request_sha256) = match &generation.idempotency {
                    Some(idempotency) => (
                        Some(idempotency.key.as_str()),
                        Some(idempotency.request_sha256.as_str()),
                    ),
                    None => (None, None),
                };
                sqlx::query(
                    "INSERT INTO generations (id, account_id, api_key_id, model, endpoint, mode, \
                     status, input, price_micros, official_micros, source, webhook_url, \
                     idempotency_key, request_sha256, max_attempts, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9, 'api', $10, $11, \
                     $12, $13, $14)",
                )
                .bind(&generation.id)
                .bind(&generation.account_id)
                .bind(&generation.api_key_id)
                .bind(&generation.model)
                .bind(&generation.endpoint)
                .bind(&generation.mode)
                .bind(generation.input.to_string())
                .bind(generation.price.0)
                .bind(generation.official_price.0)
                .bind(&generation.webhook_url)
                .bind(idempotency_key)
                .bind(request_sha256)
                .bind(generation.max_attempts)
                .bind(now)
                .execute(&mut *transaction)
                .await
                .map_err(StoreError::from)?;
                Self::move_money(
                    &mut transaction,
                    &generation.account_id,
                    Some(&generation.id),
                    Movement::Hold,
                    generation.price,
                )
                .await?;
                Self::announce_work(&mut transaction, &generation.id).await?;
                let created = Self::generation_in(&mut transaction, &generation.id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt("generation vanished after insert".into()))?;
                transaction.commit().await.map_err(StoreError::from)?;
                Ok(SubmitOutcome::Created(created))
            }

            async fn generation(
                &self,
                account_id: &str,
                generation_id: &str,
            ) -> Result<Option<Generation>, StoreError> {
                let row: Option<GenerationRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    generation_columns!(),
                    " FROM generations WHERE id = $1 AND account_id = $2"
                ))
                .bind(generation_id)
                .bind(account_id)
                .fetch_optional(self.reader())
                .await?;
                row.map(Generation::try_from).transpose()
            }

            async fn list_generations(
                &self,
                account_id: &str,
                filter: &ListFilter,
            ) -> Result<Vec<Generation>, StoreError> {
                let (before_created, before_id) = match &filter.before {
                    Some((created_at, id)) => (Some(*created_at), Some(id.as_str())),
                    None => (None, None),
                };
                // The casts give PostgreSQL a type for parameters that may be
                // NULL; SQLite accepts them unchanged.
                let rows: Vec<GenerationRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    generation_columns!(),
                    " FROM generations WHERE account_id = $1 \
                      AND (CAST($2 AS TEXT) IS NULL OR status = $2) \
                      AND (CAST($3 AS TEXT) IS NULL OR model = $3) \
                      AND (CAST($4 AS BIGINT) IS NULL OR created_at < $4 \
                           OR (created_at = $4 AND id < $5)) \
                      ORDER BY created_at DESC, id DESC LIMIT $6"
                ))
                .bind(account_id)
                .bind(filter.status.map(GenerationStatus::as_str))
                .bind(filter.model.as_deref())
                .bind(before_created)
                .bind(before_id)
                .bind(filter.limit as i64)
                .fetch_all(self.reader())
                .await?;
                rows.into_iter().map(Generation::try_from).collect()
            }

            async fn cancel_generation(
                &self,
                account_id: &str,
                generation_id: &str,
            ) -> Result<CancelOutcome, StoreError> {
                let mut transaction = self.begin_write().await?;
                // The update decides: a worker that claimed the job a moment
                // ago (on any node) makes it match nothing, and the job is
                // reported as it now is instead of being refunded.
                let canceled: Option<i64> = sqlx::query_scalar(
                    "UPDATE generations SET status = 'canceled', completed_at = $1 \
                     WHERE id = $2 AND account_id = $3 AND status = 'queued' \
                     RETURNING price_micros",
                )
                .bind(now_millis())
                .bind(generation_id)
                .bind(account_id)
                .fetch_optional(&mut *transaction)
                .await?;
                let current = Self::generation_in(&mut transaction, generation_id).await?;
                let Some(current) = current.filter(|found| found.account_id == account_id) else {
                    return Ok(CancelOutcome::NotFound);
                };
                let Some(price) = canceled else {
                    return Ok(CancelOutcome::Refused(current.status));
                };
                Self::move_money(
                    &mut transaction,
                    account_id,
                    Some(generation_id),
                    Movement::Release,
                    Micros(price),
                )
                .await?;
                Self::enqueue_webhook_in(&mut transaction, generation_id).await?;
                transaction.commit().await?;
                Ok(CancelOutcome::Canceled(Box::new(current)))
            }

            async fn claim_next(
                &self,
                worker: &str,
                lease: Duration,
            ) -> Result<Option<Generation>, StoreError> {
                let now = now_millis();
                // One statement: the oldest queued row is locked (rows other
                // claimers hold are skipped) and taken in the same step.
                let row: Option<GenerationRow> = sqlx::query_as(concat!(
                    "UPDATE generations SET status = 'running', attempts = attempts + 1, \
                     lease_owner = $1, lease_expires_at = $2, started_at = $3 \
                     WHERE status = 'queued' AND id = \
                       (SELECT id FROM generations WHERE status = 'queued' \
                        ORDER BY created_at, id LIMIT 1 ",
                    $skip_locked,
                    ") RETURNING ",
                    generation_columns!()
                ))
                .bind(worker)
                .bind(now + lease.as_millis() as i64)
                .bind(now)
                .fetch_optional(self.writer())
                .await?;
                row.map(Generation::try_from).transpose()
            }

            async fn extend_lease(
                &self,
                generation_id: &str,
                worker: &str,
                lease: Duration,
            ) -> Result<bool, StoreError> {
                let result = sqlx::query(
                    "UPDATE generations SET lease_expires_at = $1 \
                     WHERE id = $2 AND status = 'running' AND lease_owner = $3",
                )
                .bind(now_millis() + lease.as_millis() as i64)
                .bind(generation_id)
                .bind(worker)
                .execute(self.writer())
                .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn finish_succeeded(
                &self,
                generation_id: &str,
                worker: &str,
                output: Value,
            ) -> Result<bool, StoreError> {
                let mut transaction = self.begin_write().await?;
                let finished: Option<(String, i64)> = sqlx::query_as(
                    "UPDATE generations SET status = 'succeeded', output = $1, completed_at = $2, \
                     lease_owner = NULL, lease_expires_at = NULL \
                     WHERE id = $3 AND status = 'running' AND lease_owner = $4 \
                     RETURNING account_id, price_micros",
                )
                .bind(output.to_string())
                .bind(now_millis())
                .bind(generation_id)
                .bind(worker)
                .fetch_optional(&mut *transaction)
                .await?;
                let Some((account_id, price)) = finished else {
                    return Ok(false);
                };
                Self::move_money(
                    &mut transaction,
                    &account_id,
                    Some(generation_id),
                    Movement::Capture,
                    Micros(price),
                )
                .await?;
                Self::enqueue_webhook_in(&mut transaction, generation_id).await?;
                transaction.commit().await?;
                Ok(true)
            }

            async fn finish_failed(
                &self,
                generation_id: &str,
                worker: &str,
                failure: FailureDetail,
            ) -> Result<bool, StoreError> {
                let mut transaction = self.begin_write().await?;
                let failed =
                    Self::fail_in(&mut transaction, generation_id, worker, &failure).await?;
                transaction.commit().await?;
                Ok(failed)
            }

            async fn release_to_queue(
                &self,
                generation_id: &str,
                worker: &str,
            ) -> Result<bool, StoreError> {
                let mut transaction = self.begin_write().await?;
                let result = sqlx::query(
                    "UPDATE generations SET status = 'queued', attempts = attempts - 1, \
                     lease_owner = NULL, lease_expires_at = NULL, started_at = NULL \
                     WHERE id = $1 AND status = 'running' AND lease_owner = $2",
                )
                .bind(generation_id)
                .bind(worker)
                .execute(&mut *transaction)
                .await?;
                let released = result.rows_affected() == 1;
                if released {
                    Self::announce_work(&mut transaction, generation_id).await?;
                }
                transaction.commit().await?;
                Ok(released)
            }

            async fn rescue_expired_leases(&self) -> Result<RescueReport, StoreError> {
                let mut transaction = self.begin_write().await?;
                let now = now_millis();
                // Ordered by account so that two rescuers on different nodes
                // lock accounts in the same order and cannot deadlock.
                let expired: Vec<(String, String, i64, i64)> = sqlx::query_as(concat!(
                    "SELECT id, lease_owner, attempts, max_attempts FROM generations \
                     WHERE status = 'running' AND lease_expires_at < $1 \
                     ORDER BY account_id, id ",
                    $skip_locked
                ))
                .bind(now)
                .fetch_all(&mut *transaction)
                .await?;
                let mut report = RescueReport::default();
                for (generation_id, owner, attempts, max_attempts) in expired {
                    if attempts < max_attempts {
                        let requeued = sqlx::query(
                            "UPDATE generations SET status = 'queued', lease_owner = NULL, \
                             lease_expires_at = NULL, started_at = NULL \
                             WHERE id = $1 AND status = 'running' AND lease_owner = $2",
                        )
                        .bind(&generation_id)
                        .bind(&owner)
                        .execute(&mut *transaction)
                        .await?;
                        if requeued.rows_affected() == 1 {
                            Self::announce_work(&mut transaction, &generation_id).await?;
                            report.requeued.push(generation_id);
                        }
                    } else {
                        let failure = FailureDetail {
                            code: "worker_lost".into(),
                            message: format!(
                                "the job was interrupted {attempts} times and will not be retried"
                            ),
                        };
                        if Self::fail_in(&mut transaction, &generation_id, &owner, &failure).await? {
                            report.failed.push(generation_id);
                        }
                    }
                }
                transaction.commit().await?;
                Ok(report)
            }

            async fn claim_webhook_delivery(
                &self,
                sender: &str,
                lease: Duration,
            ) -> Result<Option<ClaimedDelivery>, StoreError> {
                let now = now_millis();
                // One statement, as for jobs: the delivery due longest is
                // locked (rows other senders hold are skipped) and taken by
                // moving its due time to the end of the lease, so no other
                // sender sees it as due until the lease has passed.
                let claimed: Option<DeliveryRow> = sqlx::query_as(concat!(
                    "UPDATE webhook_deliveries SET lease_owner = $1, next_attempt_at = $2 \
                     WHERE status = 'pending' AND next_attempt_at <= $3 AND id = \
                       (SELECT id FROM webhook_deliveries \
                        WHERE status = 'pending' AND next_attempt_at <= $3 \
                        ORDER BY next_attempt_at, id LIMIT 1 ",
                    $skip_locked,
                    ") RETURNING ",
                    delivery_columns!()
                ))
                .bind(sender)
                .bind(now + lease.as_millis() as i64)
                .bind(now)
                .fetch_optional(self.writer())
                .await?;
                let Some(claimed) = claimed else {
                    return Ok(None);
                };
                // A final generation no longer changes, so reading it after
                // the claim reads what the event is about.
                let generation: GenerationRow = sqlx::query_as(concat!(
                    "SELECT ",
                    generation_columns!(),
                    " FROM generations WHERE id = $1"
                ))
                .bind(&claimed.generation_id)
                .fetch_one(self.reader())
                .await?;
                let account: AccountRow = sqlx::query_as(concat!(
                    "SELECT ",
                    account_columns!(),
                    " FROM accounts WHERE id = $1"
                ))
                .bind(&claimed.account_id)
                .fetch_one(self.reader())
                .await?;
                let signing_secrets = Account::from(account).signing_secrets(now);
                Ok(Some(claimed.into_claimed(
                    Generation::try_from(generation)?,
                    signing_secrets,
                )))
            }

            async fn record_webhook_attempt(
                &self,
                delivery_id: &str,
                sender: &str,
                attempt: &AttemptRecord,
                outcome: AttemptOutcome,
            ) -> Result<bool, StoreError> {
                let (status, next_attempt_at, completed_at) = match outcome {
                    AttemptOutcome::Delivered => {
                        (DeliveryStatus::Delivered, None, Some(now_millis()))
                    }
                    AttemptOutcome::RetryAt(due) => (DeliveryStatus::Pending, Some(due), None),
                    AttemptOutcome::Failed => (DeliveryStatus::Failed, None, Some(now_millis())),
                };
                let mut transaction = self.begin_write().await?;
                // Guarded by the lease: a sender that took longer than its
                // lease, while another sender took the delivery over, records
                // nothing.
                let attempt_number: Option<i64> = sqlx::query_scalar(
                    "UPDATE webhook_deliveries SET attempts = attempts + 1, status = $1, \
                     next_attempt_at = $2, completed_at = $3, lease_owner = NULL \
                     WHERE id = $4 AND status = 'pending' AND lease_owner = $5 \
                     RETURNING attempts",
                )
                .bind(status.as_str())
                .bind(next_attempt_at)
                .bind(completed_at)
                .bind(delivery_id)
                .bind(sender)
                .fetch_optional(&mut *transaction)
                .await?;
                let Some(attempt_number) = attempt_number else {
                    return Ok(false);
                };
                sqlx::query(
                    "INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, \
                     status_code, error, response_body, next_attempt_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(delivery_id)
                .bind(attempt_number)
                .bind(attempt.started_at)
                .bind(attempt.duration_ms)
                .bind(attempt.status_code.map(i64::from))
                .bind(&attempt.error)
                .bind(&attempt.response_body)
                .bind(next_attempt_at)
                .execute(&mut *transaction)
                .await?;
                transaction.commit().await?;
                Ok(true)
            }

            async fn webhook_deliveries(
                &self,
                account_id: &str,
                generation_id: &str,
            ) -> Result<Vec<WebhookDelivery>, StoreError> {
                let now = now_millis();
                let rows: Vec<DeliveryRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    delivery_columns!(),
                    " FROM webhook_deliveries WHERE generation_id = $1 AND account_id = $2 \
                      ORDER BY created_at, id"
                ))
                .bind(generation_id)
                .bind(account_id)
                .fetch_all(self.reader())
                .await?;
                let attempts: Vec<AttemptRow> = sqlx::query_as(
                    "SELECT a.delivery_id, a.attempt, a.started_at, a.duration_ms, \
                     a.status_code, a.error, a.response_body, a.next_attempt_at \
                     FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id \
                     WHERE d.generation_id = $1 AND d.account_id = $2 ORDER BY a.id",
                )
                .bind(generation_id)
                .bind(account_id)
                .fetch_all(self.reader())
                .await?;
                let mut deliveries = rows
                    .into_iter()
                    .map(|row| row.into_delivery(now))
                    .collect::<Result<Vec<_>, _>>()?;
                for attempt in attempts {
                    if let Some(delivery) = deliveries
                        .iter_mut()
                        .find(|delivery| delivery.id == attempt.delivery_id)
                    {
                        delivery.attempt_log.push(WebhookAttempt::from(attempt));
                    }
                }
                Ok(deliveries)
            }

            async fn retry_webhook_delivery(
                &self,
                account_id: &str,
                generation_id: &str,
                delivery_id: &str,
            ) -> Result<DeliveryRetryOutcome, StoreError> {
                let now = now_millis();
                let mut transaction = self.begin_write().await?;
                // A delivery a live sender holds is left alone: the attempt
                // under way is the re-send asked for. A lease that ran out
                // (its sender died) is cleared.
                let scheduled = sqlx::query(
                    "UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = $1, \
                     completed_at = NULL, lease_owner = NULL \
                     WHERE id = $2 AND generation_id = $3 AND account_id = $4 \
                     AND NOT (status = 'pending' AND lease_owner IS NOT NULL \
                              AND next_attempt_at > $1)",
                )
                .bind(now)
                .bind(delivery_id)
                .bind(generation_id)
                .bind(account_id)
                .execute(&mut *transaction)
                .await?;
                if scheduled.rows_affected() == 1 {
                    transaction.commit().await?;
                    return Ok(DeliveryRetryOutcome::Scheduled);
                }
                let exists: Option<String> = sqlx::query_scalar(
                    "SELECT id FROM webhook_deliveries \
                     WHERE id = $1 AND generation_id = $2 AND account_id = $3",
                )
                .bind(delivery_id)
                .bind(generation_id)
                .bind(account_id)
                .fetch_optional(&mut *transaction)
                .await?;
                Ok(match exists {
                    Some(_) => DeliveryRetryOutcome::InFlight,
                    None => DeliveryRetryOutcome::NotFound,
                })
            }

            async fn rotate_webhook_secret(
                &self,
                account_id: &str,
                new_secret: &str,
                previous_valid_for: Duration,
            ) -> Result<Option<Account>, StoreError> {
                let mut transaction = self.begin_write().await?;
                // The right-hand sides read the row as it was, so the
                // current secret becomes the previous one.
                sqlx::query(
                    "UPDATE accounts SET previous_webhook_secret = webhook_secret, \
                     previous_webhook_secret_expires_at = $1, webhook_secret = $2 \
                     WHERE id = $3",
                )
                .bind(now_millis() + previous_valid_for.as_millis() as i64)
                .bind(new_secret)
                .bind(account_id)
                .execute(&mut *transaction)
                .await?;
                let account = Self::account_in(&mut transaction, account_id).await?;
                transaction.commit().await?;
                Ok(account)
            }

            async fn create_user(&self, user: &User) -> Result<Option<User>, StoreError> {
                let mut transaction = self.begin_write().await?;
                if !Self::insert_user_in(&mut transaction, user).await? {
                    return Ok(None);
                }
                transaction.commit().await?;
                Ok(Some(user.clone()))
            }

            async fn sign_up(
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

            async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError> {
                let row: Option<(String, String, String, String, i64)> = sqlx::query_as(
                    "SELECT id, account_id, email, password_hash, created_at \
                     FROM users WHERE email = $1",
                )
                .bind(email)
                .fetch_optional(self.reader())
                .await?;
                Ok(row.map(|(id, account_id, email, password_hash, created_at)| User {
                    id,
                    account_id,
                    email,
                    password_hash,
                    created_at,
                }))
            }

            async fn create_session(&self, session: &NewSession) -> Result<(), StoreError> {
                let now = now_millis();
                // The user's sessions that ended (expired, or revoked a day
                // ago or more) go, so the table grows with active sessions
                // only. Sessions ended by idleness stay until their
                // absolute expiry (30 days after sign-in at most).
                sqlx::query(
                    "DELETE FROM sessions WHERE user_id = $1 \
                     AND (expires_at <= $2 OR revoked_at <= $3)",
                )
                .bind(&session.user_id)
                .bind(now)
                .bind(now - 24 * 60 * 60 * 1000)
                .execute(self.writer())
                .await?;
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
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn session(
                &self,
                token_sha256: &str,
                idle_timeout: Duration,
            ) -> Result<Option<Session>, StoreError> {
                let now = now_millis();
                #[allow(clippy::type_complexity)]
                let row: Option<(String, String, String, String, String, i64, i64, i64, i64)> =
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
                    .fetch_optional(self.reader())
                    .await?;
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
                    sqlx::query("UPDATE sessions SET last_seen_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(&id)
                        .execute(self.writer())
                        .await?;
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

            async fn revoke_session(&self, session_id: &str) -> Result<bool, StoreError> {
                let result = sqlx::query(
                    "UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
                )
                .bind(now_millis())
                .bind(session_id)
                .execute(self.writer())
                .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn api_keys(&self, account_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError> {
                #[allow(clippy::type_complexity)]
                let rows: Vec<(String, String, String, i64, Option<i64>, Option<i64>)> =
                    sqlx::query_as(
                        "SELECT id, name, prefix, created_at, last_used_at, revoked_at \
                         FROM api_keys WHERE account_id = $1 ORDER BY created_at DESC, id DESC",
                    )
                    .bind(account_id)
                    .fetch_all(self.reader())
                    .await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(id, name, prefix, created_at, last_used_at, revoked_at)| ApiKeyRecord {
                            id,
                            name,
                            prefix,
                            created_at,
                            last_used_at,
                            revoked_at,
                        },
                    )
                    .collect())
            }

            async fn revoke_account_api_key(
                &self,
                account_id: &str,
                key_id: &str,
            ) -> Result<bool, StoreError> {
                let result = sqlx::query(
                    "UPDATE api_keys SET revoked_at = $1 \
                     WHERE id = $2 AND account_id = $3 AND revoked_at IS NULL",
                )
                .bind(now_millis())
                .bind(key_id)
                .bind(account_id)
                .execute(self.writer())
                .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn recent_ledger_entries(
                &self,
                account_id: &str,
                limit: u32,
            ) -> Result<Vec<LedgerEntry>, StoreError> {
                let rows: Vec<LedgerRow> = sqlx::query_as(
                    "SELECT id, generation_id, kind, amount_micros, created_at \
                     FROM ledger_entries WHERE account_id = $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(account_id)
                .bind(limit as i64)
                .fetch_all(self.reader())
                .await?;
                Ok(rows.into_iter().map(ledger_entry_from_row).collect())
            }

            async fn daily_spend(
                &self,
                account_id: &str,
                since: i64,
            ) -> Result<Vec<DailySpend>, StoreError> {
                // Integer division of non-negative milliseconds is the UTC
                // day in both databases.
                let rows: Vec<(i64, i64)> = sqlx::query_as(
                    "SELECT created_at / 86400000 AS day, CAST(SUM(amount_micros) AS BIGINT) \
                     FROM ledger_entries \
                     WHERE account_id = $1 AND kind = 'capture' AND created_at >= $2 \
                     GROUP BY created_at / 86400000 ORDER BY day",
                )
                .bind(account_id)
                .bind(since)
                .fetch_all(self.reader())
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(day, captured)| DailySpend {
                        day,
                        captured: Micros(captured),
                    })
                    .collect())
            }

            async fn recent_webhook_deliveries(
                &self,
                account_id: &str,
                limit: u32,
            ) -> Result<Vec<AccountDelivery>, StoreError> {
                let now = now_millis();
                let rows: Vec<DeliveryRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    delivery_columns!(),
                    " FROM webhook_deliveries WHERE account_id = $1 \
                      ORDER BY created_at DESC, id DESC LIMIT $2"
                ))
                .bind(account_id)
                .bind(limit as i64)
                .fetch_all(self.reader())
                .await?;
                let attempts: Vec<AttemptRow> = sqlx::query_as(
                    "SELECT a.delivery_id, a.attempt, a.started_at, a.duration_ms, \
                     a.status_code, a.error, a.response_body, a.next_attempt_at \
                     FROM webhook_attempts a WHERE a.delivery_id IN \
                       (SELECT id FROM webhook_deliveries WHERE account_id = $1 \
                        ORDER BY created_at DESC, id DESC LIMIT $2) \
                     ORDER BY a.id",
                )
                .bind(account_id)
                .bind(limit as i64)
                .fetch_all(self.reader())
                .await?;
                let mut deliveries = rows
                    .into_iter()
                    .map(|row| {
                        let generation_id = row.generation_id.clone();
                        row.into_delivery(now).map(|delivery| AccountDelivery {
                            generation_id,
                            delivery,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                for attempt in attempts {
                    if let Some(found) = deliveries
                        .iter_mut()
                        .find(|found| found.delivery.id == attempt.delivery_id)
                    {
                        found.delivery.attempt_log.push(WebhookAttempt::from(attempt));
                    }
                }
                Ok(deliveries)
            }

            async fn wait_for_work(&self, timeout: Duration) {
                self.wait_for_announced_work(timeout).await
            }
        }
    };
}

pub(super) use {account_columns, delivery_columns, generation_columns, impl_sql_store};
