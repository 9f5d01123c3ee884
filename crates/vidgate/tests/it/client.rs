//! The client commands against the real server: they retry what SPEC.md
//! section 7 says to retry (a forced 429, a 503 from a paused model), never
//! retry other 4xx, follow a run live (its event stream) and download the
//! clip.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::application::accounts;
use vidgate_server::backend::BackendsConfig;
use vidgate_server::operator_actions::{self, accounts::LimitChanges};
use vidgate_server::store::{AccountLimits, Store};
use vidgate_server::{RunningServer, ServerOptions};

struct TestServer {
    server: RunningServer,
    api_key: String,
    account_id: String,
    _data_dir: tempfile::TempDir,
}

async fn start(workers: usize) -> TestServer {
    let data_dir = tempfile::tempdir().unwrap();
    let mut options = ServerOptions::new(
        "127.0.0.1:0".parse().unwrap(),
        data_dir.path().to_path_buf(),
    );
    options.queue.workers = workers;
    options.queue.idle_poll = Duration::from_millis(100);
    options.backends = BackendsConfig::builtin(true);
    let server = vidgate_server::start(options).await.unwrap();
    let created = accounts::create_account(server.store.as_ref(), "client", Micros(50_000_000))
        .await
        .unwrap();
    TestServer {
        api_key: created.api_key,
        account_id: created.account.id,
        server,
        _data_dir: data_dir,
    }
}

async fn vidgate(server: &TestServer, arguments: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(arguments)
        .env("VIDGATE_BASE_URL", &server.server.api_base)
        .env("VIDGATE_API_KEY", &server.api_key)
        .output()
        .await
        .unwrap()
}

