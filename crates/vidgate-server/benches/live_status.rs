//! Live status (issue 32), measured, never asserted.
//!
//! `latency`: how long after a generation's final commit a client sees it,
//! three ways: polling as the SDKs did before waits (a read, then another
//! after the `Retry-After: 5` of an unfinished answer, from a random phase),
//! `Prefer: wait=60`, and the event stream. The commit is the store's own
//! finish (`finish_failed`, as a worker's), timed from the moment it
//! returned. On SQLite one node serves the client and commits; on PostgreSQL
//! the client's node has no workers and another node's store commits, so
//! the news crosses nodes by `NOTIFY`.
//!
//! `streams`: 1,000 and then 10,000 event streams open at once on one
//! `vidgate serve` process (the binary, so that its memory and CPU are its
//! own): resident memory before and after, CPU while they idle, the
//! latency of plain reads by another client with them against the same
//! reads with none open (the reference, in the same run), and how long
//! SIGTERM takes to close them all. Given several binaries, each is
//! measured in turn at each count, so that a before and an after share one
//! run on one machine.
//!
//! ```sh
//! cargo bench -p vidgate-server --bench live_status                  # SQLite latency, and streams
//! VIDGATE_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!     cargo bench -p vidgate-server --bench live_status -- latency    # PostgreSQL too
//! VIDGATE_BENCH_BINARY=target/debug/vidgate cargo bench … -- streams  # the server binary (default: target/{release,debug}/vidgate)
//! VIDGATE_BENCH_BINARIES=before=/path/a,after=/path/b cargo bench … -- streams   # several, in turns
//! ```

#[path = "common/bench_database.rs"]
mod bench_database;
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vidgate_server::live_status::LiveStatusLimits;
use vidgate_server::store::{FailureDetail, Store};
use vidgate_server::{RunningServer, ServerOptions};

use bench_database::BenchDatabase;

/// Generations followed at once in one round of a latency measurement.
const BATCH: usize = 40;
/// Between two finishes of a round, so that each is timed on its own.
const FINISH_SPACING: Duration = Duration::from_millis(25);
/// The numbers of streams the `streams` section opens, each in a run of
/// its own.
const STREAM_COUNTS: [usize; 2] = [1000, 10_000];
/// Streams per generation in the `streams` section.
const STREAMS_PER_GENERATION: usize = 10;

fn body(prompt: &str) -> Value {
    json!({ "prompt": prompt, "duration": 2, "resolution": "480p", "generate_audio": false })
}

/// The figures of one way of following.
fn report(label: &str, mut latencies: Vec<Duration>) {
    latencies.sort();
    let at = |fraction: f64| {
        let index = ((latencies.len() as f64 * fraction).ceil() as usize).clamp(1, latencies.len());
        latencies[index - 1]
    };
    println!(
        "{label:<44} n={:<4} p50 {:>9.1} ms  p99 {:>9.1} ms  max {:>9.1} ms",
        latencies.len(),
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3,
    );
}

/// The node the client talks to, and the store that commits the finishes.
struct Nodes {
    api: RunningServer,
    /// The PostgreSQL run's second node, whose store commits.
    other: Option<RunningServer>,
    key: String,
    client: reqwest::Client,
    _directories: Vec<tempfile::TempDir>,
}

