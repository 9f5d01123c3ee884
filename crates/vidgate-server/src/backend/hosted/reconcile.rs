//! Reconciling an intent whose submit's outcome is unknown: the provider's
//! list of recent jobs is read, and a verified webhook taken, until the
//! job the submit created is found or proved absent; only then may the job
//! be submitted again. What proves absence depends on what the provider
//! lists (`ProviderProtocol::lists_unfinished_jobs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::model_config::HostedTimeouts;
use super::protocol::{
    InputUnknownJob, ProviderError, ProviderProtocol, ProviderTarget, SubmittedSearch,
};
use super::{HostedBackend, HostedFailure, failure, millis, store_failure};
use crate::backend::contract::Job;
use crate::store::{ProviderJob, ProviderRun, Store};

/// Slack for the difference between our clock and a provider's when a
/// list is asked for the jobs created since an intent.
const CLOCK_SKEW_SECONDS: i64 = 60;
/// The first wait between two reads of a provider's list while a submit's
/// outcome is unknown; it doubles up to `RECONCILE_LONGEST_INTERVAL`.
const RECONCILE_FIRST_INTERVAL: Duration = Duration::from_secs(2);
const RECONCILE_LONGEST_INTERVAL: Duration = Duration::from_secs(60);

impl HostedBackend {
    /// Reconciles an intent whose submit's outcome is unknown: the id of
    /// the job it created, found in the provider's list or adopted from a
    /// verified webhook, or `None` once the job is proved absent. The list
    /// is read again at a growing interval (and at once when a webhook
    /// arrives) until then; a provider that cannot be asked leaves the
    /// question open, and the generation waits.
    ///
    /// A listed job of the same target, created while the submit's call was
    /// under way, whose input the provider no longer shows (Replicate
    /// removes it after an hour) may be this submit's job, and so may each
    /// of several that match what was sent; a list that could not be read
    /// whole shows nothing either way. Absence is then never proved, so the
    /// job is never submitted again, and no job is adopted. Only a later
    /// read or a webhook can still settle it; at the job's deadline the
    /// generation fails, refunded, with the cost of the job it may have
    /// made recorded.
    #[tracing::instrument(name = "provider.reconcile", skip_all, fields(generation_id = %job.generation_id, provider = self.protocol.name(), model = %self.model_id))]
    pub(super) async fn reconcile(
        &self,
        store: &Arc<Store>,
        job: &Job,
        recorded: &ProviderJob,
        wakeup: &Notify,
    ) -> Result<Option<String>, HostedFailure> {
        let clock = ReconcileClock::of(
            recorded,
            self.timeouts(),
            self.protocol.lists_unfinished_jobs(),
        );
        let target = ProviderTarget(recorded.target.clone());
        let mut interval = RECONCILE_FIRST_INTERVAL;
        // Whether the last list read showed jobs that may be ours without
        // telling which: then only the job's deadline ends the wait.
        let mut undecided = false;
        loop {
            let now = crate::store::now_millis();
            if now < clock.settled_at {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis((clock.settled_at - now) as u64)) => {}
                    _ = wakeup.notified() => {}
                }
            }
            // A verified webhook may have adopted the job meanwhile.
            if let Some(job_id) = self.recorded_job_id(store, &recorded.generation_id).await? {
                return Ok(Some(job_id));
            }
            let listed_at = crate::store::now_millis();
            match self
                .protocol
                .find_submitted(&target, &recorded.input, clock.since)
                .await
            {
                Ok(listed) => match self.judge_list(store, recorded, listed, &clock).await? {
                    ListVerdict::Ours(job_id) => return Ok(Some(job_id)),
                    ListVerdict::CannotTell(cannot_tell) => {
                        undecided = true;
                        if listed_at >= clock.job_deadline {
                            return Err(self
                                .give_up_undecided(store, job, recorded, &cannot_tell)
                                .await);
                        }
                    }
                    ListVerdict::NoneOfOurs => {
                        undecided = false;
                        if listed_at >= clock.absent_after {
                            return Ok(None);
                        }
                    }
                },
                // Rate limits and outages: asked again later; only an
                // outage counts toward giving up.
                Err(error) if error.is_transient() => {
                    if listed_at >= clock.give_up_at
                        && !matches!(error, ProviderError::RateLimited { .. })
                    {
                        return Err(failure("upstream_error", error.to_string()).into());
                    }
                    tracing::info!(generation = %recorded.generation_id, %error, "the provider's list could not be read; asking again later");
                }
                // A provider that refuses to list (a revoked credential) can
                // neither prove nor disprove the job: the generation fails,
                // and a job it did create runs with no customer to bill.
                Err(error) => {
                    return Err(failure("upstream_error", error.to_string()).into());
                }
            }
            let next_milestone = clock.next_milestone(undecided, listed_at);
            tokio::select! {
                _ = tokio::time::sleep(interval.min(next_milestone.max(Duration::from_millis(100)))) => {}
                _ = wakeup.notified() => {}
            }
            interval = (interval * 2).min(RECONCILE_LONGEST_INTERVAL);
        }
    }

    /// What one read of the provider's list shows of the submit's job.
    /// Exactly one candidate, read from the whole list, is the submit's job
    /// and is recorded as its. More than one (another client of the account
    /// sent the same request), one whose input cannot be compared, or a
    /// list read in part cannot tell which is ours: adopting a stranger's
    /// job would leave ours paid for and unfollowed.
    async fn judge_list(
        &self,
        store: &Arc<Store>,
        recorded: &ProviderJob,
        listed: SubmittedSearch,
        clock: &ReconcileClock,
    ) -> Result<ListVerdict, HostedFailure> {
        // The listed jobs this submit may have made: those that match what
        // was sent and those whose input cannot be compared, less the jobs
        // other generations own (an identical request of another
        // generation is that generation's job).
        let mut matching = Vec::new();
        for candidate in listed.matching {
            if self.may_be_ours(store, recorded, &candidate).await? {
                matching.push(candidate);
            }
        }
        let input_unknown = self
            .jobs_that_may_be_ours(store, recorded, listed.input_unknown, clock.created_by)
            .await?;
        if !listed.list_incomplete && matching.len() == 1 && input_unknown.is_empty() {
            let candidate = &matching[0];
            let recorded_now = store
                .provider_jobs()
                .record_job_id(&recorded.generation_id, candidate)
                .await
                .map_err(store_failure)?;
            if recorded_now {
                tracing::warn!(generation = %recorded.generation_id, provider_job = %candidate, "a submit with an unknown outcome had created the provider job; following it");
            }
            // Whatever is recorded now is followed: this candidate, or the
            // job a webhook proved meanwhile. Another generation that took
            // the candidate first (the unique index) leaves none, and the
            // list is read again.
            if let Some(job_id) = self.recorded_job_id(store, &recorded.generation_id).await? {
                return Ok(ListVerdict::Ours(job_id));
            }
        }
        if !listed.list_incomplete && matching.is_empty() && input_unknown.is_empty() {
            return Ok(ListVerdict::NoneOfOurs);
        }
        let cannot_tell = matching
            .into_iter()
            .map(|job_id| InputUnknownJob {
                job_id,
                created_at: None,
                ran_seconds: None,
            })
            .chain(input_unknown)
            .collect();
        Ok(ListVerdict::CannotTell(cannot_tell))
    }

    /// Whether the listed job `candidate` may be this submit's: no other
    /// generation owns it.
    async fn may_be_ours(
        &self,
        store: &Arc<Store>,
        recorded: &ProviderJob,
        candidate: &str,
    ) -> Result<bool, HostedFailure> {
        let owner = store
            .provider_jobs()
            .generation_of(&recorded.provider, candidate)
            .await
            .map_err(store_failure)?;
        Ok(owner.is_none_or(|owner| owner == recorded.generation_id))
    }

    /// Of the listed jobs whose input is gone, those that may be the
    /// submit's: created by `created_by` (unix seconds; a job without a
    /// readable time is kept) and not another generation's.
    async fn jobs_that_may_be_ours(
        &self,
        store: &Arc<Store>,
        recorded: &ProviderJob,
        input_unknown: Vec<InputUnknownJob>,
        created_by: i64,
    ) -> Result<Vec<InputUnknownJob>, HostedFailure> {
        let mut may_be_ours = Vec::new();
        for listed in input_unknown {
            if listed
                .created_at
                .is_some_and(|created_at| created_at > created_by)
            {
                continue;
            }
            if self.may_be_ours(store, recorded, &listed.job_id).await? {
                may_be_ours.push(listed);
            }
        }
        Ok(may_be_ours)
    }

    /// Fails a generation whose submit's outcome the provider cannot
    /// tell, at its job's deadline: refunded, never submitted again
    /// (that could make a second paid job), and with the cost of the one
    /// job it may have made recorded as its provider cost, so that
    /// `vidgate admin usage` counts what the operator may have paid.
    async fn give_up_undecided(
        &self,
        store: &Arc<Store>,
        job: &Job,
        recorded: &ProviderJob,
        cannot_tell: &[InputUnknownJob],
    ) -> HostedFailure {
        let today = time::OffsetDateTime::now_utc().date().to_string();
        let possible_run = ProviderRun {
            provider: recorded.provider.clone(),
            cost: self.config.cost_of(
                &job.input.to_json(),
                &recorded.target,
                &today,
                f64::from(job.input.duration_s()),
            ),
            cost_is_possible: true,
        };
        let provider_jobs: Vec<&str> = cannot_tell
            .iter()
            .map(|listed| listed.job_id.as_str())
            .collect();
        tracing::warn!(generation = %job.generation_id, provider = %recorded.provider, ?provider_jobs, possible_cost_micros = ?possible_run.cost.map(|cost| cost.0), "the provider's list cannot tell whether a submit with an unknown outcome created a job (a listed job whose input cannot be compared, several that match, or a list not read whole); failing the generation, refunded, without submitting again");
        if let Err(error) = store
            .queue()
            .record_possible_provider_cost(&job.generation_id, &possible_run)
            .await
        {
            tracing::warn!(generation = %job.generation_id, %error, "could not record the possible provider cost");
        }
        failure(
            "upstream_error",
            format!(
                "{} can no longer tell whether the job was created; it was not submitted again",
                recorded.provider
            ),
        )
        .into()
    }

    async fn recorded_job_id(
        &self,
        store: &Arc<Store>,
        generation_id: &str,
    ) -> Result<Option<String>, HostedFailure> {
        Ok(store
            .provider_jobs()
            .get(generation_id)
            .await
            .map_err(store_failure)?
            .and_then(|recorded| recorded.job_id))
    }
}

