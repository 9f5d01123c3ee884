//! Lists at scale (issue 42, item 2), measured, never asserted.
//!
//! Seeds 10,000 and then 1,000,000 generations with plain batched inserts
//! (a million in seconds, not through the API), first all in one account,
//! then spread over 10 accounts (one database of each size, so that the
//! two are timed in turn, call by call, and the machine's other work falls
//! on both alike), and times each shape of
//! `GET /generations` through the store call the handler makes
//! (`Store::list_generations`, 20 rows a page): unfiltered, filtered by
//! status and by model (a common value, and one that matches nothing), and
//! a cursor halfway into the account, unfiltered and filtered. A shape
//! is flat when its time at 1M is that at 10k (the ratio of the medians,
//! 1M / 10k, near 1; the goal is at most 1.2). At 1M it prints each shape's plan
//! (`EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN ANALYZE` on PostgreSQL), which
//! names the index it uses.
//!
//! ```sh
//! cargo bench -p vidgate-server --bench lists                 # SQLite
//! VIDGATE_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo bench -p vidgate-server --bench lists             # PostgreSQL too
//! ```

#[path = "common/bench_database.rs"]
mod bench_database;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Connection;
use vidgate_core::GenerationStatus;
use vidgate_server::store::{ListFilter, Store};

use bench_database::BenchDatabase;

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
        label: "10 accounts",
        accounts: 10,
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
    // The measured account holds every `accounts`-th row; its row halfway
    // down is a multiple of `accounts`, and leaves full pages of every
    // filter below it (1,000 rows of the account at 10k rows in 10
    // accounts: 500 below, 50 of them failed).
    let deep = (size / layout.accounts / 2) * layout.accounts;
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
        ("cursor halfway", page(None, None, Some(position(deep)))),
        (
            "status=failed, cursor halfway",
            page(Some(GenerationStatus::Failed), None, Some(position(deep))),
        ),
        (
            "model=vendor_2/model_2, cursor halfway",
            page(None, Some("vendor_2/model_2"), Some(position(deep))),
        ),
    ]
}

/// Median and 99th percentile of `CALLS` calls of one shape.
#[derive(Clone, Copy)]
struct Timing {
    p50: Duration,
    p99: Duration,
}

impl Timing {
    fn of(mut latencies: Vec<Duration>) -> Timing {
        latencies.sort();
        let at = |fraction: usize| latencies[(latencies.len() * fraction).div_ceil(100) - 1];
        Timing {
            p50: at(50),
            p99: at(99),
        }
    }
}

/// One call of a shape on `store`, timed.
async fn timed_call(store: &Store, filter: &ListFilter) -> Duration {
    let started = Instant::now();
    store
        .generations()
        .list(MEASURED_ACCOUNT, filter)
        .await
        .unwrap();
    started.elapsed()
}

/// Times a shape on the small and the large database, one call on each in
/// turn (after as many untimed), so that whatever else the machine does
/// falls on both alike.
async fn time_shape(
    small: (&Store, &ListFilter),
    large: (&Store, &ListFilter),
) -> (Timing, Timing) {
    for _ in 0..CALLS {
        timed_call(small.0, small.1).await;
        timed_call(large.0, large.1).await;
    }
    let mut small_latencies = Vec::with_capacity(CALLS);
    let mut large_latencies = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        small_latencies.push(timed_call(small.0, small.1).await);
        large_latencies.push(timed_call(large.0, large.1).await);
    }
    (Timing::of(small_latencies), Timing::of(large_latencies))
}

/// The statements that seed, for one database.
struct Seeding {
    accounts: &'static str,
    generations: &'static str,
}

/// The parts both databases' seeding statements share: a generation's
/// columns, and what each holds for row `i` after its id (which each
/// database formats its own way): account `i % $3`, and by the row's place
/// in that account (`i / $3`) one of five models and one in ten failed,
/// created at `$4 - i`; and an account's.
macro_rules! seeded {
    (generation_columns) => {
        "INSERT INTO generations (id, account_id, model, endpoint, mode, status, input, \
         output, error, price_micros, official_micros, source, attempts, max_attempts, \
         created_at, started_at, completed_at) "
    };
    (generation_values) => {
        "'acct_bench_' || (i % $3), \
         'vendor_' || (i / $3 % 5 + 1) || '/model_' || (i / $3 % 5 + 1), \
         'vendor_' || (i / $3 % 5 + 1) || '/model_' || (i / $3 % 5 + 1) || '/text-to-video', \
         'text-to-video', CASE WHEN i / $3 % 10 = 3 THEN 'failed' ELSE 'succeeded' END, \
         '{\"prompt\":\"seeded\",\"duration\":5}', \
         CASE WHEN i / $3 % 10 = 3 THEN NULL \
         ELSE '{\"video_url\":\"https://example.com/seeded.mp4\"}' END, \
         CASE WHEN i / $3 % 10 = 3 \
         THEN '{\"code\":\"generation_failed\",\"message\":\"seeded\"}' END, \
         250000, 300000, 'api', 1, 3, $4 - i, $4 - i, $4 - i "
    };
    (accounts) => {
        "INSERT INTO accounts (id, name, balance_micros, credited_micros, max_concurrent, \
         webhook_secret, created_at) \
         SELECT 'acct_bench_' || i, 'bench', 0, 0, 20, 'whsec_unused', 0 "
    };
}

