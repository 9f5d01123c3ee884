//! The Cog adapter against a real Cog server running the example predictor
//! in `examples/cog/`. `VIDGATE_TEST_COG_PYTHON` names a Python with
//! `cog==0.23.1` and `imageio-ffmpeg` installed (`.ci/run` makes one in
//! `target/cog-venv`); without it these tests print a notice and pass.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use vidgate_core::ValidatedInput;
use vidgate_server::backend::{
    Backend, BackendsConfig, ClipBytes, CogBackend, CogCallbacks, CogModelConfig, Job, JobFailure,
    RenderedClip, apply_backends_file,
};
use vidgate_server::storage::Storage;

use common::{
    M1_T2V, StoreKind, TestApp, TestSettings, assert_model_unavailable, free_port, on_both_stores,
    spawn_app_with,
};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python to run Cog with, or `None` (after a notice) to skip.
fn cog_python(test_name: &str) -> Option<PathBuf> {
    match std::env::var_os("VIDGATE_TEST_COG_PYTHON") {
        // A relative path is taken from the workspace root, as CI exports it.
        Some(python) => Some(workspace_root().join(python)),
        None => {
            eprintln!("skipping {test_name}: VIDGATE_TEST_COG_PYTHON is not set");
            None
        }
    }
}

/// A Cog server running the example predictor, killed (with its worker
/// process) when dropped.
struct CogServer {
    python: PathBuf,
    port: u16,
    process: Option<Child>,
}

impl CogServer {
    /// The server, or `None` when `VIDGATE_TEST_COG_PYTHON` is not set: the
    /// caller skips `test_name`, which this reports.
    async fn start_for(test_name: &str) -> Option<CogServer> {
        let python = cog_python(test_name)?;
        Some(CogServer::start(&python).await)
    }

