//! docs/deploy.md's worked example, run as written: the fenced `sh` blocks
//! that follow a `<!-- tested -->` line, in order, in one bash script,
//! against a fresh PostgreSQL database, Redis and a moto S3 server. The test
//! only sets the variables of the guide's first (untested) block to those
//! servers and moves the ports 8080 and 8081 to free ones. It needs
//! `VIDGATE_TEST_POSTGRES_URL`, `VIDGATE_TEST_REDIS_URL` and
//! `VIDGATE_TEST_MOTO_SERVER`, and `curl` and `jq` as the guide does.

use crate::test_database;

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use support::services::{Moto, free_port, moto_program, test_variable};
use test_database::{PostgresTestDatabase, postgres_server_url};

const GUIDE: &str = include_str!("../../../../docs/deploy.md");
const BUCKET: &str = "vidgate-media";

/// The `sh` blocks of the guide marked `<!-- tested -->`, in order.
fn tested_blocks(guide: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "<!-- tested -->" {
            continue;
        }
        assert_eq!(
            lines.next().map(str::trim),
            Some("```sh"),
            "a tested marker must be followed by a ```sh block"
        );
        let block: Vec<&str> = lines.by_ref().take_while(|line| *line != "```").collect();
        blocks.push(block.join("\n"));
    }
    blocks
}

/// Single-quotes `value` for bash.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[test]
fn the_guide_has_tested_blocks_that_run_the_whole_example() {
    let script = tested_blocks(GUIDE).join("\n");
    for step in [
        "VIDGATE_DATABASE_URL_FILE",
        "vidgate admin migrate",
        "vidgate serve --check-config",
        "--role api",
        "--role worker",
        "vidgate run ",
    ] {
        assert!(script.contains(step), "the tested blocks lack {step:?}");
    }
}

#[tokio::test]
async fn the_deploy_guide_worked_example_runs_as_written() {
    const NAME: &str = "the deploy guide's worked example";
    let Some(postgres_server) = postgres_server_url(NAME) else {
        return;
    };
    let Some(redis_url) = test_variable("VIDGATE_TEST_REDIS_URL", NAME) else {
        return;
    };
    let Some(moto_program) = moto_program(NAME) else {
        return;
    };
    let database = PostgresTestDatabase::create(&postgres_server).await;
    let moto = Moto::start(&moto_program, BUCKET).await;
    let work = tempfile::tempdir().unwrap();
    let (first_port, second_port) = (free_port(), free_port());

    let environment = [
        ("DATABASE_URL", database.url.clone()),
        ("REDIS_URL", redis_url),
        ("VIDGATE_STORAGE", format!("s3://{BUCKET}/production")),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_ENDPOINT_URL", moto.endpoint.clone()),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("PUBLIC_URL", "http://127.0.0.1:8080".to_owned()),
        ("SECRETS", format!("{}/secrets", work.path().display())),
    ];
    let mut script = String::from("set -euo pipefail\n");
    for (name, value) in &environment {
        script.push_str(&format!("export {name}={}\n", quoted(value)));
    }
    // Whatever happens, no node outlives the script.
    script.push_str("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    script.push_str(&tested_blocks(GUIDE).join("\n"));
    let script = script
        .replace("8080", &first_port.to_string())
        .replace("8081", &second_port.to_string());

    let binary_directory = Path::new(env!("CARGO_BIN_EXE_vidgate")).parent().unwrap();
    let path = format!(
        "{}:{}",
        binary_directory.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("PATH", path)
        .env_remove("VIDGATE_DATABASE_URL")
        .env_remove("VIDGATE_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
        .await
        .expect("the worked example finishes within 5 minutes")
        .unwrap();
    let logs: String = ["api-1", "api-2", "worker"]
        .iter()
        .map(|node| {
            let log = std::fs::read_to_string(work.path().join(format!("logs/{node}.log")))
                .unwrap_or_default();
            format!("--- {node}\n{log}")
        })
        .collect();
    assert!(
        output.status.success(),
        "the worked example failed\nstdout:\n{}\nstderr:\n{}\n{logs}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );

    // The client downloaded a real MP4 ...
    let clip = std::fs::read(work.path().join("lighthouse.mp4")).unwrap();
    assert_eq!(&clip[4..8], b"ftyp");
    // ... that the worker put in the bucket, under the prefix.
    let keys = moto.keys(BUCKET, "production/outputs/").await;
    assert!(
        keys.iter().any(|key| key.ends_with(".mp4")),
        "no clip in the bucket: {keys:?}"
    );
    // Secrets went to files that only their owner may read.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(work.path().join("secrets/database_url"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    // Nodes starting on a migrated database log nothing alarming.
    for alarming in ["WARN", "ERROR", "already exists"] {
        assert!(!logs.contains(alarming), "{alarming} in the logs:\n{logs}");
    }
}
