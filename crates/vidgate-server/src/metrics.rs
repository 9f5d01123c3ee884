//! The Prometheus series of one node, each named once here (and listed in
//! `docs/operations.md`, which a test here compares with the registry). Every label
//! value comes from a bounded set: catalog models and modes, backend kinds,
//! route templates, status codes and fixed outcome names, never an id.
//!
//! Counters and histograms are kept in the process and move where things
//! happen; the gauges of state kept in the database (queue depth, money
//! held, the longest waits by account, webhook deliveries pending, hosted providers' circuits) are read from the store when a scrape
//! asks for them, so they are the same on every node and cost one query
//! each per scrape. The series are served on their own listener
//! (`--metrics-listen`, `http/metrics.rs`), never on the public port.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::store::{ProviderHealth, QueueDepth};

/// The route label of a request that matched no route, so that probes of
/// random paths add one series, not one per path.
pub const UNMATCHED_ROUTE: &str = "unmatched";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubmitLabels {
    model: String,
    mode: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    model: String,
    backend: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobOutcomeLabels {
    model: String,
    backend: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    model: String,
}

/// A hosted provider of the backends file (`fal`, `replicate`): as few as
/// the operator configured.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabels {
    provider: String,
}

/// A hosted provider's budget: the provider and the environment variable
/// that names its credential (never the credential), as few as the
/// operator configured.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    provider: String,
    credential: String,
}

/// A class of a provider budget's calls: `creates` or `others`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetClassLabels {
    provider: String,
    credential: String,
    class: &'static str,
}

/// The state reads of provider jobs, with or without a provider webhook
/// registered (`yes`, `no`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PollLabels {
    provider: String,
    webhooks: &'static str,
}

/// A model's jobs of one mode at one hosted provider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderModeLabels {
    model: String,
    provider: String,
    mode: String,
}

/// A failover model's routing decision: the provider it chose, the route
/// and the reason (`route::RouteReason`, a fixed few).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoutingLabels {
    model: String,
    provider: String,
    route: &'static str,
    reason: &'static str,
}

/// A backend kind (`fal`, `replicate`, `failover`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

/// A place in a ranking, `1` first: a fixed few values, never an id.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabels {
    rank: &'static str,
}

/// The ranks of `vidgate_queue_oldest_wait_seconds`: the accounts that have
/// waited longest, without saying which.
const WAIT_RANKS: [&str; 5] = ["1", "2", "3", "4", "5"];

/// How many accounts `vidgate_queue_oldest_wait_seconds` ranks.
pub const WAITING_ACCOUNTS_RANKED: usize = WAIT_RANKS.len();

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: &'static str,
}

type HistogramFamily<Labels> = Family<Labels, Histogram, fn() -> Histogram>;

/// Which limit refused a request with 429.
#[derive(Debug, Clone, Copy)]
pub enum RateLimit {
    /// An API key's (or session's) request rate.
    Caller,
    /// The per-client-address limit of the public endpoints.
    PublicFairUse,
    /// An account's queued and running generations.
    Concurrency,
    /// The dashboard's sign-in and sign-up attempts.
    SignIn,
    /// The open waits (`Prefer: wait`) and event streams of a key or of
    /// the node.
    LiveStatus,
    /// The media fetches one client network (anonymous quotes) or one
    /// account (submits) may run at once.
    MediaFetches,
}

impl RateLimit {
    fn label(self) -> &'static str {
        match self {
            RateLimit::Caller => "caller",
            RateLimit::PublicFairUse => "public_fair_use",
            RateLimit::Concurrency => "concurrency",
            RateLimit::SignIn => "sign_in",
            RateLimit::LiveStatus => "live_status",
            RateLimit::MediaFetches => "media_fetches",
        }
    }
}

/// How a worker's attempt at a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Succeeded, and its hold was captured.
    Succeeded,
    /// Failed for good, and its hold was released.
    Failed,
    /// Interrupted at shutdown and put back in the queue.
    HandedBack,
    /// The worker lost its lease (another node rescued the job); it
    /// recorded nothing.
    LeaseLost,
    /// The store failed to record the end; the lease runs out and the
    /// rescuer gives the job another attempt.
    NotRecorded,
}

