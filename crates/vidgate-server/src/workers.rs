//! Workers, the hosted pool and the lease rescuer. The generations table is
//! the queue: a claimer takes the queued job whose turn it is in one short
//! statement (accounts take turns, see `store/queue.rs`), runs the model's
//! backend outside any transaction while a heartbeat extends its lease, and
//! finishes with an update guarded by state and lease owner. A rescuer puts
//! jobs whose lease expired (their worker died) back in the queue, or fails
//! and refunds them after their last attempt.
//!
//! Jobs are claimed by two kinds of claimer. The CPU workers (`workers`)
//! run the jobs of models on the local engine or the operator's model
//! servers, one job each. The hosted pool runs the jobs of models at hosted
//! providers: following a provider's job costs a few requests and no CPU,
//! so the pool runs up to `hosted_jobs` of them at once as tasks, and one
//! heartbeat extends all their leases in one statement.
//!
//! Several nodes may run workers, pools and rescuers on one PostgreSQL
//! database: claims skip rows other nodes hold, every finish is guarded by
//! the lease owner, and the rescuer's guarded updates make a second rescuer
//! a no-op.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;
use tokio::sync::{Notify, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use vidgate_core::{Catalog, Mode, ValidatedInput};

use crate::backend::{Backends, ClipBytes, Job, JobFailure, RenderedClip};
use crate::bound_media::{JobMedia, MediaBinding, MediaUrlSigner, release_generation_media};
use crate::health::QueueLiveness;
use crate::metrics::{JobOutcome, Metrics};
use crate::representation::GenerationOutput;
use crate::storage::Storage;
use crate::store::{ClaimableModels, FailureDetail, Generation, Store, now_millis};
use crate::telemetry;

#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// CPU workers: each runs one job of a model that is not at a hosted
    /// provider at a time.
    pub workers: usize,
    /// How many jobs of models at hosted providers the node's hosted pool
    /// follows at once; 0 runs no pool, leaving such jobs to other nodes.
    pub hosted_jobs: usize,
    /// How long a claimed job stays with its worker without a heartbeat.
    pub lease: Duration,
    /// How often an idle worker looks for work it was not told about (a
    /// missed announcement, or another process on SQLite).
    pub idle_poll: Duration,
    pub rescue_interval: Duration,
}

impl QueueSettings {
    /// The claiming loops a node runs: its CPU workers and its hosted pool,
    /// each of which readiness expects alive.
    pub fn claiming_loops(&self) -> usize {
        self.workers + usize::from(self.hosted_jobs > 0)
    }
}

/// Wakes an idle claimer when a job is queued on this node: a CPU worker
/// or the hosted pool, whichever takes the job's model, so that a worker
/// woken for a job it does not take cannot leave the pool asleep.
#[derive(Debug, Default)]
pub struct QueueWakeup {
    cpu_workers: Notify,
    hosted_pool: Notify,
}

impl QueueWakeup {
    /// A job was queued; `runs_at_provider` tells whose it is.
    pub fn job_queued(&self, runs_at_provider: bool) {
        if runs_at_provider {
            self.hosted_pool.notify_one();
        } else {
            self.cpu_workers.notify_one();
        }
    }

    /// Jobs of any models were put back in the queue.
    fn jobs_requeued(&self) {
        self.cpu_workers.notify_waiters();
        self.hosted_pool.notify_waiters();
    }
}

pub struct WorkerContext {
    pub store: Arc<Store>,
    pub catalog: Arc<Catalog>,
    pub backends: Backends,
    pub storage: Arc<Storage>,
    pub api_base: String,
    /// Signs the URLs of a job's kept media for the model servers that
    /// fetch them.
    pub media_signer: MediaUrlSigner,
    pub wakeup: Arc<QueueWakeup>,
    pub settings: QueueSettings,
    /// Identifies this process in lease_owner columns.
    pub node_id: String,
    /// Where the workers and the rescuer show readiness they are alive.
    pub liveness: Arc<QueueLiveness>,
    pub metrics: Arc<Metrics>,
}

