//! A fake of the two hosted providers, fal (`fal.rs`) and Replicate
//! (`replicate.rs`), on one port-0 axum server: their routes, their
//! authentication, their error bodies and rate-limit headers, and their
//! signed webhooks. Each job is a small state machine (queued → running →
//! succeeded or failed, canceled, timed out) driven by a task, and a
//! successful job's output is a real MP4 rendered by our own engine, served
//! from the fake's media route.
//!
//! A fake proves only what its source proves. Each behaviour below names
//! its source: a provider's document (fal's docs pages, Replicate's OpenAPI
//! document in `fixtures/replicate/openapi.yaml`) or a recorded exchange
//! (`fixtures/replicate/*.json`, Replicate's own client's cassettes). A
//! submit's input is checked against the provider's published schema of
//! its target, as transcribed in `fixtures/provider_schemas/`, and refused
//! with a 422 as the provider would (`Switches::validate_inputs`).
//! Where the documents are silent the fake guesses, and every guess is in
//! this list, so that a test resting on one can be found and run both
//! ways:
//!
//! - GUESS fal-cancel-answer: which of its four documented answers fal
//!   gives to a cancel of a queued request (`OK` or
//!   `CANCELLATION_REQUESTED`). Switch: `Switches::fal_cancel_queued_answer`;
//!   tests run both.
//! - GUESS fal-canceled-status: a canceled request's status is `COMPLETED`
//!   with `error_type: request_cancelled`.
//! - GUESS fal-foreign-request: fal answers a read of another account's
//!   request (status, result, cancel) as it answers an unknown one, 404,
//!   and lists only the caller's own requests; the documents say only that
//!   the list is of "requests … owned by the authenticated user" or of the
//!   caller's endpoints. vidgate refuses the job on any 401, 403 or 404.
//! - GUESS fal-list-time: the list's `start` filters by the time a request
//!   ended (the list is sorted by end time); vidgate's `start` is before
//!   the request was sent, so either reading finds the same requests.
//! - GUESS replicate-422: Replicate refuses an input its model's schema
//!   does not take with a 422 problem+json; its OpenAPI document lists no
//!   status for it. fal documents its 422 (its error reference).
//! - GUESS fal-list-status-code: a failed request's `status_code` in fal's
//!   list is 500, and a failed request's `error_type` in its status is
//!   `internal_server_error`; the documents show neither.
//! - GUESS webhook-retries: a refused webhook delivery is tried three
//!   times, 200 ms apart (fal documents 10 retries in two hours, Replicate
//!   "a few times"); vidgate's polling is the backstop either way.
//! - GUESS listed-defaults: both providers list a job's input with the
//!   model's defaults added to what was sent (`LISTED_DEFAULTS`). Where
//!   they list exactly what was sent, matching by every sent field finds
//!   it too.
//! - GUESS replicate-cancel-answer-while-queued: a cancel of a prediction
//!   that had not started comes back `canceled` with `started_at` set and a
//!   small `predict_time`, as in the one recorded cancel (whose prediction
//!   started 47 ms after its creation); the recording does not show a
//!   prediction canceled before it started.
//!
//! - GUESS replicate-rate-window: Replicate counts its documented limits
//!   ("600 requests per minute" for creates, "3000/min" for every other
//!   endpoint, "short bursts allowed") in fixed windows of one minute, and
//!   answers a call over them with a 429 whose wait is the seconds until
//!   the window ends (how the minute is counted is not documented).
//!   Switch: `Switches::replicate_limits`, off by default.
//! - GUESS replicate-429-headers: Replicate's 429 carries
//!   `ratelimit-remaining` and `ratelimit-reset` beside its body. Only the
//!   body, "Your rate limit resets in ~30s.", is documented (its
//!   rate-limits page); no 429 was ever recorded. Switch:
//!   `Switches::replicate_429_headers`; tests run both readings.
//! - GUESS fal-list-finished-only: fal's request list shows finished
//!   requests only. Its page gives a status filter of `success`, `error`
//!   and `user_error` and a sort by end time, but never says so. Switch:
//!   `Switches::fal_list_shows_unfinished`; tests run both readings.
//!
//! - GUESS replicate-data-removed: Replicate documents that "all input
//!   parameters, output values, and logs are automatically removed after
//!   an hour" and that `data_removed` is then true and `output` null; the
//!   fake counts the hour from the prediction's end and lists the removed
//!   input as `{}`. vidgate reads a removed, missing or empty input alike:
//!   as one it cannot compare. Switch:
//!   `Switches::replicate_removes_data_after`.
//!
//! Switches make it misbehave: markers in the job's input (`[fake:fail]`,
//! `[fake:moderate]`, `[fake:never-start]`, `[fake:drop-webhook]`,
//! `[fake:slow-start]`, `[fake:huge-output]`, `[fake:padded-output]`)
//! steer one job; `Switches` steer the whole fake
//! (rate limiting, an outage, a submit whose answer is lost, no webhooks).

pub mod fal;
pub mod replicate;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use vidgate_core::Catalog;
use vidgate_server::backend::{BackendsConfig, apply_backends_file_with_credentials};

