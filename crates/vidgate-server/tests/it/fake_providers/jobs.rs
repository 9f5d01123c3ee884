//! The fake's jobs: the state they are kept in, and the task that drives
//! each through its life (queued, running, finished, a deadline kept).

use super::*;

impl FakeState {
    pub(super) fn new_id(&self, provider: Provider) -> String {
        let mut next = self.next_id.lock().unwrap();
        *next += 1;
        (provider.job_id)(*next)
    }

    /// Keeps the headers of job `job_id`'s submit, the credential left out.
    pub(super) fn record_submit_headers(&self, job_id: &str, headers: &axum::http::HeaderMap) {
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

    pub(super) fn update(&self, id: &str, change: impl FnOnce(&mut FakeJob)) -> Option<FakeJob> {
        let mut jobs = self.jobs.lock().unwrap();
        let job = jobs.iter_mut().find(|job| job.id == id)?;
        change(job);
        Some(job.clone())
    }

    /// Takes one unit of a counted switch, if any is left.
    pub(super) fn take(&self, pick: impl FnOnce(&mut Switches) -> &mut u32) -> bool {
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
    pub(super) fn count_call(&self, provider: Provider, class: CallClass) -> Option<u64> {
        let limits = (provider.rate_limits)(&self.switches.lock().unwrap());
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

    pub(super) fn count_state_read(&self, job_id: &str) {
        self.state_reads
            .lock()
            .unwrap()
            .entry(job_id.to_owned())
            .or_default()
            .push(now_seconds());
    }

    pub(super) fn count_key_fetch(&self, provider: Provider) {
        self.key_fetches.lock().unwrap().push(provider);
    }

    pub(super) fn is_down(&self) -> bool {
        self.switches.lock().unwrap().down
    }

    pub(super) fn submits_are_down_at(&self, provider: Provider) -> bool {
        self.switches.lock().unwrap().submits_down_at == Some(provider)
    }

    pub(super) fn validates_inputs(&self) -> bool {
        self.switches.lock().unwrap().validate_inputs
    }

    pub(super) fn lists_are_down(&self) -> bool {
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
    pub(super) fn create_job(
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
    pub(super) fn create_job_in(
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

    /// Cancels a job the way the providers do: a queued one is removed at
    /// once (each provider's `cancel_queued` adds what its answer shows);
    /// a running one is canceled too (and noted, since vidgate must never
    /// ask for that).
    pub(super) fn cancel(&self, id: &str) -> Option<(FakeStatus, FakeJob)> {
        let mut before = None;
        let job = self.update(id, |job| {
            before = Some(job.status.clone());
            match job.status {
                FakeStatus::Queued => {
                    let now = now_seconds();
                    job.status = FakeStatus::Canceled;
                    job.completed_at = Some(now);
                    (job.provider.cancel_queued)(job, now);
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
        let slower = switches
            .runs_longer_at
            .filter(|(provider, _)| *provider == job.provider)
            .map_or(Duration::ZERO, |(_, longer)| longer);
        (switches.queue_for, switches.run_for + slower)
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
    let (JobDeadline::Start(seconds)
    | JobDeadline::Lifetime(seconds)
    | JobDeadline::Expiry(seconds)) = deadline;
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let mut ended_now = false;
    let job = state.update(&id, |job| {
        let ended_as = match (&job.status, deadline) {
            (FakeStatus::Queued, _) => FakeStatus::TimedOut,
            (FakeStatus::Running, JobDeadline::Lifetime(_)) => FakeStatus::Canceled,
            (FakeStatus::Running, JobDeadline::Expiry(_)) => FakeStatus::TimedOut,
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
