//! What the hosted providers' protocols (one folder each under
//! `providers/`: fal, Replicate, ModelArk, DashScope) have in common, in provider-neutral terms: the state of a
//! job at a provider, a classified failure of a call to a provider, and the
//! operations the shared remote-job machinery needs from each protocol.
//!
//! No provider has an idempotency key, so the operations are shaped by
//! that: `submit` may end with an unknown outcome, which is never answered
//! by a second submit but by `find_submitted`, a search of the provider's
//! recent jobs for the one we may have created.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tracing::Instrument;

pub use crate::backend::contract::WebhookRejection;

/// Where one job is sent at a provider: a fal endpoint id
/// (`owner/app[/path]`) or a Replicate model (`owner/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTarget(pub String);

/// What one create call sends: a job's target, its input in the
/// provider's schema, where its completion webhook goes, and its deadlines.
#[derive(Debug, Clone, Copy)]
pub struct JobToCreate<'a> {
    pub target: &'a ProviderTarget,
    pub input: &'a Value,
    /// Receives the job's completion, when vidgate has a public URL.
    pub webhook_url: Option<&'a str>,
    /// Each protocol sends the one deadline its provider takes.
    pub deadlines: JobDeadlines,
}

/// The deadlines of one provider job, both counted from its creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobDeadlines {
    /// By when it must have started.
    pub start: Duration,
    /// By when it must have finished: the whole job, start and run.
    pub lifetime: Duration,
}

/// The state of a job at its provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderJobState {
    /// Accepted, waiting for a runner (fal `IN_QUEUE`, Replicate `starting`).
    Queued,
    /// Started: from here on the provider bills it (fal `IN_PROGRESS`,
    /// Replicate `processing`).
    Running,
    /// Finished with a video at `video_url`, which expires.
    Succeeded { video_url: String },
    /// Finished without a video.
    Failed(ProviderFailure),
}

impl ProviderJobState {
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            ProviderJobState::Succeeded { .. } | ProviderJobState::Failed(_)
        )
    }
}

/// Why a provider job ended without a video.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderFailure {
    pub kind: FailureKind,
    /// The provider's reason, shortened; shown to the customer.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The model ran and failed.
    Failed,
    /// The provider's safety checks refused the input or the output.
    Moderated,
    /// A deadline ended it: it never started in time (Replicate `aborted`,
    /// fal's request timeout) or ran too long.
    TimedOut,
    /// It was canceled at the provider.
    Canceled,
}

impl FailureKind {
    /// The `error.code` a generation that failed this way gets.
    pub fn code(self) -> &'static str {
        match self {
            FailureKind::Failed => "generation_failed",
            FailureKind::Moderated => "content_moderated",
            FailureKind::TimedOut => "upstream_timeout",
            FailureKind::Canceled => "upstream_canceled",
        }
    }
}

/// A call to a provider that did not give an answer we can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// 429: too many requests; try again after `retry_after` if given.
    #[error("the provider is rate limiting us: {message}")]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    /// 5xx, a timeout, a reset connection or an unreadable answer: the
    /// provider may or may not have acted on the request. Worth a retry for
    /// reads; for a submit it means the outcome is unknown.
    #[error("the provider did not answer usefully: {message}")]
    Unavailable {
        retry_after: Option<Duration>,
        message: String,
    },
    /// A 5xx from the provider's front door (its ingress), which the
    /// provider's own client recognises as never having reached its
    /// servers: nothing was created, and the call may be retried.
    #[error("the provider's front door refused the call: {message}")]
    NotReceived { message: String },
    /// 401 or 403: our credential is wrong; no retry helps.
    #[error("the provider refused our credential: {message}")]
    Unauthorized { message: String },
    /// 404: the provider does not know the job (or the endpoint).
    #[error("the provider does not know it: {message}")]
    NotFound { message: String },
    /// Another 4xx: the provider refused this request for good (invalid
    /// input, moderation at submit). For a submit: no job was created.
    #[error("the provider refused the request ({status}): {message}")]
    Refused {
        status: u16,
        kind: FailureKind,
        message: String,
    },
}