/// Which provider a job was submitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Provider {
    Fal,
    Replicate,
}

/// Where a job is in its life at the fake provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeStatus {
    Queued,
    Running,
    Succeeded,
    Failed {
        message: String,
        moderated: bool,
    },
    /// Canceled by the client (while queued, or while running).
    Canceled,
    /// Its deadline passed before it started (Replicate `aborted`, fal's
    /// request timeout).
    TimedOut,
}

impl FakeStatus {
    pub fn is_final(&self) -> bool {
        !matches!(self, FakeStatus::Queued | FakeStatus::Running)
    }
}

#[derive(Debug, Clone)]
pub struct FakeJob {
    pub id: String,
    pub provider: Provider,
    /// The fal endpoint id or the Replicate model.
    pub target: String,
    pub input: Value,
    pub webhook_url: Option<String>,
    /// Replicate's `webhook_events_filter`.
    pub webhook_events: Vec<String>,
    pub status: FakeStatus,
    pub created_at: f64,
    pub started_at: Option<f64>,
    pub completed_at: Option<f64>,
    /// The deadline the job was submitted with, in seconds after creation,
    /// and what it bounds at its provider.
    pub deadline: Option<JobDeadline>,
    /// Whether a cancel arrived while it ran (vidgate must never do that).
    pub canceled_while_running: bool,
    /// The fal account whose key created it (`fal::ACCOUNTS`): another
    /// account's key can neither read nor list it. Replicate's jobs are all
    /// in its one account.
    pub account: &'static str,
}

impl FakeJob {
    fn marker(&self, name: &str) -> bool {
        self.input.to_string().contains(&format!("[fake:{name}]"))
    }
}

/// A provider-side deadline of a job, as each provider documents its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JobDeadline {
    /// fal's `X-Fal-Request-Timeout`: "Server-side time-to-start deadline
    /// … Once a runner successfully begins processing, the timeout stops
    /// and inference can run as long as it needs" (fal's Platform Headers
    /// page). A request not started by then ends as timed out, for free.
    Start(f64),
    /// Replicate's `Cancel-After`: "the maximum time the prediction can run
    /// before it is automatically canceled. The lifetime is measured from
    /// when the prediction is created" (Replicate's OpenAPI document).
    /// Past it a prediction that never started is `aborted`, and one that
    /// runs is `canceled` ("reached its deadline while running").
    Lifetime(f64),
}

/// The fields each provider adds, as a guess, to a job's input when it
/// lists the job (GUESS listed-defaults).
pub const LISTED_DEFAULTS: [(&str, bool); 1] = [("enable_safety_checker", true)];

/// A job's input as its provider lists it: what was sent, with defaults.
pub fn listed_input(input: &Value) -> Value {
    let mut listed = input.clone();
    if let Some(fields) = listed.as_object_mut() {
        for (name, value) in LISTED_DEFAULTS {
            fields.entry(name).or_insert(json!(value));
        }
    }
    listed
}

/// What is wrong with `input` for `target` at `provider`, by the provider's
/// published schema as transcribed in `fixtures/provider_schemas/` (a
/// target without one takes anything): one line per difference.
pub fn invalid_input(provider: Provider, target: &str, input: &Value) -> Vec<String> {
    let directory = match provider {
        Provider::Fal => "fal",
        Provider::Replicate => "replicate",
    };
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/provider_schemas")
        .join(directory)
        .join(format!("{target}.json"));
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let fixture: Value = serde_json::from_str(&text).expect("a transcribed schema is JSON");
    vidgate_server::backend::provider_schema::InputSchema::standalone(fixture["schema"].clone())
        .validate(input)
        .iter()
        .map(|difference| format!("{}: {difference:?}", difference.field()))
        .collect()
}