impl Nodes {
    fn committer(&self) -> Arc<Store> {
        self.other.as_ref().unwrap_or(&self.api).store.clone()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api.api_base)
    }

    /// `count` generations, submitted on the client's node and claimed by
    /// the committing store's "worker", so that each is running.
    async fn running_generations(&self, count: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for index in 0..count {
            let submitted: Value = self
                .client
                .post(self.url("/run/vendor_1/model_1/text-to-video"))
                .bearer_auth(&self.key)
                .json(&body(&format!("live status {index}")))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            ids.push(submitted["id"].as_str().unwrap().to_owned());
        }
        let committer = self.committer();
        for _ in 0..count {
            committer
                .queue()
                .claim_next("bench-worker", Duration::from_secs(600))
                .await
                .unwrap()
                .expect("a queued generation");
        }
        ids
    }

    /// Finishes each generation in turn; when each finish's commit returned.
    async fn finish_all(&self, ids: &[String]) -> HashMap<String, Instant> {
        let committer = self.committer();
        let mut committed = HashMap::new();
        for id in ids {
            let failure = FailureDetail {
                code: "bench".into(),
                message: "finished by the benchmark".into(),
            };
            assert!(
                committer
                    .queue()
                    .finish_failed(id, "bench-worker", failure)
                    .await
                    .unwrap()
            );
            committed.insert(id.clone(), Instant::now());
            tokio::time::sleep(FINISH_SPACING).await;
        }
        committed
    }

    async fn shutdown(self) {
        self.api.shutdown().await;
        if let Some(other) = self.other {
            other.shutdown().await;
        }
    }
}

async fn start_node(database_url: &str, data_dir: &Path) -> RunningServer {
    let mut options = ServerOptions::new("127.0.0.1:0".parse().unwrap(), data_dir.to_path_buf());
    options.database_url = Some(database_url.to_owned());
    options.queue.workers = 0;
    options.live_status = LiveStatusLimits {
        per_key: 10_000,
        // The bench's streams are one account's; the node keeps one more.
        per_account: 10_000,
        per_node: 10_001,
    };
    options.http.max_connections = 4096;
    // Every stream comes from the bench's one loopback address.
    options.http.max_connections_per_address = 4096;
    vidgate_server::start(options).await.unwrap()
}

async fn start_nodes(postgres_url: Option<&str>) -> Nodes {
    let directory = tempfile::tempdir().unwrap();
    let other_directory = tempfile::tempdir().unwrap();
    let (api, other) = match postgres_url {
        None => {
            let url = format!(
                "sqlite://{}",
                directory.path().join("bench.sqlite").display()
            );
            (start_node(&url, directory.path()).await, None)
        }
        Some(url) => (
            start_node(url, directory.path()).await,
            Some(start_node(url, other_directory.path()).await),
        ),
    };
    let account = common::unlimited_account(&api).await;
    Nodes {
        api,
        other,
        key: account.api_key,
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap(),
        _directories: vec![directory, other_directory],
    }
}

/// Polling as the SDKs did before waits: a read, and while the generation
/// is unfinished another after its `Retry-After`, each poller starting at a
/// random moment of its 5-second cycle.
async fn polling(nodes: &Nodes, rounds: usize) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let ids = nodes.running_generations(BATCH).await;
        let pollers: Vec<_> = ids
            .iter()
            .map(|id| {
                let client = nodes.client.clone();
                let url = nodes.url(&format!("/generations/{id}"));
                let key = nodes.key.clone();
                let phase = Duration::from_millis(rand_below(5000));
                tokio::spawn(async move {
                    tokio::time::sleep(phase).await;
                    loop {
                        let response = client.get(&url).bearer_auth(&key).send().await.unwrap();
                        let hint = response
                            .headers()
                            .get("retry-after")
                            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
                        let record: Value = response.json().await.unwrap();
                        if record["status"] == "failed" {
                            return Instant::now();
                        }
                        tokio::time::sleep(Duration::from_secs(hint.unwrap_or(5))).await;
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5500)).await;
        let committed = nodes.finish_all(&ids).await;
        for (id, poller) in ids.iter().zip(pollers) {
            latencies.push(
                poller
                    .await
                    .unwrap()
                    .saturating_duration_since(committed[id]),
            );
        }
    }
    latencies
}

/// `GET /generations/{id}` with `Prefer: wait=60`, open before the finish.
async fn waiting(nodes: &Nodes, rounds: usize) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let ids = nodes.running_generations(BATCH).await;
        let waiters: Vec<_> = ids
            .iter()
            .map(|id| {
                let request = nodes
                    .client
                    .get(nodes.url(&format!("/generations/{id}")))
                    .bearer_auth(&nodes.key)
                    .header("prefer", "wait=60")
                    .timeout(Duration::from_secs(90));
                tokio::spawn(async move {
                    let record: Value = request.send().await.unwrap().json().await.unwrap();
                    assert_eq!(record["status"], "failed");
                    Instant::now()
                })
            })
            .collect();
        // Every wait has reached the server and is waiting.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let committed = nodes.finish_all(&ids).await;
        for (id, waiter) in ids.iter().zip(waiters) {
            latencies.push(
                waiter
                    .await
                    .unwrap()
                    .saturating_duration_since(committed[id]),
            );
        }
    }
    latencies
}

