//! Submitting a generation with its hold, the one write on the hot path,
//! done the way each database does it best without loosening any rule: the
//! account is locked first, then the idempotent replay, the concurrency cap
//! and the balance are decided, and the generation, the hold and its ledger
//! row are written, in the transaction that inserts the generation; a
//! refused submit writes none of them.
//!
//! Submits are grouped (`group_commit.rs`): the submits that arrive
//! together share one transaction and one commit, each decided in arrival
//! order as if it were alone, so that the flush of the log to disk at the
//! commit is paid once for all of them.
//!
//! SQLite runs the statements of each submit in one write transaction
//! (`BEGIN IMMEDIATE … COMMIT`) per batch on its single writer connection.
//! PostgreSQL calls the function `vidgate_submit_generation` for a submit
//! alone, and `vidgate_submit_generations` for a batch, which calls the
//! former for each submit in account order. Each is one file,
//! `migrations/postgres/functions/<name>.sql`, applied after the numbered
//! migrations whenever it changes (`schema.rs`); the rules below and the
//! function's are the same rules, held to each other by the behaviour
//! suites, which run on both stores. The functions run the statements in
//! the server, so the account rows stay locked for one round trip instead
//! of one per statement, and two nodes' batches lock accounts in the same
//! order and cannot deadlock. That lock is what bounds one account's
//! submits per second across all nodes; a batch pays it, and the commit,
//! once for many submits. Sending these statements from here instead made
//! half the submits a second or less in batches (BENCHMARKS.md, session
//! 21).

use sqlx::{PgPool, SqlitePool};
use vidgate_core::{GenerationStatus, Micros};

use super::accounts::{Account, SPEND_LIMIT_OF_KEY, SpendLimitRow, spend_limit_from_row};
use super::database::{Database, WriteTransaction};
use super::generations::Generations;
use super::generations::{
    GENERATION_BY_ID, Generation, GenerationRow, IDEMPOTENCY_WINDOW, NewGeneration, Source,
    SubmitOutcome, SubmitRefusal,
};
use super::group_commit::{BatchSubmitter, SubmitAnswer};
use super::ledger::Movement;
use super::postgres::WORK_CHANNEL;
use super::sqlite::begin_immediate;
use super::{Store, StoreError, now_millis};
use crate::spend_limits::SpendLimit;

impl Generations<'_> {
    /// In one transaction: idempotent replay, the concurrency limit, the
    /// balance check, the hold and the insert of the queued generation.
    /// The submit joins its database's group commit (`group_commit.rs`),
    /// whose batch task hands it to `SqliteSubmitter` or `PgSubmitter`
    /// below.
    pub async fn submit(self, generation: NewGeneration) -> Result<SubmitOutcome, SubmitRefusal> {
        match &self.store.database {
            Database::Sqlite(database) => database.submits().submit(generation).await,
            Database::Postgres(database) => database.submits().submit(generation).await,
        }
    }
}

/// The record of a generation just inserted as queued at `now`, as a read
/// would return it, without reading it back.
fn queued_generation(generation: &NewGeneration, now: i64) -> Generation {
    Generation {
        id: generation.id.clone(),
        account_id: generation.account_id.clone(),
        model: generation.model.clone(),
        endpoint: generation.endpoint.clone(),
        mode: generation.mode.clone(),
        status: GenerationStatus::Queued,
        input: generation.input.clone(),
        output: None,
        error: None,
        price: generation.price,
        official_price: generation.official_price,
        source: generation.source.as_str().to_owned(),
        webhook_url: generation.webhook_url.clone(),
        attempts: 0,
        created_at: now,
        started_at: None,
        completed_at: None,
    }
}

/// The idempotency key and request digest of a submit, as the statements
/// bind them (both `None` without a key).
fn idempotency_columns(generation: &NewGeneration) -> (Option<&str>, Option<&str>) {
    match &generation.idempotency {
        Some(idempotency) => (
            Some(idempotency.key.as_str()),
            Some(idempotency.request_sha256.as_str()),
        ),
        None => (None, None),
    }
}