/// Whole-fake misbehaviour, changed by tests at any time.
#[derive(Debug, Clone)]
pub struct Switches {
    /// The next this-many API calls (of either provider) answer 429.
    pub rate_limit_next: u32,
    /// Every API call answers 503, as in an outage.
    pub down: bool,
    /// The next this-many submits create their job but the answer is lost:
    /// the connection is held until the client gives up.
    pub lose_submit_answers: u32,
    /// No webhook is sent.
    pub drop_webhooks: bool,
    /// Every submit to this provider answers 503 and creates nothing, while
    /// every other call works: a provider whose creates are down.
    pub submits_down_at: Option<Provider>,
    /// Whether fal's 503s to those submits come from its ingress (nginx,
    /// without `x-fal-request-id`), or from its servers, which leave the
    /// outcome unknown to a client.
    pub fal_submit_outage_at_ingress: bool,
    /// Every list call answers 503, so that only a webhook can prove a job.
    pub lists_down: bool,
    /// Whether a submit's input is checked against the provider's
    /// published schema of its target (`fixtures/provider_schemas/`), and
    /// refused with a 422 as the provider would; on by default. Tests of
    /// the protocols alone, which send hand-written inputs, turn it off.
    pub validate_inputs: bool,
    /// fal's answer to a cancel of a queued request (GUESS
    /// fal-cancel-answer): `OK` or `CANCELLATION_REQUESTED`.
    pub fal_cancel_queued_answer: &'static str,
    /// How long a job waits in the queue, and how long it runs.
    pub queue_for: Duration,
    pub run_for: Duration,
    /// Every successful job's output is one clip, rendered once: for load
    /// benchmarks, whose thousands of renders would otherwise take the
    /// machine from the node being measured.
    pub reuse_outputs: bool,
    /// Replicate's documented rate limits, enforced when set (GUESS
    /// replicate-rate-window): calls beyond them in a minute answer 429.
    /// Numbers, so tests can scale them down.
    pub replicate_limits: Option<RateLimits>,
    /// How long after a prediction ends Replicate removes its input and
    /// output ("after an hour", GUESS replicate-data-removed); never when
    /// unset, as no test lasts an hour. Tests set it short to play a list
    /// read late.
    pub replicate_removes_data_after: Option<Duration>,
    /// Whether Replicate's 429s carry `ratelimit-remaining` and
    /// `ratelimit-reset` beside the documented body (GUESS
    /// replicate-429-headers); on by default.
    pub replicate_429_headers: bool,
    /// Whether fal's request list also shows requests still queued or
    /// running (GUESS fal-list-finished-only); off by default.
    pub fal_list_shows_unfinished: bool,
}

/// Calls per minute a provider takes, by class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    pub creates_per_minute: u32,
    pub others_per_minute: u32,
}

/// A class of calls a provider limits apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallClass {
    Creates,
    Others,
}

/// The calls of one class in one minute window at one provider: those
/// answered and those refused with 429.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCalls {
    pub answered: u32,
    pub refused: u32,
}

impl WindowCalls {
    /// Every call vidgate made in the window.
    pub fn made(&self) -> u32 {
        self.answered + self.refused
    }
}

impl Default for Switches {
    fn default() -> Switches {
        Switches {
            rate_limit_next: 0,
            down: false,
            lose_submit_answers: 0,
            drop_webhooks: false,
            submits_down_at: None,
            fal_submit_outage_at_ingress: true,
            lists_down: false,
            validate_inputs: true,
            fal_cancel_queued_answer: "OK",
            queue_for: Duration::from_millis(100),
            run_for: Duration::from_millis(100),
            reuse_outputs: false,
            replicate_limits: None,
            replicate_removes_data_after: None,
            replicate_429_headers: true,
            fal_list_shows_unfinished: false,
        }
    }
}

/// One fetch of a job's input media by the fake, made as a provider makes
/// it: when the job starts.
#[derive(Debug, Clone)]
pub struct MediaFetch {
    pub job_id: String,
    pub url: String,
    /// The HTTP status, or 0 when no answer came.
    pub status: u16,
    /// SHA-256 of the body of a successful fetch, in hex.
    pub sha256: Option<String>,
}

pub struct FakeState {
    pub base_url: Mutex<String>,
    pub jobs: Mutex<Vec<FakeJob>>,
    pub switches: Mutex<Switches>,
    outputs: Mutex<HashMap<String, Bytes>>,
    /// The one clip of `Switches::reuse_outputs`, once rendered.
    reused_output: Mutex<Option<Bytes>>,
    pub fal_signing_seed: [u8; 32],
    pub replicate_token: String,
    pub replicate_webhook_secret: String,
    /// Webhooks sent, by job id, for assertions.
    pub webhooks_sent: Mutex<Vec<(String, u16)>>,
    /// Bytes of `[fake:huge-output]` bodies handed to the connection, for
    /// assertions on how soon a client stopped reading.
    pub huge_output_bytes_sent: AtomicU64,
    /// Every fetch of input media, in order.
    pub media_fetches: Mutex<Vec<MediaFetch>>,
    /// Every read of a provider's webhook keys (fal's JWKS, Replicate's
    /// default webhook secret), answered or not.
    key_fetches: Mutex<Vec<Provider>>,
    /// Calls by provider, class and minute window (Unix minutes).
    calls: Mutex<std::collections::BTreeMap<(Provider, CallClass, u64), WindowCalls>>,
    /// Every state read of a job, by job id: when (Unix seconds).
    state_reads: Mutex<HashMap<String, Vec<f64>>>,
    /// When each job's completion webhook was answered with a success
    /// (Unix seconds), by job id: how long the receiver took to take it.
    completion_webhooks_taken: Mutex<HashMap<String, f64>>,
    /// When each job's output was last served (Unix seconds), by job id.
    output_fetches: Mutex<HashMap<String, f64>>,
    /// The headers of each job's submit (names in lower case, without the
    /// credential), by job id: what the provider was asked beyond the input.
    submit_headers: Mutex<HashMap<String, HashMap<String, String>>>,
    next_id: Mutex<u64>,
    http: reqwest::Client,
}

pub struct FakeProviders {
    pub address: SocketAddr,
    pub state: Arc<FakeState>,
}

pub const FAL_KEY: &str = "fal-test-key:secret";
pub const REPLICATE_TOKEN: &str = "r8_test_token";

