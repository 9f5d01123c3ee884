//! The queue: the generations table's queued rows, claimed by workers under
//! a lease, finished (capturing or releasing the hold), released at shutdown
//! or rescued when their worker died.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use vidgate_core::Micros;

use super::generations::{Generation, GenerationRow, generation_columns};
use super::ledger::Movement;
use super::{StoreError, now_millis};

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

#[async_trait]
pub trait QueueStore: Send + Sync {
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
    /// Marks the job succeeded, records the provider that ran it with its
    /// cost, and captures its hold; false when the guard no longer matches
    /// (the lease was lost), in which case nothing changed.
    async fn finish_succeeded(
        &self,
        generation_id: &str,
        worker: &str,
        output: Value,
        provider_run: Option<&ProviderRun>,
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
    /// Returns when a job may have been queued by another process, or when
    /// `timeout` has passed, whichever is first. PostgreSQL hears every
    /// node's submits and requeues (`LISTEN`/`NOTIFY`); SQLite has no such
    /// signal and just waits out the timeout, so its workers rely on the
    /// in-process wake-up after a submit and on polling.
    async fn wait_for_work(&self, timeout: Duration);
    /// Counts the queued and running generations and sums their holds, in
    /// one statement over the rows the queue's partial indexes cover.
    async fn queue_depth(&self) -> Result<QueueDepth, StoreError>;
}

/// Implements `QueueStore` for one store type; expanded for both by
/// `impl_for_both_stores!` (see `mod.rs` for what the parameters mean).
macro_rules! impl_queue_store {
    (
        store: $store:ty,
        database: $database:ty,
        lock_account: $lock_account:literal,
        skip_locked: $skip_locked:literal $(,)?
    ) => {
        impl $store {
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
        }

        #[async_trait]
        impl QueueStore for $store {
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
                let claimed = row.map(Generation::try_from).transpose()?;
                if let Some(generation) = &claimed {
                    self.announce_generation_change(&generation.id).await;
                }
                Ok(claimed)
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
                provider_run: Option<&ProviderRun>,
            ) -> Result<bool, StoreError> {
                let mut transaction = self.begin_write().await?;
                let finished: Option<(String, i64)> = sqlx::query_as(
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
                self.announce_generation_change(generation_id).await;
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
                if failed {
                    self.announce_generation_change(generation_id).await;
                }
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
                if released {
                    self.announce_generation_change(generation_id).await;
                }
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
                for generation_id in report.requeued.iter().chain(&report.failed) {
                    self.announce_generation_change(generation_id).await;
                }
                Ok(report)
            }

            async fn wait_for_work(&self, timeout: Duration) {
                self.wait_for_announced_work(timeout).await
            }

            async fn queue_depth(&self) -> Result<QueueDepth, StoreError> {
                // PostgreSQL sums BIGINT as NUMERIC; the cast brings it back.
                let rows: Vec<(String, i64, i64)> = sqlx::query_as(
                    "SELECT status, COUNT(*), CAST(COALESCE(SUM(price_micros), 0) AS BIGINT) \
                     FROM generations WHERE status IN ('queued', 'running') GROUP BY status",
                )
                .fetch_all(self.reader())
                .await?;
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
    };
}

impl_for_both_stores!(impl_queue_store);