impl JobOutcome {
    /// Whether the generation is now in a final state.
    pub fn is_final(self) -> bool {
        matches!(self, JobOutcome::Succeeded | JobOutcome::Failed)
    }

    fn label(self) -> &'static str {
        match self {
            JobOutcome::Succeeded => "succeeded",
            JobOutcome::Failed => "failed",
            JobOutcome::HandedBack => "handed_back",
            JobOutcome::LeaseLost => "lease_lost",
            JobOutcome::NotRecorded => "not_recorded",
        }
    }
}

/// What became of a webhook delivery after one attempt.
#[derive(Debug, Clone, Copy)]
pub enum WebhookAttemptOutcome {
    Delivered,
    /// Failed; another attempt is scheduled.
    Retrying,
    /// Failed, and it was the last attempt (or the URL may never be sent to).
    Failed,
}

impl WebhookAttemptOutcome {
    fn label(self) -> &'static str {
        match self {
            WebhookAttemptOutcome::Delivered => "delivered",
            WebhookAttemptOutcome::Retrying => "retrying",
            WebhookAttemptOutcome::Failed => "failed",
        }
    }
}

/// The node's series and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    http_request_duration: HistogramFamily<HttpLabels>,
    submits: Family<SubmitLabels, Counter>,
    rate_limit_refusals: Family<LimitLabels, Counter>,
    queue_depth: Family<StatusLabels, Gauge>,
    queue_wait: HistogramFamily<JobLabels>,
    queue_oldest_wait: Family<RankLabels, Gauge<f64, AtomicU64>>,
    hosted_jobs_in_flight: Family<BackendLabels, Gauge>,
    job_run: HistogramFamily<JobLabels>,
    job_outcomes: Family<JobOutcomeLabels, Counter>,
    rescued_jobs: Family<OutcomeLabels, Counter>,
    money_held: Gauge,
    money_captured: Family<ModelLabels, Counter>,
    webhook_deliveries_pending: Gauge,
    webhook_attempts: Family<OutcomeLabels, Counter>,
    provider_circuit_open: Family<ProviderLabels, Gauge>,
    provider_consecutive_failures: Family<ProviderLabels, Gauge>,
    provider_calls: Family<BudgetClassLabels, Counter>,
    provider_rate_limited: Family<BudgetClassLabels, Counter>,
    provider_budget_limit: Family<BudgetClassLabels, Gauge>,
    provider_budget_remaining: Family<BudgetClassLabels, Gauge>,
    provider_budget_waiting: Family<BudgetClassLabels, Gauge>,
    provider_jobs_in_flight: Family<BudgetLabels, Gauge>,
    provider_poll_interval: HistogramFamily<PollLabels>,
    provider_latency: Family<ProviderModeLabels, Gauge<f64, AtomicU64>>,
    provider_routing_decisions: Family<RoutingLabels, Counter>,
    store_read_failures: Counter,
}

/// Request latencies from 5 ms to about 20 s.
fn request_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 13))
}

