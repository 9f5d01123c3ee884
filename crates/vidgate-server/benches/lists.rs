//! Lists at scale (issue 42, item 2), measured, never asserted.
//!
//! Seeds 10,000 and then 1,000,000 generations with plain batched inserts
//! (a million in seconds, not through the API), first all in one account,
//! then spread over 100 accounts, and times each shape of
//! `GET /generations` through the store call the handler makes
//! (`Store::list_generations`, 20 rows a page): unfiltered, filtered by
//! status and by model (a common value, and one that matches nothing), and
//! a cursor 90 % deep into the account, unfiltered and filtered. A shape
//! is flat when its time at 1M is that at 10k (the ratio 1M / 10k near 1;
//! the goal is at most 1.2). At 1M it prints each shape's plan
//! (`EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN ANALYZE` on PostgreSQL), which
//! names the index it uses.
//!
//! ```sh
//! cargo bench -p vidgate-server --bench lists                 # SQLite
//! VIDGATE_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo bench -p vidgate-server --bench lists             # PostgreSQL too
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Connection;
use vidgate_core::GenerationStatus;
use vidgate_server::store::{ListFilter, Store};

/// Generation `index` was created this many milliseconds after the epoch:
/// one a millisecond, the highest index the oldest.
const SEED_EPOCH_MILLIS: i64 = 1_700_000_000_000;
const SMALL: i64 = 10_000;
const LARGE: i64 = 1_000_000;
/// Rows a seeding statement inserts.
const SEED_BATCH: i64 = 100_000;
/// Timed calls of each shape at each size, after as many untimed ones.
const CALLS: usize = 2000;
const PAGE: u32 = 20;

/// Where the seeded rows go: every one in the measured account, or spread
/// round-robin over `accounts` (the measured one is `acct_bench_0`).
#[derive(Clone, Copy)]
struct Layout {
    label: &'static str,
    accounts: i64,
}

const LAYOUTS: [Layout; 2] = [
    Layout {
        label: "one account",
        accounts: 1,
    },
    Layout {
        label: "100 accounts",
        accounts: 100,
    },
];

const MEASURED_ACCOUNT: &str = "acct_bench_0";

/// Seeded generation `index`: its creation time and id, the cursor's two
/// halves.
fn position(index: i64) -> (i64, String) {
    (SEED_EPOCH_MILLIS - index, format!("gen_seed_{index:09}"))
}

/// The shapes of list measured, for a table of `size` rows in `layout`.
fn shapes(size: i64, layout: Layout) -> Vec<(&'static str, ListFilter)> {
    // The measured account holds every `accounts`-th row; its row 90 %
    // deep is a multiple of `accounts`.
    let deep = (size / layout.accounts * 9 / 10) * layout.accounts;
    let page = |status: Option<GenerationStatus>, model: Option<&str>, before| ListFilter {
        status,
        model: model.map(str::to_owned),
        before,
        limit: PAGE,
    };
    vec![
        ("unfiltered", page(None, None, None)),
        (
            "status=failed (1 in 10)",
            page(Some(GenerationStatus::Failed), None, None),
        ),
        (
            "status=canceled (none)",
            page(Some(GenerationStatus::Canceled), None, None),
        ),
        (
            "model=vendor_2/model_2 (1 in 5)",
            page(None, Some("vendor_2/model_2"), None),
        ),
        (
            "model=vendor_6/model_6 (none)",
            page(None, Some("vendor_6/model_6"), None),
        ),
        ("cursor 90 % deep", page(None, None, Some(position(deep)))),
        (
            "status=failed, cursor 90 % deep",
            page(Some(GenerationStatus::Failed), None, Some(position(deep))),
        ),
        (
            "model=vendor_2/model_2, cursor 90 % deep",
            page(None, Some("vendor_2/model_2"), Some(position(deep))),
        ),
    ]
}

/// Mean and 99th percentile of `CALLS` calls of one shape.
#[derive(Clone, Copy)]
struct Timing {
    mean: Duration,
    p99: Duration,
}

async fn time_shape(store: &Store, filter: &ListFilter) -> Timing {
    for _ in 0..CALLS {
        store
            .list_generations(MEASURED_ACCOUNT, filter)
            .await
            .unwrap();
    }
    let mut latencies = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        store
            .list_generations(MEASURED_ACCOUNT, filter)
            .await
            .unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    Timing {
        mean: latencies.iter().sum::<Duration>() / CALLS as u32,
        p99: latencies[(CALLS * 99).div_ceil(100) - 1],
    }
}

