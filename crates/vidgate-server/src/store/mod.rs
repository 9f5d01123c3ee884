//! The store: the only part of vidgate that knows SQL.
//!
//! The interface is narrow and speaks in domain operations ("submit a
//! generation with its hold", "claim the next job"), never in rows or
//! statements, so that every ledger change happens inside the same
//! transaction as the state change that causes it, whichever database runs
//! underneath. SQLite is the embedded default; PostgreSQL sits behind the
//! same trait for several nodes.

mod postgres;
mod sql;
mod sqlite;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use vidgate_core::{GenerationStatus, Micros};

pub use postgres::PgStore;
pub use sqlite::SqliteStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed")]
    Migration(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("unsupported database URL {0:?}: use sqlite:// or postgres://")]
    UnsupportedUrl(String),
}

/// Why a submit was refused inside its transaction. Nothing is held in any
/// of these cases because the transaction rolls back.
#[derive(Debug, thiserror::Error)]
pub enum SubmitRefusal {
    #[error("the account already has {limit} generations queued or running")]
    ConcurrencyLimit { limit: i64 },
    #[error("the balance does not cover the price")]
    InsufficientBalance { balance: Micros, price: Micros },
    #[error("the idempotency key was used with a different request")]
    IdempotencyMismatch,
    #[error("account not found")]
    AccountNotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

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
    pub limits: AccountLimits,
    pub webhook_secret: String,
    /// The secret before the last rotation, still used to sign deliveries
    /// (beside the current one) until `previous_webhook_secret_expires_at`.
    pub previous_webhook_secret: Option<String>,
    pub previous_webhook_secret_expires_at: Option<i64>,
    pub created_at: i64,
}

impl Account {
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
}

/// A file an account uploaded, as the uploads table records it.
pub struct NewUpload {
    pub id: String,
    pub account_id: String,
    pub relative_path: String,
    pub content_type: String,
    pub size_bytes: i64,
    pub media: Value,
    pub created_at: i64,
}

/// A presigned direct upload: the object is PUT straight to the bucket, and
/// checked (then recorded as an upload) the first time a request names it.
pub struct NewDirectUpload {
    pub id: String,
    pub account_id: String,
    pub relative_path: String,
    pub created_at: i64,
}

/// A direct upload as first use needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectUpload {
    pub id: String,
    pub account_id: String,
}

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

#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub id: String,
    pub account_id: String,
    pub model: String,
    pub endpoint: String,
    pub mode: String,
    pub status: GenerationStatus,
    pub input: Value,
    pub output: Option<Value>,
    pub error: Option<Value>,
    pub price: Micros,
    pub official_price: Micros,
    pub source: String,
    pub webhook_url: Option<String>,
    pub attempts: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
}

pub struct NewGeneration {
    pub id: String,
    pub account_id: String,
    pub api_key_id: String,
    pub model: String,
    pub endpoint: String,
    pub mode: String,
    pub input: Value,
    pub price: Micros,
    pub official_price: Micros,
    pub webhook_url: Option<String>,
    pub idempotency: Option<IdempotencyKey>,
    pub max_attempts: i64,
}

/// An `Idempotency-Key` header with a digest of the request it came with.
pub struct IdempotencyKey {
    pub key: String,
    pub request_sha256: String,
}

/// How long an idempotency key replays its original generation.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug)]
pub enum SubmitOutcome {
    Created(Generation),
    /// The same idempotency key and request were seen before: nothing new was
    /// created or held.
    Replayed(Generation),
}

#[derive(Debug)]
pub enum CancelOutcome {
    Canceled(Box<Generation>),
    Refused(GenerationStatus),
    NotFound,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureDetail {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct RescueReport {
    pub requeued: Vec<String>,
    pub failed: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<GenerationStatus>,
    pub model: Option<String>,
    /// Return generations strictly older than this (created_at, id) position.
    pub before: Option<(i64, String)>,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub id: i64,
    pub generation_id: Option<String>,
    pub kind: String,
    pub amount: Micros,
    pub created_at: i64,
}

/// Where a webhook delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its next attempt, or being attempted.
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// Every attempt failed, or the URL may never be sent to.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        }
    }
}

impl std::str::FromStr for DeliveryStatus {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<DeliveryStatus, StoreError> {
        match text {
            "pending" => Ok(DeliveryStatus::Pending),
            "delivered" => Ok(DeliveryStatus::Delivered),
            "failed" => Ok(DeliveryStatus::Failed),
            other => Err(StoreError::Corrupt(format!(
                "unknown webhook delivery status {other:?}"
            ))),
        }
    }
}

/// A webhook delivery a sender has claimed, with what it needs to send it.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    /// Also the `webhook-id` header.
    pub id: String,
    pub event_type: String,
    pub url: String,
    /// Attempts recorded before this one.
    pub attempts: i64,
    /// The finished generation the event is about.
    pub generation: Generation,
    /// The account's signing secrets valid now, the current one first.
    pub signing_secrets: Vec<String>,
}

/// What one attempt to send a delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub started_at: i64,
    pub duration_ms: i64,
    /// The receiver's HTTP status, `None` when no response came.
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// The start of the response body.
    pub response_body: Option<String>,
}

