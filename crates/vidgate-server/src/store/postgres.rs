//! The PostgreSQL store, for several `vidgate serve` processes on one
//! database.
//!
//! The statements are those of the SQLite store (see `sql.rs`) with the
//! locking SQLite's single writer made unnecessary: a submit locks its
//! account row (`FOR UPDATE`), so the concurrency cap and the balance are
//! decided by one submit of an account at a time across all nodes; claims and
//! the rescuer pass over rows another node holds (`FOR UPDATE SKIP LOCKED`).
//! A queued job is announced with `NOTIFY` when its transaction commits, and
//! idle workers `LISTEN`, so a job submitted on one node starts at once on
//! another instead of at the next poll.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use tokio::sync::{Notify, OnceCell};
use tokio::task::JoinHandle;
use vidgate_core::{GenerationStatus, Micros};

use super::sql::*;
use super::*;

/// The channel on which queued jobs are announced; the payload is the id.
const WORK_CHANNEL: &str = "vidgate_work";

/// Connections per process: workers and request handlers each hold one only
/// for the length of a statement or a short transaction.
const MAX_CONNECTIONS: u32 = 10;

pub struct PgStore {
    pool: PgPool,
    /// Fired for every announcement heard on `WORK_CHANNEL`.
    work_announced: Arc<Notify>,
    /// The task that listens, started by the first worker that waits (an
    /// API-only node or an admin command never holds the extra connection).
    listener: OnceCell<JoinHandle<()>>,
}

impl PgStore {
    pub async fn open(database_url: &str) -> Result<PgStore, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .connect(database_url)
            .await?;
        // sqlx takes an advisory lock while migrating, so several nodes
        // starting at once apply each migration exactly once.
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        Ok(PgStore {
            pool,
            work_announced: Arc::new(Notify::new()),
            listener: OnceCell::new(),
        })
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    fn reader(&self) -> &PgPool {
        &self.pool
    }

    fn writer(&self) -> &PgPool {
        &self.pool
    }

    /// PostgreSQL delivers the notification only if the transaction commits.
    async fn announce_work(
        transaction: &mut Transaction<'static, Postgres>,
        generation_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(WORK_CHANNEL)
            .bind(generation_id)
            .execute(&mut **transaction)
            .await?;
        Ok(())
    }

    async fn wait_for_announced_work(&self, timeout: Duration) {
        if let Err(error) = self
            .listener
            .get_or_try_init(|| self.start_listening())
            .await
        {
            // The caller polls again after the timeout, so work is still
            // found, only later; the next wait tries to listen again.
            tracing::warn!(error = %error, "could not listen for queued jobs; polling only");
        }
        // A timeout is the ordinary outcome of an idle wait, not an error.
        let _ = tokio::time::timeout(timeout, self.work_announced.notified()).await;
    }

    async fn start_listening(&self) -> Result<JoinHandle<()>, sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(WORK_CHANNEL).await?;
        let work_announced = self.work_announced.clone();
        Ok(tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    // One announcement is one job, so it wakes one worker;
                    // with none waiting, the next worker to wait returns at once.
                    Ok(_) => work_announced.notify_one(),
                    Err(error) => {
                        // The listener reconnects on the next receive;
                        // announcements missed meanwhile are found by polling.
                        tracing::warn!(error = %error, "listening for queued jobs failed");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }))
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Some(listener) = self.listener.get() {
            listener.abort();
        }
    }
}

impl_sql_store! {
    store: PgStore,
    database: Postgres,
    lock_account: "FOR UPDATE",
    skip_locked: "FOR UPDATE SKIP LOCKED",
}