/// The statements that seed, for one database.
struct Seeding {
    accounts: &'static str,
    generations: &'static str,
}

const SQLITE_SEEDING: Seeding = Seeding {
    accounts: "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $1 - 1) \
               INSERT INTO accounts (id, name, balance_micros, credited_micros, max_concurrent, \
               webhook_secret, created_at) \
               SELECT 'acct_bench_' || i, 'bench', 0, 0, 20, 'whsec_unused', 0 FROM n",
    generations: "WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i < $2) \
                  INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, \
                  output, error, price_micros, official_micros, source, attempts, max_attempts, \
                  created_at, started_at, completed_at) \
                  SELECT printf('gen_seed_%09d', i), 'acct_bench_' || (i % $3), \
                  'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1), \
                  'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1) || '/text-to-video', \
                  'text-to-video', CASE WHEN i % 10 = 3 THEN 'failed' ELSE 'succeeded' END, \
                  '{\"prompt\":\"seeded\",\"duration\":5}', \
                  CASE WHEN i % 10 = 3 THEN NULL \
                  ELSE '{\"video_url\":\"https://example.com/seeded.mp4\"}' END, \
                  CASE WHEN i % 10 = 3 \
                  THEN '{\"code\":\"generation_failed\",\"message\":\"seeded\"}' END, \
                  250000, 300000, 'api', 1, 3, $4 - i, $4 - i, $4 - i FROM n",
};

const POSTGRES_SEEDING: Seeding = Seeding {
    accounts: "INSERT INTO accounts (id, name, balance_micros, credited_micros, max_concurrent, \
               webhook_secret, created_at) \
               SELECT 'acct_bench_' || i, 'bench', 0, 0, 20, 'whsec_unused', 0 \
               FROM generate_series(0, $1 - 1) AS i",
    generations: "INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, \
                  output, error, price_micros, official_micros, source, attempts, max_attempts, \
                  created_at, started_at, completed_at) \
                  SELECT 'gen_seed_' || lpad(i::text, 9, '0'), 'acct_bench_' || (i % $3), \
                  'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1), \
                  'vendor_' || (i % 5 + 1) || '/model_' || (i % 5 + 1) || '/text-to-video', \
                  'text-to-video', CASE WHEN i % 10 = 3 THEN 'failed' ELSE 'succeeded' END, \
                  '{\"prompt\":\"seeded\",\"duration\":5}', \
                  CASE WHEN i % 10 = 3 THEN NULL \
                  ELSE '{\"video_url\":\"https://example.com/seeded.mp4\"}' END, \
                  CASE WHEN i % 10 = 3 \
                  THEN '{\"code\":\"generation_failed\",\"message\":\"seeded\"}' END, \
                  250000, 300000, 'api', 1, 3, $4 - i, $4 - i, $4 - i \
                  FROM generate_series($1::bigint, $2::bigint) AS i",
};

/// One database under measurement: the store the handler would use, and
/// how to seed it.
struct Database {
    label: &'static str,
    url: String,
    store: Arc<Store>,
    /// PostgreSQL's server and the database made for the run, dropped
    /// after it.
    postgres: Option<(String, String)>,
}

impl Database {
    async fn sqlite(directory: &std::path::Path, layout: Layout) -> Database {
        let url = format!(
            "sqlite://{}",
            directory
                .join(format!("lists-{}.sqlite", layout.accounts))
                .display()
        );
        let store = vidgate_server::store::open(&url).await.unwrap();
        Database {
            label: "SQLite",
            url,
            store,
            postgres: None,
        }
    }

