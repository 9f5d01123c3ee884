//! Workers and the lease rescuer. The generations table is the queue: a
//! worker claims the oldest queued job in one short statement, runs the
//! model's backend outside any transaction while a heartbeat extends its
//! lease, and finishes with an update guarded by state and lease owner. A
//! rescuer puts jobs whose lease expired (their worker died) back in the
//! queue, or fails and refunds them after their last attempt.
//!
//! Several nodes may run workers and rescuers on one PostgreSQL database:
//! claims skip rows other nodes hold, every finish is guarded by the lease
//! owner, and the rescuer's guarded updates make a second rescuer a no-op.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngExt;
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vidgate_core::{Catalog, Mode, ValidatedInput};

use crate::backend::{Backends, ClipBytes, Job, JobFailure, RenderedClip};
use crate::bound_media::{JobMedia, MediaBinding, MediaUrlSigner, release_generation_media};
use crate::health::QueueLiveness;
use crate::metrics::{JobOutcome, Metrics};
use crate::storage::Storage;
use crate::store::{FailureDetail, Generation, Store, now_millis};

#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub workers: usize,
    /// How long a claimed job stays with its worker without a heartbeat.
    pub lease: Duration,
    /// How often an idle worker looks for work it was not told about (a
    /// missed announcement, or another process on SQLite).
    pub idle_poll: Duration,
    pub rescue_interval: Duration,
}

pub struct WorkerContext {
    pub store: Arc<dyn Store>,
    pub catalog: Arc<Catalog>,
    pub backends: Backends,
    pub storage: Arc<Storage>,
    pub api_base: String,
    /// Signs the URLs of a job's kept media for the model servers that
    /// fetch them.
    pub media_signer: MediaUrlSigner,
    pub wakeup: Arc<Notify>,
    pub settings: QueueSettings,
    /// Identifies this process in lease_owner columns.
    pub node_id: String,
    /// Where the workers and the rescuer show readiness they are alive.
    pub liveness: Arc<QueueLiveness>,
    pub metrics: Arc<Metrics>,
}

/// Starts the workers and the rescuer; they stop when `shutdown` fires,
/// handing their unfinished jobs back to the queue.
pub fn spawn(context: Arc<WorkerContext>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
    let mut tasks: Vec<JoinHandle<()>> = (0..context.settings.workers)
        .map(|index| {
            let worker_id = format!("{}/w{index}", context.node_id);
            tokio::spawn(worker_loop(context.clone(), worker_id, shutdown.clone()))
        })
        .collect();
    tasks.push(tokio::spawn(rescue_loop(context, shutdown)));
    tasks
}