/// Binds what a submit stores of `$generation`, and `$now` as its creation
/// time, in the order both submits take them: `$1` to `$14` of SQLite's
/// INSERT and the first fourteen parameters of PostgreSQL's
/// `vidgate_submit_generation`. It is a macro because the two are different
/// query types (a `Query` of SQLite, a `QueryAs` of PostgreSQL) with no
/// common `bind` to be generic over.
macro_rules! bind_submitted_generation {
    ($query:expr, $generation:expr, $now:expr) => {{
        let generation: &NewGeneration = $generation;
        let (idempotency_key, request_sha256) = idempotency_columns(generation);
        $query
            .bind(&generation.id)
            .bind(&generation.account_id)
            .bind(&generation.api_key_id)
            .bind(&generation.model)
            .bind(&generation.endpoint)
            .bind(&generation.mode)
            .bind(generation.input.text())
            .bind(generation.price.0)
            .bind(generation.official_price.0)
            .bind(&generation.webhook_url)
            .bind(idempotency_key)
            .bind(request_sha256)
            .bind(generation.max_attempts)
            .bind($now)
    }};
}

/// Decides one SQLite submit inside `transaction` at `now`, in the order of
/// PostgreSQL's function: the account, the replay, the refusals, then the
/// writes. A refusal is an answer and writes nothing that matters (at most
/// it forgets an idempotency key older than the window, which any later
/// submit would forget too); an error means the transaction must not
/// commit.
async fn submit_in(
    transaction: &mut WriteTransaction,
    generation: &NewGeneration,
    now: i64,
) -> Result<SubmitAnswer, StoreError> {
    // The account is read first: its balance and limit are what the
    // submits before this one in the transaction left.
    let Some(account) = Store::account_in(transaction, &generation.account_id).await? else {
        return Ok(Err(SubmitRefusal::AccountNotFound));
    };
    if let Some(answer) = replay_in(transaction, generation, now).await? {
        return Ok(answer);
    }
    if let Some(refusal) = refusal_in(transaction, &account, generation, now).await? {
        return Ok(Err(refusal));
    }
    insert_queued_in(transaction, generation, now).await?;
    Ok(Ok(SubmitOutcome::Created(queued_generation(
        generation, now,
    ))))
}

/// The answer to a submit whose idempotency key an earlier submit of the
/// account used within the window: that generation, or a refusal when the
/// request differs; `None` when the key is new (or there is none).
async fn replay_in(
    transaction: &mut WriteTransaction,
    generation: &NewGeneration,
    now: i64,
) -> Result<Option<SubmitAnswer>, StoreError> {
    let Some(idempotency) = &generation.idempotency else {
        return Ok(None);
    };
    // A key older than the window is forgotten so that it can be used
    // again, as the Idempotency-Key convention expects.
    execute_in_transaction!(
        transaction,
        sqlx::query(
            "UPDATE generations SET idempotency_key = NULL \
             WHERE account_id = $1 AND idempotency_key = $2 AND created_at < $3",
        )
        .bind(&generation.account_id)
        .bind(&idempotency.key)
        .bind(now - IDEMPOTENCY_WINDOW.as_millis() as i64)
    )?;
    let earlier: Option<(String, Option<String>)> = fetch_in_transaction!(
        transaction,
        fetch_optional,
        sqlx::query_as(
            "SELECT id, request_sha256 FROM generations \
             WHERE account_id = $1 AND idempotency_key = $2",
        )
        .bind(&generation.account_id)
        .bind(&idempotency.key)
    )?;
    let Some((earlier_id, earlier_digest)) = earlier else {
        return Ok(None);
    };
    if earlier_digest.as_deref() != Some(idempotency.request_sha256.as_str()) {
        return Ok(Some(Err(SubmitRefusal::IdempotencyMismatch)));
    }
    let original = Store::generation_in(transaction, &earlier_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt("replayed generation vanished".into()))?;
    Ok(Some(Ok(SubmitOutcome::Replayed(original))))
}

/// Why `account` may not submit `generation` now, if it may not: the
/// concurrency cap, then the balance, then the key's spend limit.
async fn refusal_in(
    transaction: &mut WriteTransaction,
    account: &Account,
    generation: &NewGeneration,
    now: i64,
) -> Result<Option<SubmitRefusal>, StoreError> {
    let active: i64 = fetch_in_transaction!(
        transaction,
        fetch_one,
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM generations \
             WHERE account_id = $1 AND status IN ('queued', 'running')",
        )
        .bind(&generation.account_id)
    )?;
    let limit = account.limits.max_concurrent as i64;
    if active >= limit {
        return Ok(Some(SubmitRefusal::ConcurrencyLimit { limit }));
    }
    // A debt (money taken back after it was spent, migration 0020) stops
    // every submit until it is paid, a free one too; the refusal reports
    // the balance the customer sees, negative while the debt is owed.
    if account.debt > Micros::ZERO || account.balance < generation.price {
        return Ok(Some(SubmitRefusal::InsufficientBalance {
            balance: account.shown_balance(),
            price: generation.price,
        }));
    }
    spend_limit_refusal_in(transaction, generation, now).await
}