    async fn postgres(server_url: &str, layout: Layout) -> Database {
        let name = format!(
            "vidgate_bench_lists_{}_{}",
            std::process::id(),
            layout.accounts
        );
        let mut connection = sqlx::PgConnection::connect(server_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await
            .unwrap();
        let mut url = url::Url::parse(server_url).unwrap();
        url.set_path(&name);
        let url = url.to_string();
        let store = vidgate_server::store::open(&url).await.unwrap();
        Database {
            label: "PostgreSQL",
            url,
            store,
            postgres: Some((server_url.to_owned(), name)),
        }
    }

    /// Adds generations `first..=last`, spread as `layout` says, in
    /// batches, then leaves the tables as a running service would find
    /// them (PostgreSQL's statistics and visibility map up to date).
    async fn seed(&self, layout: Layout, first: i64, last: i64) {
        let started = Instant::now();
        // The accounts come with the first rows.
        let accounts = (first == 1).then_some(layout.accounts);
        if self.postgres.is_some() {
            let mut connection = sqlx::PgConnection::connect(&self.url).await.unwrap();
            if let Some(accounts) = accounts {
                sqlx::query(POSTGRES_SEEDING.accounts)
                    .bind(accounts)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
            for (from, until) in batches(first, last) {
                sqlx::query(POSTGRES_SEEDING.generations)
                    .bind(from)
                    .bind(until)
                    .bind(layout.accounts)
                    .bind(SEED_EPOCH_MILLIS)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
            for statement in ["VACUUM (ANALYZE) generations", "CHECKPOINT"] {
                sqlx::query(statement)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        } else {
            let mut connection = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
            if let Some(accounts) = accounts {
                sqlx::query(SQLITE_SEEDING.accounts)
                    .bind(accounts)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
            for (from, until) in batches(first, last) {
                sqlx::query(SQLITE_SEEDING.generations)
                    .bind(from)
                    .bind(until)
                    .bind(layout.accounts)
                    .bind(SEED_EPOCH_MILLIS)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        }
        println!(
            "seeded generations {first}..={last} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    async fn drop_database(self) {
        let Some((server_url, name)) = self.postgres else {
            return;
        };
        drop(self.store);
        let mut connection = sqlx::PgConnection::connect(&server_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut connection)
        .await
        .unwrap();
    }
}

/// The seeding statements' ranges for generations `first..=last`.
fn batches(first: i64, last: i64) -> Vec<(i64, i64)> {
    (first..=last)
        .step_by(SEED_BATCH as usize)
        .map(|from| (from, (from + SEED_BATCH - 1).min(last)))
        .collect()
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// Seeds `database` to 10k and then 1M rows in `layout`, timing every
/// shape at each, and prints the figures, the ratios and the plans.
async fn measure(database: Database, layout: Layout) {
    println!(
        "== {}, {}: {SMALL} then {LARGE} rows ({CALLS} calls a shape, {PAGE} rows a page)",
        database.label, layout.label
    );
    database.seed(layout, 1, SMALL).await;
    let mut small = Vec::new();
    for (_, filter) in shapes(SMALL, layout) {
        small.push(time_shape(&database.store, &filter).await);
    }
    database.seed(layout, SMALL + 1, LARGE).await;
    println!(
        "{:<42} {:>10} {:>10} {:>10} {:>10} {:>6} {:>6}",
        "shape", "10k mean", "10k p99", "1M mean", "1M p99", "mean×", "p99×"
    );
    let mut plans = Vec::new();
    for ((label, filter), small) in shapes(LARGE, layout).into_iter().zip(small) {
        let large = time_shape(&database.store, &filter).await;
        println!(
            "{label:<42} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>6.2} {:>6.2}",
            micros(small.mean),
            micros(small.p99),
            micros(large.mean),
            micros(large.p99),
            large.mean.as_secs_f64() / small.mean.as_secs_f64(),
            large.p99.as_secs_f64() / small.p99.as_secs_f64(),
        );
        let plan = database
            .store
            .explain_list_generations(MEASURED_ACCOUNT, &filter)
            .await
            .unwrap();
        plans.push((label, plan));
    }
    println!("plans at {LARGE} rows:");
    for (label, plan) in plans {
        println!("  {label}:");
        for line in plan {
            println!("    {line}");
        }
    }
    database.drop_database().await;
}

#[tokio::main]
async fn main() {
    let directory = tempfile::tempdir().unwrap();
    for layout in LAYOUTS {
        measure(Database::sqlite(directory.path(), layout).await, layout).await;
    }
    match std::env::var("VIDGATE_BENCH_POSTGRES_URL") {
        Ok(server_url) if !server_url.is_empty() => {
            for layout in LAYOUTS {
                measure(Database::postgres(&server_url, layout).await, layout).await;
            }
        }
        _ => println!("(PostgreSQL skipped: set VIDGATE_BENCH_POSTGRES_URL)"),
    }
}
