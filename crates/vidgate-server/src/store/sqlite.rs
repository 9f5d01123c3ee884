//! The embedded SQLite store.
//!
//! SQLite allows one writer at a time, so writes go through a pool of one
//! connection (in-process writers queue fairly instead of spinning on
//! `SQLITE_BUSY`) and every write transaction starts with `BEGIN IMMEDIATE`
//! (another process, such as `vidgate admin`, waits on the busy timeout
//! instead of failing half-way). Reads use a separate pool and never block on
//! the writer thanks to WAL. Because writes are serialised, the row-locking
//! clauses PostgreSQL needs are empty here.
//!
//! The hottest reads, a generation by id, the caller of an API key and a
//! page of an account's generations, run inline on synchronous connections
//! instead (`inline_reads.rs`): for them the hand-offs to sqlx's connection
//! thread cost more than the read.
//!
//! Commits are durable against an operating-system crash or a power cut by
//! default (`synchronous=FULL`: the WAL is synced at every commit), because a
//! client that got 202 holds a hold on its account; `SqliteDurability` lets
//! an operator trade that for faster commits.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Sqlite, SqlitePool, Transaction};

use super::StoreError;
use super::caller_cache::CallerCache;
use super::changes::{GenerationChanges, GenerationWatch};
use super::database::point_read_on_pool;
use super::group_commit::SubmitQueue;
use super::inline_reads::{self, InlineReader, InlineRow};
use super::schema::{self, Migrations};
use super::submit::SqliteSubmitter;

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    inline_reader: InlineReader,
    callers: CallerCache,
    submits: SubmitQueue<SqliteSubmitter>,
    /// The watchers of generations; one node serves a SQLite database, so
    /// every change is committed in this process and announced here.
    generation_changes: Arc<GenerationChanges>,
}

/// How SQLite syncs its write-ahead log to disk at each commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqliteDurability {
    /// `synchronous=FULL`: every commit is synced before it returns, so an
    /// accepted submit, its hold and every capture survive a power cut.
    #[default]
    Full,
    /// `synchronous=NORMAL`: commits are synced at WAL checkpoints only, so
    /// an operating-system crash or a power cut can lose the last commits
    /// (submits already answered 202 with their holds, captures) while the
    /// database itself stays consistent. A process crash loses nothing.
    Normal,
}

impl std::str::FromStr for SqliteDurability {
    type Err = String;

    fn from_str(text: &str) -> Result<SqliteDurability, String> {
        match text {
            "full" => Ok(SqliteDurability::Full),
            "normal" => Ok(SqliteDurability::Normal),
            other => Err(format!(
                "unknown SQLite synchronous mode {other:?}: use full or normal"
            )),
        }
    }
}

impl SqliteStore {
    pub async fn open(
        database_url: &str,
        migrations: Migrations,
        durability: SqliteDurability,
    ) -> Result<SqliteStore, StoreError> {
        let synchronous = match durability {
            SqliteDurability::Full => SqliteSynchronous::Full,
            SqliteDurability::Normal => SqliteSynchronous::Normal,
        };
        let options = SqliteConnectOptions::from_str(database_url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            // Another process (an admin command) holds the write lock for
            // milliseconds; waiting longer than a request waits for a
            // connection would only pile requests up behind it.
            .busy_timeout(super::CONNECTION_WAIT)
            .foreign_keys(true);
        create_private_database_file(options.get_filename())?;
        // A connection to a local file cannot go stale the way a network
        // connection can, and sqlx's check before handing one out costs a
        // round trip to the connection's worker thread on every statement.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(super::CONNECTION_WAIT)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        match migrations {
            Migrations::Apply => schema::sqlite_migrator().run(&writer).await?,
            Migrations::Require => {
                let mut connection = writer.acquire().await?;
                let applied = schema::sqlite_applied_versions(&mut connection).await?;
                schema::require_none_pending(schema::pending(&schema::sqlite_migrator(), &applied))?
            }
        }
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(super::CONNECTION_WAIT)
            .test_before_acquire(false)
            .connect_with(options.clone().read_only(true))
            .await?;
        let inline_reader = InlineReader::open(options.get_filename())?;
        Ok(SqliteStore {
            submits: SubmitQueue::new(SqliteSubmitter {
                writer: writer.clone(),
            }),
            writer,
            reader,
            inline_reader,
            callers: CallerCache::default(),
            // One node serves a SQLite database: every change is
            // announced in this process.
            generation_changes: Arc::new(GenerationChanges::new(true)),
        })
    }

