//! Whether this node should be sent traffic: liveness (the process answers)
//! is the HTTP layer's alone; readiness is decided here from the database
//! (reachable and carrying every migration this binary knows), the storage
//! (writable), the queue on a node that runs jobs (every worker's loop still
//! running and the rescuer passing regularly), and shutdown (a draining node
//! is not ready, so load balancers stop sending it requests first).
//!
//! Load balancers probe often and without credentials, so a result is reused
//! for `RESULT_REUSE` and only one check runs at a time: a flood of probes
//! costs one query and one storage write per interval, not one per probe.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::storage::Storage;
use crate::store::{CONNECTION_WAIT, Store, now_millis};

/// How long one readiness result answers probes.
const RESULT_REUSE: Duration = Duration::from_secs(1);

/// How long readiness waits for the database before calling it
/// unreachable: a load balancer must hear 503 while its probe is still
/// waiting, not after the pool's own wait.
const DATABASE_PROBE_WAIT: Duration = Duration::from_millis(800);

/// How often, during an outage, the database is tried again to notice
/// that it returned.
const OUTAGE_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The outcome of one part of the readiness check. The reasons are fixed
/// words for operators, never an error's text: the causes go to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckOutcome {
    Ok,
    Unreachable,
    NotMigrated,
    NotWritable,
    Stalled,
    Draining,
}

impl CheckOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::Ok => "ok",
            CheckOutcome::Unreachable => "unreachable",
            CheckOutcome::NotMigrated => "not_migrated",
            CheckOutcome::NotWritable => "not_writable",
            CheckOutcome::Stalled => "stalled",
            CheckOutcome::Draining => "draining",
        }
    }
}

/// Every part of one readiness check; ready when all are `Ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    pub database: CheckOutcome,
    pub storage: CheckOutcome,
    /// `None` on a node that runs no jobs.
    pub queue: Option<CheckOutcome>,
    pub shutdown: CheckOutcome,
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        [self.database, self.storage, self.shutdown]
            .into_iter()
            .chain(self.queue)
            .all(|outcome| outcome == CheckOutcome::Ok)
    }
}

/// What the queue's tasks report about themselves, so readiness can tell a
/// node whose workers died or whose rescuer hangs from a healthy one.
pub struct QueueLiveness {
    expected_workers: usize,
    running_workers: AtomicUsize,
    /// When the rescuer last finished a pass (Unix ms); the start counts as
    /// one, so a node is not declared stalled before its first pass.
    rescuer_last_pass: AtomicI64,
    /// A rescuer that has not passed for this long is stalled.
    rescuer_stall_after: Duration,
}

impl QueueLiveness {
    pub fn new(expected_workers: usize, rescue_interval: Duration) -> QueueLiveness {
        QueueLiveness {
            expected_workers,
            running_workers: AtomicUsize::new(0),
            rescuer_last_pass: AtomicI64::new(now_millis()),
            // Room for a few slow passes (a busy database) before a
            // stall is declared.
            rescuer_stall_after: (rescue_interval * 6).max(Duration::from_secs(30)),
        }
    }

    /// Counts a worker loop as running until the guard is dropped, which
    /// happens when the loop ends for any reason, a panic included.
    pub fn worker_running(self: &Arc<Self>) -> WorkerRunning {
        self.running_workers.fetch_add(1, Ordering::SeqCst);
        WorkerRunning(self.clone())
    }

    pub fn rescuer_passed(&self) {
        self.rescuer_last_pass.store(now_millis(), Ordering::SeqCst);
    }

    pub fn outcome(&self) -> CheckOutcome {
        let last_pass = self.rescuer_last_pass.load(Ordering::SeqCst);
        let stall_after = self.rescuer_stall_after.as_millis() as i64;
        let rescuer_alive = now_millis() - last_pass <= stall_after;
        let workers_alive = self.running_workers.load(Ordering::SeqCst) >= self.expected_workers;
        if rescuer_alive && workers_alive {
            CheckOutcome::Ok
        } else {
            CheckOutcome::Stalled
        }
    }
}

/// Held by a running worker loop; see `QueueLiveness::worker_running`.
pub struct WorkerRunning(Arc<QueueLiveness>);

