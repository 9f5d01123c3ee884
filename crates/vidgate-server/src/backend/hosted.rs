//! Backends for models hosted at a provider (`fal`, `replicate` in the
//! backends file): the remote-job machinery, written once for every
//! provider protocol (`ProviderProtocol`).
//!
//! Neither provider has an idempotency key, so exactly one provider job per
//! generation rests on the store: the intent (provider, target, the exact
//! input) is recorded before the submit, and the provider's job id after
//! it. A worker that finds an intent with an id resumes that job; one that
//! finds an intent without an id (the submit's outcome is unknown: its
//! worker died, or the answer was lost) reconciles it: it looks for the job
//! in the provider's list of recent jobs, and takes a verified provider
//! webhook for the generation as proof of it too, until the job is proved
//! absent. Only then may the job be submitted again (or to another
//! provider). What proves absence depends on what the provider lists: a
//! list of every job (Replicate) proves it once read after the submit's
//! call ended; a list of finished jobs (fal) only once the job's deadlines
//! have passed, so that it could no longer be queued or running unseen.
//! The job is then followed by polling at a gentle interval, woken early
//! by a verified provider webhook where one arrives; its video is streamed
//! into our storage (`output.rs`, never whole in memory) before the
//! provider's link expires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::budget::{
    BudgetLimits, BudgetedProtocol, BudgetsInFile, CallClass, CallPriority, ProviderBudget,
    ProviderBudgets,
};
use super::circuit::{ObservedProtocol, ProviderCircuit, ProviderCircuits};
use super::fal::{self, FalClient};
use super::hosted_config::{HostedModelConfig, HostedTimeouts, seconds};
use super::output::{self, DownloadError};
use super::provider::{
    self, CancelOutcome, CancelResult, FailureKind, InputUnknownJob, JobDeadlines, JobToCreate,
    ProviderError, ProviderJobState, ProviderProtocol, ProviderTarget, WebhookError,
};
use super::replicate::{self, ReplicateClient};
use super::{
    Admission, Backend, BackendParts, ClipBytes, Job, JobFailure, Rejection, RenderedClip,
    StartedJobCancel, WebhookReceipt, WebhookRefusal,
};
use crate::storage::Storage;
use crate::store::{NewProviderJob, ProviderJob, ProviderRun, Store};

/// How long a worker whose provider job was canceled at the provider waits
/// for the cancel that did it to cancel the generation too.
const CANCELED_AT_PROVIDER_GRACE: Duration = Duration::from_secs(10);

