//! The retention sweep: finished clips and uploads are kept for
//! `--retain-days`, then deleted from storage while their records stay (a
//! generation's output says its clip expired, and the file's URL answers
//! 410 Gone).
//!
//! Every node runs the sweep. Each pass first retires the records that are
//! past the retention time (a short transaction per batch, whose rows other
//! nodes skip), which lists their files as expired, then claims expired
//! files with a lease and deletes their objects, so a node that dies between
//! the two leaves work another node finishes and no object is deleted twice
//! at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::storage::Storage;
use crate::store::{Store, StoreError, now_millis};

/// How long files are kept and how often the sweep looks.
#[derive(Debug, Clone, Copy)]
pub struct RetentionSettings {
    /// How long a finished clip (from its completion) or an upload (from
    /// its upload) is kept before it is deleted (`--retain-days`).
    pub keep_for: Duration,
    /// Time between two passes of a node's sweep.
    pub sweep_interval: Duration,
}

/// The default `--retain-days`.
pub const DEFAULT_RETAIN_DAYS: u64 = 30;

impl Default for RetentionSettings {
    fn default() -> RetentionSettings {
        RetentionSettings {
            keep_for: Duration::from_secs(DEFAULT_RETAIN_DAYS * 24 * 60 * 60),
            sweep_interval: Duration::from_secs(60),
        }
    }
}

/// Records retired or objects deleted in one statement or claim: small, so
/// each transaction is short and the rows it locks few.
const BATCH: u32 = 100;

/// How long a sweeper may take to delete the objects it claimed before
/// another node may claim them again.
const DELETION_LEASE: Duration = Duration::from_secs(60);

/// How long an incoming file (an upload or a model's output being copied
/// in) must have gone unwritten before the sweep takes it for the leftover
/// of a process that died mid-write: far longer than any upload or
/// download may take, so a file that another process sharing the data
/// directory is still writing is never removed.
pub const ABANDONED_INCOMING_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub generations_expired: usize,
    pub uploads_expired: usize,
    pub files_deleted: usize,
    /// Incoming files left by a process that died mid-write.
    pub abandoned_incoming_files_removed: usize,
}

/// One pass of the sweep as if the time were `now` (Unix milliseconds):
/// everything older than `keep_for` is retired, then every expired file
/// not claimed by another node is deleted. A file whose deletion fails
/// stays listed and is tried again once its claim lapses.
pub async fn sweep(
    store: &Store,
    storage: &Storage,
    keep_for: Duration,
    now: i64,
) -> Result<SweepReport, StoreError> {
    let cutoff = now.saturating_sub(i64::try_from(keep_for.as_millis()).unwrap_or(i64::MAX));
    let mut report = SweepReport::default();
    loop {
        let expired = store
            .retention()
            .expire_generation_outputs(cutoff, now, BATCH)
            .await?;
        report.generations_expired += expired;
        if expired < BATCH as usize {
            break;
        }
    }
    loop {
        let expired = store.retention().expire_uploads(cutoff, now, BATCH).await?;
        report.uploads_expired += expired;
        if expired < BATCH as usize {
            break;
        }
    }
    let claimed_until = now.saturating_add(DELETION_LEASE.as_millis() as i64);
    loop {
        let claimed = store
            .retention()
            .claim_expired_files(now, claimed_until, BATCH)
            .await?;
        for file in &claimed {
            match storage.delete_if_present(&file.relative_path).await {
                Ok(()) => {
                    store
                        .retention()
                        .record_file_deleted(&file.relative_path, now)
                        .await?;
                    report.files_deleted += 1;
                }
                Err(error) => tracing::warn!(
                    path = %file.relative_path,
                    error = %error,
                    "could not delete an expired file; it will be tried again"
                ),
            }
        }
        if claimed.len() < BATCH as usize {
            break;
        }
    }
    // Local scratch files, not records: their age is the file system's.
    match storage
        .remove_abandoned_incoming_files(ABANDONED_INCOMING_AFTER)
        .await
    {
        Ok(removed) => report.abandoned_incoming_files_removed = removed,
        Err(error) => tracing::warn!(
            error = %error,
            "could not remove abandoned incoming files; the next pass tries again"
        ),
    }
    Ok(report)
}

/// Runs the sweep every `sweep_interval` until `shutdown`.
pub fn spawn(
    store: Arc<Store>,
    storage: Arc<Storage>,
    settings: RetentionSettings,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match sweep(store.as_ref(), &storage, settings.keep_for, now_millis()).await {
                Ok(report) if report != SweepReport::default() => {
                    tracing::info!(?report, "retention sweep")
                }
                Ok(_) => {}
                Err(error) => tracing::error!(
                    error = %crate::diagnostics::cause_chain(&error),
                    "the retention sweep failed"
                ),
            }
            tokio::select! {
                _ = tokio::time::sleep(settings.sweep_interval) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    })
}
