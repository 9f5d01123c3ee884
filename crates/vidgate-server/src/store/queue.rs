//! The queue: the generations table's queued rows, claimed by workers under
//! a lease, finished (capturing or releasing the hold), released at shutdown
//! or rescued when their worker died.

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::Value;
use sqlx::AssertSqlSafe;
use vidgate_core::Micros;

use super::database::{Database, RowLocking, WriteTransaction};
use super::generations::{Generation, GenerationRow};
use super::ledger::Movement;
use super::{PgStore, SqliteStore, Store, StoreError, now_millis};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureDetail {
    pub code: String,
    pub message: String,
}

/// Which hosted provider ran a generation, and what it cost the operator
/// (`None` when the backends file has no price for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRun {
    pub provider: String,
    pub cost: Option<Micros>,
    /// Whether `cost` is what the provider may have billed rather than
    /// what it did: a job vidgate cannot tell was made, or one a cancel
    /// deleted that may have finished first.
    pub cost_is_possible: bool,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct RescueReport {
    pub requeued: Vec<String>,
    pub failed: Vec<String>,
}

/// The queue's size and the money it holds, for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueDepth {
    pub queued: i64,
    pub running: i64,
    /// The prices of the queued and running generations: what every
    /// account's holds add up to.
    pub held: Micros,
}

/// Which models' jobs a claim may take: the hosted pool takes only the
/// models that run at a provider, the CPU workers every other model.
#[derive(Debug, Clone, Copy)]
pub enum ClaimableModels<'a> {
    /// Only these models' jobs.
    Only(&'a [String]),
    /// Every model's jobs but these.
    AllBut(&'a [String]),
}

/// The pieces of the claim statement that the two databases spell apart.
trait ClaimDialect {
    /// The model ids of the JSON array bound as `$4`, as a subquery.
    const MODELS_OF_JSON_LIST: &'static str;
    /// The id of the job to claim: the oldest claimable job of the first
    /// account of `turns` (a subquery of `account_id`, `head` and
    /// `last_turn`) in turn order; `claimable_g` is the model condition on
    /// `g`.
    fn pick_job(turns: &str, claimable_g: &str) -> String;
}

impl ClaimDialect for SqliteStore {
    const MODELS_OF_JSON_LIST: &'static str = "SELECT value FROM json_each($4)";

    /// SQLite's single writer needs no row locks: the account whose turn it
    /// is, then its oldest claimable job, each by an index.
    fn pick_job(turns: &str, claimable_g: &str) -> String {
        format!(
            "SELECT g.id FROM generations g \
             WHERE g.status = 'queued' AND {claimable_g} AND g.account_id = \
               (SELECT turns.account_id FROM ({turns}) turns \
                ORDER BY turns.last_turn, turns.head, turns.account_id LIMIT 1) \
             ORDER BY g.created_at, g.id LIMIT 1"
        )
    }
}

impl ClaimDialect for PgStore {
    const MODELS_OF_JSON_LIST: &'static str = "SELECT jsonb_array_elements_text(CAST($4 AS JSONB))";

    /// Claimers on several nodes pass over each other's rows: each account
    /// in turn order, its oldest claimable job that no one else has locked
    /// (`FOR UPDATE SKIP LOCKED` in the lateral subquery, the only level
    /// without an aggregate). The turns are sorted before the join, so the
    /// nested loop stops at the first account with such a job and locks
    /// only that job.
    fn pick_job(turns: &str, claimable_g: &str) -> String {
        format!(
            "SELECT head.id FROM \
               (SELECT * FROM ({turns}) unordered \
                ORDER BY last_turn, head, account_id) turns \
             CROSS JOIN LATERAL \
               (SELECT g.id FROM generations g \
                WHERE g.account_id = turns.account_id AND g.status = 'queued' \
                AND {claimable_g} \
                ORDER BY g.created_at, g.id LIMIT 1 FOR UPDATE SKIP LOCKED) head \
             ORDER BY turns.last_turn, turns.head, turns.account_id LIMIT 1"
        )
    }
}

/// The fair claim, for both databases. Accounts take turns: among the
/// accounts with a claimable queued job, the one whose last claim is
/// oldest, or that was never claimed for, goes first (then the one whose
/// oldest job is oldest), and its oldest claimable job is taken. So one
/// account's burst of thousands of jobs holds another account's single job
/// back by at most one claim per account waiting, instead of by the whole
/// burst. Ranking each account's queued jobs by age alone would not do:
/// every account's oldest job ranks first, so the lowest rank is always the
/// oldest job overall.
///
/// Claims are ordered by `claim_sequence`, one more than the highest given
/// so far, rather than by `started_at`: many claims fall in one
/// millisecond, and a tie would hand the turn back to the account with the
/// oldest jobs. (Two PostgreSQL nodes claiming at once may draw the same
/// number; the tie is harmless.)
///
/// `$1`..`$3` are the lease owner, the lease's end and now; `$4` the JSON
/// array of model ids and `$5` whether the claim takes only those (true) or
/// all but those (false). The indexes of migration 0018 serve every lookup.
/// The statement reads every queued job's index entry once (to find the
/// accounts waiting), so its cost grows with the queue, not with the table.
fn claim_statement<Dialect: ClaimDialect>() -> String {
    let models = Dialect::MODELS_OF_JSON_LIST;
    let turns = format!(
        "SELECT waiting.account_id, waiting.head, \
           COALESCE((SELECT MAX(served.claim_sequence) FROM generations served \
                     WHERE served.account_id = waiting.account_id \
                     AND served.claim_sequence IS NOT NULL), 0) AS last_turn \
         FROM (SELECT account_id, MIN(created_at) AS head FROM generations \
               WHERE status = 'queued' AND (model IN ({models})) = $5 \
               GROUP BY account_id) waiting"
    );
    let pick = Dialect::pick_job(&turns, &format!("(g.model IN ({models})) = $5"));
    format!(
        "UPDATE generations SET status = 'running', attempts = attempts + 1, \
         lease_owner = $1, lease_expires_at = $2, started_at = $3, \
         claim_sequence = (SELECT COALESCE(MAX(claimed.claim_sequence), 0) + 1 \
                           FROM generations claimed WHERE claimed.claim_sequence IS NOT NULL) \
         WHERE status = 'queued' AND id = ({pick}) \
         RETURNING {columns}",
        columns = GenerationRow::COLUMNS,
    )
}

impl Store {
    /// Fails an active generation and refunds its hold, inside the
    /// caller's transaction. The guard clause makes a lost race a no-op.
    async fn fail_in(
        transaction: &mut WriteTransaction,
        generation_id: &str,
        worker: &str,
        failure: &FailureDetail,
    ) -> Result<bool, StoreError> {
        let error = serde_json::json!({ "code": failure.code, "message": failure.message });
        let guard_sql = "UPDATE generations SET status = 'failed', error = $1, completed_at = $2, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $3 AND status = 'running' AND lease_owner = $4 \
             RETURNING account_id, price_micros";
        let finished: Option<(String, i64)> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(guard_sql)
                .bind(error.to_string())
                .bind(now_millis())
                .bind(generation_id)
                .bind(worker)
        )?;
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
}

/// The operations of `queue` (see `Store::queue`).
#[derive(Clone, Copy)]
pub struct Queue<'store> {
    pub(super) store: &'store Store,
}