async fn worker_loop(context: Arc<WorkerContext>, worker_id: String, shutdown: CancellationToken) {
    let _running = context.liveness.worker_running();
    while !shutdown.is_cancelled() {
        match context
            .store
            .claim_next(&worker_id, context.settings.lease)
            .await
        {
            Ok(Some(generation)) => run_claimed(&context, &worker_id, generation, &shutdown).await,
            Ok(None) => {
                // A submit on this node wakes a worker at once; one on
                // another node arrives through the store (PostgreSQL's
                // NOTIFY), and the store's wait ends after `idle_poll` so
                // that anything missed is still found by polling.
                tokio::select! {
                    _ = context.wakeup.notified() => {}
                    _ = context.store.wait_for_work(context.settings.idle_poll) => {}
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

async fn rescue_loop(context: Arc<WorkerContext>, shutdown: CancellationToken) {
    loop {
        match context.store.rescue_expired_leases().await {
            Ok(report) => {
                context
                    .metrics
                    .record_rescue(report.requeued.len(), report.failed.len());
                if !report.requeued.is_empty() || !report.failed.is_empty() {
                    tracing::warn!(requeued = ?report.requeued, failed = ?report.failed, "rescued jobs with expired leases");
                    context.wakeup.notify_waiters();
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
    let input = ValidatedInput::from_stored_json(generation.input.clone());
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
    })
}

async fn run_claimed(
    context: &WorkerContext,
    worker_id: &str,
    generation: Generation,
    shutdown: &CancellationToken,
) {
    let generation_id = generation.id.clone();
    let fail = |code: &str, message: String| FailureDetail {
        code: code.into(),
        message,
    };
    // The media submit kept for this job; a failed read leaves the job to
    // the rescuer rather than run it on the customer's URLs.
    let binding = match context.store.generation_media(&generation_id).await {
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
            let outcome = finish_failed(
                context,
                &generation_id,
                worker_id,
                fail("invalid_job", message),
            )
            .await;
            context
                .metrics
                .record_job_refused(&generation.model, outcome);
            if outcome.is_final() {
                binding.release(&context.storage).await;
            }
            return;
        }
    };
    let backend = context
        .catalog
        .model(&job.model)
        .and_then(|model| context.backends.for_model(model));
    let Some(backend) = backend else {
        let message = format!("no backend runs {}", job.model);
        let outcome = finish_failed(
            context,
            &generation_id,
            worker_id,
            fail("model_unavailable", message),
        )
        .await;
        context
            .metrics
            .record_job_refused(&generation.model, outcome);
        if outcome.is_final() {
            binding.release(&context.storage).await;
        }
        return;
    };
    let backend_kind = backend.kind();
    // From the submit to this claim; a job rescued from a dead worker
    // counts its first wait and run too.
    let waited = now_millis() - generation.created_at;
    context.metrics.record_claim(
        &generation.model,
        backend_kind,
        Duration::from_millis(u64::try_from(waited).unwrap_or(0)),
    );

    // The job stops when the process shuts down or when its lease is lost
    // (another node rescued it), so a job never runs twice at once for long.
    let job_cancel = shutdown.child_token();
    let heartbeat = tokio::spawn(heartbeat(
        context.store.clone(),
        generation_id.clone(),
        worker_id.to_owned(),
        context.settings.lease,
        job_cancel.clone(),
    ));
    let seed = job.seed;
    tracing::info!(generation = %generation_id, worker = %worker_id, attempt = generation.attempts, "job started");
    let started = Instant::now();
    let result = backend.run(job, job_cancel.clone()).await;
    let ran = started.elapsed();
    heartbeat.abort();

    let outcome = match result {
        Ok(clip) => record_success(context, &generation, worker_id, clip, seed).await,
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
        Err(JobFailure::Interrupted) => {
            match context
                .store
                .release_to_queue(&generation_id, worker_id)
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
    };
    context
        .metrics
        .record_job(&generation.model, backend_kind, ran, outcome);
    if outcome.is_final() {
        binding.release(&context.storage).await;
    }
}

async fn heartbeat(
    store: Arc<dyn Store>,
    generation_id: String,
    worker_id: String,
    lease: Duration,
    job_cancel: CancellationToken,
) {
    let mut ticker = tokio::time::interval(lease / 3);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        match store.extend_lease(&generation_id, &worker_id, lease).await {
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
    seed: u64,
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
    let output = json!({
        "video_url": format!("{}/files/{}", context.api_base, stored.relative_path),
        "content_type": "video/mp4",
        "duration_s": clip.duration_s,
        "width": clip.width,
        "height": clip.height,
        "fps": clip.fps,
        "has_audio": clip.has_audio,
        "size_bytes": stored.size_bytes,
        "seed": seed,
    });
    match context
        .store
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

/// Records a final failure (refunding the hold); the generation is final
/// when the outcome is `Failed`.
async fn finish_failed(
    context: &WorkerContext,
    generation_id: &str,
    worker_id: &str,
    failure: FailureDetail,
) -> JobOutcome {
    match context
        .store
        .finish_failed(generation_id, worker_id, failure)
        .await
    {
        Ok(true) => JobOutcome::Failed,
        Ok(false) => JobOutcome::LeaseLost,
        Err(error) => {
            tracing::error!(generation = %generation_id, error = %error, "recording the failure failed; the rescuer will retry the job");
            JobOutcome::NotRecorded
        }
    }
}
