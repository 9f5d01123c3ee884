//! The store: the only part of vidgate that knows SQL.
//!
//! The interface is narrow and speaks in domain operations ("submit a
//! generation with its hold", "claim the next job"), never in rows or
//! statements, so that every ledger change happens inside the same
//! transaction as the state change that causes it, whichever database runs
//! underneath. SQLite is the embedded default; PostgreSQL sits behind the
//! same `Store` for several nodes.
//!
//! The operations are split by aggregate, one file each with its types, its
//! rows and a view of the store (`store.accounts()`, …) holding its SQL: `accounts`
//! (accounts, limits, API keys, model pause state), `ledger` (money
//! movements and ledger reads), `generations` (submit, read, list, cancel),
//! `queue` (claim, lease, finish, release, rescue), `webhooks` (the outbox:
//! deliveries, attempts, signing secrets), `webhook_log` (the delivery
//! log), `users` (dashboard users and sessions), `uploads`, `provider_jobs`
//! (a generation's job at a hosted provider), `provider_health` (each
//! provider's circuit as a node last saw it), `operations` (the schema's
//! state for readiness, backups), `operator` (what the operator API adds:
//! listing accounts, idempotent credit adjustments, the audit log),
//! `operator_changes` (the other operator changes, each in one transaction
//! with its audit row),
//! `retention` (expiring old clips and uploads, and the expired files the
//! sweep deletes), `server_keys` (secrets the server makes for itself,
//! shared by every node) and `stripe_payments` (money in and back through
//! Stripe, each event once). `Store` is all of them. Each statement is written
//! once and runs on either database through the dispatch of `database.rs`;
//! what differs between the two databases is in `sqlite.rs` (with
//! `inline_reads.rs`, SQLite's hot point reads, and `submit.rs`'s SQLite
//! half) and `postgres.rs` (with `submit.rs`'s PostgreSQL half).