    async fn start(python: &Path) -> CogServer {
        let mut server = CogServer {
            python: python.to_path_buf(),
            port: free_port(),
            process: None,
        };
        server.launch().await;
        server
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the server on its port and waits until it reports READY.
    async fn launch(&mut self) {
        use std::os::unix::process::CommandExt;
        // Cog starts its worker with the `python` on PATH, so the
        // environment's own bin directory must come first.
        let bin = self.python.parent().unwrap().to_path_buf();
        let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .unwrap();
        let child = Command::new(&self.python)
            .args(["-m", "cog.server.http", "--host", "127.0.0.1"])
            .current_dir(workspace_root().join("examples/cog"))
            .env("COG_PREDICT_TYPE_STUB", "predict.py:Predictor")
            .env("PORT", self.port.to_string())
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so the worker it spawns dies with it.
            .process_group(0)
            .spawn()
            .expect("the Cog server starts");
        self.process = Some(child);
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let health = client
                .get(format!("{}/health-check", self.base_url()))
                .send()
                .await;
            if let Ok(response) = health {
                let body: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
                if body["status"] == "READY" {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the Cog server never became ready"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the server and its worker at once, as a crash would.
    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

impl Drop for CogServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts vidgate with M1 on the Cog server through a backends file.
async fn spawn_app_on_cog(store: StoreKind, cog: &CogServer, poll_seconds: f64) -> TestApp {
    spawn_app_on_cog_with(TestSettings::new(store), cog, poll_seconds).await
}

async fn spawn_app_on_cog_with(
    settings: TestSettings,
    cog: &CogServer,
    poll_seconds: f64,
) -> TestApp {
    let overlay_dir = tempfile::tempdir().unwrap();
    let overlay_path = overlay_dir.path().join("backends.json");
    let overlay = json!({
        "models": {
            "vendor_1/model_1": {
                "backend": "cog",
                "base_url": cog.base_url(),
                "concurrency": 1,
                "inputs": {
                    "prompt": "prompt", "duration": "duration", "seed": "seed",
                    "width": "width", "height": "height"
                },
                "constants": { "fps": 24 },
                "timeouts": {
                    "request_seconds": 5, "prediction_seconds": 120,
                    "poll_seconds": poll_seconds, "health_seconds": 0.5,
                    "unreachable_seconds": 2
                }
            }
        }
    });
    std::fs::write(&overlay_path, overlay.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    apply_backends_file(
        &mut backends,
        &overlay_path,
        &vidgate_core::Catalog::embedded(),
    )
    .expect("the backends file is valid");
    spawn_app_with(TestSettings {
        backends,
        ..settings
    })
    .await
}

fn body(prompt: &str) -> Value {
    json!({ "prompt": prompt, "duration": 2, "resolution": "480p", "generate_audio": true })
}

on_both_stores!(
    generations_run_on_a_cog_server_and_finish_through_its_webhook,
    a_failing_prediction_fails_the_generation_and_refunds_it,
    a_cog_server_that_dies_mid_job_fails_it_refunded_and_submits_wait_for_its_return,
    behind_a_load_balancer_the_cog_webhook_comes_back_to_the_dispatching_node,
);

async fn generations_run_on_a_cog_server_and_finish_through_its_webhook(store: StoreKind) {
    let Some(cog) = CogServer::start_for("generations_run_on_a_cog_server").await else {
        return;
    };
    // A state read only every 60 s: finishing sooner proves the webhook.
    let app = spawn_app_on_cog(store, &cog, 60.0).await;
    let account_id = app.account.account.id.clone();

    let started = Instant::now();
    let submitted = app.submit_ok(M1_T2V, body("a red kite over the sea")).await;
    let id = submitted["id"].as_str().unwrap();
    let finished = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the completion webhook did not arrive"
    );

    let output = &finished["output"];
    assert_eq!(
        (output["width"].as_u64(), output["height"].as_u64()),
        (Some(854), Some(480))
    );
    assert_eq!(output["fps"], 24);
    assert_eq!(output["has_audio"], true);
    let duration = output["duration_s"].as_f64().unwrap();
    assert!((duration - 2.0).abs() < 0.1, "{duration}");
    let clip = app
        .client
        .get(output["video_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(clip.status(), StatusCode::OK);
    let bytes = clip.bytes().await.unwrap();
    assert_eq!(&bytes[4..8], b"ftyp");
    assert_eq!(output["size_bytes"].as_u64(), Some(bytes.len() as u64));

    // Captured at the price held: $0.05/s at 480p for 2 s.
    let account = app.account_state(&account_id).await;
    assert_eq!((account.captured.0, account.held.0), (100_000, 0));
    app.assert_ledger_invariant(&account_id).await;

    // The callback route refuses a webhook without the dispatch's token.
    let forged = app
        .client
        .post(format!(
            "{}/internal/cog/{id}/guessed",
            app.api_base.trim_end_matches("/api/v1")
        ))
        .json(&json!({ "id": id, "status": "succeeded", "output": "data:video/mp4;base64," }))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::NOT_FOUND);
}

async fn behind_a_load_balancer_the_cog_webhook_comes_back_to_the_dispatching_node(
    store: StoreKind,
) {
    let Some(cog) = CogServer::start_for("behind_a_load_balancer").await else {
        return;
    };
    // The public URL names a load balancer that would not bring the webhook
    // back to this node (here nothing listens there at all); only the
    // callback URL reaches the node that dispatched the prediction.
    let port = free_port();
    let node_url = format!("http://127.0.0.1:{port}");
    let settings = TestSettings {
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        public_url: Some("http://127.0.0.1:9".into()),
        cog_callback_url: Some(node_url.clone()),
        ..TestSettings::new(store)
    };
    // A state read only every 60 s: finishing sooner proves the webhook.
    let mut app = spawn_app_on_cog_with(settings, &cog, 60.0).await;
    app.api_base = format!("{node_url}/api/v1");

    let started = Instant::now();
    let submitted = app.submit_ok(M1_T2V, body("a lighthouse at dusk")).await;
    let id = submitted["id"].as_str().unwrap();
    let finished = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the completion webhook did not come back to the callback URL"
    );
    assert!(
        finished["output"]["video_url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:9/api/v1/files/"),
        "clip URLs still use the public URL: {finished}"
    );
}

async fn a_failing_prediction_fails_the_generation_and_refunds_it(store: StoreKind) {
    let Some(cog) = CogServer::start_for("a_failing_prediction_fails_the_generation").await else {
        return;
    };
    let app = spawn_app_on_cog(store, &cog, 1.0).await;
    let account_id = app.account.account.id.clone();

    let submitted = app.submit_ok(M1_T2V, body("please [fail] now")).await;
    let id = submitted["id"].as_str().unwrap();
    let failed = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "generation_failed");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("asked this example predictor to fail"),
        "{failed}"
    );
    assert_eq!(failed["cost"]["amount_usd"], 0.0);
    let account = app.account_state(&account_id).await;
    assert_eq!(
        (account.balance, account.held.0, account.captured.0),
        (account.credited, 0, 0)
    );
    app.assert_ledger_invariant(&account_id).await;
}

async fn a_cog_server_that_dies_mid_job_fails_it_refunded_and_submits_wait_for_its_return(
    store: StoreKind,
) {
    let Some(mut cog) = CogServer::start_for("a_cog_server_that_dies_mid_job").await else {
        return;
    };
    let app = spawn_app_on_cog(store, &cog, 0.5).await;
    let account_id = app.account.account.id.clone();

    let submitted = app.submit_ok(M1_T2V, body("a slow one [sleep=60]")).await;
    let id = submitted["id"].as_str().unwrap();
    app.wait_for_status(id, &["running"]).await;
    // Let the prediction reach the server before it dies.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cog.kill();

    let failed = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "upstream_error");
    let account = app.account_state(&account_id).await;
    assert_eq!((account.held.0, account.captured.0), (0, 0));
    app.assert_ledger_invariant(&account_id).await;

    // While it is down, submits are refused and nothing is held.
    let refused = app.submit(M1_T2V, body("while it is down")).await;
    assert_model_unavailable(refused).await;
    let account = app.account_state(&account_id).await;
    assert_eq!((account.balance, account.held.0), (account.credited, 0));

    // Back on the same port, it is found healthy and runs jobs again.
    cog.launch().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let resubmitted = loop {
        let response = app.submit(M1_T2V, body("after the restart")).await;
        if response.status() == StatusCode::ACCEPTED {
            break response.json::<Value>().await.unwrap();
        }
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "the model never came back");
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let finished = app
        .wait_for_status(
            resubmitted["id"].as_str().unwrap(),
            &["succeeded", "failed"],
        )
        .await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    app.assert_ledger_invariant(&account_id).await;
}

/// The Cog backend alone, for what the HTTP path cannot steer: its webhook
/// URL and its concurrency.
fn backend_alone(
    cog: &CogServer,
    concurrency: usize,
    callbacks: Arc<CogCallbacks>,
) -> Arc<CogBackend> {
    let config: CogModelConfig = serde_json::from_value(json!({
        "base_url": cog.base_url(),
        "concurrency": concurrency,
        "inputs": { "prompt": "prompt", "duration": "duration", "width": "width", "height": "height" },
        "timeouts": { "request_seconds": 5, "prediction_seconds": 60, "poll_seconds": 0.5, "health_seconds": 0.5 }
    }))
    .unwrap();
    // Outputs it downloads are removed when their clips are dropped, so a
    // shared directory stays empty.
    let storage = Arc::new(Storage::local(
        std::env::temp_dir().join("vidgate-cog-backend-alone"),
    ));
    CogBackend::new("vendor_1/model_1", config, callbacks, storage).unwrap()
}

fn job(generation_id: &str, prompt: &str) -> Job {
    Job {
        generation_id: generation_id.to_owned(),
        model: "vendor_1/model_1".into(),
        mode: "text-to-video".parse().unwrap(),
        input: ValidatedInput::from_stored_json(json!({ "prompt": prompt, "duration": 1 })),
        media_input: ValidatedInput::from_stored_json(json!({ "prompt": prompt, "duration": 1 })),
        media: Default::default(),
        width: 320,
        height: 240,
        seed: 7,
        price: vidgate_core::Micros(0),
    }
}

/// Callbacks whose webhooks go to a port nobody listens on, so every one is
/// lost.
fn callbacks_that_are_lost() -> Arc<CogCallbacks> {
    let nobody = format!("http://127.0.0.1:{}", free_port());
    Arc::new(CogCallbacks::new(Some(&nobody)))
}

fn assert_one_second_clip(result: Result<RenderedClip, JobFailure>) {
    let clip = result.expect("the job succeeds");
    // Cog returns the clip inline, as a data URI, without an upload target.
    let ClipBytes::InMemory(mp4) = &clip.mp4 else {
        panic!("an inline output stays in memory: {:?}", clip.mp4);
    };
    assert_eq!(&mp4[4..8], b"ftyp");
    assert_eq!((clip.width, clip.height, clip.fps), (320, 240, 24));
    assert!((clip.duration_s - 1.0).abs() < 0.1, "{}", clip.duration_s);
    assert!(clip.has_audio);
}

#[tokio::test]
async fn without_a_webhook_route_the_backend_waits_on_a_synchronous_prediction() {
    let Some(cog) = CogServer::start_for("without_a_webhook_route").await else {
        return;
    };
    // No base URL is set, as on a node without an HTTP listener.
    let backend = backend_alone(&cog, 1, Arc::default());
    let result = backend
        .run(job("gen_sync", "synchronous"), CancellationToken::new())
        .await;
    assert_one_second_clip(result);
}

#[tokio::test]
async fn a_missed_webhook_is_noticed_and_the_job_still_finishes() {
    let Some(cog) = CogServer::start_for("a_missed_webhook_is_noticed").await else {
        return;
    };
    let backend = backend_alone(&cog, 1, callbacks_that_are_lost());
    let result = tokio::time::timeout(
        Duration::from_secs(45),
        backend.run(
            job("gen_missed", "missed webhook"),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the job does not wait for the prediction timeout");
    assert_one_second_clip(result);
}

#[tokio::test]
async fn more_jobs_than_the_servers_slots_wait_through_its_409s() {
    let Some(cog) = CogServer::start_for("more_jobs_than_the_servers_slots").await else {
        return;
    };
    // Two at once from vidgate against a server with one slot: the second
    // dispatch is answered 409 until the first prediction is done.
    let backend = backend_alone(&cog, 2, Arc::default());
    let (first, second) = tokio::join!(
        backend.run(
            job("gen_first", "first [sleep=1]"),
            CancellationToken::new()
        ),
        backend.run(job("gen_second", "second"), CancellationToken::new()),
    );
    assert_one_second_clip(first);
    assert_one_second_clip(second);
}

#[tokio::test]
async fn an_interrupted_job_cancels_its_prediction_on_the_server() {
    let Some(cog) = CogServer::start_for("an_interrupted_job_cancels_its_prediction").await else {
        return;
    };
    let backend = backend_alone(&cog, 1, callbacks_that_are_lost());
    let cancel = CancellationToken::new();
    let interrupt = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        interrupt.cancel();
    });
    let started = Instant::now();
    let result = backend
        .run(job("gen_slow", "slow [sleep=40]"), cancel)
        .await;
    assert!(matches!(result, Err(JobFailure::Interrupted)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // The server's only slot is free again long before the 40 s sleep would
    // have ended, because the prediction was canceled.
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        backend.run(job("gen_after", "after"), CancellationToken::new()),
    )
    .await
    .expect("the canceled prediction no longer holds the slot");
    assert_one_second_clip(result);
}
