//! Generations: their records, read, list and cancel (a submit with its
//! hold is in `submit.rs`). What happens to a generation once a worker
//! claims it is in `queue.rs` (the claim and the finish) and in the root
//! `workers.rs` (the workers that run it).

use std::fmt::Write as _;
use std::str::FromStr;
use std::time::Duration;

use serde_json::Value;
use vidgate_core::{GenerationStatus, Micros};

use super::database::{Database, WriteTransaction};
use super::inline_reads::ColumnsInPlace;
use super::ledger::Movement;
use super::{ProviderRun, Store, StoreError, StoredJson, now_millis};

#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub id: String,
    pub account_id: String,
    pub model: String,
    pub endpoint: String,
    pub mode: String,
    pub status: GenerationStatus,
    pub input: StoredJson,
    pub output: Option<StoredJson>,
    pub error: Option<StoredJson>,
    pub price: Micros,
    pub official_price: Micros,
    pub source: String,
    pub webhook_url: Option<String>,
    pub attempts: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
}

/// A generation as the answers present it, borrowed from where it was
/// read: a `Generation`, or, in the API's list on SQLite, the row itself
/// (`Store::visit_generations`), so that a page copies no text of its rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenerationView<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub endpoint: &'a str,
    pub mode: &'a str,
    pub status: GenerationStatus,
    /// The JSON texts the store wrote (`StoredJson`).
    pub input: &'a str,
    pub output: Option<&'a str>,
    pub error: Option<&'a str>,
    pub price: Micros,
    pub official_price: Micros,
    pub source: &'a str,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
}

impl Generation {
    pub fn view(&self) -> GenerationView<'_> {
        GenerationView {
            id: &self.id,
            model: &self.model,
            endpoint: &self.endpoint,
            mode: &self.mode,
            status: self.status,
            input: self.input.text(),
            output: self.output.as_ref().map(StoredJson::text),
            error: self.error.as_ref().map(StoredJson::text),
            price: self.price,
            official_price: self.official_price,
            source: &self.source,
            created_at: self.created_at,
            started_at: self.started_at,
            completed_at: self.completed_at,
        }
    }
}

/// A row of `GenerationRow::COLUMNS` read in place, as a view.
fn view_of_inline_row<'row>(
    row: &'row rusqlite::Row<'_>,
) -> rusqlite::Result<GenerationView<'row>> {
    let mut columns = ColumnsInPlace::new(row);
    let id = columns.text("id")?;
    columns.skip("account_id")?;
    let model = columns.text("model")?;
    let endpoint = columns.text("endpoint")?;
    let mode = columns.text("mode")?;
    let status = columns.parsed_text("status")?;
    let input = columns.text("input")?;
    let output = columns.optional_text("output")?;
    let error = columns.optional_text("error")?;
    let price = Micros(columns.integer("price_micros")?);
    let official_price = Micros(columns.integer("official_micros")?);
    let source = columns.text("source")?;
    columns.skip("webhook_url")?;
    columns.skip("attempts")?;
    Ok(GenerationView {
        id,
        model,
        endpoint,
        mode,
        status,
        input,
        output,
        error,
        price,
        official_price,
        source,
        created_at: columns.integer("created_at")?,
        started_at: columns.optional_integer("started_at")?,
        completed_at: columns.optional_integer("completed_at")?,
    })
}

pub struct NewGeneration {
    pub id: String,
    pub account_id: String,
    pub api_key_id: String,
    pub model: String,
    pub endpoint: String,
    pub mode: String,
    /// The accepted input as the store writes it, made once per submit.
    pub input: StoredJson,
    pub price: Micros,
    pub official_price: Micros,
    pub webhook_url: Option<String>,
    pub idempotency: Option<IdempotencyKey>,
    pub max_attempts: i64,
    /// The request media the job is bound to (`bound_media.rs`), written in
    /// the same transaction; `None` for a request without media.
    pub media_binding: Option<Value>,
    /// Which surface made it, stored in the `source` column.
    pub source: Source,
    /// The W3C `traceparent` of the submitting request while tracing is on
    /// (`telemetry::traceparent_of`), which the work for it continues.
    pub traceparent: Option<String>,
}

