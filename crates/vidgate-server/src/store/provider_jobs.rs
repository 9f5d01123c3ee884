//! Provider jobs: the job a generation has at a hosted provider (fal,
//! Replicate). The intent is recorded before the submit, and the provider's
//! job id once the provider answers, so that a generation never has two
//! paid provider jobs: a later attempt resumes the recorded job, or
//! reconciles an intent whose submit had an unknown outcome.

use serde_json::Value;
use tokio::sync::broadcast;

use super::{Store, StoreError, now_millis};

/// An intent to submit a generation to a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct NewProviderJob {
    pub generation_id: String,
    /// A registered provider's name (`fal`, `replicate`, …).
    pub provider: String,
    /// The provider's target (a fal endpoint id, a Replicate model, …).
    pub target: String,
    /// Exactly what is sent, so a reconcile can recognise the job.
    pub input: Value,
    /// When the submit was about to be sent (Unix ms).
    pub intent_at: i64,
    /// Why a failover model's routing chose this provider (`cheapest`,
    /// `fastest`, …); `None` for a model at one provider.
    pub route_reason: Option<String>,
}

/// A generation's provider job as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderJob {
    pub generation_id: String,
    pub provider: String,
    pub target: String,
    pub input: Value,
    pub intent_at: i64,
    /// The provider's id, once its answer to the submit arrived (or a
    /// reconcile found the job).
    pub job_id: Option<String>,
    pub submitted_at: Option<i64>,
    pub route_reason: Option<String>,
}

type ProviderJobRow = (
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<i64>,
    Option<String>,
);

fn provider_job_from_row(row: ProviderJobRow) -> Result<ProviderJob, StoreError> {
    let (generation_id, provider, target, input, intent_at, job_id, submitted_at, route_reason) =
        row;
    let input = serde_json::from_str(&input).map_err(|error| {
        StoreError::Corrupt(format!("the provider input of {generation_id}: {error}"))
    })?;
    Ok(ProviderJob {
        generation_id,
        provider,
        target,
        input,
        intent_at,
        job_id,
        submitted_at,
        route_reason,
    })
}

/// The operations of `provider_jobs` (see `Store::provider_jobs`).
#[derive(Clone, Copy)]
pub struct ProviderJobs<'store> {
    pub(super) store: &'store Store,
}

impl ProviderJobs<'_> {
    /// The provider job recorded for a generation.
    pub async fn get(self, generation_id: &str) -> Result<Option<ProviderJob>, StoreError> {
        // Read from the writer: a worker must see the intent an earlier
        // attempt committed a moment ago.
        let row: Option<ProviderJobRow> = fetch_on_writer!(
            self.store,
            fetch_optional,
            sqlx::query_as(
                "SELECT generation_id, provider, target, input, intent_at, job_id, \
                 submitted_at, route_reason FROM provider_jobs WHERE generation_id = $1",
            )
            .bind(generation_id)
        )?;
        row.map(provider_job_from_row).transpose()
    }

    /// Records the intent to submit a running generation; false when an
    /// intent is already recorded (another attempt's, to be followed
    /// instead) or the generation is no longer running.
    pub async fn record_intent(self, intent: &NewProviderJob) -> Result<bool, StoreError> {
        let inserted = execute_on_writer!(
            self.store,
            sqlx::query(
                "INSERT INTO provider_jobs \
                 (generation_id, provider, target, input, intent_at, route_reason) \
                 SELECT $1, $2, $3, $4, $5, $6 WHERE EXISTS \
                 (SELECT 1 FROM generations WHERE id = $1 AND status = 'running') \
                 ON CONFLICT (generation_id) DO NOTHING",
            )
            .bind(&intent.generation_id)
            .bind(&intent.provider)
            .bind(&intent.target)
            .bind(intent.input.to_string())
            .bind(intent.intent_at)
            .bind(&intent.route_reason)
        )?;
        Ok(inserted == 1)
    }

    /// Records the provider's id for the recorded intent; false when there
    /// is no intent without an id, or when another generation has that job
    /// at the same provider: the unique index on (`provider`, `job_id`)
    /// settles two adoptions of one job at once, and the second is refused
    /// here rather than failing.
    pub async fn record_job_id(
        self,
        generation_id: &str,
        job_id: &str,
    ) -> Result<bool, StoreError> {
        let updated = execute_on_writer!(
            self.store,
            sqlx::query(
                "UPDATE provider_jobs SET job_id = $1, submitted_at = $2 \
                 WHERE generation_id = $3 AND job_id IS NULL",
            )
            .bind(job_id)
            .bind(now_millis())
            .bind(generation_id)
        );
        match updated {
            Ok(updated) => Ok(updated == 1),
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// The generation whose recorded job at `provider` is `job_id`, if any:
    /// a job found in a provider's list, or named by a webhook, is taken
    /// for a generation only when no other generation has it.
    pub async fn generation_of(
        self,
        provider: &str,
        job_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(fetch_on_writer!(
            self.store,
            fetch_optional,
            sqlx::query_scalar(
                "SELECT generation_id FROM provider_jobs WHERE provider = $1 AND job_id = $2",
            )
            .bind(provider)
            .bind(job_id)
        )?)
    }

    /// Forgets an intent the provider is known not to have acted on (it
    /// refused the submit, or a reconcile did not find the job), so that a
    /// later submit is allowed. An intent with a job id is never forgotten.
    pub async fn forget_intent(self, generation_id: &str) -> Result<(), StoreError> {
        execute_on_writer!(
            self.store,
            sqlx::query("DELETE FROM provider_jobs WHERE generation_id = $1 AND job_id IS NULL")
                .bind(generation_id)
        )?;
        Ok(())
    }

    /// Records a verified provider webhook about a generation's job; false
    /// when this delivery was taken before (a provider's retry).
    pub async fn record_webhook(
        self,
        generation_id: &str,
        delivery_id: &str,
    ) -> Result<bool, StoreError> {
        let inserted = execute_on_writer!(
            self.store,
            sqlx::query(
                "INSERT INTO provider_webhook_deliveries \
                 (generation_id, delivery_id, received_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (generation_id, delivery_id) DO NOTHING",
            )
            .bind(generation_id)
            .bind(delivery_id)
            .bind(now_millis())
        )?;
        Ok(inserted == 1)
    }

    /// Tells every node that a verified webhook about `generation_id`'s
    /// provider job arrived, so that whichever node follows the job reads
    /// its state now instead of at its next poll. A node that received the
    /// webhook but does not follow the job calls it.
    pub async fn announce_webhook(self, generation_id: &str) -> Result<(), StoreError> {
        self.store.announce_to_other_nodes(generation_id).await
    }

    /// The generations whose webhooks other nodes announced, heard from now
    /// on; `None` where the store cannot carry announcements between
    /// processes (SQLite, which one node serves, and whose node hears its
    /// own webhooks).
    pub async fn webhook_announcements(self) -> Option<broadcast::Receiver<String>> {
        self.store.hear_other_nodes().await
    }
}

/// Which provider serves (or served) a generation, what it cost the
/// operator, and why routing chose it: the operator's view of a
/// generation beside what its customer sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationProvider {
    pub generation_id: String,
    /// The provider that ran it (recorded at its end), else the one its
    /// job is recorded at now.
    pub provider: String,
    /// The operator's cost, once recorded (`costs` lines).
    pub cost: Option<vidgate_core::Micros>,
    /// Why a failover model's routing chose the provider; `None` for a
    /// model at one provider, or once the job ended at another provider
    /// than the recorded intent's.
    pub route_reason: Option<String>,
}