impl FakeProviders {
    pub async fn start() -> FakeProviders {
        let state = Arc::new(FakeState {
            base_url: Mutex::new(String::new()),
            jobs: Mutex::new(Vec::new()),
            switches: Mutex::new(Switches::default()),
            outputs: Mutex::new(HashMap::new()),
            reused_output: Mutex::new(None),
            fal_signing_seed: [42u8; 32],
            replicate_token: REPLICATE_TOKEN.into(),
            replicate_webhook_secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            webhooks_sent: Mutex::new(Vec::new()),
            huge_output_bytes_sent: AtomicU64::new(0),
            media_fetches: Mutex::new(Vec::new()),
            key_fetches: Mutex::new(Vec::new()),
            calls: Mutex::default(),
            state_reads: Mutex::default(),
            completion_webhooks_taken: Mutex::default(),
            output_fetches: Mutex::default(),
            submit_headers: Mutex::default(),
            next_id: Mutex::new(0),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        });
        let router = Router::new()
            .merge(fal::routes())
            .merge(replicate::routes())
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        *state.base_url.lock().unwrap() = format!("http://{address}");
        tokio::spawn(async move { axum::serve(listener, router).await });
        FakeProviders { address, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }
    pub fn fal_queue_url(&self) -> String {
        format!("{}/fal/queue", self.base_url())
    }
    pub fn fal_api_url(&self) -> String {
        format!("{}/fal/api", self.base_url())
    }
    pub fn fal_jwks_url(&self) -> String {
        format!("{}/fal/jwks.json", self.base_url())
    }
    pub fn replicate_api_url(&self) -> String {
        format!("{}/replicate/v1", self.base_url())
    }

    pub fn switches(&self, change: impl FnOnce(&mut Switches)) {
        change(&mut self.state.switches.lock().unwrap());
    }

    pub fn jobs(&self) -> Vec<FakeJob> {
        self.state.jobs.lock().unwrap().clone()
    }

    /// The calls made to `provider` in each minute window, by class.
    pub fn calls_by_window(&self, provider: Provider) -> Vec<(CallClass, u64, WindowCalls)> {
        self.state
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|((at, _, _), _)| *at == provider)
            .map(|((_, class, window), calls)| (*class, *window, *calls))
            .collect()
    }

    /// When each state read of job `job_id` came (Unix seconds).
    pub fn state_reads_of(&self, job_id: &str) -> Vec<f64> {
        self.state
            .state_reads
            .lock()
            .unwrap()
            .get(job_id)
            .cloned()
            .unwrap_or_default()
    }

    /// When job `job_id`'s completion webhook was taken (answered with a
    /// success), in Unix seconds.
    pub fn completion_webhook_taken_at(&self, job_id: &str) -> Option<f64> {
        let taken = self.state.completion_webhooks_taken.lock().unwrap();
        taken.get(job_id).copied()
    }

    /// When job `job_id`'s output was last served, in Unix seconds.
    pub fn output_fetched_at(&self, job_id: &str) -> Option<f64> {
        self.state
            .output_fetches
            .lock()
            .unwrap()
            .get(job_id)
            .copied()
    }

    /// The headers job `job_id` was submitted with (names in lower case,
    /// without the credential).
    pub fn submit_headers_of(&self, job_id: &str) -> HashMap<String, String> {
        self.state
            .submit_headers
            .lock()
            .unwrap()
            .get(job_id)
            .cloned()
            .unwrap_or_default()
    }

    /// How many times `provider`'s webhook keys were read.
    pub fn key_fetches_at(&self, provider: Provider) -> usize {
        self.state
            .key_fetches
            .lock()
            .unwrap()
            .iter()
            .filter(|fetched| **fetched == provider)
            .count()
    }

    /// The jobs created at `provider`.
    pub fn jobs_at(&self, provider: Provider) -> Vec<FakeJob> {
        self.jobs()
            .into_iter()
            .filter(|job| job.provider == provider)
            .collect()
    }
}

pub fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

impl FakeState {
    fn new_id(&self, provider: Provider) -> String {
        let mut next = self.next_id.lock().unwrap();
        *next += 1;
        match provider {
            // fal request ids are UUIDs; Replicate's are 26 lowercase
            // base32 characters.
            Provider::Fal => format!("00000000-0000-4000-8000-{:012x}", *next),
            Provider::Replicate => format!("fakepred{:018}", *next),
        }
    }

    /// Keeps the headers of job `job_id`'s submit, the credential left out.
    fn record_submit_headers(&self, job_id: &str, headers: &axum::http::HeaderMap) {
        let kept = headers
            .iter()
            .filter(|(name, _)| *name != "authorization")
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect();
        self.submit_headers
            .lock()
            .unwrap()
            .insert(job_id.to_owned(), kept);
    }

    pub fn job(&self, id: &str) -> Option<FakeJob> {
        self.jobs
            .lock()
            .unwrap()
            .iter()
            .find(|job| job.id == id)
            .cloned()
    }

