//! What every backend is: the `Backend` trait, the job a worker hands it,
//! the clip or the failure it gives back, and its answers to admission,
//! provider webhooks and cancels. Every backend (`local.rs`, `cog.rs`,
//! `hosted/`) stands on this file, and this file on none of them.

use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use vidgate_core::Mode;

use crate::bound_media::JobMedia;

/// Everything a backend needs to run one generation.
#[derive(Debug, Clone)]
pub struct Job {
    pub generation_id: String,
    pub model: String,
    pub mode: Mode,
    /// The input as the customer sent it.
    pub input: vidgate_core::ValidatedInput,
    /// The input a backend renders with: every media URL replaced by the
    /// URL of the copy submit checked, priced and kept (`bound_media.rs`),
    /// which the local engine reads from storage. Backends use this, never
    /// the customer's URLs; one that hands URLs to a model server over HTTP
    /// hands it [`Job::fetchable_media_input`] instead.
    pub media_input: vidgate_core::ValidatedInput,
    /// The kept media and the signer of its URLs.
    pub media: JobMedia,
    pub width: u32,
    pub height: u32,
    /// The seed to render with: the requested one, or one chosen for this job
    /// and recorded in the output so the result can be reproduced.
    pub seed: u64,
    /// What the customer pays for it (the hold), which a failover model's
    /// routing holds each provider's cost against.
    pub price: vidgate_core::Micros,
}

impl Job {
    /// `media_input` with each kept copy's URL signed to be served for
    /// `lifetime` from now and refused after: what a model server or a
    /// provider gets, long enough for it to fetch the media once the job
    /// starts.
    pub fn fetchable_media_input(&self, lifetime: Duration) -> vidgate_core::ValidatedInput {
        self.media.signed_input(&self.media_input, lifetime)
    }
}

/// A request as a backend sees it at submit time, before anything is held:
/// a refusal here leaves no generation and no ledger entry behind.
pub struct Admission<'a> {
    pub model: &'a vidgate_core::Model,
    pub mode: Mode,
    pub input: &'a vidgate_core::ValidatedInput,
    /// What the customer would pay for it.
    pub price: vidgate_core::Micros,
}

/// A finished clip, not yet stored.
#[derive(Debug)]
pub struct RenderedClip {
    pub mp4: ClipBytes,
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub duration_s: f64,
    pub has_audio: bool,
    /// The hosted provider that made it and its cost; `None` for clips
    /// made by the operator's own engine or servers.
    pub provider_run: Option<crate::store::ProviderRun>,
    /// The seed the clip was made with, as the renderer was sent it:
    /// reported as `output.seed`. `None` when the model server or provider
    /// was sent no seed (its target takes none), so that no seed is
    /// claimed that was not applied.
    pub seed: Option<u64>,
}

/// Where a finished clip's bytes are until the worker stores them.
#[derive(Debug)]
pub enum ClipBytes {
    /// In memory: the local engine's render, or an output that arrived
    /// inline (a Cog data URI).
    InMemory(Vec<u8>),
    /// A file in the storage's incoming directory: an output downloaded
    /// from a model server or a provider (`output.rs`), never whole in
    /// memory. The file is removed when this is dropped, unless the worker
    /// stores it (`Storage::put_output_file`) first.
    File(tempfile::TempPath),
}

#[derive(Debug, thiserror::Error)]
pub enum JobFailure {
    /// The job itself failed: the generation fails and its hold is refunded.
    #[error("{message}")]
    Failed { code: String, message: String },
    /// The job was stopped from outside (shutdown): it goes back to the queue.
    #[error("the job was interrupted")]
    Interrupted,
}

/// Why a backend refused a job at admission, before it was queued for work.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// The model cannot take new work right now (503 `model_unavailable`).
    #[error("{0}")]
    Unavailable(String),
    /// The model server refused the job for good (502 `upstream_error`).
    #[error("{0}")]
    Upstream(String),
    /// No provider of the model serves a value of the request, named by
    /// `param` (400 `invalid_request`).
    #[error("{message}")]
    Unserved { param: String, message: String },
}

