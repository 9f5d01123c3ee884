//! Operating a node: the health probes load balancers use, backups of the
//! embedded database, the Prometheus metrics on their own listener, and the
//! retention sweep that deletes old files.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::application::accounts;
use vidgate_server::health::{CheckOutcome, QueueLiveness};
use vidgate_server::retention::{self, RetentionSettings, SweepReport};
use vidgate_server::storage::Storage;
use vidgate_server::store::{self, ProviderHealth, StoreError};

fn root_url(app: &TestApp, path: &str) -> String {
    format!("{}{path}", app.api_base.trim_end_matches("/api/v1"))
}

async fn probe(app: &TestApp, path: &str) -> (StatusCode, Value) {
    let response = app.client.get(root_url(app, path)).send().await.unwrap();
    let status = response.status();
    assert_eq!(response.headers()["cache-control"], "no-store");
    (status, response.json().await.unwrap())
}

async fn probes_answer_without_credentials(store: StoreKind) {
    let app = spawn_app(store).await;
    let (status, body) = probe(&app, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "status": "ok" }));

    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({
            "status": "ready",
            "checks": { "database": "ok", "storage": "ok", "queue": "ok", "shutdown": "ok" }
        })
    );
    // Far more probes than any key's burst allows: probes are not
    // rate-limited, and they reuse one check instead of each running one.
    for _ in 0..50 {
        let (status, _) = probe(&app, "/readyz").await;
        assert_eq!(status, StatusCode::OK);
    }
    app.server.shutdown().await;
}

async fn a_draining_node_is_not_ready(store: StoreKind) {
    let app = spawn_app(store).await;
    app.server.begin_draining();
    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["shutdown"], "draining");
    assert_eq!(body["checks"]["database"], "ok");
    // Still alive, and still serving the API while it drains.
    let (status, _) = probe(&app, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let response = app.get("/account", app.key()).await;
    assert_eq!(response.status(), StatusCode::OK);
    app.server.shutdown().await;
}

async fn unwritable_storage_is_not_ready(store: StoreKind) {
    let app = spawn_app(store).await;
    // A file where the files directory was: nothing can be written under
    // it, whoever the test runs as.
    let files = app.data_dir.path().join("files");
    std::fs::remove_dir_all(&files).unwrap();
    std::fs::write(&files, b"not a directory").unwrap();
    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["checks"]["storage"], "not_writable");
    assert_eq!(body["checks"]["database"], "ok");
    app.server.shutdown().await;
}

async fn a_database_missing_a_migration_is_not_ready(store: StoreKind) {
    let app = spawn_app(store).await;
    // As if this binary were newer than the schema it finds.
    let forget_newest = "DELETE FROM _sqlx_migrations \
                         WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)";
    match &app.database {
        TestDatabase::Sqlite(_) => {
            let pool = sqlx::SqlitePool::connect(&app.database.url())
                .await
                .unwrap();
            sqlx::query(forget_newest).execute(&pool).await.unwrap();
        }
        TestDatabase::Postgres(_) => {
            let pool = sqlx::PgPool::connect(&app.database.url()).await.unwrap();
            sqlx::query(forget_newest).execute(&pool).await.unwrap();
        }
    }
    let (status, body) = probe(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["checks"]["database"], "not_migrated");
    app.server.shutdown().await;
}

async fn backups_copy_the_embedded_database(store: StoreKind) {
    let test_store = open_test_store(&store).await;
    let created =
        accounts::create_account(test_store.store.as_ref(), "backed up", Micros(7_000_000))
            .await
            .unwrap();
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("backup.sqlite");
    let path_text = path.to_str().unwrap();
    let outcome = test_store.store.operations().backup_into(path_text).await;
    if matches!(store, StoreKind::Postgres { .. }) {
        assert!(
            matches!(outcome, Err(StoreError::Unsupported(_))),
            "{outcome:?}"
        );
        return;
    }
    outcome.unwrap();
    // Written after the backup, so it must not be in it.
    test_store
        .store
        .ledger()
        .credit(&created.account.id, Micros(1_000_000))
        .await
        .unwrap();

    let restored = store::open(&format!("sqlite://{path_text}")).await.unwrap();
    let account = restored
        .accounts()
        .get(&created.account.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.balance, Micros(7_000_000));
    assert_eq!(account.credited, Micros(7_000_000));
    assert!(
        restored
            .operations()
            .schema_state()
            .await
            .unwrap()
            .is_migrated()
    );
    // A backup never overwrites a file.
    assert!(
        test_store
            .store
            .operations()
            .backup_into(path_text)
            .await
            .is_err()
    );
}