    fn update(&self, id: &str, change: impl FnOnce(&mut FakeJob)) -> Option<FakeJob> {
        let mut jobs = self.jobs.lock().unwrap();
        let job = jobs.iter_mut().find(|job| job.id == id)?;
        change(job);
        Some(job.clone())
    }

    /// Takes one unit of a counted switch, if any is left.
    fn take(&self, pick: impl FnOnce(&mut Switches) -> &mut u32) -> bool {
        let mut switches = self.switches.lock().unwrap();
        let counter = pick(&mut switches);
        if *counter > 0 {
            *counter -= 1;
            true
        } else {
            false
        }
    }

    /// Counts a call of `class` to `provider` in this minute's window, and
    /// whether the provider's limits refuse it: the seconds until the
    /// window ends when they do.
    fn count_call(&self, provider: Provider, class: CallClass) -> Option<u64> {
        let limits = match provider {
            Provider::Replicate => self.switches.lock().unwrap().replicate_limits,
            Provider::Fal => None,
        };
        let now = now_seconds();
        let window = (now / 60.0) as u64;
        let mut calls = self.calls.lock().unwrap();
        let counted = calls.entry((provider, class, window)).or_default();
        let limit = limits.map(|limits| match class {
            CallClass::Creates => limits.creates_per_minute,
            CallClass::Others => limits.others_per_minute,
        });
        if limit.is_some_and(|limit| counted.answered >= limit) {
            counted.refused += 1;
            return Some(((window + 1) * 60).saturating_sub(now as u64).max(1));
        }
        counted.answered += 1;
        None
    }

    fn count_state_read(&self, job_id: &str) {
        self.state_reads
            .lock()
            .unwrap()
            .entry(job_id.to_owned())
            .or_default()
            .push(now_seconds());
    }

    fn count_key_fetch(&self, provider: Provider) {
        self.key_fetches.lock().unwrap().push(provider);
    }

    fn is_down(&self) -> bool {
        self.switches.lock().unwrap().down
    }

    fn submits_are_down_at(&self, provider: Provider) -> bool {
        self.switches.lock().unwrap().submits_down_at == Some(provider)
    }

    fn validates_inputs(&self) -> bool {
        self.switches.lock().unwrap().validate_inputs
    }

    fn lists_are_down(&self) -> bool {
        self.switches.lock().unwrap().lists_down
    }

    pub fn output(&self, id: &str) -> Option<Bytes> {
        self.outputs.lock().unwrap().get(id).cloned()
    }

    /// The answer of a finished job's output link: its clip, or for a job
    /// marked `[fake:huge-output]` a chunked body with no Content-Length
    /// far larger than any cap (a broken or hostile CDN), made as it is
    /// sent.
    pub fn output_response(self: &Arc<Self>, id: &str) -> Response {
        let Some(bytes) = self.output(id) else {
            return StatusCode::NOT_FOUND.into_response();
        };
        self.output_fetches
            .lock()
            .unwrap()
            .insert(id.to_owned(), now_seconds());
        if self.job(id).is_some_and(|job| job.marker("huge-output")) {
            let body = HugeBody {
                left: HUGE_OUTPUT_BYTES,
                state: self.clone(),
            };
            return (
                [("content-type", "video/mp4")],
                Body::from_stream(tokio_util::io::ReaderStream::new(body)),
            )
                .into_response();
        }
        ([("content-type", "video/mp4")], bytes).into_response()
    }

    /// Creates a job and starts its state machine.
    fn create_job(
        self: &Arc<Self>,
        provider: Provider,
        target: &str,
        input: Value,
        webhook_url: Option<String>,
        webhook_events: Vec<String>,
        deadline: Option<JobDeadline>,
    ) -> FakeJob {
        self.create_job_in(
            FAL_KEY,
            provider,
            target,
            input,
            webhook_url,
            webhook_events,
            deadline,
        )
    }

    /// Creates a job in the account of `account` (a fal key) and starts its
    /// state machine.
    #[allow(clippy::too_many_arguments)]
    fn create_job_in(
        self: &Arc<Self>,
        account: &'static str,
        provider: Provider,
        target: &str,
        input: Value,
        webhook_url: Option<String>,
        webhook_events: Vec<String>,
        deadline: Option<JobDeadline>,
    ) -> FakeJob {
        let job = FakeJob {
            account,
            id: self.new_id(provider),
            provider,
            target: target.to_owned(),
            input,
            webhook_url,
            webhook_events,
            status: FakeStatus::Queued,
            created_at: now_seconds(),
            started_at: None,
            completed_at: None,
            deadline,
            canceled_while_running: false,
        };
        self.jobs.lock().unwrap().push(job.clone());
        tokio::spawn(drive(self.clone(), job.id.clone()));
        job
    }

