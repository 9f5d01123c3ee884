//! The PostgreSQL store, for several `vidgate serve` processes on one
//! database.
//!
//! The statements are those of the SQLite store (the aggregate files beside
//! this one) with the locking SQLite's single writer made unnecessary: a
//! submit locks its account row (`FOR UPDATE`), so the concurrency cap and
//! the balance are decided by one submit of an account at a time across all
//! nodes; claims and the rescuer pass over rows another node holds (`FOR
//! UPDATE SKIP LOCKED`).
//! A queued job is announced with `NOTIFY` when its transaction commits, and
//! idle workers `LISTEN`, so a job submitted on one node starts at once on
//! another instead of at the next poll. Every committed change of a
//! generation's status is announced the same way, so that a client waiting
//! on any node hears of it at once (`changes.rs`).

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, Transaction};
use tokio::sync::{Notify, OnceCell, broadcast};
use tokio::task::JoinHandle;

use super::StoreError;
use super::caller_cache::CallerCache;
use super::changes::{GenerationChanges, GenerationWatch};
use super::gathered_reads::GenerationReads;
use super::generations::GenerationRow;
use super::group_commit::SubmitQueue;
use super::point_readers::PointReaders;
use super::schema::{self, Migrations};
use super::submit::PgSubmitter;

/// The channel on which queued jobs are announced; the payload is the id.
pub(super) const WORK_CHANNEL: &str = "vidgate_work";

/// The channel on which a node that took a verified provider webhook for a
/// job it does not follow tells the others; the payload is the generation.
const PROVIDER_WEBHOOK_CHANNEL: &str = "vidgate_provider_webhooks";

/// The channel on which a committed change of a generation's status is
/// announced to every node (the announcing one too); the payload is the id.
const GENERATION_CHANNEL: &str = "vidgate_generation_changes";

/// Announcements of provider webhooks kept for a slow subscriber; one that
/// falls further behind misses some, and its polling covers them.
const PROVIDER_WEBHOOK_BACKLOG: usize = 256;

/// Connections per process: workers and request handlers each hold one only
/// for the length of a statement or a short transaction.
const MAX_CONNECTIONS: u32 = 10;

/// How long a pooled connection may sit idle before it is pinged again when
/// it is handed out.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

pub struct PgStore {
    pool: PgPool,
    /// The hot point reads' own connections (`point_readers.rs`), boxed:
    /// their connect options are large, and the store is an enum's variant.
    point_readers: Box<PointReaders>,
    /// The reads of one generation waiting for a point reader.
    generation_reads: GenerationReads,
    /// Fired for every announcement heard on `WORK_CHANNEL`.
    work_announced: Arc<Notify>,
    /// Every generation announced on `PROVIDER_WEBHOOK_CHANNEL`.
    provider_webhooks: broadcast::Sender<String>,
    /// The watchers of this process, woken by what `GENERATION_CHANNEL`
    /// carries.
    generation_changes: Arc<GenerationChanges>,
    /// The task that listens, started by the first worker that waits, the
    /// first subscriber to provider webhooks or the first watcher of a
    /// generation (an admin command never holds the extra connection).
    listener: OnceCell<JoinHandle<()>>,
    callers: CallerCache,
    submits: SubmitQueue<PgSubmitter>,
}