    /// Reads at most one row by key: inline (see `inline_reads.rs`), or
    /// through the reader pool when SQLite could not start the read without
    /// waiting for a lock.
    pub(super) async fn point_read<R>(
        &self,
        statement: &'static str,
        parameters: &[&str],
    ) -> Result<Option<R>, StoreError>
    where
        R: InlineRow + for<'row> sqlx::FromRow<'row, SqliteRow> + Send + Unpin,
    {
        match self.inline_reader.read_optional(statement, parameters) {
            Err(error) if inline_reads::is_busy(&error) => {
                point_read_on_pool(&self.reader, statement, parameters).await
            }
            read => Ok(read?),
        }
    }

    /// Reads every row of `statement` inline (see `inline_reads.rs`), or,
    /// when SQLite could not start the read without waiting for a lock,
    /// through `on_reader_pool`: the same statement on the reader pool,
    /// which is only run then.
    pub(super) async fn read_all<R, P>(
        &self,
        statement: &str,
        parameters: &[P],
        on_reader_pool: impl Future<Output = Result<Vec<R>, StoreError>>,
    ) -> Result<Vec<R>, StoreError>
    where
        R: InlineRow,
        P: rusqlite::ToSql,
    {
        match self.inline_reader.read_all(statement, parameters) {
            Err(error) if inline_reads::is_busy(&error) => on_reader_pool.await,
            read => Ok(read?),
        }
    }

    /// Hands every row of `statement` to `each` inline, in place (see
    /// `InlineReader::for_each_row`). `Ok(false)` when SQLite could not
    /// start the read without waiting for a lock: nothing was handed to
    /// `each`, and the caller reads the rows through the reader pool. A
    /// read that fails after its first row is an error, never `false`, so
    /// that no row is handed over twice.
    pub(super) fn for_each_inline_row<P: rusqlite::ToSql>(
        &self,
        statement: &str,
        parameters: &[P],
        mut each: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>,
    ) -> Result<bool, StoreError> {
        let mut handed_over = false;
        let read = self
            .inline_reader
            .for_each_row(statement, parameters, |row| {
                handed_over = true;
                each(row)
            });
        match read {
            Err(error) if inline_reads::is_busy(&error) && !handed_over => Ok(false),
            read => read.map(|()| true).map_err(StoreError::from),
        }
    }