/// Starts the CPU workers, the hosted pool and the rescuer; they stop when
/// `shutdown` fires, handing their unfinished jobs back to the queue.
pub fn spawn(context: Arc<WorkerContext>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
    let hosted_models: Arc<[String]> = models_at_providers(&context).into();
    let mut tasks: Vec<JoinHandle<()>> = (0..context.settings.workers)
        .map(|index| {
            let worker_id = format!("{}/w{index}", context.node_id);
            tokio::spawn(worker_loop(
                context.clone(),
                worker_id,
                hosted_models.clone(),
                shutdown.clone(),
            ))
        })
        .collect();
    if context.settings.hosted_jobs > 0 {
        let pool = Arc::new(HostedPool {
            owner_prefix: format!("{}/hosted/", context.node_id),
            claims: AtomicU64::new(0),
            hosted_models,
            in_flight: Mutex::default(),
        });
        tasks.push(tokio::spawn(hosted_pool_loop(
            context.clone(),
            pool,
            shutdown.clone(),
        )));
    }
    tasks.push(tokio::spawn(rescue_loop(context, shutdown)));
    tasks
}

/// The catalog models whose backend runs them at a hosted provider.
fn models_at_providers(context: &WorkerContext) -> Vec<String> {
    context
        .catalog
        .models()
        .iter()
        .filter(|model| {
            context
                .backends
                .for_model(model)
                .is_some_and(|backend| backend.runs_at_provider())
        })
        .map(|model| model.id.clone())
        .collect()
}