/// Declares a row type that both ways of reading fill: sqlx by column name
/// (its derived `FromRow`, for any statement on either store) and SQLite's
/// inline reader (`InlineRow`, for its point reads) by position, the fields
/// in the order the statement selects them; and the list of its columns in
/// that order, `COLUMNS`, which the statements that read it select (with
/// `statement!`). The fields are written once, so the reads and the
/// statements cannot disagree about a row, and a new column is one new
/// field. Reading by position matters on the
/// hottest read: rusqlite finds a column by name with a scan of the row's
/// column names, which cost `GET /generations/{id}` twice what SQLite's own
/// step did (`BENCHMARKS.md`, issue 42); debug builds check each position's
/// name, so a statement that selects in another order fails every test
/// that reads it.
macro_rules! database_row {
    (
        $(#[$attribute:meta])*
        $visibility:vis struct $name:ident {
            $(#[$first_attribute:meta])*
            $first_visibility:vis $first:ident: $first_type:ty
            $(, $(#[$field_attribute:meta])* $field_visibility:vis $field:ident: $type:ty)*
            $(,)?
        }
    ) => {
        $(#[$attribute])*
        #[derive(sqlx::FromRow)]
        $visibility struct $name {
            $(#[$first_attribute])*
            $first_visibility $first: $first_type,
            $($(#[$field_attribute])* $field_visibility $field: $type),*
        }

        impl $name {
            /// The row's columns, in the order of its fields.
            #[allow(dead_code, reason = "rows read by a join name their columns themselves")]
            pub(super) const COLUMNS: &'static str =
                concat!(stringify!($first) $(, ", ", stringify!($field))*);
        }

        impl $crate::store::inline_reads::InlineRow for $name {
            fn from_inline_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<$name> {
                let mut position = 0;
                Ok($name {
                    $first: $crate::store::inline_reads::column(
                        row,
                        &mut position,
                        stringify!($first),
                    )?,
                    $($field: $crate::store::inline_reads::column(
                        row,
                        &mut position,
                        stringify!($field),
                    )?),*
                })
            }
        }
    };
}

/// The text of a statement joined from `&'static str` pieces, constants
/// among them (a row's `COLUMNS`), when the program is compiled: `concat!`
/// takes only literals. The pieces are joined in a `const` block, so a
/// statement costs nothing at run time and is a `&'static str` as a literal
/// is (sqlx takes those as safe).
macro_rules! statement {
    ($($piece:expr),+ $(,)?) => {
        const {
            const PIECES: &[&str] = &[$($piece),+];
            const BYTES: [u8; $crate::store::joined_length(PIECES)] =
                $crate::store::joined(PIECES);
            match std::str::from_utf8(&BYTES) {
                Ok(text) => text,
                Err(_) => panic!("the pieces of a statement are text"),
            }
        }
    };
}

/// The length of `pieces` joined, for `statement!`.
const fn joined_length(pieces: &[&str]) -> usize {
    let mut length = 0;
    let mut index = 0;
    while index < pieces.len() {
        length += pieces[index].len();
        index += 1;
    }
    length
}

/// The bytes of `pieces` joined, for `statement!`; `LENGTH` is their
/// `joined_length`.
const fn joined<const LENGTH: usize>(pieces: &[&str]) -> [u8; LENGTH] {
    let mut bytes = [0; LENGTH];
    let mut written = 0;
    let mut index = 0;
    while index < pieces.len() {
        let piece = pieces[index].as_bytes();
        let mut at = 0;
        while at < piece.len() {
            bytes[written] = piece[at];
            written += 1;
            at += 1;
        }
        index += 1;
    }
    bytes
}

#[macro_use]
mod database;

mod accounts;
mod caller_cache;
mod changes;
mod gathered_reads;
mod generations;
mod group_commit;
mod inline_reads;
mod ledger;
mod low_balance;
mod operations;
mod operator;
mod operator_changes;
mod point_readers;
mod postgres;
mod provider_health;
mod provider_jobs;
mod queue;
mod retention;
mod schema;
mod server_keys;
mod sqlite;
mod stored_json;
mod stripe_payments;
mod submit;
mod uploads;
mod users;
mod webhook_log;
mod webhooks;

pub use accounts::Accounts;
pub use accounts::{
    Account, AccountLimits, ApiKeyRecord, Caller, KEY_USE_RESOLUTION, LowBalanceAlert, NewAccount,
    NewApiKey, SESSION_CALLER_PREFIX,
};
pub use caller_cache::CALLER_CACHE_TTL;
pub use changes::{GenerationChanges, GenerationWatch};
pub use generations::Generations;
pub use generations::{
    CancelOutcome, EarlierSubmit, Generation, GenerationView, IDEMPOTENCY_WINDOW, IdempotencyKey,
    ListFilter, NewGeneration, Source, SubmitOutcome, SubmitRefusal,
};
pub use ledger::Ledger;
pub use ledger::{
    DailySpend, LedgerEntry, LedgerGeneration, LedgerKind, LedgerPage, LedgerPageEntry,
    LedgerPageRequest, ModelDayUsage, ProviderModelUsage,
};
pub use low_balance::{BALANCE_LOW_EVENT, LowBalanceSetting};
pub use operations::Operations;
pub use operations::SchemaState;
pub use operator::Operator;
pub use operator::{
    AccountDeletion, AdjustmentKind, AdjustmentOutcome, AuditAction, AuditEntry, CreditAdjustment,
    NewAuditEntry, NewCreditAdjustment, OperatorGenerationFilter,
};
pub use operator_changes::{KeyChangeRefusal, KeyChanger};
pub use postgres::PgStore;
pub use provider_health::ProviderHealth;
pub use provider_health::ProviderHealthRecords;
pub use provider_jobs::ProviderJobs;
pub use provider_jobs::{GenerationProvider, NewProviderJob, ProviderJob, ProviderRouting};
pub use queue::Queue;
pub use queue::{ClaimableModels, FailureDetail, ProviderRun, QueueDepth, RescueReport};
pub use retention::ExpiredFile;
pub use retention::Retention;
pub use schema::{Migration, Migrations, migrate, pending_migrations};
pub use server_keys::ServerKeys;
pub use sqlite::{SqliteDurability, SqliteStore};
pub use stored_json::StoredJson;
pub use stripe_payments::StripePayments;
pub use stripe_payments::{
    StripeCredit, StripeCreditOutcome, StripeDisputeWon, StripeDisputeWonOutcome, StripeTakeBack,
    StripeTakeBackKind, StripeTakeBackOutcome,
};
pub use uploads::Uploads;
pub use uploads::{DirectUpload, NewDirectUpload, NewUpload, UploadUsage};
pub use users::Users;
pub use users::{
    KeysOfRemovedPerson, NewSession, PeopleActor, PeopleRefusal, RemovedPerson, Session, User,
    UserRole,
};
pub use webhook_log::WebhookLog;
pub use webhook_log::{
    AccountDelivery, DeliveryRetryOutcome, MAX_MANUAL_RETRIES, MAX_PENDING_TEST_EVENTS, TEST_EVENT,
    WebhookAttempt, WebhookDelivery,
};
pub use webhooks::Webhooks;
pub use webhooks::{
    AttemptOutcome, AttemptRecord, ClaimedDelivery, DeliveryStatus, DeliverySubject, SenderFairness,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// A failure of SQLite's inline point reads (`inline_reads.rs`).
    #[error("database error")]
    InlineRead(#[from] rusqlite::Error),
    #[error("database migration failed")]
    Migration(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// Holds the URL's scheme only: the rest may carry a password.
    #[error("unsupported database URL scheme {0:?}: use sqlite:// or postgres://")]
    UnsupportedUrl(String),
    #[error(
        "the database lacks {pending} of this version's migrations: run `vidgate admin migrate`"
    )]
    NotMigrated { pending: usize },
    #[error("the database did not answer within {0:?}")]
    ConnectTimeout(std::time::Duration),
    #[error("could not create the database file")]
    DatabaseFile(#[source] std::io::Error),
    #[error("not supported on this database: {0}")]
    Unsupported(&'static str),
    /// The task that commits submits in batches stopped before answering
    /// (it panicked, or the runtime it ran on shut down); the next submit
    /// starts it again.
    #[error("the submit batch task stopped")]
    SubmitQueueStopped,
    /// The database could not be reached within `CONNECTION_WAIT` for a
    /// batch of submits that were then all answered with this.
    #[error("the database is unreachable")]
    Unavailable,
}

/// The longest a caller waits for a database connection (a pool's free
/// connection, a new one, or SQLite's write lock held by another process)
/// before the operation fails with an error that `is_unavailable`. Without
/// it every request of a database outage waited for sqlx's default of
/// 30 s, and requests piled up; with it they are refused at once, with a
/// status that tells the client to retry.
pub const CONNECTION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl StoreError {
    fn unsupported_url(database_url: &str) -> StoreError {
        let scheme = database_url
            .split_once(':')
            .map_or("", |(scheme, _)| scheme);
        StoreError::UnsupportedUrl(scheme.to_owned())
    }

    /// The database could not be reached, or not soon enough: the same
    /// operation may succeed when it returns. Any other error is a fault of
    /// its own (a constraint, corrupt data) that retrying will not cure.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable | StoreError::ConnectTimeout(_) => true,
            StoreError::Database(error) => sqlx_error_is_unavailable(error),
            _ => false,
        }
    }
}

/// A pool that waited `CONNECTION_WAIT` in vain, a connection that broke
/// (or whose TLS did),
/// PostgreSQL refusing or ending connections (SQLSTATE classes 08, a
/// connection exception, and 57P, a server shutting down or starting), or
/// SQLite's write lock held by another process past the busy timeout.
fn sqlx_error_is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(database) => {
            if let Some(sqlite) = database.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                // SQLITE_BUSY and SQLITE_LOCKED, whatever their extended code.
                let primary = sqlx::error::DatabaseError::code(sqlite)
                    .and_then(|code| code.parse::<i32>().ok())
                    .map(|code| code & 0xff);
                return matches!(primary, Some(5 | 6));
            }
            database
                .code()
                .is_some_and(|code| code.starts_with("08") || code.starts_with("57P"))
        }
        _ => false,
    }
}

/// Every operation of the store, on whichever database it runs. Callers
/// share one as `Arc<Store>` and reach each aggregate's operations through
/// its view (`store.accounts()`, `store.generations()`, …), which its file
/// implements.
pub struct Store {
    database: database::Database,
}

/// Each aggregate's operations are reached through its view, so a call
/// site names the file that holds the method: `store.generations().get(…)`
/// is in `generations.rs`. The views are thin borrows of the store.
impl Store {
    /// The store's view of accounts, their limits, API keys, the low-balance alert and model pause state (`accounts.rs`, `low_balance.rs`).
    pub fn accounts(&self) -> Accounts<'_> {
        Accounts { store: self }
    }

    /// The store's view of submitting, reading, listing, cancelling and watching generations (`generations.rs`, `submit.rs`).
    pub fn generations(&self) -> Generations<'_> {
        Generations { store: self }
    }

    /// The store's view of money movements and the ledger's reads (`ledger.rs`).
    pub fn ledger(&self) -> Ledger<'_> {
        Ledger { store: self }
    }

    /// The store's view of claiming, leasing, finishing, releasing and rescuing jobs (`queue.rs`).
    pub fn queue(&self) -> Queue<'_> {
        Queue { store: self }
    }

    /// The store's view of a generation's job at a hosted provider (`provider_jobs.rs`).
    pub fn provider_jobs(&self) -> ProviderJobs<'_> {
        ProviderJobs { store: self }
    }

    /// The store's view of each provider's circuit as a node last saw it (`provider_health.rs`).
    pub fn provider_health(&self) -> ProviderHealthRecords<'_> {
        ProviderHealthRecords { store: self }
    }

    /// The store's view of the webhook outbox: claiming deliveries, recording attempts, signing secrets (`webhooks.rs`).
    pub fn webhooks(&self) -> Webhooks<'_> {
        Webhooks { store: self }
    }

    /// The store's view of the customer's webhook delivery log and its retries (`webhook_log.rs`).
    pub fn webhook_log(&self) -> WebhookLog<'_> {
        WebhookLog { store: self }
    }

    /// The store's view of dashboard users, their sessions and roles (`users.rs`).
    pub fn users(&self) -> Users<'_> {
        Users { store: self }
    }

    /// The store's view of uploaded files and direct uploads (`uploads.rs`).
    pub fn uploads(&self) -> Uploads<'_> {
        Uploads { store: self }
    }

    /// The store's view of what the operator adds: lists across accounts, credit adjustments, deletion, the audit log and every audited change (`operator.rs`, `operator_changes.rs`).
    pub fn operator(&self) -> Operator<'_> {
        Operator { store: self }
    }

    /// The store's view of the schema's state, the writable check and backups (`operations.rs`).
    pub fn operations(&self) -> Operations<'_> {
        Operations { store: self }
    }

    /// The store's view of expiring old clips and uploads and the files to delete (`retention.rs`).
    pub fn retention(&self) -> Retention<'_> {
        Retention { store: self }
    }

    /// The store's view of secrets the server makes for itself (`server_keys.rs`).
    pub fn server_keys(&self) -> ServerKeys<'_> {
        ServerKeys { store: self }
    }

    /// The store's view of money in and back through Stripe (`stripe_payments.rs`).
    pub fn stripe_payments(&self) -> StripePayments<'_> {
        StripePayments { store: self }
    }
}