    /// Cancels a job the way both providers do: a queued one is removed at
    /// once; a running one is canceled too (and noted, since vidgate must
    /// never ask for that). A queued Replicate prediction comes back as the
    /// recorded one did (GUESS replicate-cancel-answer-while-queued): it had
    /// started 47 ms after its creation and ran 0.128 s.
    fn cancel(&self, id: &str) -> Option<(FakeStatus, FakeJob)> {
        let mut before = None;
        let job = self.update(id, |job| {
            before = Some(job.status.clone());
            match job.status {
                FakeStatus::Queued => {
                    let now = now_seconds();
                    job.status = FakeStatus::Canceled;
                    job.completed_at = Some(now);
                    if job.provider == Provider::Replicate {
                        // As recorded: it started (at the earliest 47 ms
                        // after its creation) and ran 0.128 s before the
                        // cancel stopped it.
                        let started = (job.created_at + 0.047).max(now);
                        job.started_at = Some(started);
                        job.completed_at = Some(started + 0.128);
                    }
                }
                FakeStatus::Running => {
                    job.canceled_while_running = true;
                    job.status = FakeStatus::Canceled;
                    job.completed_at = Some(now_seconds());
                }
                _ => {}
            }
        })?;
        Some((before.unwrap(), job))
    }
}

/// A job's life: wait in the queue, start, run, finish, tell the webhook.
async fn drive(state: Arc<FakeState>, id: String) {
    let Some(job) = state.job(&id) else { return };
    let (queue_for, run_for) = {
        let switches = state.switches.lock().unwrap();
        (switches.queue_for, switches.run_for)
    };
    let waits_until_start = if job.marker("slow-start") {
        queue_for + Duration::from_secs(3)
    } else {
        queue_for
    };
    if let Some(deadline) = job.deadline {
        tokio::spawn(enforce_deadline(state.clone(), id.clone(), deadline));
    }
    if job.marker("never-start") {
        // It never leaves the queue; its deadline, if any, ends it.
        return;
    }
    tokio::time::sleep(waits_until_start).await;
    let Some(started) = state.update(&id, |job| {
        if job.status == FakeStatus::Queued {
            job.status = FakeStatus::Running;
            job.started_at = Some(now_seconds());
        }
    }) else {
        return;
    };
    if started.status != FakeStatus::Running {
        return;
    }
    send_webhook(&state, &started, "start").await;

    let unreadable_media = fetch_media(&state, &started).await;
    let outcome = if let Some(message) = unreadable_media {
        FakeStatus::Failed {
            message,
            moderated: false,
        }
    } else if started.marker("moderate") {
        FakeStatus::Failed {
            message: "The content was flagged by the safety checker".into(),
            moderated: true,
        }
    } else if started.marker("fail") {
        FakeStatus::Failed {
            message: "The model crashed while generating".into(),
            moderated: false,
        }
    } else {
        let reused = state.reused_output.lock().unwrap().clone();
        let mp4 = match reused {
            Some(mp4) => mp4,
            None => {
                let input = started.input.clone();
                let mp4 = tokio::task::spawn_blocking(move || render(&input))
                    .await
                    .unwrap();
                if state.switches.lock().unwrap().reuse_outputs {
                    *state.reused_output.lock().unwrap() = Some(mp4.clone());
                }
                mp4
            }
        };
        state.outputs.lock().unwrap().insert(id.clone(), mp4);
        FakeStatus::Succeeded
    };
    tokio::time::sleep(run_for).await;
    let Some(finished) = state.update(&id, |job| {
        if job.status == FakeStatus::Running {
            job.status = outcome;
            job.completed_at = Some(now_seconds());
        }
    }) else {
        return;
    };
    send_webhook(&state, &finished, "completed").await;
}

/// Ends a job at its deadline as its provider documents: one that has not
/// started is timed out (fal's request timeout, Replicate's `aborted`), and
/// under a lifetime one that runs is canceled.
async fn enforce_deadline(state: Arc<FakeState>, id: String, deadline: JobDeadline) {
    let (JobDeadline::Start(seconds) | JobDeadline::Lifetime(seconds)) = deadline;
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let mut ended_now = false;
    let job = state.update(&id, |job| {
        let ended_as = match (&job.status, deadline) {
            (FakeStatus::Queued, _) => FakeStatus::TimedOut,
            (FakeStatus::Running, JobDeadline::Lifetime(_)) => FakeStatus::Canceled,
            _ => return,
        };
        job.status = ended_as;
        job.completed_at = Some(now_seconds());
        ended_now = true;
    });
    if let Some(job) = job.filter(|_| ended_now) {
        send_webhook(&state, &job, "completed").await;
    }
}

/// Fetches every URL in a started job's input, as a provider downloads a
/// job's media before the model runs; the first that cannot be read fails
/// the job with its reason.
async fn fetch_media(state: &FakeState, job: &FakeJob) -> Option<String> {
    let urls: Vec<String> = job
        .input
        .as_object()
        .into_iter()
        .flat_map(|fields| fields.values())
        .flat_map(|value| match value {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        })
        .filter_map(|value| value.as_str().map(str::to_owned))
        .filter(|text| text.starts_with("http://") || text.starts_with("https://"))
        .collect();
    let mut failure = None;
    for url in urls {
        let (status, sha256) = match state.http.get(&url).send().await {
            Ok(response) if response.status().is_success() => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(body) => (status, Some(hex_digest(&body))),
                    Err(_) => (0, None),
                }
            }
            Ok(response) => (response.status().as_u16(), None),
            Err(_) => (0, None),
        };
        state.media_fetches.lock().unwrap().push(MediaFetch {
            job_id: job.id.clone(),
            url: url.clone(),
            status,
            sha256: sha256.clone(),
        });
        if sha256.is_none() && failure.is_none() {
            failure = Some(format!(
                "Failed to download the input file {url}: status {status}"
            ));
        }
    }
    failure
}

