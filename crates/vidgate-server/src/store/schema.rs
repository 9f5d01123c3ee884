//! The schema's migrations, for both stores: applied when a store opens
//! (the default), by `vidgate admin migrate` on their own, or only checked.
//!
//! Migrations only add (expand), so a node of the previous version keeps
//! working on a schema a newer version grew: the migrators here ignore
//! applied migrations they do not know instead of refusing the database, as
//! sqlx does by default. On PostgreSQL sqlx applies them under an advisory
//! lock, so nodes starting together apply each one exactly once.
//!
//! PostgreSQL's functions (the submit's, `store/submit.rs`) are not copied
//! into a migration each time they change: each is one file of
//! `migrations/postgres/functions/`, applied after the numbered migrations
//! and again whenever its text changes (`apply_postgres_functions`). A
//! function stays in SQL because it earns it: a batch of submits is one
//! round trip instead of 2 + 7 per submit, 1.8-2.4 times the submits a
//! second (BENCHMARKS.md, session 21).

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

/// One of PostgreSQL's functions, kept whole in one file of
/// `migrations/postgres/functions/` and applied after the numbered
/// migrations (`apply_postgres_functions`). A function changes by a diff of
/// its file and a new `revision`; no migration copies its body.
pub(super) struct PostgresFunction {
    pub(super) name: &'static str,
    /// One more with every change of the file. A database keeps the highest
    /// revision a node applied, so a node of an older release starting
    /// during an upgrade does not put its older body back.
    pub(super) revision: i64,
    pub(super) text: &'static str,
}

impl PostgresFunction {
    fn sha256(&self) -> String {
        crate::ids::sha256_hex(self.text.as_bytes())
    }

    /// Whether a database that last applied `applied` (its revision and
    /// checksum, none when it never did) needs this file applied.
    fn is_pending(&self, applied: Option<&(i64, String)>) -> bool {
        match applied {
            None => true,
            Some((revision, sha256)) => {
                self.revision > *revision
                    || (self.revision == *revision && self.sha256() != *sha256)
            }
        }
    }
}

/// PostgreSQL's functions, in the order they are applied.
pub(super) const POSTGRES_FUNCTIONS: &[PostgresFunction] = &[
    PostgresFunction {
        name: "vidgate_submit_generation",
        revision: 1,
        text: include_str!("../../migrations/postgres/functions/vidgate_submit_generation.sql"),
    },
    PostgresFunction {
        name: "vidgate_submit_generations",
        revision: 1,
        text: include_str!("../../migrations/postgres/functions/vidgate_submit_generations.sql"),
    },
];

/// The advisory lock under which nodes apply PostgreSQL's functions, so that
/// nodes starting together apply each changed one once. Any fixed number
/// serves; this one is "vidgate" in ASCII.
const FUNCTIONS_LOCK: i64 = 0x0076_6964_6761_7465;

/// What `vidgate_functions` records of each function a node applied: its
/// name, revision and the SHA-256 of its text.
type AppliedFunction = (String, i64, String);

/// The functions of `POSTGRES_FUNCTIONS` that a database which applied
/// `applied` lacks, or has at an older revision or with another text.
fn pending_functions(applied: &[AppliedFunction]) -> Vec<&'static PostgresFunction> {
    POSTGRES_FUNCTIONS
        .iter()
        .filter(|function| {
            let recorded = applied
                .iter()
                .find(|(name, ..)| name == function.name)
                .map(|(_, revision, sha256)| (*revision, sha256.clone()));
            function.is_pending(recorded.as_ref())
        })
        .collect()
}

/// The functions a PostgreSQL database has applied (none before migration
/// 0030 made their table).
async fn applied_functions(
    connection: &mut PgConnection,
) -> Result<Vec<AppliedFunction>, StoreError> {
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('vidgate_functions') IS NOT NULL")
        .fetch_one(&mut *connection)
        .await?;
    if !has_table {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_as("SELECT name, revision, sha256 FROM vidgate_functions")
            .fetch_all(connection)
            .await?,
    )
}

