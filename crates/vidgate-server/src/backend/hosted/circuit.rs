//! Two circuit breakers per hosted provider, over the outcomes of this
//! node's calls to it: one for the calls that create jobs (submits), one
//! for every other call (state reads, lists, cancels). They are judged
//! apart because a provider can fail one and serve the other: a working
//! read path must not hide failing creates, and failing reads must not
//! refuse new work. Consecutive failures (errors, no answer, a refused
//! credential) open a circuit. A 429 counts as neither a failure nor a
//! success: it says "slower", not "down".
//!
//! Only the creates circuit gates work: while it is open, dispatch skips
//! the provider, so new jobs of a model with several providers go to the
//! next one, and a model with none left answers 503 at submit. The reads
//! circuit is reported (`vidgate admin providers`, the metrics) so that an
//! operator sees a provider whose reads fail. After `OPEN_FOR` a circuit
//! lets calls try again; the first success closes it, and one more failure
//! opens it for another `OPEN_FOR`. Each node keeps its own circuits (a
//! provider's outage shows on every node within a few calls); each saves
//! its view to the store when it changes, the creates circuit under the
//! provider's name (`fal`) and the reads circuit under `<name> reads`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::protocol::{
    CancelOutcome, JobToCreate, ProviderError, ProviderJobState, ProviderProtocol, ProviderTarget,
    SubmittedSearch, VerifiedWebhook, WebhookError,
};
use crate::store::{ProviderHealth, Store};

/// Consecutive failures that open a circuit.
pub const FAILURES_TO_OPEN: u32 = 5;
/// How long an open circuit keeps its provider out of dispatch.
pub const OPEN_FOR: Duration = Duration::from_secs(30);
/// How often a node saves a circuit whose state did not change (its
/// latency), at most.
const SAVE_LATENCY_EVERY: Duration = Duration::from_secs(10);

/// The circuits of every provider this node calls, shared by all the hosted
/// backends of a provider.
pub struct ProviderCircuits {
    by_provider: Mutex<HashMap<&'static str, Arc<ProviderCircuit>>>,
    /// Names this process in the saved views.
    node_id: Arc<str>,
    /// Where the circuits save their views.
    store: Arc<Store>,
}

impl ProviderCircuits {
    /// The circuits of a node that saves their views to `store`.
    pub fn new(store: Arc<Store>) -> ProviderCircuits {
        ProviderCircuits {
            by_provider: Mutex::default(),
            node_id: format!("process_{}", crate::ids::random_token(10)).into(),
            store,
        }
    }

    /// The circuits of `provider`, created closed on first use.
    pub fn circuit(&self, provider: &'static str) -> Arc<ProviderCircuit> {
        self.by_provider
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .entry(provider)
            .or_insert_with(|| {
                let circuit =
                    |name: String| Circuit::new(name, self.node_id.clone(), self.store.clone());
                Arc::new(ProviderCircuit {
                    creates: circuit(provider.to_owned()),
                    reads: circuit(format!("{provider} reads")),
                })
            })
            .clone()
    }
}

/// A provider's two circuits: its creates gate dispatch, its reads are
/// only reported.
pub struct ProviderCircuit {
    pub creates: Circuit,
    pub reads: Circuit,
}

