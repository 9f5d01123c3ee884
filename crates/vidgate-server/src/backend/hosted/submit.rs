//! The provider job of a generation: the one the store records, the one a
//! submit with an unknown outcome created (`reconcile.rs`), or a new one,
//! submitted only after its intent is recorded, so that a generation never
//! has two paid jobs.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use super::model_config::seconds;
use super::protocol::{JobDeadlines, JobToCreate, ProviderError, ProviderProtocol, ProviderTarget};
use super::route::RouteReason;
use super::{
    Backoff, HostedBackend, HostedFailure, config_failure, failure, refused_code, store_failure,
};
use crate::backend::contract::{Job, JobFailure};
use crate::store::{NewProviderJob, ProviderJob, Store};

impl HostedBackend {
    /// The provider job of this generation: the one recorded, the one a
    /// submit with an unknown outcome created, or a new one. Each round
    /// reads what the store records and takes the one step that state
    /// allows (ARCHITECTURE.md, "A provider job's states"): a job id is
    /// followed, an intent without one is reconciled, and no record at all
    /// is a new intent, then a submit.
    pub(super) async fn find_or_submit(
        &self,
        store: &Arc<Store>,
        job: &Job,
        may_fail_over: bool,
        route: Option<RouteReason>,
        wakeup: &Notify,
    ) -> Result<SubmittedJob, HostedFailure> {
        let mut rounds = SubmitRounds {
            // Past the whole job's deadline a new submit would only make a
            // paid job that vidgate gives up on at once.
            retry_until: Instant::now()
                + seconds(
                    self.timeouts()
                        .retry_seconds
                        .min(self.timeouts().job_seconds),
                ),
            backoff: Backoff::new(),
            unknown_create_counted: false,
            may_fail_over,
        };
        loop {
            let recorded = store
                .provider_jobs()
                .get(&job.generation_id)
                .await
                .map_err(store_failure)?;
            match recorded {
                Some(recorded) => match recorded.job_id.clone() {
                    // Submitted: the provider's answer (or a webhook, or a
                    // reconcile) recorded the job's id.
                    Some(job_id) => return Ok(SubmittedJob::of(recorded, job_id, false)),
                    // Unknown: an intent without an id.
                    None => {
                        if let Some(found) = self
                            .settle_unknown_submit(store, job, recorded, wakeup, &mut rounds)
                            .await?
                        {
                            return Ok(found);
                        }
                    }
                },
                // Nothing yet: an intent, then the submit.
                None => {
                    self.submit_with_intent(store, job, route, &mut rounds)
                        .await?;
                }
            }
        }
    }

    /// An intent without a job id: its submit's answer was lost. Reconcile
    /// proves the job present (`Some`, followed from here) or absent: then
    /// the intent is forgotten and the job goes to another provider, fails
    /// past the retry deadline, or is submitted again after a pause
    /// (`None`).
    async fn settle_unknown_submit(
        &self,
        store: &Arc<Store>,
        job: &Job,
        recorded: ProviderJob,
        wakeup: &Notify,
        rounds: &mut SubmitRounds,
    ) -> Result<Option<SubmittedJob>, HostedFailure> {
        if let Some(job_id) = self.reconcile(store, job, &recorded, wakeup).await? {
            // The provider did create the job: the lost answer was not a
            // failure of its creates.
            if rounds.unknown_create_counted {
                self.circuit.creates.retract_failure();
            }
            return Ok(Some(SubmittedJob::of(recorded, job_id, true)));
        }
        rounds.unknown_create_counted = false;
        store
            .provider_jobs()
            .forget_intent(&job.generation_id)
            .await
            .map_err(store_failure)?;
        // Known absent at the provider: another provider may take the job,
        // and failing it now cannot leave a paid job behind.
        if rounds.may_fail_over {
            return Err(HostedFailure::absent(failure(
                "upstream_error",
                format!("{} did not take the job", self.protocol.name()),
            )));
        }
        if Instant::now() >= rounds.retry_until {
            return Err(HostedFailure::absent(failure(
                "upstream_error",
                "the provider did not take the job before the retry deadline".into(),
            )));
        }
        tracing::warn!(generation = %job.generation_id, "a submit with an unknown outcome created no provider job; submitting again");
        tokio::time::sleep(rounds.backoff.next(None)).await;
        Ok(None)
    }