/// The surface a generation was submitted through, as its record's
/// `source` says (SPEC.md section 2 names `api`; the other dialects of
/// issue 53 name themselves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `/api/v1/run` and the dashboard's playground, which posts through it.
    Api,
    /// The OpenAI Videos API at `/v1/videos`.
    OpenAi,
    /// OpenRouter's video API at `/api/v1/videos`.
    OpenRouter,
    /// The MCP server's `create_generation` at `/mcp`.
    Mcp,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::OpenAi => "openai",
            Source::OpenRouter => "openrouter",
            Source::Mcp => "mcp",
        }
    }
}

/// An `Idempotency-Key` header with a digest of the request it came with.
pub struct IdempotencyKey {
    pub key: String,
    pub request_sha256: String,
}

/// How long an idempotency key replays its original generation.
pub const IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// An earlier submit of an account under the idempotency key of a new one.
#[derive(Debug)]
pub enum EarlierSubmit {
    /// The same request: the new submit replays this generation (boxed: a
    /// generation is many times the size of the other variant).
    SameRequest(Box<Generation>),
    /// Another request under the same key: the new submit is a conflict.
    OtherRequest,
}

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

/// A value a list's statement binds where its text has a parameter.
#[derive(Clone, Copy, Debug)]
pub(super) enum ListValue<'a> {
    Text(&'a str),
    Integer(i64),
}

/// A piece of a list's statement: SQL text, a value bound in its place, or
/// the page size. A list is built as pieces once (`list_pieces`), so that
/// the sqlx query builder (`push_list_pieces`) and SQLite's inline reader
/// (`InlineListStatement`) run the same statement.
#[derive(Clone, Copy, Debug)]
pub(super) enum ListPiece<'a> {
    Sql(&'static str),
    Value(ListValue<'a>),
    /// Written into the text as a number, not bound: with `LIMIT $n`
    /// PostgreSQL planned the statement again at every execution (pgbench,
    /// an account's 20 newest: 28k lists/s against 47k with the number in
    /// the text; BENCHMARKS.md, session 24). A page size is one of a few
    /// small numbers, so each list shape still has a few statements.
    PageSize(u32),
}

/// The pieces that follow a `SELECT` of generations whose `WHERE` clause
/// has begun: the filters of `filter` and the creation range from
/// `created_from` until `created_until`, then the cursor, the order and the
/// page size. Only the filters given are written into the statement (see
/// `Store::list_generations` for why).
pub(super) fn list_pieces(
    filter: &ListFilter,
    created_from: Option<i64>,
    created_until: Option<i64>,
) -> Vec<ListPiece<'_>> {
    use ListPiece::{Sql, Value};
    use ListValue::{Integer, Text};
    let mut pieces = Vec::with_capacity(16);
    if let Some(status) = filter.status {
        pieces.extend([Sql(" AND status = "), Value(Text(status.as_str()))]);
    }
    if let Some(model) = &filter.model {
        pieces.extend([Sql(" AND model = "), Value(Text(model.as_str()))]);
    }
    if let Some(created_from) = created_from {
        pieces.extend([Sql(" AND created_at >= "), Value(Integer(created_from))]);
    }
    if let Some(created_until) = created_until {
        pieces.extend([Sql(" AND created_at < "), Value(Integer(created_until))]);
    }
    if let Some((created_at, id)) = &filter.before {
        pieces.extend([
            Sql(" AND (created_at, id) < ("),
            Value(Integer(*created_at)),
            Sql(", "),
            Value(Text(id.as_str())),
            Sql(")"),
        ]);
    }
    pieces.extend([
        Sql(" ORDER BY created_at DESC, id DESC LIMIT "),
        ListPiece::PageSize(filter.limit),
    ]);
    pieces
}

