//! Provider load (issue 29), measured, never asserted.
//!
//! Thousands of generations submitted at once, at a fake Replicate that
//! enforces Replicate's documented limits (600 creates a minute, 3,000
//! other requests a minute) and runs each job for minutes: does every
//! submit get its 202, every generation exactly one provider job and its
//! success, does vidgate stay within the provider's limits, how soon after
//! the provider finishes does the generation, and do small accounts' jobs
//! reach the provider while one account's backlog drains?
//!
//! The nodes are `vidgate serve` processes (the binary, so that their
//! memory and CPU are their own); the fake runs in this process, with its
//! webhooks on (`webhooks`), all dropped (`polling`: vidgate registered
//! them, so it polls as the backstop for lost webhooks) or never registered
//! (`no-webhooks`: a node without a public URL polls every job). `postgres` runs two
//! nodes on one PostgreSQL database sharing the provider budget through
//! Redis, with webhooks.
//!
//! ```sh
//! cargo build -p vidgate && cargo bench -p vidgate-server --bench provider_load -- webhooks
//! cargo bench -p vidgate-server --bench provider_load -- polling
//! cargo bench -p vidgate-server --bench provider_load -- no-webhooks
//! VIDGATE_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//! VIDGATE_BENCH_REDIS_URL=redis://127.0.0.1:6379 \
//!     cargo bench -p vidgate-server --bench provider_load -- postgres
//! ```
//!
//! The scale is the issue's by default and can be made smaller for a
//! quick look: `VIDGATE_BENCH_JOBS` (5000), `VIDGATE_BENCH_ACCOUNTS` (50),
//! `VIDGATE_BENCH_BIG_ACCOUNT_JOBS` (4000), `VIDGATE_BENCH_RUN_SECONDS`
//! (120), `VIDGATE_BENCH_BINARY` (default target/{release,debug}/vidgate).

#[allow(dead_code, unused_imports)]
#[path = "../tests/it/fake_providers/mod.rs"]
mod fake_providers;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_providers::{CallClass, FakeProviders, Provider, REPLICATE_TOKEN, RateLimits};
use serde_json::{Value, json};
use sqlx::{Connection, Row};

/// The model every generation runs: M1 at Replicate in the example file.
const MODEL_PATH: &str = "/run/vendor_1/model_1/text-to-video";
const MODEL_ID: &str = "vendor_1/model_1";
/// Replicate's documented limits (UPSTREAMS.md, "Rate limits";
/// replicate.com/docs/topics/predictions/rate-limits): 600 creates and
/// 3,000 other requests a minute.
const REPLICATE_DOCUMENTED: RateLimits = RateLimits {
    creates_per_minute: 600,
    others_per_minute: 3000,
};
/// Submits in flight at once from this client.
const SUBMIT_CONCURRENCY: usize = 64;

struct Scale {
    jobs: usize,
    accounts: usize,
    big_account_jobs: usize,
    run_seconds: u64,
}