/// Opens the store at `database_url`, applying this version's pending
/// migrations, with SQLite's default durability (every commit synced).
pub async fn open(database_url: &str) -> Result<std::sync::Arc<Store>, StoreError> {
    open_with(database_url, Migrations::Apply, SqliteDurability::default()).await
}

/// Opens the store at `database_url`, applying or only requiring this
/// version's migrations; a SQLite database syncs its commits as
/// `sqlite_durability` says (PostgreSQL's durability is its server's setting).
pub async fn open_with(
    database_url: &str,
    migrations: Migrations,
    sqlite_durability: SqliteDurability,
) -> Result<std::sync::Arc<Store>, StoreError> {
    let database = if database_url.starts_with("sqlite:") {
        database::Database::Sqlite(
            SqliteStore::open(database_url, migrations, sqlite_durability).await?,
        )
    } else if schema::is_postgres_url(database_url) {
        database::Database::Postgres(PgStore::open(database_url, migrations).await?)
    } else {
        return Err(StoreError::unsupported_url(database_url));
    };
    Ok(std::sync::Arc::new(Store { database }))
}

/// Milliseconds since the Unix epoch, the store's unit of time.
pub fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// A store time as the API writes times: RFC 3339 in UTC with milliseconds.
/// Here, beside the store's unit of time, because the store writes it into
/// the output of an expired generation as well as the HTTP layer into every
/// answer.
pub fn rfc3339(unix_millis: i64) -> String {
    Rfc3339(unix_millis).to_string()
}