/// Writes the accepted submit: the queued generation, its media binding,
/// the hold with its ledger row, and the announcement of the work.
async fn insert_queued_in(
    transaction: &mut WriteTransaction,
    generation: &NewGeneration,
    now: i64,
) -> Result<(), StoreError> {
    execute_in_transaction!(
        transaction,
        bind_submitted_generation!(
            sqlx::query(
                "INSERT INTO generations (id, account_id, api_key_id, model, endpoint, mode, \
                 status, input, price_micros, official_micros, source, webhook_url, \
                 idempotency_key, request_sha256, max_attempts, created_at, traceparent) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9, $15, $10, $11, \
                 $12, $13, $14, $16)",
            ),
            generation,
            now
        )
        .bind(generation.source.as_str())
        .bind(&generation.traceparent)
    )?;
    if let Some(binding) = &generation.media_binding {
        execute_in_transaction!(
            transaction,
            sqlx::query("INSERT INTO generation_media (generation_id, binding) VALUES ($1, $2)")
                .bind(&generation.id)
                .bind(binding.to_string())
        )?;
    }
    Store::move_money(
        transaction,
        &generation.account_id,
        Some(&generation.id),
        Movement::Hold,
        generation.price,
    )
    .await?;
    Store::announce_work(transaction, &generation.id).await
}

/// The refusal of a submit whose hold would take its API key past the key's
/// spend limit (migration 0021), decided in the submit's transaction: what
/// the key's generations of the period hold or were charged, with this
/// one's price, must stay within the limit.
async fn spend_limit_refusal_in(
    transaction: &mut WriteTransaction,
    generation: &NewGeneration,
    now: i64,
) -> Result<Option<SubmitRefusal>, StoreError> {
    let Some(limit) = Store::spend_limit_in(transaction, &generation.api_key_id).await? else {
        return Ok(None);
    };
    let spent: i64 = fetch_in_transaction!(
        transaction,
        fetch_one,
        sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(price_micros), 0) AS BIGINT) FROM generations \
             WHERE api_key_id = $1 AND created_at >= $2 \
             AND status IN ('queued', 'running', 'succeeded')",
        )
        .bind(&generation.api_key_id)
        .bind(limit.period.start(now))
    )?;
    if spent + generation.price.0 > limit.amount.0 {
        return Ok(Some(SubmitRefusal::SpendLimit {
            limit,
            spent: Micros(spent),
            price: generation.price,
        }));
    }
    Ok(None)
}

/// SQLite's submits: a batch is one write transaction on the single writer
/// connection, so one sync of the write-ahead log at its commit.
#[derive(Clone)]
pub(super) struct SqliteSubmitter {
    pub(super) writer: SqlitePool,
}

impl BatchSubmitter for SqliteSubmitter {
    async fn submit_alone(&self, generation: &NewGeneration) -> SubmitAnswer {
        let mut answers = self
            .submit_together(std::slice::from_ref(generation))
            .await?;
        answers
            .pop()
            .ok_or_else(|| StoreError::Corrupt("a submit went unanswered".into()))?
    }

    async fn submit_together(
        &self,
        batch: &[NewGeneration],
    ) -> Result<Vec<SubmitAnswer>, StoreError> {
        let mut transaction = WriteTransaction::Sqlite(begin_immediate(&self.writer).await?);
        let now = now_millis();
        let mut answers = Vec::with_capacity(batch.len());
        for generation in batch {
            answers.push(submit_in(&mut transaction, generation, now).await?);
        }
        transaction.commit().await?;
        Ok(answers)
    }
}

/// What `vidgate_submit_generation` answers for one submit: the outcome,
/// the generation it names (the new one, or the one a key replays), and
/// the balance and limit a refusal reports.
type SubmittedRow = (String, Option<String>, Option<i64>, Option<i64>);

/// What `vidgate_submit_generations` answers for each submit of a batch:
/// its position in the batch (from 1) and then as `SubmittedRow`.
type BatchSubmittedRow = (i32, String, Option<String>, Option<i64>, Option<i64>);

/// Whether a submit writes more than PostgreSQL's submit functions do
/// (`label_submits`): another surface than `/api/v1/run`, or a trace.
fn needs_labels(generation: &NewGeneration) -> bool {
    generation.source != Source::Api || generation.traceparent.is_some()
}

