//! The request budget of each hosted provider and credential: every call
//! vidgate makes to a provider (a create, a state read, a list, a cancel,
//! the output download) takes a token of its class first, `creates` for
//! the calls that create jobs and `others` for the rest, because Replicate
//! limits the two apart.
//!
//! The defaults and the backends file's overrides are read in
//! `limits.rs`.
//!
//! A call never fails for want of budget: it waits for its token. Waiting
//! calls of a class are served earliest-due first (a heap per class), so
//! that when thousands of jobs are followed without webhooks each job's
//! poll interval grows with the number in flight instead of overrunning
//! the provider. A 429 from the provider pauses the class for the time the
//! provider asked (`Retry-After`, `ratelimit-reset`, Replicate's body;
//! `DEFAULT_PAUSE` otherwise) and halves its rate for `SLOWED_FOR`.
//!
//! The tokens are the node rate limiter's buckets (`rate_limit.rs`): with
//! Redis one bucket per provider, credential and class shared by every
//! node (the same GCRA script as the API rate limit); without Redis, or
//! while Redis cannot be reached, each node's own bucket at its share of
//! the limits (`nodes` in the backends file divides them). A bucket holds
//! `burst` tokens and refills at `per_minute - burst` a minute, so that no
//! 60-second window ever sees more than `per_minute` calls.

mod limits;

use std::cmp::{Ordering as Order, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::sync::{Notify, oneshot};

use crate::backend::hosted::protocol::{
    CancelOutcome, JobToCreate, ProviderError, ProviderJobState, ProviderProtocol, ProviderTarget,
    SubmittedSearch, VerifiedWebhook, WebhookError,
};

pub(in crate::backend) use limits::BudgetsInFile;
pub use limits::{
    BudgetConfig, BudgetLimits, ClassLimit, DOCUMENTED_CREATES_PER_MINUTE,
    DOCUMENTED_OTHERS_PER_MINUTE,
};
use limits::{BudgetSettings, budget_key};

use crate::metrics::Metrics;
use crate::rate_limit::CallerRateLimiter;

/// The two classes of calls a provider limits apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallClass {
    /// Calls that create a job.
    Creates,
    /// Every other call: state reads, lists, cancels, output downloads.
    Others,
}

impl CallClass {
    pub fn as_str(self) -> &'static str {
        match self {
            CallClass::Creates => "creates",
            CallClass::Others => "others",
        }
    }
}

/// When a waiting call should be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPriority {
    /// Before any call that is merely due: a read a verified webhook asked
    /// for, which finishes a job.
    Urgent,
    /// In order of the instant it became due.
    Due(Instant),
}

impl CallPriority {
    pub fn now() -> CallPriority {
        CallPriority::Due(Instant::now())
    }
}

/// How long a class pauses after a 429 that did not say how long. GUESS:
/// vidgate's choice, for fal, which documents no 429 headers nor body.
/// Replicate's 429 always says: its protocol reads the wait from the
/// headers, or from the documented body ("resets in ~30s"), or takes the
/// 30 s the body documents.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(5);
/// The longest pause a 429 can ask for: a provider's wait beyond it is
/// taken as this, and the call asks again.
const LONGEST_PAUSE: Duration = Duration::from_secs(120);
/// How long a promised create waits for its job to ask for it.
const PROMISE_LIFETIME: Duration = Duration::from_secs(5);
/// How long a class runs at half its rate after a 429. GUESS: vidgate's
/// choice; neither provider documents how a client should back off.
pub const SLOWED_FOR: Duration = Duration::from_secs(60);
/// How much slower a class runs after a 429.
const SLOWDOWN_FACTOR: u32 = 2;

/// The budgets of every provider credential this node calls, shared by
/// all the hosted backends that use one.
pub struct ProviderBudgets {
    by_key: Mutex<HashMap<String, Arc<ProviderBudget>>>,
    shared: Arc<SharedParts>,
}

/// What every budget of a node uses: the node's rate limiter, whose
/// buckets (in Redis when configured) hold the budgets' tokens, and its
/// metrics.
struct SharedParts {
    limiter: Arc<CallerRateLimiter>,
    metrics: Arc<Metrics>,
}