pub fn hex_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A small real clip standing in for the model's output: the engine
/// renders the requested length (capped at two seconds to keep tests
/// quick) and sound, at the engine's smallest frame.
fn render(input: &Value) -> Bytes {
    let duration = ["duration", "seconds"]
        .iter()
        .find_map(|name| match &input[*name] {
            Value::Number(number) => number.as_u64(),
            Value::String(text) => text.trim_end_matches('s').parse().ok(),
            _ => None,
        })
        .unwrap_or(1)
        .clamp(1, 2) as u32;
    let request = vidgate_engine::RenderRequest {
        width: 320,
        height: 240,
        duration_s: duration,
        fps: 12,
        seed: input["seed"].as_u64().unwrap_or(1),
        prompt: input["prompt"].as_str().unwrap_or("fake").to_owned(),
        generate_audio: input["generate_audio"].as_bool().unwrap_or(false),
        ..Default::default()
    };
    let mut mp4 = vidgate_engine::render(&request, &|_| {}, &AtomicBool::new(false))
        .expect("the fake's clip renders")
        .mp4;
    // `[fake:padded-output]`: a clip of tens of megabytes, as a 1080p model
    // makes, without the time to render one: the engine's clip followed by
    // a `free` box, which players and probes skip.
    if input.to_string().contains("[fake:padded-output]") {
        mp4.extend_from_slice(&((PADDED_OUTPUT_FREE_BYTES + 8) as u32).to_be_bytes());
        mp4.extend_from_slice(b"free");
        mp4.resize(mp4.len() + PADDED_OUTPUT_FREE_BYTES, 0);
    }
    Bytes::from(mp4)
}

/// The padding of a `[fake:padded-output]` clip: three parts of a bucket's
/// multipart upload.
pub const PADDED_OUTPUT_FREE_BYTES: usize = 20 * 1024 * 1024;

