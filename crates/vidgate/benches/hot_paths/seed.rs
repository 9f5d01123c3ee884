//! Rows the benchmark needs that the API would take too long to make: a
//! million finished generations for the list filters, and the accounts the
//! pgbench reference locks.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use vidgate_test_support::seeded_generation;

/// Generation `index` of a seeded account was created this many
/// milliseconds after the Unix epoch: one per millisecond, newest first,
/// all older than anything the API creates during the run.
const SEED_EPOCH_MILLIS: i64 = 1_700_000_000_000;

fn seeded_created_at(index: i64) -> i64 {
    SEED_EPOCH_MILLIS - index
}

fn seeded_id(index: i64) -> String {
    format!("gen_seed_{index:09}")
}

/// The list cursor (as the API returns it) that continues after seeded
/// generation `index`.
pub fn cursor_after(index: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{}", seeded_created_at(index), seeded_id(index)))
}

/// Inserts generations `first..=last` of `account_id`: succeeded, spread
/// over five of the six models (never `vendor_6/model_6`), one statement;
/// each with the input and output of a real one (`seeded_generation`).
pub async fn generations(database_url: &str, account_id: &str, first: i64, last: i64) {
    if database_url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
        sqlx::query(seeded_generation::SQLITE_INSERT)
            .bind(account_id)
            .bind(first)
            .bind(last)
            .bind(SEED_EPOCH_MILLIS)
            .bind(seeded_generation::INPUT)
            .bind(seeded_generation::OUTPUT)
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(database_url).await.unwrap();
        sqlx::query(
            "INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, \
             output, price_micros, official_micros, source, attempts, max_attempts, created_at, \
             started_at, completed_at) \
             SELECT 'gen_seed_' || lpad(i::text, 9, '0'), $1, \
             'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1), \
             'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1) || '/text-to-video', \
             'text-to-video', 'succeeded', $5, $6, 250000, 300000, 'api', 1, 3, \
             $4 - i, $4 - i, $4 - i FROM generate_series($2::bigint, $3::bigint) AS i",
        )
        .bind(account_id)
        .bind(first)
        .bind(last)
        .bind(SEED_EPOCH_MILLIS)
        .bind(seeded_generation::INPUT)
        .bind(seeded_generation::OUTPUT)
        .execute(&pool)
        .await
        .unwrap();
        // A million fresh rows trigger autovacuum (PostgreSQL 13 and later
        // vacuum after inserts) and leave every tuple's hint bits to be set
        // by whichever query reads it first. Doing that housekeeping here,
        // and flushing it, keeps it out of the first measurement after the
        // seeding instead of charging it to whichever path is measured first.
        for statement in ["VACUUM (ANALYZE) generations", "CHECKPOINT"] {
            sqlx::query(statement).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
}

/// Accounts `pgbench_1` … `pgbench_{count}` with ample credit and no cap, for
/// the pgbench reference (it does not go through vidgate's API).
pub async fn pgbench_accounts(database_url: &str, count: u32) {
    let pool = sqlx::PgPool::connect(database_url).await.unwrap();
    sqlx::query(
        "INSERT INTO accounts (id, name, balance_micros, credited_micros, max_concurrent, \
         webhook_secret, created_at) \
         SELECT 'pgbench_' || i, 'pgbench', 1000000000000000, 1000000000000000, 1000000000, \
         'whsec_unused', 0 FROM generate_series(1, $1::bigint) AS i",
    )
    .bind(i64::from(count))
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
}

/// A fresh database on the server `admin_url` names; returns its URL.
pub async fn create_postgres_database(admin_url: &str, name: &str) -> String {
    let pool = sqlx::PgPool::connect(admin_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let (base, _) = admin_url.rsplit_once('/').expect("a database URL");
    format!("{base}/{name}")
}

pub async fn drop_postgres_database(admin_url: &str, name: &str) {
    let pool = sqlx::PgPool::connect(admin_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
}