    /// `VACUUM INTO` reads one snapshot (a read transaction, which in WAL
    /// mode never blocks the server's writers) and writes it compacted to
    /// a new file; it refuses a path that already exists.
    pub(super) async fn backup_into(&self, path: &str) -> Result<(), StoreError> {
        sqlx::query("VACUUM INTO $1")
            .bind(path)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    pub(super) async fn begin_write(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        begin_immediate(&self.writer).await
    }

    pub(super) fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    pub(super) fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    pub(super) fn callers(&self) -> &CallerCache {
        &self.callers
    }

    pub(super) fn submits(&self) -> &SubmitQueue<SqliteSubmitter> {
        &self.submits
    }

    /// SQLite has no way to signal another process. Workers in this process
    /// are woken by the HTTP layer's in-process signal after a submit, and
    /// jobs queued by another process are found by polling.
    pub(super) async fn announce_work(
        _transaction: &mut Transaction<'static, Sqlite>,
        _generation_id: &str,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    pub(super) async fn wait_for_announced_work(&self, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }

    /// An in-process signal, after the change committed: one node serves a
    /// SQLite database, so every watcher is in this process.
    pub(super) async fn announce_generation_change(&self, generation_id: &str) {
        self.generation_changes.announce(generation_id);
    }

    pub(super) async fn watch_generation_changes(&self, generation_id: &str) -> GenerationWatch {
        self.generation_changes.watch(generation_id)
    }

    pub(super) fn generation_announcements_heard(&self) -> tokio::sync::watch::Receiver<bool> {
        self.generation_changes.heard()
    }

    /// One node serves a SQLite database, and it hears its own provider
    /// webhooks: there is no other node to tell.
    pub(super) async fn announce_to_other_nodes(
        &self,
        _generation_id: &str,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    pub(super) async fn hear_other_nodes(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
}

/// A write transaction on `writer`, the store's single writer connection,
/// that takes SQLite's write lock at once: another process writing waits on
/// the busy timeout here instead of failing half-way through.
pub(super) async fn begin_immediate(
    writer: &SqlitePool,
) -> Result<Transaction<'static, Sqlite>, StoreError> {
    Ok(writer.begin_with("BEGIN IMMEDIATE").await?)
}

/// Creates the database file readable by its owner only (0600) before
/// SQLite opens it, because it holds webhook secrets and session CSRF
/// tokens; SQLite gives its `-wal` and `-shm` files the database file's
/// permissions. An existing file keeps the permissions its operator gave it.
fn create_private_database_file(path: &std::path::Path) -> Result<(), StoreError> {
    let in_memory = path.as_os_str().is_empty() || path.as_os_str() == ":memory:";
    if in_memory || path.exists() {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
    match file.open(path) {
        Ok(_) => Ok(()),
        // Another process created it first; SQLite opens it as it is.
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(StoreError::DatabaseFile(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::database::Database;

    async fn synchronous_setting(store: &SqliteStore) -> i64 {
        sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(store.writer())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn commits_are_synced_in_full_unless_relaxed() {
        let directory = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", directory.path().join("a.sqlite").display());
        let store = SqliteStore::open(&url, Migrations::Apply, SqliteDurability::default())
            .await
            .unwrap();
        // SQLite reports FULL as 2 and NORMAL as 1.
        assert_eq!(synchronous_setting(&store).await, 2);
        let url = format!("sqlite://{}", directory.path().join("b.sqlite").display());
        let store = SqliteStore::open(&url, Migrations::Apply, SqliteDurability::Normal)
            .await
            .unwrap();
        assert_eq!(synchronous_setting(&store).await, 1);
    }

    #[tokio::test]
    async fn a_point_read_sqlite_cannot_start_at_once_is_answered_by_the_reader_pool() {
        let directory = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", directory.path().join("a.sqlite").display());
        let sqlite = SqliteStore::open(&url, Migrations::Apply, SqliteDurability::default())
            .await
            .unwrap();
        let mut store = crate::store::Store {
            database: Database::Sqlite(sqlite),
        };
        let created = crate::application::accounts::create_account(
            &store,
            "pool",
            vidgate_core::Micros(1_000_000),
        )
        .await
        .unwrap();
        // The inline reader now meets a lock on every read, as it would
        // while another process recovers the WAL.
        let held = inline_reads::tests::held_database();
        let Database::Sqlite(sqlite) = &mut store.database else {
            unreachable!("the store was opened on SQLite");
        };
        sqlite.inline_reader = InlineReader::open(&held.path).unwrap();
        let caller = store
            .accounts()
            .authenticate(&crate::ids::sha256_hex(created.api_key.as_bytes()))
            .await
            .unwrap()
            .expect("the key's caller, read from the pool");
        assert_eq!(caller.account_id, created.account.id);
    }

    #[tokio::test]
    async fn a_list_sqlite_cannot_start_at_once_is_answered_by_the_reader_pool() {
        let directory = tempfile::tempdir().unwrap();
        let (store, account_id) =
            crate::store::generations::tests::store_with_generations(directory.path()).await;
        let mut store = std::sync::Arc::into_inner(store).expect("the only handle of the store");
        let filter = crate::store::ListFilter {
            status: Some(vidgate_core::GenerationStatus::Succeeded),
            model: None,
            before: None,
            limit: 4,
        };
        let inline = store
            .generations()
            .list(&account_id, &filter)
            .await
            .unwrap();
        assert_eq!(inline.len(), 4);
        // The inline reader now meets a lock on every read, as it would
        // while another process recovers the WAL.
        let held = inline_reads::tests::held_database();
        let Database::Sqlite(sqlite) = &mut store.database else {
            unreachable!("the store was opened on SQLite");
        };
        sqlite.inline_reader = InlineReader::open(&held.path).unwrap();
        let pooled = store
            .generations()
            .list(&account_id, &filter)
            .await
            .unwrap();
        assert_eq!(pooled, inline);
        // The visited list falls back alike, and visits each row once.
        let mut visited = Vec::new();
        store
            .generations()
            .visit(&account_id, &filter, |generation| {
                visited.push(generation.id.to_owned())
            })
            .await
            .unwrap();
        let ids: Vec<String> = inline.into_iter().map(|generation| generation.id).collect();
        assert_eq!(visited, ids);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_new_database_file_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("new.sqlite");
        let url = format!("sqlite://{}", path.display());
        let store = SqliteStore::open(&url, Migrations::Apply, SqliteDurability::Full)
            .await
            .unwrap();
        // A write makes SQLite create its WAL file beside the database.
        sqlx::query("CREATE TABLE probe (id INTEGER)")
            .execute(store.writer())
            .await
            .unwrap();
        for file in [path.clone(), directory.path().join("new.sqlite-wal")] {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
    }
}