impl ProviderBudgets {
    pub fn new(limiter: Arc<CallerRateLimiter>, metrics: Arc<Metrics>) -> ProviderBudgets {
        ProviderBudgets {
            by_key: Mutex::default(),
            shared: Arc::new(SharedParts { limiter, metrics }),
        }
    }

    /// The budget of `provider` with `credential` (named `credential_env`
    /// in logs and metrics), created on first use with `limits`. Every model
    /// of one provider and credential shares it, so two that give it
    /// different limits are refused.
    pub fn budget(
        &self,
        provider: &'static str,
        credential_env: &str,
        credential: &str,
        limits: BudgetLimits,
        explicit: bool,
    ) -> Result<Arc<ProviderBudget>, String> {
        let key = budget_key(provider, credential);
        let mut by_key = lock(&self.by_key);
        if let Some(budget) = by_key.get(&key) {
            let changed = lock(&budget.settings).merge(provider, limits, explicit)?;
            if changed {
                budget.report_limits();
            }
            return Ok(budget.clone());
        }
        let budget = Arc::new(ProviderBudget {
            provider,
            credential_env: credential_env.to_owned(),
            key: key.clone(),
            settings: Mutex::new(BudgetSettings { limits, explicit }),
            creates: ClassQueue::default(),
            others: ClassQueue::default(),
            in_flight: AtomicU64::new(0),
            shared: self.shared.clone(),
        });
        budget.report_limits();
        by_key.insert(key, budget.clone());
        Ok(budget)
    }
}

/// One provider credential's budget.
pub struct ProviderBudget {
    provider: &'static str,
    credential_env: String,
    /// The bucket keys' prefix: the provider and a fingerprint of the
    /// credential, never the credential.
    key: String,
    settings: Mutex<BudgetSettings>,
    creates: ClassQueue,
    others: ClassQueue,
    in_flight: AtomicU64,
    shared: Arc<SharedParts>,
}

/// The calls of one class waiting for their tokens, and what the provider
/// last told us about the class.
#[derive(Default)]
struct ClassQueue {
    state: Mutex<ClassState>,
    /// Wakes the dispatcher: a call joined, or the class was paused.
    changed: Notify,
}

#[derive(Default)]
struct ClassState {
    waiting: BinaryHeap<Reverse<Waiter>>,
    next_sequence: u64,
    /// Whether a task hands out this class's tokens now.
    dispatching: bool,
    paused_until: Option<Instant>,
    slowed_until: Option<Instant>,
    last_granted: Option<Instant>,
    /// Tokens left in the bucket at the last take.
    remaining: Option<u32>,
    /// Creates promised to jobs the claim loop took because this budget
    /// was ready, which have not yet asked for their token: when each was
    /// promised. Counted as waiting, so that the loop does not claim more
    /// jobs than the budget can serve in the moment between a claim and
    /// its create; a promise the job never uses (it found its job already
    /// at the provider) lapses after `PROMISE_LIFETIME`.
    promised: VecDeque<Instant>,
}

struct Waiter {
    urgent: bool,
    due: Instant,
    sequence: u64,
    grant: oneshot::Sender<()>,
}

impl Waiter {
    fn rank(&self) -> (bool, Instant, u64) {
        (!self.urgent, self.due, self.sequence)
    }
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Waiter) -> bool {
        self.rank() == other.rank()
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Waiter) -> Option<Order> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    fn cmp(&self, other: &Waiter) -> Order {
        self.rank().cmp(&other.rank())
    }
}

impl ProviderBudget {
    fn queue(&self, class: CallClass) -> &ClassQueue {
        match class {
            CallClass::Creates => &self.creates,
            CallClass::Others => &self.others,
        }
    }

    pub fn limits(&self) -> BudgetLimits {
        lock(&self.settings).limits
    }

    fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Waits until a call of `class` may be made: its turn among the
    /// waiting calls (by `priority`), the end of a pause a 429 asked for,
    /// and a token of the budget.
    pub async fn acquire(self: &Arc<Self>, class: CallClass, priority: CallPriority) {
        let (grant, granted) = oneshot::channel();
        let queue = self.queue(class);
        let start_dispatcher = {
            let mut state = lock(&queue.state);
            let sequence = state.next_sequence;
            state.next_sequence += 1;
            if class == CallClass::Creates {
                state.promised.pop_front();
            }
            let (urgent, due) = match priority {
                CallPriority::Urgent => (true, Instant::now()),
                CallPriority::Due(due) => (false, due),
            };
            state.waiting.push(Reverse(Waiter {
                urgent,
                due,
                sequence,
                grant,
            }));
            !std::mem::replace(&mut state.dispatching, true)
        };
        self.report_waiting(class);
        if start_dispatcher {
            tokio::spawn(dispatch(self.clone(), class));
        } else {
            queue.changed.notify_one();
        }
        // The dispatcher ends only with the runtime; a call then goes ahead
        // rather than wait forever.
        let _ = granted.await;
    }

    /// A 429 from the provider for a call of `class`: the class pauses for
    /// `asked` (or `DEFAULT_PAUSE`) and runs at a reduced rate for
    /// `SLOWED_FOR`. It never fails a job: the call that got it waits and
    /// asks again.
    pub fn rate_limited(&self, class: CallClass, asked: Option<Duration>) {
        let pause = pause_after_rate_limit(asked);
        let now = Instant::now();
        {
            let mut state = lock(&self.queue(class).state);
            let until = now + pause;
            state.paused_until = Some(state.paused_until.map_or(until, |paused| paused.max(until)));
            state.slowed_until = Some(now + pause + SLOWED_FOR);
        }
        self.queue(class).changed.notify_one();
        tracing::info!(
            provider = self.provider,
            class = class.as_str(),
            pause_ms = pause.as_millis() as u64,
            "the provider asked us to slow down"
        );
        let metrics = self.metrics();
        metrics.record_provider_rate_limited(self.provider, &self.credential_env, class.as_str());
    }

    /// Whether a job's create could go out soon: no pause, fewer creates
    /// waiting than tokens left, and room under `max_in_flight`. A hint
    /// for the claim loop, which then leaves jobs queued; the create still
    /// waits for its own token, as another node may take it first.
    pub fn create_ready(&self) -> bool {
        let limits = self.limits();
        if limits
            .max_in_flight
            .is_some_and(|most| self.in_flight.load(Ordering::SeqCst) >= u64::from(most))
        {
            return false;
        }
        let state = lock(&self.creates.state);
        if state
            .paused_until
            .is_some_and(|paused| paused > Instant::now())
        {
            return false;
        }
        let tokens = state.remaining.unwrap_or(limits.creates.burst).max(1);
        let promised = state
            .promised
            .iter()
            .filter(|promised_at| promised_at.elapsed() < PROMISE_LIFETIME)
            .count();
        state.waiting.len() + promised < tokens as usize
    }

    /// Promises a create to a job the claim loop has just taken because
    /// `create_ready` said yes (see `ClassState::promised`).
    pub fn promise_create(&self) {
        let mut state = lock(&self.creates.state);
        while state
            .promised
            .front()
            .is_some_and(|promised_at| promised_at.elapsed() >= PROMISE_LIFETIME)
        {
            state.promised.pop_front();
        }
        state.promised.push_back(Instant::now());
    }

    /// Counts a job of this credential in flight until the guard drops.
    pub fn job_in_flight(self: &Arc<Self>) -> InFlight {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.report_in_flight(now);
        InFlight {
            budget: self.clone(),
        }
    }

    /// The time between two state reads of one job, for the metrics.
    pub fn record_poll_interval(&self, with_webhooks: bool, interval: Duration) {
        let metrics = self.metrics();
        metrics.record_provider_poll_interval(self.provider, with_webhooks, interval);
    }

    fn report_limits(&self) {
        let metrics = self.metrics();
        let limits = self.limits();
        for class in [CallClass::Creates, CallClass::Others] {
            metrics.set_provider_budget_limit(
                self.provider,
                &self.credential_env,
                class.as_str(),
                limits.class(class).per_minute,
            );
        }
    }