/// Queue waits and run times from 100 ms to about 3.6 hours: a clip takes
/// seconds on the local engine and minutes at a provider.
fn job_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 18))
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            http_request_duration: Family::new_with_constructor(request_buckets),
            submits: Family::default(),
            rate_limit_refusals: Family::default(),
            queue_depth: Family::default(),
            queue_wait: Family::new_with_constructor(job_buckets),
            queue_oldest_wait: Family::default(),
            hosted_jobs_in_flight: Family::default(),
            job_run: Family::new_with_constructor(job_buckets),
            job_outcomes: Family::default(),
            rescued_jobs: Family::default(),
            money_held: Gauge::default(),
            money_captured: Family::default(),
            webhook_deliveries_pending: Gauge::default(),
            webhook_attempts: Family::default(),
            provider_circuit_open: Family::default(),
            provider_consecutive_failures: Family::default(),
            provider_calls: Family::default(),
            provider_rate_limited: Family::default(),
            provider_budget_limit: Family::default(),
            provider_budget_remaining: Family::default(),
            provider_budget_waiting: Family::default(),
            provider_jobs_in_flight: Family::default(),
            provider_poll_interval: Family::new_with_constructor(job_buckets),
            provider_latency: Family::default(),
            provider_routing_decisions: Family::default(),
            store_read_failures: Counter::default(),
        };
        // Counters are registered without `_total`; the encoder adds it.
        metrics.register_node_metrics();
        metrics.register_provider_metrics();
        metrics
    }

    /// The requests, submits, queue, jobs, money and webhooks.
    fn register_node_metrics(&mut self) {
        self.registry.register(
            "vidgate_http_request_duration_seconds",
            "HTTP requests by route template, method and status, and how long they took",
            self.http_request_duration.clone(),
        );
        self.registry.register(
            "vidgate_submits",
            "Submits by model, mode and outcome: accepted, replayed, or the API error code",
            self.submits.clone(),
        );
        self.registry.register(
            "vidgate_rate_limit_refusals",
            "Requests answered 429, by the limit that refused them",
            self.rate_limit_refusals.clone(),
        );
        self.registry.register(
            "vidgate_queue_depth",
            "Generations queued and running, read from the store at each scrape",
            self.queue_depth.clone(),
        );
        self.registry.register(
            "vidgate_queue_wait_seconds",
            "Time from submit to a worker claiming the job, by model and backend",
            self.queue_wait.clone(),
        );
        self.registry.register(
            "vidgate_queue_oldest_wait_seconds",
            "How long the oldest queued job of each of the five accounts waiting longest has waited, by rank (1 is the longest; 0 when fewer accounts wait); read from the store at each scrape",
            self.queue_oldest_wait.clone(),
        );
        self.registry.register(
            "vidgate_hosted_jobs_in_flight",
            "Jobs at hosted providers that this node's hosted pool follows now, by backend",
            self.hosted_jobs_in_flight.clone(),
        );
        self.registry.register(
            "vidgate_job_run_seconds",
            "Time a backend took to run a job, by model and backend",
            self.job_run.clone(),
        );
        self.registry.register(
            "vidgate_job_outcomes",
            "Jobs this node's workers ended, by model, backend and outcome",
            self.job_outcomes.clone(),
        );
        self.registry.register(
            "vidgate_rescued_jobs",
            "Jobs whose worker died, requeued or failed by this node's rescuer",
            self.rescued_jobs.clone(),
        );
        self.registry.register(
            "vidgate_money_held_micros",
            "Micro-dollars held for queued and running generations, read from the store at each scrape",
            self.money_held.clone(),
        );
        self.registry.register(
            "vidgate_money_captured_micros",
            "Micro-dollars captured by this node's workers for succeeded generations, by model",
            self.money_captured.clone(),
        );
        self.registry.register(
            "vidgate_webhook_deliveries_pending",
            "Webhook deliveries waiting for an attempt, read from the store at each scrape",
            self.webhook_deliveries_pending.clone(),
        );
        self.registry.register(
            "vidgate_webhook_attempts",
            "Webhook delivery attempts by this node's senders, by what became of the delivery",
            self.webhook_attempts.clone(),
        );
        self.registry.register(
            "vidgate_metrics_store_read_failures",
            "Scrapes whose store read failed; the store's gauges kept their last values",
            self.store_read_failures.clone(),
        );
    }

    /// The hosted providers: circuits, calls, budgets, jobs and routing.
    fn register_provider_metrics(&mut self) {
        self.registry.register(
            "vidgate_provider_circuit_open",
            "Whether dispatch skips a hosted provider (1) or uses it (0), as a node last saved its circuit; read from the store at each scrape",
            self.provider_circuit_open.clone(),
        );
        self.registry.register(
            "vidgate_provider_consecutive_failures",
            "A hosted provider's failed calls in a row, as a node last saved its circuit; read from the store at each scrape",
            self.provider_consecutive_failures.clone(),
        );
        self.registry.register(
            "vidgate_provider_calls",
            "Calls this node made to a hosted provider, by credential and budget class (creates, others): the budget used",
            self.provider_calls.clone(),
        );
        self.registry.register(
            "vidgate_provider_rate_limited",
            "429 answers this node received from a hosted provider, by credential and budget class",
            self.provider_rate_limited.clone(),
        );
        self.registry.register(
            "vidgate_provider_budget_limit_per_minute",
            "A hosted provider credential's request budget per minute, by class, for all nodes together",
            self.provider_budget_limit.clone(),
        );
        self.registry.register(
            "vidgate_provider_budget_remaining",
            "Tokens left in a provider budget's bucket at this node's last call, by class: the budget left",
            self.provider_budget_remaining.clone(),
        );
        self.registry.register(
            "vidgate_provider_budget_waiting",
            "Calls waiting on this node for a provider budget's token, by class",
            self.provider_budget_waiting.clone(),
        );
        self.registry.register(
            "vidgate_provider_jobs_in_flight",
            "Jobs this node runs at a hosted provider now, by credential",
            self.provider_jobs_in_flight.clone(),
        );
        self.registry.register(
            "vidgate_provider_poll_interval_seconds",
            "Time between two state reads of one provider job, with or without a provider webhook registered",
            self.provider_poll_interval.clone(),
        );
        self.registry.register(
            "vidgate_provider_latency_seconds",
            "This node's mean time from submit to finish of a model's last five succeeded jobs of a mode at a hosted provider, which the latency route compares",
            self.provider_latency.clone(),
        );
        self.registry.register(
            "vidgate_provider_routing_decisions",
            "Jobs of failover models this node gave to a provider, by model, provider, route and reason (cheapest, fastest, first_healthy, …): each provider's share of jobs and why",
            self.provider_routing_decisions.clone(),
        );
    }

    /// One HTTP request; `route` is its route template or `UNMATCHED_ROUTE`.
    pub fn record_request(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.http_request_duration
            .get_or_create(&HttpLabels {
                route: route.to_owned(),
                method: bounded_method(method),
                status,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// One submit that reached a catalog endpoint; `outcome` is `accepted`,
    /// `replayed`, or the API error code it was refused with.
    pub fn record_submit(&self, model: &str, mode: &str, outcome: &'static str) {
        self.submits
            .get_or_create(&SubmitLabels {
                model: model.to_owned(),
                mode: mode.to_owned(),
                outcome,
            })
            .inc();
    }

    pub fn record_rate_limit_refusal(&self, limit: RateLimit) {
        self.rate_limit_refusals
            .get_or_create(&LimitLabels {
                limit: limit.label(),
            })
            .inc();
    }

    /// A worker claimed a job that had waited `waited` since its submit.
    pub fn record_claim(&self, model: &str, backend: &'static str, waited: Duration) {
        self.queue_wait
            .get_or_create(&JobLabels {
                model: model.to_owned(),
                backend,
            })
            .observe(waited.as_secs_f64());
    }

    /// The hosted pool started following a job of a `backend` model.
    pub fn hosted_job_started(&self, backend: &'static str) {
        self.hosted_jobs_in_flight
            .get_or_create(&BackendLabels { backend })
            .inc();
    }

    /// The hosted pool is done with a job it started following.
    pub fn hosted_job_ended(&self, backend: &'static str) {
        self.hosted_jobs_in_flight
            .get_or_create(&BackendLabels { backend })
            .dec();
    }

    /// A backend ran a job for `ran`, and the worker ended it so.
    pub fn record_job(
        &self,
        model: &str,
        backend: &'static str,
        ran: Duration,
        outcome: JobOutcome,
    ) {
        self.job_run
            .get_or_create(&JobLabels {
                model: model.to_owned(),
                backend,
            })
            .observe(ran.as_secs_f64());
        self.job_outcomes
            .get_or_create(&JobOutcomeLabels {
                model: model.to_owned(),
                backend,
                outcome: outcome.label(),
            })
            .inc();
    }

    /// A job that never reached a backend (its stored request or its
    /// backend is gone), ended so; its `backend` label is `none`.
    pub fn record_job_refused(&self, model: &str, outcome: JobOutcome) {
        self.job_outcomes
            .get_or_create(&JobOutcomeLabels {
                model: model.to_owned(),
                backend: "none",
                outcome: outcome.label(),
            })
            .inc();
    }

    pub fn record_rescue(&self, requeued: usize, failed: usize) {
        for (outcome, count) in [("requeued", requeued), ("failed", failed)] {
            self.rescued_jobs
                .get_or_create(&OutcomeLabels { outcome })
                .inc_by(count as u64);
        }
    }

    /// A succeeded generation's hold was captured.
    pub fn record_capture(&self, model: &str, micros: i64) {
        self.money_captured
            .get_or_create(&ModelLabels {
                model: model.to_owned(),
            })
            .inc_by(u64::try_from(micros).unwrap_or(0));
    }

    pub fn record_webhook_attempt(&self, outcome: WebhookAttemptOutcome) {
        self.webhook_attempts
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    /// The store's state, read for this scrape. `longest_waiting` holds
    /// the submit times (Unix ms) of the oldest queued job of the accounts
    /// that have waited longest, oldest first.
    pub fn set_store_state(
        &self,
        depth: &QueueDepth,
        longest_waiting: &[i64],
        webhook_deliveries_pending: i64,
        providers: &[ProviderHealth],
    ) {
        let now = crate::store::now_millis();
        for (index, rank) in WAIT_RANKS.into_iter().enumerate() {
            let waited_ms = longest_waiting
                .get(index)
                .map_or(0, |submitted| (now - submitted).max(0));
            self.queue_oldest_wait
                .get_or_create(&RankLabels { rank })
                .set(waited_ms as f64 / 1000.0);
        }
        self.queue_depth
            .get_or_create(&StatusLabels { status: "queued" })
            .set(depth.queued);
        self.queue_depth
            .get_or_create(&StatusLabels { status: "running" })
            .set(depth.running);
        self.money_held.set(depth.held.0);
        self.webhook_deliveries_pending
            .set(webhook_deliveries_pending);
        for provider in providers {
            let labels = ProviderLabels {
                provider: provider.provider.clone(),
            };
            self.provider_circuit_open
                .get_or_create(&labels)
                .set(i64::from(provider.open));
            self.provider_consecutive_failures
                .get_or_create(&labels)
                .set(provider.consecutive_failures);
        }
    }

    pub fn record_provider_call(&self, provider: &str, credential: &str, class: &'static str) {
        self.provider_calls
            .get_or_create(&budget_class(provider, credential, class))
            .inc();
    }

    pub fn record_provider_rate_limited(
        &self,
        provider: &str,
        credential: &str,
        class: &'static str,
    ) {
        self.provider_rate_limited
            .get_or_create(&budget_class(provider, credential, class))
            .inc();
    }

    pub fn set_provider_budget_limit(
        &self,
        provider: &str,
        credential: &str,
        class: &'static str,
        per_minute: u32,
    ) {
        self.provider_budget_limit
            .get_or_create(&budget_class(provider, credential, class))
            .set(i64::from(per_minute));
    }

    pub fn set_provider_budget_remaining(
        &self,
        provider: &str,
        credential: &str,
        class: &'static str,
        remaining: u32,
    ) {
        self.provider_budget_remaining
            .get_or_create(&budget_class(provider, credential, class))
            .set(i64::from(remaining));
    }

    pub fn set_provider_budget_waiting(
        &self,
        provider: &str,
        credential: &str,
        class: &'static str,
        waiting: usize,
    ) {
        self.provider_budget_waiting
            .get_or_create(&budget_class(provider, credential, class))
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    pub fn set_provider_jobs_in_flight(&self, provider: &str, credential: &str, in_flight: u64) {
        self.provider_jobs_in_flight
            .get_or_create(&BudgetLabels {
                provider: provider.to_owned(),
                credential: credential.to_owned(),
            })
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
    }

    pub fn record_provider_poll_interval(
        &self,
        provider: &str,
        with_webhooks: bool,
        interval: Duration,
    ) {
        self.provider_poll_interval
            .get_or_create(&PollLabels {
                provider: provider.to_owned(),
                webhooks: if with_webhooks { "yes" } else { "no" },
            })
            .observe(interval.as_secs_f64());
    }

    /// The mean of a provider's recent submit-to-finish times of a
    /// model's jobs of `mode`, as this node measured them.
    pub fn set_provider_latency(&self, model: &str, provider: &str, mode: &str, mean: Duration) {
        self.provider_latency
            .get_or_create(&ProviderModeLabels {
                model: model.to_owned(),
                provider: provider.to_owned(),
                mode: mode.to_owned(),
            })
            .set(mean.as_secs_f64());
    }

    /// A failover model's routing gave a job to `provider`, for `reason`.
    pub fn record_routing_decision(
        &self,
        model: &str,
        provider: &str,
        route: &'static str,
        reason: &'static str,
    ) {
        self.provider_routing_decisions
            .get_or_create(&RoutingLabels {
                model: model.to_owned(),
                provider: provider.to_owned(),
                route,
                reason,
            })
            .inc();
    }

    pub fn record_store_read_failure(&self) {
        self.store_read_failures.inc();
    }

    /// Every series in the OpenMetrics text format, which Prometheus reads.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

fn budget_class(provider: &str, credential: &str, class: &'static str) -> BudgetClassLabels {
    BudgetClassLabels {
        provider: provider.to_owned(),
        credential: credential.to_owned(),
        class,
    }
}

/// The standard methods by name; anything else as `other`, so that made-up
/// methods cannot add series.
fn bounded_method(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The series as `docs/operations.md` lists them: the first cell of
    /// each table row that names one.
    fn documented_series() -> BTreeSet<String> {
        include_str!("../../../docs/operations.md")
            .lines()
            .filter_map(|line| line.strip_prefix("| `vidgate_"))
            .filter_map(|rest| rest.split('`').next())
            .map(|name| format!("vidgate_{name}"))
            .collect()
    }

    #[test]
    fn the_operations_guide_lists_every_series_and_no_other() {
        // A family shows in a scrape once it has a sample, so each moves.
        let metrics = Metrics::new();
        metrics.record_request("/api/v1/models", "GET", 200, Duration::from_millis(3));
        metrics.record_submit("vendor_1/model_1", "text-to-video", "accepted");
        metrics.record_rate_limit_refusal(RateLimit::Caller);
        metrics.record_claim("vendor_1/model_1", "local", Duration::from_secs(1));
        metrics.record_job(
            "vendor_1/model_1",
            "local",
            Duration::from_secs(2),
            JobOutcome::Succeeded,
        );
        metrics.record_rescue(0, 1);
        metrics.record_capture("vendor_1/model_1", 150_000);
        metrics.record_webhook_attempt(WebhookAttemptOutcome::Delivered);
        let provider = ProviderHealth {
            provider: "fal".to_owned(),
            open: false,
            consecutive_failures: 0,
            last_error: None,
            last_error_at: None,
            latency_ms: Some(900),
            node_id: "node".to_owned(),
            updated_at: 0,
        };
        metrics.hosted_job_started("fal");
        metrics.set_store_state(&QueueDepth::default(), &[0], 0, &[provider]);
        metrics.record_provider_call("replicate", "REPLICATE_API_TOKEN", "creates");
        metrics.record_provider_rate_limited("replicate", "REPLICATE_API_TOKEN", "others");
        metrics.set_provider_budget_limit("replicate", "REPLICATE_API_TOKEN", "creates", 600);
        metrics.set_provider_budget_remaining("replicate", "REPLICATE_API_TOKEN", "creates", 29);
        metrics.set_provider_budget_waiting("replicate", "REPLICATE_API_TOKEN", "others", 3);
        metrics.set_provider_jobs_in_flight("replicate", "REPLICATE_API_TOKEN", 12);
        metrics.record_provider_poll_interval("replicate", false, Duration::from_secs(5));
        metrics.set_provider_latency(
            "vendor_1/model_1",
            "fal",
            "text-to-video",
            Duration::from_secs(70),
        );
        metrics.record_routing_decision("vendor_1/model_1", "fal", "price", "cheapest");
        let text = metrics.encode();
        // `# TYPE name kind`; a counter's samples carry `_total`, and the
        // guide names series as a scrape shows their samples.
        let registered: BTreeSet<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(|descriptor| match descriptor.split_once(' ') {
                Some((name, "counter")) => format!("{name}_total"),
                Some((name, _)) => name.to_owned(),
                None => descriptor.to_owned(),
            })
            .collect();
        assert_eq!(documented_series(), registered);
    }

    #[test]
    fn made_up_methods_share_one_label_value() {
        assert_eq!(bounded_method("GET"), "GET");
        assert_eq!(bounded_method("BREW"), "other");
    }
}