    /// No job of this generation at the provider: records the intent, then
    /// submits, and records what the provider answered. Every way out but a
    /// failure leads to another round: the job id recorded, another
    /// worker's intent to follow, a create refused for a while, or an
    /// outcome that is unknown (the intent stays, and reconcile settles it).
    #[tracing::instrument(name = "provider.submit", skip_all, fields(generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id))]
    async fn submit_with_intent(
        &self,
        store: &Arc<Store>,
        job: &Job,
        route: Option<RouteReason>,
        rounds: &mut SubmitRounds,
    ) -> Result<(), HostedFailure> {
        // With another provider to go to, an open creates circuit sends
        // the job there.
        if rounds.may_fail_over && !self.is_healthy() {
            return Err(HostedFailure::absent(failure(
                "upstream_error",
                format!("the circuit of {} is open", self.protocol.name()),
            )));
        }
        let target = self.config.target(job).map_err(config_failure)?;
        let input = self.config.provider_input(job).map_err(config_failure)?;
        let intent = NewProviderJob {
            generation_id: job.generation_id.clone(),
            provider: self.protocol.name().to_owned(),
            target: target.0.clone(),
            input: input.clone(),
            intent_at: crate::store::now_millis(),
            route_reason: route.map(|reason| reason.as_str().to_owned()),
        };
        if !store
            .provider_jobs()
            .record_intent(&intent)
            .await
            .map_err(store_failure)?
        {
            // Another worker recorded an intent first: follow that.
            return Ok(());
        }
        let webhook_url = self.webhook_url(&job.generation_id);
        let submitted = self
            .protocol
            .submit(&JobToCreate {
                target: &target,
                input: &input,
                webhook_url: webhook_url.as_deref(),
                deadlines: JobDeadlines {
                    start: seconds(self.timeouts().start_seconds),
                    lifetime: seconds(self.timeouts().job_seconds),
                },
            })
            .await;
        match submitted {
            // A webhook may have recorded this job a moment before the
            // answer came: the recorded id is followed either way.
            Ok(job_id) => {
                store
                    .provider_jobs()
                    .record_job_id(&job.generation_id, &job_id)
                    .await
                    .map_err(store_failure)?;
                Ok(())
            }
            // The provider answered that it created nothing: the intent is
            // void, and a later submit is safe.
            Err(error) if created_nothing(&error) => {
                store
                    .provider_jobs()
                    .forget_intent(&job.generation_id)
                    .await
                    .map_err(store_failure)?;
                self.after_create_refused(error, rounds).await
            }
            // The outcome is unknown: the intent stays and the next round
            // reconciles it.
            Err(error) => {
                tracing::warn!(generation = %job.generation_id, %error, "the submit's outcome is unknown; reconciling");
                rounds.unknown_create_counted = true;
                Ok(())
            }
        }
    }

    /// A create the provider answered it did not make: the job fails, goes
    /// to another provider, or is submitted again once a pause is over.
    async fn after_create_refused(
        &self,
        error: ProviderError,
        rounds: &mut SubmitRounds,
    ) -> Result<(), HostedFailure> {
        match error {
            // The provider is failing our creates: another provider may
            // take the job at once.
            ProviderError::NotReceived { .. } if rounds.may_fail_over => Err(
                HostedFailure::absent(failure("upstream_error", error.to_string())),
            ),
            // The budget paused creates for as long as the provider asked;
            // the next submit waits for it, and no deadline counts a rate
            // limit.
            ProviderError::RateLimited { .. } => Ok(()),
            ProviderError::NotReceived { .. } => self
                .retry_or_fail(&error, rounds.retry_until, &mut rounds.backoff)
                .await
                .map_err(HostedFailure::absent),
            ProviderError::Refused { kind, message, .. } => Err(HostedFailure::absent(failure(
                refused_code(kind),
                format!("the provider refused the job: {message}"),
            ))),
            other => Err(HostedFailure::absent(failure(
                "upstream_error",
                other.to_string(),
            ))),
        }
    }

    /// Waits after a transient provider error, or fails the job once the
    /// retry deadline has passed.
    async fn retry_or_fail(
        &self,
        error: &ProviderError,
        retry_until: Instant,
        backoff: &mut Backoff,
    ) -> Result<(), JobFailure> {
        if !error.is_transient() || Instant::now() >= retry_until {
            return Err(failure("upstream_error", error.to_string()));
        }
        let wait = backoff.next(error.retry_after());
        tracing::info!(provider = self.protocol.name(), %error, wait_ms = wait.as_millis() as u64, "retrying a provider call");
        tokio::time::sleep(wait).await;
        Ok(())
    }
}

/// What one call of `find_or_submit` carries from round to round.
struct SubmitRounds {
    /// After it, a create that failed is not tried again.
    retry_until: Instant,
    backoff: Backoff,
    /// Whether this call's own create had an unknown outcome, which the
    /// creates circuit counted as a failure of the provider.
    unknown_create_counted: bool,
    /// Whether another provider may take the job once this one is known
    /// not to have it.
    may_fail_over: bool,
}

/// Whether the provider answered that it created no job.
fn created_nothing(error: &ProviderError) -> bool {
    matches!(
        error,
        ProviderError::RateLimited { .. }
            | ProviderError::NotReceived { .. }
            | ProviderError::Refused { .. }
            | ProviderError::Unauthorized { .. }
            | ProviderError::NotFound { .. }
    )
}

/// A generation's job at its provider: where it is, its id, and when its
/// submit was about to be sent (Unix ms), from which its deadlines count.
pub(super) struct SubmittedJob {
    pub(super) target: ProviderTarget,
    pub(super) job_id: String,
    pub(super) created_at: i64,
    /// The input the provider was sent (the recorded intent's).
    pub(super) input: serde_json::Value,
    /// Whether it was found by reconcile after its create's answer was
    /// lost: its callbacks may have been refused before then, and the list
    /// already showed its state, so it is read at once.
    pub(super) found_by_reconcile: bool,
}

impl SubmittedJob {
    /// The job `job_id` of the recorded intent; `found_by_reconcile` when
    /// reconcile found it after its create's answer was lost.
    fn of(recorded: ProviderJob, job_id: String, found_by_reconcile: bool) -> SubmittedJob {
        SubmittedJob {
            target: ProviderTarget(recorded.target),
            job_id,
            created_at: recorded.intent_at,
            input: recorded.input,
            found_by_reconcile,
        }
    }
}