    fn report_waiting(&self, class: CallClass) {
        let metrics = self.metrics();
        let waiting = lock(&self.queue(class).state).waiting.len();
        metrics.set_provider_budget_waiting(
            self.provider,
            &self.credential_env,
            class.as_str(),
            waiting,
        );
    }

    fn report_in_flight(&self, in_flight: u64) {
        let metrics = self.metrics();
        metrics.set_provider_jobs_in_flight(self.provider, &self.credential_env, in_flight);
    }

    /// Takes one token of `class` from the bucket: shared through Redis at
    /// the whole limit, or this node's at its share.
    async fn take_token(&self, class: CallClass) -> crate::rate_limit::RateStatus {
        let limits = self.limits();
        let limit = limits.class(class);
        let whole = limit.bucket(1);
        let share = limit.bucket(limits.nodes);
        self.shared
            .limiter
            .check_budget(&format!("{}:{}", self.key, class.as_str()), whole, share)
            .await
    }
}

/// A job counted in flight at its provider's budget.
pub struct InFlight {
    budget: Arc<ProviderBudget>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.budget.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        self.budget.report_in_flight(now);
    }
}

/// Marks the class's dispatcher gone when its task ends, however it ends
/// (a runtime shut down drops it), so that the next call starts another.
struct Dispatching {
    budget: Arc<ProviderBudget>,
    class: CallClass,
    /// False once the task itself marked the dispatcher gone.
    armed: bool,
}

impl Drop for Dispatching {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.budget.queue(self.class).state).dispatching = false;
        }
    }
}

/// Hands out the tokens of one class of one budget to its waiting calls,
/// earliest-due first, until none waits.
async fn dispatch(budget: Arc<ProviderBudget>, class: CallClass) {
    let mut guard = Dispatching {
        budget: budget.clone(),
        class,
        armed: true,
    };
    let queue = budget.queue(class);
    loop {
        let not_before = {
            let mut state = lock(&queue.state);
            while state
                .waiting
                .peek()
                .is_some_and(|Reverse(waiter)| waiter.grant.is_closed())
            {
                state.waiting.pop();
            }
            let Some(Reverse(head)) = state.waiting.peek() else {
                // Ends while holding the lock, so a call that joins next
                // sees no dispatcher and starts one.
                state.dispatching = false;
                guard.armed = false;
                return;
            };
            let mut not_before = head.due;
            if let Some(paused) = state.paused_until {
                not_before = not_before.max(paused);
            }
            if let (Some(slowed), Some(last)) = (state.slowed_until, state.last_granted)
                && slowed > Instant::now()
            {
                let (interval, _) = budget.limits().class(class).bucket(1);
                not_before = not_before.max(last + interval * SLOWDOWN_FACTOR);
            }
            not_before
        };
        if not_before > Instant::now() {
            tokio::select! {
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(not_before)) => {}
                () = queue.changed.notified() => {}
            }
            continue;
        }
        let status = budget.take_token(class).await;
        lock(&queue.state).remaining = Some(status.remaining);
        let metrics = budget.metrics();
        metrics.set_provider_budget_remaining(
            budget.provider,
            &budget.credential_env,
            class.as_str(),
            status.remaining,
        );
        if !status.allowed {
            tokio::time::sleep(
                status
                    .reset
                    .clamp(Duration::from_millis(1), Duration::from_secs(1)),
            )
            .await;
            continue;
        }
        let granted = {
            let mut state = lock(&queue.state);
            let now = Instant::now();
            let mut granted = false;
            while let Some(Reverse(waiter)) = state.waiting.pop() {
                if waiter.due > now && !waiter.urgent {
                    // Only calls due later are left: the token is spent.
                    state.waiting.push(Reverse(waiter));
                    break;
                }
                if waiter.grant.send(()).is_ok() {
                    granted = true;
                    break;
                }
            }
            state.last_granted = Some(now);
            granted
        };
        budget.report_waiting(class);
        if granted {
            budget.metrics().record_provider_call(
                budget.provider,
                &budget.credential_env,
                class.as_str(),
            );
        }
    }
}

