//! The schema's migrations, for both stores: applied when a store opens
//! (the default), by `vidgate admin migrate` on their own, or only checked.
//!
//! Migrations only add (expand), so a node of the previous version keeps
//! working on a schema a newer version grew: the migrators here ignore
//! applied migrations they do not know instead of refusing the database, as
//! sqlx does by default. On PostgreSQL sqlx applies them under an advisory
//! lock, so nodes starting together apply each one exactly once.

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, PgConnection, Postgres, Sqlite, SqliteConnection};

use super::StoreError;

/// How long a first connection to PostgreSQL may take. sqlx's pool would
/// retry a refused connection for 30 s and then report only a time-out;
/// one plain connection first reports the real cause, quickly.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What opening a store does about migrations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrations {
    /// Apply this version's pending migrations.
    Apply,
    /// Change nothing, and refuse a database that lacks one of this
    /// version's migrations (`--skip-migrations`, for operators who migrate
    /// with `vidgate admin migrate` and a more privileged database user).
    Require,
}

/// One migration, as `vidgate admin migrate` and the checks report it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Migration {
    pub version: i64,
    pub description: String,
}

fn tolerant(mut migrator: Migrator) -> Migrator {
    migrator.set_ignore_missing(true);
    migrator
}

pub(super) fn sqlite_migrator() -> Migrator {
    tolerant(sqlx::migrate!("./migrations/sqlite"))
}

pub(super) fn postgres_migrator() -> Migrator {
    tolerant(sqlx::migrate!("./migrations/postgres"))
}

/// The migrations of `migrator` missing from a database that has applied
/// `applied` (the versions in its migrations table; empty when it has none).
pub(super) fn pending(migrator: &Migrator, applied: &[i64]) -> Vec<Migration> {
    let applied: HashSet<i64> = applied.iter().copied().collect();
    migrator
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .filter(|migration| !applied.contains(&migration.version))
        .map(|migration| Migration {
            version: migration.version,
            description: migration.description.to_string(),
        })
        .collect()
}

/// The error of a store opened with [`Migrations::Require`] on a database
/// that lacks some of this version's migrations.
pub(super) fn require_none_pending(pending: Vec<Migration>) -> Result<(), StoreError> {
    if pending.is_empty() {
        Ok(())
    } else {
        Err(StoreError::NotMigrated {
            pending: pending.len(),
        })
    }
}

/// The statement that lists the applied migrations' versions; the same in
/// both dialects. Only successful ones count: a failed one is pending.
const APPLIED_VERSIONS: &str =
    "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version";

/// The versions of the migrations a SQLite database has applied (none
/// without a migrations table).
pub(super) async fn sqlite_applied_versions(
    connection: &mut SqliteConnection,
) -> Result<Vec<i64>, StoreError> {
    applied_versions::<Sqlite>(
        connection,
        "SELECT EXISTS (SELECT 1 FROM sqlite_master \
         WHERE type = 'table' AND name = '_sqlx_migrations')",
    )
    .await
}

/// The versions of the migrations a PostgreSQL database has applied (none
/// without a migrations table).
pub(super) async fn postgres_applied_versions(
    connection: &mut PgConnection,
) -> Result<Vec<i64>, StoreError> {
    applied_versions::<Postgres>(
        connection,
        "SELECT to_regclass('_sqlx_migrations') IS NOT NULL",
    )
    .await
}

/// The versions of the migrations a database has applied, or none when
/// `has_table`, the dialect's question whether the migrations table
/// exists, answers that it does not. It is generic over the database
/// because only that question differs between the two.
async fn applied_versions<DB>(
    connection: &mut DB::Connection,
    has_table: &'static str,
) -> Result<Vec<i64>, StoreError>
where
    DB: sqlx::Database,
    for<'connection> &'connection mut DB::Connection: sqlx::Executor<'connection, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    (bool,): for<'row> sqlx::FromRow<'row, DB::Row>,
    (i64,): for<'row> sqlx::FromRow<'row, DB::Row>,
{
    let has_table: bool = sqlx::query_scalar(has_table)
        .fetch_one(&mut *connection)
        .await?;
    if !has_table {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar(APPLIED_VERSIONS)
        .fetch_all(connection)
        .await?)
}