/// A backend that runs a model's jobs at a hosted provider.
pub struct HostedBackend {
    model_id: String,
    config: HostedModelConfig,
    /// The provider's protocol, its calls observed by `circuit` and each
    /// taken from the provider credential's budget.
    protocol: Arc<BudgetedProtocol>,
    circuit: Arc<ProviderCircuit>,
    /// Where the intent and job id records are kept.
    store: Arc<Store>,
    /// Outputs are downloaded into its incoming directory.
    storage: Arc<Storage>,
    output_client: reqwest::Client,
    /// Our webhook URLs, with the generation's secret, when the operator
    /// configured a public URL; without it jobs are followed by polling
    /// alone.
    webhook_urls: super::ProviderWebhookUrls,
    /// The jobs this process follows, by generation: a verified webhook
    /// wakes the follower to read the job's state at once.
    following: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl HostedBackend {
    fn new(
        plan: &HostedPlan,
        protocol: Arc<dyn ProviderProtocol>,
        circuit: Arc<ProviderCircuit>,
        budget: Arc<ProviderBudget>,
        parts: &BackendParts,
    ) -> Result<HostedBackend, String> {
        let output_client = reqwest::Client::builder()
            // An output link that redirects elsewhere is not followed with
            // any credential; plain redirects of a CDN are.
            .redirect(reqwest::redirect::Policy::limited(3))
            .no_proxy()
            .build()
            .map_err(|error| format!("the HTTP client could not start: {error}"))?;
        Ok(HostedBackend {
            model_id: plan.model_id.clone(),
            config: plan.config.clone(),
            protocol: Arc::new(BudgetedProtocol::new(
                Arc::new(ObservedProtocol::new(protocol, circuit.clone())),
                budget,
            )),
            circuit,
            store: parts.store.clone(),
            storage: parts.storage.clone(),
            output_client,
            webhook_urls: parts.provider_webhooks.clone(),
            following: Arc::default(),
        })
    }

    /// Where the provider sends this job's webhooks, if anywhere.
    fn webhook_url(&self, generation_id: &str) -> Option<String> {
        self.webhook_urls.url(&self.model_id, generation_id)
    }

    /// Registers this process as the follower of a generation's job, until
    /// the returned guard is dropped.
    fn follow_wakeups(&self, generation_id: &str) -> Following {
        let wakeup = Arc::new(Notify::new());
        self.following
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .insert(generation_id.to_owned(), wakeup.clone());
        Following {
            generation_id: generation_id.to_owned(),
            wakeup,
            following: self.following.clone(),
        }
    }

    async fn receive_webhook(
        &self,
        generation_id: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<WebhookReceipt, WebhookRefusal> {
        let verified = self
            .protocol
            .verify_webhook(headers, body)
            .await
            .map_err(|error| match error {
                WebhookError::Rejected(rejection) => WebhookRefusal::Rejected(rejection),
                WebhookError::KeysUnavailable(error) => {
                    WebhookRefusal::Unavailable(error.to_string())
                }
            })?;
        let store = &self.store;
        let Some(recorded) = store
            .provider_job(generation_id)
            .await?
            .filter(|recorded| recorded.provider == self.protocol.name())
        else {
            return Err(WebhookRefusal::UnknownJob);
        };
        match recorded.job_id.as_deref() {
            Some(job_id) if job_id == verified.job_id => {}
            // A webhook signed for another of our jobs, replayed to this
            // generation's URL, is refused like a forged one.
            Some(_) => return Err(WebhookRefusal::UnknownJob),
            // The submit's answer was lost (or has not arrived yet): the
            // provider's signed word that the job exists is proof of it,
            // and the job is adopted, unless the webhook is about a job
            // another generation has or lists an input vidgate did not send.
            None => self.adopt_webhook_job(store, &recorded, &verified).await?,
        }
        if !store
            .record_provider_webhook(generation_id, &verified.delivery_id)
            .await?
        {
            return Ok(WebhookReceipt::Duplicate);
        }
        if !self.wake_local_follower(generation_id) {
            // The follower is on another node (a load balancer chose this
            // one), or nowhere yet. Should telling the others fail, the
            // follower's polling still finds the job's end, so the webhook
            // is taken either way.
            if let Err(error) = store.announce_provider_webhook(generation_id).await {
                tracing::warn!(generation = %generation_id, error = %error,
                    "could not tell the other nodes of a provider webhook");
            }
        }
        Ok(WebhookReceipt::Taken)
    }

    /// Records the job a verified webhook names as the generation's, for an
    /// intent whose submit answer is missing.
    async fn adopt_webhook_job(
        &self,
        store: &Arc<Store>,
        recorded: &ProviderJob,
        verified: &provider::VerifiedWebhook,
    ) -> Result<(), WebhookRefusal> {
        let input_differs = verified
            .input
            .as_ref()
            .is_some_and(|listed| !provider::sent_fields_match(&recorded.input, listed));
        let taken_elsewhere = store
            .generation_of_provider_job(&recorded.provider, &verified.job_id)
            .await?
            .is_some_and(|owner| owner != recorded.generation_id);
        if input_differs || taken_elsewhere {
            return Err(WebhookRefusal::UnknownJob);
        }
        self.confirm_with_our_credential(recorded, &verified.job_id)
            .await?;
        if !store
            .record_provider_job_id(&recorded.generation_id, &verified.job_id)
            .await?
        {
            // The submit's answer (or a reconcile) recorded an id in the
            // meantime: the webhook is taken only if it is that job.
            let now_recorded = store.provider_job(&recorded.generation_id).await?;
            if now_recorded.and_then(|job| job.job_id).as_deref() != Some(verified.job_id.as_str())
            {
                return Err(WebhookRefusal::UnknownJob);
            }
        } else {
            tracing::warn!(generation = %recorded.generation_id, provider = self.protocol.name(), provider_job = %verified.job_id, "a provider webhook proved the job of a submit whose answer was lost");
        }
        Ok(())
    }

    /// Refuses to adopt a job that a webhook names unless our own
    /// credential reads it under the intent's target: a webhook alone is
    /// never proof. fal signs every customer's webhooks with the same keys,
    /// so a request in another fal account is signed as well as ours, but
    /// our key cannot read it.
    async fn confirm_with_our_credential(
        &self,
        recorded: &ProviderJob,
        job_id: &str,
    ) -> Result<(), WebhookRefusal> {
        let target = ProviderTarget(recorded.target.clone());
        match self.protocol.state(&target, job_id).await {
            Ok(_) => Ok(()),
            Err(
                ProviderError::NotFound { .. }
                | ProviderError::Unauthorized { .. }
                | ProviderError::Refused { .. },
            ) => Err(WebhookRefusal::UnknownJob),
            // The provider retries the webhook, and the reconcile goes on
            // meanwhile.
            Err(error) => Err(WebhookRefusal::Unavailable(error.to_string())),
        }
    }

    /// Wakes this process's follower of the generation's job, if any.
    fn wake_local_follower(&self, generation_id: &str) -> bool {
        let following = self
            .following
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let follower = following.get(generation_id);
        if let Some(wakeup) = follower {
            wakeup.notify_one();
        }
        follower.is_some()
    }

    async fn cancel_queued_job(
        &self,
        generation_id: &str,
        input: &serde_json::Value,
    ) -> StartedJobCancel {
        let recorded = match self.store.provider_job(generation_id).await {
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
        match provider::cancel_if_queued(self.protocol.as_ref(), &target, &job_id).await {
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
                    },
                }
            }
            Ok(CancelResult::Declined) => StartedJobCancel::Started,
            Ok(CancelResult::NotCarried) => StartedJobCancel::NotCarried,
            Err(error) => StartedJobCancel::Unreachable(error.to_string()),
        }
    }

    fn timeouts(&self) -> &HostedTimeouts {
        &self.config.timeouts
    }

    /// Whether this provider is configured for `mode` of the model.
    pub(super) fn takes_mode(&self, mode: vidgate_core::Mode) -> bool {
        self.config.mode(mode).is_some()
    }

    /// Whether this provider's creates circuit lets dispatch send it work.
    pub(super) fn is_healthy(&self) -> bool {
        self.circuit.creates.allows()
    }