impl ProviderError {
    /// Whether repeating the same read later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Unavailable { .. }
                | ProviderError::NotReceived { .. }
        )
    }

    /// The wait the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. }
            | ProviderError::Unavailable { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// What a provider's list of recent jobs says about a submit whose outcome
/// is unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubmittedSearch {
    /// The jobs whose listed input has every field sent, oldest first.
    pub matching: Vec<String>,
    /// The jobs of the same target whose listed input is gone (removed by
    /// the provider, or not listed): any of them may be the submit's job.
    pub input_unknown: Vec<InputUnknownJob>,
    /// The list could not be read whole: a page that is not a list of
    /// jobs, more jobs counted than read, or more pages than vidgate
    /// reads. Such a list proves neither that the submit created a job nor
    /// that it created none: the job is never submitted again, and the
    /// generation fails at its deadline with the job's possible cost.
    pub list_incomplete: bool,
}

impl SubmittedSearch {
    /// What a list that could not be read whole says: nothing either way.
    pub fn cannot_tell() -> SubmittedSearch {
        SubmittedSearch {
            list_incomplete: true,
            ..SubmittedSearch::default()
        }
    }
}

/// A listed job whose input cannot be compared with what was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct InputUnknownJob {
    pub job_id: String,
    /// When the provider created it (unix seconds), where the list says.
    pub created_at: Option<i64>,
    /// How long it ran, where the list says (Replicate's `predict_time`):
    /// what the operator may have paid for it.
    pub ran_seconds: Option<f64>,
}

/// Whether a listed input can be compared with what was sent: a provider
/// that removed a job's data lists no input, or an empty one.
pub fn listed_input_is_known(listed: &Value) -> bool {
    listed.as_object().is_some_and(|fields| !fields.is_empty())
}

/// What a provider answered to a cancel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CancelOutcome {
    /// The provider says the job ended: it will not run (on). `ran_seconds`
    /// is how long it ran first, where the provider says (a job that
    /// started between our state read and the cancel is billed for it).
    Canceled { ran_seconds: Option<f64> },
    /// The provider took the cancel, but its answer does not say that the
    /// job ended (fal's `OK` and `CANCELLATION_REQUESTED`): the job's state
    /// tells.
    Requested,
    /// The provider refused: the job had already finished.
    Refused,
    /// The provider does not know the job.
    NotFound,
}

/// What canceling a job that vidgate saw queued at its provider came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CancelResult {
    /// The provider ended the job; it ran `ran_seconds` first, where known.
    Carried { ran_seconds: Option<f64> },
    /// The job had started (or finished): vidgate did not send a cancel,
    /// because both providers bill a canceled running job.
    Declined,
    /// The cancel was sent, and the provider refused it or did not confirm
    /// it in time: the job goes on.
    NotCarried,
    /// The cancel was sent and the job is gone, at a provider whose cancel
    /// also deletes a job that has finished (ModelArk's `DELETE`): it will
    /// not run on, but it may have finished between the read and the
    /// cancel, and been billed in full.
    Gone,
}

/// The HTTP client every provider's calls go out on: it follows no
/// redirect, since a redirect would carry our credential to wherever it
/// points, and ignores proxy settings of the environment.
pub fn credential_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|error| format!("the HTTP client could not start: {error}"))
}