/// Adds `pieces` to a statement of the sqlx query builder `query`, each
/// value bound. It is generic over the database because it only builds the
/// statement, which the account's list and the operator's list each run on
/// either pool.
pub(super) fn push_list_pieces<DB>(query: &mut sqlx::QueryBuilder<DB>, pieces: &[ListPiece<'_>])
where
    DB: sqlx::Database,
    for<'value> &'value str: sqlx::Encode<'value, DB> + sqlx::Type<DB>,
    for<'value> i64: sqlx::Encode<'value, DB> + sqlx::Type<DB>,
{
    for piece in pieces {
        match *piece {
            ListPiece::Sql(text) => {
                query.push(text);
            }
            ListPiece::Value(ListValue::Text(text)) => {
                query.push_bind(text);
            }
            ListPiece::Value(ListValue::Integer(number)) => {
                query.push_bind(number);
            }
            ListPiece::PageSize(size) => {
                query.push(size);
            }
        }
    }
}

/// Adds to a `SELECT` of generations, whose `WHERE` clause `query` has
/// begun, the pieces of `list_pieces` for these filters.
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
    push_list_pieces(query, &list_pieces(filter, created_from, created_until));
}

/// A list's statement as SQLite's inline reader runs it: the text of
/// `select` and the pieces, each value a numbered parameter (`$1`, `$2`, …
/// in order, as every statement of the store numbers them), and the values
/// in that order.
pub(super) struct InlineListStatement<'a> {
    pub(super) text: String,
    pub(super) values: Vec<ListValue<'a>>,
}

impl<'a> InlineListStatement<'a> {
    pub(super) fn new(select: &str, pieces: &[ListPiece<'a>]) -> InlineListStatement<'a> {
        let mut text = String::with_capacity(select.len() + 160);
        text.push_str(select);
        let mut values = Vec::with_capacity(pieces.len());
        for piece in pieces {
            match *piece {
                ListPiece::Sql(sql) => text.push_str(sql),
                ListPiece::PageSize(size) => {
                    write!(text, "{size}").expect("a String takes any text");
                }
                ListPiece::Value(value) => {
                    values.push(value);
                    write!(text, "${}", values.len()).expect("a String takes any text");
                }
            }
        }
        InlineListStatement { text, values }
    }
}

impl rusqlite::ToSql for ListValue<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            ListValue::Text(text) => text.to_sql(),
            ListValue::Integer(number) => number.to_sql(),
        }
    }
}

/// The start of an account's list of generations, up to the account's
/// value (the first of `account_list_pieces`).
const ACCOUNT_LIST_SELECT: &str = statement!(
    "SELECT ",
    GenerationRow::COLUMNS,
    " FROM generations WHERE account_id = "
);

/// The pieces of an account's list after `ACCOUNT_LIST_SELECT`: the account,
/// then the filters.
fn account_list_pieces<'a>(account_id: &'a str, filter: &'a ListFilter) -> Vec<ListPiece<'a>> {
    let mut pieces = vec![ListPiece::Value(ListValue::Text(account_id))];
    pieces.extend(list_pieces(filter, None, None));
    pieces
}

database_row! {
    /// A line of SQLite's `EXPLAIN QUERY PLAN`. Only `detail` is shown; the
    /// columns before it are read to reach it by position.
    #[expect(dead_code, reason = "the step's place in the plan's tree is not shown")]
    struct PlanStep {
        id: i64,
        parent: i64,
        notused: i64,
        detail: String,
    }
}