/// How long a class pauses after a 429 whose provider asked for `asked`.
fn pause_after_rate_limit(asked: Option<Duration>) -> Duration {
    asked.unwrap_or(DEFAULT_PAUSE).min(LONGEST_PAUSE)
}

/// A provider's protocol whose every call takes its budget's token first,
/// and whose 429s pause the call's class.
pub struct BudgetedProtocol {
    inner: Arc<dyn ProviderProtocol>,
    budget: Arc<ProviderBudget>,
}

impl BudgetedProtocol {
    pub fn new(inner: Arc<dyn ProviderProtocol>, budget: Arc<ProviderBudget>) -> BudgetedProtocol {
        BudgetedProtocol { inner, budget }
    }

    pub fn budget(&self) -> &Arc<ProviderBudget> {
        &self.budget
    }

    /// Reads job `job_id`'s state at its turn among the budget's waiting
    /// reads (`priority`). A wake on `hurry` while the read waits (the
    /// job's webhook came) moves it ahead of the reads that are merely
    /// due: behind them, while the budget was spent on backstop reads, a
    /// job that had finished waited up to 18 s for the read that ends it
    /// (BENCHMARKS.md, provider load).
    pub async fn state_at(
        &self,
        target: &ProviderTarget,
        job_id: &str,
        priority: CallPriority,
        hurry: &Notify,
    ) -> Result<ProviderJobState, ProviderError> {
        let urgent = priority == CallPriority::Urgent;
        tokio::select! {
            () = self.budget.acquire(CallClass::Others, priority) => {}
            () = hurry.notified(), if !urgent => {
                self.budget
                    .acquire(CallClass::Others, CallPriority::Urgent)
                    .await;
            }
        }
        self.read_state(target, job_id).await
    }

    /// Reads job `job_id`'s state with the token already taken.
    async fn read_state(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        self.noting_rate_limits(CallClass::Others, self.inner.state(target, job_id).await)
    }

    fn noting_rate_limits<T>(
        &self,
        class: CallClass,
        outcome: Result<T, ProviderError>,
    ) -> Result<T, ProviderError> {
        if let Err(ProviderError::RateLimited { retry_after, .. }) = &outcome {
            self.budget.rate_limited(class, *retry_after);
        }
        outcome
    }
}

#[async_trait]
impl ProviderProtocol for BudgetedProtocol {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        self.budget
            .acquire(CallClass::Creates, CallPriority::now())
            .await;
        let submitted = self.inner.submit(job).await;
        self.noting_rate_limits(CallClass::Creates, submitted)
    }

    async fn state(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        // A follower reads through `state_at` at its turn; a plain read is
        // a cancel's (a customer's, or the start deadline's), which a
        // person or a bill waits for: ahead of the backstop reads.
        self.budget
            .acquire(CallClass::Others, CallPriority::Urgent)
            .await;
        self.read_state(target, job_id).await
    }

    async fn cancel(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        // A cancel stops a job from being billed: ahead of the backstop reads.
        self.budget
            .acquire(CallClass::Others, CallPriority::Urgent)
            .await;
        let canceled = self.inner.cancel(target, job_id).await;
        self.noting_rate_limits(CallClass::Others, canceled)
    }

    /// Verifying takes no token: its only call to the provider is the read
    /// of the provider's keys, at most once per `WEBHOOK_KEYS_LIFETIME`
    /// (and once per `WEBHOOK_KEYS_FAILURE_MEMORY` while it fails).
    async fn verify_webhook(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        self.inner.verify_webhook(headers, body).await
    }

    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        self.budget
            .acquire(CallClass::Others, CallPriority::now())
            .await;
        let found = self.inner.find_submitted(target, input, since).await;
        self.noting_rate_limits(CallClass::Others, found)
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

    fn output_headers(&self, video_url: &str) -> HeaderMap {
        self.inner.output_headers(video_url)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

#[cfg(test)]
mod tests;