    pub(super) fn provider_name(&self) -> &'static str {
        self.protocol.name()
    }

    fn budget(&self) -> &Arc<ProviderBudget> {
        self.protocol.budget()
    }

    /// Whether this provider's budget could take a create now (see
    /// `ProviderBudget::create_ready`).
    pub(super) fn create_ready(&self) -> bool {
        self.budget().create_ready()
    }

    /// Whether this provider serves the values of a job of `mode`
    /// (`accepts` in the backends file).
    pub(super) fn serves(
        &self,
        mode: vidgate_core::Mode,
        input: &vidgate_core::ValidatedInput,
    ) -> Result<(), super::Unserved> {
        self.config.serves(mode, input)
    }

    async fn admit_mode(&self, admission: &Admission<'_>) -> Result<(), Rejection> {
        if !self.takes_mode(admission.mode) {
            return Err(Rejection::Unavailable(format!(
                "The model {} does not run {} on this deployment.",
                self.model_id,
                admission.mode.as_str()
            )));
        }
        // A value the provider cannot serve is refused, never sent.
        self.serves(admission.mode, admission.input)
            .map_err(|unserved| unserved.rejection(&self.model_id, admission.mode))?;
        if !self.is_healthy() {
            return Err(no_healthy_provider(&self.model_id));
        }
        Ok(())
    }

    /// Runs a job at this provider. With `may_fail_over`, it gives up as
    /// soon as the provider is known not to have the job and either its
    /// creates circuit is open or a submit with an unknown outcome proved
    /// to have created nothing, so that another provider can take it.
    pub(super) async fn run_job(
        &self,
        job: Job,
        cancel: CancellationToken,
        may_fail_over: bool,
    ) -> Result<RenderedClip, HostedFailure> {
        let store = &self.store;
        let _in_flight = self.budget().job_in_flight();
        // Registered before the submit, so that a webhook arriving before
        // the wait begins still wakes it.
        let following = self.follow_wakeups(&job.generation_id);
        let submitted = tokio::select! {
            found = self.find_or_submit(store, &job, may_fail_over, &following.wakeup) => found?,
            _ = cancel.cancelled() => return Err(JobFailure::Interrupted.into()),
        };
        tracing::info!(generation = %job.generation_id, provider = self.protocol.name(), target = %submitted.target.0, provider_job = %submitted.job_id, "following the provider job");
        let video_url = self
            .follow(
                &submitted,
                self.webhook_url(&job.generation_id).is_some(),
                &following.wakeup,
                &cancel,
            )
            .await?;
        let mut clip = tokio::select! {
            copied = self.copy_output(&video_url) => copied?,
            _ = cancel.cancelled() => return Err(JobFailure::Interrupted.into()),
        };
        // Only a seed the provider was sent is reported as the clip's: a
        // target that takes none (fal's Seedance 2.0) claims none.
        clip.seed = self.config.seed_sent(&job, &submitted.input);
        let today = time::OffsetDateTime::now_utc().date().to_string();
        clip.provider_run = Some(ProviderRun {
            provider: self.protocol.name().to_owned(),
            cost: self.config.cost_of(
                &job.input.to_json(),
                &submitted.target.0,
                &today,
                clip.duration_s,
            ),
        });
        Ok(clip)
    }

    /// The provider job of this generation: the one recorded, the one a
    /// submit with an unknown outcome created, or a new one.
    async fn find_or_submit(
        &self,
        store: &Arc<Store>,
        job: &Job,
        may_fail_over: bool,
        wakeup: &Notify,
    ) -> Result<SubmittedJob, HostedFailure> {
        // Past the whole job's deadline a new submit would only make a paid
        // job that vidgate gives up on at once.
        let retry_until = Instant::now()
            + seconds(
                self.timeouts()
                    .retry_seconds
                    .min(self.timeouts().job_seconds),
            );
        let mut backoff = Backoff::new();
        loop {
            let recorded = store
                .provider_job(&job.generation_id)
                .await
                .map_err(store_failure)?;
            if let Some(recorded) = recorded {
                let target = ProviderTarget(recorded.target.clone());
                if let Some(job_id) = recorded.job_id {
                    return Ok(SubmittedJob {
                        target,
                        job_id,
                        created_at: recorded.intent_at,
                        input: recorded.input,
                    });
                }
                if let Some(job_id) = self.reconcile(store, job, &recorded, wakeup).await? {
                    return Ok(SubmittedJob {
                        target,
                        job_id,
                        created_at: recorded.intent_at,
                        input: recorded.input,
                    });
                }
                store
                    .forget_provider_intent(&job.generation_id)
                    .await
                    .map_err(store_failure)?;
                // Known absent at the provider: another provider may take
                // the job, and failing it now cannot leave a paid job
                // behind.
                if may_fail_over {
                    return Err(HostedFailure::absent(failure(
                        "upstream_error",
                        format!("{} did not take the job", self.protocol.name()),
                    )));
                }
                if Instant::now() >= retry_until {
                    return Err(HostedFailure::absent(failure(
                        "upstream_error",
                        "the provider did not take the job before the retry deadline".into(),
                    )));
                }
                tracing::warn!(generation = %job.generation_id, "a submit with an unknown outcome created no provider job; submitting again");
                tokio::time::sleep(backoff.next(None)).await;
                continue;
            }
            // No job of this generation at the provider: with another
            // provider to go to, an open creates circuit sends the job there.
            if may_fail_over && !self.is_healthy() {
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
            };
            if !store
                .record_provider_intent(&intent)
                .await
                .map_err(store_failure)?
            {
                // Another worker recorded an intent first: follow that.
                continue;
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
                Ok(job_id) => {
                    // A webhook may have recorded this job a moment before
                    // the answer came: the recorded id is followed either way.
                    store
                        .record_provider_job_id(&job.generation_id, &job_id)
                        .await
                        .map_err(store_failure)?;
                    continue;
                }
                // The provider answered that it created nothing: the intent
                // is void, and a later submit is safe.
                Err(
                    error @ (ProviderError::RateLimited { .. }
                    | ProviderError::NotReceived { .. }
                    | ProviderError::Refused { .. }
                    | ProviderError::Unauthorized { .. }
                    | ProviderError::NotFound { .. }),
                ) => {
                    store
                        .forget_provider_intent(&job.generation_id)
                        .await
                        .map_err(store_failure)?;
                    match error {
                        // The provider is failing our creates: another
                        // provider may take the job at once.
                        ProviderError::NotReceived { .. } if may_fail_over => {
                            return Err(HostedFailure::absent(failure(
                                "upstream_error",
                                error.to_string(),
                            )));
                        }
                        // The budget paused creates for as long as the
                        // provider asked; the next submit waits for it, and
                        // no deadline counts a rate limit.
                        ProviderError::RateLimited { .. } => {}
                        ProviderError::NotReceived { .. } => {
                            self.retry_or_fail(&error, retry_until, &mut backoff)
                                .await
                                .map_err(HostedFailure::absent)?;
                        }
                        ProviderError::Refused { kind, message, .. } => {
                            return Err(HostedFailure::absent(failure(
                                refused_code(kind),
                                format!("the provider refused the job: {message}"),
                            )));
                        }
                        other => {
                            return Err(HostedFailure::absent(failure(
                                "upstream_error",
                                other.to_string(),
                            )));
                        }
                    }
                }
                // The outcome is unknown: the intent stays and the next round
                // reconciles it.
                Err(error) => {
                    tracing::warn!(generation = %job.generation_id, %error, "the submit's outcome is unknown; reconciling");
                }
            }
        }
    }

    /// Reconciles an intent whose submit's outcome is unknown: the id of
    /// the job it created, found in the provider's list or adopted from a
    /// verified webhook, or `None` once the job is proved absent. The list
    /// is read again at a growing interval (and at once when a webhook
    /// arrives) until then; a provider that cannot be asked leaves the
    /// question open, and the generation waits.
    ///
    /// A listed job of the same target, created while the submit's call was
    /// under way, whose input the provider no longer shows (Replicate
    /// removes it after an hour) may be this submit's job: absence is then
    /// never proved, so the job is never submitted again. Only a webhook
    /// can still prove it; at the job's deadline the generation fails,
    /// refunded, with the cost of the job it may have made recorded.
    async fn reconcile(
        &self,
        store: &Arc<Store>,
        job: &Job,
        recorded: &ProviderJob,
        wakeup: &Notify,
    ) -> Result<Option<String>, HostedFailure> {
        let timeouts = self.timeouts();
        // The submit's call has certainly ended once its timeout has passed
        // since the intent.
        let settled_at = recorded.intent_at + millis(timeouts.request_seconds) + 1000;
        // A job that the provider lists only once finished may be queued
        // (until its start deadline) and then running (until the whole
        // job's deadline, `job_seconds`, when vidgate would give up on it)
        // without showing.
        let absent_after = if self.protocol.lists_unfinished_jobs() {
            settled_at
        } else {
            settled_at + millis(timeouts.job_seconds.max(timeouts.start_seconds))
        };
        // A provider that cannot be asked (an outage) neither proves nor
        // disproves the job; after the retry deadline, and not before the
        // job could be proved absent, the generation fails without moving
        // to another provider, and a job it did create runs with no
        // customer to bill.
        let give_up_at = absent_after.max(settled_at + millis(timeouts.retry_seconds));
        // The job a submit with an unknown outcome made, if any, is
        // gone by then: vidgate would have given up on it.
        let job_deadline = recorded.intent_at + millis(timeouts.job_seconds);
        let since = recorded.intent_at / 1000 - CLOCK_SKEW_SECONDS;
        // A job created after the submit's call ended is not its job.
        let created_by = settled_at / 1000 + CLOCK_SKEW_SECONDS;
        let target = ProviderTarget(recorded.target.clone());
        let mut interval = RECONCILE_FIRST_INTERVAL;
        let mut cannot_tell = Vec::new();
        loop {
            let now = crate::store::now_millis();
            if now < settled_at {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis((settled_at - now) as u64)) => {}
                    _ = wakeup.notified() => {}
                }
            }
            // A verified webhook may have adopted the job meanwhile.
            if let Some(job_id) = self.recorded_job_id(store, &recorded.generation_id).await? {
                return Ok(Some(job_id));
            }
            let listed_at = crate::store::now_millis();
            match self
                .protocol
                .find_submitted(&target, &recorded.input, since)
                .await
            {
                Ok(listed) => {
                    for candidate in listed.matching {
                        let owner = store
                            .generation_of_provider_job(&recorded.provider, &candidate)
                            .await
                            .map_err(store_failure)?;
                        // An identical request of another generation (the
                        // same prompt and seed) is that generation's job.
                        if owner.is_some_and(|owner| owner != recorded.generation_id) {
                            continue;
                        }
                        let recorded_now = store
                            .record_provider_job_id(&recorded.generation_id, &candidate)
                            .await
                            .map_err(store_failure)?;
                        if recorded_now {
                            tracing::warn!(generation = %recorded.generation_id, provider_job = %candidate, "a submit with an unknown outcome had created the provider job; following it");
                        }
                        // Whatever is recorded now is followed: this
                        // candidate, or the job a webhook proved meanwhile.
                        // Another generation that took the candidate first
                        // (the unique index) leaves none, and the next
                        // candidate is tried.
                        if let Some(job_id) =
                            self.recorded_job_id(store, &recorded.generation_id).await?
                        {
                            return Ok(Some(job_id));
                        }
                    }
                    cannot_tell = self
                        .jobs_that_may_be_ours(store, recorded, listed.input_unknown, created_by)
                        .await?;
                    if !cannot_tell.is_empty() {
                        if listed_at >= job_deadline {
                            return Err(self
                                .give_up_undecided(store, job, recorded, &cannot_tell)
                                .await);
                        }
                    } else if listed_at >= absent_after {
                        return Ok(None);
                    }
                }
                // Rate limits and outages: asked again later; only an
                // outage counts toward giving up.
                Err(error) if error.is_transient() => {
                    if listed_at >= give_up_at
                        && !matches!(error, ProviderError::RateLimited { .. })
                    {
                        return Err(failure("upstream_error", error.to_string()).into());
                    }
                    tracing::info!(generation = %recorded.generation_id, %error, "the provider's list could not be read; asking again later");
                }
                // A provider that refuses to list (a revoked credential) can
                // neither prove nor disprove the job: the generation fails,
                // and a job it did create runs with no customer to bill.
                Err(error) => {
                    return Err(failure("upstream_error", error.to_string()).into());
                }
            }
            // The next read comes no later than the moment the job can be
            // proved absent or given up on.
            let undecided_until = if cannot_tell.is_empty() {
                absent_after
            } else {
                job_deadline
            };
            let next_milestone = [undecided_until, give_up_at]
                .into_iter()
                .filter(|milestone| *milestone > listed_at)
                .min()
                .map_or(RECONCILE_FIRST_INTERVAL, |milestone| {
                    Duration::from_millis((milestone - listed_at) as u64)
                });
            tokio::select! {
                _ = tokio::time::sleep(interval.min(next_milestone.max(Duration::from_millis(100)))) => {}
                _ = wakeup.notified() => {}
            }
            interval = (interval * 2).min(RECONCILE_LONGEST_INTERVAL);
        }
    }

    /// Of the listed jobs whose input is gone, those that may be the
    /// submit's: created by `created_by` (unix seconds; a job without a
    /// readable time is kept) and not another generation's.
    async fn jobs_that_may_be_ours(
        &self,
        store: &Arc<Store>,
        recorded: &ProviderJob,
        input_unknown: Vec<InputUnknownJob>,
        created_by: i64,
    ) -> Result<Vec<InputUnknownJob>, HostedFailure> {
        let mut may_be_ours = Vec::new();
        for listed in input_unknown {
            if listed
                .created_at
                .is_some_and(|created_at| created_at > created_by)
            {
                continue;
            }
            let owner = store
                .generation_of_provider_job(&recorded.provider, &listed.job_id)
                .await
                .map_err(store_failure)?;
            if owner.is_none_or(|owner| owner == recorded.generation_id) {
                may_be_ours.push(listed);
            }
        }
        Ok(may_be_ours)
    }

    /// Fails a generation whose submit's outcome the provider can no
    /// longer tell, at its job's deadline: refunded, never submitted again
    /// (that could make a second paid job), and with the cost of the one
    /// job it may have made recorded as its provider cost, so that
    /// `vidgate admin usage` counts what the operator may have paid.
    async fn give_up_undecided(
        &self,
        store: &Arc<Store>,
        job: &Job,
        recorded: &ProviderJob,
        cannot_tell: &[InputUnknownJob],
    ) -> HostedFailure {
        let today = time::OffsetDateTime::now_utc().date().to_string();
        let possible_run = ProviderRun {
            provider: recorded.provider.clone(),
            cost: self.config.cost_of(
                &job.input.to_json(),
                &recorded.target,
                &today,
                f64::from(job.input.duration_s()),
            ),
        };
        let provider_jobs: Vec<&str> = cannot_tell
            .iter()
            .map(|listed| listed.job_id.as_str())
            .collect();
        tracing::warn!(generation = %job.generation_id, provider = %recorded.provider, ?provider_jobs, possible_cost_micros = ?possible_run.cost.map(|cost| cost.0), "the provider's list cannot tell whether a submit with an unknown outcome created one of these jobs (their input was removed); failing the generation, refunded, without submitting again");
        if let Err(error) = store
            .record_possible_provider_cost(&job.generation_id, &possible_run)
            .await
        {
            tracing::warn!(generation = %job.generation_id, %error, "could not record the possible provider cost");
        }
        failure(
            "upstream_error",
            format!(
                "{} can no longer tell whether the job was created; it was not submitted again",
                recorded.provider
            ),
        )
        .into()
    }

    async fn recorded_job_id(
        &self,
        store: &Arc<Store>,
        generation_id: &str,
    ) -> Result<Option<String>, HostedFailure> {
        Ok(store
            .provider_job(generation_id)
            .await
            .map_err(store_failure)?
            .and_then(|recorded| recorded.job_id))
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

    /// Reads the job's state until it is final; its video's URL. Where the
    /// start deadline is vidgate's to keep (Replicate), a job still queued
    /// at it is canceled and fails as timed out.
    ///
    /// Reads take the provider budget's tokens at their turn: a read woken
    /// by a verified webhook first, then the others earliest-due first.
    /// With a provider webhook registered (`with_webhooks`) polling is the
    /// backstop: the first read waits for the webhook or the model's usual
    /// run time, later ones come at a growing interval. Without one, a job
    /// is read every `poll_seconds`, or as often as the budget allows.
    async fn follow(
        &self,
        submitted: &SubmittedJob,
        with_webhooks: bool,
        wakeup: &Notify,
        cancel: &CancellationToken,
    ) -> Result<String, JobFailure> {
        let SubmittedJob {
            target,
            job_id,
            created_at,
            ..
        } = submitted;
        // Counted from the intent to create the job, recorded just before
        // its create call (whose token the pool promised when it claimed
        // the job), as the provider counts its lifetime from the create: a
        // job resumed after a restart keeps the deadline it had, where a
        // deadline counted from each run would start again.
        let deadline = created_at + millis(self.timeouts().job_seconds);
        let start_deadline = created_at + millis(self.timeouts().start_seconds);
        let usual_end = created_at + millis(self.timeouts().usual_run_seconds);
        let mut retry_until: Option<Instant> = None;
        let mut backoff = Backoff::new();
        let mut backstop_interval = seconds(self.timeouts().poll_seconds);
        let mut priority = CallPriority::now();
        let mut last_read: Option<Instant> = None;
        // A job whose webhook will likely come before its usual run time
        // ends is not read before then (a resumed older job is read at
        // once).
        let mut wait_first = with_webhooks && crate::store::now_millis() < usual_end;
        loop {
            if !wait_first {
                let read = tokio::select! {
                    read = self.protocol.state_at(target, job_id, priority, wakeup) => read,
                    _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
                };
                let now = Instant::now();
                if let Some(previous) = last_read.replace(now) {
                    self.budget()
                        .record_poll_interval(with_webhooks, now.duration_since(previous));
                }
                match read {
                    Ok(ProviderJobState::Succeeded { video_url }) => return Ok(video_url),
                    Ok(ProviderJobState::Failed(provider_failure)) => {
                        if provider_failure.kind == FailureKind::Canceled {
                            // Our own cancel ends a queued job at the
                            // provider and then cancels the generation with
                            // its refund; this worker waits for that (its
                            // heartbeat then fails and interrupts it) rather
                            // than race it with a failure. A job canceled by
                            // anyone else fails after the wait.
                            tokio::select! {
                                _ = tokio::time::sleep(CANCELED_AT_PROVIDER_GRACE) => {}
                                _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
                            }
                        }
                        return Err(failure(
                            provider_failure.kind.code(),
                            format!("the model failed: {}", provider_failure.message),
                        ));
                    }
                    Ok(ProviderJobState::Queued)
                        if self.protocol.start_deadline_is_ours()
                            && crate::store::now_millis() >= start_deadline =>
                    {
                        if let Some(failed) = self.end_unstarted_job(target, job_id).await {
                            return Err(failed);
                        }
                    }
                    Ok(ProviderJobState::Queued | ProviderJobState::Running) => {
                        retry_until = None;
                        backoff = Backoff::new();
                    }
                    // A rate limit says "slower", never "fail": the budget
                    // paused reads for as long as the provider asked, and
                    // the read waits for its turn again, with no deadline.
                    Err(ProviderError::RateLimited { .. }) => continue,
                    Err(error) if error.is_transient() => {
                        let until = *retry_until.get_or_insert_with(|| {
                            Instant::now() + seconds(self.timeouts().retry_seconds)
                        });
                        if Instant::now() >= until {
                            return Err(failure("upstream_error", error.to_string()));
                        }
                        let wait = backoff.next(error.retry_after());
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => continue,
                            _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
                        }
                    }
                    Err(error) => return Err(failure("upstream_error", error.to_string())),
                }
            }
            wait_first = false;
            if crate::store::now_millis() >= deadline {
                return Err(failure(
                    FailureKind::TimedOut.code(),
                    format!(
                        "the provider did not finish within {} s",
                        self.timeouts().job_seconds
                    ),
                ));
            }
            // The job keeps running at the provider when this worker stops:
            // the next worker resumes it by its id. A verified webhook
            // ends the wait early; polling is the backstop for webhooks
            // that never arrive.
            let mut poll = if with_webhooks {
                let until_usual_end = usual_end - crate::store::now_millis();
                if until_usual_end > 0 {
                    Duration::from_millis(until_usual_end as u64)
                } else {
                    let interval = backstop_interval;
                    backstop_interval = (backstop_interval * 2)
                        .max(interval)
                        .min(BACKSTOP_LONGEST_INTERVAL.max(seconds(self.timeouts().poll_seconds)));
                    interval
                }
            } else {
                seconds(self.timeouts().poll_seconds)
            };
            if self.protocol.start_deadline_is_ours() {
                let until_start_deadline = Duration::from_millis(
                    (start_deadline - crate::store::now_millis()).max(0) as u64,
                );
                if !until_start_deadline.is_zero() {
                    poll = poll.min(until_start_deadline);
                }
            }
            priority = tokio::select! {
                _ = tokio::time::sleep(poll) => CallPriority::now(),
                _ = wakeup.notified() => CallPriority::Urgent,
                _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
            };
        }
    }

    /// Cancels a job still queued at its start deadline: the failure its
    /// generation gets once the provider ended it (refunded, as timed
    /// out), or `None` when the cancel could not be carried out (the job
    /// started meanwhile, or the provider could not be reached) and the job
    /// is followed on.
    async fn end_unstarted_job(&self, target: &ProviderTarget, job_id: &str) -> Option<JobFailure> {
        let timed_out = || {
            failure(
                FailureKind::TimedOut.code(),
                format!(
                    "the provider did not start the job within {} s",
                    self.timeouts().start_seconds
                ),
            )
        };
        match self.protocol.cancel(target, job_id).await {
            Ok(CancelOutcome::Canceled { ran_seconds }) => {
                tracing::info!(provider = self.protocol.name(), provider_job = %job_id, ?ran_seconds, "canceled a job that did not start by its start deadline");
                Some(timed_out())
            }
            Ok(CancelOutcome::NotFound) => Some(timed_out()),
            Ok(CancelOutcome::Requested | CancelOutcome::Refused) => None,
            Err(error) => {
                tracing::warn!(provider = self.protocol.name(), provider_job = %job_id, %error, "canceling a job past its start deadline failed; reading it again");
                None
            }
        }
    }

    /// Streams the video into a file of the storage's incoming directory
    /// within the size cap, and probes it there.
    async fn copy_output(&self, video_url: &str) -> Result<RenderedClip, JobFailure> {
        let url = url::Url::parse(video_url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| failure("upstream_error", "the output is not an http(s) URL".into()))?;
        let storage = &self.storage;
        let fetch_failed = |error: reqwest::Error| {
            failure(
                "upstream_error",
                format!("copying the output failed: {}", error.without_url()),
            )
        };
        // The download is a call to the provider too: it takes a token of
        // the budget, and a 429 pauses the class and is asked again. It
        // finishes a job, so it goes ahead of the backstop reads that are
        // merely due, as a webhook's read does: behind them, a saturated
        // budget held finished jobs for 20 s (BENCHMARKS.md, provider load).
        let response = loop {
            self.budget()
                .acquire(CallClass::Others, CallPriority::Urgent)
                .await;
            let response = self
                .output_client
                .get(url.clone())
                .headers(self.protocol.output_headers(video_url))
                .timeout(seconds(self.timeouts().job_seconds))
                .send()
                .await
                .map_err(fetch_failed)?;
            if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
                self.budget().rate_limited(
                    CallClass::Others,
                    provider::requested_wait(response.headers(), std::time::SystemTime::now()),
                );
                continue;
            }
            break response.error_for_status().map_err(fetch_failed)?;
        };
        let downloaded =
            output::download_to_incoming(storage, response, self.config.max_output_bytes)
                .await
                .map_err(|error| match error {
                    DownloadError::TooLarge { .. } => failure("upstream_error", error.to_string()),
                    DownloadError::Network(error) => fetch_failed(error),
                    DownloadError::Scratch(error) => output::scratch_failure(&error),
                })?;
        output::probe_clip(ClipBytes::File(downloaded)).await
    }
}