/// Reads an event stream until the text `until` arrives; when it did.
async fn read_stream_until(response: &mut reqwest::Response, until: &str) -> Option<Instant> {
    let mut text = String::new();
    loop {
        let chunk = response.chunk().await.ok()??;
        text.push_str(&String::from_utf8_lossy(&chunk));
        if text.contains(until) {
            return Some(Instant::now());
        }
    }
}

/// `GET /generations/{id}/events`, its first event read before the finish.
async fn streaming(nodes: &Nodes, rounds: usize) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let ids = nodes.running_generations(BATCH).await;
        let mut readers = Vec::new();
        for id in &ids {
            let mut response = nodes
                .client
                .get(nodes.url(&format!("/generations/{id}/events")))
                .bearer_auth(&nodes.key)
                .timeout(Duration::from_secs(600))
                .send()
                .await
                .unwrap();
            read_stream_until(&mut response, "id: running-1")
                .await
                .unwrap();
            readers.push(tokio::spawn(async move {
                read_stream_until(&mut response, "\"status\":\"failed\"")
                    .await
                    .unwrap()
            }));
        }
        let committed = nodes.finish_all(&ids).await;
        for (id, reader) in ids.iter().zip(readers) {
            latencies.push(
                reader
                    .await
                    .unwrap()
                    .saturating_duration_since(committed[id]),
            );
        }
    }
    latencies
}

/// A number below `bound` from the thread's generator.
fn rand_below(bound: u64) -> u64 {
    rand::random::<u64>() % bound
}

async fn latency(postgres_server: Option<&str>) {
    println!("== latency: final commit to the client seeing it ({BATCH} generations a round)");
    let nodes = start_nodes(None).await;
    report("SQLite, polling (Retry-After: 5)", polling(&nodes, 2).await);
    report("SQLite, Prefer: wait=60", waiting(&nodes, 5).await);
    report("SQLite, event stream", streaming(&nodes, 5).await);
    nodes.shutdown().await;
    let Some(server_url) = postgres_server else {
        println!("(PostgreSQL skipped: set VIDGATE_BENCH_POSTGRES_URL)");
        return;
    };
    let database = BenchDatabase::create(server_url, "live").await;
    let nodes = start_nodes(Some(&database.url)).await;
    report("PostgreSQL, other node, polling", polling(&nodes, 2).await);
    report(
        "PostgreSQL, other node, Prefer: wait=60",
        waiting(&nodes, 5).await,
    );
    report(
        "PostgreSQL, other node, event stream",
        streaming(&nodes, 5).await,
    );
    nodes.shutdown().await;
    database.drop_database().await;
}

