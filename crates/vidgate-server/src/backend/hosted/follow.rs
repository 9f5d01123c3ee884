//! Following a generation's job at its provider until it ends: reads at a
//! gentle interval, woken early by a verified webhook (`webhooks.rs`),
//! each read taking its turn in the provider's budget; a job still queued
//! at a start deadline that is vidgate's to keep is canceled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::budget::CallPriority;
use super::model_config::{HostedTimeouts, seconds};
use super::protocol::{
    self, CancelOutcome, CancelResult, FailureKind, ProviderError, ProviderJobState,
    ProviderProtocol, ProviderTarget,
};
use super::submit::SubmittedJob;
use super::{Backoff, HostedBackend, failure, millis};
use crate::backend::contract::{Job, JobFailure};
use crate::store::ProviderRun;

/// How long a worker whose provider job was canceled at the provider waits
/// for the cancel that did it to cancel the generation too.
const CANCELED_AT_PROVIDER_GRACE: Duration = Duration::from_secs(10);

impl HostedBackend {
    /// Registers this process as the follower of a generation's job, until
    /// the returned guard is dropped.
    pub(super) fn follow_wakeups(&self, generation_id: &str) -> Following {
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

    /// Wakes this process's follower of the generation's job, if any.
    pub(super) fn wake_local_follower(&self, generation_id: &str) -> bool {
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

    /// Reads the job's state until it is final; its video's URL. Where the
    /// start deadline is vidgate's to keep (Replicate), a job still queued
    /// at it is canceled and fails as timed out.
    ///
    /// Reads take the provider budget's tokens at their turn: a read woken
    /// by a verified webhook first, then the others earliest-due first.
    /// With a provider webhook registered (`with_webhooks`, only for a
    /// provider that sends them) polling is the backstop: the first read waits for the webhook or the model's usual
    /// run time, later ones come at a growing interval. Without one, a job
    /// is read every `poll_seconds`, or as often as the budget allows.
    #[tracing::instrument(name = "provider.follow", skip_all, fields(generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id, provider_job = %submitted.job_id))]
    pub(super) async fn follow(
        &self,
        job: &Job,
        submitted: &SubmittedJob,
        with_webhooks: bool,
        wakeup: &Notify,
        cancel: &CancellationToken,
    ) -> Result<String, JobFailure> {
        let SubmittedJob {
            target,
            job_id,
            created_at,
            found_by_reconcile,
            ..
        } = submitted;
        let mut pace = FollowPace::new(self.timeouts(), *created_at, with_webhooks);
        let mut retries = ReadRetries::new();
        let mut priority = CallPriority::now();
        let mut last_read: Option<Instant> = None;
        // A job whose webhook will likely come before its usual run time
        // ends is not read before then (a resumed older job, and one found
        // after its create's answer was lost, are read at once).
        let mut wait_first =
            with_webhooks && !found_by_reconcile && crate::store::now_millis() < pace.usual_end;
        loop {
            if !wait_first {
                let poll_span = tracing::info_span!("provider.poll", generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id, provider_job = %job_id);
                let read = tokio::select! {
                    read = self.protocol.state_at(target, job_id, priority, wakeup).instrument(poll_span) => read,
                    _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
                };
                let now = Instant::now();
                if let Some(previous) = last_read.replace(now) {
                    self.budget()
                        .record_poll_interval(with_webhooks, now.duration_since(previous));
                }
                match self
                    .judge_read((job, target, job_id), read, &pace, &mut retries, cancel)
                    .await?
                {
                    ReadNext::Ended(video_url) => return Ok(video_url),
                    ReadNext::ReadAgain => continue,
                    ReadNext::Wait => {}
                }
            }
            wait_first = false;
            if crate::store::now_millis() >= pace.deadline {
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
            let poll = pace.next_wait(self.protocol.start_deadline_is_ours());
            priority = tokio::select! {
                _ = tokio::time::sleep(poll) => CallPriority::now(),
                _ = wakeup.notified() => CallPriority::Urgent,
                _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
            };
        }
    }

    /// What one read of the job's state means: it ended (with its video,
    /// or a failure), it is read again at once (a rate limit, or a
    /// transient error after its backoff), or it is read after the next
    /// wait. A job still queued at a start deadline that is vidgate's is
    /// canceled here.
    async fn judge_read(
        &self,
        (job, target, job_id): (&Job, &ProviderTarget, &str),
        read: Result<ProviderJobState, ProviderError>,
        pace: &FollowPace,
        retries: &mut ReadRetries,
        cancel: &CancellationToken,
    ) -> Result<ReadNext, JobFailure> {
        match read {
            Ok(ProviderJobState::Succeeded { video_url }) => Ok(ReadNext::Ended(video_url)),
            Ok(ProviderJobState::Failed(provider_failure)) => {
                if provider_failure.kind == FailureKind::Canceled {
                    // Our own cancel ends a queued job at the provider and
                    // then cancels the generation with its refund; this
                    // worker waits for that (its heartbeat then fails and
                    // interrupts it) rather than race it with a failure. A
                    // job canceled by anyone else fails after the wait.
                    tokio::select! {
                        _ = tokio::time::sleep(CANCELED_AT_PROVIDER_GRACE) => {}
                        _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
                    }
                }
                Err(failure(
                    provider_failure.kind.code(),
                    format!("the model failed: {}", provider_failure.message),
                ))
            }
            Ok(ProviderJobState::Queued)
                if self.protocol.start_deadline_is_ours()
                    && crate::store::now_millis() >= pace.start_deadline =>
            {
                match self.end_unstarted_job(job, target, job_id).await {
                    Some(failed) => Err(failed),
                    None => Ok(ReadNext::Wait),
                }
            }
            Ok(ProviderJobState::Queued | ProviderJobState::Running) => {
                *retries = ReadRetries::new();
                Ok(ReadNext::Wait)
            }
            // A rate limit says "slower", never "fail": the budget paused
            // reads for as long as the provider asked, and the read waits
            // for its turn again, with no deadline.
            Err(ProviderError::RateLimited { .. }) => Ok(ReadNext::ReadAgain),
            Err(error) if error.is_transient() => {
                let until = *retries
                    .until
                    .get_or_insert_with(|| Instant::now() + seconds(self.timeouts().retry_seconds));
                if Instant::now() >= until {
                    return Err(failure("upstream_error", error.to_string()));
                }
                let wait = retries.backoff.next(error.retry_after());
                tokio::select! {
                    _ = tokio::time::sleep(wait) => Ok(ReadNext::ReadAgain),
                    _ = cancel.cancelled() => Err(JobFailure::Interrupted),
                }
            }
            Err(error) => Err(failure("upstream_error", error.to_string())),
        }
    }

    /// Measures a job the provider finished: the time from its submit (the
    /// intent, as recorded, so a job resumed after a restart counts from
    /// its first submit) to now, without our copy of its output.
    pub(super) fn record_latency(&self, mode: vidgate_core::Mode, submitted: &SubmittedJob) {
        let took_ms = (crate::store::now_millis() - submitted.created_at).max(0);
        let mean = self
            .latencies
            .record(mode, Duration::from_millis(took_ms as u64));
        self.metrics.set_provider_latency(
            &self.model_id,
            self.provider_name(),
            mode.as_str(),
            mean,
        );
    }

    /// Cancels a job still queued at its start deadline: the failure its
    /// generation gets once the provider ended it (refunded, as timed
    /// out), or `None` when the cancel could not be carried out (the job
    /// started meanwhile, or the provider could not be reached) and the job
    /// is followed on. A job gone after a cancel that also deletes finished
    /// jobs may have finished first: its cost is recorded as possible.
    #[tracing::instrument(name = "provider.cancel", skip_all, fields(generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id, provider_job = %job_id))]
    async fn end_unstarted_job(
        &self,
        job: &Job,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Option<JobFailure> {
        let timed_out = || {
            failure(
                FailureKind::TimedOut.code(),
                format!(
                    "the provider did not start the job within {} s",
                    self.timeouts().start_seconds
                ),
            )
        };
        let outcome = match self.protocol.cancel(target, job_id).await {
            Ok(CancelOutcome::Requested) => {
                protocol::confirm_cancel(self.protocol.as_ref(), target, job_id).await
            }
            Ok(CancelOutcome::Canceled { ran_seconds }) => {
                Ok(CancelResult::Carried { ran_seconds })
            }
            Ok(CancelOutcome::NotFound) => Ok(CancelResult::Carried { ran_seconds: None }),
            Ok(CancelOutcome::Refused) => Ok(CancelResult::NotCarried),
            Err(error) => Err(error),
        };
        match outcome {
            Ok(CancelResult::Carried { ran_seconds }) => {
                tracing::info!(provider = self.protocol.name(), provider_job = %job_id, ?ran_seconds, "canceled a job that did not start by its start deadline");
                Some(timed_out())
            }
            Ok(CancelResult::Gone) => {
                let today = time::OffsetDateTime::now_utc().date().to_string();
                let possible_run = ProviderRun {
                    provider: self.protocol.name().to_owned(),
                    cost: self.config.cost_of(
                        &job.input.to_json(),
                        &target.0,
                        &today,
                        f64::from(job.input.duration_s()),
                    ),
                    cost_is_possible: true,
                };
                tracing::warn!(generation = %job.generation_id, provider = self.protocol.name(), provider_job = %job_id, "a job past its start deadline is gone after the cancel and may have finished first; recording its possible cost");
                if let Err(error) = self
                    .store
                    .queue()
                    .record_possible_provider_cost(&job.generation_id, &possible_run)
                    .await
                {
                    tracing::warn!(generation = %job.generation_id, %error, "could not record the possible provider cost");
                }
                Some(timed_out())
            }
            Ok(CancelResult::NotCarried | CancelResult::Declined) => None,
            Err(error) => {
                tracing::warn!(provider = self.protocol.name(), provider_job = %job_id, %error, "canceling a job past its start deadline failed; reading it again");
                None
            }
        }
    }
}

/// A job this process follows, in `HostedBackend::following` until
/// dropped.
pub(super) struct Following {
    generation_id: String,
    pub(super) wakeup: Arc<Notify>,
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

/// The longest wait between two backstop reads of a job whose provider
/// webhook is registered: a lost webhook delays its job's end by at most
/// about this.
const BACKSTOP_LONGEST_INTERVAL: Duration = Duration::from_secs(120);

/// What follows one read of a job's state.
enum ReadNext {
    /// The job succeeded: its video's URL.
    Ended(String),
    /// Read again now.
    ReadAgain,
    /// Read after the next wait, if the job's deadline has not passed.
    Wait,
}

/// How long transient read errors are retried, and the backoff between
/// them; both start again once a read succeeds.
struct ReadRetries {
    until: Option<Instant>,
    backoff: Backoff,
}

impl ReadRetries {
    fn new() -> ReadRetries {
        ReadRetries {
            until: None,
            backoff: Backoff::new(),
        }
    }
}

/// When a followed job is read, and its deadlines (Unix ms), counted from
/// the intent to create the job, recorded just before its create call
/// (whose token the pool promised when it claimed the job), as the
/// provider counts its lifetime from the create: a job resumed after a
/// restart keeps the deadline it had, where a deadline counted from each
/// run would start again.
struct FollowPace {
    deadline: i64,
    start_deadline: i64,
    usual_end: i64,
    with_webhooks: bool,
    poll: Duration,
    backstop_interval: Duration,
}

impl FollowPace {
    fn new(timeouts: &HostedTimeouts, created_at: i64, with_webhooks: bool) -> FollowPace {
        FollowPace {
            deadline: created_at + millis(timeouts.job_seconds),
            start_deadline: created_at + millis(timeouts.start_seconds),
            usual_end: created_at + millis(timeouts.usual_run_seconds),
            with_webhooks,
            poll: seconds(timeouts.poll_seconds),
            backstop_interval: seconds(timeouts.poll_seconds),
        }
    }

    /// The wait before the next read. With a webhook registered, polling
    /// is the backstop: until the model's usual run time is over, then at
    /// an interval growing to `BACKSTOP_LONGEST_INTERVAL`; without one,
    /// every `poll_seconds`. Never past a start deadline that is vidgate's
    /// to keep (`start_deadline_is_ours`).
    fn next_wait(&mut self, start_deadline_is_ours: bool) -> Duration {
        let mut wait = if self.with_webhooks {
            let until_usual_end = self.usual_end - crate::store::now_millis();
            if until_usual_end > 0 {
                Duration::from_millis(until_usual_end as u64)
            } else {
                let interval = self.backstop_interval;
                self.backstop_interval = (self.backstop_interval * 2)
                    .max(interval)
                    .min(BACKSTOP_LONGEST_INTERVAL.max(self.poll));
                interval
            }
        } else {
            self.poll
        };
        if start_deadline_is_ours {
            let until_start_deadline = Duration::from_millis(
                (self.start_deadline - crate::store::now_millis()).max(0) as u64,
            );
            if !until_start_deadline.is_zero() {
                wait = wait.min(until_start_deadline);
            }
        }
        wait
    }
}