#[async_trait]
impl Backend for HostedBackend {
    fn kind(&self) -> &'static str {
        self.protocol.name()
    }

    fn runs_at_provider(&self) -> bool {
        true
    }

    async fn admit(&self, admission: &Admission<'_>) -> Result<(), Rejection> {
        self.admit_mode(admission).await
    }

    async fn run(&self, job: Job, cancel: CancellationToken) -> Result<RenderedClip, JobFailure> {
        self.run_job(job, cancel, false)
            .await
            .map_err(|failed| failed.failure)
    }

    async fn receive_provider_webhook(
        &self,
        generation_id: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<WebhookReceipt, WebhookRefusal> {
        self.receive_webhook(generation_id, headers, body).await
    }

    fn wake_follower(&self, generation_id: &str) -> bool {
        self.wake_local_follower(generation_id)
    }

    fn create_ready(&self) -> bool {
        HostedBackend::create_ready(self)
    }

    fn promise_create(&self) {
        self.budget().promise_create();
    }

    async fn cancel_before_start(
        &self,
        generation_id: &str,
        input: &serde_json::Value,
    ) -> StartedJobCancel {
        self.cancel_queued_job(generation_id, input).await
    }
}

/// A job this process follows, in `HostedBackend::following` until
/// dropped.
struct Following {
    generation_id: String,
    wakeup: Arc<Notify>,
    following: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut following = self
            .following
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        // A later attempt of the same job on this process may have
        // registered its own.
        if following
            .get(&self.generation_id)
            .is_some_and(|wakeup| Arc::ptr_eq(wakeup, &self.wakeup))
        {
            following.remove(&self.generation_id);
        }
    }
}