impl PgStore {
    pub async fn open(database_url: &str, migrations: Migrations) -> Result<PgStore, StoreError> {
        let options = schema::postgres_options(database_url)?;
        // One plain connection first: the pool would retry a refused
        // connection until its time-out and report only that.
        let mut first = schema::connect_postgres(&options).await?;
        match migrations {
            // sqlx takes an advisory lock while migrating, and the functions
            // are applied under one of their own, so several nodes starting
            // at once apply each migration and each changed function once.
            Migrations::Apply => {
                schema::postgres_migrator().run(&mut first).await?;
                schema::apply_postgres_functions(&mut first).await?;
            }
            Migrations::Require => {
                schema::require_none_pending(schema::postgres_pending(&mut first).await?)?
            }
        }
        first.close().await.ok();
        let point_readers = Box::new(PointReaders::new(options.clone()));
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(super::CONNECTION_WAIT)
            // sqlx pings every idle connection it hands out: one more round
            // trip before every statement, which under load doubled the
            // database round trips of a point read (issue 55, BENCHMARKS.md
            // session 23). A connection busy a moment ago is known to be
            // alive (sqlx pings each one as it comes back, too); only one
            // that sat idle, which a database restart or a dropped link may
            // have killed, is pinged before it is used.
            .test_before_acquire(false)
            .before_acquire(|connection, metadata| {
                Box::pin(async move {
                    if metadata.idle_for >= PING_WHEN_IDLE_FOR {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_with(options)
            .await?;
        Ok(PgStore {
            submits: SubmitQueue::new(PgSubmitter { pool: pool.clone() }),
            pool,
            point_readers,
            generation_reads: GenerationReads::default(),
            work_announced: Arc::new(Notify::new()),
            provider_webhooks: broadcast::channel(PROVIDER_WEBHOOK_BACKLOG).0,
            // Heard once the listener is connected.
            generation_changes: Arc::new(GenerationChanges::new(false)),
            listener: OnceCell::new(),
            callers: CallerCache::default(),
        })
    }

    pub(super) async fn begin_write(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    pub(super) fn reader(&self) -> &PgPool {
        &self.pool
    }

    /// Reads at most one row by key on the point readers' connections.
    pub(super) async fn point_read<R>(
        &self,
        statement: &'static str,
        parameters: &[&str],
    ) -> Result<Option<R>, StoreError>
    where
        R: for<'row> sqlx::FromRow<'row, sqlx::postgres::PgRow> + Send + Unpin,
    {
        self.point_readers.read(statement, parameters).await
    }

    /// Generation `id` of `account_id`, read in one statement with the
    /// others waiting (`gathered_reads.rs`).
    pub(super) async fn read_generation(
        &self,
        id: &str,
        account_id: &str,
    ) -> Result<Option<GenerationRow>, StoreError> {
        self.generation_reads
            .read(&self.point_readers, id, account_id)
            .await
    }

    /// Reads every row of the statement `query` has built on the point
    /// readers' connections: an account's list.
    pub(super) async fn read_all<R>(
        &self,
        query: sqlx::QueryBuilder<Postgres>,
    ) -> Result<Vec<R>, StoreError>
    where
        R: for<'row> sqlx::FromRow<'row, sqlx::postgres::PgRow> + Send + Unpin,
    {
        self.point_readers.read_all(query).await
    }

    pub(super) fn writer(&self) -> &PgPool {
        &self.pool
    }

    pub(super) fn callers(&self) -> &CallerCache {
        &self.callers
    }

    pub(super) fn submits(&self) -> &SubmitQueue<PgSubmitter> {
        &self.submits
    }

    /// PostgreSQL delivers the notification only if the transaction commits.
    pub(super) async fn announce_work(
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

    pub(super) async fn wait_for_announced_work(&self, timeout: Duration) {
        // The caller polls again after the timeout, so work is still found,
        // only later; the next wait tries to listen again.
        self.listen().await;
        // A timeout is the ordinary outcome of an idle wait, not an error.
        let _ = tokio::time::timeout(timeout, self.work_announced.notified()).await;
    }

    /// Sent at once, outside any transaction: the webhook it stands for has
    /// already been recorded.
    pub(super) async fn announce_to_other_nodes(
        &self,
        generation_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(PROVIDER_WEBHOOK_CHANNEL)
            .bind(generation_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(super) async fn hear_other_nodes(&self) -> Option<broadcast::Receiver<String>> {
        // Subscribed before listening starts, so that nothing heard after
        // this call is missed. Without a listener the subscriber hears
        // nothing, and the jobs it follows end by polling.
        let announcements = self.provider_webhooks.subscribe();
        self.listen().await;
        Some(announcements)
    }

    /// Sent after the change committed, outside its transaction, so that
    /// the claim (one statement) and the transactions announce alike. A
    /// failure is logged and not returned: the change itself is committed,
    /// and watchers read again within a second anyway.
    pub(super) async fn announce_generation_change(&self, generation_id: &str) {
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(GENERATION_CHANNEL)
            .bind(generation_id)
            .execute(&self.pool)
            .await;
        if let Err(error) = sent {
            tracing::warn!(generation = %generation_id, error = %error, "could not announce a generation's change");
        }
    }

    pub(super) async fn watch_generation_changes(&self, generation_id: &str) -> GenerationWatch {
        // Watching before listening starts, so that nothing heard after
        // this call is missed; without a listener the watcher's own
        // re-reads find the change.
        let watch = self.generation_changes.watch(generation_id);
        self.listen().await;
        watch
    }

    pub(super) fn generation_announcements_heard(&self) -> tokio::sync::watch::Receiver<bool> {
        self.generation_changes.heard()
    }

    /// Starts the listening task unless it runs; a failure is logged and
    /// tried again by the next caller.
    async fn listen(&self) {
        if let Err(error) = self
            .listener
            .get_or_try_init(|| self.start_listening())
            .await
        {
            tracing::warn!(error = %error, "could not listen for announcements; polling only");
        }
    }

    async fn start_listening(&self) -> Result<JoinHandle<()>, sqlx::Error> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener
            .listen_all([WORK_CHANNEL, PROVIDER_WEBHOOK_CHANNEL, GENERATION_CHANNEL])
            .await?;
        let work_announced = self.work_announced.clone();
        let provider_webhooks = self.provider_webhooks.clone();
        let generation_changes = self.generation_changes.clone();
        generation_changes.set_heard(true);
        Ok(tokio::spawn(async move {
            loop {
                // `try_recv`, not `recv`: both reconnect a lost listener,
                // but only this one says that it did (`Ok(None)`), and
                // what was announced while it was away was not heard.
                match listener.try_recv().await {
                    Ok(None) => {
                        // Listening again: every watcher reads its
                        // generation once for what the gap may have hidden,
                        // then trusts the announcements again.
                        tracing::info!("listening for announcements again after a lost connection");
                        generation_changes.set_heard(true);
                        generation_changes.announce_all();
                    }
                    Ok(Some(notification))
                        if notification.channel() == PROVIDER_WEBHOOK_CHANNEL =>
                    {
                        // No subscriber is not an error: a node without
                        // workers follows no jobs.
                        let _ = provider_webhooks.send(notification.payload().to_owned());
                    }
                    Ok(Some(notification)) if notification.channel() == GENERATION_CHANNEL => {
                        generation_changes.announce(notification.payload());
                    }
                    // One announcement is one job, so it wakes one worker;
                    // with none waiting, the next worker to wait returns at once.
                    Ok(Some(_)) => work_announced.notify_one(),
                    Err(error) => {
                        // The listener reconnects on the next receive;
                        // announcements missed meanwhile are found by polling.
                        tracing::warn!(error = %error, "listening for announcements failed");
                        // Changes may be missed until it is back: every
                        // watcher reads its generation again now, and its
                        // reader on a timer until then.
                        generation_changes.set_heard(false);
                        generation_changes.announce_all();
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