fn json_of(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

const M1: &str = "vendor_1/model_1/text-to-video";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_quote_and_run_with_wait_and_download() {
    let server = start(1).await;
    let models = json_of(&vidgate(&server, &["models", "--json"]).await);
    assert_eq!(models["data"].as_array().unwrap().len(), 6);
    let human = vidgate(&server, &["models"]).await;
    assert!(String::from_utf8_lossy(&human.stdout).contains("vendor_4/model_4/reference-to-video"));

    let quote = json_of(
        &vidgate(
            &server,
            &[
                "quote",
                M1,
                "--param",
                "duration=8",
                "--param",
                "resolution=1080p",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(quote["cost"]["amount_usd"], 1.6);

    let directory = tempfile::tempdir().unwrap();
    let clip = directory.path().join("clip.mp4");
    let output = vidgate(
        &server,
        &[
            "run",
            M1,
            "--prompt",
            "a paper boat [sim:sleep=1500]",
            "--param",
            "duration=2",
            "--param",
            "resolution=480p",
            "--out",
            clip.to_str().unwrap(),
            "--json",
        ],
    )
    .await;
    let finished = json_of(&output);
    assert_eq!(finished["status"], "succeeded");
    // Followed live: the second and a half it ran was shown, which a first
    // poll after the spec's 5 seconds would have missed.
    let shown = String::from_utf8_lossy(&output.stderr);
    for status in ["queued", "running", "succeeded"] {
        assert!(shown.contains(&format!("is {status}")), "{shown}");
    }
    let bytes = std::fs::read(&clip).unwrap();
    assert_eq!(&bytes[4..8], b"ftyp");
    assert_eq!(
        bytes.len() as u64,
        finished["output"]["size_bytes"].as_u64().unwrap()
    );

    let id = finished["id"].as_str().unwrap();
    let shown = json_of(&vidgate(&server, &["get", id, "--json"]).await);
    assert_eq!(shown["id"], id);
    let listed = json_of(&vidgate(&server, &["list", "--json"]).await);
    assert_eq!(listed["data"][0]["id"], id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_from_a_paused_model_is_retried_until_it_resumes() {
    let server = start(0).await;
    set_model_paused(&server.server.store, true).await;
    let store = server.server.store.clone();
    let resume = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        set_model_paused(&store, false).await;
    });
    let output = vidgate(&server, &["run", M1, "--prompt", "patience", "--json"]).await;
    resume.await.unwrap();
    let submitted = json_of(&output);
    assert_eq!(submitted["status"], "queued");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("503") && stderr.contains("retrying"),
        "{stderr}"
    );
    // Retrying with the same Idempotency-Key billed exactly one generation.
    let account = server
        .server
        .store
        .accounts()
        .get(&server.account_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.held, Micros(500_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_at_the_concurrency_limit_is_retried_until_a_slot_frees() {
    let server = start(1).await;
    let limits = AccountLimits {
        requests_per_second: 10,
        burst: 20,
        max_concurrent: 1,
    };
    let changes = LimitChanges {
        requests_per_second: Some(limits.requests_per_second),
        burst: Some(limits.burst),
        max_concurrent: Some(limits.max_concurrent),
    };
    operator_actions::accounts::set_limits(
        &server.server.store,
        "test",
        &server.account_id,
        changes,
    )
    .await
    .unwrap();
    let blocker = reqwest::Client::new()
        .post(format!("{}/run/{M1}", server.server.api_base))
        .bearer_auth(&server.api_key)
        .json(&json!({ "prompt": "hold the slot [sim:sleep=2500]", "duration": 2, "resolution": "480p", "generate_audio": false }))
        .send()
        .await
        .unwrap();
    assert_eq!(blocker.status(), 202);
    let output = vidgate(
        &server,
        &[
            "run",
            M1,
            "--prompt",
            "next in line",
            "--param",
            "resolution=480p",
            "--param",
            "duration=2",
            "--json",
        ],
    )
    .await;
    let submitted = json_of(&output);
    assert_eq!(submitted["status"], "queued");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("429") && stderr.contains("retrying"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_client_errors_are_not_retried_and_cancel_works() {
    let server = start(0).await;
    let started = Instant::now();
    let output = vidgate(
        &server,
        &["run", M1, "--prompt", "x", "--param", "duration=99"],
    )
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid_request") && stderr.contains("duration"),
        "{stderr}"
    );
    assert!(!stderr.contains("retrying"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));

    let queued = json_of(&vidgate(&server, &["run", M1, "--prompt", "never mind", "--json"]).await);
    let id = queued["id"].as_str().unwrap();
    let canceled = json_of(&vidgate(&server, &["cancel", id, "--json"]).await);
    assert_eq!(canceled["status"], "canceled");
    let again = vidgate(&server, &["cancel", id]).await;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("conflict"));

    let no_key = tokio::process::Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(["list"])
        .env("VIDGATE_BASE_URL", &server.server.api_base)
        .env_remove("VIDGATE_API_KEY")
        .output()
        .await
        .unwrap();
    assert!(!no_key.status.success());
    assert!(String::from_utf8_lossy(&no_key.stderr).contains("VIDGATE_API_KEY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files_are_uploaded_and_used_as_images() {
    let server = start(0).await;
    let directory = tempfile::tempdir().unwrap();
    let picture = directory.path().join("card.png");
    image::RgbImage::from_pixel(64, 48, image::Rgb([10, 120, 200]))
        .save(&picture)
        .unwrap();

    let uploaded =
        json_of(&vidgate(&server, &["upload", picture.to_str().unwrap(), "--json"]).await);
    assert_eq!(uploaded["content_type"], "image/png");
    assert_eq!(uploaded["media"]["width"], 64);
    let prefix = format!("{}/files/uploads/", server.server.api_base);
    assert!(uploaded["url"].as_str().unwrap().starts_with(&prefix));

    let submitted = json_of(
        &vidgate(
            &server,
            &[
                "run",
                "vendor_1/model_1/image-to-video",
                "--prompt",
                "a blue card",
                "--image",
                picture.to_str().unwrap(),
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(submitted["status"], "queued");
    assert!(
        submitted["input"]["image_url"]
            .as_str()
            .unwrap()
            .starts_with(&prefix),
        "{submitted}"
    );
}

/// Pauses or resumes M1 as the operator does (`vidgate admin model pause`).
async fn set_model_paused(store: &Store, paused: bool) {
    operator_actions::models::set_paused(
        store,
        &vidgate_core::Catalog::embedded(),
        "test",
        "vendor_1/model_1",
        paused,
    )
    .await
    .unwrap();
}
