//! Canceling a running generation's job while it still waits in its
//! provider's queue, for free; a job that started (or whose submit is
//! under way) is left to run, as any running generation's is.

use super::HostedBackend;
use super::protocol::{self, CancelResult, ProviderProtocol, ProviderTarget};
use crate::backend::contract::StartedJobCancel;
use crate::store::ProviderRun;

impl HostedBackend {
    #[tracing::instrument(name = "provider.cancel", skip_all, fields(generation_id = %generation_id, provider = self.protocol.name(), model = %self.model_id))]
    pub(super) async fn cancel_queued_job(
        &self,
        generation_id: &str,
        input: &serde_json::Value,
    ) -> StartedJobCancel {
        let recorded = match self.store.provider_jobs().get(generation_id).await {
            Ok(recorded) => recorded,
            Err(error) => return StartedJobCancel::Unreachable(format!("the store: {error}")),
        };
        // Without a job id the submit is under way or its outcome unknown:
        // a job the provider may have created cannot be canceled safely.
        let Some((target, job_id)) = recorded.and_then(|recorded| {
            recorded
                .job_id
                .map(|job_id| (ProviderTarget(recorded.target), job_id))
        }) else {
            return StartedJobCancel::Started;
        };
        match protocol::cancel_if_queued(self.protocol.as_ref(), &target, &job_id).await {
            Ok(CancelResult::Carried { ran_seconds }) => {
                tracing::info!(generation = %generation_id, provider = self.protocol.name(), provider_job = %job_id, ?ran_seconds, "canceled the job at the provider before it ran");
                let today = time::OffsetDateTime::now_utc().date().to_string();
                StartedJobCancel::Canceled {
                    provider_run: ProviderRun {
                        provider: self.protocol.name().to_owned(),
                        // Nothing ran, nothing is billed; a job that started
                        // in the gap is billed for the seconds it ran, at the
                        // operator's price for the target.
                        cost: Some(
                            ran_seconds
                                .filter(|seconds| *seconds > 0.0)
                                .and_then(|seconds| {
                                    self.config.cost_of(input, &target.0, &today, seconds)
                                })
                                .unwrap_or(vidgate_core::Micros(0)),
                        ),
                        cost_is_possible: false,
                    },
                }
            }
            // The task is gone, and may have finished first: the
            // generation is canceled and refunded, and the whole job's cost
            // recorded as possible.
            Ok(CancelResult::Gone) => {
                tracing::warn!(generation = %generation_id, provider = self.protocol.name(), provider_job = %job_id, "the job is gone after the cancel and may have finished first; recording its possible cost");
                let today = time::OffsetDateTime::now_utc().date().to_string();
                let duration_s = input["duration"].as_f64().unwrap_or_default();
                StartedJobCancel::Canceled {
                    provider_run: ProviderRun {
                        provider: self.protocol.name().to_owned(),
                        cost: self.config.cost_of(input, &target.0, &today, duration_s),
                        cost_is_possible: true,
                    },
                }
            }
            Ok(CancelResult::Declined) => StartedJobCancel::Started,
            Ok(CancelResult::NotCarried) => StartedJobCancel::NotCarried,
            Err(error) => StartedJobCancel::Unreachable(error.to_string()),
        }
    }
}
