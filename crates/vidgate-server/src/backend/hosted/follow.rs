//! Following a generation's job at its provider until it ends: reads at a
//! gentle interval, woken early by a verified webhook (`webhooks.rs`),
//! each read taking its turn in the provider's budget; a job still queued
//! at a start deadline that is vidgate's to keep is canceled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::budget::CallPriority;
use super::model_config::seconds;
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
        // ends is not read before then (a resumed older job, and one found
        // after its create's answer was lost, are read at once).
        let mut wait_first =
            with_webhooks && !found_by_reconcile && crate::store::now_millis() < usual_end;
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
                        if let Some(failed) = self.end_unstarted_job(job, target, job_id).await {
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
    /// is followed on. A job gone after a cancel that also deletes finished
    /// jobs may have finished first: its cost is recorded as possible.
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