/// PostgreSQL connection options from a URL (with its `sslmode`,
/// `sslrootcert`, … parameters). Notices are not sent to us: they are
/// informational (e.g. `relation "_sqlx_migrations" already exists,
/// skipping`, which the migrator's `CREATE TABLE IF NOT EXISTS` causes at
/// every start), and sqlx would log each one, which looked like a problem
/// when several nodes started at once.
pub(super) fn postgres_options(database_url: &str) -> Result<PgConnectOptions, StoreError> {
    Ok(PgConnectOptions::from_str(database_url)?.options([("client_min_messages", "warning")]))
}

/// One connection to PostgreSQL, or the reason there is none within
/// [`CONNECT_TIMEOUT`].
pub(super) async fn connect_postgres(
    options: &PgConnectOptions,
) -> Result<PgConnection, StoreError> {
    tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(options))
        .await
        .map_err(|_| StoreError::ConnectTimeout(CONNECT_TIMEOUT))?
        .map_err(StoreError::from)
}

/// This version's migrations that the database at `database_url` lacks,
/// changing nothing (a SQLite file that does not exist yet lacks them all).
pub async fn pending_migrations(database_url: &str) -> Result<Vec<Migration>, StoreError> {
    if database_url.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(database_url)?;
        if !options.get_filename().exists() {
            return Ok(pending(&sqlite_migrator(), &[]));
        }
        let mut connection = SqliteConnection::connect_with(&options.read_only(true)).await?;
        let applied = sqlite_applied_versions(&mut connection).await?;
        connection.close().await.ok();
        Ok(pending(&sqlite_migrator(), &applied))
    } else if is_postgres_url(database_url) {
        let mut connection = connect_postgres(&postgres_options(database_url)?).await?;
        let applied = postgres_applied_versions(&mut connection).await?;
        connection.close().await.ok();
        Ok(pending(&postgres_migrator(), &applied))
    } else {
        Err(StoreError::unsupported_url(database_url))
    }
}

/// Applies this version's pending migrations to the database at
/// `database_url` and returns those it lacked (`vidgate admin migrate`).
pub async fn migrate(database_url: &str) -> Result<Vec<Migration>, StoreError> {
    let lacking = pending_migrations(database_url).await?;
    if database_url.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(database_url)?.create_if_missing(true);
        let mut connection = SqliteConnection::connect_with(&options).await?;
        sqlite_migrator().run(&mut connection).await?;
        connection.close().await.ok();
    } else {
        let mut connection = connect_postgres(&postgres_options(database_url)?).await?;
        postgres_migrator().run(&mut connection).await?;
        connection.close().await.ok();
    }
    Ok(lacking)
}

pub(super) fn is_postgres_url(database_url: &str) -> bool {
    database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_of_a_fresh_database_is_pending_and_none_of_a_migrated_one() {
        let migrator = postgres_migrator();
        let all = pending(&migrator, &[]);
        assert_eq!(all.len(), migrator.iter().count());
        let versions: Vec<i64> = all.iter().map(|migration| migration.version).collect();
        assert!(pending(&migrator, &versions).is_empty());
        // A newer version's migration in the database is not this one's business.
        let mut with_newer = versions.clone();
        with_newer.push(999_999);
        assert!(pending(&migrator, &with_newer).is_empty());
        assert_eq!(pending(&migrator, &versions[1..]).len(), 1);
    }

    #[test]
    fn both_stores_have_the_same_migration_versions() {
        let versions = |migrator: Migrator| {
            migrator
                .iter()
                .map(|migration| migration.version)
                .collect::<Vec<_>>()
        };
        assert_eq!(versions(sqlite_migrator()), versions(postgres_migrator()));
    }
}