/// Which hosted provider a model of the backends file runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Fal,
    Replicate,
}

impl ProviderKind {
    /// The provider's name, as its protocol gives it.
    pub(super) fn name(self) -> &'static str {
        match self {
            ProviderKind::Fal => "fal",
            ProviderKind::Replicate => "replicate",
        }
    }

    pub(super) fn default_credential_env(self) -> &'static str {
        match self {
            ProviderKind::Fal => "FAL_KEY",
            ProviderKind::Replicate => "REPLICATE_API_TOKEN",
        }
    }
}

/// A model at a hosted provider as the backends file describes it, checked
/// against its catalog model, with its credential and request budget
/// resolved: everything but the node's live parts.
#[derive(Clone)]
pub(super) struct HostedPlan {
    model_id: String,
    config: HostedModelConfig,
    kind: ProviderKind,
    /// The environment variable that held the credential, which names the
    /// budget in logs and metrics.
    credential_env: String,
    credential: String,
    limits: BudgetLimits,
}

impl HostedPlan {
    /// Checks one model's entry of the backends file against the catalog
    /// model. `credentials` looks an environment variable up (the process
    /// environment, or a test's map).
    pub(super) fn new(
        model: &vidgate_core::Model,
        config: HostedModelConfig,
        kind: ProviderKind,
        credentials: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HostedPlan, String> {
        config.check(model)?;
        let credential_env = config
            .credential_env
            .clone()
            .unwrap_or_else(|| kind.default_credential_env().to_owned());
        check_credential_env(&credential_env)?;
        let credential = credentials(&credential_env)
            .filter(|value| !value.trim().is_empty())
            .ok_or_else(|| format!("the credential variable {credential_env} is not set"))?;
        for url in [
            &config.api_url,
            &config.platform_url,
            &config.jwks_url,
            &config.schema_url,
        ]
        .into_iter()
        .flatten()
        {
            check_provider_url(url)?;
        }
        match kind {
            ProviderKind::Fal => {
                if config.platform_url.is_some() && config.api_url.is_none() {
                    return Err("platform_url needs api_url too".into());
                }
                if config
                    .webhook_user_id
                    .as_deref()
                    .is_some_and(|user_id| user_id.trim().is_empty())
                {
                    return Err("webhook_user_id is empty".into());
                }
            }
            ProviderKind::Replicate => {
                if config.platform_url.is_some()
                    || config.jwks_url.is_some()
                    || config.schema_url.is_some()
                    || config.webhook_user_id.is_some()
                {
                    return Err(
                        "platform_url, jwks_url, schema_url and webhook_user_id are for fal only"
                            .into(),
                    );
                }
            }
        }
        let limits = BudgetLimits::resolve(&config.budget.clone().unwrap_or_default())?;
        Ok(HostedPlan {
            model_id: model.id.clone(),
            config,
            kind,
            credential_env,
            credential,
            limits,
        })
    }

    pub(super) fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// Adds this model's request budget to those of the file, refusing one
    /// that another model of the same credential contradicts.
    pub(super) fn add_budget(&self, budgets: &mut BudgetsInFile) -> Result<(), String> {
        budgets.add(
            self.kind.name(),
            &self.credential,
            self.limits,
            self.config.budget.is_some(),
        )
    }

    /// Builds the backend with the node's parts; its calls feed its
    /// provider's circuit of `circuits` and take their tokens from its
    /// credential's budget of `budgets`.
    pub(super) fn build(
        &self,
        parts: &BackendParts,
        circuits: &ProviderCircuits,
        budgets: &ProviderBudgets,
    ) -> Result<Arc<HostedBackend>, String> {
        let config = &self.config;
        let request_timeout = seconds(config.timeouts.request_seconds);
        let protocol: Arc<dyn ProviderProtocol> = match self.kind {
            ProviderKind::Fal => Arc::new(
                FalClient::new(
                    config.api_url.as_deref().unwrap_or(fal::DEFAULT_QUEUE_URL),
                    config
                        .platform_url
                        .as_deref()
                        .unwrap_or(fal::DEFAULT_API_URL),
                    config.jwks_url.as_deref().unwrap_or(fal::DEFAULT_JWKS_URL),
                    self.credential.clone(),
                    request_timeout,
                )?
                .with_webhook_user_id(config.webhook_user_id.clone()),
            ),
            ProviderKind::Replicate => Arc::new(ReplicateClient::new(
                config
                    .api_url
                    .as_deref()
                    .unwrap_or(replicate::DEFAULT_API_URL),
                self.credential.clone(),
                request_timeout,
            )?),
        };
        let circuit = circuits.circuit(protocol.name());
        let budget = budgets.budget(
            protocol.name(),
            &self.credential_env,
            &self.credential,
            self.limits,
            config.budget.is_some(),
        )?;
        Ok(Arc::new(HostedBackend::new(
            self, protocol, circuit, budget, parts,
        )?))
    }
}

/// Refuses a `credential_env` that could name anything but a provider
/// credential: the variable's value is sent to the file's `api_url`, so a
/// file that named `VIDGATE_DATABASE_URL` or a bucket's secret would send
/// it there. A provider credential is a variable of capitals, digits and
/// underscores that ends in `_KEY` or `_TOKEN` (`FAL_KEY`,
/// `REPLICATE_API_TOKEN`, `TEAM_FAL_KEY`), and none of vidgate's own
/// (`VIDGATE_…`) or the object store's (`AWS_…`).
fn check_credential_env(name: &str) -> Result<(), String> {
    let shaped = !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b'_')
        && (name.ends_with("_KEY") || name.ends_with("_TOKEN"));
    let reserved = ["VIDGATE_", "AWS_"]
        .iter()
        .any(|prefix| name.starts_with(prefix));
    if !shaped || reserved {
        return Err(format!(
            "credential_env {name:?} is not a provider credential variable: it must end in _KEY \
             or _TOKEN (FAL_KEY, REPLICATE_API_TOKEN, …) and not start with VIDGATE_ or AWS_"
        ));
    }
    Ok(())
}