/// Writes what PostgreSQL's submit functions do not (their bodies stay as
/// migrations 0016 and 0028 left them, which other work changes too): the
/// surface of each of `batch` that was not submitted through `/api/v1/run`
/// into its `source`, and the trace of each traced submit into its
/// `traceparent`, in the transaction of its submit, so no reader sees it
/// under `api` or a worker without its trace. A generation the batch did
/// not insert (refused, or a replay answered with an earlier one) has no
/// row under its new id, so nothing else is touched.
async fn label_submits(
    transaction: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    batch: &[NewGeneration],
) -> Result<(), sqlx::Error> {
    let labelled: Vec<&NewGeneration> = batch
        .iter()
        .filter(|generation| needs_labels(generation))
        .collect();
    sqlx::query(
        "UPDATE generations SET source = labels.source, traceparent = labels.traceparent \
         FROM unnest($1::text[], $2::text[], $3::text[]) AS labels(id, source, traceparent) \
         WHERE generations.id = labels.id",
    )
    .bind(
        labelled
            .iter()
            .map(|generation| generation.id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        labelled
            .iter()
            .map(|generation| generation.source.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        labelled
            .iter()
            .map(|generation| generation.traceparent.as_deref())
            .collect::<Vec<_>>(),
    )
    .execute(&mut **transaction)
    .await?;
    Ok(())
}

/// PostgreSQL's submits: one statement each, alone or as a batch, so every
/// account lock lasts one round trip (two for another surface's submit,
/// `label_submits`).
#[derive(Clone)]
pub(super) struct PgSubmitter {
    pub(super) pool: PgPool,
}

impl PgSubmitter {
    /// The answer `row` gives for `generation`, submitted at `now`; a
    /// replayed generation is read once its submit's statement committed.
    async fn answer(
        &self,
        generation: &NewGeneration,
        now: i64,
        (outcome, generation_id, balance, limit): SubmittedRow,
    ) -> SubmitAnswer {
        let corrupt = |what: &str| {
            SubmitRefusal::Store(StoreError::Corrupt(format!(
                "the submit function answered {outcome:?} without {what}"
            )))
        };
        match outcome.as_str() {
            "created" => Ok(SubmitOutcome::Created(queued_generation(generation, now))),
            "replayed" => {
                let earlier_id = generation_id.as_deref().ok_or_else(|| corrupt("an id"))?;
                let row: Option<GenerationRow> = sqlx::query_as(GENERATION_BY_ID)
                    .bind(earlier_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(StoreError::from)?;
                let original = row
                    .map(Generation::try_from)
                    .transpose()?
                    .ok_or_else(|| StoreError::Corrupt("replayed generation vanished".into()))?;
                Ok(SubmitOutcome::Replayed(original))
            }
            "idempotency_mismatch" => Err(SubmitRefusal::IdempotencyMismatch),
            "concurrency_limit" => Err(SubmitRefusal::ConcurrencyLimit {
                limit: limit.ok_or_else(|| corrupt("the limit"))?,
            }),
            "insufficient_balance" => Err(SubmitRefusal::InsufficientBalance {
                balance: Micros(balance.ok_or_else(|| corrupt("the balance"))?),
                price: generation.price,
            }),
            "account_not_found" => Err(SubmitRefusal::AccountNotFound),
            // The function answers the key's spend as `balance` and its
            // limit as `concurrency_limit`; the period is the key's.
            "spend_limit" => {
                let limit = self
                    .spend_limit(&generation.api_key_id)
                    .await?
                    .ok_or_else(|| corrupt("the key's limit"))?;
                Err(SubmitRefusal::SpendLimit {
                    limit,
                    spent: Micros(balance.ok_or_else(|| corrupt("the key's spend"))?),
                    price: generation.price,
                })
            }
            other => Err(SubmitRefusal::Store(StoreError::Corrupt(format!(
                "the submit function answered the unknown outcome {other:?}"
            )))),
        }
    }
}

impl PgSubmitter {
    /// The key's spend limit, read after the submit function refused a
    /// submit for it.
    async fn spend_limit(&self, key_id: &str) -> Result<Option<SpendLimit>, StoreError> {
        let row: Option<SpendLimitRow> = sqlx::query_as(SPEND_LIMIT_OF_KEY)
            .bind(key_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.and_then(spend_limit_from_row))
    }
}

impl BatchSubmitter for PgSubmitter {
    async fn submit_alone(&self, generation: &NewGeneration) -> SubmitAnswer {
        let now = now_millis();
        // One statement outside an explicit transaction is its own
        // transaction: the function's writes commit together or not at all.
        let query = bind_submitted_generation!(
            sqlx::query_as(
                "SELECT outcome, generation_id, balance, concurrency_limit FROM vidgate_submit_generation($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
            ),
            generation,
            now
        )
        .bind(IDEMPOTENCY_WINDOW.as_millis() as i64)
        .bind(WORK_CHANNEL)
        .bind(generation.media_binding.as_ref().map(|binding| binding.to_string()));
        let row: SubmittedRow = if !needs_labels(generation) {
            query.fetch_one(&self.pool).await
        } else {
            async {
                let mut transaction = self.pool.begin().await?;
                let row = query.fetch_one(&mut *transaction).await?;
                label_submits(&mut transaction, std::slice::from_ref(generation)).await?;
                transaction.commit().await?;
                Ok::<_, sqlx::Error>(row)
            }
            .await
        }
        .map_err(StoreError::from)?;
        self.answer(generation, now, row).await
    }

    async fn submit_together(
        &self,
        batch: &[NewGeneration],
    ) -> Result<Vec<SubmitAnswer>, StoreError> {
        let now = now_millis();
        let column =
            |value: fn(&NewGeneration) -> String| batch.iter().map(value).collect::<Vec<_>>();
        let optional_column = |value: fn(&NewGeneration) -> Option<String>| {
            batch.iter().map(value).collect::<Vec<_>>()
        };
        let number_column =
            |value: fn(&NewGeneration) -> i64| batch.iter().map(value).collect::<Vec<_>>();
        // One statement, so one transaction: every submit of the batch
        // commits with the others or, on an error, none does (with another
        // surface's submit in it, two statements in one transaction).
        let query = sqlx::query_as(
            "SELECT item, outcome, generation_id, balance, concurrency_limit FROM vidgate_submit_generations($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        )
        .bind(column(|generation| generation.id.clone()))
        .bind(column(|generation| generation.account_id.clone()))
        .bind(column(|generation| generation.api_key_id.clone()))
        .bind(column(|generation| generation.model.clone()))
        .bind(column(|generation| generation.endpoint.clone()))
        .bind(column(|generation| generation.mode.clone()))
        .bind(column(|generation| generation.input.text().to_owned()))
        .bind(number_column(|generation| generation.price.0))
        .bind(number_column(|generation| generation.official_price.0))
        .bind(optional_column(|generation| generation.webhook_url.clone()))
        .bind(optional_column(|generation| {
            generation.idempotency.as_ref().map(|idempotency| idempotency.key.clone())
        }))
        .bind(optional_column(|generation| {
            generation
                .idempotency
                .as_ref()
                .map(|idempotency| idempotency.request_sha256.clone())
        }))
        .bind(number_column(|generation| generation.max_attempts))
        .bind(now)
        .bind(IDEMPOTENCY_WINDOW.as_millis() as i64)
        .bind(WORK_CHANNEL)
        .bind(optional_column(|generation| {
            generation.media_binding.as_ref().map(|binding| binding.to_string())
        }));
        let rows: Vec<BatchSubmittedRow> = if !batch.iter().any(needs_labels) {
            query.fetch_all(&self.pool).await?
        } else {
            let mut transaction = self.pool.begin().await?;
            let rows = query.fetch_all(&mut *transaction).await?;
            label_submits(&mut transaction, batch).await?;
            transaction.commit().await?;
            rows
        };
        // The batch has committed: from here on every submit gets an
        // answer of its own and none is made again.
        let mut rows_by_item: Vec<Option<SubmittedRow>> = vec![None; batch.len()];
        for (item, outcome, generation_id, balance, limit) in rows {
            // The function numbers the items from 1, as SQL arrays are.
            if let Some(slot) = usize::try_from(item)
                .ok()
                .and_then(|item| item.checked_sub(1))
                .and_then(|index| rows_by_item.get_mut(index))
            {
                *slot = Some((outcome, generation_id, balance, limit));
            }
        }
        let mut answers = Vec::with_capacity(batch.len());
        for (generation, row) in batch.iter().zip(rows_by_item) {
            answers.push(match row {
                Some(row) => self.answer(generation, now, row).await,
                None => Err(SubmitRefusal::Store(StoreError::Corrupt(
                    "vidgate_submit_generations left a submit unanswered".into(),
                ))),
            });
        }
        Ok(answers)
    }
}
