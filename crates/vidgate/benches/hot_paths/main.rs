//! The hot paths of issue 18 against references measured in the same run,
//! printed as ratios (absolute figures vary with the machine and its load;
//! the ratios are the point). Nothing here is asserted: it prints.
//!
//! `cargo bench -p vidgate --bench hot_paths [-- SECTION…]` with sections
//! `reads`, `submit`, `lists`, `memory`, `sign-in-memory`, `postgres` (all
//! by default; `postgres` needs `VIDGATE_BENCH_POSTGRES_URL` or
//! `VIDGATE_TEST_POSTGRES_URL`, a server on which it creates and drops a
//! database; it measures PostgreSQL's reads, with the CPU each process used
//! per read, and its submits, on one node and on three, against pgbench,
//! and its lists too with `lists`). `VIDGATE_BENCH_SECONDS` sets the length
//! of each run (default 5). It needs `wrk`, `python3` (the SQLite
//! reference) and `pgbench` (the PostgreSQL one) on the PATH.
//!
//! vidgate runs as the real release binary (`vidgate serve --role api`, so
//! submitted jobs stay queued and the figures are the API and the store),
//! loaded by `wrk -t2 -c32` over loopback like the issue's measurements.
//! `VIDGATE_BENCH_BINARY` runs another build of `vidgate` instead (a copy
//! built from an earlier commit, for before/after figures).

mod cpu;
mod references;
mod seed;
mod wrk;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use wrk::{Load, Measured};

/// The `vidgate` binary under test.
fn vidgate_binary() -> String {
    std::env::var("VIDGATE_BENCH_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_vidgate").to_owned())
}

/// One `vidgate serve` process, killed when dropped.
struct Node {
    child: Child,
    api_base: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    /// An API node: it runs no jobs, so nothing renders while the API and
    /// the store are measured.
    fn start(environment: &[(&str, &str)]) -> Node {
        Node::start_as(environment, &["--role", "api"])
    }

    /// A node that also runs jobs, on the local engine.
    fn start_rendering(environment: &[(&str, &str)]) -> Node {
        Node::start_as(environment, &["--role", "all", "--workers", "2"])
    }

