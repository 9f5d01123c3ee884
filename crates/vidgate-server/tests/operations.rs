//! Operating a node: the health probes load balancers use, and backups of
//! the embedded database.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::accounts;
use vidgate_server::health::{CheckOutcome, QueueLiveness};
use vidgate_server::store::{self, StoreError};

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
    let outcome = test_store.store.backup_into(path_text).await;
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
        .credit_account(&created.account.id, Micros(1_000_000))
        .await
        .unwrap();

    let restored = store::open(&format!("sqlite://{path_text}")).await.unwrap();
    let account = restored
        .account(&created.account.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.balance, Micros(7_000_000));
    assert_eq!(account.credited, Micros(7_000_000));
    assert!(restored.schema_state().await.unwrap().is_migrated());
    // A backup never overwrites a file.
    assert!(test_store.store.backup_into(path_text).await.is_err());
}

on_both_stores!(
    probes_answer_without_credentials,
    a_draining_node_is_not_ready,
    unwritable_storage_is_not_ready,
    a_database_missing_a_migration_is_not_ready,
    backups_copy_the_embedded_database,
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