/// A store time written as `rfc3339` writes it, without making a `String`
/// first: a record of a list writes three of them, which through a format
/// description cost as much as the rest of the record (issue 42). The
/// digits come from humantime's fixed-width formatter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rfc3339(pub i64);

/// The last millisecond that RFC 3339's four-digit year can write,
/// 9999-12-31T23:59:59.999Z. A store time outside 1970 to 9999 (which no
/// clock of ours writes) is shown as the nearer end rather than failing
/// the answer it is in.
const LAST_WRITABLE_MILLIS: i64 = 253_402_300_799_999;

impl std::fmt::Display for Rfc3339 {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let millis = self.0.clamp(0, LAST_WRITABLE_MILLIS) as u64;
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(millis);
        std::fmt::Display::fmt(&humantime::format_rfc3339_millis(time), formatter)
    }
}

impl serde::Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `rfc3339` wrote through `time`'s format description before it
    /// took humantime's formatter.
    fn through_a_format_description(unix_millis: i64) -> String {
        let time =
            time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_millis) * 1_000_000)
                .unwrap();
        let format = time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
        );
        time.format(&format).unwrap()
    }

    #[test]
    fn store_times_are_written_as_a_format_description_writes_them() {
        // The epoch, leap days of a century and of a 400-year cycle, the
        // last millisecond of a year and of a day, and now.
        let times = [
            0,
            951_782_400_000,
            4_107_456_000_000,
            1_703_980_799_999,
            1_709_251_199_999,
            1_709_164_800_001,
            now_millis(),
            LAST_WRITABLE_MILLIS,
        ];
        for unix_millis in times {
            assert_eq!(
                rfc3339(unix_millis),
                through_a_format_description(unix_millis),
                "{unix_millis}"
            );
        }
        // Every 37 hours and 1 ms over 60 years, so every month and hour.
        for step in 0..15_000 {
            let unix_millis = step * 133_200_001;
            assert_eq!(
                rfc3339(unix_millis),
                through_a_format_description(unix_millis)
            );
        }
        assert_eq!(
            serde_json::to_string(&Rfc3339(1_709_164_800_001)).unwrap(),
            "\"2024-02-29T00:00:00.001Z\""
        );
    }

    #[test]
    fn a_time_outside_what_rfc3339_writes_is_shown_as_the_nearer_end() {
        assert_eq!(rfc3339(-1), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
