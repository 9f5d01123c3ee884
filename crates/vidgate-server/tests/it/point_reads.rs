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

/// Many reads at once, of the account's own generations, of another
/// account's and of unknown ids, some abandoned once started (their
/// clients hung up): each read that stays is answered its own generation
/// or none, whichever read took it to the database (PostgreSQL reads the
/// reads waiting in one statement, `store/gathered_reads.rs`), and the
/// store reads on afterwards.
async fn reads_at_once_are_each_answered_their_own(store: StoreKind) {
    const READS: usize = 300;
    let app = spawn_app_without_workers(store).await;
    let mut ids = Vec::new();
    for index in 0..6 {
        let submitted = app
            .submit_ok(M1_T2V, quick_body(&format!("clip {index}")))
            .await;
        ids.push(submitted["id"].as_str().unwrap().to_owned());
    }
    let mine = app.account.account.id.clone();
    let theirs = app.new_account(10).await.account.id;
    // A store of its own, so every read starts cold and together.
    let reader = std::sync::Arc::new(store::open(&app.database.url()).await.unwrap());
    let reads: Vec<_> = (0..READS)
        .map(|index| {
            let id = match index % 4 {
                3 => format!("gen_unknown_{index}"),
                _ => ids[index % ids.len()].clone(),
            };
            let account = if index % 5 == 0 { &theirs } else { &mine }.clone();
            let expected = (index % 4 != 3 && index % 5 != 0).then(|| id.clone());
            let reader = reader.clone();
            let read = tokio::spawn(async move {
                let found = reader.generations().get(&account, &id).await.unwrap();
                found.map(|generation| generation.id)
            });
            (index, expected, read)
        })
        .collect();
    // Every seventh read is abandoned once all have started.
    tokio::task::yield_now().await;
    for (index, _, read) in &reads {
        if index % 7 == 0 {
            read.abort();
        }
    }
    let mut answered = 0;
    for (index, expected, read) in reads {
        match read.await {
            Ok(found) => {
                assert_eq!(found, expected, "read {index}");
                answered += 1;
            }
            Err(error) => assert!(
                error.is_cancelled() && index % 7 == 0,
                "read {index}: {error}"
            ),
        }
    }
    assert!(answered >= READS - READS.div_ceil(7), "{answered} answered");
    let again = reader.generations().get(&mine, &ids[0]).await.unwrap();
    assert_eq!(again.map(|generation| generation.id), Some(ids[0].clone()));
}

on_both_stores!(
    reads_at_once_are_each_answered_their_own,
    a_generation_changed_by_another_process_is_read_at_once,
    a_generation_of_another_account_is_not_found,
    a_key_created_by_another_process_works_at_once,
    a_key_revoked_on_the_node_is_refused_at_once_and_elsewhere_within_the_cache_ttl,
);