/// The server binaries to measure, each with a label:
/// `VIDGATE_BENCH_BINARIES` (`label=path,…`), or `VIDGATE_BENCH_BINARY`,
/// or the workspace's release build, or its debug build.
fn server_binaries() -> Vec<(String, PathBuf)> {
    if let Ok(list) = std::env::var("VIDGATE_BENCH_BINARIES") {
        return list
            .split(',')
            .map(|labelled| {
                let (label, path) = labelled
                    .split_once('=')
                    .expect("VIDGATE_BENCH_BINARIES is a list of label=path");
                (label.to_owned(), PathBuf::from(path))
            })
            .collect();
    }
    if let Ok(path) = std::env::var("VIDGATE_BENCH_BINARY") {
        return vec![("this".to_owned(), PathBuf::from(path))];
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    ["release", "debug"]
        .into_iter()
        .map(|profile| target.join(profile).join("vidgate"))
        .find(|path| path.exists())
        .map(|path| ("this".to_owned(), path))
        .into_iter()
        .collect()
}

/// Resident memory of a process, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// CPU time a process has used (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line.
    let after_command = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_command.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// `count` sequential reads of one generation by a client of its own.
async fn read_latencies(api_base: &str, key: &str, id: &str, count: usize) -> Vec<Duration> {
    let client = reqwest::Client::new();
    let url = format!("{api_base}/generations/{id}");
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let response = client.get(&url).bearer_auth(key).send().await.unwrap();
        assert!(response.status().is_success());
        response.bytes().await.unwrap();
        latencies.push(started.elapsed());
    }
    latencies
}

fn run_admin(binary: &Path, data_dir: &Path, arguments: &[&str]) {
    let status = std::process::Command::new(binary)
        .arg("admin")
        .arg("--data-dir")
        .arg(data_dir)
        .args(arguments)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "vidgate admin {arguments:?}");
}

async fn streams() {
    let binaries = server_binaries();
    if binaries.is_empty() {
        println!("== streams skipped: no server binary (build it, or set VIDGATE_BENCH_BINARY)");
        return;
    }
    for count in STREAM_COUNTS {
        for (label, binary) in &binaries {
            streams_of(label, binary, count).await;
        }
    }
}

/// A `vidgate serve` process of the `streams` section and where it keeps
/// its log and data; the directory outlives the process.
struct StreamsServer {
    process: std::process::Child,
    pid: u32,
    log_path: PathBuf,
    data_dir: PathBuf,
    _directory: tempfile::TempDir,
}

/// Where the development account the server created is reached.
struct DevelopmentAccount {
    api_base: String,
    key: String,
    account_id: String,
}

/// The streams held open, each drained by a task of its own, and the
/// keep-alive comments they have received; the client that opened them
/// lives as long as they do.
struct OpenStreams {
    readers: Vec<tokio::task::JoinHandle<()>>,
    keep_alives: Arc<std::sync::atomic::AtomicUsize>,
    _client: reqwest::Client,
}

/// The node's resident memory and a read's latencies before any stream
/// is open, the baseline the open streams are compared with.
struct WithoutStreams {
    idle_kib: u64,
    latencies: Vec<Duration>,
}

/// Starts `vidgate serve` with one worker and limits high enough for
/// `count` streams, so that only the streams' own cost is measured.
fn start_server_for_streams(binary: &Path, count: usize) -> StreamsServer {
    let limit = (count * 2).to_string();
    let directory = tempfile::tempdir().unwrap();
    let log_path = directory.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let data_dir = directory.path().join("data");
    let process = std::process::Command::new(binary)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--max-waits-per-key",
            &limit,
            "--max-waits-per-account",
            &limit,
            "--max-waits-per-node",
            &(count * 3).to_string(),
            "--max-connections",
            &(count * 3).to_string(),
            "--max-connections-per-address",
            &(count * 3).to_string(),
        ])
        .arg("--data-dir")
        .arg(&data_dir)
        // The `[sim:sleep=…]` marker keeps the one worker busy.
        .env("VIDGATE_SIMULATION", "true")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    StreamsServer {
        pid: process.id(),
        process,
        log_path,
        data_dir,
        _directory: directory,
    }
}

