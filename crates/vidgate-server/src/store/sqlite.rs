//! The embedded SQLite store.
//!
//! SQLite allows one writer at a time, so writes go through a pool of one
//! connection (in-process writers queue fairly instead of spinning on
//! `SQLITE_BUSY`) and every write transaction starts with `BEGIN IMMEDIATE`
//! (another process, such as `vidgate admin`, waits on the busy timeout
//! instead of failing half-way). Reads use a separate pool and never block on
//! the writer thanks to WAL. Because writes are serialised, the row-locking
//! clauses PostgreSQL needs are empty here.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use vidgate_core::{GenerationStatus, Micros};

use super::sql::*;
use super::*;

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    pub async fn open(database_url: &str) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::from_str(database_url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await?;
        Ok(SqliteStore { writer, reader })
    }

    async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// SQLite has no way to signal another process. Workers in this process
    /// are woken by the HTTP layer's in-process signal after a submit, and
    /// jobs queued by another process are found by polling.
    async fn announce_work(
        _transaction: &mut Transaction<'static, Sqlite>,
        _generation_id: &str,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn wait_for_announced_work(&self, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }
}

impl_sql_store! {
    store: SqliteStore,
    database: Sqlite,
    lock_account: "",
    skip_locked: "",
}