/// A provider's protocol, as the remote-job machinery drives it.
#[async_trait]
pub trait ProviderProtocol: Send + Sync + 'static {
    /// The provider's name in logs and in the backends file (`fal`,
    /// `replicate`).
    fn name(&self) -> &'static str;

    /// Creates one job.
    /// `Err(Unavailable)` means the outcome is unknown: reconcile with
    /// `find_submitted`, never submit again blindly.
    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError>;

    /// Reads the state of job `job_id`.
    async fn state(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError>;

    /// Asks the provider to cancel job `job_id`, and reads its answer.
    /// Called only for a job seen queued a moment before
    /// (`cancel_if_queued`, the start deadline): both providers also cancel
    /// running jobs, which they bill.
    async fn cancel(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError>;

    /// Verifies a webhook the provider sent us: its signature, with the
    /// keys or secret the provider publishes (fetched by the protocol and
    /// kept for a while), and its time. Only the job's id, the delivery's
    /// id and the listed input (where the body has it) are taken from it:
    /// the job's state is then read from the provider, so a webhook can
    /// hasten a job, or prove that a submit whose answer was lost created
    /// it, but never decide how it ended.
    async fn verify_webhook(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError>;

    /// Looks, in the provider's list of recent jobs, for jobs created for
    /// `target` at or after `since` (unix seconds) whose listed input has
    /// every field of `input` with the value sent (a provider may list its
    /// defaults too): the ids of the jobs a submit with an unknown outcome
    /// may have created, oldest first. Jobs of `target` whose input the
    /// list no longer shows (Replicate removes it after an hour) can be
    /// neither matched nor ruled out, and are returned apart.
    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError>;

    /// Whether the provider's list shows jobs that have not finished. Where
    /// it does (Replicate lists every prediction by creation time), a list
    /// read after a submit's call ended proves whether the submit created a
    /// job. Where it does not (fal lists finished requests only), a job
    /// that is absent from the list may still be queued or running, and is
    /// proved absent only once its deadlines have passed.
    fn lists_unfinished_jobs(&self) -> bool;

    /// Whether vidgate itself must end a job that has not started by the
    /// start deadline. fal does it for us (`X-Fal-Request-Timeout` is a
    /// deadline to start); Replicate's `Cancel-After` bounds the whole job
    /// instead, so a prediction still starting at the start deadline is
    /// canceled by vidgate.
    fn start_deadline_is_ours(&self) -> bool {
        false
    }

    /// Whether the provider's cancel call also deletes a job that has
    /// finished (ModelArk's `DELETE` removes a finished task's record), so
    /// that a job gone after a cancel may have run to its end first.
    fn cancel_deletes_finished_jobs(&self) -> bool {
        false
    }

    /// Whether the provider calls back when a job ends. Only then is a job
    /// followed as webhook-driven (its first read waiting for the callback
    /// or the model's usual run time); a provider that sends none
    /// (DashScope documents no callback for video synthesis) is polled
    /// from the start, whether or not vidgate has a public URL.
    fn sends_webhooks(&self) -> bool {
        true
    }

    /// Headers the output download needs (Replicate's delivery links may ask
    /// for our token); none by default.
    fn output_headers(&self, _video_url: &str) -> HeaderMap {
        HeaderMap::new()
    }
}

/// The wait a provider asked for in `Retry-After` (seconds or an HTTP
/// date), `retry-after-ms`, or `ratelimit-reset` (seconds until the window
/// resets), whichever comes first in that order.
pub fn requested_wait(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(wait) = text("retry-after").and_then(|value| parse_retry_after(value, now)) {
        return Some(wait);
    }
    if let Some(milliseconds) = text("retry-after-ms").and_then(|value| value.trim().parse().ok()) {
        return Some(Duration::from_millis(milliseconds));
    }
    text("ratelimit-reset")
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Reads `Retry-After` as delay-seconds or as an HTTP date.
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or_default())
}

/// A provider's message cut to a length fit for logs and error objects.
pub fn shortened(text: &str) -> String {
    const LIMIT: usize = 500;
    let mut short: String = text.chars().take(LIMIT).collect();
    if text.chars().nth(LIMIT).is_some() {
        short.push('…');
    }
    short
}

/// Classifies an HTTP answer that was not a success. `message` is what the
/// provider's body said, already extracted by the protocol; `kind` is what
/// a refusal (4xx) means for this provider's body.
pub fn classify_status(
    status: u16,
    headers: &HeaderMap,
    message: String,
    refusal_kind: FailureKind,
    now: SystemTime,
) -> ProviderError {
    let retry_after = requested_wait(headers, now);
    match status {
        429 => ProviderError::RateLimited {
            retry_after,
            message,
        },
        401 | 403 => ProviderError::Unauthorized { message },
        404 => ProviderError::NotFound { message },
        // 408 (the provider timed our request out) and 409 (a conflict the
        // provider says to retry) are as unknown as a 5xx.
        408 | 409 | 500..=599 => ProviderError::Unavailable {
            retry_after,
            message,
        },
        _ => ProviderError::Refused {
            status,
            kind: refusal_kind,
            message,
        },
    }
}

/// A transport failure (timeout, reset, refused connection) of a call.
pub fn transport_error(error: reqwest::Error) -> ProviderError {
    // The URL may carry a webhook token in its query: never show it.
    ProviderError::Unavailable {
        retry_after: None,
        message: error.without_url().to_string(),
    }
}

/// Reads a JSON body, or says why it could not.
pub async fn json_body(response: reqwest::Response, limit: usize) -> Result<Value, ProviderError> {
    let bytes = limited_body(response, limit).await?;
    serde_json::from_slice(&bytes).map_err(|error| ProviderError::Unavailable {
        retry_after: None,
        message: format!("an unreadable answer: {error}"),
    })
}

/// Reads a body of at most `limit` bytes: a provider's answer is bounded
/// like any other untrusted input.
pub async fn limited_body(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ProviderError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if bytes.len() + chunk.len() > limit {
            return Err(ProviderError::Unavailable {
                retry_after: None,
                message: format!("the answer is larger than {limit} bytes"),
            });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// The largest JSON answer read from a provider. Status and prediction
/// bodies are a few KB; a list page of 100 predictions with their inputs
/// stays well under this.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A provider's JSON API reached with a bearer credential (Replicate,
/// ModelArk, DashScope): the API root, the credential (kept here only,
/// never logged) and the timeout of each call. What an error answer means
/// stays each provider's own (`call`'s `error_from_response`).
pub struct BearerApi {
    /// The provider's name in traces (`gen_ai.provider.name`).
    provider_name: String,
    http: reqwest::Client,
    api_url: url::Url,
    credential: String,
    request_timeout: Duration,
}

impl BearerApi {
    /// `api_url` is the API root (a trailing `/` is added so that paths
    /// join under it); `provider` names it in the error.
    pub fn new(
        provider: &str,
        api_url: &str,
        credential: String,
        request_timeout: Duration,
    ) -> Result<BearerApi, String> {
        let api_url = url::Url::parse(&format!("{}/", api_url.trim_end_matches('/')))
            .map_err(|error| format!("the {provider} API URL is not valid: {error}"))?;
        let http = credential_client()?;
        Ok(BearerApi {
            provider_name: provider.to_ascii_lowercase(),
            http,
            api_url,
            credential,
            request_timeout,
        })
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn api_url(&self) -> &url::Url {
        &self.api_url
    }

    /// `path` under the API root.
    pub fn url(&self, path: &str) -> url::Url {
        self.api_url
            .join(path)
            .expect("paths built here are relative URLs")
    }

    /// The `Authorization` header, marked sensitive so that it is never
    /// shown in a debug print.
    pub fn authorization(&self) -> reqwest::header::HeaderValue {
        let mut value =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", self.credential))
                .unwrap_or_else(|_| reqwest::header::HeaderValue::from_static("Bearer invalid"));
        value.set_sensitive(true);
        value
    }

    /// Sends `request` with the credential and the timeout, and reads a
    /// successful answer's JSON; any other answer is classified by the
    /// provider's own `error_from_response`.
    pub async fn call<Classified>(
        &self,
        request: reqwest::RequestBuilder,
        error_from_response: impl FnOnce(reqwest::Response) -> Classified,
    ) -> Result<Value, ProviderError>
    where
        Classified: std::future::Future<Output = ProviderError>,
    {
        let request = request
            .header(reqwest::header::AUTHORIZATION, self.authorization())
            .timeout(self.request_timeout);
        let response = send_traced(&self.provider_name, request)
            .await
            .map_err(transport_error)?;
        if !response.status().is_success() {
            return Err(error_from_response(response).await);
        }
        json_body(response, MAX_ANSWER_BYTES).await
    }
}

/// Sends a request to a provider in its own CLIENT span (`provider.http`,
/// `gen_ai.provider.name` = `provider`, the status it got), which the
/// request carries as its `traceparent` while tracing is on, so the
/// provider's side can join the trace.
pub async fn send_traced(
    provider: &str,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, reqwest::Error> {
    let (client, request) = request.build_split();
    let mut request = request?;
    let span = tracing::info_span!(
        "provider.http",
        otel.kind = "client",
        otel.name = %format_args!("{} {provider}", request.method()),
        provider,
    );
    if crate::telemetry::enabled() {
        crate::telemetry::describe(
            &span,
            &[
                ("gen_ai.provider.name", provider),
                ("http.request.method", request.method().as_str()),
                (
                    "server.address",
                    request.url().host_str().unwrap_or_default(),
                ),
            ],
        );
        crate::telemetry::pass_on(&span, request.headers_mut());
    }
    let response = client.execute(request).instrument(span.clone()).await;
    match &response {
        Ok(response) => {
            let status = response.status();
            crate::telemetry::describe_number(
                &span,
                "http.response.status_code",
                i64::from(status.as_u16()),
            );
            if !status.is_success() {
                crate::telemetry::mark_failed(&span, status.as_str());
            }
        }
        Err(_) => crate::telemetry::mark_failed(&span, "transport"),
    }
    response
}

/// Refuses a webhook that lacks one of the provider's signature headers
/// before the provider's keys are read: an unsigned request costs neither
/// a read of the keys nor a line of the provider's error.
pub fn require_signature_headers(
    headers: &HeaderMap,
    names: &[&str],
) -> Result<(), WebhookRejection> {
    match names.iter().find(|name| {
        headers
            .get(**name)
            .and_then(|value| value.to_str().ok())
            .is_none_or(|value| value.trim().is_empty())
    }) {
        Some(missing) => Err(WebhookRejection::Malformed((*missing).to_owned())),
        None => Ok(()),
    }
}

/// How far a webhook's timestamp may be from our clock, both ways.
pub const WEBHOOK_TOLERANCE_SECONDS: i64 = 300;

/// What a verified provider webhook is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedWebhook {
    /// The provider's job id (fal `request_id`, Replicate prediction `id`).
    pub job_id: String,
    /// The same for every retry of one delivery, so duplicates are
    /// recognised: fal sends one webhook per request, Replicate one per
    /// event, each with its `webhook-id`.
    pub delivery_id: String,
    /// The job's input as the webhook lists it, where it does (Replicate's
    /// webhook body is the prediction): checked against what vidgate sent
    /// before a webhook is taken as proof of a job whose submit answer was
    /// lost.
    pub input: Option<Value>,
}

/// Why a provider webhook was not verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The webhook is not the provider's, or not for now.
    #[error(transparent)]
    Rejected(#[from] WebhookRejection),
    /// The provider's keys or secret could not be read: the provider will
    /// retry, and polling finishes the job meanwhile.
    #[error("the provider's signing keys could not be read: {0}")]
    KeysUnavailable(ProviderError),
}

/// How long a provider's webhook keys or secret are kept before they are
/// read again, so a rotation reaches us within this time.
pub const WEBHOOK_KEYS_LIFETIME: Duration = Duration::from_secs(600);

/// How long a failed read of a provider's webhook keys or secret is
/// remembered: webhooks arriving meanwhile are refused with the same error
/// without another read, so a flood of webhooks (forged ones cost nothing
/// to send) makes at most one call to the provider in this time. The
/// provider retries its genuine webhooks, and polling finishes the jobs
/// meanwhile.
pub const WEBHOOK_KEYS_FAILURE_MEMORY: Duration = Duration::from_secs(30);

/// Keys (or a secret) fetched from a provider and kept for
/// `WEBHOOK_KEYS_LIFETIME`, and the last failed fetch, remembered for
/// `WEBHOOK_KEYS_FAILURE_MEMORY`.
pub struct CachedKeys<T> {
    kept: tokio::sync::Mutex<KeptKeys<T>>,
}

struct KeptKeys<T> {
    keys: Option<(std::time::Instant, T)>,
    failure: Option<(std::time::Instant, ProviderError)>,
}

impl<T> Default for CachedKeys<T> {
    fn default() -> CachedKeys<T> {
        CachedKeys {
            kept: tokio::sync::Mutex::new(KeptKeys {
                keys: None,
                failure: None,
            }),
        }
    }
}

impl<T: Clone> CachedKeys<T> {
    /// The kept keys, or fresh ones from `fetch` when none are kept or
    /// they are too old; the remembered error while a failed fetch is
    /// recent. The lock is held across the fetch so that a burst of
    /// webhooks reads the keys once.
    pub async fn get<F, Fut>(&self, fetch: F) -> Result<T, ProviderError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        self.get_remembering_failures_for(WEBHOOK_KEYS_FAILURE_MEMORY, fetch)
            .await
    }

    async fn get_remembering_failures_for<F, Fut>(
        &self,
        failure_memory: Duration,
        fetch: F,
    ) -> Result<T, ProviderError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProviderError>>,
    {
        let mut kept = self.kept.lock().await;
        if let Some((fetched_at, keys)) = kept.keys.as_ref()
            && fetched_at.elapsed() < WEBHOOK_KEYS_LIFETIME
        {
            return Ok(keys.clone());
        }
        if let Some((failed_at, error)) = kept.failure.as_ref()
            && failed_at.elapsed() < failure_memory
        {
            return Err(error.clone());
        }
        match fetch().await {
            Ok(keys) => {
                kept.keys = Some((std::time::Instant::now(), keys.clone()));
                kept.failure = None;
                Ok(keys)
            }
            Err(error) => {
                kept.failure = Some((std::time::Instant::now(), error.clone()));
                Err(error)
            }
        }
    }
}

/// How long a cancel that the provider took without saying the job ended
/// (fal) waits for the job's state to show the cancel, read every
/// `CANCEL_CONFIRM_EVERY`.
pub const CANCEL_CONFIRM_WITHIN: Duration = Duration::from_secs(3);
pub const CANCEL_CONFIRM_EVERY: Duration = Duration::from_millis(250);

/// Cancels job `job_id` only if it has not started: its state is read
/// first, and a job that runs (or ran) is left alone, because both
/// providers bill a canceled running job for the time it ran. A cancel the
/// provider took is then judged by what the provider says happened, not by
/// whether the job slipped into running in between: Replicate's answer is
/// the prediction (`canceled` or `aborted` means it ended, even with a
/// `started_at`); fal's answer is confirmed by reading the job's state.
pub async fn cancel_if_queued(
    protocol: &dyn ProviderProtocol,
    target: &ProviderTarget,
    job_id: &str,
) -> Result<CancelResult, ProviderError> {
    match protocol.state(target, job_id).await {
        Ok(ProviderJobState::Queued) => {}
        Ok(_) | Err(ProviderError::NotFound { .. }) => return Ok(CancelResult::Declined),
        Err(error) => return Err(error),
    }
    match protocol.cancel(target, job_id).await? {
        CancelOutcome::Canceled { ran_seconds } => Ok(CancelResult::Carried { ran_seconds }),
        CancelOutcome::Refused | CancelOutcome::NotFound => Ok(CancelResult::NotCarried),
        CancelOutcome::Requested => confirm_cancel(protocol, target, job_id).await,
    }
}

/// Reads a job's state after a cancel the provider took, until it shows
/// whether the cancel ended the job or `CANCEL_CONFIRM_WITHIN` passes.
pub async fn confirm_cancel(
    protocol: &dyn ProviderProtocol,
    target: &ProviderTarget,
    job_id: &str,
) -> Result<CancelResult, ProviderError> {
    let until = std::time::Instant::now() + CANCEL_CONFIRM_WITHIN;
    loop {
        match protocol.state(target, job_id).await {
            Ok(ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Canceled,
                ..
            })) => return Ok(CancelResult::Carried { ran_seconds: None }),
            // Gone where the cancel deletes finished jobs too: it may have
            // finished first. Elsewhere a guess, as fal does not document
            // the state of a request it removed from its queue: gone is as
            // good as ended.
            Err(ProviderError::NotFound { .. }) => {
                return Ok(if protocol.cancel_deletes_finished_jobs() {
                    CancelResult::Gone
                } else {
                    CancelResult::Carried { ran_seconds: None }
                });
            }
            Ok(ProviderJobState::Succeeded { .. } | ProviderJobState::Failed(_)) => {
                return Ok(CancelResult::NotCarried);
            }
            Ok(ProviderJobState::Queued | ProviderJobState::Running) => {}
            Err(error) if error.is_transient() => {}
            Err(error) => return Err(error),
        }
        if std::time::Instant::now() >= until {
            return Ok(CancelResult::NotCarried);
        }
        tokio::time::sleep(CANCEL_CONFIRM_EVERY).await;
    }
}

/// Whether a listed job's input has every field vidgate sent, each with
/// the value sent: a provider may add its defaults to what it lists, and
/// may write a number sent as `6` as `6.0`.
pub fn sent_fields_match(sent: &Value, listed: &Value) -> bool {
    let (Some(sent), Some(listed)) = (sent.as_object(), listed.as_object()) else {
        return false;
    };
    sent.iter().all(|(name, value)| {
        listed
            .get(name)
            .is_some_and(|listed_value| same_value(value, listed_value))
    })
}

/// Whether a value shown by a provider is the value sent: numbers by
/// their value (`6` is `6.0`), objects by every field sent.
pub fn same_value(sent: &Value, listed: &Value) -> bool {
    match (sent, listed) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(_), Value::Object(_)) => sent_fields_match(sent, listed),
        _ => sent == listed,
    }
}