/// A node with a metrics listener on a free port.
async fn spawn_app_with_metrics(settings: TestSettings) -> TestApp {
    spawn_app_with(TestSettings {
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..settings
    })
    .await
}

async fn scrape(app: &TestApp) -> String {
    let metrics_addr = app.server.metrics_addr.expect("a metrics listener");
    let response = app
        .client
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    response.text().await.unwrap()
}

/// The value of one sample, named with its labels in the order the scrape
/// writes them; `None` when the scrape has no such sample.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().expect("a number"))
}

/// Scrapes until `done` holds, for what happens after a request returns
/// (webhook attempts).
async fn scrape_until(app: &TestApp, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = scrape(app).await;
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the metrics never moved:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const M1: &str = r#"model="vendor_1/model_1""#;

async fn metrics_follow_requests_submits_jobs_and_webhooks(store: StoreKind) {
    let app = spawn_app_with_metrics(TestSettings::new(store)).await;
    let public = app
        .client
        .get(root_url(&app, "/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        public.status(),
        StatusCode::NOT_FOUND,
        "never on the public port"
    );

    let mut body = quick_body("counted");
    // Nothing listens on port 1: each attempt fails, and the fifth (after
    // the four fast retries) gives up.
    body["webhook_url"] = json!("http://127.0.0.1:1/hook");
    let generation = app.submit_ok(M1_T2V, body).await;
    let broke = app.new_account(0).await;
    let refused = app.submit_quick_with_key(&broke.api_key, "unpaid").await;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    app.wait_for_status(generation["id"].as_str().unwrap(), &["succeeded"])
        .await;
    let captured = app.account_state(&app.account.account.id).await.captured;
    assert!(captured.0 > 0);

    let text = scrape_until(&app, |text| {
        sample(text, r#"vidgate_webhook_attempts_total{outcome="failed"}"#) == Some(1.0)
    })
    .await;
    let expected = [
        (
            format!(r#"vidgate_submits_total{{{M1},mode="text-to-video",outcome="accepted"}}"#),
            1.0,
        ),
        (
            format!(
                r#"vidgate_submits_total{{{M1},mode="text-to-video",outcome="insufficient_balance"}}"#
            ),
            1.0,
        ),
        (
            format!(r#"vidgate_queue_wait_seconds_count{{{M1},backend="local"}}"#),
            1.0,
        ),
        (
            format!(r#"vidgate_job_run_seconds_count{{{M1},backend="local"}}"#),
            1.0,
        ),
        (
            format!(r#"vidgate_job_outcomes_total{{{M1},backend="local",outcome="succeeded"}}"#),
            1.0,
        ),
        (
            format!("vidgate_money_captured_micros_total{{{M1}}}"),
            captured.0 as f64,
        ),
        (
            r#"vidgate_http_request_duration_seconds_count{route="/api/v1/run/{vendor}/{model}/{mode}",method="POST",status="202"}"#.to_owned(),
            1.0,
        ),
        (
            r#"vidgate_http_request_duration_seconds_count{route="/api/v1/run/{vendor}/{model}/{mode}",method="POST",status="402"}"#.to_owned(),
            1.0,
        ),
        // The public port's answer to `/metrics`: one label for every path
        // that matched no route.
        (
            r#"vidgate_http_request_duration_seconds_count{route="unmatched",method="GET",status="404"}"#.to_owned(),
            1.0,
        ),
        (
            r#"vidgate_webhook_attempts_total{outcome="retrying"}"#.to_owned(),
            4.0,
        ),
        (r#"vidgate_queue_depth{status="queued"}"#.to_owned(), 0.0),
        (r#"vidgate_queue_depth{status="running"}"#.to_owned(), 0.0),
        ("vidgate_money_held_micros".to_owned(), 0.0),
        ("vidgate_webhook_deliveries_pending".to_owned(), 0.0),
    ];
    for (series, value) in expected {
        assert_eq!(sample(&text, &series), Some(value), "{series} in:\n{text}");
    }
    assert!(!text.contains(generation["id"].as_str().unwrap()), "no ids");
    app.server.shutdown().await;
}

/// Asserts the number of queued jobs and the micro-dollars held in one
/// scrape.
fn assert_queued_and_held(text: &str, queued: u32, held_micros: i64) {
    assert_eq!(
        sample(text, r#"vidgate_queue_depth{status="queued"}"#),
        Some(f64::from(queued)),
        "{text}"
    );
    assert_eq!(
        sample(text, "vidgate_money_held_micros"),
        Some(held_micros as f64),
        "{text}"
    );
}

/// Saves a provider's health as a node would, then scrapes the metrics.
async fn scrape_after_saving(app: &TestApp, health: &ProviderHealth) -> String {
    app.server
        .store
        .provider_health()
        .save(health)
        .await
        .unwrap();
    scrape(app).await
}

async fn metrics_show_queued_work_and_the_money_it_holds(store: StoreKind) {
    let app = spawn_app_with_metrics(TestSettings {
        workers: 0,
        ..TestSettings::new(store)
    })
    .await;
    assert_queued_and_held(&scrape(&app).await, 0, 0);

    app.submit_ok(M1_T2V, quick_body("first")).await;
    let second = app.submit_ok(M1_T2V, quick_body("second")).await;
    let held = app.account_state(&app.account.account.id).await.held;
    assert!(held.0 > 0);
    let text = scrape(&app).await;
    assert_queued_and_held(&text, 2, held.0);
    assert_eq!(
        sample(&text, r#"vidgate_queue_depth{status="running"}"#),
        Some(0.0)
    );

    // The wait of each account waiting, longest first, without its id:
    // another account's job, submitted later, ranks second.
    let other = app.new_account(10).await;
    let response = app
        .submit_quick_with_key(&other.api_key, "another account's")
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let others: Value = response.json().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let text = scrape(&app).await;
    let wait = |rank: &str| {
        sample(
            &text,
            &format!(r#"vidgate_queue_oldest_wait_seconds{{rank="{rank}"}}"#),
        )
        .unwrap()
    };
    assert!(wait("1") >= wait("2") && wait("2") > 0.0, "{text}");
    assert_eq!(wait("3"), 0.0);
    assert!(!text.contains(&other.account.id), "no account ids");
    assert_eq!(
        app.cancel(&others, &other.api_key).await.status(),
        StatusCode::OK
    );

    // A provider's circuit, as a node saved it, is a gauge per provider.
    let mut health = ProviderHealth {
        provider: "fal".to_owned(),
        open: true,
        consecutive_failures: 5,
        last_error: Some("the provider answered 503".to_owned()),
        last_error_at: Some(vidgate_server::store::now_millis()),
        latency_ms: None,
        node_id: "node-a".to_owned(),
        updated_at: vidgate_server::store::now_millis(),
    };
    let text = scrape_after_saving(&app, &health).await;
    assert_eq!(
        sample(&text, r#"vidgate_provider_circuit_open{provider="fal"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"vidgate_provider_consecutive_failures{provider="fal"}"#
        ),
        Some(5.0)
    );
    health.open = false;
    health.consecutive_failures = 0;
    let text = scrape_after_saving(&app, &health).await;
    assert_eq!(
        sample(&text, r#"vidgate_provider_circuit_open{provider="fal"}"#),
        Some(0.0)
    );

    assert_eq!(
        app.cancel(&second, app.key()).await.status(),
        StatusCode::OK
    );
    let held = app.account_state(&app.account.account.id).await.held;
    assert_queued_and_held(&scrape(&app).await, 1, held.0);
    app.server.shutdown().await;
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

async fn the_sweep_deletes_clips_and_uploads_past_retention(store: StoreKind) {
    let app = spawn_app(store).await;
    let storage = Storage::local(app.data_dir.path().join("files"));
    let submitted = app.submit_ok(M1_T2V, quick_body("kept a while")).await;
    let id = submitted["id"].as_str().unwrap();
    let finished = app.wait_for_status(id, &["succeeded"]).await;
    let video_url = finished["output"]["video_url"].as_str().unwrap().to_owned();
    let upload = app.upload_png().await;
    let upload_url = upload["url"].as_str().unwrap().to_owned();
    let keep_for = 30 * DAY;
    let now = store::now_millis();

    // Within the retention time nothing is touched.
    let report = retention::sweep(
        app.server.store.as_ref(),
        &storage,
        keep_for,
        now + 29 * DAY.as_millis() as i64,
    )
    .await
    .unwrap();
    assert_eq!(report, SweepReport::default());
    assert_eq!(
        app.client.get(&video_url).send().await.unwrap().status(),
        StatusCode::OK
    );

    // Past it, the clip and the upload are deleted and the records stay.
    let later = now + 31 * DAY.as_millis() as i64;
    let report = retention::sweep(app.server.store.as_ref(), &storage, keep_for, later)
        .await
        .unwrap();
    assert_eq!(
        report,
        SweepReport {
            generations_expired: 1,
            uploads_expired: 1,
            files_deleted: 2,
            abandoned_incoming_files_removed: 0,
        }
    );
    assert!(!app.local_file(&video_url).exists());
    assert!(!app.local_file(&upload_url).exists());
    let expired = app.generation(id).await;
    assert_eq!(expired["status"], "succeeded");
    assert_eq!(expired["cost"], finished["cost"]);
    assert_eq!(expired["output"]["expired"], true);
    assert_eq!(
        expired["output"]["expired_at"],
        json!(vidgate_server::store::rfc3339(later))
    );
    assert_eq!(expired["output"]["video_url"], json!(video_url));
    assert_eq!(
        expired["output"]["duration_s"],
        finished["output"]["duration_s"]
    );
    app.assert_gone(&video_url).await;
    app.assert_gone(&upload_url).await;
    // An unknown file is still simply not found.
    let unknown = video_url.replace(".mp4", "x.mp4");
    assert_eq!(
        app.client.get(&unknown).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    // The expired upload can no longer be named in a request.
    let response = app
        .post_json(
            "/run/vendor_1/model_1/image-to-video",
            app.key(),
            &json!({ "prompt": "too late", "image_url": upload_url, "duration": 2, "resolution": "480p" }),
        )
        .await;
    let body = assert_invalid_request(response, "image_url").await;
    assert_error_message_contains(&body, "expired");
    // A second pass, on this node or another, finds nothing left to do.
    let report = retention::sweep(app.server.store.as_ref(), &storage, keep_for, later)
        .await
        .unwrap();
    assert_eq!(report, SweepReport::default());
    app.assert_ledger_invariant(&app.account.account.id).await;
    app.server.shutdown().await;
}

/// A process that dies while writing an upload or a model's output leaves
/// its incoming file behind; the sweep removes it once nothing has written
/// to it for a day, and leaves a file still being written alone.
async fn the_sweep_removes_incoming_files_a_dead_process_left(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    // A storage of its own: the node's background sweep, which looks at the
    // node's storage, must not take the file before this pass does.
    let root = tempfile::tempdir().unwrap();
    let storage = Storage::local(root.path().to_path_buf());
    let (abandoned, file) = storage.incoming_file().await.unwrap();
    file.into_std()
        .await
        .set_modified(std::time::SystemTime::now() - 2 * DAY)
        .unwrap();
    let (in_progress, _file) = storage.incoming_file().await.unwrap();

    let report = retention::sweep(
        app.server.store.as_ref(),
        &storage,
        30 * DAY,
        store::now_millis(),
    )
    .await
    .unwrap();
    assert_eq!(
        report,
        SweepReport {
            abandoned_incoming_files_removed: 1,
            ..SweepReport::default()
        }
    );
    assert!(!abandoned.exists());
    assert!(in_progress.exists());
    app.server.shutdown().await;
}

async fn every_node_sweeps_in_the_background(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        retention: RetentionSettings {
            keep_for: Duration::ZERO,
            sweep_interval: Duration::from_millis(100),
        },
        ..TestSettings::new(store)
    })
    .await;
    let submitted = app.submit_ok(M1_T2V, quick_body("gone soon")).await;
    let id = submitted["id"].as_str().unwrap();
    app.wait_for_status(id, &["succeeded"]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let expired = loop {
        let generation = app.generation(id).await;
        if generation["output"]["expired"] == true {
            break generation;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never expired: {generation}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    };
    let video_url = expired["output"]["video_url"].as_str().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while app.local_file(video_url).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the clip was never deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.assert_gone(video_url).await;
    app.server.shutdown().await;
}

on_both_stores!(
    metrics_follow_requests_submits_jobs_and_webhooks,
    metrics_show_queued_work_and_the_money_it_holds,
    probes_answer_without_credentials,
    a_draining_node_is_not_ready,
    unwritable_storage_is_not_ready,
    a_database_missing_a_migration_is_not_ready,
    backups_copy_the_embedded_database,
    the_sweep_deletes_clips_and_uploads_past_retention,
    the_sweep_removes_incoming_files_a_dead_process_left,
    every_node_sweeps_in_the_background,
);

#[test]
fn a_stopped_worker_makes_the_queue_stalled() {
    let liveness = Arc::new(QueueLiveness::new(2, Duration::from_secs(5)));
    let first = liveness.worker_running();
    let second = liveness.worker_running();
    liveness.rescuer_passed();
    assert_eq!(liveness.outcome(), CheckOutcome::Ok);
    drop(second);
    assert_eq!(liveness.outcome(), CheckOutcome::Stalled);
    drop(first);
}