impl Queue<'_> {
    /// Claims a queued job of any model for `worker`, as
    /// [`Store::claim_next_among`] does.
    pub async fn claim_next(
        self,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<Generation>, StoreError> {
        self.store
            .queue()
            .claim_next_among(worker, lease, ClaimableModels::AllBut(&[]))
            .await
    }

    /// Claims a queued job of `models` for `worker`, marking it running
    /// under a lease that ends after `lease`. Accounts take turns (see
    /// `claim_statement`); within an account the oldest job goes first.
    pub async fn claim_next_among(
        self,
        worker: &str,
        lease: Duration,
        models: ClaimableModels<'_>,
    ) -> Result<Option<Generation>, StoreError> {
        static SQLITE_CLAIM: LazyLock<String> = LazyLock::new(claim_statement::<SqliteStore>);
        static POSTGRES_CLAIM: LazyLock<String> = LazyLock::new(claim_statement::<PgStore>);
        let claim = match &self.store.database {
            Database::Sqlite(_) => SQLITE_CLAIM.as_str(),
            Database::Postgres(_) => POSTGRES_CLAIM.as_str(),
        };
        let (listed, only_listed) = match models {
            ClaimableModels::Only([]) => return Ok(None),
            ClaimableModels::Only(listed) => (listed, true),
            ClaimableModels::AllBut(listed) => (listed, false),
        };
        let now = now_millis();
        // One statement: the row whose turn it is is locked (rows
        // other claimers hold are skipped) and taken in the same step.
        let row: Option<GenerationRow> = fetch_on_writer!(
            self.store,
            fetch_optional,
            sqlx::query_as(claim)
                .bind(worker)
                .bind(now + lease.as_millis() as i64)
                .bind(now)
                .bind(serde_json::json!(listed).to_string())
                .bind(only_listed)
        )?;
        let claimed = row.map(Generation::try_from).transpose()?;
        if let Some(generation) = &claimed {
            self.store.announce_generation_change(&generation.id).await;
        }
        Ok(claimed)
    }

    /// Extends the leases of the running jobs held by `owners` (a hosted
    /// pool's claims in flight, each its own owner), a few hundred to a
    /// statement; the owners whose leases were extended. A claim whose owner
    /// is missing lost its lease. Only the listed claims are kept: a lease
    /// whose job's task ended without recording an outcome (its database
    /// write failed) runs out and is rescued, where extending every lease
    /// of the pool kept such a job `running` for ever.
    pub async fn extend_leases(
        self,
        owners: &[String],
        lease: Duration,
    ) -> Result<Vec<String>, StoreError> {
        /// Well under SQLite's and PostgreSQL's limits on bound values.
        const OWNERS_PER_STATEMENT: usize = 500;
        let expires_at = now_millis() + lease.as_millis() as i64;
        let mut extended = Vec::with_capacity(owners.len());
        for chunk in owners.chunks(OWNERS_PER_STATEMENT) {
            let rows: Vec<(String,)> = on_writer!(self.store, |writer| {
                let mut query =
                    sqlx::QueryBuilder::new("UPDATE generations SET lease_expires_at = ");
                query
                    .push_bind(expires_at)
                    .push(" WHERE status = 'running' AND lease_owner IN (");
                let mut separated = query.separated(", ");
                for owner in chunk {
                    separated.push_bind(owner.as_str());
                }
                query.push(") RETURNING lease_owner");
                query.build_query_as().fetch_all(writer).await
            })?;
            extended.extend(rows.into_iter().map(|(owner,)| owner));
        }
        Ok(extended)
    }

    /// The submit times (Unix ms) of the oldest queued job of each of the
    /// `accounts` accounts that have waited longest, oldest first.
    pub async fn longest_waiting_accounts(self, accounts: usize) -> Result<Vec<i64>, StoreError> {
        let oldest: Vec<(i64,)> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT MIN(created_at) AS oldest FROM generations \
                 WHERE status = 'queued' GROUP BY account_id \
                 ORDER BY oldest LIMIT $1",
            )
            .bind(accounts as i64)
        )?;
        Ok(oldest.into_iter().map(|(created_at,)| created_at).collect())
    }

    /// Extends the lease; false when the worker no longer holds it.
    pub async fn extend_lease(
        self,
        generation_id: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let changed = execute_on_writer!(
            self.store,
            sqlx::query(
                "UPDATE generations SET lease_expires_at = $1 \
                 WHERE id = $2 AND status = 'running' AND lease_owner = $3",
            )
            .bind(now_millis() + lease.as_millis() as i64)
            .bind(generation_id)
            .bind(worker)
        )?;
        Ok(changed == 1)
    }

    /// Marks the job succeeded, records the provider that ran it with its
    /// cost, and captures its hold; false when the guard no longer matches
    /// (the lease was lost), in which case nothing changed.
    pub async fn finish_succeeded(
        self,
        generation_id: &str,
        worker: &str,
        output: Value,
        provider_run: Option<&ProviderRun>,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let finished: Option<(String, i64)> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_as(
                "UPDATE generations SET status = 'succeeded', output = $1, completed_at = $2, \
                 lease_owner = NULL, lease_expires_at = NULL, provider = $5, \
                 provider_cost_micros = $6 \
                 WHERE id = $3 AND status = 'running' AND lease_owner = $4 \
                 RETURNING account_id, price_micros",
            )
            .bind(output.to_string())
            .bind(now_millis())
            .bind(generation_id)
            .bind(worker)
            .bind(provider_run.map(|run| run.provider.as_str()))
            .bind(provider_run.and_then(|run| run.cost).map(|cost| cost.0))
        )?;
        let Some((account_id, price)) = finished else {
            return Ok(false);
        };
        Store::move_money(
            &mut transaction,
            &account_id,
            Some(generation_id),
            Movement::Capture,
            Micros(price),
        )
        .await?;
        Store::enqueue_webhook_in(&mut transaction, generation_id).await?;
        transaction.commit().await?;
        self.store.announce_generation_change(generation_id).await;
        Ok(true)
    }

    /// Marks the job failed and refunds its hold; false when the worker no
    /// longer holds the job's lease, in which case nothing changed.
    pub async fn finish_failed(
        self,
        generation_id: &str,
        worker: &str,
        failure: FailureDetail,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let failed = Store::fail_in(&mut transaction, generation_id, worker, &failure).await?;
        transaction.commit().await?;
        if failed {
            self.store.announce_generation_change(generation_id).await;
        }
        Ok(failed)
    }

    /// Records on a running generation a provider job it may have made
    /// without a result (a submit whose outcome its provider cannot tell,
    /// a task a cancel deleted that may have finished first): the
    /// provider, and what such a job costs the operator, marked as
    /// possible, which the generation keeps when it then fails. False when
    /// it is no longer running.
    pub async fn record_possible_provider_cost(
        self,
        generation_id: &str,
        provider_run: &ProviderRun,
    ) -> Result<bool, StoreError> {
        let changed = execute_on_writer!(
            self.store,
            sqlx::query(
                "UPDATE generations SET provider = $1, provider_cost_micros = $2, \
                 provider_cost_possible = TRUE \
                 WHERE id = $3 AND status = 'running'",
            )
            .bind(provider_run.provider.as_str())
            .bind(provider_run.cost.map(|cost| cost.0))
            .bind(generation_id)
        )?;
        Ok(changed == 1)
    }

    /// Puts a running job back in the queue without counting the attempt
    /// (used at shutdown); false when the worker no longer holds it.
    pub async fn release_to_queue(
        self,
        generation_id: &str,
        worker: &str,
    ) -> Result<bool, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let changed = execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "UPDATE generations SET status = 'queued', attempts = attempts - 1, \
                 lease_owner = NULL, lease_expires_at = NULL, started_at = NULL \
                 WHERE id = $1 AND status = 'running' AND lease_owner = $2",
            )
            .bind(generation_id)
            .bind(worker)
        )?;
        let released = changed == 1;
        if released {
            Store::announce_work(&mut transaction, generation_id).await?;
        }
        transaction.commit().await?;
        if released {
            self.store.announce_generation_change(generation_id).await;
        }
        Ok(released)
    }

    /// Re-queues running jobs whose lease expired, or fails and refunds them
    /// after their last attempt.
    pub async fn rescue_expired_leases(self) -> Result<RescueReport, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let now = now_millis();
        // Ordered by account so that two rescuers on different nodes
        // lock accounts in the same order and cannot deadlock.
        let statement = format!(
            concat!(
                "SELECT id, lease_owner, attempts, max_attempts FROM generations \
                 WHERE status = 'running' AND lease_expires_at < $1 \
                 ORDER BY account_id, id ",
                "{locking}"
            ),
            locking = transaction.row_locking(RowLocking::SkipLocked),
        );
        let expired: Vec<(String, String, i64, i64)> = fetch_in_transaction!(
            &mut transaction,
            fetch_all,
            sqlx::query_as(AssertSqlSafe(statement)).bind(now)
        )?;
        let mut report = RescueReport::default();
        for (generation_id, owner, attempts, max_attempts) in expired {
            if attempts < max_attempts {
                let requeued = execute_in_transaction!(
                    &mut transaction,
                    sqlx::query(
                        "UPDATE generations SET status = 'queued', lease_owner = NULL, \
                         lease_expires_at = NULL, started_at = NULL \
                         WHERE id = $1 AND status = 'running' AND lease_owner = $2",
                    )
                    .bind(&generation_id)
                    .bind(&owner)
                )?;
                if requeued == 1 {
                    Store::announce_work(&mut transaction, &generation_id).await?;
                    report.requeued.push(generation_id);
                }
            } else {
                let failure = FailureDetail {
                    code: "worker_lost".into(),
                    message: format!(
                        "the job was interrupted {attempts} times and will not be retried"
                    ),
                };
                if Store::fail_in(&mut transaction, &generation_id, &owner, &failure).await? {
                    report.failed.push(generation_id);
                }
            }
        }
        transaction.commit().await?;
        for generation_id in report.requeued.iter().chain(&report.failed) {
            self.store.announce_generation_change(generation_id).await;
        }
        Ok(report)
    }

    /// Returns when a job may have been queued by another process, or when
    /// `timeout` has passed, whichever is first. PostgreSQL hears every
    /// node's submits and requeues (`LISTEN`/`NOTIFY`); SQLite has no such
    /// signal and just waits out the timeout, so its workers rely on the
    /// in-process wake-up after a submit and on polling.
    pub async fn wait_for_work(self, timeout: Duration) {
        self.store.wait_for_announced_work(timeout).await
    }

    /// Counts the queued and running generations and sums their holds, in
    /// one statement over the rows the queue's partial indexes cover.
    pub async fn queue_depth(self) -> Result<QueueDepth, StoreError> {
        // PostgreSQL sums BIGINT as NUMERIC; the cast brings it back.
        let rows: Vec<(String, i64, i64)> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT status, COUNT(*), CAST(COALESCE(SUM(price_micros), 0) AS BIGINT) \
                 FROM generations WHERE status IN ('queued', 'running') GROUP BY status",
            )
        )?;
        let mut depth = QueueDepth::default();
        for (status, count, held) in rows {
            match status.as_str() {
                "queued" => depth.queued = count,
                _ => depth.running = count,
            }
            depth.held = Micros(depth.held.0 + held);
        }
        Ok(depth)
    }
}
