//! Generations: their records, read, list and cancel (a submit with its
//! hold is in `submit.rs`). What happens to a generation once a worker
//! claims it is in `queue.rs` (the claim and the finish) and in the root
//! `workers.rs` (the workers that run it).

use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use vidgate_core::{GenerationStatus, Micros};

use super::database::WriteTransaction;
use super::ledger::Movement;
use super::{ProviderRun, Store, StoreError, now_millis};

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
    /// The request media the job is bound to (`bound_media.rs`), written in
    /// the same transaction; `None` for a request without media.
    pub media_binding: Option<Value>,
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

/// Why a submit was refused inside its transaction. Nothing is held in any
/// of these cases because the transaction rolls back.
#[derive(Debug, thiserror::Error)]
pub enum SubmitRefusal {
    #[error("the account already has {limit} generations queued or running")]
    ConcurrencyLimit { limit: i64 },
    #[error("the balance does not cover the price")]
    InsufficientBalance { balance: Micros, price: Micros },
    /// The hold would take the API key past its spend limit: `spent` is
    /// what the key's generations of the period hold or were charged.
    #[error("the API key's spend limit does not cover the price")]
    SpendLimit {
        limit: crate::spend_limits::SpendLimit,
        spent: Micros,
        price: Micros,
    },
    #[error("the idempotency key was used with a different request")]
    IdempotencyMismatch,
    #[error("account not found")]
    AccountNotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Debug)]
pub enum CancelOutcome {
    Canceled(Box<Generation>),
    Refused(GenerationStatus),
    NotFound,
}

#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<GenerationStatus>,
    pub model: Option<String>,
    /// Return generations strictly older than this (created_at, id) position.
    pub before: Option<(i64, String)>,
    pub limit: u32,
}

/// Adds to a `SELECT` of generations, whose `WHERE` clause `query` has
/// begun, the filters of `filter` and the creation range from
/// `created_from` until `created_until`, then the cursor, the order and the
/// page size. Only the filters given are written into the statement (see
/// `Store::list_generations` for why). It is generic over the database
/// because it only builds the statement, which the account's list and the
/// operator's list each run on either pool.
pub(super) fn push_list_filter<DB>(
    query: &mut sqlx::QueryBuilder<DB>,
    filter: &ListFilter,
    created_from: Option<i64>,
    created_until: Option<i64>,
) where
    DB: sqlx::Database,
    for<'value> &'value str: sqlx::Encode<'value, DB> + sqlx::Type<DB>,
    for<'value> i64: sqlx::Encode<'value, DB> + sqlx::Type<DB>,
{
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(model) = &filter.model {
        query.push(" AND model = ").push_bind(model.as_str());
    }
    if let Some(created_from) = created_from {
        query.push(" AND created_at >= ").push_bind(created_from);
    }
    if let Some(created_until) = created_until {
        query.push(" AND created_at < ").push_bind(created_until);
    }
    if let Some((created_at, id)) = &filter.before {
        query
            .push(" AND (created_at, id) < (")
            .push_bind(*created_at)
            .push(", ")
            .push_bind(id.as_str())
            .push(")");
    }
    query
        .push(" ORDER BY created_at DESC, id DESC LIMIT ")
        .push_bind(filter.limit as i64);
}

/// The columns of a generation, in the order `GenerationRow` expects.
macro_rules! generation_columns {
    () => {
        "id, account_id, model, endpoint, mode, status, input, output, error, price_micros, \
         official_micros, source, webhook_url, attempts, created_at, started_at, completed_at"
    };
}

pub(super) use generation_columns;

database_row! {
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
}

/// One of an account's generations by id: `GET /generations/{id}`, the
/// hottest read of the API (a point read, inline on SQLite).
const GENERATION_OF_ACCOUNT: &str = concat!(
    "SELECT ",
    generation_columns!(),
    " FROM generations WHERE id = $1 AND account_id = $2"
);

/// A generation by id, whichever account's it is.
pub(super) const GENERATION_BY_ID: &str = concat!(
    "SELECT ",
    generation_columns!(),
    " FROM generations WHERE id = $1"
);

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

impl Store {
    /// Reads a generation inside a write transaction, which sees its own
    /// writes.
    pub(super) async fn generation_in(
        transaction: &mut WriteTransaction,
        generation_id: &str,
    ) -> Result<Option<Generation>, StoreError> {
        let row: Option<GenerationRow> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(GENERATION_BY_ID).bind(generation_id)
        )?;
        row.map(Generation::try_from).transpose()
    }

    /// Cancels a generation in status `from` and releases its hold,
    /// in one transaction.
    async fn cancel_from(
        &self,
        account_id: &str,
        generation_id: &str,
        from: GenerationStatus,
        provider_run: Option<&ProviderRun>,
    ) -> Result<CancelOutcome, StoreError> {
        let mut transaction = self.begin_write().await?;
        // The update decides: a worker that claimed (or finished)
        // the job a moment ago (on any node) makes it match nothing,
        // and the job is reported as it now is instead of being
        // refunded. Clearing the lease makes the worker of a running
        // one fail its heartbeat and its finish, and stop.
        let canceled: Option<i64> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_scalar(
                "UPDATE generations SET status = 'canceled', completed_at = $1, \
                 lease_owner = NULL, lease_expires_at = NULL, \
                 provider = COALESCE($5, provider), \
                 provider_cost_micros = COALESCE($6, provider_cost_micros) \
                 WHERE id = $2 AND account_id = $3 AND status = $4 \
                 RETURNING price_micros",
            )
            .bind(now_millis())
            .bind(generation_id)
            .bind(account_id)
            .bind(from.as_str())
            .bind(provider_run.map(|run| run.provider.as_str()))
            .bind(provider_run.and_then(|run| run.cost).map(|cost| cost.0))
        )?;
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
        self.announce_generation_change(generation_id).await;
        Ok(CancelOutcome::Canceled(Box::new(current)))
    }
}

