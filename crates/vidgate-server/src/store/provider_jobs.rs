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
    /// `fal` or `replicate`.
    pub provider: String,
    /// The fal endpoint id or the Replicate model.
    pub target: String,
    /// Exactly what is sent, so a reconcile can recognise the job.
    pub input: Value,
    /// When the submit was about to be sent (Unix ms).
    pub intent_at: i64,
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
}

type ProviderJobRow = (
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    Option<i64>,
);

fn provider_job_from_row(row: ProviderJobRow) -> Result<ProviderJob, StoreError> {
    let (generation_id, provider, target, input, intent_at, job_id, submitted_at) = row;
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
    })
}

impl Store {
    /// The provider job recorded for a generation.
    pub async fn provider_job(
        &self,
        generation_id: &str,
    ) -> Result<Option<ProviderJob>, StoreError> {
        // Read from the writer: a worker must see the intent an earlier
        // attempt committed a moment ago.
        let row: Option<ProviderJobRow> = fetch_on_writer!(
            self,
            fetch_optional,
            sqlx::query_as(
                "SELECT generation_id, provider, target, input, intent_at, job_id, \
                 submitted_at FROM provider_jobs WHERE generation_id = $1",
            )
            .bind(generation_id)
        )?;
        row.map(provider_job_from_row).transpose()
    }

    /// Records the intent to submit a running generation; false when an
    /// intent is already recorded (another attempt's, to be followed
    /// instead) or the generation is no longer running.
    pub async fn record_provider_intent(
        &self,
        intent: &NewProviderJob,
    ) -> Result<bool, StoreError> {
        let inserted = execute_on_writer!(
            self,
            sqlx::query(
                "INSERT INTO provider_jobs (generation_id, provider, target, input, intent_at) \
                 SELECT $1, $2, $3, $4, $5 WHERE EXISTS \
                 (SELECT 1 FROM generations WHERE id = $1 AND status = 'running') \
                 ON CONFLICT (generation_id) DO NOTHING",
            )
            .bind(&intent.generation_id)
            .bind(&intent.provider)
            .bind(&intent.target)
            .bind(intent.input.to_string())
            .bind(intent.intent_at)
        )?;
        Ok(inserted == 1)
    }

    /// Records the provider's id for the recorded intent; false when there
    /// is no intent without an id, or when another generation has that job
    /// at the same provider: the unique index on (`provider`, `job_id`)
    /// settles two adoptions of one job at once, and the second is refused
    /// here rather than failing.
    pub async fn record_provider_job_id(
        &self,
        generation_id: &str,
        job_id: &str,
    ) -> Result<bool, StoreError> {
        let updated = execute_on_writer!(
            self,
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
    pub async fn generation_of_provider_job(
        &self,
        provider: &str,
        job_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(fetch_on_writer!(
            self,
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
    pub async fn forget_provider_intent(&self, generation_id: &str) -> Result<(), StoreError> {
        execute_on_writer!(
            self,
            sqlx::query("DELETE FROM provider_jobs WHERE generation_id = $1 AND job_id IS NULL")
                .bind(generation_id)
        )?;
        Ok(())
    }

    /// Records a verified provider webhook about a generation's job; false
    /// when this delivery was taken before (a provider's retry).
    pub async fn record_provider_webhook(
        &self,
        generation_id: &str,
        delivery_id: &str,
    ) -> Result<bool, StoreError> {
        let inserted = execute_on_writer!(
            self,
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
    pub async fn announce_provider_webhook(&self, generation_id: &str) -> Result<(), StoreError> {
        self.announce_to_other_nodes(generation_id).await
    }

    /// The generations whose webhooks other nodes announced, heard from now
    /// on; `None` where the store cannot carry announcements between
    /// processes (SQLite, which one node serves, and whose node hears its
    /// own webhooks).
    pub async fn provider_webhook_announcements(&self) -> Option<broadcast::Receiver<String>> {
        self.hear_other_nodes().await
    }
}