/// A CPU worker: claims the jobs of every model but those at hosted
/// providers, one at a time.
async fn worker_loop(
    context: Arc<WorkerContext>,
    worker_id: String,
    hosted_models: Arc<[String]>,
    shutdown: CancellationToken,
) {
    let _running = context.liveness.worker_running();
    while !shutdown.is_cancelled() {
        let claim_span = tracing::info_span!("job.claim", worker = %worker_id, generation_id = tracing::field::Empty);
        let claimed = context
            .store
            .queue()
            .claim_next_among(
                &worker_id,
                context.settings.lease,
                ClaimableModels::AllBut(&hosted_models),
            )
            .instrument(claim_span.clone())
            .await;
        record_claimed(&claim_span, &claimed);
        match claimed {
            Ok(Some(generation)) => {
                // The job stops when the process shuts down or when its
                // lease is lost (another node rescued it), so a job never
                // runs twice at once for long.
                let job_cancel = shutdown.child_token();
                let heartbeat = tokio::spawn(heartbeat(
                    context.store.clone(),
                    generation.id.clone(),
                    worker_id.clone(),
                    context.settings.lease,
                    job_cancel.clone(),
                ));
                run_claimed(&context, &worker_id, generation, &job_cancel).await;
                heartbeat.abort();
            }
            Ok(None) => {
                // A submit on this node wakes a worker at once; one on
                // another node arrives through the store (PostgreSQL's
                // NOTIFY), and the store's wait ends after `idle_poll` so
                // that anything missed is still found by polling.
                tokio::select! {
                    _ = context.wakeup.cpu_workers.notified() => {}
                    _ = context.store.queue().wait_for_work(context.settings.idle_poll) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
            Err(error) => {
                tracing::error!(worker = %worker_id, error = %error, "claiming a job failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
        }
    }
}

/// The hosted pool of a node: the jobs of models at hosted providers that
/// it follows, each under a lease owner of its own claim.
///
/// Each claim gets its own owner (`<node>/hosted/<n>`), not one owner for
/// the pool: a job whose lease the pool lost (a stalled heartbeat) may be
/// rescued and claimed again by the same pool while its first run still
/// winds down, and the finish and hand-back guards (id and owner) must
/// tell the two runs apart. The heartbeat extends the leases of the
/// claims in flight, a few hundred to a statement.
struct HostedPool {
    owner_prefix: String,
    claims: AtomicU64,
    hosted_models: Arc<[String]>,
    /// The cancel token of each job in flight, by its claim's lease owner.
    in_flight: Mutex<HashMap<String, CancellationToken>>,
}

impl HostedPool {
    fn next_owner(&self) -> String {
        let claim = self.claims.fetch_add(1, Ordering::Relaxed);
        format!("{}{claim}", self.owner_prefix)
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        // A panic while holding the map leaves it usable: every change to
        // it is a single insert or remove.
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The hosted models whose jobs the pool may start now: those whose
/// provider has a create to spare in its request budget (and room under
/// its ceiling of jobs in flight). A model whose provider has none is left
/// out, so that its jobs stay `queued`, and fairly ordered, in vidgate's
/// queue rather than waiting at the provider's door as `running`.
fn hosted_models_ready_to_create(context: &WorkerContext, pool: &HostedPool) -> Vec<String> {
    pool.hosted_models
        .iter()
        .filter(|model_id| {
            context
                .catalog
                .model(model_id)
                .is_none_or(|model| context.backends.create_ready(model))
        })
        .cloned()
        .collect()
}

/// How soon the pool looks again when no hosted model's provider has a
/// create to spare: a budget refills continuously (Replicate's 600 a
/// minute is one every 100 ms).
const BUDGET_RECHECK: Duration = Duration::from_millis(100);

async fn hosted_pool_loop(
    context: Arc<WorkerContext>,
    pool: Arc<HostedPool>,
    shutdown: CancellationToken,
) {
    let _running = context.liveness.worker_running();
    let slots = Arc::new(Semaphore::new(context.settings.hosted_jobs));
    let mut jobs = JoinSet::new();
    let heartbeat_stop = CancellationToken::new();
    let heartbeat = tokio::spawn(pool_heartbeat(
        context.clone(),
        pool.clone(),
        heartbeat_stop.clone(),
    ));
    while !shutdown.is_cancelled() {
        // Finished jobs' tasks are collected as the pool goes, so that the
        // set holds only the jobs in flight.
        while jobs.try_join_next().is_some() {}
        // A slot is taken before the claim, so that the pool never holds a
        // job it has no room to run.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the pool's semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let models = hosted_models_ready_to_create(&context, &pool);
        if models.is_empty() {
            drop(slot);
            tokio::select! {
                _ = tokio::time::sleep(BUDGET_RECHECK) => {}
                _ = shutdown.cancelled() => {}
            }
            continue;
        }
        let owner = pool.next_owner();
        let claim_span = tracing::info_span!("job.claim", worker = %owner, generation_id = tracing::field::Empty);
        let claimed = context
            .store
            .queue()
            .claim_next_among(
                &owner,
                context.settings.lease,
                ClaimableModels::Only(&models),
            )
            .instrument(claim_span.clone())
            .await;
        record_claimed(&claim_span, &claimed);
        match claimed {
            Ok(Some(generation)) => {
                if let Some(model) = context.catalog.model(&generation.model) {
                    context.backends.promise_create(model);
                }
                let job_cancel = shutdown.child_token();
                pool.in_flight().insert(owner.clone(), job_cancel.clone());
                let context = context.clone();
                let pool = pool.clone();
                jobs.spawn(async move {
                    let provider_kind = backend_kind_of(&context, &generation.model);
                    context.metrics.hosted_job_started(provider_kind);
                    run_claimed(&context, &owner, generation, &job_cancel).await;
                    context.metrics.hosted_job_ended(provider_kind);
                    pool.in_flight().remove(&owner);
                    drop(slot);
                });
            }
            Ok(None) => {
                drop(slot);
                tokio::select! {
                    _ = context.wakeup.hosted_pool.notified() => {}
                    _ = context.store.queue().wait_for_work(context.settings.idle_poll) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
            Err(error) => {
                drop(slot);
                tracing::error!(pool = %pool.owner_prefix, error = %error, "claiming a hosted job failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
        }
    }
    // Every job's token is a child of `shutdown`: each hands its job back
    // to the queue, under a lease the heartbeat keeps until they are done.
    while jobs.join_next().await.is_some() {}
    heartbeat_stop.cancel();
    let _ = heartbeat.await;
}

/// The backend kind of `model` (`fal`, `replicate`, `failover`), for the
/// pool's gauge of jobs in flight; `none` for a model without a backend.
fn backend_kind_of(context: &WorkerContext, model_id: &str) -> &'static str {
    context
        .catalog
        .model(model_id)
        .and_then(|model| context.backends.for_model(model))
        .map_or("none", |backend| backend.kind())
}

/// Extends the lease of every claim in flight once per interval, and
/// stops the jobs whose lease did not come back: the rescuer gave them to
/// another claimer after the lease ran out.
async fn pool_heartbeat(
    context: Arc<WorkerContext>,
    pool: Arc<HostedPool>,
    stop: CancellationToken,
) {
    let lease = context.settings.lease;
    let mut ticker = tokio::time::interval(lease / 3);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.cancelled() => return,
        }
        // The claims in flight now; a claim made while the statement runs
        // is extended at the next tick, well within its lease.
        let claims_before: Vec<String> = pool.in_flight().keys().cloned().collect();
        match context
            .store
            .queue()
            .extend_leases(&claims_before, lease)
            .await
        {
            Ok(extended) => {
                let extended: HashSet<String> = extended.into_iter().collect();
                let in_flight = pool.in_flight();
                for owner in claims_before
                    .iter()
                    .filter(|owner| !extended.contains(*owner))
                {
                    // Also a job that has just finished but not yet left
                    // the map, for which the cancel changes nothing: so
                    // only a debug line here, and `run_claimed` warns of a
                    // job that really lost its lease.
                    if let Some(job_cancel) = in_flight.get(owner) {
                        tracing::debug!(claim = %owner, "no lease for this claim; stopping its job");
                        job_cancel.cancel();
                    }
                }
            }
            // A transient database error is retried on the next tick; the
            // lease is long enough to survive a few misses.
            Err(error) => {
                tracing::error!(pool = %pool.owner_prefix, error = %error, "the hosted pool's heartbeat failed")
            }
        }
    }
}

async fn rescue_loop(context: Arc<WorkerContext>, shutdown: CancellationToken) {
    loop {
        match context.store.queue().rescue_expired_leases().await {
            Ok(report) => {
                context
                    .metrics
                    .record_rescue(report.requeued.len(), report.failed.len());
                if !report.requeued.is_empty() || !report.failed.is_empty() {
                    tracing::warn!(requeued = ?report.requeued, failed = ?report.failed, "rescued jobs with expired leases");
                    context.wakeup.jobs_requeued();
                }
                // A job failed after its last attempt is final, as one its
                // worker failed: its kept media goes the same way. Only
                // this rescuer's guarded update failed these, so no other
                // node removes them too.
                for generation_id in &report.failed {
                    release_generation_media(
                        context.store.as_ref(),
                        &context.storage,
                        generation_id,
                    )
                    .await;
                }
            }
            Err(error) => tracing::error!(error = %error, "rescuing expired leases failed"),
        }
        // A failed pass still shows the loop alive; the database's own
        // readiness check reports the failure.
        context.liveness.rescuer_passed();
        tokio::select! {
            _ = tokio::time::sleep(context.settings.rescue_interval) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

fn job_for(
    catalog: &Catalog,
    generation: &Generation,
    binding: &MediaBinding,
    media_signer: &MediaUrlSigner,
) -> Result<Job, String> {
    let mode: Mode = generation
        .mode
        .parse()
        .map_err(|_| format!("unknown mode {:?}", generation.mode))?;
    let endpoint = catalog.endpoint(&generation.endpoint).ok_or_else(|| {
        format!(
            "the endpoint {} is no longer in the catalog",
            generation.endpoint
        )
    })?;
    let input = ValidatedInput::from_stored_json(
        generation
            .input
            .value()
            .map_err(|error| error.to_string())?,
    );
    let (width, height) = endpoint.frame_size(&input);
    let seed = input
        .seed()
        .unwrap_or_else(|| rand::rng().random_range(0..=2_147_483_647));
    Ok(Job {
        generation_id: generation.id.clone(),
        model: generation.model.clone(),
        mode,
        media_input: binding.bind_input(&input),
        media: JobMedia::new(binding.clone(), media_signer.clone()),
        input,
        width,
        height,
        seed,
        price: generation.price,
    })
}

/// Names the claimed generation on its claim's span, so a trace shows
/// which claim took it.
fn record_claimed<E>(span: &tracing::Span, claimed: &Result<Option<Generation>, E>) {
    if let Ok(Some(generation)) = claimed {
        span.record("generation_id", generation.id.as_str());
    }
}

/// Runs a claimed job to its end and records it, in its `job.run` span.
/// While tracing is on, the span continues the trace of the job's submit,
/// made on this node or another, maybe minutes ago. `job_cancel` stops the
/// backend: it fires at shutdown, or when the claimer's heartbeat finds
/// the lease lost.
async fn run_claimed(
    context: &WorkerContext,
    worker_id: &str,
    generation: Generation,
    job_cancel: &CancellationToken,
) {
    let span = tracing::info_span!("job.run", generation_id = %generation.id, model = %generation.model, worker = %worker_id, attempt = generation.attempts, backend = tracing::field::Empty);
    if telemetry::enabled() {
        // A trace that cannot be read leaves the run a trace of its own.
        if let Ok(Some(traceparent)) = context
            .store
            .generations()
            .traceparent(&generation.id)
            .await
        {
            telemetry::continue_trace(&span, &traceparent);
        }
        telemetry::describe(
            &span,
            &[
                ("vidgate.generation.id", &generation.id),
                ("vidgate.account.id", &generation.account_id),
                ("gen_ai.request.model", &generation.model),
            ],
        );
    }
    run_claimed_job(context, worker_id, generation, job_cancel)
        .instrument(span)
        .await;
}

async fn run_claimed_job(
    context: &WorkerContext,
    worker_id: &str,
    generation: Generation,
    job_cancel: &CancellationToken,
) {
    let generation_id = generation.id.clone();
    let fail = |code: &str, message: String| FailureDetail {
        code: code.into(),
        message,
    };
    // The media submit kept for this job; a failed read leaves the job to
    // the rescuer rather than run it on the customer's URLs.
    let binding = match context.store.generations().media(&generation_id).await {
        Ok(binding) => MediaBinding::from_json(binding.as_ref()),
        Err(error) => {
            tracing::error!(generation = %generation_id, error = %error, "could not read the job's media; the rescuer will retry it");
            return;
        }
    };
    let job = match job_for(
        &context.catalog,
        &generation,
        &binding,
        &context.media_signer,
    ) {
        Ok(job) => job,
        Err(message) => {
            let refusal = fail("invalid_job", message);
            refuse_claimed(context, worker_id, &generation, &binding, refusal).await;
            return;
        }
    };
    let backend = context
        .catalog
        .model(&job.model)
        .and_then(|model| context.backends.for_model(model));
    let Some(backend) = backend else {
        let refusal = fail(
            "model_unavailable",
            format!("no backend runs {}", job.model),
        );
        refuse_claimed(context, worker_id, &generation, &binding, refusal).await;
        return;
    };
    let backend_kind = backend.kind();
    tracing::Span::current().record("backend", backend_kind);
    // From the submit to this claim; a job rescued from a dead worker
    // counts its first wait and run too.
    let waited = now_millis() - generation.created_at;
    context.metrics.record_claim(
        &generation.model,
        backend_kind,
        Duration::from_millis(u64::try_from(waited).unwrap_or(0)),
    );

    tracing::info!(generation = %generation_id, worker = %worker_id, attempt = generation.attempts, "job started");
    let started = Instant::now();
    let result = backend.run(job, job_cancel.clone()).await;
    let ran = started.elapsed();

    let outcome = match result {
        Ok(clip) => record_success(context, &generation, worker_id, clip).await,
        Err(JobFailure::Failed { code, message }) => {
            tracing::info!(generation = %generation_id, %code, %message, "job failed");
            finish_failed(
                context,
                &generation_id,
                worker_id,
                FailureDetail { code, message },
            )
            .await
        }
        Err(JobFailure::Interrupted) => hand_back(context, &generation_id, worker_id).await,
    };
    context
        .metrics
        .record_job(&generation.model, backend_kind, ran, outcome);
    if outcome.is_final() {
        binding.release(&context.storage).await;
    }
}

/// Hands an interrupted job back to the queue, if this claim still holds
/// its lease.
async fn hand_back(context: &WorkerContext, generation_id: &str, worker_id: &str) -> JobOutcome {
    match context
        .store
        .queue()
        .release_to_queue(generation_id, worker_id)
        .await
    {
        Ok(true) => {
            tracing::info!(generation = %generation_id, "job handed back to the queue");
            JobOutcome::HandedBack
        }
        Ok(false) => {
            tracing::warn!(generation = %generation_id, "job interrupted after its lease was lost");
            JobOutcome::LeaseLost
        }
        Err(error) => {
            tracing::error!(generation = %generation_id, error = %error, "could not hand the job back; the rescuer will");
            JobOutcome::NotRecorded
        }
    }
}

async fn heartbeat(
    store: Arc<Store>,
    generation_id: String,
    worker_id: String,
    lease: Duration,
    job_cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(lease / 3);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        match store
            .queue()
            .extend_lease(&generation_id, &worker_id, lease)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(generation = %generation_id, "lease lost; stopping the job");
                job_cancel.cancel();
                return;
            }
            // A transient database error is retried on the next tick; the
            // lease is long enough to survive a few misses.
            Err(error) => {
                tracing::error!(generation = %generation_id, error = %error, "lease heartbeat failed")
            }
        }
    }
}

/// Stores the clip and records the success (capturing the hold); the
/// generation is final when it succeeded, or failed because its clip could
/// not be stored.
async fn record_success(
    context: &WorkerContext,
    generation: &Generation,
    worker_id: &str,
    clip: RenderedClip,
) -> JobOutcome {
    let generation_id = generation.id.as_str();
    let stored = match clip.mp4 {
        ClipBytes::InMemory(bytes) => context.storage.put_output(generation_id, &bytes).await,
        ClipBytes::File(path) => context.storage.put_output_file(generation_id, path).await,
    };
    let stored = match stored {
        Ok(stored) => stored,
        Err(error) => {
            tracing::error!(generation = %generation_id, error = %error, "storing the clip failed");
            let failure = FailureDetail {
                code: "storage_failed".into(),
                message: "the finished clip could not be stored".into(),
            };
            return finish_failed(context, generation_id, worker_id, failure).await;
        }
    };
    let output = GenerationOutput {
        content_type: "video/mp4",
        duration_s: clip.duration_s,
        expired: None,
        expired_at: None,
        fps: clip.fps,
        has_audio: clip.has_audio,
        height: clip.height,
        seed: clip.seed,
        size_bytes: stored.size_bytes,
        video_url: format!("{}/files/{}", context.api_base, stored.relative_path),
        width: clip.width,
    };
    let output = serde_json::to_value(output).expect("a generation's output is plain JSON");
    match context
        .store
        .queue()
        .finish_succeeded(generation_id, worker_id, output, clip.provider_run.as_ref())
        .await
    {
        Ok(true) => {
            tracing::info!(generation = %generation_id, "job succeeded");
            context
                .metrics
                .record_capture(&generation.model, generation.price.0);
            JobOutcome::Succeeded
        }
        Ok(false) => {
            tracing::warn!(generation = %generation_id, "lease lost before the result was recorded; discarding it");
            if let Err(error) = context.storage.delete(&stored).await {
                tracing::error!(generation = %generation_id, error = %error, "could not delete the discarded clip");
            }
            JobOutcome::LeaseLost
        }
        Err(error) => {
            // The lease will expire and the job will run again; the clip
            // written now is orphaned but harmless.
            tracing::error!(generation = %generation_id, error = %error, "recording the result failed");
            JobOutcome::NotRecorded
        }
    }
}

/// Fails a claimed job that cannot run at all (its stored request no
/// longer makes a job, or no backend runs its model), counts the refusal,
/// and lets its media go once the failure is recorded.
async fn refuse_claimed(
    context: &WorkerContext,
    worker_id: &str,
    generation: &Generation,
    binding: &MediaBinding,
    refusal: FailureDetail,
) {
    let outcome = finish_failed(context, &generation.id, worker_id, refusal).await;
    context
        .metrics
        .record_job_refused(&generation.model, outcome);
    if outcome.is_final() {
        binding.release(&context.storage).await;
    }
}

/// Records a final failure (refunding the hold); the generation is final
/// when the outcome is `Failed`.
async fn finish_failed(
    context: &WorkerContext,
    generation_id: &str,
    worker_id: &str,
    failure: FailureDetail,
) -> JobOutcome {
    let code = failure.code.clone();
    match context
        .store
        .queue()
        .finish_failed(generation_id, worker_id, failure)
        .await
    {
        Ok(true) => {
            // The job's span (`job.run`) shows the failure in its trace.
            telemetry::mark_failed(&tracing::Span::current(), &code);
            JobOutcome::Failed
        }
        Ok(false) => JobOutcome::LeaseLost,
        Err(error) => {
            tracing::error!(generation = %generation_id, error = %error, "recording the failure failed; the rescuer will retry the job");
            JobOutcome::NotRecorded
        }
    }
}
