//! Fresh PostgreSQL databases for tests: one per test, created on the server
//! `VIDGATE_TEST_POSTGRES_URL` names and dropped when the test ends. The
//! server's tests and the `vidgate` crate's process tests both use them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::{AssertSqlSafe, Connection, PgConnection};

pub const POSTGRES_URL_VARIABLE: &str = "VIDGATE_TEST_POSTGRES_URL";

/// Every test database's name starts with this, then the Unix time of its
/// creation, the process id and a counter.
const NAME_PREFIX: &str = "vidgate_test_";

/// A database left behind this long ago (its test process was killed before
/// it could drop it) is dropped by the next test that creates one.
const STALE_AFTER: Duration = Duration::from_secs(60 * 60);

/// The PostgreSQL server to test against, or `None` (after saying so on
/// stderr) when the variable is unset, so a machine without PostgreSQL still
/// runs the rest of the suite.
pub fn postgres_server_url(test_name: &str) -> Option<String> {
    match std::env::var(POSTGRES_URL_VARIABLE) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipping the PostgreSQL variant of {test_name}: set {POSTGRES_URL_VARIABLE} \
                 (e.g. postgres://postgres@127.0.0.1:5432/test) to run it"
            );
            None
        }
    }
}

pub struct PostgresTestDatabase {
    /// The URL of the new database, for the store under test.
    pub url: String,
    server_url: String,
    name: String,
}

impl PostgresTestDatabase {
    pub async fn create(server_url: &str) -> PostgresTestDatabase {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let mut connection = PgConnection::connect(server_url)
            .await
            .unwrap_or_else(|error| panic!("connecting to {server_url}: {error}"));
        drop_stale_databases(&mut connection).await;
        let name = format!(
            "{NAME_PREFIX}{}_{}_{}",
            unix_seconds(),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await
            .unwrap_or_else(|error| panic!("creating the database {name}: {error}"));
        connection.close().await.ok();
        PostgresTestDatabase {
            url: with_database(server_url, &name),
            server_url: server_url.to_owned(),
            name,
        }
    }
}

impl Drop for PostgresTestDatabase {
    /// Drops the database from a thread of its own, because `Drop` cannot
    /// await and the test's runtime may be the one running this. `FORCE`
    /// ends the connections the server under test still holds.
    fn drop(&mut self) {
        let server_url = self.server_url.clone();
        let statement = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let mut connection = PgConnection::connect(&server_url).await?;
                sqlx::query(AssertSqlSafe(statement))
                    .execute(&mut connection)
                    .await?;
                connection.close().await
            })?;
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!(
                "could not drop the test database {}; a later test will",
                self.name
            );
        }
    }
}

async fn drop_stale_databases(connection: &mut PgConnection) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'vidgate\\_test\\_%'",
    )
    .fetch_all(&mut *connection)
    .await
    .unwrap_or_default();
    let oldest_kept = unix_seconds().saturating_sub(STALE_AFTER.as_secs());
    for name in names {
        let created = name
            .strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|seconds| seconds.parse::<u64>().ok());
        if created.is_some_and(|created| created < oldest_kept) {
            let statement = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut *connection)
                .await
                .ok();
        }
    }
}

/// The server URL with its database replaced by `name` (query parameters kept).
fn with_database(server_url: &str, name: &str) -> String {
    let (base, query) = match server_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (server_url, None),
    };
    let authority_start = base.find("://").map_or(0, |index| index + 3);
    let server = match base[authority_start..].find('/') {
        Some(path_start) => &base[..authority_start + path_start],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}
