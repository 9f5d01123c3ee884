//! The reads every poll makes, a generation by id and the caller behind a
//! key, see every committed write at once, whoever made it: this node,
//! another node, or `vidgate admin` (each a store of its own on the same
//! database, as these tests open one). On SQLite these reads run inline on
//! synchronous connections of their own (`store/inline_reads.rs`), so these
//! are that path's tests; on PostgreSQL they pin the same behaviour.

use crate::common;

use common::*;
use reqwest::StatusCode;
use vidgate_server::application::accounts;
use vidgate_server::store::{self, CALLER_CACHE_TTL, CancelOutcome};

async fn a_generation_changed_by_another_process_is_read_at_once(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("a kite")).await;
    let id = submitted["id"].as_str().unwrap();
    // Read once first, so the node's connections and statements are warm.
    assert_eq!(app.generation(id).await["status"], "queued");

    let elsewhere = store::open(&app.database.url()).await.unwrap();
    let outcome = elsewhere
        .generations()
        .cancel(&app.account.account.id, id)
        .await
        .unwrap();
    assert!(matches!(outcome, CancelOutcome::Canceled(_)), "{outcome:?}");
    // No wait: the next read on the node sees the other store's commit.
    assert_eq!(app.generation(id).await["status"], "canceled");
}

async fn a_generation_of_another_account_is_not_found(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("mine")).await;
    let id = submitted["id"].as_str().unwrap();
    let other = app.new_account(10).await;
    let response = app.get(&format!("/generations/{id}"), &other.api_key).await;
    assert_error(response, StatusCode::NOT_FOUND, "not_found", None).await;
    let unknown = app.get("/generations/gen_unknown", app.key()).await;
    assert_error(unknown, StatusCode::NOT_FOUND, "not_found", None).await;
}

async fn a_key_created_by_another_process_works_at_once(store: StoreKind) {
    let app = spawn_app(store).await;
    let elsewhere = store::open(&app.database.url()).await.unwrap();
    let created = accounts::create_api_key(elsewhere.as_ref(), &app.account.account.id, "admin")
        .await
        .unwrap();
    let response = app.get("/account", &created.api_key).await;
    assert_eq!(response.status(), StatusCode::OK);
}

async fn a_key_revoked_on_the_node_is_refused_at_once_and_elsewhere_within_the_cache_ttl(
    store: StoreKind,
) {
    let app = spawn_app(store).await;
    let second = accounts::create_api_key(app.server.store.as_ref(), &app.account.account.id, "b")
        .await
        .unwrap();
    // Both keys are remembered by the node's caller cache now.
    for key in [app.key(), second.api_key.as_str()] {
        assert_eq!(app.get("/account", key).await.status(), StatusCode::OK);
    }

    app.revoke_own_key_and_see_it_refused().await;

    let elsewhere = store::open(&app.database.url()).await.unwrap();
    revoke_key(&elsewhere, &second.key_id).await;
    tokio::time::sleep(CALLER_CACHE_TTL).await;
    let revoked = app.get("/account", &second.api_key).await;
    assert_error(revoked, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
}

on_both_stores!(
    a_generation_changed_by_another_process_is_read_at_once,
    a_generation_of_another_account_is_not_found,
    a_key_created_by_another_process_works_at_once,
    a_key_revoked_on_the_node_is_refused_at_once_and_elsewhere_within_the_cache_ttl,
);
