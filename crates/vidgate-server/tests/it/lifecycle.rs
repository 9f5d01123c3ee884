//! The generation lifecycle over real HTTP: submit, hold, work, capture or
//! refund, get, cancel, list, idempotency and both limits of SPEC.md section 8.

use crate::common;

use async_trait::async_trait;
use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use vidgate_server::backend::{
    Admission, Backend, BackendsConfig, Job, JobFailure, Rejection, RenderedClip,
};

async fn a_submitted_generation_is_held_rendered_and_captured(store: StoreKind) {
    let app = spawn_app(store).await;
    let account_id = app.account.account.id.clone();
    let response = app
        .submit(M1_T2V, quick_body("a lighthouse in a storm"))
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let submitted: Value = response.json().await.unwrap();

    let id = submitted["id"].as_str().unwrap();
    assert!(id.starts_with("gen_"));
    assert_eq!(location, format!("{}/generations/{id}", app.api_base));
    assert_eq!(submitted["object"], "generation");
    assert_eq!(submitted["model"], "vendor_1/model_1");
    assert_eq!(submitted["endpoint"], M1_T2V);
    assert_eq!(submitted["mode"], "text-to-video");
    assert_eq!(submitted["status"], "queued");
    assert_eq!(submitted["source"], "api");
    for field in ["output", "error", "started_at", "completed_at"] {
        assert!(submitted[field].is_null(), "{field}");
    }
    // The input is echoed with defaults filled in.
    assert_eq!(submitted["input"]["aspect_ratio"], "16:9");
    assert_eq!(submitted["input"]["duration"], 2);
    assert_eq!(
        submitted["cost"],
        json!({
            "amount_usd": 0.1, "currency": "usd", "estimated": true, "official_usd": null, "saved_usd": null
        })
    );
    assert_eq!(submitted["urls"]["get"], location);
    assert_eq!(submitted["urls"]["cancel"], format!("{location}/cancel"));
    assert!(submitted["created_at"].as_str().unwrap().ends_with('Z'));

    let held = app.account_state(&account_id).await;
    assert_eq!((held.balance.0, held.held.0), (99_900_000, 100_000));

    let finished = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert_eq!(
        finished["cost"],
        json!({
            "amount_usd": 0.1, "currency": "usd", "estimated": false, "official_usd": 0.12, "saved_usd": 0.02
        })
    );
    assert!(finished["started_at"].is_string() && finished["completed_at"].is_string());
    let output = &finished["output"];
    assert_eq!(
        (output["width"].as_u64(), output["height"].as_u64()),
        (Some(854), Some(480))
    );
    assert_eq!(output["fps"], 24);
    assert_eq!(output["has_audio"], false);
    assert_eq!(output["content_type"], "video/mp4");
    assert!(output["seed"].is_u64());

    // The clip is served with its type and supports ranges, so <video> can seek.
    let video_url = output["video_url"].as_str().unwrap();
    let whole = app.client.get(video_url).send().await.unwrap();
    assert_eq!(whole.status(), StatusCode::OK);
    assert_eq!(whole.headers()["content-type"], "video/mp4");
    let bytes = whole.bytes().await.unwrap();
    assert_eq!(bytes.len() as u64, output["size_bytes"].as_u64().unwrap());
    assert_eq!(&bytes[4..8], b"ftyp");
    let part = app.get_range(video_url, "bytes=0-99").await;
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.bytes().await.unwrap().len(), 100);

    let settled = app.account_state(&account_id).await;
    assert_eq!(
        (settled.balance.0, settled.held.0, settled.captured.0),
        (99_900_000, 0, 100_000)
    );
    app.assert_ledger_invariant(&account_id).await;
    // A finished generation is no longer polled: no Retry-After.
    let response = app.get(&format!("/generations/{id}"), app.key()).await;
    assert!(!response.headers().contains_key("retry-after"));
}