/// One circuit: of a provider's creates, or of its other calls.
pub struct Circuit {
    /// The name its view is saved under: the provider's, or `<provider>
    /// reads`.
    name: String,
    node_id: Arc<str>,
    store: Arc<Store>,
    /// Shared with the background saves, which write the view as it is
    /// when they run.
    state: Arc<Mutex<CircuitState>>,
    /// Held by a background save while it writes: the saves of one
    /// circuit run one at a time, so the last to run (which reads the
    /// newest view) is the last written, whatever order the runtime
    /// started them in.
    saving: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct CircuitState {
    consecutive_failures: u32,
    opened_at: Option<Instant>,
    last_error: Option<String>,
    last_error_at: Option<i64>,
    latency_ms: Option<f64>,
    saved_at: Option<Instant>,
    /// Whether the view changed in a way the store must know at once.
    changed: bool,
}

impl CircuitState {
    fn is_open(&self, now: Instant) -> bool {
        self.opened_at
            .is_some_and(|opened_at| now.duration_since(opened_at) < OPEN_FOR)
    }
}

impl Circuit {
    fn new(name: String, node_id: Arc<str>, store: Arc<Store>) -> Circuit {
        Circuit {
            name,
            node_id,
            store,
            state: Arc::new(Mutex::new(CircuitState::default())),
            saving: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CircuitState> {
        locked(&self.state)
    }

    /// Whether dispatch may send the provider work now.
    pub fn allows(&self) -> bool {
        !self.state().is_open(Instant::now())
    }

    /// A call that the provider answered (a refusal of our input counts:
    /// the provider is up), taking `latency`.
    pub fn record_success(&self, latency: Duration) {
        let mut state = self.state();
        let milliseconds = latency.as_secs_f64() * 1000.0;
        // An exponential moving average over roughly the last ten calls.
        state.latency_ms = Some(
            state
                .latency_ms
                .map_or(milliseconds, |average| average * 0.9 + milliseconds * 0.1),
        );
        if state.consecutive_failures > 0 || state.opened_at.is_some() {
            state.changed = true;
        }
        state.consecutive_failures = 0;
        state.opened_at = None;
        drop(state);
        self.save_if_due();
    }

    /// A call that failed for the provider's sake (an error, no answer, a
    /// refused credential).
    pub fn record_failure(&self, error: &str) {
        let mut state = self.state();
        state.consecutive_failures = state.consecutive_failures.saturating_add(1);
        state.last_error = Some(error.to_owned());
        state.last_error_at = Some(crate::store::now_millis());
        let now = Instant::now();
        if state.consecutive_failures >= FAILURES_TO_OPEN && !state.is_open(now) {
            tracing::warn!(circuit = %self.name, failures = state.consecutive_failures, %error, "the provider's circuit opens");
            state.opened_at = Some(now);
        }
        state.changed = true;
        drop(state);
        self.save_if_due();
    }

    /// Takes back one failure: a create whose answer was lost (counted as
    /// a failure) whose job the provider's list later showed, so the
    /// provider did its work. A circuit those failures opened closes once
    /// fewer are left than open one.
    pub fn retract_failure(&self) {
        let mut state = self.state();
        if state.consecutive_failures == 0 {
            return;
        }
        state.consecutive_failures -= 1;
        if state.consecutive_failures < FAILURES_TO_OPEN && state.opened_at.is_some() {
            tracing::info!(circuit = %self.name, "a create counted as failed had made its job; the circuit closes");
            state.opened_at = None;
        }
        state.changed = true;
        drop(state);
        self.save_if_due();
    }

    /// Saves this node's view to the store when it changed, or when its
    /// latency was last saved long ago; in the background, so a provider
    /// call never waits for the database. Each save writes the view as it
    /// is when the save runs, one save at a time: two saves started close
    /// together (the fourth failure and the fifth, which opens the circuit)
    /// could otherwise finish in the other order and leave the older view
    /// stored.
    fn save_if_due(&self) {
        {
            let mut state = self.state();
            let now = Instant::now();
            let stale = state
                .saved_at
                .is_none_or(|saved_at| now.duration_since(saved_at) >= SAVE_LATENCY_EVERY);
            if !state.changed && !stale {
                return;
            }
            state.changed = false;
            state.saved_at = Some(now);
        }
        let (name, node_id) = (self.name.clone(), self.node_id.clone());
        let (state, saving, store) = (
            Arc::clone(&self.state),
            Arc::clone(&self.saving),
            self.store.clone(),
        );
        tokio::spawn(async move {
            let _one_save_at_a_time = saving.lock().await;
            let health = view_of(&name, &node_id, &locked(&state));
            if let Err(error) = store.provider_health().save(&health).await {
                tracing::warn!(provider = %health.provider, %error, "saving the provider's health failed");
            }
        });
    }
}

fn locked(state: &Mutex<CircuitState>) -> std::sync::MutexGuard<'_, CircuitState> {
    state.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The row a circuit's view is saved as.
fn view_of(name: &str, node_id: &str, state: &CircuitState) -> ProviderHealth {
    ProviderHealth {
        provider: name.to_owned(),
        open: state.is_open(Instant::now()),
        consecutive_failures: i64::from(state.consecutive_failures),
        last_error: state.last_error.clone(),
        last_error_at: state.last_error_at,
        latency_ms: state.latency_ms.map(|average| average.round() as i64),
        node_id: node_id.to_owned(),
        updated_at: crate::store::now_millis(),
    }
}

/// A provider's protocol whose calls feed the provider's circuits: its
/// submits the creates circuit, every other call the reads circuit.
pub struct ObservedProtocol {
    inner: Arc<dyn ProviderProtocol>,
    circuit: Arc<ProviderCircuit>,
}

impl ObservedProtocol {
    pub fn new(
        inner: Arc<dyn ProviderProtocol>,
        circuit: Arc<ProviderCircuit>,
    ) -> ObservedProtocol {
        ObservedProtocol { inner, circuit }
    }
}

/// Records a call's outcome in `circuit`. A refusal of our request and an
/// unknown job are answers of a working provider; a 429 asks us to slow
/// down and says nothing about the provider's health; every other error
/// counts against it.
fn observe<T>(
    circuit: &Circuit,
    started: Instant,
    result: Result<T, ProviderError>,
) -> Result<T, ProviderError> {
    match &result {
        Ok(_) | Err(ProviderError::Refused { .. } | ProviderError::NotFound { .. }) => {
            circuit.record_success(started.elapsed());
        }
        Err(ProviderError::RateLimited { .. }) => {}
        Err(error) => circuit.record_failure(&error.to_string()),
    }
    result
}

#[async_trait]
impl ProviderProtocol for ObservedProtocol {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        let started = Instant::now();
        let result = self.inner.submit(job).await;
        observe(&self.circuit.creates, started, result)
    }

    async fn state(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        let started = Instant::now();
        let result = self.inner.state(target, job_id).await;
        observe(&self.circuit.reads, started, result)
    }

    async fn cancel(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        let started = Instant::now();
        let result = self.inner.cancel(target, job_id).await;
        observe(&self.circuit.reads, started, result)
    }

    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        let started = Instant::now();
        let result = self.inner.find_submitted(target, input, since).await;
        observe(&self.circuit.reads, started, result)
    }