/// Refuses a provider URL of the backends file that would carry the
/// credential in the clear: https, or plain http to this machine only (a
/// local proxy, a test's fake).
fn check_provider_url(text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|_| format!("{text:?} is not an http(s) URL"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err(format!(
            "{text:?} is plain http to another machine: use https (plain http only to loopback)"
        )),
        _ => Err(format!("{text:?} is not an http(s) URL")),
    }
}

/// A generation's job at its provider: where it is, its id, and when its
/// submit was about to be sent (Unix ms), from which its deadlines count.
struct SubmittedJob {
    target: ProviderTarget,
    job_id: String,
    created_at: i64,
    /// The input the provider was sent (the recorded intent's).
    input: serde_json::Value,
}

/// The longest wait between two backstop reads of a job whose provider
/// webhook is registered: a lost webhook delays its job's end by at most
/// about this.
const BACKSTOP_LONGEST_INTERVAL: Duration = Duration::from_secs(120);

/// Slack for the difference between our clock and a provider's when a
/// list is asked for the jobs created since an intent.
const CLOCK_SKEW_SECONDS: i64 = 60;
/// The first wait between two reads of a provider's list while a submit's
/// outcome is unknown; it doubles up to `RECONCILE_LONGEST_INTERVAL`.
const RECONCILE_FIRST_INTERVAL: Duration = Duration::from_secs(2);
const RECONCILE_LONGEST_INTERVAL: Duration = Duration::from_secs(60);