/// Waits until the server's log shows its API base and the development
/// account's key and id, since the bench has no other way to learn them.
async fn development_account_from_log(server: &mut StreamsServer) -> DevelopmentAccount {
    loop {
        let log = std::fs::read_to_string(&server.log_path).unwrap_or_default();
        let api_base = log
            .lines()
            .find_map(|line| line.strip_prefix("vidgate API base: "));
        let key = log
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .find(|word| word.starts_with("vg_live_"));
        let account = log
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .find(|word| word.starts_with("acct_"));
        if let (Some(api_base), Some(key), Some(account)) = (api_base, key, account) {
            return DevelopmentAccount {
                api_base: api_base.to_owned(),
                key: key.to_owned(),
                account_id: account.to_owned(),
            };
        }
        if let Some(exit) = server.process.try_wait().unwrap() {
            panic!("vidgate serve exited ({exit}): {log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lifts the development account's limits and adds credit, so that every
/// generation the bench submits is accepted.
fn lift_limits_and_add_credit(binary: &Path, data_dir: &Path, account_id: &str) {
    run_admin(
        binary,
        data_dir,
        &[
            "account",
            "limits",
            account_id,
            "--rps",
            "1000000",
            "--burst",
            "1000000",
            "--concurrency",
            "100000",
        ],
    );
    // The development account's credit pays for a thousand queued
    // generations, not for ten thousand.
    run_admin(
        binary,
        data_dir,
        &["account", "credit", account_id, "--usd", "100000"],
    );
}

/// Submits a generation that keeps the one worker busy, then the
/// generations the streams follow, so that those stay queued; their ids.
async fn submit_blocker_and_followed_generations(
    client: &reqwest::Client,
    account: &DevelopmentAccount,
    count: usize,
) -> Vec<String> {
    let submit = |prompt: String| {
        client
            .post(format!(
                "{}/run/vendor_1/model_1/text-to-video",
                account.api_base
            ))
            .bearer_auth(&account.key)
            .json(&body(&prompt))
            .send()
    };
    // The one worker is kept busy, so every other generation stays queued.
    submit("[sim:sleep=600000] the blocker".into())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for index in 0..count / STREAMS_PER_GENERATION {
        let record: Value = submit(format!("followed {index}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = record["id"].as_str();
        ids.push(
            id.unwrap_or_else(|| panic!("not submitted: {record}"))
                .to_owned(),
        );
    }
    ids
}

/// Opens `count` event streams over the generations in turn, each on a
/// connection of its own, and hands each to a task that drains it.
async fn open_and_drain_streams(
    account: &DevelopmentAccount,
    ids: &[String],
    count: usize,
) -> OpenStreams {
    let stream_client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut open = Vec::with_capacity(count);
    for index in 0..count {
        let id = &ids[index % ids.len()];
        let mut response = stream_client
            .get(format!("{}/generations/{id}/events", account.api_base))
            .bearer_auth(&account.key)
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        read_stream_until(&mut response, "id: queued-0")
            .await
            .unwrap();
        open.push(response);
    }
    // Each stream is drained by a task of its own, as a client would.
    let keep_alives = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let readers: Vec<_> = open
        .into_iter()
        .map(|mut response| {
            let keep_alives = keep_alives.clone();
            tokio::spawn(async move {
                while let Ok(Some(chunk)) = response.chunk().await {
                    if chunk.starts_with(b": keep-alive") {
                        keep_alives.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    OpenStreams {
        readers,
        keep_alives,
        _client: stream_client,
    }
}

/// Lets the queued generations settle, then takes the node's memory and a
/// read's latencies before any stream is open.
async fn measure_without_streams(
    pid: u32,
    account: &DevelopmentAccount,
    ids: &[String],
) -> WithoutStreams {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = resident_kib(pid);
    let latencies = read_latencies(&account.api_base, &account.key, &ids[0], 2000).await;
    WithoutStreams {
        idle_kib,
        latencies,
    }
}

/// Measures and prints the memory and idle CPU the open streams cost and
/// what they do to a read's latency, against the figures taken before
/// they were opened.
async fn print_cost_of_open_streams(
    pid: u32,
    account: &DevelopmentAccount,
    ids: &[String],
    count: usize,
    without_streams: WithoutStreams,
    streams: &OpenStreams,
) {
    let WithoutStreams {
        idle_kib,
        latencies: before,
    } = without_streams;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let open_kib = resident_kib(pid);
    let idle_seconds = 20;
    let ticks_before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
    let ticks = cpu_ticks(pid) - ticks_before;
    // SAFETY: sysconf reads a constant of the system.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let during = read_latencies(&account.api_base, &account.key, &ids[0], 2000).await;
    println!(
        "resident memory: {:.1} MiB idle, {:.1} MiB with {count} streams open: {:.1} KiB per stream",
        idle_kib as f64 / 1024.0,
        open_kib as f64 / 1024.0,
        (open_kib.saturating_sub(idle_kib)) as f64 / count as f64
    );
    println!(
        "CPU with {count} idle streams: {:.2} % of one core over {idle_seconds} s ({} keep-alive comments sent)",
        ticks as f64 / ticks_per_second / idle_seconds as f64 * 100.0,
        streams
            .keep_alives
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    let p99 = |latencies: &[Duration]| {
        let mut sorted = latencies.to_vec();
        sorted.sort();
        sorted[(sorted.len() * 99).div_ceil(100) - 1]
    };
    let p99_ratio = p99(&during).as_secs_f64() / p99(&before).as_secs_f64();
    report("GET /generations/{id}, no streams open", before);
    report(
        &format!("GET /generations/{{id}}, {count} streams open"),
        during,
    );
    println!("GET p99 with {count} streams open / with none (same run): {p99_ratio:.2}");
}

/// Sends SIGTERM with the streams open and prints how soon the process
/// exited and how many streams it ended, which is what a deploy sees.
async fn stop_with_streams_open(server: StreamsServer, streams: OpenStreams, count: usize) {
    let StreamsServer {
        mut process,
        pid,
        _directory,
        ..
    } = server;
    let started = Instant::now();
    // SAFETY: a signal to the child `start_server_for_streams` started.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let stopped = tokio::task::spawn_blocking(move || {
        process.wait().unwrap();
        started.elapsed()
    })
    .await
    .unwrap();
    let mut ended = 0;
    for reader in streams.readers {
        if tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .is_ok()
        {
            ended += 1;
        }
    }
    println!(
        "SIGTERM with {count} streams open: the process exited after {:.0} ms; {ended} streams ended",
        stopped.as_secs_f64() * 1e3
    );
}

/// One server with `count` event streams open.
async fn streams_of(label: &str, binary: &Path, count: usize) {
    println!(
        "== {label}: {count} event streams on one node ({}, SQLite)",
        binary.display()
    );
    let mut server = start_server_for_streams(binary, count);
    let account = development_account_from_log(&mut server).await;
    lift_limits_and_add_credit(binary, &server.data_dir, &account.account_id);
    // The submitting client lives until the end, so that its idle pooled
    // connection stays open through every measurement.
    let client = reqwest::Client::new();
    let ids = submit_blocker_and_followed_generations(&client, &account, count).await;
    let without_streams = measure_without_streams(server.pid, &account, &ids).await;
    let streams = open_and_drain_streams(&account, &ids, count).await;
    print_cost_of_open_streams(server.pid, &account, &ids, count, without_streams, &streams).await;
    stop_with_streams_open(server, streams, count).await;
}

#[tokio::main]
async fn main() {
    let sections: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with("--"))
        .collect();
    let wanted = |name: &str| sections.is_empty() || sections.iter().any(|s| s == name);
    let postgres = std::env::var("VIDGATE_BENCH_POSTGRES_URL").ok();
    if wanted("latency") {
        latency(postgres.as_deref()).await;
    }
    if wanted("streams") {
        streams().await;
    }
}