    fn lists_unfinished_jobs(&self) -> bool {
        self.inner.lists_unfinished_jobs()
    }

    fn start_deadline_is_ours(&self) -> bool {
        self.inner.start_deadline_is_ours()
    }

    fn sends_webhooks(&self) -> bool {
        self.inner.sends_webhooks()
    }

    fn cancel_deletes_finished_jobs(&self) -> bool {
        self.inner.cancel_deletes_finished_jobs()
    }

    /// Webhooks are the provider's calls to us, not a measure of its API.
    async fn verify_webhook(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        self.inner.verify_webhook(headers, body).await
    }

    fn output_headers(&self, video_url: &str) -> HeaderMap {
        self.inner.output_headers(video_url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store for the circuits to save their views to, in a directory
    /// removed when the test ends.
    async fn store() -> (tempfile::TempDir, Arc<Store>) {
        let directory = tempfile::tempdir().unwrap();
        let url = format!(
            "sqlite://{}",
            directory.path().join("vidgate.sqlite").display()
        );
        let store = crate::store::open(&url).await.unwrap();
        (directory, store)
    }

    #[tokio::test]
    async fn consecutive_failures_open_the_circuit_and_a_success_closes_it() {
        let (_directory, store) = store().await;
        let circuit = Circuit::new("fal".into(), "test".into(), store);
        for _ in 1..FAILURES_TO_OPEN {
            circuit.record_failure("503");
            assert!(circuit.allows());
        }
        circuit.record_failure("503");
        assert!(!circuit.allows());
        circuit.record_success(Duration::from_millis(40));
        assert!(circuit.allows());
        // A failure after a success starts the count again.
        circuit.record_failure("503");
        assert!(circuit.allows());
    }

    /// Issue 51: five creates whose answers were lost open the circuit;
    /// each whose job was found is taken back, and the circuit closes.
    #[tokio::test]
    async fn a_create_whose_job_was_found_is_not_a_failure() {
        let (_directory, store) = store().await;
        let circuit = Circuit::new("dashscope".into(), "test".into(), store);
        for _ in 0..FAILURES_TO_OPEN {
            circuit.record_failure("the answer was lost");
        }
        assert!(!circuit.allows());
        circuit.retract_failure();
        assert!(circuit.allows());
        for _ in 1..FAILURES_TO_OPEN {
            circuit.retract_failure();
        }
        assert_eq!(circuit.state().consecutive_failures, 0);
        // Nothing is taken back below none.
        circuit.retract_failure();
        assert_eq!(circuit.state().consecutive_failures, 0);
    }

    #[tokio::test]
    async fn rate_limits_neither_open_nor_close_a_circuit() {
        let (_directory, store) = store().await;
        let circuit = Circuit::new("fal".into(), "test".into(), store);
        let throttled = || -> Result<(), ProviderError> {
            Err(ProviderError::RateLimited {
                retry_after: None,
                message: "slow down".into(),
            })
        };
        for _ in 0..FAILURES_TO_OPEN * 3 {
            let _ = observe(&circuit, Instant::now(), throttled());
        }
        assert!(circuit.allows(), "429s say slower, not down");
        for _ in 0..FAILURES_TO_OPEN {
            circuit.record_failure("503");
            let _ = observe(&circuit, Instant::now(), throttled());
        }
        assert!(!circuit.allows(), "429s between failures do not reset them");
    }

    #[tokio::test]
    async fn creates_and_reads_are_judged_apart() {
        let (_directory, store) = store().await;
        let circuits = ProviderCircuits::new(store);
        let fal = circuits.circuit("fal");
        for _ in 0..FAILURES_TO_OPEN {
            fal.creates.record_failure("503");
            // A working read path does not close the failing creates.
            fal.reads.record_success(Duration::from_millis(10));
        }
        assert!(!fal.creates.allows());
        assert!(fal.reads.allows());
        let replicate = circuits.circuit("replicate");
        for _ in 0..FAILURES_TO_OPEN {
            replicate.reads.record_failure("503");
        }
        // Failing reads do not refuse new work.
        assert!(replicate.creates.allows());
        // One provider's circuits are shared by all its backends.
        assert!(Arc::ptr_eq(&fal, &circuits.circuit("fal")));
    }

    #[tokio::test]
    async fn an_open_circuit_lets_calls_try_again_after_its_time() {
        let (_directory, store) = store().await;
        let circuit = Circuit::new("replicate".into(), "test".into(), store);
        for _ in 0..FAILURES_TO_OPEN {
            circuit.record_failure("503");
        }
        circuit.state().opened_at = Some(Instant::now() - OPEN_FOR);
        assert!(circuit.allows());
        // One more failure opens it again at once.
        circuit.record_failure("503");
        assert!(!circuit.allows());
    }
}