database_row! {
    #[derive(Clone)]
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

impl GenerationRow {
    /// Whether this is the row of generation `id` of `account_id`.
    pub(super) fn is(&self, id: &str, account_id: &str) -> bool {
        self.id == id && self.account_id == account_id
    }
}

/// One of an account's generations by id: `GET /generations/{id}`, the
/// hottest read of the API (a point read, inline on SQLite; gathered with
/// the others waiting on PostgreSQL, `gathered_reads.rs`).
const GENERATION_OF_ACCOUNT: &str = statement!(
    "SELECT ",
    GenerationRow::COLUMNS,
    " FROM generations WHERE id = $1 AND account_id = $2"
);

/// A generation by id, whichever account's it is.
pub(super) const GENERATION_BY_ID: &str = statement!(
    "SELECT ",
    GenerationRow::COLUMNS,
    " FROM generations WHERE id = $1"
);

impl TryFrom<GenerationRow> for Generation {
    type Error = StoreError;

    fn try_from(row: GenerationRow) -> Result<Self, StoreError> {
        Ok(Generation {
            status: GenerationStatus::from_str(&row.status)
                .map_err(|error| StoreError::Corrupt(error.to_string()))?,
            input: StoredJson::from_store(row.input),
            output: row.output.map(StoredJson::from_store),
            error: row.error.map(StoredJson::from_store),
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
                 provider_cost_micros = COALESCE($6, provider_cost_micros), \
                 provider_cost_possible = COALESCE($7, provider_cost_possible) \
                 WHERE id = $2 AND account_id = $3 AND status = $4 \
                 RETURNING price_micros",
            )
            .bind(now_millis())
            .bind(generation_id)
            .bind(account_id)
            .bind(from.as_str())
            .bind(provider_run.map(|run| run.provider.as_str()))
            .bind(provider_run.and_then(|run| run.cost).map(|cost| cost.0))
            .bind(provider_run.map(|run| run.cost_is_possible))
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
    /// An account's list (`account_list_pieces`) read as a whole: on
    /// PostgreSQL on the point readers' connections (`point_readers.rs`),
    /// on SQLite through the reader pool when the inline read would wait.
    async fn list_generation_rows(
        &self,
        pieces: &[ListPiece<'_>],
    ) -> Result<Vec<GenerationRow>, StoreError> {
        match &self.database {
            Database::Sqlite(database) => {
                let mut query = sqlx::QueryBuilder::new(ACCOUNT_LIST_SELECT);
                push_list_pieces(&mut query, pieces);
                Ok(query.build_query_as().fetch_all(database.reader()).await?)
            }
            Database::Postgres(database) => {
                let mut query = sqlx::QueryBuilder::new(ACCOUNT_LIST_SELECT);
                push_list_pieces(&mut query, pieces);
                database.read_all(query).await
            }
        }
    }
}

/// The operations of `generations` (see `Store::generations`).
#[derive(Clone, Copy)]
pub struct Generations<'store> {
    pub(super) store: &'store Store,
}

impl Generations<'_> {
    /// The account's submit under `idempotency`'s key within
    /// `IDEMPOTENCY_WINDOW`, if there was one, and whether it was the same
    /// request, so that a retry is answered its generation (or refused as a
    /// conflict) before anything else is checked.
    pub async fn earlier_submit(
        self,
        account_id: &str,
        idempotency: &IdempotencyKey,
    ) -> Result<Option<EarlierSubmit>, StoreError> {
        let found: Option<(String, Option<String>)> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as(
                "SELECT id, request_sha256 FROM generations \
                 WHERE account_id = $1 AND idempotency_key = $2 AND created_at >= $3",
            )
            .bind(account_id)
            .bind(&idempotency.key)
            .bind(now_millis() - IDEMPOTENCY_WINDOW.as_millis() as i64)
        )?;
        let Some((earlier_id, earlier_digest)) = found else {
            return Ok(None);
        };
        if earlier_digest.as_deref() != Some(idempotency.request_sha256.as_str()) {
            return Ok(Some(EarlierSubmit::OtherRequest));
        }
        let generation = self
            .store
            .generations()
            .get(account_id, &earlier_id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("an earlier submit's generation vanished".into()))?;
        Ok(Some(EarlierSubmit::SameRequest(Box::new(generation))))
    }

    pub async fn get(
        self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Option<Generation>, StoreError> {
        let row: Option<GenerationRow> = match &self.store.database {
            Database::Postgres(database) => {
                database.read_generation(generation_id, account_id).await?
            }
            Database::Sqlite(_) => {
                self.store
                    .point_read(GENERATION_OF_ACCOUNT, &[generation_id, account_id])
                    .await?
            }
        };
        row.map(Generation::try_from).transpose()
    }

    pub async fn list(
        self,
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
        let pieces = account_list_pieces(account_id, filter);
        let rows = match &self.store.database {
            // SQLite reads the page inline (see `inline_reads.rs`): sqlx's
            // connection thread costs a hand-off per statement and per row.
            Database::Sqlite(database) => {
                let statement = InlineListStatement::new(ACCOUNT_LIST_SELECT, &pieces);
                database
                    .read_all(
                        &statement.text,
                        &statement.values,
                        self.store.list_generation_rows(&pieces),
                    )
                    .await?
            }
            Database::Postgres(_) => self.store.list_generation_rows(&pieces).await?,
        };
        rows.into_iter().map(Generation::try_from).collect()
    }

    /// An account's list as `list_generations` reads it, handed to `visit`
    /// one generation at a time, newest first, instead of collected. On
    /// SQLite each row is read in place and none of its texts is copied:
    /// the API's list writes its answer from these (issue 42).
    pub async fn visit(
        self,
        account_id: &str,
        filter: &ListFilter,
        mut visit: impl FnMut(GenerationView<'_>) + Send,
    ) -> Result<(), StoreError> {
        let pieces = account_list_pieces(account_id, filter);
        if let Database::Sqlite(database) = &self.store.database {
            let statement = InlineListStatement::new(ACCOUNT_LIST_SELECT, &pieces);
            let read_inline =
                database.for_each_inline_row(&statement.text, &statement.values, |row| {
                    visit(view_of_inline_row(row)?);
                    Ok(())
                })?;
            if read_inline {
                return Ok(());
            }
        }
        for row in self.store.list_generation_rows(&pieces).await? {
            visit(Generation::try_from(row)?.view());
        }
        Ok(())
    }

    /// How the database runs `list_generations` of `account_id` with
    /// `filter`, one line per step: `EXPLAIN QUERY PLAN` on SQLite,
    /// `EXPLAIN ANALYZE` on PostgreSQL (which runs it). The lists bench
    /// prints it, to say which index each shape of list uses.
    pub async fn explain_list(
        self,
        account_id: &str,
        filter: &ListFilter,
    ) -> Result<Vec<String>, StoreError> {
        let pieces = account_list_pieces(account_id, filter);
        match &self.store.database {
            // The plan of the inline reader's connections, which serve the
            // list, each planning a statement without its values.
            Database::Sqlite(database) => {
                let select = format!("EXPLAIN QUERY PLAN {ACCOUNT_LIST_SELECT}");
                let statement = InlineListStatement::new(&select, &pieces);
                let explained_on_reader = async {
                    let mut query = sqlx::QueryBuilder::new(select.as_str());
                    push_list_pieces(&mut query, &pieces);
                    Ok(query.build_query_as().fetch_all(database.reader()).await?)
                };
                let steps: Vec<PlanStep> = database
                    .read_all(&statement.text, &statement.values, explained_on_reader)
                    .await?;
                Ok(steps.into_iter().map(|step| step.detail).collect())
            }
            Database::Postgres(database) => {
                let mut query =
                    sqlx::QueryBuilder::new(format!("EXPLAIN ANALYZE {ACCOUNT_LIST_SELECT}"));
                push_list_pieces(&mut query, &pieces);
                let lines: Vec<(String,)> =
                    query.build_query_as().fetch_all(database.reader()).await?;
                Ok(lines.into_iter().map(|(line,)| line).collect())
            }
        }
    }

    /// The request media a generation is bound to, as submit recorded it.
    pub async fn media(self, generation_id: &str) -> Result<Option<Value>, StoreError> {
        let binding: Option<String> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar("SELECT binding FROM generation_media WHERE generation_id = $1")
                .bind(generation_id)
        )?;
        Ok(binding.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// The trace its submit was part of (`NewGeneration::traceparent`).
    pub async fn traceparent(self, generation_id: &str) -> Result<Option<String>, StoreError> {
        let traceparent: Option<Option<String>> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar("SELECT traceparent FROM generations WHERE id = $1")
                .bind(generation_id)
        )?;
        Ok(traceparent.flatten())
    }

    /// Cancels a queued generation and releases its hold, in one transaction.
    pub async fn cancel(
        self,
        account_id: &str,
        generation_id: &str,
    ) -> Result<CancelOutcome, StoreError> {
        self.store
            .cancel_from(account_id, generation_id, GenerationStatus::Queued, None)
            .await
    }

    /// Cancels a running generation whose provider job the provider ended
    /// at our cancel, and releases its hold, in one transaction, recording
    /// the provider and what the seconds the job ran first cost the
    /// operator; refused when the generation is no longer running.
    pub async fn cancel_canceled_at_provider(
        self,
        account_id: &str,
        generation_id: &str,
        provider_run: &ProviderRun,
    ) -> Result<CancelOutcome, StoreError> {
        self.store
            .cancel_from(
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
    pub async fn watch(self, generation_id: &str) -> super::GenerationWatch {
        self.store.watch_generation_changes(generation_id).await
    }

    /// Whether every committed change of a generation is announced to this
    /// process now (`true`), so that a watcher hears it without reading
    /// on a timer, and each change of that: always on SQLite, while the
    /// listener is connected on PostgreSQL.
    pub fn announcements_heard(self) -> tokio::sync::watch::Receiver<bool> {
        self.store.generation_announcements_heard()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A fresh SQLite store with two accounts (the second holding a few
    /// generations, so that a list that forgot its account would show
    /// them) and the first account's id.
    pub(in crate::store) async fn store_with_generations(
        directory: &std::path::Path,
    ) -> (std::sync::Arc<Store>, String) {
        let url = format!("sqlite://{}", directory.join("lists.sqlite").display());
        let store = crate::store::open(&url).await.unwrap();
        let mut accounts = Vec::new();
        for name in ["listed", "other"] {
            let created = store
                .accounts()
                .create(crate::store::NewAccount {
                    id: format!("acct_{name}"),
                    name: name.to_owned(),
                    initial_credit: Micros(1_000_000),
                    webhook_secret: "whsec_test".to_owned(),
                })
                .await
                .unwrap();
            accounts.push(created.id);
        }
        insert_generations(&store, &accounts[0], 60).await;
        insert_generations(&store, &accounts[1], 10).await;
        (store, accounts.swap_remove(0))
    }

    /// Inserts `count` generations of `account_id`: statuses and models in
    /// turn, two created in each millisecond (so that pages and cursors
    /// fall between generations of the same time, ordered by id), some with
    /// output or error and some without.
    async fn insert_generations(store: &Store, account_id: &str, count: i64) {
        let Database::Sqlite(sqlite) = &store.database else {
            unreachable!("the store was opened on SQLite");
        };
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $2) \
             INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, \
             output, error, price_micros, official_micros, source, webhook_url, attempts, \
             max_attempts, created_at, started_at, completed_at) \
             SELECT $1 || printf('_gen_%03d', i), $1, \
             'vendor_' || (i % 3 + 1) || '/model_' || (i % 3 + 1), \
             'vendor_' || (i % 3 + 1) || '/model_' || (i % 3 + 1) || '/text-to-video', \
             'text-to-video', \
             CASE i % 4 WHEN 0 THEN 'queued' WHEN 1 THEN 'succeeded' WHEN 2 THEN 'failed' \
             ELSE 'canceled' END, \
             '{\"prompt\":\"row ' || i || '\",\"duration\":5}', \
             CASE WHEN i % 4 = 1 THEN '{\"video_url\":\"https://example.com/' || i || '.mp4\"}' END, \
             CASE WHEN i % 4 = 2 THEN '{\"code\":\"generation_failed\",\"message\":\"no\"}' END, \
             250000 + i, 300000, 'api', CASE WHEN i % 5 = 0 THEN 'https://example.com/hook' END, \
             i % 3, 3, 1000 - i / 2, CASE WHEN i % 4 > 0 THEN 1000 - i / 2 END, \
             CASE WHEN i % 4 > 0 THEN 1001 - i / 2 END FROM n",
        )
        .bind(account_id)
        .bind(count)
        .execute(sqlite.writer())
        .await
        .unwrap();
    }

    async fn not_on_the_reader_pool() -> Result<Vec<GenerationRow>, StoreError> {
        panic!("the inline list fell back to the reader pool")
    }

    fn generations(rows: Vec<GenerationRow>) -> Vec<Generation> {
        rows.into_iter()
            .map(|row| Generation::try_from(row).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn the_inline_list_reads_the_rows_of_the_pool_for_every_filter_shape() {
        let directory = tempfile::tempdir().unwrap();
        let (store, account_id) = store_with_generations(directory.path()).await;
        let Database::Sqlite(sqlite) = &store.database else {
            unreachable!("the store was opened on SQLite");
        };
        let statuses = [
            None,
            Some(GenerationStatus::Succeeded),
            Some(GenerationStatus::Running),
        ];
        let models = [None, Some("vendor_2/model_2"), Some("vendor_6/model_6")];
        // Between the two generations of one millisecond, then after the
        // oldest: the second finds nothing.
        let cursors = [
            None,
            Some((990, format!("{account_id}_gen_021"))),
            Some((0, String::new())),
        ];
        let limits = [1, 7, 100];
        let mut pages_with_rows = 0;
        for status in statuses {
            for model in models {
                for before in &cursors {
                    for limit in limits {
                        let filter = ListFilter {
                            status,
                            model: model.map(str::to_owned),
                            before: before.clone(),
                            limit,
                        };
                        let pieces = account_list_pieces(&account_id, &filter);
                        let statement = InlineListStatement::new(ACCOUNT_LIST_SELECT, &pieces);
                        let inline = sqlite
                            .read_all(&statement.text, &statement.values, not_on_the_reader_pool())
                            .await
                            .unwrap();
                        let pooled = store.list_generation_rows(&pieces).await.unwrap();
                        let (inline, pooled) = (generations(inline), generations(pooled));
                        assert_eq!(inline, pooled, "{filter:?}");
                        // The rows read in place are the pool's rows.
                        let mut visited = 0;
                        store
                            .generations()
                            .visit(&account_id, &filter, |generation| {
                                assert_eq!(generation, pooled[visited].view(), "{filter:?}");
                                visited += 1;
                            })
                            .await
                            .unwrap();
                        assert_eq!(visited, pooled.len(), "{filter:?}");
                        assert!(inline.len() <= limit as usize, "{filter:?}");
                        pages_with_rows += usize::from(!inline.is_empty());
                    }
                }
            }
        }
        // Every status and model with rows, each before a cursor that
        // leaves some, at every limit: the comparisons above compared rows.
        assert_eq!(pages_with_rows, 2 * 2 * 2 * limits.len());
    }

    #[tokio::test]
    async fn every_shape_of_list_seeks_its_index_in_order_without_its_values() {
        let directory = tempfile::tempdir().unwrap();
        let (store, account_id) = store_with_generations(directory.path()).await;
        let shapes = [
            (None, None, "generations_account_recent"),
            (
                Some(GenerationStatus::Failed),
                None,
                "generations_account_status_recent",
            ),
            (
                None,
                Some("vendor_2/model_2"),
                "generations_account_model_recent",
            ),
        ];
        for (status, model, index) in shapes {
            for before in [None, Some((990, "gen_021".to_owned()))] {
                let filter = ListFilter {
                    status,
                    model: model.map(str::to_owned),
                    before,
                    limit: 21,
                };
                let plan = store
                    .generations()
                    .explain_list(&account_id, &filter)
                    .await
                    .unwrap()
                    .join("; ");
                assert!(
                    plan.contains(&format!("USING INDEX {index} ")),
                    "{filter:?}: {plan}"
                );
                assert!(!plan.contains("TEMP B-TREE"), "{filter:?}: {plan}");
            }
        }
    }

    #[test]
    fn the_inline_statement_numbers_the_values_of_the_pieces_in_order_and_writes_the_page_size() {
        let filter = ListFilter {
            status: Some(GenerationStatus::Failed),
            model: Some("vendor_1/model_1".into()),
            before: Some((5, "gen_5".into())),
            limit: 21,
        };
        let pieces = account_list_pieces("acct_1", &filter);
        let statement =
            InlineListStatement::new("SELECT id FROM generations WHERE account_id = ", &pieces);
        assert_eq!(
            statement.text,
            "SELECT id FROM generations WHERE account_id = $1 AND status = $2 AND model = $3 \
             AND (created_at, id) < ($4, $5) ORDER BY created_at DESC, id DESC LIMIT 21"
        );
        assert_eq!(
            format!("{:?}", statement.values),
            r#"[Text("acct_1"), Text("failed"), Text("vendor_1/model_1"), Integer(5), Text("gen_5")]"#
        );
        // The sqlx builder writes the same statement for PostgreSQL.
        let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new(
            "SELECT id FROM generations WHERE account_id = ",
        );
        push_list_pieces(&mut query, &pieces);
        assert_eq!(query.sql().as_str(), statement.text);
    }
}