async fn the_same_seed_reproduces_the_same_clip(store: StoreKind) {
    let app = spawn_app(store).await;
    let body = json!({ "prompt": "waves", "duration": 2, "resolution": "480p", "seed": 42, "generate_audio": true });
    let first = app.submit_ok(M1_T2V, body.clone()).await;
    let second = app.submit_ok(M1_T2V, body).await;
    let mut clips = Vec::new();
    for submitted in [first, second] {
        let done = app
            .wait_for_status(submitted["id"].as_str().unwrap(), &["succeeded"])
            .await;
        assert_eq!(done["output"]["seed"], 42);
        assert_eq!(done["output"]["has_audio"], true);
        let url = done["output"]["video_url"].as_str().unwrap().to_owned();
        clips.push(
            app.client
                .get(url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap(),
        );
    }
    assert_eq!(clips[0], clips[1]);
}

async fn a_failed_job_is_refunded_with_an_error_object(store: StoreKind) {
    let app = spawn_app(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("boom [sim:fail]")).await;
    let failed = app
        .wait_for_status(submitted["id"].as_str().unwrap(), &["failed", "succeeded"])
        .await;
    assert_eq!(failed["status"], "failed");
    assert!(failed["error"]["code"].is_string() && failed["error"]["message"].is_string());
    assert!(failed["output"].is_null());
    assert_eq!(failed["cost"]["amount_usd"], 0.0);
    assert_eq!(failed["cost"]["estimated"], false);
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(
        (account.balance.0, account.held.0, account.captured.0),
        (100_000_000, 0, 0)
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn cancel_refunds_queued_and_refuses_running_finished_and_foreign(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let queued = app.submit_ok(M1_T2V, quick_body("to cancel")).await;
    let other = app.new_account(10).await;

    let foreign = app.cancel(&queued, &other.api_key).await;
    assert_error(foreign, StatusCode::NOT_FOUND, "not_found", None).await;
    let foreign_get = app
        .get(
            &format!("/generations/{}", queued["id"].as_str().unwrap()),
            &other.api_key,
        )
        .await;
    assert_error(foreign_get, StatusCode::NOT_FOUND, "not_found", None).await;

    let response = app.cancel(&queued, app.key()).await;
    assert_eq!(response.status(), StatusCode::OK);
    let canceled: Value = response.json().await.unwrap();
    assert_eq!(canceled["status"], "canceled");
    assert!(canceled["completed_at"].is_string());
    assert_eq!(canceled["cost"]["amount_usd"], 0.0);
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!((account.balance.0, account.held.0), (100_000_000, 0));

    let again = app.cancel(&queued, app.key()).await;
    assert_error(again, StatusCode::CONFLICT, "conflict", None).await;
    let missing = app
        .post_json("/generations/gen_nothing/cancel", app.key(), &json!({}))
        .await;
    assert_error(missing, StatusCode::NOT_FOUND, "not_found", None).await;
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_running_generation_cannot_be_canceled(store: StoreKind) {
    let app = spawn_app(store).await;
    let submitted = app
        .submit_ok(M1_T2V, quick_body("slow [sim:sleep=3000]"))
        .await;
    let id = submitted["id"].as_str().unwrap();
    let running = app.wait_for_status(id, &["running"]).await;
    assert!(running["started_at"].is_string());
    let refused = app.cancel(&submitted, app.key()).await;
    assert_error(refused, StatusCode::CONFLICT, "conflict", None).await;
    let response = app.get(&format!("/generations/{id}"), app.key()).await;
    assert_eq!(response.headers()["retry-after"], "5");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "running");
    let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded");
    let finished_cancel = app.cancel(&submitted, app.key()).await;
    assert_error(finished_cancel, StatusCode::CONFLICT, "conflict", None).await;
}

async fn insufficient_balance_is_402_and_holds_nothing(store: StoreKind) {
    let app = spawn_app(store).await;
    let poor = app.new_account(0).await;
    let response = app.submit_quick_with_key(&poor.api_key, "x").await;
    assert_insufficient_balance(response).await;
    let account = app.account_state(&poor.account.id).await;
    assert_eq!((account.balance.0, account.held.0), (0, 0));
    assert!(
        app.server
            .store
            .ledger()
            .entries(&poor.account.id)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn the_21st_concurrent_generation_is_refused_and_a_finished_one_frees_a_slot(
    store: StoreKind,
) {
    let app = spawn_app_without_workers(store).await;
    // Two keys of one account share the account's limit.
    let second_key = vidgate_server::application::accounts::create_api_key(
        app.server.store.as_ref(),
        &app.account.account.id,
        "second",
    )
    .await
    .unwrap();
    let mut ids = Vec::new();
    for index in 0..20 {
        let key = if index % 2 == 0 {
            app.key().to_owned()
        } else {
            second_key.api_key.clone()
        };
        let response = app.submit_quick_with_key(&key, "x").await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        let body: Value = response.json().await.unwrap();
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let refused = app.submit_quick_with_key(&second_key.api_key, "x").await;
    let body = assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    assert_error_message_contains(&body, "20");
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(account.held.0, 20 * 100_000);

    let cancel = app
        .post_json(
            &format!("/generations/{}/cancel", ids[0]),
            app.key(),
            &json!({}),
        )
        .await;
    assert_eq!(cancel.status(), StatusCode::OK);
    let accepted = app.submit(M1_T2V, quick_body("x")).await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_burst_of_25_requests_lets_20_through(store: StoreKind) {
    let app = spawn_app(store).await;
    // A refill of one token per second keeps the count exact however slowly
    // this machine sends the burst; the default quota's arithmetic is
    // covered by the limiter's own unit test.
    let limits = vidgate_server::store::AccountLimits {
        requests_per_second: 1,
        burst: 20,
        max_concurrent: 20,
    };
    set_account_limits(&app.server.store, &app.account.account.id, limits).await;
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..25 {
        let request = app.client.get(app.url("/account")).bearer_auth(app.key());
        burst.spawn(async move { request.send().await.unwrap() });
    }
    let responses = burst.join_all().await;
    let passed = responses
        .iter()
        .filter(|response| response.status() == StatusCode::OK)
        .count();
    let limited: Vec<_> = responses
        .iter()
        .filter(|response| response.status() == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(passed, 20);
    assert_eq!(limited.len(), 5);
    assert!(
        limited
            .iter()
            .all(|response| response.headers().contains_key("retry-after"))
    );
    assert!(
        limited
            .iter()
            .all(|response| response.headers()["x-ratelimit-remaining"] == "0")
    );
    // Another key has its own bucket; public endpoints are not counted.
    let other = app.new_account(1).await;
    assert_eq!(
        app.get("/account", &other.api_key).await.status(),
        StatusCode::OK
    );
    let public = app.get("/models", app.key()).await;
    assert_eq!(public.status(), StatusCode::OK);
}

async fn an_idempotency_key_replays_the_original_and_rejects_a_different_body(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let send = |body: Value, key: &'static str| {
        app.client
            .post(app.url(&format!("/run/{M1_T2V}")))
            .bearer_auth(app.key())
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    let first = send(quick_body("once"), "retry-1").await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value = first.json().await.unwrap();
    let replay = send(quick_body("once"), "retry-1").await.unwrap();
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["id"], first["id"]);
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(account.held.0, 100_000, "one hold only");

    let different = send(quick_body("twice"), "retry-1").await.unwrap();
    assert_error(
        different,
        StatusCode::CONFLICT,
        "conflict",
        Some("Idempotency-Key"),
    )
    .await;
    let other_key = send(quick_body("once"), "retry-2").await.unwrap();
    let other_key: Value = other_key.json().await.unwrap();
    assert_ne!(other_key["id"], first["id"]);
    // Without the header, every submit is a new generation.
    let plain_one = app.submit_ok(M1_T2V, quick_body("once")).await;
    let plain_two = app.submit_ok(M1_T2V, quick_body("once")).await;
    assert_ne!(plain_one["id"], plain_two["id"]);
}

async fn a_paused_model_answers_503_and_holds_nothing(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    set_model_paused(&app.server.store, "vendor_1/model_1", true).await;
    let response = app.submit(M1_T2V, quick_body("x")).await;
    assert_model_unavailable(response).await;
    assert_eq!(app.account_state(&app.account.account.id).await.held.0, 0);
    // Other models are unaffected; resuming accepts again.
    let other = app
        .submit("vendor_2/model_2/text-to-video", json!({ "prompt": "x" }))
        .await;
    assert_eq!(other.status(), StatusCode::ACCEPTED);
    set_model_paused(&app.server.store, "vendor_1/model_1", false).await;
    assert_eq!(
        app.submit(M1_T2V, quick_body("x")).await.status(),
        StatusCode::ACCEPTED
    );
}

/// A model server that refuses every job at admission.
struct RefusingBackend;

#[async_trait]
impl Backend for RefusingBackend {
    fn kind(&self) -> &'static str {
        "refusing"
    }
    async fn admit(&self, _admission: &Admission<'_>) -> Result<(), Rejection> {
        Err(Rejection::Upstream(
            "the model server rejected the input".into(),
        ))
    }
    async fn run(&self, _job: Job, _cancel: CancellationToken) -> Result<RenderedClip, JobFailure> {
        unreachable!("refused jobs never run")
    }
}

async fn a_backend_refusal_at_admission_is_502_and_charges_nothing(store: StoreKind) {
    let mut backends = BackendsConfig::builtin(true);
    backends.set_for_model("vendor_1/model_1", |_parts| Arc::new(RefusingBackend));
    // Workers run: admission happens before anything is queued, so none can
    // claim the refused job.
    let app = spawn_app_with(TestSettings {
        backends,
        ..TestSettings::new(store)
    })
    .await;
    let response = app.submit(M1_T2V, quick_body("x")).await;
    assert_error(response, StatusCode::BAD_GATEWAY, "upstream_error", None).await;
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(
        (account.balance.0, account.held.0, account.captured.0),
        (100_000_000, 0, 0)
    );
    let entries = app
        .server
        .store
        .ledger()
        .entries(&app.account.account.id)
        .await
        .unwrap();
    assert!(
        entries.iter().all(|entry| entry.kind == "credit"),
        "{entries:?}"
    );
    let listed = app.get_json("/generations", app.key()).await;
    assert!(listed["data"].as_array().unwrap().is_empty(), "{listed}");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// A model server that admits one job, then refuses every other as
/// unavailable, as a backend whose circuits opened does.
#[derive(Default)]
struct AdmitsOnceBackend {
    admitted: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Backend for AdmitsOnceBackend {
    fn kind(&self) -> &'static str {
        "admits-once"
    }
    async fn admit(&self, _admission: &Admission<'_>) -> Result<(), Rejection> {
        if self
            .admitted
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Rejection::Unavailable(
                "the model's circuits are open".into(),
            ));
        }
        Ok(())
    }
    async fn run(&self, _job: Job, _cancel: CancellationToken) -> Result<RenderedClip, JobFailure> {
        unreachable!("no worker runs here")
    }
}

/// A retry of an accepted submit under its `Idempotency-Key` is answered
/// the generation it made, while the model is paused or its backend
/// refuses new jobs: a 503 would tell the client that nothing is held while
/// the first request's generation runs and is charged.
async fn a_retry_is_replayed_while_the_model_is_paused_or_refused(store: StoreKind) {
    let mut backends = BackendsConfig::builtin(true);
    let backend: Arc<dyn Backend> = Arc::new(AdmitsOnceBackend::default());
    backends.set_for_model("vendor_1/model_1", move |_parts| backend.clone());
    let app = spawn_app_with(TestSettings {
        backends,
        workers: 0,
        ..TestSettings::new(store)
    })
    .await;
    let send = |body: Value| {
        app.client
            .post(app.url(&format!("/run/{M1_T2V}")))
            .bearer_auth(app.key())
            .header("idempotency-key", "retry-1")
            .json(&body)
            .send()
    };
    let first = send(quick_body("once")).await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value = first.json().await.unwrap();

    // The backend refuses new jobs now: the retry is still its replay.
    let refused_new = app.submit(M1_T2V, quick_body("new")).await;
    assert_model_unavailable(refused_new).await;
    let replay = send(quick_body("once")).await.unwrap();
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["id"], first["id"]);

    // So while the model is paused.
    set_model_paused(&app.server.store, "vendor_1/model_1", true).await;
    let replay = send(quick_body("once")).await.unwrap();
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["id"], first["id"]);
    // Another request under the key is still a conflict.
    let different = send(quick_body("twice")).await.unwrap();
    assert_error(
        different,
        StatusCode::CONFLICT,
        "conflict",
        Some("Idempotency-Key"),
    )
    .await;
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(account.held.0, 100_000, "one hold only");
}

async fn the_list_pages_newest_first_and_filters(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let mut ids = Vec::new();
    for index in 0..5 {
        let endpoint = if index == 4 {
            "vendor_2/model_2/text-to-video"
        } else {
            M1_T2V
        };
        let body = if index == 4 {
            json!({ "prompt": "x" })
        } else {
            quick_body("x")
        };
        ids.push(
            app.submit_ok(endpoint, body).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    app.post_json(
        &format!("/generations/{}/cancel", ids[1]),
        app.key(),
        &json!({}),
    )
    .await;

    let first = app.get_json("/generations?limit=2", app.key()).await;
    assert_eq!(first["object"], "list");
    assert_eq!(first["has_more"], true);
    let page_ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(page_ids(&first), vec![ids[4].clone(), ids[3].clone()]);
    let cursor = first["next_cursor"].as_str().unwrap();
    // A generation created meanwhile does not shift the next page.
    app.submit_ok(M1_T2V, quick_body("late")).await;
    let second = app
        .get_json(&format!("/generations?limit=2&cursor={cursor}"), app.key())
        .await;
    assert_eq!(page_ids(&second), vec![ids[2].clone(), ids[1].clone()]);
    let third: Value = app
        .get(
            &format!(
                "/generations?limit=2&cursor={}",
                second["next_cursor"].as_str().unwrap()
            ),
            app.key(),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page_ids(&third), vec![ids[0].clone()]);
    assert_eq!(third["has_more"], false);
    assert!(third["next_cursor"].is_null());

    let canceled = app
        .get_json("/generations?status=canceled", app.key())
        .await;
    assert_eq!(page_ids(&canceled), vec![ids[1].clone()]);
    let m2 = app
        .get_json("/generations?model=vendor_2/model_2", app.key())
        .await;
    assert_eq!(page_ids(&m2), vec![ids[4].clone()]);

    let other = app.new_account(1).await;
    let foreign = app.get_json("/generations", &other.api_key).await;
    assert!(foreign["data"].as_array().unwrap().is_empty());

    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("status=done", "status"),
        ("cursor=@@", "cursor"),
    ] {
        let response = app.get(&format!("/generations?{query}"), app.key()).await;
        assert_invalid_request(response, param).await;
    }
}

on_both_stores!(
    a_submitted_generation_is_held_rendered_and_captured,
    the_same_seed_reproduces_the_same_clip,
    a_failed_job_is_refunded_with_an_error_object,
    cancel_refunds_queued_and_refuses_running_finished_and_foreign,
    a_running_generation_cannot_be_canceled,
    insufficient_balance_is_402_and_holds_nothing,
    the_21st_concurrent_generation_is_refused_and_a_finished_one_frees_a_slot,
    a_burst_of_25_requests_lets_20_through,
    an_idempotency_key_replays_the_original_and_rejects_a_different_body,
    a_paused_model_answers_503_and_holds_nothing,
    a_backend_refusal_at_admission_is_502_and_charges_nothing,
    a_retry_is_replayed_while_the_model_is_paused_or_refused,
    the_list_pages_newest_first_and_filters,
);