fn millis(seconds: f64) -> i64 {
    (seconds * 1000.0) as i64
}

/// Exponential backoff with jitter from 1 s, capped at 30 s, or the wait
/// the provider asked for when it is longer.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(500),
        }
    }

    fn next(&mut self, asked: Option<Duration>) -> Duration {
        use rand::RngExt;
        let jitter = rand::rng().random_range(0.8..1.2);
        let wait = self.next.mul_f64(jitter);
        self.next = (self.next * 2).min(Duration::from_secs(30));
        asked.map_or(wait, |asked| asked.max(wait))
    }
}

/// A hosted job's failure, and whether its provider is known not to have
/// the job: only then may another provider run it, so that a generation
/// never has two paid provider jobs.
#[derive(Debug)]
pub(super) struct HostedFailure {
    pub failure: JobFailure,
    pub provider_has_no_job: bool,
}

impl HostedFailure {
    fn absent(failure: JobFailure) -> HostedFailure {
        HostedFailure {
            failure,
            provider_has_no_job: true,
        }
    }
}

impl From<JobFailure> for HostedFailure {
    fn from(failure: JobFailure) -> HostedFailure {
        HostedFailure {
            failure,
            provider_has_no_job: false,
        }
    }
}

fn failure(code: &str, message: String) -> JobFailure {
    JobFailure::Failed {
        code: code.to_owned(),
        message,
    }
}