/// Applies, after the numbered migrations, every function the database
/// lacks or has at an older revision or with another text, in one
/// transaction under `FUNCTIONS_LOCK`: a node that waited for the lock
/// finds the functions applied and applies nothing.
pub(super) async fn apply_postgres_functions(
    connection: &mut PgConnection,
) -> Result<(), StoreError> {
    let mut transaction = connection.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FUNCTIONS_LOCK)
        .execute(&mut *transaction)
        .await?;
    let applied = applied_functions(&mut transaction).await?;
    for function in pending_functions(&applied) {
        sqlx::raw_sql(function.text)
            .execute(&mut *transaction)
            .await?;
        sqlx::query(
            "INSERT INTO vidgate_functions (name, revision, sha256, applied_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE SET \
             revision = EXCLUDED.revision, sha256 = EXCLUDED.sha256, \
             applied_at = EXCLUDED.applied_at",
        )
        .bind(function.name)
        .bind(function.revision)
        .bind(function.sha256())
        .bind(super::now_millis())
        .execute(&mut *transaction)
        .await?;
    }
    transaction.commit().await?;
    Ok(())
}

/// This version's migrations and functions that a PostgreSQL database
/// lacks, each function as a `Migration` named after it.
pub(super) async fn postgres_pending(
    connection: &mut PgConnection,
) -> Result<Vec<Migration>, StoreError> {
    let applied = postgres_applied_versions(connection).await?;
    let mut lacking = pending(&postgres_migrator(), &applied);
    let functions = applied_functions(connection).await?;
    lacking.extend(
        pending_functions(&functions)
            .into_iter()
            .map(|function| Migration {
                version: function.revision,
                description: format!("function {}", function.name),
            }),
    );
    Ok(lacking)
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
async fn postgres_applied_versions(connection: &mut PgConnection) -> Result<Vec<i64>, StoreError> {
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

/// This version's migrations that the database at `database_url` lacks
/// (on PostgreSQL, with the functions it lacks or has at another text),
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
        let lacking = postgres_pending(&mut connection).await?;
        connection.close().await.ok();
        Ok(lacking)
    } else {
        Err(StoreError::unsupported_url(database_url))
    }
}

/// Applies this version's pending migrations (and, on PostgreSQL, its
/// changed functions) to the database at `database_url` and returns those
/// it lacked (`vidgate admin migrate`).
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
        apply_postgres_functions(&mut connection).await?;
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
    fn a_function_is_pending_when_missing_older_or_changed_and_never_when_newer() {
        let recorded = |revision_change: i64, sha256: Option<&str>| -> Vec<AppliedFunction> {
            POSTGRES_FUNCTIONS
                .iter()
                .map(|function| {
                    (
                        function.name.to_owned(),
                        function.revision + revision_change,
                        sha256.map_or_else(|| function.sha256(), str::to_owned),
                    )
                })
                .collect()
        };
        let names = |pending: Vec<&PostgresFunction>| -> Vec<&str> {
            pending.iter().map(|function| function.name).collect()
        };
        let every_name: Vec<&str> = POSTGRES_FUNCTIONS.iter().map(|f| f.name).collect();
        assert_eq!(names(pending_functions(&[])), every_name);
        assert!(pending_functions(&recorded(0, None)).is_empty());
        assert_eq!(names(pending_functions(&recorded(-1, None))), every_name);
        assert_eq!(
            names(pending_functions(&recorded(0, Some("changed by hand")))),
            every_name
        );
        // A newer release's functions, whatever their text.
        assert!(pending_functions(&recorded(1, Some("newer"))).is_empty());
    }

    /// A function's file changes with its revision: a database keeps the
    /// highest revision applied, so a change at the same revision would be
    /// undone by each node of the other text that starts. Raise the
    /// revision in `POSTGRES_FUNCTIONS` and write the new checksum here.
    #[test]
    fn each_function_file_is_the_text_of_its_revision() {
        let files: Vec<(&str, i64, String)> = POSTGRES_FUNCTIONS
            .iter()
            .map(|function| (function.name, function.revision, function.sha256()))
            .collect();
        assert_eq!(
            files,
            [
                (
                    "vidgate_submit_generation",
                    1,
                    "52ab389ec4bd5461ef675b7bf14b8a6adaf53accb1b34fa780324052220022bb".to_owned()
                ),
                (
                    "vidgate_submit_generations",
                    1,
                    "a34c2635f72f25f131c6d45dc93f10aeebaa0bc64dc558fffbf47c8aa7b07e3c".to_owned()
                ),
            ]
        );
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