impl Scale {
    fn from_environment() -> Scale {
        let number = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.parse().ok())
                .unwrap_or(default)
        };
        Scale {
            jobs: number("VIDGATE_BENCH_JOBS", 5000) as usize,
            accounts: number("VIDGATE_BENCH_ACCOUNTS", 50) as usize,
            big_account_jobs: number("VIDGATE_BENCH_BIG_ACCOUNT_JOBS", 4000) as usize,
            run_seconds: number("VIDGATE_BENCH_RUN_SECONDS", 120),
        }
    }
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn server_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("VIDGATE_BENCH_BINARY") {
        return Some(PathBuf::from(path));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    ["target/release/vidgate", "target/debug/vidgate"]
        .iter()
        .map(|path| root.join(path))
        .find(|path| path.exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/proc/<pid>/status`'s peak resident set, in KiB.
fn peak_resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of `pid`, in clock ticks (100 a second).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |index: usize| fields.get(index).and_then(|v| v.parse::<u64>().ok());
    field(11).unwrap_or(0) + field(12).unwrap_or(0)
}

/// Bytes the process caused to be written to storage (`/proc/<pid>/io`).
fn written_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or(0)
}

/// One `vidgate serve` process, killed when dropped.
struct Node {
    child: Child,
    log_path: PathBuf,
    api_base: String,
    metrics_url: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

struct Deployment {
    binary: PathBuf,
    nodes: Vec<Node>,
    /// `--data-dir` or `--database-url` for `vidgate admin`.
    admin_database: Vec<String>,
    database: Database,
    _directory: tempfile::TempDir,
}

enum Database {
    Sqlite(PathBuf),
    Postgres { server: String, name: String },
}

impl Database {
    fn url(&self) -> String {
        match self {
            Database::Sqlite(path) => format!("sqlite://{}?mode=ro", path.display()),
            // The server URL names a database to connect to first; the
            // bench's own database takes its place.
            Database::Postgres { server, name } => {
                let base = server
                    .rsplit_once('/')
                    .map_or(server.as_str(), |(base, _)| base);
                format!("{base}/{name}")
            }
        }
    }
}

/// The example Replicate backends file with its URL pointed at the fake
/// and timeouts that suit minute-long jobs.
fn backends_file(fake: &FakeProviders, directory: &Path) -> PathBuf {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hosted/replicate.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    let model = &mut file["models"][MODEL_ID];
    model["api_url"] = json!(fake.replicate_api_url());
    let path = directory.join("backends.json");
    std::fs::write(
        &path,
        json!({ "models": { MODEL_ID: model.clone() } }).to_string(),
    )
    .unwrap();
    path
}

/// What every node of a scenario is started with.
struct NodeSettings<'a> {
    binary: &'a Path,
    directory: &'a Path,
    /// `--data-dir` or `--database-url`.
    database: &'a [String],
    backends: &'a Path,
    redis_url: Option<&'a str>,
    registers_webhooks: bool,
}

fn start_node(settings: &NodeSettings<'_>, name: &str) -> Node {
    let NodeSettings {
        binary,
        directory,
        database,
        backends,
        redis_url,
        registers_webhooks,
    } = *settings;
    let port = free_port();
    let metrics_port = free_port();
    let api_base = format!("http://127.0.0.1:{port}");
    let log_path = directory.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut command = Command::new(binary);
    command
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        .arg("--backends-file")
        .arg(backends)
        .args(["--trusted-media-address", "127.0.0.1"])
        .args(["--max-connections", "4096"])
        .args(database)
        .env("REPLICATE_API_TOKEN", REPLICATE_TOKEN)
        .env("VIDGATE_LOG", "warn")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    if let Some(redis_url) = redis_url {
        command.args(["--redis-url", redis_url]);
    }
    // Provider webhooks need a public URL; without one the node follows
    // its hosted jobs by polling alone.
    if registers_webhooks {
        command.args(["--public-url", &api_base]);
    }
    let child = command.spawn().unwrap();
    Node {
        child,
        log_path,
        api_base: format!("{api_base}/api/v1"),
        metrics_url: format!("http://127.0.0.1:{metrics_port}/metrics"),
    }
}

async fn wait_until_ready(client: &reqwest::Client, node: &mut Node) {
    let started = Instant::now();
    loop {
        if let Ok(response) = client.get(format!("{}/models", node.api_base)).send().await
            && response.status().as_u16() < 500
        {
            return;
        }
        if let Some(exit) = node.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(&node.log_path).unwrap_or_default();
            panic!("vidgate serve exited ({exit}): {log}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "vidgate serve did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn admin(deployment: &Deployment, arguments: &[&str]) -> Value {
    let output = Command::new(&deployment.binary)
        .arg("admin")
        .args(&deployment.admin_database)
        .args(arguments)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(output.status.success(), "vidgate admin {arguments:?}");
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

/// Accounts with credit for every job and limits raised as an operator
/// would for a customer of this size; their API keys.
fn create_accounts(deployment: &Deployment, scale: &Scale) -> Vec<String> {
    let limit = (scale.jobs + 100).to_string();
    (0..scale.accounts)
        .map(|index| {
            let created = admin(
                deployment,
                &[
                    "account",
                    "create",
                    "--name",
                    &format!("load {index}"),
                    "--credit-usd",
                    "1000000",
                ],
            );
            let account_id = created["account_id"].as_str().unwrap();
            admin(
                deployment,
                &[
                    "account",
                    "limits",
                    account_id,
                    "--rps",
                    "100000",
                    "--burst",
                    "100000",
                    "--concurrency",
                    &limit,
                ],
            );
            created["api_key"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// Which account submits each job: the big one `big_account_jobs` times,
/// the others the rest in turn, in an order that mixes them, so that the
/// small accounts submit while the big one's burst arrives.
fn submit_plan(scale: &Scale) -> Vec<usize> {
    let small_jobs = scale.jobs.saturating_sub(scale.big_account_jobs);
    let small_accounts = scale.accounts.saturating_sub(1).max(1);
    let mut small_so_far = 0;
    (0..scale.jobs)
        .map(|index| {
            // The small accounts' jobs spread evenly through the burst, the
            // same way every run: a small job wherever the running share of
            // small jobs steps up.
            if (index + 1) * small_jobs / scale.jobs > small_so_far {
                small_so_far += 1;
                1 + (small_so_far - 1) % small_accounts
            } else {
                0
            }
        })
        .collect()
}

struct Submitted {
    account: usize,
    submitted_at: f64,
    status: u16,
    generation_id: Option<String>,
}

async fn submit_all(
    client: &reqwest::Client,
    nodes: &[String],
    keys: &[String],
    plan: &[usize],
) -> Vec<Submitted> {
    let semaphore = Arc::new(tokio::sync::Semaphore::new(SUBMIT_CONCURRENCY));
    let mut tasks = Vec::with_capacity(plan.len());
    for (index, account) in plan.iter().copied().enumerate() {
        let permit = semaphore.clone().acquire_owned().await.unwrap();
        let client = client.clone();
        let url = format!("{}{MODEL_PATH}", nodes[index % nodes.len()]);
        let key = keys[account].clone();
        tasks.push(tokio::spawn(async move {
            let submitted_at = unix_seconds();
            let body =
                json!({ "prompt": format!("load {index}"), "duration": 5, "resolution": "480p" });
            let response = client.post(url).bearer_auth(key).json(&body).send().await;
            drop(permit);
            let (status, generation_id) = match response {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let record: Value = response.json().await.unwrap_or(Value::Null);
                    (status, record["id"].as_str().map(str::to_owned))
                }
                Err(_) => (0, None),
            };
            Submitted {
                account,
                submitted_at,
                status,
                generation_id,
            }
        }));
    }
    let mut submitted = Vec::with_capacity(tasks.len());
    for task in tasks {
        submitted.push(task.await.unwrap());
    }
    submitted
}

struct Finished {
    status: String,
    completed_at_ms: i64,
    /// The generation's job at the provider, as vidgate recorded it.
    provider_job_id: Option<String>,
}

async fn read_generations(database: &Database) -> HashMap<String, Finished> {
    let query = "SELECT generations.id, generations.status, \
                 COALESCE(generations.completed_at, 0) AS completed_at, \
                 provider_jobs.job_id AS provider_job_id \
                 FROM generations \
                 LEFT JOIN provider_jobs ON provider_jobs.generation_id = generations.id";
    let rows = match database {
        Database::Sqlite(_) => {
            let mut connection = sqlx::SqliteConnection::connect(&database.url())
                .await
                .unwrap();
            let rows = sqlx::query(query).fetch_all(&mut connection).await.unwrap();
            rows.iter()
                .map(|row| {
                    (
                        row.get::<String, _>("id"),
                        row.get::<String, _>("status"),
                        row.get::<i64, _>("completed_at"),
                        row.get::<Option<String>, _>("provider_job_id"),
                    )
                })
                .collect::<Vec<_>>()
        }
        Database::Postgres { .. } => {
            let mut connection = sqlx::PgConnection::connect(&database.url()).await.unwrap();
            let rows = sqlx::query(query).fetch_all(&mut connection).await.unwrap();
            rows.iter()
                .map(|row| {
                    (
                        row.get::<String, _>("id"),
                        row.get::<String, _>("status"),
                        row.get::<i64, _>("completed_at"),
                        row.get::<Option<String>, _>("provider_job_id"),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    rows.into_iter()
        .map(|(id, status, completed_at_ms, provider_job_id)| {
            (
                id,
                Finished {
                    status,
                    completed_at_ms,
                    provider_job_id,
                },
            )
        })
        .collect()
}

/// PostgreSQL's count of rows written (inserted, updated, deleted) in the
/// database so far.
async fn postgres_rows_written(database: &Database) -> Option<i64> {
    let Database::Postgres { .. } = database else {
        return None;
    };
    let mut connection = sqlx::PgConnection::connect(&database.url()).await.ok()?;
    sqlx::query_scalar::<_, i64>(
        "SELECT (tup_inserted + tup_updated + tup_deleted)::BIGINT FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut connection)
    .await
    .ok()
}

fn percentile(values: &mut [f64], fraction: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let index = ((values.len() as f64 * fraction).ceil() as usize).clamp(1, values.len());
    values[index - 1]
}

fn summary(label: &str, mut values: Vec<f64>) {
    let count = values.len();
    let (p50, p99) = (percentile(&mut values, 0.50), percentile(&mut values, 0.99));
    let max = values.last().copied().unwrap_or(f64::NAN);
    println!("{label:<58} n={count:<5} p50 {p50:>8.2} s  p99 {p99:>8.2} s  max {max:>8.2} s");
}

async fn scrape_provider_metrics(client: &reqwest::Client, nodes: &[Node]) {
    for (index, node) in nodes.iter().enumerate() {
        let Ok(response) = client.get(&node.metrics_url).send().await else {
            continue;
        };
        let text = response.text().await.unwrap_or_default();
        for line in text.lines().filter(|line| {
            !line.starts_with('#')
                && !line.contains("_bucket{")
                && (line.contains("provider_budget")
                    || line.contains("provider_rate_limited")
                    || line.contains("poll_interval")
                    || line.contains("provider_jobs_in_flight")
                    || line.contains("queue_oldest_wait"))
        }) {
            println!("  node {index} metric: {line}");
        }
    }
}

/// Starts the fake Replicate with minute-long jobs, Replicate's documented
/// limits and, unless the scenario loses them, its webhooks.
async fn start_fake_replicate(scale: &Scale, webhooks: bool) -> FakeProviders {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.queue_for = Duration::from_secs(2);
        switches.run_for = Duration::from_secs(scale.run_seconds);
        switches.drop_webhooks = !webhooks;
        switches.reuse_outputs = true;
        switches.replicate_limits = Some(REPLICATE_DOCUMENTED);
    });
    fake
}

/// The scenario's database, how `vidgate` reaches it and how many nodes
/// share it.
struct DatabaseSetup {
    database: Database,
    /// `--data-dir` or `--database-url` for `vidgate serve` and `admin`.
    admin_database: Vec<String>,
    node_count: usize,
}

/// Creates a fresh PostgreSQL database for two nodes in the `postgres`
/// scenario and a SQLite data directory for one node otherwise; `None`,
/// after saying so, when PostgreSQL was asked for but not given.
async fn create_database(scenario: &str, directory: &Path) -> Option<DatabaseSetup> {
    let postgres_server = std::env::var("VIDGATE_BENCH_POSTGRES_URL").ok();
    if scenario == "postgres" {
        let Some(server) = postgres_server else {
            println!(
                "== postgres skipped: set VIDGATE_BENCH_POSTGRES_URL and VIDGATE_BENCH_REDIS_URL"
            );
            return None;
        };
        let name = format!("vidgate_load_{}", std::process::id());
        let mut connection = sqlx::PgConnection::connect(&server).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut connection)
            .await
            .unwrap();
        let database = Database::Postgres { server, name };
        let url = database.url();
        // The nodes share one directory for clips, as they would share a
        // bucket.
        let shared = directory.join("shared");
        let arguments = vec![
            "--database-url".to_owned(),
            url,
            "--data-dir".to_owned(),
            shared.display().to_string(),
        ];
        Some(DatabaseSetup {
            database,
            admin_database: arguments,
            node_count: 2,
        })
    } else {
        let data_dir = directory.join("data");
        let database = Database::Sqlite(data_dir.join("vidgate.sqlite"));
        Some(DatabaseSetup {
            database,
            admin_database: vec!["--data-dir".to_owned(), data_dir.display().to_string()],
            node_count: 1,
        })
    }
}

/// Starts the scenario's nodes and waits for each to answer before the
/// next starts.
async fn start_nodes_one_after_another(
    client: &reqwest::Client,
    settings: &NodeSettings<'_>,
    node_count: usize,
) -> Vec<Node> {
    // One after another: the first node migrates the fresh database.
    let mut nodes: Vec<Node> = Vec::new();
    for index in 0..node_count {
        let mut node = start_node(settings, &format!("node{index}"));
        wait_until_ready(client, &mut node).await;
        nodes.push(node);
    }
    nodes
}

/// Prints what the scenario runs, so that its figures can be read
/// without the command line that produced them.
fn print_scenario_heading(
    scenario: &str,
    scale: &Scale,
    registers_webhooks: bool,
    webhooks: bool,
    node_count: usize,
) {
    println!(
        "== {scenario}: {} generations across {} accounts (one submits {}), queued 2 s and run {} s at the fake Replicate, webhooks {}, {} node(s)",
        scale.jobs,
        scale.accounts,
        scale.big_account_jobs,
        scale.run_seconds,
        match (registers_webhooks, webhooks) {
            (false, _) => "not registered",
            (true, true) => "on",
            (true, false) => "registered, all lost",
        },
        node_count,
    );
}

/// The nodes' processes and their counters before the load, so that the
/// figures after it are the load's own.
struct ResourcesBefore {
    pids: Vec<u32>,
    cpu_ticks: Vec<u64>,
    written_bytes: Vec<u64>,
    postgres_rows: Option<i64>,
}

/// Reads the nodes' CPU time, bytes written and PostgreSQL's rows written
/// before the load begins.
async fn read_resources_before(deployment: &Deployment) -> ResourcesBefore {
    let pids: Vec<u32> = deployment
        .nodes
        .iter()
        .map(|node| node.child.id())
        .collect();
    let cpu_before: Vec<u64> = pids.iter().map(|pid| cpu_ticks(*pid)).collect();
    let written_before: Vec<u64> = pids.iter().map(|pid| written_bytes(*pid)).collect();
    let rows_before = postgres_rows_written(&deployment.database).await;
    ResourcesBefore {
        pids,
        cpu_ticks: cpu_before,
        written_bytes: written_before,
        postgres_rows: rows_before,
    }
}

/// Submits every planned generation across the nodes and prints how long
/// that took and which statuses answered, the first thing the issue asks.
async fn submit_and_print_answers(
    client: &reqwest::Client,
    deployment: &Deployment,
    keys: &[String],
    scale: &Scale,
    started: Instant,
) -> Vec<Submitted> {
    let api_bases: Vec<String> = deployment
        .nodes
        .iter()
        .map(|node| node.api_base.clone())
        .collect();
    let submitted = submit_all(client, &api_bases, keys, &submit_plan(scale)).await;
    println!("submitting took {:.1} s", started.elapsed().as_secs_f64());
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for submit in &submitted {
        *statuses.entry(submit.status).or_default() += 1;
    }
    println!("submit answers: {statuses:?}");
    submitted
}

/// Reads the generations every two seconds until the accepted ones are
/// all final or the bench gives up, and returns the last read.
async fn wait_until_accepted_are_final(
    database: &Database,
    accepted: &[&Submitted],
    scale: &Scale,
    started: Instant,
) -> HashMap<String, Finished> {
    // Until every accepted generation is final, or far past when it
    // should have been.
    let give_up = Duration::from_secs(scale.run_seconds + 60 + (scale.jobs as u64 / 10) * 2);
    loop {
        let generations = read_generations(database).await;
        let unfinished = accepted
            .iter()
            .filter(|submit| {
                let id = submit.generation_id.as_deref().unwrap();
                !generations.get(id).is_some_and(|finished| {
                    matches!(
                        finished.status.as_str(),
                        "succeeded" | "failed" | "canceled"
                    )
                })
            })
            .count();
        if unfinished == 0 || started.elapsed() > give_up {
            if unfinished > 0 {
                println!(
                    "GAVE UP with {unfinished} generations unfinished after {:.0} s",
                    started.elapsed().as_secs_f64()
                );
            }
            return generations;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// What the nodes used over the load: seconds since it began, and each
/// node's CPU, peak memory and bytes written.
struct ResourcesUsed {
    elapsed: f64,
    cpu_seconds: Vec<f64>,
    peak_mib: Vec<f64>,
    written_mib: Vec<f64>,
    postgres_rows_after: Option<i64>,
}

/// Reads the nodes' counters again as soon as the load is over, so that
/// nothing after it counts.
async fn read_resources_used(
    before: &ResourcesBefore,
    database: &Database,
    started: Instant,
) -> ResourcesUsed {
    let elapsed = started.elapsed().as_secs_f64();
    let pids = &before.pids;
    let cpu_seconds: Vec<f64> = pids
        .iter()
        .zip(&before.cpu_ticks)
        .map(|(pid, before)| (cpu_ticks(*pid) - before) as f64 / 100.0)
        .collect();
    let peak_mib: Vec<f64> = pids
        .iter()
        .map(|pid| peak_resident_kib(*pid) as f64 / 1024.0)
        .collect();
    let written_mib: Vec<f64> = pids
        .iter()
        .zip(&before.written_bytes)
        .map(|(pid, before)| (written_bytes(*pid) - before) as f64 / 1048576.0)
        .collect();
    let rows_after = postgres_rows_written(database).await;
    ResourcesUsed {
        elapsed,
        cpu_seconds,
        peak_mib,
        written_mib,
        postgres_rows_after: rows_after,
    }
}

/// Prints how the accepted generations ended: every one should succeed.
fn print_generation_outcomes(
    accepted: &[&Submitted],
    generations: &HashMap<String, Finished>,
    elapsed: f64,
) {
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for submit in accepted {
        let status = generations
            .get(submit.generation_id.as_deref().unwrap())
            .map_or("missing", |finished| finished.status.as_str());
        *outcomes.entry(status).or_default() += 1;
    }
    println!("generation outcomes: {outcomes:?} in {elapsed:.0} s");
}

/// Matches the fake's jobs to generations and prints whether any
/// generation got more than one job or any job none; the job of each
/// generation.
fn provider_job_of_each_generation<'j>(
    jobs: &'j [fake_providers::FakeJob],
    generations: &HashMap<String, Finished>,
    accepted: &[&Submitted],
) -> HashMap<String, &'j fake_providers::FakeJob> {
    // Provider jobs per generation: a fake job registered with a webhook
    // carries its URL, whose route names the generation; without webhooks,
    // a job is the generation's that recorded it, and a job that no
    // generation names is an extra one.
    let generation_of_job: HashMap<&str, &str> = generations
        .iter()
        .filter_map(|(generation, finished)| {
            Some((finished.provider_job_id.as_deref()?, generation.as_str()))
        })
        .collect();
    let mut jobs_per_generation: HashMap<String, usize> = HashMap::new();
    let mut provider_job_of: HashMap<String, &fake_providers::FakeJob> = HashMap::new();
    let mut unnamed_jobs = 0;
    for job in jobs {
        let generation = job
            .webhook_url
            .as_deref()
            .and_then(|url| url.rsplit('/').next())
            .or_else(|| generation_of_job.get(job.id.as_str()).copied());
        let Some(generation) = generation else {
            unnamed_jobs += 1;
            continue;
        };
        *jobs_per_generation
            .entry(generation.to_owned())
            .or_default() += 1;
        provider_job_of.insert(generation.to_owned(), job);
    }
    let more_than_one = jobs_per_generation
        .values()
        .filter(|count| **count > 1)
        .count();
    println!(
        "provider jobs: {} for {} accepted generations; generations with more than one: {more_than_one}; jobs no generation names: {unnamed_jobs}",
        jobs.len(),
        accepted.len()
    );
    provider_job_of
}

/// Prints the calls vidgate made to the fake Replicate against its
/// documented limits, to show that vidgate kept within them.
fn print_provider_calls(fake: &FakeProviders) {
    // The fake counts Replicate's calls per class in one-minute windows.
    let (mut creates, mut others, mut refused) = (0u64, 0u64, 0u64);
    let (mut busiest_creates, mut busiest_others) = (0u32, 0u32);
    for (class, _window, calls) in fake.calls_by_window(Provider::REPLICATE) {
        refused += u64::from(calls.refused);
        match class {
            CallClass::Creates => {
                creates += u64::from(calls.made());
                busiest_creates = busiest_creates.max(calls.made());
            }
            CallClass::Others => {
                others += u64::from(calls.made());
                busiest_others = busiest_others.max(calls.made());
            }
        }
    }
    println!(
        "provider calls: {creates} creates, {others} others, {refused} answered 429 ({:.2} %); busiest minute made {busiest_creates} creates (limit {}), {busiest_others} others (limit {})",
        100.0 * refused as f64 / (creates + others).max(1) as f64,
        REPLICATE_DOCUMENTED.creates_per_minute,
        REPLICATE_DOCUMENTED.others_per_minute,
    );
}

/// Prints how long after the provider finished each generation finished,
/// where that time went, and how long each account's jobs took to reach
/// the provider.
fn print_lags_and_times_to_the_provider(
    fake: &FakeProviders,
    accepted: &[&Submitted],
    generations: &HashMap<String, Finished>,
    provider_job_of: &HashMap<String, &fake_providers::FakeJob>,
) {
    let mut lag = Vec::new();
    // Where the lag goes: from the provider's completion to vidgate taking
    // its webhook, to vidgate's next read of the job, to vidgate fetching
    // the output; the rest is storing the clip and recording the success.
    let mut to_webhook_taken = Vec::new();
    let mut to_next_read = Vec::new();
    let mut to_output_fetched = Vec::new();
    let mut small_to_provider = Vec::new();
    let mut big_to_provider = Vec::new();
    for submit in accepted {
        let id = submit.generation_id.as_deref().unwrap();
        let Some(job) = provider_job_of.get(id) else {
            continue;
        };
        if let (Some(provider_done), Some(finished)) = (job.completed_at, generations.get(id))
            && finished.completed_at_ms > 0
        {
            lag.push(finished.completed_at_ms as f64 / 1000.0 - provider_done);
            if let Some(taken) = fake.completion_webhook_taken_at(&job.id) {
                to_webhook_taken.push(taken - provider_done);
            }
            if let Some(read) = fake
                .state_reads_of(&job.id)
                .into_iter()
                .find(|read| *read >= provider_done)
            {
                to_next_read.push(read - provider_done);
            }
            if let Some(fetched) = fake.output_fetched_at(&job.id) {
                to_output_fetched.push(fetched - provider_done);
            }
        }
        let to_provider = job.created_at - submit.submitted_at;
        if submit.account == 0 {
            big_to_provider.push(to_provider);
        } else {
            small_to_provider.push(to_provider);
        }
    }
    // Each small account's first job: what one account's backlog does to
    // another account's single job. (All of the small accounts' jobs
    // together need their share of the create budget: at 600 a minute,
    // 1,000 jobs take 100 s however they are ordered.)
    let mut first_of_account: HashMap<usize, f64> = HashMap::new();
    for submit in accepted {
        let id = submit.generation_id.as_deref().unwrap();
        if submit.account == 0 {
            continue;
        }
        if let Some(job) = provider_job_of.get(id) {
            let to_provider = job.created_at - submit.submitted_at;
            let first = first_of_account.entry(submit.account).or_insert(f64::MAX);
            *first = first.min(to_provider);
        }
    }
    summary("provider finished → generation finished", lag);
    summary("provider finished → its webhook taken", to_webhook_taken);
    summary("provider finished → vidgate's next read", to_next_read);
    summary("provider finished → output fetched", to_output_fetched);
    summary(
        "submit → at the provider, each small account's first job",
        first_of_account.into_values().collect(),
    );
    summary(
        "submit → at the provider, small accounts",
        small_to_provider,
    );
    summary("submit → at the provider, the big account", big_to_provider);
}

/// Prints each node's CPU, peak memory and writes over the load, and
/// PostgreSQL's rows written when there is PostgreSQL.
fn print_node_resources(before: &ResourcesBefore, used: &ResourcesUsed) {
    let elapsed = used.elapsed;
    for index in 0..before.pids.len() {
        println!(
            "node {index}: CPU {:.1} s ({:.1} % of one core), peak RSS {:.0} MiB, written to storage {:.1} MiB ({:.2} MiB/s)",
            used.cpu_seconds[index],
            100.0 * used.cpu_seconds[index] / elapsed,
            used.peak_mib[index],
            used.written_mib[index],
            used.written_mib[index] / elapsed,
        );
    }
    if let (Some(before), Some(after)) = (before.postgres_rows, used.postgres_rows_after) {
        println!(
            "PostgreSQL rows written: {} ({:.0} a second)",
            after - before,
            (after - before) as f64 / elapsed
        );
    }
}

/// Stops the nodes, then drops the bench's PostgreSQL database if there
/// is one, so that a run leaves nothing behind.
async fn stop_nodes_and_drop_postgres_database(deployment: &mut Deployment) {
    let nodes = std::mem::take(&mut deployment.nodes);
    drop(nodes);
    if let Database::Postgres { server, name } = &deployment.database {
        let mut connection = sqlx::PgConnection::connect(server).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut connection)
        .await
        .ok();
    }
}

async fn run(scenario: &str, binary: PathBuf, scale: &Scale) {
    // `polling`: webhooks registered but all lost, so the backstop finds
    // every end; `no-webhooks`: none registered, polling as the only way.
    let webhooks = !matches!(scenario, "polling" | "no-webhooks");
    let registers_webhooks = scenario != "no-webhooks";
    let fake = start_fake_replicate(scale, webhooks).await;
    let directory = tempfile::tempdir().unwrap();
    let backends = backends_file(&fake, directory.path());
    let Some(DatabaseSetup {
        database,
        admin_database,
        node_count,
    }) = create_database(scenario, directory.path()).await
    else {
        return;
    };
    let redis_url = std::env::var("VIDGATE_BENCH_REDIS_URL").ok();
    let node_redis = if scenario == "postgres" {
        redis_url.as_deref()
    } else {
        None
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(SUBMIT_CONCURRENCY)
        .build()
        .unwrap();
    let settings = NodeSettings {
        binary: &binary,
        directory: directory.path(),
        database: &admin_database,
        backends: &backends,
        redis_url: node_redis,
        registers_webhooks,
    };
    let nodes = start_nodes_one_after_another(&client, &settings, node_count).await;
    let mut deployment = Deployment {
        binary,
        nodes: Vec::new(),
        admin_database,
        database,
        _directory: directory,
    };
    let keys = create_accounts(&deployment, scale);
    deployment.nodes = nodes;
    print_scenario_heading(
        scenario,
        scale,
        registers_webhooks,
        webhooks,
        deployment.nodes.len(),
    );

    let before = read_resources_before(&deployment).await;
    let started = Instant::now();
    let submitted = submit_and_print_answers(&client, &deployment, &keys, scale, started).await;
    let accepted: Vec<&Submitted> = submitted
        .iter()
        .filter(|submit| submit.generation_id.is_some())
        .collect();
    let generations =
        wait_until_accepted_are_final(&deployment.database, &accepted, scale, started).await;
    let used = read_resources_used(&before, &deployment.database, started).await;

    print_generation_outcomes(&accepted, &generations, used.elapsed);
    let jobs = fake.jobs();
    let provider_job_of = provider_job_of_each_generation(&jobs, &generations, &accepted);
    print_provider_calls(&fake);
    print_lags_and_times_to_the_provider(&fake, &accepted, &generations, &provider_job_of);
    print_node_resources(&before, &used);
    scrape_provider_metrics(&client, &deployment.nodes).await;

    stop_nodes_and_drop_postgres_database(&mut deployment).await;
}

#[tokio::main]
async fn main() {
    let Some(binary) = server_binary() else {
        println!("provider_load skipped: no server binary (build it, or set VIDGATE_BENCH_BINARY)");
        return;
    };
    let scale = Scale::from_environment();
    // `cargo bench` passes `--bench`; the scenarios are the other words.
    let asked: Vec<String> = std::env::args()
        .skip(1)
        .filter(|word| !word.starts_with("--"))
        .collect();
    let scenarios: Vec<&str> = if asked.is_empty() {
        vec!["webhooks", "polling", "no-webhooks", "postgres"]
    } else {
        asked.iter().map(String::as_str).collect()
    };
    for scenario in scenarios {
        run(scenario, binary.clone(), &scale).await;
    }
}
