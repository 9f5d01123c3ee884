//! A fake of the hosted providers, fal (`fal.rs`), Replicate
//! (`replicate.rs`) and BytePlus ModelArk (`modelark.rs`, whose sources and
//! guesses its own module comment lists), on one port-0 axum server: their routes, their
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
//!
//! Each provider's fake is its own file, which gives the shared machinery
//! what it needs of the provider as a `FakeProvider` (its routes, its ids,
//! its webhooks, how a backends file points at it); `FAKES` lists them, so
//! a new provider's fake is one file and one line there. This file holds
//! the fake's state and handle; `jobs.rs` drives each job
//! through its life, `media.rs` makes its outputs, `webhooks.rs` signs and
//! sends its webhooks, and `backends_files.rs` points the example backends
//! files at the fake.

mod backends_files;
pub mod dashscope;
pub mod fal;
mod jobs;
mod media;
pub mod modelark;
pub mod replicate;
mod webhooks;

pub use backends_files::{
    backends_file_at_fake, example_backends, example_entry, failover_backends,
    failover_backends_adjusted, failover_backends_routed,
};
use media::{HUGE_OUTPUT_BYTES, HugeBody, render};
pub use media::{PADDED_OUTPUT_FREE_BYTES, hex_digest};
pub use webhooks::parse_rfc3339;
use webhooks::send_webhook;

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

/// The fakes on the shared server, one line each: a new provider's fake
/// is its own file, which defines its `FakeProvider` (as a `Provider`
/// constant), and its line here.
pub const FAKES: &[Provider] = &[Provider::FAL, Provider::REPLICATE, Provider::MODELARK];

/// One fake provider: what the fake's shared machinery (its server, its
/// jobs' lives, its webhooks, the backends files pointed at it) asks of
/// it, so that nothing outside its own file matches on which one it is.
pub struct FakeProvider {
    /// Its registered name: the `backend` of its entries, its folder of
    /// transcribed schemas (`fixtures/provider_schemas/`) and its example
    /// file (`examples/hosted/<name>.json`).
    pub name: &'static str,
    /// Its routes on the fake's server.
    pub routes: fn() -> Router<Arc<FakeState>>,
    /// A job id as the provider writes them, made from the fake's counter.
    pub job_id: fn(u64) -> String,
    /// The credential variable its example file reads, and the fake's
    /// credential.
    pub credential: (&'static str, &'static str),
    /// Points a backends file entry of the provider at the fake.
    pub point_at: fn(&FakeProviders, &mut Value),
    /// The provider's limits per minute that the fake enforces, if any.
    pub rate_limits: fn(&Switches) -> Option<RateLimits>,
    /// What a cancel does to a queued job, besides its status and end time.
    pub cancel_queued: fn(&mut FakeJob, f64),
    /// The request of its webhook about `job`'s `event` (`start`,
    /// `completed`) to `url`, signed as it signs them; `None` when it sends
    /// none for that event.
    pub webhook_request: fn(&FakeState, &FakeJob, &str, &str) -> Option<reqwest::RequestBuilder>,
}

/// A fake provider of `FAKES`, compared, ordered and shown by its name.
#[derive(Clone, Copy)]
pub struct Provider(&'static FakeProvider);

impl std::ops::Deref for Provider {
    type Target = FakeProvider;

    fn deref(&self) -> &FakeProvider {
        self.0
    }
}

impl PartialEq for Provider {
    fn eq(&self, other: &Provider) -> bool {
        self.name == other.name
    }
}

impl Eq for Provider {}

impl PartialOrd for Provider {
    fn partial_cmp(&self, other: &Provider) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Provider {
    fn cmp(&self, other: &Provider) -> std::cmp::Ordering {
        self.name.cmp(other.name)
    }
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name)
    }
}

impl Provider {
    /// The fake of the provider the backends file names `name`, if any.
    pub fn named(name: &str) -> Option<Provider> {
        FAKES.iter().copied().find(|fake| fake.name == name)
    }
}

/// A cancel of a queued job that changes nothing else, as most providers
/// answer it.
fn canceled_at_once(_job: &mut FakeJob, _now: f64) {}

/// No limits per minute enforced.
fn no_rate_limits(_switches: &Switches) -> Option<RateLimits> {
    None
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
    /// ModelArk's `execution_expires_after`: the seconds after its
    /// creation by which a task must have finished; past it a task that
    /// is queued or running ends `expired` (the documentation page's
    /// statuses, as its copies quote them).
    Expiry(f64),
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
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/provider_schemas")
        .join(provider.name)
        .join(format!("{target}.json"));
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let fixture: Value = serde_json::from_str(&text).expect("a transcribed schema is JSON");
    vidgate_server::backend::hosted::schemas::InputSchema::standalone(fixture["schema"].clone())
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
    /// Jobs at this provider run this much longer: a provider that is
    /// slower than the other, for the latency route.
    pub runs_longer_at: Option<(Provider, Duration)>,
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
    /// How many queued tasks ModelArk's account takes before it refuses a
    /// create with a 429 ("the maximum number of queued tasks for a single
    /// master account is 120", its documentation page; the 429 is GUESS
    /// modelark-queue-full).
    pub modelark_queued_limit: usize,
    /// A ModelArk task still queued when its `DELETE` arrives finishes
    /// first, as one can between vidgate's read and its cancel: the
    /// `DELETE` then removes a finished task's record, output and all.
    pub modelark_finishes_before_delete: bool,
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
            runs_longer_at: None,
            reuse_outputs: false,
            replicate_limits: None,
            replicate_removes_data_after: None,
            replicate_429_headers: true,
            fal_list_shows_unfinished: false,
            modelark_queued_limit: 120,
            modelark_finishes_before_delete: false,
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
    /// What ModelArk keeps of each task beyond its flat input: its
    /// `safety_identifier` and `execution_expires_after`, by task id.
    pub modelark_tasks: Mutex<HashMap<String, modelark::TaskExtras>>,
    /// The ModelArk tasks a `DELETE` removed once they had finished.
    pub modelark_deleted_finished: Mutex<Vec<String>>,
    next_id: Mutex<u64>,
    http: reqwest::Client,
}

pub struct FakeProviders {
    pub address: SocketAddr,
    pub state: Arc<FakeState>,
}

pub const FAL_KEY: &str = "fal-test-key:secret";
pub const REPLICATE_TOKEN: &str = "r8_test_token";
pub const ARK_API_KEY: &str = "ark-test-key-0000";

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
            modelark_tasks: Mutex::default(),
            modelark_deleted_finished: Mutex::default(),
            next_id: Mutex::new(0),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        });
        let router = FAKES
            .iter()
            .fold(Router::<Arc<FakeState>>::new(), |router, fake| {
                router.merge((fake.routes)())
            })
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
    pub fn modelark_api_url(&self) -> String {
        format!("{}/modelark/api/v3", self.base_url())
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
