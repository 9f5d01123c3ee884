//! Running the `vidgate` binary from tests: `serve` processes that are killed
//! when dropped, and `admin` commands that print JSON.
#![allow(dead_code)] // Each test binary uses a different part of this module.

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
        .env("VIDGATE_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("vidgate serve starts");
    // Owned by a `Node` at once, so a failure below still kills the process.
    let mut node = Node {
        child,
        api_base: None,
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
        if let Some(api_base) = line.strip_prefix("vidgate is listening on ") {
            node.api_base = Some(api_base.trim().to_owned());
            return node;
        }
        if line.starts_with("vidgate is running jobs") {
            return node;
        }
    }
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