impl Store {
    /// Whether the account submitted a generation under this idempotency
    /// key within `IDEMPOTENCY_WINDOW`, so that a submit with it is a
    /// replay (or a conflict), not a new charge.
    pub async fn idempotency_key_in_use(
        &self,
        account_id: &str,
        idempotency_key: &str,
    ) -> Result<bool, StoreError> {
        let found: Option<String> = fetch_on_reader!(
            self,
            fetch_optional,
            sqlx::query_scalar(
                "SELECT id FROM generations \
                 WHERE account_id = $1 AND idempotency_key = $2 AND created_at >= $3",
            )
            .bind(account_id)
            .bind(idempotency_key)
            .bind(now_millis() - IDEMPOTENCY_WINDOW.as_millis() as i64)
        )?;
        Ok(found.is_some())
    }

    pub async fn generation(
        &self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Option<Generation>, StoreError> {
        let row: Option<GenerationRow> = self
            .point_read(GENERATION_OF_ACCOUNT, &[generation_id, account_id])
            .await?;
        row.map(Generation::try_from).transpose()
    }

    pub async fn list_generations(
        &self,
        account_id: &str,
        filter: &ListFilter,
    ) -> Result<Vec<Generation>, StoreError> {
        // Only the filters given are written into the statement (one
        // statement per combination, each prepared once), so that
        // both planners use the index of the filter, (account_id,
        // status|model, created_at, id), and seek to the cursor with
        // a row comparison: a page then costs the same at any number
        // of stored generations and at any depth. A generic
        // `($2 IS NULL OR status = $2)` made them walk every row of
        // the account instead.
        // The builder is written once and typed for each database by
        // the pool it runs on.
        let rows: Vec<GenerationRow> = on_reader!(self, |reader| {
            let mut query = sqlx::QueryBuilder::new(concat!(
                "SELECT ",
                generation_columns!(),
                " FROM generations WHERE account_id = "
            ));
            query.push_bind(account_id);
            push_list_filter(&mut query, filter, None, None);
            query.build_query_as().fetch_all(reader).await
        })?;
        rows.into_iter().map(Generation::try_from).collect()
    }

    /// How the database runs `list_generations` of `account_id` with
    /// `filter`, one line per step: `EXPLAIN QUERY PLAN` on SQLite,
    /// `EXPLAIN ANALYZE` on PostgreSQL (which runs it). The lists bench
    /// prints it, to say which index each shape of list uses.
    pub async fn explain_list_generations(
        &self,
        account_id: &str,
        filter: &ListFilter,
    ) -> Result<Vec<String>, StoreError> {
        let select = concat!(
            "SELECT ",
            generation_columns!(),
            " FROM generations WHERE account_id = "
        );
        match &self.database {
            super::database::Database::Sqlite(database) => {
                let mut query = sqlx::QueryBuilder::new(format!("EXPLAIN QUERY PLAN {select}"));
                query.push_bind(account_id);
                push_list_filter(&mut query, filter, None, None);
                let steps: Vec<(i64, i64, i64, String)> =
                    query.build_query_as().fetch_all(database.reader()).await?;
                Ok(steps.into_iter().map(|(_, _, _, detail)| detail).collect())
            }
            super::database::Database::Postgres(database) => {
                let mut query = sqlx::QueryBuilder::new(format!("EXPLAIN ANALYZE {select}"));
                query.push_bind(account_id);
                push_list_filter(&mut query, filter, None, None);
                let lines: Vec<(String,)> =
                    query.build_query_as().fetch_all(database.reader()).await?;
                Ok(lines.into_iter().map(|(line,)| line).collect())
            }
        }
    }

    /// The request media a generation is bound to, as submit recorded it.
    pub async fn generation_media(&self, generation_id: &str) -> Result<Option<Value>, StoreError> {
        let binding: Option<String> = fetch_on_reader!(
            self,
            fetch_optional,
            sqlx::query_scalar("SELECT binding FROM generation_media WHERE generation_id = $1")
                .bind(generation_id)
        )?;
        Ok(binding.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// Cancels a queued generation and releases its hold, in one transaction.
    pub async fn cancel_generation(
        &self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<CancelOutcome, StoreError> {
        self.cancel_from(account_id, generation_id, GenerationStatus::Queued, None)
            .await
    }

    /// Cancels a running generation whose provider job the provider ended
    /// at our cancel, and releases its hold, in one transaction, recording
    /// the provider and what the seconds the job ran first cost the
    /// operator; refused when the generation is no longer running.
    pub async fn cancel_generation_canceled_at_provider(
        &self,
        account_id: &str,
        generation_id: &str,
        provider_run: &ProviderRun,
    ) -> Result<CancelOutcome, StoreError> {
        self.cancel_from(
            account_id,
            generation_id,
            GenerationStatus::Running,
            Some(provider_run),
        )
        .await
    }

    /// Watches a generation for changes of its status committed on any
    /// node from now on (see `changes.rs`): the watch is woken, and its
    /// holder reads the generation again. Holds no database connection.
    pub async fn watch_generation(&self, generation_id: &str) -> super::GenerationWatch {
        self.watch_generation_changes(generation_id).await
    }

    /// Whether every committed change of a generation is announced to this
    /// process now (`true`), so that a watcher hears it without reading
    /// on a timer, and each change of that: always on SQLite, while the
    /// listener is connected on PostgreSQL.
    pub fn announcements_heard(&self) -> tokio::sync::watch::Receiver<bool> {
        self.generation_announcements_heard()
    }
}