async fn send_webhook(state: &Arc<FakeState>, job: &FakeJob, event: &str) {
    let Some(url) = job.webhook_url.clone() else {
        return;
    };
    if state.switches.lock().unwrap().drop_webhooks || job.marker("drop-webhook") {
        return;
    }
    let request = match job.provider {
        Provider::Fal => {
            // fal sends only the final result.
            if event != "completed" {
                return;
            }
            fal::webhook_request(state, job, &url)
        }
        Provider::Replicate => {
            if !job.webhook_events.is_empty() && !job.webhook_events.iter().any(|e| e == event) {
                return;
            }
            replicate::webhook_request(state, job, &url)
        }
    };
    // Both providers retry a failed delivery (fal's webhooks page; Replicate
    // "a few times"); how often and how soon is GUESS webhook-retries.
    for _ in 0..3 {
        match request.try_clone().unwrap().send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                state
                    .webhooks_sent
                    .lock()
                    .unwrap()
                    .push((job.id.clone(), status));
                if response.status().is_success() {
                    if event == "completed" {
                        state
                            .completion_webhooks_taken
                            .lock()
                            .unwrap()
                            .insert(job.id.clone(), now_seconds());
                    }
                    return;
                }
            }
            Err(_) => state
                .webhooks_sent
                .lock()
                .unwrap()
                .push((job.id.clone(), 0)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads an RFC 3339 date-time (`2026-11-23T12:00:01.5Z`, or with any
/// offset) as Unix seconds.
pub fn parse_rfc3339(text: &str) -> Option<f64> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(time.unix_timestamp_nanos() as f64 / 1e9)
}

/// The length of a `[fake:huge-output]` body: 4 GiB, which no test's cap
/// allows and no test could afford to receive.
const HUGE_OUTPUT_BYTES: u64 = 4 << 30;

/// Zero bytes, counted into `FakeState::huge_output_bytes_sent` as the
/// connection takes them.
struct HugeBody {
    left: u64,
    state: Arc<FakeState>,
}

impl tokio::io::AsyncRead for HugeBody {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _context: &mut Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
        let length = buffer.remaining().min(ZEROS.len()).min(self.left as usize);
        buffer.put_slice(&ZEROS[..length]);
        self.left -= length as u64;
        self.state
            .huge_output_bytes_sent
            .fetch_add(length as u64, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

/// The example backends file of `provider` (`examples/hosted/`), its URLs
/// pointed at the fake, each model's entry changed by `adjust` (timeouts,
/// costs, caps), applied with the fake's credentials.
pub fn example_backends(
    fake: &FakeProviders,
    provider: Provider,
    adjust: impl Fn(&mut Value),
) -> BackendsConfig {
    let mut file = example_file(provider);
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        match provider {
            Provider::Fal => {
                model["api_url"] = json!(fake.fal_queue_url());
                model["platform_url"] = json!(fake.fal_api_url());
                model["jwks_url"] = json!(fake.fal_jwks_url());
            }
            Provider::Replicate => model["api_url"] = json!(fake.replicate_api_url()),
        }
        adjust(model);
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join(example_file_name(provider));
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    let credentials = |name: &str| match name {
        "FAL_KEY" => Some(FAL_KEY.to_owned()),
        "REPLICATE_API_TOKEN" => Some(REPLICATE_TOKEN.to_owned()),
        _ => None,
    };
    apply_backends_file_with_credentials(&mut backends, &path, &Catalog::embedded(), &credentials)
        .expect("the example backends file applies");
    backends
}

/// A backends file running `model` at fal, then at Replicate (a failover
/// chain), each entry as in the example files with its URLs pointed at the
/// fake and `timeouts`, applied with the credentials `fal_key` and
/// `replicate_token`.
pub fn failover_backends(
    fake: &FakeProviders,
    model: &str,
    fal_key: &str,
    replicate_token: &str,
    timeouts: &Value,
) -> BackendsConfig {
    failover_backends_adjusted(fake, model, fal_key, replicate_token, timeouts, |_, _| {})
}

/// `failover_backends`, each provider's entry changed by `adjust` (a limit
/// taken out, say) before it is applied.
pub fn failover_backends_adjusted(
    fake: &FakeProviders,
    model: &str,
    fal_key: &str,
    replicate_token: &str,
    timeouts: &Value,
    adjust: impl Fn(Provider, &mut Value),
) -> BackendsConfig {
    let entry = |name: &str| -> Value {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/hosted")
            .join(name);
        let file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
        file["models"][model].clone()
    };
    let mut fal = entry("fal.json");
    fal["api_url"] = json!(fake.fal_queue_url());
    fal["platform_url"] = json!(fake.fal_api_url());
    fal["jwks_url"] = json!(fake.fal_jwks_url());
    fal["credential_env"] = json!("TEST_FAL_KEY");
    fal["timeouts"] = timeouts.clone();
    let mut replicate = entry("replicate.json");
    replicate["api_url"] = json!(fake.replicate_api_url());
    replicate["credential_env"] = json!("TEST_REPLICATE_TOKEN");
    replicate["timeouts"] = timeouts.clone();
    adjust(Provider::Fal, &mut fal);
    adjust(Provider::Replicate, &mut replicate);
    let file = json!({ "models": { model: {
        "backend": "failover", "providers": [fal, replicate] } } });
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("failover.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    let (fal_key, replicate_token) = (fal_key.to_owned(), replicate_token.to_owned());
    let credentials = move |name: &str| match name {
        "TEST_FAL_KEY" => Some(fal_key.clone()),
        "TEST_REPLICATE_TOKEN" => Some(replicate_token.clone()),
        _ => None,
    };
    apply_backends_file_with_credentials(&mut backends, &path, &Catalog::embedded(), &credentials)
        .expect("the failover backends file applies");
    backends
}

/// A backends file `file` (models at fal, Replicate or both, in the
/// example files' form) with every provider's URLs pointed at the fake,
/// applied against `catalog` with the fake's credentials.
pub fn backends_file_at_fake(
    fake: &FakeProviders,
    mut file: Value,
    catalog: &Catalog,
) -> BackendsConfig {
    let point = |entry: &mut Value| match entry["backend"].as_str() {
        Some("fal") => {
            entry["api_url"] = json!(fake.fal_queue_url());
            entry["platform_url"] = json!(fake.fal_api_url());
            entry["jwks_url"] = json!(fake.fal_jwks_url());
        }
        Some("replicate") => entry["api_url"] = json!(fake.replicate_api_url()),
        _ => {}
    };
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        point(model);
        if let Some(providers) = model.get_mut("providers").and_then(Value::as_array_mut) {
            providers.iter_mut().for_each(point);
        }
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("backends.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    let credentials = |name: &str| match name {
        "FAL_KEY" => Some(FAL_KEY.to_owned()),
        "REPLICATE_API_TOKEN" => Some(REPLICATE_TOKEN.to_owned()),
        _ => None,
    };
    apply_backends_file_with_credentials(&mut backends, &path, catalog, &credentials)
        .expect("the backends file applies");
    backends
}

/// The name of the example backends file of `provider` in `examples/hosted/`.
fn example_file_name(provider: Provider) -> &'static str {
    match provider {
        Provider::Fal => "fal.json",
        Provider::Replicate => "replicate.json",
    }
}

/// The example backends file of `provider` (`examples/hosted/`), parsed.
fn example_file(provider: Provider) -> Value {
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hosted")
        .join(example_file_name(provider));
    serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap()
}

/// The entry of `model` in the example backends file of `provider`, with
/// its `backend`.
pub fn example_entry(provider: Provider, model: &str) -> Value {
    let file = example_file(provider);
    file["models"][model].clone()
}