impl Drop for WorkerRunning {
    fn drop(&mut self) {
        self.0.running_workers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// This node's readiness, shared by the HTTP layer and start-up.
pub struct Health {
    store: Arc<Store>,
    storage: Arc<Storage>,
    queue: Option<Arc<QueueLiveness>>,
    draining: AtomicBool,
    /// The last result and when it was taken; the lock also makes
    /// concurrent probes wait for one check instead of each running one.
    last: Mutex<Option<(Instant, Readiness)>>,
    /// When the current database outage began, if one is going on.
    outage: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Health {
    pub fn new(
        store: Arc<Store>,
        storage: Arc<Storage>,
        queue: Option<Arc<QueueLiveness>>,
    ) -> Health {
        Health {
            store,
            storage,
            queue,
            draining: AtomicBool::new(false),
            last: Mutex::new(None),
            outage: Arc::new(std::sync::Mutex::new(None)),
        }
    }

    /// Called for every request refused because the database could not be
    /// reached, and by a readiness check that could not reach it. The first
    /// call of an outage logs one error and starts a task that tries a write
    /// every `OUTAGE_RECHECK_INTERVAL` and logs when one can start again;
    /// the calls that follow cost a lock and nothing else, so an outage is
    /// two log lines, not one per request.
    pub fn database_unreachable(&self) {
        let mut outage = self.outage.lock().unwrap_or_else(PoisonError::into_inner);
        if outage.is_some() {
            return;
        }
        *outage = Some(Instant::now());
        tracing::error!(
            "the database is unreachable: requests that need it answer 503 until it returns"
        );
        let store = self.store.clone();
        let outage = self.outage.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(OUTAGE_RECHECK_INTERVAL).await;
                // Bounded by the store's own waits; the timeout is for a
                // connection that hangs without failing.
                let answered =
                    tokio::time::timeout(CONNECTION_WAIT * 2, store.operations().check_writable())
                        .await
                        .is_ok_and(|writable| writable.is_ok());
                if answered {
                    let began = outage.lock().unwrap_or_else(PoisonError::into_inner).take();
                    let lasted = began.map_or(0.0, |began| began.elapsed().as_secs_f64());
                    tracing::info!(
                        outage_seconds = format!("{lasted:.1}"),
                        "the database is reachable again"
                    );
                    return;
                }
            }
        });
    }

    /// From now on the node reports not ready; shutdown calls it first.
    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub async fn readiness(&self) -> Readiness {
        // Draining is answered at once, without waiting for a check.
        if self.draining.load(Ordering::SeqCst) {
            return Readiness {
                shutdown: CheckOutcome::Draining,
                ..self.check_or_reuse().await
            };
        }
        self.check_or_reuse().await
    }

    async fn check_or_reuse(&self) -> Readiness {
        let mut last = self.last.lock().await;
        if let Some((taken, readiness)) = *last
            && taken.elapsed() < RESULT_REUSE
        {
            return readiness;
        }
        let readiness = self.check().await;
        *last = Some((Instant::now(), readiness));
        readiness
    }

    async fn check(&self) -> Readiness {
        let schema =
            tokio::time::timeout(DATABASE_PROBE_WAIT, self.store.operations().schema_state()).await;
        let database = match schema {
            Ok(Ok(schema)) if schema.is_migrated() => CheckOutcome::Ok,
            Ok(Ok(schema)) => {
                tracing::warn!(?schema, "not ready: the database lacks migrations");
                CheckOutcome::NotMigrated
            }
            Ok(Err(error)) if !error.is_unavailable() => {
                tracing::warn!(
                    error = %crate::diagnostics::cause_chain(&error),
                    "not ready: the database failed the check"
                );
                CheckOutcome::Unreachable
            }
            // The outage is logged once, by `database_unreachable`.
            Ok(Err(_)) | Err(_) => {
                self.database_unreachable();
                CheckOutcome::Unreachable
            }
        };
        let storage = match self.storage.check_writable().await {
            Ok(()) => CheckOutcome::Ok,
            Err(error) => {
                tracing::warn!(error = %error, "not ready: the storage is not writable");
                CheckOutcome::NotWritable
            }
        };
        let queue = self.queue.as_ref().map(|queue| {
            let outcome = queue.outcome();
            if outcome != CheckOutcome::Ok {
                tracing::warn!("not ready: the queue's workers or rescuer stopped");
            }
            outcome
        });
        let shutdown = if self.draining.load(Ordering::SeqCst) {
            CheckOutcome::Draining
        } else {
            CheckOutcome::Ok
        };
        Readiness {
            database,
            storage,
            queue,
            shutdown,
        }
    }
}