/// What one read of the provider's list shows of a submit's job.
enum ListVerdict {
    /// The job, now recorded as the generation's.
    Ours(String),
    /// Jobs that may be ours, or a list read in part: nothing is proved.
    CannotTell(Vec<InputUnknownJob>),
    /// No job that may be ours, in the whole list.
    NoneOfOurs,
}

/// The moments of a reconcile, in Unix ms (or seconds where named), all
/// counted from the intent.
struct ReconcileClock {
    /// The submit's call has certainly ended once its timeout has passed
    /// since the intent.
    settled_at: i64,
    /// From then a list without the job proves it absent.
    absent_after: i64,
    /// A provider that cannot be asked (an outage) neither proves nor
    /// disproves the job; after the retry deadline, and not before the job
    /// could be proved absent, the generation fails without moving to
    /// another provider, and a job it did create runs with no customer to
    /// bill.
    give_up_at: i64,
    /// The job a submit with an unknown outcome made, if any, is gone by
    /// then: vidgate would have given up on it.
    job_deadline: i64,
    /// The list is asked for jobs created since then (Unix seconds).
    since: i64,
    /// A job created after the submit's call ended is not its job (Unix
    /// seconds).
    created_by: i64,
}

impl ReconcileClock {
    fn of(
        recorded: &ProviderJob,
        timeouts: &HostedTimeouts,
        lists_unfinished_jobs: bool,
    ) -> ReconcileClock {
        let settled_at = recorded.intent_at + millis(timeouts.request_seconds) + 1000;
        // A job that the provider lists only once finished may be queued
        // (until its start deadline) and then running (until the whole
        // job's deadline, `job_seconds`, when vidgate would give up on it)
        // without showing.
        let absent_after = if lists_unfinished_jobs {
            settled_at
        } else {
            settled_at + millis(timeouts.job_seconds.max(timeouts.start_seconds))
        };
        ReconcileClock {
            settled_at,
            absent_after,
            give_up_at: absent_after.max(settled_at + millis(timeouts.retry_seconds)),
            job_deadline: recorded.intent_at + millis(timeouts.job_seconds),
            since: recorded.intent_at / 1000 - CLOCK_SKEW_SECONDS,
            created_by: settled_at / 1000 + CLOCK_SKEW_SECONDS,
        }
    }

    /// How long until the next moment the job can be proved absent (or,
    /// while `undecided`, its deadline) or given up on, after a read at
    /// `listed_at`: the next read comes no later.
    fn next_milestone(&self, undecided: bool, listed_at: i64) -> Duration {
        let undecided_until = if undecided {
            self.job_deadline
        } else {
            self.absent_after
        };
        [undecided_until, self.give_up_at]
            .into_iter()
            .filter(|milestone| *milestone > listed_at)
            .min()
            .map_or(RECONCILE_FIRST_INTERVAL, |milestone| {
                Duration::from_millis((milestone - listed_at) as u64)
            })
    }
}