/// One group of recent provider jobs: a provider's jobs of one model and
/// mode that routing gave it for one reason, with how long the succeeded
/// ones took from their submit to their generation's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRouting {
    pub provider: String,
    pub model: String,
    pub mode: String,
    /// `None` for the jobs of a model at one provider.
    pub route_reason: Option<String>,
    pub jobs: i64,
    /// The succeeded jobs among them, and their submit-to-end times
    /// summed (Unix ms).
    pub succeeded: i64,
    pub succeeded_millis: i64,
}

/// A row of `generation_providers`: the generation's id, the provider its
/// end recorded and that end's cost, and its provider job's provider and
/// routing reason.
type GenerationProviderRow = (
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

/// A row of `provider_routing`, in `ProviderRouting`'s field order.
type ProviderRoutingRow = (String, String, String, Option<String>, i64, i64, i64);

impl ProviderJobs<'_> {
    /// The provider of each of `generation_ids` that has one (a hosted
    /// generation's job recorded, or its end recorded with a provider).
    pub async fn generation_providers(
        self,
        generation_ids: &[String],
    ) -> Result<Vec<GenerationProvider>, StoreError> {
        if generation_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<GenerationProviderRow> = on_reader!(self.store, |reader| {
            let mut query = sqlx::QueryBuilder::new(
                "SELECT generations.id, generations.provider, \
                     generations.provider_cost_micros, provider_jobs.provider, \
                     provider_jobs.route_reason FROM generations LEFT JOIN provider_jobs \
                     ON provider_jobs.generation_id = generations.id WHERE generations.id IN (",
            );
            let mut ids = query.separated(", ");
            for generation_id in generation_ids {
                ids.push_bind(generation_id.as_str());
            }
            ids.push_unseparated(")");
            query.build_query_as().fetch_all(reader).await
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|(generation_id, ran_at, cost, recorded_at, route_reason)| {
                let provider = ran_at.clone().or_else(|| recorded_at.clone())?;
                // A reason explains the recorded intent's provider only.
                let route_reason = route_reason
                    .filter(|_| ran_at.is_none() || ran_at.as_deref() == recorded_at.as_deref());
                Some(GenerationProvider {
                    generation_id,
                    provider,
                    cost: cost.map(vidgate_core::Micros),
                    route_reason,
                })
            })
            .collect())
    }

    /// The provider jobs whose intent was recorded at or after `since`
    /// (Unix ms), by provider, model, mode and routing reason.
    pub async fn routing(self, since: i64) -> Result<Vec<ProviderRouting>, StoreError> {
        let rows: Vec<ProviderRoutingRow> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT provider_jobs.provider, generations.model, generations.mode, \
                 provider_jobs.route_reason, CAST(COUNT(*) AS BIGINT), \
                 CAST(SUM(CASE WHEN generations.status = 'succeeded' \
                 AND generations.completed_at IS NOT NULL THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(COALESCE(SUM(CASE WHEN generations.status = 'succeeded' \
                 AND generations.completed_at IS NOT NULL \
                 THEN generations.completed_at - provider_jobs.intent_at ELSE 0 END), 0) \
                 AS BIGINT) \
                 FROM provider_jobs JOIN generations \
                 ON generations.id = provider_jobs.generation_id \
                 WHERE provider_jobs.intent_at >= $1 \
                 GROUP BY provider_jobs.provider, generations.model, generations.mode, \
                 provider_jobs.route_reason \
                 ORDER BY provider_jobs.provider, generations.model, generations.mode, \
                 provider_jobs.route_reason",
            )
            .bind(since)
        )?;
        Ok(rows
            .into_iter()
            .map(
                |(provider, model, mode, route_reason, jobs, succeeded, succeeded_millis)| {
                    ProviderRouting {
                        provider,
                        model,
                        mode,
                        route_reason,
                        jobs,
                        succeeded,
                        succeeded_millis,
                    }
                },
            )
            .collect())
    }
}