const SQLITE_SEEDING: Seeding = Seeding {
    accounts: concat!(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $1 - 1) ",
        seeded!(accounts),
        "FROM n"
    ),
    generations: concat!(
        "WITH RECURSIVE n(i) AS (SELECT $1 UNION ALL SELECT i + 1 FROM n WHERE i < $2) ",
        seeded!(generation_columns),
        "SELECT printf('gen_seed_%09d', i), ",
        seeded!(generation_values),
        "FROM n"
    ),
};

const POSTGRES_SEEDING: Seeding = Seeding {
    accounts: concat!(seeded!(accounts), "FROM generate_series(0, $1 - 1) AS i"),
    generations: concat!(
        seeded!(generation_columns),
        "SELECT 'gen_seed_' || lpad(i::text, 9, '0'), ",
        seeded!(generation_values),
        "FROM generate_series($1::bigint, $2::bigint) AS i"
    ),
};

/// Runs `$seeding`'s statements on `$connection` (either database's: the
/// statements are typed by it): the accounts when `$accounts` says how
/// many, then generations `$first..=$last` in batches.
macro_rules! seed_with {
    ($connection:ident, $seeding:expr, $accounts:expr, $layout:expr, $first:expr, $last:expr) => {
        if let Some(accounts) = $accounts {
            sqlx::query($seeding.accounts)
                .bind(accounts)
                .execute(&mut $connection)
                .await
                .unwrap();
        }
        for (from, until) in batches($first, $last) {
            sqlx::query($seeding.generations)
                .bind(from)
                .bind(until)
                .bind($layout.accounts)
                .bind(SEED_EPOCH_MILLIS)
                .execute(&mut $connection)
                .await
                .unwrap();
        }
    };
}

/// One database under measurement: the store the handler would use, and
/// how to seed it.
struct Database {
    label: &'static str,
    url: String,
    store: Arc<Store>,
    /// PostgreSQL's database made for the run, dropped after it.
    postgres: Option<BenchDatabase>,
}

impl Database {
    async fn sqlite(directory: &std::path::Path, layout: Layout, size: i64) -> Database {
        let url = format!(
            "sqlite://{}",
            directory
                .join(format!("lists-{}-{size}.sqlite", layout.accounts))
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

    async fn postgres(server_url: &str, layout: Layout, size: i64) -> Database {
        let database =
            BenchDatabase::create(server_url, &format!("lists_{}_{size}", layout.accounts)).await;
        let store = vidgate_server::store::open(&database.url).await.unwrap();
        Database {
            label: "PostgreSQL",
            url: database.url.clone(),
            store,
            postgres: Some(database),
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
            seed_with!(connection, POSTGRES_SEEDING, accounts, layout, first, last);
            for statement in ["VACUUM (ANALYZE) generations", "CHECKPOINT"] {
                sqlx::query(statement)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        } else {
            let mut connection = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
            seed_with!(connection, SQLITE_SEEDING, accounts, layout, first, last);
        }
        println!(
            "seeded generations {first}..={last} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    async fn drop_database(self) {
        drop(self.store);
        if let Some(database) = self.postgres {
            database.drop_database().await;
        }
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

/// Seeds `small` with 10k rows and `large` with 1M in `layout`, times
/// every shape on both in turn, and prints the figures, the ratios and
/// the plans at 1M.
async fn measure(small: Database, large: Database, layout: Layout) {
    println!(
        "== {}, {}: {SMALL} against {LARGE} rows ({CALLS} calls a shape on each, in turn; {PAGE} rows a page)",
        large.label, layout.label
    );
    small.seed(layout, 1, SMALL).await;
    large.seed(layout, 1, LARGE).await;
    println!(
        "{:<42} {:>10} {:>10} {:>10} {:>10} {:>6} {:>6}",
        "shape", "10k p50", "10k p99", "1M p50", "1M p99", "p50×", "p99×"
    );
    let mut plans = Vec::new();
    for ((label, small_filter), (_, large_filter)) in
        shapes(SMALL, layout).into_iter().zip(shapes(LARGE, layout))
    {
        let (at_small, at_large) =
            time_shape((&small.store, &small_filter), (&large.store, &large_filter)).await;
        println!(
            "{label:<42} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>6.2} {:>6.2}",
            micros(at_small.p50),
            micros(at_small.p99),
            micros(at_large.p50),
            micros(at_large.p99),
            at_large.p50.as_secs_f64() / at_small.p50.as_secs_f64(),
            at_large.p99.as_secs_f64() / at_small.p99.as_secs_f64(),
        );
        let plan = large
            .store
            .generations()
            .explain_list(MEASURED_ACCOUNT, &large_filter)
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
    small.drop_database().await;
    large.drop_database().await;
}

#[tokio::main]
async fn main() {
    let directory = tempfile::tempdir().unwrap();
    for layout in LAYOUTS {
        measure(
            Database::sqlite(directory.path(), layout, SMALL).await,
            Database::sqlite(directory.path(), layout, LARGE).await,
            layout,
        )
        .await;
    }
    match std::env::var("VIDGATE_BENCH_POSTGRES_URL") {
        Ok(server_url) if !server_url.is_empty() => {
            for layout in LAYOUTS {
                measure(
                    Database::postgres(&server_url, layout, SMALL).await,
                    Database::postgres(&server_url, layout, LARGE).await,
                    layout,
                )
                .await;
            }
        }
        _ => println!("(PostgreSQL skipped: set VIDGATE_BENCH_POSTGRES_URL)"),
    }
}
