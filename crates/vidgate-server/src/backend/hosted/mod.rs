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
//! into our storage (`output_copy.rs`, never whole in memory) before the
//! provider's link expires.
//!
//! The machinery is split by concern: `entry.rs` reads a model's entry of
//! the backends file and `plan.rs` checks it and builds its backend;
//! `submit.rs` finds or creates a generation's job, `reconcile.rs` settles
//! a submit whose outcome is unknown, `follow.rs` reads the job until it
//! ends, `output_copy.rs` copies its video, `webhooks.rs` takes the
//! providers' webhooks and `cancel.rs` ends a job that has not started.
//! Around each provider's calls stand its circuits (`circuit.rs`) and its
//! credential's request budget (`budget/`); what is sent is the model's
//! entry (`model_config/`, `references.rs`), held against the providers'
//! schemas (`schemas.rs`, `schema_check.rs`). Each provider owns its own
//! facts and protocol (`providers/`), behind `protocol.rs`.

mod cancel;
mod follow;
mod output_copy;
pub(super) mod plan;
mod reconcile;
mod submit;
mod webhooks;

pub mod budget;
pub mod circuit;
pub mod entry;
pub mod failover;
pub mod model_config;
pub mod protocol;
pub mod providers;
pub mod references;
pub mod route;
pub mod schema_check;
pub mod schemas;
pub mod webhook_urls;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::contract::{
    Admission, Backend, Job, JobFailure, Rejection, RenderedClip, StartedJobCancel, WebhookReceipt,
    WebhookRefusal,
};
use crate::storage::Storage;
use crate::store::{ProviderRun, Store};
use budget::{BudgetedProtocol, ProviderBudget};
use circuit::ProviderCircuit;
use model_config::{HostedModelConfig, HostedTimeouts, Unserved};
use protocol::{FailureKind, ProviderProtocol};
use route::{RecentLatencies, RouteReason};

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
    webhook_urls: webhook_urls::ProviderWebhookUrls,
    /// The jobs this process follows, by generation: a verified webhook
    /// wakes the follower to read the job's state at once.
    following: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    /// This node's recent submit-to-finish times of the model's jobs here,
    /// which a failover model's `latency` route reads.
    latencies: Arc<RecentLatencies>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl HostedBackend {
    /// Where the provider sends this job's webhooks, if anywhere: nowhere
    /// for a provider that sends none, whatever the public URL.
    fn webhook_url(&self, generation_id: &str) -> Option<String> {
        if !self.protocol.sends_webhooks() {
            return None;
        }
        self.webhook_urls.url(&self.model_id, generation_id)
    }

    fn timeouts(&self) -> &HostedTimeouts {
        &self.config.timeouts
    }

    /// Whether this provider is configured for `mode` of the model.
    fn takes_mode(&self, mode: vidgate_core::Mode) -> bool {
        self.config.mode(mode).is_some()
    }

    /// Whether this provider's creates circuit lets dispatch send it work.
    fn is_healthy(&self) -> bool {
        self.circuit.creates.allows()
    }

    fn provider_name(&self) -> &'static str {
        self.protocol.name()
    }

    fn budget(&self) -> &Arc<ProviderBudget> {
        self.protocol.budget()
    }

    /// Whether this provider's budget could take a create now (see
    /// `ProviderBudget::create_ready`).
    fn create_ready(&self) -> bool {
        self.budget().create_ready()
    }

    /// Whether this provider serves the values of a job of `mode`
    /// (`accepts` in the backends file).
    fn serves(
        &self,
        mode: vidgate_core::Mode,
        input: &vidgate_core::ValidatedInput,
    ) -> Result<(), Unserved> {
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

    /// The job's cost here by the `costs` lines, on today's prices.
    fn request_cost(
        &self,
        mode: vidgate_core::Mode,
        input: &vidgate_core::ValidatedInput,
    ) -> Option<vidgate_core::Micros> {
        let today = time::OffsetDateTime::now_utc().date().to_string();
        self.config.request_cost(mode, input, &today)
    }

    /// Runs a job at this provider. With `may_fail_over`, it gives up as
    /// soon as the provider is known not to have the job and either its
    /// creates circuit is open or a submit with an unknown outcome proved
    /// to have created nothing, so that another provider can take it.
    /// `route` is why a failover model's routing chose this provider,
    /// recorded with a new intent.
    #[tracing::instrument(name = "provider.job", skip_all, fields(generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id))]
    async fn run_job(
        &self,
        job: Job,
        cancel: CancellationToken,
        may_fail_over: bool,
        route: Option<RouteReason>,
    ) -> Result<RenderedClip, HostedFailure> {
        let store = &self.store;
        let _in_flight = self.budget().job_in_flight();
        // Registered before the submit, so that a webhook arriving before
        // the wait begins still wakes it.
        let following = self.follow_wakeups(&job.generation_id);
        let submitted = tokio::select! {
            found = self.find_or_submit(store, &job, may_fail_over, route, &following.wakeup) => found?,
            _ = cancel.cancelled() => return Err(JobFailure::Interrupted.into()),
        };
        tracing::info!(generation = %job.generation_id, provider = self.protocol.name(), target = %submitted.target.0, provider_job = %submitted.job_id, "following the provider job");
        let video_url = self
            .follow(
                &job,
                &submitted,
                self.webhook_url(&job.generation_id).is_some(),
                &following.wakeup,
                &cancel,
            )
            .await?;
        self.record_latency(job.mode, &submitted);
        let copy_span = tracing::info_span!("provider.output_copy", generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id);
        let mut clip = tokio::select! {
            copied = self.copy_output(&video_url).instrument(copy_span) => copied?,
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
            cost_is_possible: false,
        });
        Ok(clip)
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
        self.run_job(job, cancel, false, None)
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
fn no_healthy_provider(model_id: &str) -> Rejection {
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
