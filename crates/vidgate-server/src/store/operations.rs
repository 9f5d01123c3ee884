//! What operators and load balancers ask of the database itself, rather than
//! of an aggregate: whether it answers and carries every migration this
//! binary knows (readiness), and a consistent copy of the embedded database
//! taken while the server runs (backups).

use super::database::Database;
use super::{Store, StoreError, schema};

/// How far the database's schema is from the one this binary expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaState {
    /// The newest migration applied successfully, 0 when none is.
    pub applied_version: i64,
    /// The newest migration compiled into this binary.
    pub expected_version: i64,
}

impl SchemaState {
    /// Migrated when every migration this binary knows is applied. A newer
    /// schema (another node of a later release migrated first) still serves
    /// this one, since migrations only ever add.
    pub fn is_migrated(&self) -> bool {
        self.applied_version >= self.expected_version
    }
}

/// The operations of `operations` (see `Store::operations`).
#[derive(Clone, Copy)]
pub struct Operations<'store> {
    pub(super) store: &'store Store,
}

impl Operations<'_> {
    /// Runs one cheap query, so it fails when the database is unreachable.
    pub async fn schema_state(self) -> Result<SchemaState, StoreError> {
        let applied_version: i64 = fetch_on_reader!(
            self.store,
            fetch_one,
            sqlx::query_scalar(NEWEST_APPLIED_MIGRATION)
        )?;
        let migrator = match &self.store.database {
            Database::Sqlite(_) => schema::sqlite_migrator(),
            Database::Postgres(_) => schema::postgres_migrator(),
        };
        Ok(SchemaState {
            applied_version,
            expected_version: newest_version(&migrator),
        })
    }

    /// Starts a write transaction and rolls it back: fails while a write
    /// could not start (the database unreachable, or SQLite's write lock
    /// held by another process), which reads alone would not show.
    pub async fn check_writable(self) -> Result<(), StoreError> {
        self.store.begin_write().await?.rollback().await
    }

    /// Writes a consistent copy of the whole database to a new file at
    /// `path`, without stopping writers. Only the embedded SQLite database
    /// can; PostgreSQL has its own tools (`pg_dump`, base backups).
    pub async fn backup_into(self, path: &str) -> Result<(), StoreError> {
        match &self.store.database {
            Database::Sqlite(database) => database.backup_into(path).await,
            Database::Postgres(_) => Err(StoreError::Unsupported(
                "backups of PostgreSQL are taken with its own tools (pg_dump, pg_basebackup)",
            )),
        }
    }
}

/// The newest migration in a migrator, 0 for none.
fn newest_version(migrator: &sqlx::migrate::Migrator) -> i64 {
    migrator
        .iter()
        .map(|migration| migration.version)
        .max()
        .unwrap_or(0)
}

/// The statement both databases answer: sqlx records each migration in
/// `_sqlx_migrations`, with `success` false for one that failed half-way.
const NEWEST_APPLIED_MIGRATION: &str =
    "SELECT CAST(COALESCE(MAX(version), 0) AS BIGINT) FROM _sqlx_migrations WHERE success";
