//! Running the `vidgate` binary from tests: `serve` processes that are killed
//! when dropped, and `admin` commands that print JSON.

pub mod services;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One `vidgate serve` process, killed when dropped.
pub struct Node {
    pub child: Child,
    /// `None` for a worker node, which has no HTTP listener.
    pub api_base: Option<String>,
    /// What the node printed on stdout up to and including its ready line.
    pub announcements: Vec<String>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    pub fn api_base(&self) -> &str {
        self.api_base.as_deref().expect("an API node")
    }
}

/// Starts `vidgate serve` on a free port with a two-second lease, two
/// workers and the simulation hooks, and waits until it says it is ready.
/// `environment` names the database (`VIDGATE_DATA_DIR`, `VIDGATE_DATABASE_URL`).
pub fn start_node(environment: &[(&str, &str)], extra_arguments: &[&str]) -> Node {
    start_node_with_stderr(environment, extra_arguments, Stdio::inherit(), "error")
}

/// As [`start_node`], with the node's log (at `VIDGATE_LOG=info`, as
/// operators run it) written to `log`.
pub fn start_node_logging_to(
    environment: &[(&str, &str)],
    extra_arguments: &[&str],
    log: &std::path::Path,
) -> Node {
    let log = std::fs::File::create(log).expect("the log file");
    start_node_with_stderr(environment, extra_arguments, log.into(), "info")
}

fn start_node_with_stderr(
    environment: &[(&str, &str)],
    extra_arguments: &[&str],
    stderr: Stdio,
    log_filter: &str,
) -> Node {
    let child = Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--lease-seconds",
            "2",
            "--workers",
            "2",
        ])
        .args(extra_arguments)
        .envs(environment.iter().copied())
        .env("VIDGATE_SIMULATION", "1")
        .env("VIDGATE_LOG", log_filter)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("vidgate serve starts");
    // Owned by a `Node` at once, so a failure below still kills the process.
    let mut node = Node {
        child,
        api_base: None,
        announcements: Vec::new(),
    };
    let stdout = node.child.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = received
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the node announces that it is ready");
        node.announcements.push(line.clone());
        if let Some(api_base) = line.strip_prefix("vidgate API base: ") {
            node.api_base = Some(api_base.trim().to_owned());
            return node;
        }
        if line.starts_with("vidgate is running jobs") {
            return node;
        }
    }
}

/// Runs `vidgate serve` expecting it to refuse to start, and returns what it
/// printed (stdout, then stderr). A node that starts instead is killed and
/// the test fails.
pub fn serve_refused(environment: &[(&str, &str)], extra_arguments: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(extra_arguments)
        .envs(environment.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vidgate serve starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child
        .try_wait()
        .expect("waiting for vidgate serve")
        .is_none()
    {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("the killed node's output");
            panic!(
                "vidgate serve {extra_arguments:?} started instead of refusing: {}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("the node's output");
    assert!(
        !output.status.success(),
        "vidgate serve {extra_arguments:?} exited successfully"
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `vidgate admin …` and returns its output, successful or not.
pub fn admin_output(environment: &[(&str, &str)], arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .arg("admin")
        .args(arguments)
        .envs(environment.iter().copied())
        .output()
        .expect("vidgate admin runs")
}

/// Runs `vidgate admin …`, asserts success and parses the JSON it prints.
pub fn admin(environment: &[(&str, &str)], arguments: &[&str]) -> Value {
    let output = admin_output(environment, arguments);
    assert!(
        output.status.success(),
        "admin {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("admin prints JSON")
}

/// Runs `vidgate admin …` on the SQLite database in `data_dir`, whatever
/// database URL the test process inherited; its output, successful or not.
pub fn sqlite_admin(data_dir: &std::path::Path, arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .arg("admin")
        .args(arguments)
        .env("VIDGATE_DATA_DIR", data_dir)
        .env_remove("VIDGATE_DATABASE_URL")
        .output()
        .expect("the vidgate binary runs")
}

/// `sqlite_admin`, asserting success and parsing the JSON it prints.
pub fn sqlite_admin_json(data_dir: &std::path::Path, arguments: &[&str]) -> Value {
    let output = sqlite_admin(data_dir, arguments);
    assert!(
        output.status.success(),
        "admin {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("admin prints JSON")
}

/// GETs `path` under `api_base` with `api_key`, asserting 200; the JSON body.
pub async fn get_json(
    client: &reqwest::Client,
    api_base: &str,
    path: &str,
    api_key: &str,
) -> Value {
    let response = client
        .get(format!("{api_base}{path}"))
        .bearer_auth(api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    response.json().await.unwrap()
}

/// Polls each generation in `ids` on `api_base` until it succeeds, every
/// `poll`; fails if one ends any other way or is still unfinished `within`
/// from now (`since` says after what, in the failure message).
pub async fn wait_until_all_succeeded(
    client: &reqwest::Client,
    api_base: &str,
    api_key: &str,
    ids: &[String],
    within: Duration,
    poll: Duration,
    since: &str,
) {
    let deadline = Instant::now() + within;
    for id in ids {
        loop {
            let path = format!("/generations/{id}");
            let generation = get_json(client, api_base, &path, api_key).await;
            let status = generation["status"].as_str().unwrap();
            if status == "succeeded" {
                break;
            }
            assert!(
                status == "queued" || status == "running",
                "{id} ended {status}: {generation}"
            );
            assert!(
                Instant::now() < deadline,
                "{id} never finished after {since}"
            );
            tokio::time::sleep(poll).await;
        }
    }
}

/// Polls `api_base` every 50 ms until at least `count` generations run
/// there, failing with `never` if that takes longer than `within`.
pub async fn wait_until_running(
    client: &reqwest::Client,
    api_base: &str,
    api_key: &str,
    count: usize,
    within: Duration,
    never: &str,
) {
    let deadline = Instant::now() + within;
    loop {
        let running_path = "/generations?status=running&limit=100";
        let running = get_json(client, api_base, running_path, api_key).await;
        if running["data"].as_array().unwrap().len() >= count {
            break;
        }
        assert!(Instant::now() < deadline, "{never}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