/// What becomes of a delivery after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Delivered,
    /// Try again at this time (Unix milliseconds).
    RetryAt(i64),
    /// Give up: the last attempt failed, or the URL may never be sent to.
    Failed,
}

/// One delivery of one generation, with its attempts, for the delivery log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    pub id: String,
    pub event_type: String,
    pub url: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    /// When the next attempt is due, while pending. While a sender holds the
    /// delivery this is the end of its lease.
    pub next_attempt_at: Option<i64>,
    /// True while a sender is attempting it.
    pub in_flight: bool,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    pub attempt_log: Vec<WebhookAttempt>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookAttempt {
    pub attempt: i64,
    pub record: AttemptRecord,
    /// When the next attempt was scheduled after this one, if any.
    pub next_attempt_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryRetryOutcome {
    /// The delivery is pending and due now.
    Scheduled,
    /// A sender is attempting it right now; nothing changed.
    InFlight,
    NotFound,
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
}

/// How often a key's or a session's last use is written: at most once per
/// this interval, so authenticated reads stay reads.
pub const KEY_USE_RESOLUTION: Duration = Duration::from_secs(60);

/// The money captured on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailySpend {
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub captured: Micros,
}

/// A webhook delivery of one of an account's generations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountDelivery {
    pub generation_id: String,
    pub delivery: WebhookDelivery,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    // Accounts and keys.
    async fn create_account(&self, account: NewAccount) -> Result<Account, StoreError>;
    async fn account(&self, account_id: &str) -> Result<Option<Account>, StoreError>;
    async fn count_accounts(&self) -> Result<i64, StoreError>;
    /// Adds credit; `None` when the account does not exist.
    async fn credit_account(
        &self,
        account_id: &str,
        amount: Micros,
    ) -> Result<Option<Account>, StoreError>;
    async fn set_account_limits(
        &self,
        account_id: &str,
        limits: AccountLimits,
    ) -> Result<Option<Account>, StoreError>;
    async fn ledger_entries(&self, account_id: &str) -> Result<Vec<LedgerEntry>, StoreError>;
    async fn create_api_key(&self, key: NewApiKey) -> Result<(), StoreError>;
    /// Revokes a key; false when no unrevoked key has that id.
    async fn revoke_api_key(&self, key_id: &str) -> Result<bool, StoreError>;
    /// The caller owning an unrevoked key with this secret digest.
    async fn authenticate(&self, secret_sha256: &str) -> Result<Option<Caller>, StoreError>;

    // Model availability, shared by every node and the admin command.
    async fn set_model_paused(&self, model_id: &str, paused: bool) -> Result<(), StoreError>;
    /// Records a file an account uploaded (already written to storage).
    async fn create_upload(&self, upload: &NewUpload) -> Result<(), StoreError>;
    /// The account that uploaded the file stored at `relative_path`.
    async fn upload_owner(&self, relative_path: &str) -> Result<Option<String>, StoreError>;
    /// Records a presigned direct upload before its object exists.
    async fn create_direct_upload(&self, upload: &NewDirectUpload) -> Result<(), StoreError>;
    /// The direct upload whose object is stored at `relative_path`.
    async fn direct_upload(&self, relative_path: &str) -> Result<Option<DirectUpload>, StoreError>;
    /// Records a direct upload's probed object as an upload; a second
    /// recording of the same upload (two first uses at once) is a no-op.
    async fn record_direct_upload(&self, upload: &NewUpload) -> Result<(), StoreError>;
    /// The probed media type of the upload stored at `relative_path`.
    async fn upload_content_type(&self, relative_path: &str) -> Result<Option<String>, StoreError>;
    async fn is_model_paused(&self, model_id: &str) -> Result<bool, StoreError>;

    // Generations and their money.
    /// In one transaction: idempotent replay, the concurrency limit, the
    /// balance check, the hold and the insert of the queued generation.
    async fn submit_generation(
        &self,
        generation: NewGeneration,
    ) -> Result<SubmitOutcome, SubmitRefusal>;
    async fn generation(
        &self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Option<Generation>, StoreError>;
    async fn list_generations(
        &self,
        account_id: &str,
        filter: &ListFilter,
    ) -> Result<Vec<Generation>, StoreError>;
    /// Cancels a queued generation and releases its hold, in one transaction.
    async fn cancel_generation(
        &self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<CancelOutcome, StoreError>;

    // The queue.
    /// Claims the oldest queued job for `worker`, marking it running under a
    /// lease that ends after `lease`.
    async fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<Generation>, StoreError>;
    /// Extends the lease; false when the worker no longer holds it.
    async fn extend_lease(
        &self,
        generation_id: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<bool, StoreError>;
    /// Marks the job succeeded and captures its hold; false when the guard
    /// no longer matches (the lease was lost), in which case nothing changed.
    async fn finish_succeeded(
        &self,
        generation_id: &str,
        worker: &str,
        output: Value,
    ) -> Result<bool, StoreError>;
    /// Marks the job failed and refunds its hold; false when the worker no
    /// longer holds the job's lease, in which case nothing changed.
    async fn finish_failed(
        &self,
        generation_id: &str,
        worker: &str,
        failure: FailureDetail,
    ) -> Result<bool, StoreError>;
    /// Puts a running job back in the queue without counting the attempt
    /// (used at shutdown); false when the worker no longer holds it.
    async fn release_to_queue(&self, generation_id: &str, worker: &str)
    -> Result<bool, StoreError>;
    /// Re-queues running jobs whose lease expired, or fails and refunds them
    /// after their last attempt.
    async fn rescue_expired_leases(&self) -> Result<RescueReport, StoreError>;
    // Webhooks. A delivery row is written by every operation above that puts
    // a generation with a webhook URL in a final state, in its transaction.
    /// Claims the delivery that has been due longest for `sender`, holding it
    /// until `lease` has passed (then it falls due again if the sender has not
    /// recorded an attempt, as when its process died).
    async fn claim_webhook_delivery(
        &self,
        sender: &str,
        lease: Duration,
    ) -> Result<Option<ClaimedDelivery>, StoreError>;
    /// Logs an attempt and moves the delivery on, in one transaction; false
    /// when `sender` no longer holds it, in which case nothing changed.
    async fn record_webhook_attempt(
        &self,
        delivery_id: &str,
        sender: &str,
        attempt: &AttemptRecord,
        outcome: AttemptOutcome,
    ) -> Result<bool, StoreError>;
    /// The deliveries of one generation of the account, oldest first, each
    /// with its attempts.
    async fn webhook_deliveries(
        &self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Vec<WebhookDelivery>, StoreError>;
    /// Makes a delivery pending and due now, whatever its status.
    async fn retry_webhook_delivery(
        &self,
        account_id: &str,
        generation_id: &str,
        delivery_id: &str,
    ) -> Result<DeliveryRetryOutcome, StoreError>;
    /// Replaces the account's webhook secret; the replaced one keeps signing
    /// deliveries (beside the new one) for `previous_valid_for`. `None` when
    /// the account does not exist.
    async fn rotate_webhook_secret(
        &self,
        account_id: &str,
        new_secret: &str,
        previous_valid_for: Duration,
    ) -> Result<Option<Account>, StoreError>;

    // Dashboard users and sessions.
    /// Creates a user; `None` when the email is already taken.
    async fn create_user(&self, user: &User) -> Result<Option<User>, StoreError>;
    /// Creates an account with no credit and its first user in one
    /// transaction; `None` (and no account) when the email is taken.
    async fn sign_up(
        &self,
        account: NewAccount,
        user: &User,
    ) -> Result<Option<(Account, User)>, StoreError>;
    async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError>;
    async fn create_session(&self, session: &NewSession) -> Result<(), StoreError>;
    /// The live session with this token digest: not revoked, not past its
    /// absolute expiry, and used within `idle_timeout`. Records the use.
    async fn session(
        &self,
        token_sha256: &str,
        idle_timeout: Duration,
    ) -> Result<Option<Session>, StoreError>;
    /// Revokes a session; false when it was already revoked or unknown.
    async fn revoke_session(&self, session_id: &str) -> Result<bool, StoreError>;

    // Dashboard reads, each scoped to one account.
    /// The account's keys, newest first.
    async fn api_keys(&self, account_id: &str) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// Revokes one of the account's keys; false when the account has no
    /// unrevoked key with that id.
    async fn revoke_account_api_key(
        &self,
        account_id: &str,
        key_id: &str,
    ) -> Result<bool, StoreError>;
    /// The account's latest ledger entries, newest first.
    async fn recent_ledger_entries(
        &self,
        account_id: &str,
        limit: u32,
    ) -> Result<Vec<LedgerEntry>, StoreError>;
    /// Money captured per UTC day since `since` (Unix ms), days without any
    /// left out, oldest first.
    async fn daily_spend(
        &self,
        account_id: &str,
        since: i64,
    ) -> Result<Vec<DailySpend>, StoreError>;
    /// The account's latest webhook deliveries, newest first, each with its
    /// attempts.
    async fn recent_webhook_deliveries(
        &self,
        account_id: &str,
        limit: u32,
    ) -> Result<Vec<AccountDelivery>, StoreError>;

    /// Returns when a job may have been queued by another process, or when
    /// `timeout` has passed, whichever is first. PostgreSQL hears every
    /// node's submits and requeues (`LISTEN`/`NOTIFY`); SQLite has no such
    /// signal and just waits out the timeout, so its workers rely on the
    /// in-process wake-up after a submit and on polling.
    async fn wait_for_work(&self, timeout: Duration);
}

/// Opens the store a database URL names, running its migrations.
pub async fn open(database_url: &str) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    if database_url.starts_with("sqlite:") {
        Ok(std::sync::Arc::new(SqliteStore::open(database_url).await?))
    } else if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        Ok(std::sync::Arc::new(PgStore::open(database_url).await?))
    } else {
        Err(StoreError::UnsupportedUrl(database_url.to_owned()))
    }
}

/// Milliseconds since the Unix epoch, the store's unit of time.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}