    fn start_as(environment: &[(&str, &str)], role_arguments: &[&str]) -> Node {
        // The public endpoints' fair-use limit per client address (5/s by
        // default) would refuse almost all of a load from one address; it
        // is raised as the accounts' limits are, since it is not what is
        // measured here.
        let mut child = Command::new(vidgate_binary())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(role_arguments)
            .args([
                "--public-rate-limit",
                "1000000",
                "--public-burst",
                "1000000",
            ])
            .envs(environment.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("vidgate serve starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let api_base = loop {
            let line = lines
                .next()
                .expect("vidgate serve says where it listens")
                .unwrap();
            if let Some(api_base) = line.strip_prefix("vidgate API base: ") {
                break api_base.trim().to_owned();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Node { child, api_base }
    }

    /// Resident memory of the server process, in MB.
    fn resident_megabytes(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("Linux /proc");
        let kilobytes: f64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .expect("VmRSS");
        kilobytes / 1024.0
    }
}

/// Runs `vidgate admin …` and parses the JSON it prints.
fn admin(environment: &[(&str, &str)], arguments: &[&str]) -> Value {
    let output = Command::new(vidgate_binary())
        .arg("admin")
        .args(arguments)
        .envs(environment.iter().copied())
        .output()
        .expect("vidgate admin runs");
    assert!(
        output.status.success(),
        "admin {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("admin prints JSON")
}

/// An account with ample credit and limits no benchmark reaches; returns
/// its id and API key. The operator's actions bound an account's limits
/// (10,000 requests a second), which a fast machine's `wrk` can pass, so
/// the limits are then lifted in the database, as only a benchmark should.
fn unlimited_account(environment: &[(&str, &str)], name: &str) -> (String, String) {
    let created = admin(
        environment,
        &[
            "account",
            "create",
            "--name",
            name,
            "--credit-usd",
            "1000000",
        ],
    );
    let account_id = created["account_id"].as_str().unwrap().to_owned();
    lift_limits(environment, &account_id);
    (account_id, created["api_key"].as_str().unwrap().to_owned())
}

/// Sets `account_id`'s rate and concurrency limits far above any load here,
/// with `psql` on PostgreSQL and Python's `sqlite3` on SQLite (both already
/// needed by the references). Nodes read limits when they start, and every
/// node here starts after its accounts are made.
fn lift_limits(environment: &[(&str, &str)], account_id: &str) {
    let statement = format!(
        "UPDATE accounts SET rate_per_second = 100000000, rate_burst = 100000000, \
         max_concurrent = 100000000 WHERE id = '{account_id}'"
    );
    let setting = |name: &str| {
        environment
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| *value)
    };
    let output = match (setting("VIDGATE_DATABASE_URL"), setting("VIDGATE_DATA_DIR")) {
        (Some(database_url), _) => Command::new("psql")
            .args([
                database_url,
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &statement,
            ])
            .output(),
        (None, Some(data_dir)) => Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys\n\
                 db = sqlite3.connect(sys.argv[1])\n\
                 assert db.execute(sys.argv[2]).rowcount == 1\n\
                 db.commit()",
            ])
            .arg(Path::new(data_dir).join("vidgate.sqlite"))
            .arg(&statement)
            .output(),
        (None, None) => panic!("a benchmark node's environment names its database"),
    }
    .expect("psql or python3 runs");
    assert!(
        output.status.success(),
        "lifting the limits of {account_id} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One line of the report: a measurement and what it is compared with.
struct Line {
    what: String,
    measured: Measured,
    /// The figure the ratio divides by, and what it is.
    reference: Option<(f64, String)>,
}

struct Report {
    lines: Vec<Line>,
    notes: Vec<String>,
}

impl Report {
    fn add(&mut self, what: &str, measured: Measured, reference: Option<(f64, &str)>) {
        let line = Line {
            what: what.to_owned(),
            measured,
            reference: reference.map(|(figure, name)| (figure, name.to_owned())),
        };
        println!("{}", render(&line));
        self.lines.push(line);
    }

    fn note(&mut self, note: String) {
        println!("{note}");
        self.notes.push(note);
    }
}

fn milliseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn render(line: &Line) -> String {
    let ratio = match &line.reference {
        Some((figure, name)) => format!(
            "{:.2} of {name} ({figure:.0}/s)",
            line.measured.requests_per_second / figure
        ),
        None => "reference".to_owned(),
    };
    let failures = match line.measured.failures {
        0 => String::new(),
        count => format!(" **{count} failed requests: not a valid figure**"),
    };
    format!(
        "| {} | {:.0}/s | {:.2} ms | {:.2} ms | {ratio} |{failures}",
        line.what,
        line.measured.requests_per_second,
        milliseconds(line.measured.p50),
        milliseconds(line.measured.p99),
    )
}

fn get(load: Load, url: &str, key: Option<&str>) -> Measured {
    let headers: Vec<String> = key
        .map(|key| format!("Authorization: Bearer {key}"))
        .into_iter()
        .collect();
    wrk::run(load, url, &headers, None)
}

/// `get` of a node's `url`, with the CPU each side used per request.
fn get_measuring_cpu(load: Load, node: &Node, url: &str, key: &str) -> (Measured, cpu::PerRequest) {
    let start = cpu::sample(Some(node.child.id()));
    let measured = get(load, url, Some(key));
    let end = cpu::sample(Some(node.child.id()));
    let requests = measured.requests_per_second * load.seconds as f64;
    (measured, cpu::per_request(start, end, requests))
}

const SUBMIT_BODY: &str = r#"{"prompt":"benchmark","duration":5}"#;

/// Measures `reference_url`, then vidgate's `url`, then the reference
/// again, and reports vidgate against the mean of the two reference runs,
/// so that a machine whose load drifts during the run moves both sides.
fn against_reference(
    load: Load,
    report: &mut Report,
    what: &str,
    url: &str,
    headers: &[String],
    reference_what: &str,
    reference_url: &str,
) {
    let before = wrk::run(load, reference_url, headers, None);
    let measured = wrk::run(load, url, headers, None);
    let after = wrk::run(load, reference_url, headers, None);
    report.add(&format!("{reference_what} (before)"), before, None);
    report.add(&format!("{reference_what} (after)"), after, None);
    let reference = (before.requests_per_second + after.requests_per_second) / 2.0;
    report.add(what, measured, Some((reference, reference_what)));
}

/// Fetches a static document of vidgate's with its entity tag, and names
/// the path a bare handler serves the same bytes under.
async fn document(client: &reqwest::Client, node: &Node, path: &str) -> references::Document {
    let response = client
        .get(format!("{}{path}", node.api_base))
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    let etag = response.headers()["etag"].clone();
    references::Document {
        path: path.to_owned(),
        body: response.bytes().await.unwrap(),
        etag: axum::http::HeaderValue::from_bytes(etag.as_bytes()).unwrap(),
    }
}

/// Reads: `GET /generations/{id}` and the middleware stack against a bare
/// axum handler returning the same JSON; the static documents (`/models…`,
/// `/openapi.json`) each against a bare handler returning the same bytes,
/// and a conditional GET of one (304) against a bare 304.
async fn reads(load: Load, node: &Node, key: &str, report: &mut Report) {
    let client = reqwest::Client::new();
    let generation_url = submit_one(&client, node, key).await;
    let generation = get_json(&client, &generation_url, key).await;
    let mut documents = Vec::new();
    for path in ["/models/vendor_1/model_1", "/models", "/openapi.json"] {
        documents.push(document(&client, node, path).await);
    }
    let bare = format!(
        "http://{}",
        references::start_bare_handler(generation, &documents)
    );

    let bare_before = get(load, &format!("{bare}/"), None);
    report.add("bare axum handler, same JSON (before)", bare_before, None);
    let mut measured = vec![
        (
            "`GET /generations/{id}`",
            get(load, &generation_url, Some(key)),
        ),
        (
            "unknown route, 404 (the middleware stack)",
            Measured {
                // Every answer is the 404 this line measures.
                failures: 0,
                ..get(load, &format!("{}/nowhere", node.api_base), None)
            },
        ),
    ];
    let bare_after = get(load, &format!("{bare}/"), None);
    report.add("bare axum handler, same JSON (after)", bare_after, None);
    let bare_generation = (bare_before.requests_per_second + bare_after.requests_per_second) / 2.0;
    for (what, figure) in measured.drain(..) {
        report.add(what, figure, Some((bare_generation, "bare handler")));
    }

    for document in &documents {
        against_reference(
            load,
            report,
            &format!("`GET {}`", document.path),
            &format!("{}{}", node.api_base, document.path),
            &[],
            &format!("bare handler, the same {} bytes", document.body.len()),
            &format!("{bare}{}", document.path),
        );
    }
    let held = &documents[0];
    against_reference(
        load,
        report,
        &format!("`GET {}` with `If-None-Match` (304)", held.path),
        &format!("{}{}", node.api_base, held.path),
        &[format!("If-None-Match: {}", held.etag.to_str().unwrap())],
        "bare handler answering 304",
        &format!("{bare}{}/304", held.path),
    );
}

/// Submits on SQLite, one account, at the server's default
/// (`--sqlite-synchronous full`, every commit synced) and at `normal` on a
/// node of its own, each against the same-shaped transaction on one
/// connection at the same setting: the cost of power-loss durable money,
/// in vidgate and without it.
fn sqlite_submit(load: Load, node: &Node, key: &str, work: &Path, report: &mut Report) {
    let submit_url = |node: &Node| format!("{}/run/vendor_1/model_1/text-to-video", node.api_base);
    let script = wrk::post_script(work, "submit_one", &[key.to_owned()], SUBMIT_BODY);
    let full = wrk::run(load, &submit_url(node), &[], Some(&script));

    let normal_directory = work.join("sqlite_normal");
    let normal_directory_text = normal_directory.to_str().unwrap();
    let normal_environment = [
        ("VIDGATE_DATA_DIR", normal_directory_text),
        ("VIDGATE_SQLITE_SYNCHRONOUS", "normal"),
    ];
    let (_, normal_key) = unlimited_account(&normal_environment, "bench normal");
    let normal_node = Node::start(&normal_environment);
    let normal_script = wrk::post_script(work, "submit_normal", &[normal_key], SUBMIT_BODY);
    let normal = wrk::run(load, &submit_url(&normal_node), &[], Some(&normal_script));
    drop(normal_node);

    let mut references = Vec::new();
    for synchronous in ["FULL", "NORMAL"] {
        let directory = work.join(format!("reference_{synchronous}"));
        let directory_text = directory.to_str().unwrap();
        let environment = [("VIDGATE_DATA_DIR", directory_text)];
        let (account_id, _) = unlimited_account(&environment, "reference");
        references.push(references::sqlite_submit_shape(
            &directory.join("vidgate.sqlite"),
            synchronous,
            load.seconds,
            &account_id,
        ));
    }
    report.add(
        "submit, SQLite, one account, synchronous=full (default)",
        full,
        Some((references[0], "raw transaction, synchronous=FULL")),
    );
    report.add(
        "submit, SQLite, one account, synchronous=normal",
        normal,
        Some((references[1], "raw transaction, synchronous=NORMAL")),
    );
    report.note(format!(
        "cost of synchronous=full on SQLite submits: {:.0}/s against {:.0}/s at normal ({:.2} of it), p99 {:.2} ms against {:.2} ms; the raw transaction {:.0}/s against {:.0}/s ({:.2})",
        full.requests_per_second,
        normal.requests_per_second,
        full.requests_per_second / normal.requests_per_second,
        milliseconds(full.p99),
        milliseconds(normal.p99),
        references[0],
        references[1],
        references[0] / references[1],
    ));
}

/// `GET /generations` with each filter on an account of 10k stored
/// generations and on one of 1M, in the same database behind the same node,
/// measured in turns (10k, 1M, 10k, 1M) so that the machine's drift and the
/// cache fall on both sizes alike; the ratios compare 1M with 10k. Then a
/// 20-row page against a single `GET /generations/{id}`, also in turns.
async fn lists(
    load: Load,
    node: &Node,
    database_url: &str,
    accounts: &ListAccounts,
    store: &str,
    report: &mut Report,
) {
    const TURNS: usize = 2;
    // Seeded generations are numbered across both accounts (ids are
    // unique): the small account's rows come after the large one's.
    const LARGE: (i64, i64) = (1, 1_000_000);
    const SMALL: (i64, i64) = (1_000_001, 1_010_000);
    let paths = |(first, last): (i64, i64)| {
        let cursor = seed::cursor_after(first + (last - first) / 2);
        vec![
            ("unfiltered", "/generations".to_owned()),
            (
                "status=failed (no match)",
                "/generations?status=failed".to_owned(),
            ),
            (
                "model=vendor_2/model_2",
                "/generations?model=vendor_2/model_2".to_owned(),
            ),
            (
                "model=vendor_6/model_6 (no match)",
                "/generations?model=vendor_6/model_6".to_owned(),
            ),
            ("cursor halfway", format!("/generations?cursor={cursor}")),
            (
                "status=succeeded, cursor halfway",
                format!("/generations?status=succeeded&cursor={cursor}"),
            ),
        ]
    };
    seed::generations(database_url, &accounts.small.0, SMALL.0, SMALL.1).await;
    seed::generations(database_url, &accounts.large.0, LARGE.0, LARGE.1).await;
    for ((what, small_path), (_, large_path)) in paths(SMALL).iter().zip(paths(LARGE)) {
        let small_url = format!("{}{small_path}", node.api_base);
        let large_url = format!("{}{large_path}", node.api_base);
        let (small, large) = in_turns(TURNS, || {
            (
                get(load, &small_url, Some(&accounts.small.1)),
                get(load, &large_url, Some(&accounts.large.1)),
            )
        });
        report.add(&format!("list {what}, {store}, 10k rows"), small, None);
        report.add(
            &format!("list {what}, {store}, 1M rows"),
            large,
            Some((small.requests_per_second, "10k rows")),
        );
        report.note(format!(
            "list {what}, {store}: p99 at 1M / p99 at 10k = {:.2}",
            large.p99.as_secs_f64() / small.p99.as_secs_f64()
        ));
    }

    // Issue 42 asks a 20-row page for at least half a single GET's rate.
    let client = reqwest::Client::new();
    let generation_url = submit_one(&client, node, &accounts.large.1).await;
    let list_url = format!("{}/generations", node.api_base);
    let (mut single_cpu, mut page_cpu) = (Vec::new(), Vec::new());
    let (single, page) = in_turns(TURNS, || {
        let (single, cpu) = get_measuring_cpu(load, node, &generation_url, &accounts.large.1);
        single_cpu.push(cpu);
        let (page, cpu) = get_measuring_cpu(load, node, &list_url, &accounts.large.1);
        page_cpu.push(cpu);
        (single, page)
    });
    report.add(&format!("`GET /generations/{{id}}`, {store}"), single, None);
    report.add(
        &format!("list of 20, {store}, 1M rows"),
        page,
        Some((single.requests_per_second, "a single GET")),
    );
    report.note(format!(
        "CPU per request, {store}: a single GET: {}; a list of 20: {}",
        cpu::mean(&single_cpu).describe("vidgate", "wrk"),
        cpu::mean(&page_cpu).describe("vidgate", "wrk"),
    ));
}

/// The two accounts the list section reads: (account id, API key) each.
struct ListAccounts {
    small: (String, String),
    large: (String, String),
}

impl ListAccounts {
    fn create(environment: &[(&str, &str)]) -> ListAccounts {
        ListAccounts {
            small: unlimited_account(environment, "lists 10k"),
            large: unlimited_account(environment, "lists 1M"),
        }
    }
}

/// Runs `measure` (which measures A, then B) `turns` times and returns A's
/// and B's means, so that neither side always runs first.
fn in_turns(
    turns: usize,
    mut measure: impl FnMut() -> (Measured, Measured),
) -> (Measured, Measured) {
    let runs: Vec<(Measured, Measured)> = (0..turns).map(|_| measure()).collect();
    (
        wrk::mean(runs.iter().map(|(first, _)| *first)),
        wrk::mean(runs.iter().map(|(_, second)| *second)),
    )
}

/// Submits `SUBMIT_BODY` to M1 and returns the generation's URL.
async fn submit_one(client: &reqwest::Client, node: &Node, key: &str) -> String {
    let submitted = client
        .post(format!(
            "{}/run/vendor_1/model_1/text-to-video",
            node.api_base
        ))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(SUBMIT_BODY)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    submitted["urls"]["get"].as_str().unwrap().to_owned()
}

async fn get_json(client: &reqwest::Client, url: &str, key: &str) -> Value {
    client
        .get(url)
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Resident memory of a node that runs jobs on the local engine: idle,
/// after rendering a few 720p clips two at a time, and 10 s later. The
/// encoder's threads take tens of MB each while they render.
async fn memory_after_renders(work: &Path, report: &mut Report) {
    const CLIPS: usize = 6;
    let data_dir = work.join("rendering");
    let data_dir_text = data_dir.to_str().unwrap().to_owned();
    let environment = [("VIDGATE_DATA_DIR", data_dir_text.as_str())];
    let (_, key) = unlimited_account(&environment, "rendering");
    let node = Node::start_rendering(&environment);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = node.resident_megabytes();
    let client = reqwest::Client::new();
    let mut urls = Vec::new();
    for _ in 0..CLIPS {
        urls.push(submit_one(&client, &node, &key).await);
    }
    for url in &urls {
        loop {
            let generation = get_json(&client, url, &key).await;
            match generation["status"].as_str() {
                Some("succeeded") => break,
                Some("queued" | "running") => tokio::time::sleep(Duration::from_millis(200)).await,
                other => panic!("a benchmark clip ended {other:?}: {generation}"),
            }
        }
    }
    let after = node.resident_megabytes();
    tokio::time::sleep(Duration::from_secs(10)).await;
    report.note(format!(
        "resident memory, node rendering {CLIPS} clips of 5 s at 720p: idle {idle:.1} MB, after the renders {after:.1} MB, 10 s later {:.1} MB",
        node.resident_megabytes()
    ));
}

/// Resident memory of an API node while 60 wrong sign-ins arrive at once
/// from two addresses (30 each, the address limit's burst) for emails that
/// have no user, so each hashes against the dummy hash (issue 50): idle,
/// the peak while they are answered, when all are answered, and 30 s later.
/// Each Argon2id check takes 19 MiB; the hashing slots bound how many run at
/// once, and the attempts past what the slots can take in time are refused.
async fn memory_during_sign_in_burst(work: &Path, report: &mut Report) {
    const ATTEMPTS: usize = 60;
    let data_dir = work.join("sign-in");
    let data_dir_text = data_dir.to_str().unwrap().to_owned();
    // Loopback is the proxy, so the two addresses are X-Forwarded-For's.
    let environment = [
        ("VIDGATE_DATA_DIR", data_dir_text.as_str()),
        ("VIDGATE_TRUSTED_PROXIES", "127.0.0.1/32"),
    ];
    let node = Node::start(&environment);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = node.resident_megabytes();
    let client = reqwest::Client::new();
    let sign_in_url = node.api_base.replace("/api/v1", "/dashboard/sign-in");
    // The form's pre-session CSRF token is also its cookie (double submit).
    let page = client.get(&sign_in_url).send().await.unwrap();
    let cookie = page
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .expect("the sign-in page sets its CSRF cookie")
        .to_owned();
    let token = cookie.split_once('=').unwrap().1.to_owned();
    let attempts: Vec<_> = (0..ATTEMPTS)
        .map(|attempt| {
            let request = client
                .post(&sign_in_url)
                .header("cookie", &cookie)
                .header("x-forwarded-for", format!("198.51.100.{}", attempt % 2 + 1))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!(
                    "email=nobody{attempt}%40example.com&password=wrong-password-{attempt}&csrf_token={token}"
                ));
            tokio::spawn(async move { request.send().await.map(|answer| answer.status().as_u16()) })
        })
        .collect();
    let mut peak = idle;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for attempt in attempts {
        while !attempt.is_finished() {
            peak = peak.max(node.resident_megabytes());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let status = attempt.await.unwrap().expect("the sign-in is answered");
        *statuses.entry(status).or_default() += 1;
    }
    let answered = node.resident_megabytes();
    peak = peak.max(answered);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let statuses: Vec<String> = statuses
        .iter()
        .map(|(status, count)| format!("{count}x {status}"))
        .collect();
    report.note(format!(
        "resident memory, {ATTEMPTS} wrong sign-ins at once from 2 addresses ({}): idle {idle:.1} MB, peak {peak:.1} MB (+{:.1} MB), all answered {answered:.1} MB, 30 s later {:.1} MB",
        statuses.join(", "),
        peak - idle,
        node.resident_megabytes()
    ));
}

/// Submits on PostgreSQL, one account and 16, against pgbench running the
/// same-shaped transaction over 16 accounts with 32 clients; then over the
/// 16 accounts on three API nodes sharing the database (`others` beside
/// `node`), each loaded by a wrk of its own with a third of the
/// connections, against the same pgbench figure.
fn postgres_submit(
    load: Load,
    node: &Node,
    others: [&Node; 2],
    keys: &[String],
    database_url: &str,
    work: &Path,
    report: &mut Report,
) {
    let url = |node: &Node| format!("{}/run/vendor_1/model_1/text-to-video", node.api_base);
    let one = wrk::post_script(work, "submit_pg_one", &keys[..1], SUBMIT_BODY);
    let many = wrk::post_script(work, "submit_pg_many", keys, SUBMIT_BODY);
    let one_account = wrk::run(load, &url(node), &[], Some(&one));
    let many_accounts = wrk::run(load, &url(node), &[], Some(&many));
    let pgbench = references::postgres_submit_shape(
        database_url,
        work,
        load.connections,
        keys.len() as u32,
        load.seconds,
    );
    let third = Load {
        threads: 1,
        connections: load.connections.div_ceil(3),
        seconds: load.seconds,
    };
    let three_nodes = std::thread::scope(|scope| {
        let runs: Vec<_> = [node, others[0], others[1]]
            .map(|node| {
                let (url, many) = (url(node), &many);
                scope.spawn(move || wrk::run(third, &url, &[], Some(many)))
            })
            .into_iter()
            .collect();
        wrk::together(runs.into_iter().map(|run| run.join().expect("wrk ran")))
    });
    let reference = Some((pgbench, "pgbench, same shape, 16 accounts"));
    report.add("submit, PostgreSQL, one account", one_account, reference);
    report.add("submit, PostgreSQL, 16 accounts", many_accounts, reference);
    report.add(
        "submit, PostgreSQL, 16 accounts, three nodes",
        three_nodes,
        reference,
    );
}

/// `GET /generations/{id}` on the PostgreSQL node, in turns with
/// PostgreSQL's own prepared point read of the same row by pgbench with 10
/// clients (the size of vidgate's pool), and a bare axum handler answering
/// the same JSON (issue 55).
async fn postgres_reads(
    load: Load,
    node: &Node,
    key: &str,
    database_url: &str,
    work: &Path,
    report: &mut Report,
) {
    let client = reqwest::Client::new();
    let generation_url = submit_one(&client, node, key).await;
    let generation = get_json(&client, &generation_url, key).await;
    let generation_id = generation["id"].as_str().unwrap().to_owned();
    let account_id = generation_account(database_url, &generation_id).await;
    let bare = format!("http://{}", references::start_bare_handler(generation, &[]));
    let point_read = |report: &mut Report| {
        let start = cpu::sample(None);
        let tps = references::postgres_point_read(
            database_url,
            work,
            10,
            &generation_id,
            &account_id,
            load.seconds,
        );
        let cpu = cpu::per_request(start, cpu::sample(None), tps * load.seconds as f64);
        report.note(format!(
            "pgbench, prepared point read of the generation, 10 clients: {tps:.0} tps; CPU per read: {}",
            cpu.describe("", "pgbench")
        ));
        tps
    };
    let before = point_read(report);
    let bare_figure = get(load, &format!("{bare}/"), None);
    let (read, cpu) = get_measuring_cpu(load, node, &generation_url, key);
    report.note(format!(
        "`GET /generations/{{id}}`, PostgreSQL: CPU per read: {}",
        cpu.describe("vidgate", "wrk")
    ));
    let after = point_read(report);
    let database = (before + after) / 2.0;
    report.add("bare axum handler, same JSON", bare_figure, None);
    report.add(
        "`GET /generations/{id}`, PostgreSQL",
        read,
        Some((database, "PostgreSQL's prepared point read (pgbench)")),
    );
    report.add(
        "`GET /generations/{id}`, PostgreSQL, against the bare handler",
        read,
        Some((bare_figure.requests_per_second, "bare handler")),
    );
}

/// The account of a stored generation.
async fn generation_account(database_url: &str, generation_id: &str) -> String {
    let output = Command::new("psql")
        .args([database_url, "-Atc"])
        .arg(format!(
            "SELECT account_id FROM generations WHERE id = '{generation_id}'"
        ))
        .output()
        .expect("psql runs");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The sections the command line asks for; none named means all of them.
struct Sections(Vec<String>);

impl Sections {
    /// Reads the section names from the command line, so that one part of
    /// the bench can be run alone.
    fn from_arguments() -> Sections {
        // cargo passes `--bench`; every other argument names a section.
        Sections(
            std::env::args()
                .skip(1)
                .filter(|argument| !argument.starts_with("--"))
                .collect(),
        )
    }

    /// Whether `section` runs: it was named, or nothing was.
    fn wants(&self, section: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|wanted| wanted == section)
    }
}

/// The wrk load every run uses, with its length from
/// `VIDGATE_BENCH_SECONDS` so that a quick look can be shorter.
fn load_from_environment() -> Load {
    Load {
        threads: 2,
        connections: 32,
        seconds: std::env::var("VIDGATE_BENCH_SECONDS")
            .ok()
            .and_then(|seconds| seconds.parse().ok())
            .unwrap_or(5),
    }
}

/// Runs the reads, submit and lists sections on one SQLite API node and
/// notes its resident memory, idle, after the load and once it settled.
async fn sqlite_node_sections(load: Load, sections: &Sections, work: &Path, report: &mut Report) {
    let data_dir = work.join("sqlite");
    let data_dir_text = data_dir.to_str().unwrap().to_owned();
    let environment = [("VIDGATE_DATA_DIR", data_dir_text.as_str())];
    let (_, key) = unlimited_account(&environment, "bench");
    let list_accounts = ListAccounts::create(&environment);
    let node = Node::start(&environment);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = node.resident_megabytes();
    if sections.wants("reads") {
        reads(load, &node, &key, report).await;
    }
    if sections.wants("submit") {
        sqlite_submit(load, &node, &key, work, report);
    }
    if sections.wants("lists") {
        let database_url = format!("sqlite://{}", data_dir.join("vidgate.sqlite").display());
        lists(load, &node, &database_url, &list_accounts, "SQLite", report).await;
    }
    let after_load = node.resident_megabytes();
    tokio::time::sleep(Duration::from_secs(10)).await;
    report.note(format!(
        "resident memory, SQLite node: idle {idle:.1} MB, at the end of the load {after_load:.1} MB, 10 s later {:.1} MB",
        node.resident_megabytes()
    ));
}

/// Runs the reads and submit sections on a PostgreSQL node in a database
/// of its own, and the lists with `lists` (named, or every section run),
/// or notes why they were skipped.
async fn postgres_sections(
    load: Load,
    postgres_url: Option<&str>,
    wants_postgres: bool,
    lists_too: bool,
    work: &Path,
    report: &mut Report,
) {
    match (postgres_url, wants_postgres) {
        (Some(admin_url), true) => {
            let name = format!("vidgate_bench_{}", std::process::id());
            let database_url = seed::create_postgres_database(admin_url, &name).await;
            let environment = [("VIDGATE_DATABASE_URL", database_url.as_str())];
            let keys: Vec<String> = (0..16)
                .map(|index| unlimited_account(&environment, &format!("bench {index}")).1)
                .collect();
            let list_accounts = ListAccounts::create(&environment);
            seed::pgbench_accounts(&database_url, keys.len() as u32).await;
            let node = Node::start(&environment);
            postgres_reads(load, &node, &keys[0], &database_url, work, report).await;
            let others = [Node::start(&environment), Node::start(&environment)];
            let others_by_reference = [&others[0], &others[1]];
            postgres_submit(
                load,
                &node,
                others_by_reference,
                &keys,
                &database_url,
                work,
                report,
            );
            drop(others);
            if lists_too {
                lists(
                    load,
                    &node,
                    &database_url,
                    &list_accounts,
                    "PostgreSQL",
                    report,
                )
                .await;
            }
            drop(node);
            seed::drop_postgres_database(admin_url, &name).await;
        }
        (None, true) => report.note(
            "PostgreSQL skipped: set VIDGATE_BENCH_POSTGRES_URL (or VIDGATE_TEST_POSTGRES_URL)"
                .into(),
        ),
        _ => {}
    }
}

/// Prints every line and note again together, since the lines printed as
/// they were measured are scattered through wrk's output.
fn print_summary(load: Load, report: &Report) {
    println!(
        "\nSummary ({} s per run, wrk -t{} -c{}):\n",
        load.seconds, load.threads, load.connections
    );
    println!("| path | vidgate | p50 | p99 | ratio |\n|---|---|---|---|---|");
    for line in &report.lines {
        println!("{}", render(line));
    }
    println!();
    for note in &report.notes {
        println!("- {note}");
    }
}

#[tokio::main]
async fn main() {
    wrk::require_wrk();
    let sections = Sections::from_arguments();
    let load = load_from_environment();
    let postgres_url = std::env::var("VIDGATE_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("VIDGATE_TEST_POSTGRES_URL"))
        .ok();
    let work = tempfile::tempdir().unwrap();
    let mut report = Report {
        lines: Vec::new(),
        notes: Vec::new(),
    };
    println!("| path | vidgate | p50 | p99 | ratio |\n|---|---|---|---|---|");

    sqlite_node_sections(load, &sections, work.path(), &mut report).await;
    if sections.wants("memory") {
        memory_after_renders(work.path(), &mut report).await;
    }
    if sections.wants("sign-in-memory") {
        memory_during_sign_in_burst(work.path(), &mut report).await;
    }
    postgres_sections(
        load,
        postgres_url.as_deref(),
        sections.wants("postgres"),
        sections.wants("lists"),
        work.path(),
        &mut report,
    )
    .await;
    print_summary(load, &report);
}