/// A Unix time in seconds as RFC 3339, the form both providers' list
/// filters take.
pub(super) fn iso8601(unix_seconds: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// An RFC 3339 time, as both providers' lists give it, as unix seconds.
pub(super) fn unix_seconds(text: &str) -> Option<i64> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(time::OffsetDateTime::unix_timestamp)
}

/// The error for an answer of the provider's that this protocol cannot
/// read: reported as the provider being unavailable.
pub(super) fn unreadable(message: &str) -> ProviderError {
    ProviderError::Unavailable {
        retry_after: None,
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_wait_comes_from_retry_after_then_milliseconds_then_ratelimit_reset() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            requested_wait(
                &headers(&[("retry-after", "7"), ("ratelimit-reset", "30")]),
                now
            ),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            requested_wait(&headers(&[("retry-after-ms", "1500")]), now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            requested_wait(
                &headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "30")]),
                now
            ),
            Some(Duration::from_secs(30))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(12));
        assert_eq!(
            requested_wait(&headers(&[("retry-after", &date)]), now),
            Some(Duration::from_secs(12))
        );
        assert_eq!(requested_wait(&headers(&[]), now), None);
    }

    #[test]
    fn statuses_are_classified_by_what_a_retry_can_do() {
        let now = SystemTime::UNIX_EPOCH;
        let classify = |status: u16| {
            classify_status(
                status,
                &headers(&[("retry-after", "3")]),
                "why".into(),
                FailureKind::Failed,
                now,
            )
        };
        assert_eq!(
            classify(429),
            ProviderError::RateLimited {
                retry_after: Some(Duration::from_secs(3)),
                message: "why".into()
            }
        );
        for unknown in [408, 409, 500, 502, 503, 504] {
            assert!(classify(unknown).is_transient(), "{unknown}");
        }
        assert!(matches!(classify(401), ProviderError::Unauthorized { .. }));
        assert!(matches!(classify(404), ProviderError::NotFound { .. }));
        assert!(matches!(
            classify(422),
            ProviderError::Refused { status: 422, .. }
        ));
        assert!(!classify(422).is_transient());
    }

    #[tokio::test]
    async fn a_failed_key_fetch_is_remembered_for_a_while_then_tried_again() {
        let keys = CachedKeys::<u32>::default();
        let fetches = std::sync::atomic::AtomicU32::new(0);
        let fetch = |answer: Result<u32, ProviderError>| {
            fetches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { answer }
        };
        let outage = || ProviderError::Unavailable {
            retry_after: None,
            message: "down".into(),
        };
        let memory = Duration::from_millis(300);
        for _ in 0..5 {
            let answer = keys
                .get_remembering_failures_for(memory, || fetch(Err(outage())))
                .await;
            assert_eq!(answer, Err(outage()));
        }
        assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1);
        tokio::time::sleep(memory).await;
        for _ in 0..3 {
            let answer = keys
                .get_remembering_failures_for(memory, || fetch(Ok(7)))
                .await;
            assert_eq!(answer, Ok(7));
        }
        // One more fetch after the memory ended; the keys it got are kept.
        assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_listed_input_matches_when_it_has_every_sent_field_with_its_value() {
        let sent =
            serde_json::json!({"prompt": "a fox", "duration": 6, "image_urls": ["https://a/1"]});
        // The provider lists its defaults beside what was sent, and writes
        // the number as a float.
        let listed = serde_json::json!({"prompt": "a fox", "duration": 6.0,
            "image_urls": ["https://a/1"], "num_frames": 121, "enable_safety_checker": true});
        assert!(sent_fields_match(&sent, &listed));
        let other_prompt =
            serde_json::json!({"prompt": "a cat", "duration": 6, "image_urls": ["https://a/1"]});
        assert!(!sent_fields_match(&sent, &other_prompt));
        let missing = serde_json::json!({"prompt": "a fox", "image_urls": ["https://a/1"]});
        assert!(!sent_fields_match(&sent, &missing));
        let other_duration =
            serde_json::json!({"prompt": "a fox", "duration": 5, "image_urls": ["https://a/1"]});
        assert!(!sent_fields_match(&sent, &other_duration));
    }

    #[test]
    fn long_messages_are_shortened() {
        assert_eq!(shortened("short"), "short");
        let long = "x".repeat(600);
        assert_eq!(shortened(&long).chars().count(), 501);
    }
}