#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// What kind of backend this is (`local`, `cog`, a hosted provider's
    /// name, or `failover`): the `backend` label of the job metrics, so a
    /// fixed few values.
    fn kind(&self) -> &'static str;
    /// Whether the job runs at a hosted provider, so that following it
    /// costs this node a few requests and no CPU: such jobs go to the
    /// node's hosted pool (`workers.rs`), not to its CPU workers.
    fn runs_at_provider(&self) -> bool {
        false
    }
    /// Checks, at submit time and before the hold, that the backend will
    /// take this job.
    async fn admit(&self, admission: &Admission<'_>) -> Result<(), Rejection>;
    /// Runs the job to completion. Must return `Interrupted` promptly when
    /// `cancel` fires.
    async fn run(&self, job: Job, cancel: CancellationToken) -> Result<RenderedClip, JobFailure>;
    /// Takes a provider's webhook about the job of `generation_id`. Only
    /// hosted backends have provider jobs.
    async fn receive_provider_webhook(
        &self,
        _generation_id: &str,
        _headers: &reqwest::header::HeaderMap,
        _body: &[u8],
    ) -> Result<WebhookReceipt, WebhookRefusal> {
        Err(WebhookRefusal::UnknownJob)
    }
    /// Wakes this process's follower of `generation_id`'s provider job, if
    /// it has one, to read the job's state now; true when it had one.
    fn wake_follower(&self, _generation_id: &str) -> bool {
        false
    }
    /// Cancels the job of a running generation where it still waits in a
    /// provider's queue; a backend whose running jobs have started answers
    /// `Started`. `input` is the generation's input (defaults filled in),
    /// which prices the seconds a job that started in the moment before
    /// the cancel may be billed for.
    async fn cancel_before_start(
        &self,
        _generation_id: &str,
        _input: &serde_json::Value,
    ) -> StartedJobCancel {
        StartedJobCancel::Started
    }
    /// Whether a job claimed now could be sent on at once: false while a
    /// hosted provider's request budget has no create to spare (or its
    /// jobs in flight are at their ceiling), so that the job waits in
    /// vidgate's queue as `queued`. Always true for backends that run jobs
    /// themselves.
    fn create_ready(&self) -> bool {
        true
    }
    /// Tells the backend that a job was claimed because it was
    /// `create_ready`, so that the next answer counts that job's create
    /// as taken until the job asks for it. Nothing for backends that run
    /// jobs themselves.
    fn promise_create(&self) {}
}

/// What became of a provider webhook that verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookReceipt {
    /// The job's follower was woken to read the job's state now.
    Taken,
    /// A delivery taken before (a provider's retry): answered, ignored.
    Duplicate,
}

/// Why a provider webhook was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookRefusal {
    /// No such model, generation or provider job, or the webhook is about
    /// another job than the generation's.
    #[error("no provider job of this generation matches the webhook")]
    UnknownJob,
    /// Not signed by the provider, or not now.
    #[error(transparent)]
    Rejected(#[from] WebhookRejection),
    /// The provider's keys could not be read; the provider retries, and
    /// polling finishes the job meanwhile.
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// What canceling the job of a running generation at its provider did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartedJobCancel {
    /// The provider ended the job at our cancel: the generation is
    /// canceled and refunded. A job that started in the moment between our
    /// state read and the cancel may be billed for the seconds it ran:
    /// `provider_run` records them as the generation's cost, which the
    /// operator bears.
    Canceled {
        provider_run: crate::store::ProviderRun,
    },
    /// It started (or is being submitted, or is not the provider's):
    /// vidgate does not send a cancel, as for any running generation.
    Started,
    /// The cancel was sent, but the provider refused it or did not confirm
    /// that it ended the job: the generation goes on.
    NotCarried,
    /// The provider could not be asked.
    Unreachable(String),
}

/// Why a provider webhook was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookRejection {
    #[error("a signature header is missing or malformed: {0}")]
    Malformed(String),
    #[error("the webhook's timestamp is outside the tolerance")]
    Stale,
    #[error("no signature matches")]
    BadSignature,
    #[error("the webhook's body is not valid: {0}")]
    InvalidBody(String),
    /// Signed by the provider, but for another account than the
    /// operator's.
    #[error("the webhook is signed for another account")]
    OtherAccount,
}