/// The refusal at submit of a model whose every provider's circuit is
/// open: nothing is held, and the customer may retry later.
pub(super) fn no_healthy_provider(model_id: &str) -> Rejection {
    Rejection::Unavailable(format!(
        "The model {model_id} has no healthy provider right now; nothing was charged. Retry later."
    ))
}

fn refused_code(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Moderated => FailureKind::Moderated.code(),
        FailureKind::TimedOut => FailureKind::TimedOut.code(),
        _ => "upstream_error",
    }
}

fn config_failure(message: String) -> JobFailure {
    failure(
        "upstream_error",
        format!("the backend configuration: {message}"),
    )
}

fn store_failure(error: crate::store::StoreError) -> JobFailure {
    // The job goes back to the queue; a later attempt resumes from what
    // was recorded.
    tracing::error!(%error, "recording the provider job failed");
    JobFailure::Interrupted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_a_cap_and_honours_a_longer_requested_wait() {
        let mut backoff = Backoff::new();
        let first = backoff.next(None);
        assert!(first <= Duration::from_millis(600), "{first:?}");
        for _ in 0..10 {
            backoff.next(None);
        }
        assert!(backoff.next(None) <= Duration::from_secs(36));
        assert_eq!(
            Backoff::new().next(Some(Duration::from_secs(40))),
            Duration::from_secs(40)
        );
    }
}
