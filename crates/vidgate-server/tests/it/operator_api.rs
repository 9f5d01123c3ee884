//! The operator API under `/admin/v1` over real HTTP: its token, accounts,
//! credit adjustments applied once per Idempotency-Key, model pauses, webhook
//! secrets, dashboard users and the audit log of every change.

use crate::common;

use common::*;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{Value, json};
use vidgate_core::Micros;

const TOKEN: &str = "operator-token-for-tests-0123456789abcdef";

async fn spawn_operated_app(store: StoreKind) -> TestApp {
    spawn_app_with(TestSettings {
        operator_token: Some(TOKEN.to_owned()),
        ..TestSettings::new(store)
    })
    .await
}

fn admin_url(app: &TestApp, path: &str) -> String {
    format!(
        "{}/admin/v1{path}",
        app.api_base.trim_end_matches("/api/v1")
    )
}

fn as_operator(request: RequestBuilder) -> RequestBuilder {
    request.bearer_auth(TOKEN).header("X-Operator", "ada@ops")
}

/// A GET of `path` under the operator API, sent as the operator.
async fn operator_get(app: &TestApp, path: &str) -> reqwest::Response {
    as_operator(app.client.get(admin_url(app, path)))
        .send()
        .await
        .unwrap()
}

/// The JSON answer to a GET of `path` under the operator API.
async fn operator_get_json(app: &TestApp, path: &str) -> Value {
    operator_get(app, path).await.json().await.unwrap()
}

async fn credit(app: &TestApp, account_id: &str, key: &str, body: Value) -> reqwest::Response {
    as_operator(
        app.client
            .post(admin_url(app, &format!("/accounts/{account_id}/credit"))),
    )
    .header("Idempotency-Key", key)
    .json(&body)
    .send()
    .await
    .unwrap()
}

/// The first page of the audit log, newest first.
async fn audit_log(app: &TestApp) -> Value {
    operator_get_json(app, "/audit-log").await
}

/// The action of each entry of an audit log page.
fn actions_of(log: &Value) -> Vec<&str> {
    log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["action"].as_str().unwrap())
        .collect()
}

async fn refused_without_a_configured_token(store: StoreKind) {
    let app = spawn_app(store).await;
    let response = app
        .client
        .get(admin_url(&app, "/accounts"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
    app.server.shutdown().await;
}

async fn refused_with_a_wrong_token(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    for presented in [None, Some("wrong"), Some(app.key())] {
        let mut request = app.client.get(admin_url(&app, "/accounts"));
        if let Some(token) = presented {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
    }
    app.server.shutdown().await;
}

async fn accounts_are_created_listed_and_shown(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let response = as_operator(app.client.post(admin_url(&app, "/accounts")))
        .json(&json!({ "name": "acme" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    let account_id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["name"], "acme");
    assert_eq!(created["balance_usd"], 0.0);
    // The new key works on the customer API.
    let own = app
        .get("/account", created["api_key"].as_str().unwrap())
        .await;
    assert_eq!(own.status(), StatusCode::OK);

    let listed: Value = operator_get_json(&app, "/accounts?limit=500").await;
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|account| account["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&account_id.as_str()) && ids.contains(&app.account.account.id.as_str()));
    // Paging by id: one account per page, then the next after it.
    let first: Value = operator_get_json(&app, "/accounts?limit=1").await;
    let after = first["next_after"].as_str().unwrap();
    let second: Value = operator_get_json(&app, &format!("/accounts?limit=1&after={after}")).await;
    assert_ne!(first["data"][0]["id"], second["data"][0]["id"]);

    let shown = operator_get(&app, &format!("/accounts/{account_id}")).await;
    assert_eq!(shown.status(), StatusCode::OK);
    let missing = operator_get(&app, "/accounts/acct_nope").await;
    assert_error(missing, StatusCode::NOT_FOUND, "not_found", None).await;
    let unnamed = as_operator(app.client.post(admin_url(&app, "/accounts")))
        .json(&json!({ "name": " " }))
        .send()
        .await
        .unwrap();
    assert_invalid_request(unnamed, "name").await;
    app.server.shutdown().await;
}

async fn a_top_up_is_applied_exactly_once(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let account_id = app.account.account.id.clone();
    let body = json!({ "amount_micros": 12_500_000, "reason": "Stripe payment pi_123" });
    let first = credit(&app, &account_id, "pi_123", body.clone()).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["amount_micros"], 12_500_000);
    assert_eq!(first["actor"], "ada@ops");
    assert_eq!(first["account"]["balance_usd"], 112.5);

    // The payment system's webhook, delivered again.
    let again = credit(&app, &account_id, "pi_123", body).await;
    assert_eq!(again.status(), StatusCode::OK);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["created_at"], first["created_at"]);
    let account = app.account_state(&account_id).await;
    assert_eq!(account.balance, Micros(112_500_000));
    assert_eq!(account.credited, Micros(112_500_000));
    app.assert_ledger_invariant(&account_id).await;

    let changed = credit(
        &app,
        &account_id,
        "pi_123",
        json!({ "amount_micros": 1, "reason": "another" }),
    )
    .await;
    assert_error(
        changed,
        StatusCode::CONFLICT,
        "conflict",
        Some("Idempotency-Key"),
    )
    .await;

    let unkeyed = as_operator(
        app.client
            .post(admin_url(&app, &format!("/accounts/{account_id}/credit"))),
    )
    .json(&json!({ "amount_micros": 1, "reason": "no key" }))
    .send()
    .await
    .unwrap();
    assert_invalid_request(unkeyed, "Idempotency-Key").await;
    for (body, param) in [
        (
            json!({ "amount_micros": 0, "reason": "zero" }),
            "amount_micros",
        ),
        (
            json!({ "amount_micros": -5, "reason": "negative" }),
            "amount_micros",
        ),
        (json!({ "amount_micros": 5, "reason": "" }), "reason"),
    ] {
        let refused = credit(&app, &account_id, "refused", body).await;
        assert_invalid_request(refused, param).await;
    }
    let unknown = credit(
        &app,
        "acct_nope",
        "pi_456",
        json!({ "amount_micros": 5, "reason": "x" }),
    )
    .await;
    assert_error(unknown, StatusCode::NOT_FOUND, "not_found", None).await;
    // A body over the JSON limit (256 KiB) is refused before it is read.
    let reason = "x".repeat(300 * 1024);
    let too_large = credit(
        &app,
        &account_id,
        "pi_789",
        json!({ "amount_micros": 5, "reason": reason }),
    )
    .await;
    assert_error(
        too_large,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        None,
    )
    .await;
    // None of the refusals moved money.
    assert_eq!(
        app.account_state(&account_id).await.credited,
        Micros(112_500_000)
    );
    app.server.shutdown().await;
}

async fn model_pauses_and_every_change_are_audited(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let pause = as_operator(
        app.client
            .post(admin_url(&app, "/models/vendor_1/model_1/pause")),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(pause.status(), StatusCode::OK);
    let refused = app
        .submit(
            "vendor_1/model_1/text-to-video",
            json!({ "prompt": "a kite", "duration": 3 }),
        )
        .await;
    assert_model_unavailable(refused).await;
    let resume = as_operator(
        app.client
            .post(admin_url(&app, "/models/vendor_1/model_1/resume")),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resume.status(), StatusCode::OK);
    app.submit_ok(
        "vendor_1/model_1/text-to-video",
        json!({ "prompt": "a kite", "duration": 3 }),
    )
    .await;
    let unknown = as_operator(
        app.client
            .post(admin_url(&app, "/models/vendor_9/model_9/pause")),
    )
    .send()
    .await
    .unwrap();
    assert_error(unknown, StatusCode::NOT_FOUND, "not_found", None).await;

    let account_id = app.account.account.id.clone();
    let topped_up = credit(
        &app,
        &account_id,
        "top-up-1",
        json!({ "amount_micros": 1_000_000, "reason": "goodwill" }),
    )
    .await;
    assert_eq!(topped_up.status(), StatusCode::CREATED);
    // A replay changes nothing, so it adds no audit entry.
    credit(
        &app,
        &account_id,
        "top-up-1",
        json!({ "amount_micros": 1_000_000, "reason": "goodwill" }),
    )
    .await;

    let log = audit_log(&app).await;
    let entries = log["data"].as_array().unwrap();
    let actions = actions_of(&log);
    assert_eq!(actions, ["account.credit", "model.resume", "model.pause"]);
    assert_eq!(entries[0]["actor"], "ada@ops");
    assert_eq!(entries[0]["target"], account_id.as_str());
    assert_eq!(entries[0]["detail"]["amount_micros"], 1_000_000);
    assert_eq!(entries[0]["detail"]["reason"], "goodwill");
    assert_eq!(entries[2]["target"], "vendor_1/model_1");
    // Paging backwards from an entry.
    let before = entries[0]["id"].as_i64().unwrap();
    let older: Value =
        operator_get_json(&app, &format!("/audit-log?before={before}&limit=1")).await;
    assert_eq!(older["data"][0]["action"], "model.resume");
    app.server.shutdown().await;
}

async fn keys_limits_users_and_usage(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let account_id = app.account.account.id.clone();
    let post = |path: String, body: Value| {
        as_operator(app.client.post(admin_url(&app, &path)))
            .json(&body)
            .send()
    };

    let key: Value = post(
        format!("/accounts/{account_id}/keys"),
        json!({ "name": "ci" }),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let api_key = key["api_key"].as_str().unwrap().to_owned();
    assert_eq!(app.get("/account", &api_key).await.status(), StatusCode::OK);
    let revoked = post(
        format!("/keys/{}/revoke", key["key_id"].as_str().unwrap()),
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    assert_eq!(
        app.get("/account", &api_key).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let again = post(
        format!("/keys/{}/revoke", key["key_id"].as_str().unwrap()),
        json!({}),
    )
    .await
    .unwrap();
    assert_error(again, StatusCode::NOT_FOUND, "not_found", None).await;

    let limited = post(
        format!("/accounts/{account_id}/limits"),
        json!({ "max_concurrent_generations": 3 }),
    )
    .await
    .unwrap();
    assert_eq!(limited.status(), StatusCode::OK);
    let limited: Value = limited.json().await.unwrap();
    assert_eq!(limited["limits"]["max_concurrent_generations"], 3);
    assert_eq!(limited["limits"]["requests_per_second"], 10);
    let refused = post(
        format!("/accounts/{account_id}/limits"),
        json!({ "burst": 0 }),
    )
    .await
    .unwrap();
    assert_invalid_request(refused, "burst").await;

    let user = post(
        format!("/accounts/{account_id}/users"),
        json!({ "email": "Ada@Example.com" }),
    )
    .await
    .unwrap();
    assert_eq!(user.status(), StatusCode::CREATED);
    let user: Value = user.json().await.unwrap();
    assert_eq!(user["email"], "ada@example.com");
    assert!(
        user["password"]
            .as_str()
            .is_some_and(|password| password.len() >= 12)
    );
    let taken = post(
        format!("/accounts/{account_id}/users"),
        json!({ "email": "ada@example.com" }),
    )
    .await
    .unwrap();
    assert_error(taken, StatusCode::CONFLICT, "conflict", Some("email")).await;

    // A finished generation's price is today's spend.
    let generation = app
        .submit_ok(
            "vendor_1/model_1/text-to-video",
            json!({ "prompt": "a kite", "duration": 3 }),
        )
        .await;
    app.wait_for_status(generation["id"].as_str().unwrap(), &["succeeded"])
        .await;
    let spent = app.account_state(&account_id).await.captured.0;
    assert!(spent > 0);
    let usage: Value = operator_get_json(&app, &format!("/accounts/{account_id}/usage")).await;
    assert_eq!(usage["data"].as_array().unwrap().len(), 1, "{usage}");
    assert_eq!(usage["data"][0]["spent_micros"], spent);
    let csv = operator_get(
        &app,
        &format!("/accounts/{account_id}/usage?format=csv&days=7"),
    )
    .await;
    assert!(
        csv.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let csv = csv.text().await.unwrap();
    let date = usage["data"][0]["date"].as_str().unwrap();
    assert_eq!(
        csv,
        format!("date,account_id,spent_micros\n{date},{account_id},{spent}\n")
    );

    let log = audit_log(&app).await;
    let actions = actions_of(&log);
    assert_eq!(
        actions,
        ["user.create", "account.limits", "key.revoke", "key.create"]
    );
    app.server.shutdown().await;
}

async fn deleting_an_account_keeps_only_its_books(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let account_id = app.account.account.id.clone();
    let delete = |account_id: &str| {
        as_operator(
            app.client
                .delete(admin_url(&app, &format!("/accounts/{account_id}"))),
        )
        .send()
    };
    let finished = app.submit_ok(M1_T2V, quick_body("a private prompt")).await;
    let finished_id = finished["id"].as_str().unwrap().to_owned();
    let finished = app.wait_for_status(&finished_id, &["succeeded"]).await;
    let video_url = finished["output"]["video_url"].as_str().unwrap().to_owned();
    let upload_url = app.upload_png().await["url"].as_str().unwrap().to_owned();

    // Refused while a job runs: its hold and result still belong to it.
    let running = app
        .submit_ok(M1_T2V, quick_body("slow [sim:sleep=1500]"))
        .await;
    let response = delete(&account_id).await.unwrap();
    assert_error(response, StatusCode::CONFLICT, "conflict", None).await;
    app.wait_for_status(running["id"].as_str().unwrap(), &["succeeded"])
        .await;
    let before = app.account_state(&account_id).await;

    let response = delete(&account_id).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let tombstone: Value = response.json().await.unwrap();
    assert!(tombstone["deleted_at"].is_string(), "{tombstone}");
    assert_eq!(tombstone["name"], "");
    // The money figures stay, and still add up.
    let after = app.account_state(&account_id).await;
    assert_eq!(
        (after.balance, after.held, after.captured, after.credited),
        (
            before.balance,
            before.held,
            before.captured,
            before.credited
        )
    );
    assert!(after.captured > Micros::ZERO);
    app.assert_ledger_invariant(&account_id).await;
    // Its key no longer works and its prompts are forgotten.
    let response = app.get("/account", app.key()).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let record = app
        .server
        .store
        .generations()
        .get(&account_id, &finished_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.input, json!({}));
    assert_eq!(record.output, None);
    assert_eq!(
        record.price.to_usd(),
        finished["cost"]["amount_usd"].as_f64().unwrap()
    );
    // The next sweep deletes its files from storage; their URLs then answer
    // 410.
    let storage = vidgate_server::storage::Storage::local(app.data_dir.path().join("files"));
    let report = vidgate_server::retention::sweep(
        app.server.store.as_ref(),
        &storage,
        std::time::Duration::from_secs(3600),
        vidgate_server::store::now_millis(),
    )
    .await
    .unwrap();
    assert_eq!(report.files_deleted, 3);
    assert!(!app.local_file(&video_url).exists());
    assert!(!app.local_file(&upload_url).exists());
    app.assert_gone(&video_url).await;
    app.assert_gone(&upload_url).await;

    // A tombstone takes no new key, user or limits: they would bring the
    // deleted customer back.
    for (path, body) in [
        ("keys", json!({ "name": "back" })),
        ("users", json!({ "email": "back@example.com" })),
        ("limits", json!({ "burst": 5 })),
    ] {
        let response = as_operator(
            app.client
                .post(admin_url(&app, &format!("/accounts/{account_id}/{path}"))),
        )
        .json(&body)
        .send()
        .await
        .unwrap();
        assert_error(response, StatusCode::CONFLICT, "conflict", None).await;
    }

    // Deleting again answers the tombstone; an unknown account is 404.
    let response = delete(&account_id).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = delete("acct_missing").await.unwrap();
    assert_error(response, StatusCode::NOT_FOUND, "not_found", None).await;
    let log = audit_log(&app).await;
    let deletions: Vec<&Value> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["action"] == "account.delete")
        .collect();
    assert_eq!(deletions.len(), 1, "{log}");
    assert_eq!(deletions[0]["actor"], "ada@ops");
    assert_eq!(deletions[0]["target"], account_id.as_str());
    assert_eq!(deletions[0]["detail"]["files"], 3);
    app.server.shutdown().await;
}

async fn debits_take_money_back_once_and_never_below_zero(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let account_id = app.account.account.id.clone();
    let debit = |key: &'static str, amount_micros: i64| {
        as_operator(
            app.client
                .post(admin_url(&app, &format!("/accounts/{account_id}/debit"))),
        )
        .header("Idempotency-Key", key)
        .json(&json!({ "amount_micros": amount_micros, "reason": "chargeback ch_1" }))
        .send()
    };
    let before = app.account_state(&account_id).await;
    let response = debit("chargeback-1", 30_000_000).await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let applied: Value = response.json().await.unwrap();
    assert_eq!(applied["kind"], "debit");
    assert_eq!(applied["amount_micros"], 30_000_000);
    let after = app.account_state(&account_id).await;
    assert_eq!(after.balance, before.balance - Micros(30_000_000));
    assert_eq!(after.credited, before.credited - Micros(30_000_000));
    // The same delivery again takes nothing more.
    let response = debit("chargeback-1", 30_000_000).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(app.account_state(&account_id).await.balance, after.balance);
    // A credit cannot reuse a debit's key.
    let response = credit(
        &app,
        &account_id,
        "chargeback-1",
        json!({ "amount_micros": 30_000_000, "reason": "x" }),
    )
    .await;
    assert_error(
        response,
        StatusCode::CONFLICT,
        "conflict",
        Some("Idempotency-Key"),
    )
    .await;
    // More than the balance is refused whole.
    let response = debit("chargeback-2", after.balance.0 + 1).await.unwrap();
    assert_insufficient_balance(response).await;
    assert_eq!(app.account_state(&account_id).await.balance, after.balance);
    // The whole balance may go.
    let response = debit("chargeback-3", after.balance.0).await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(app.account_state(&account_id).await.balance, Micros::ZERO);
    app.assert_ledger_invariant(&account_id).await;
    let entries = app
        .server
        .store
        .ledger()
        .entries(&account_id)
        .await
        .unwrap();
    let debits: Vec<i64> = entries
        .iter()
        .filter(|entry| entry.kind == "debit")
        .map(|entry| entry.amount.0)
        .collect();
    assert_eq!(debits, [30_000_000, after.balance.0]);
    let log = audit_log(&app).await;
    let actions = actions_of(&log);
    assert_eq!(actions, ["account.debit", "account.debit"]);
    app.server.shutdown().await;
}

async fn generations_are_listed_across_accounts_with_filters(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let mine = app.account.account.id.clone();
    let other = app.new_account(10).await;
    let mut ids = Vec::new();
    for prompt in ["first", "second"] {
        ids.push(app.submit_ok(M1_T2V, quick_body(prompt)).await["id"].clone());
    }
    let response = app.submit_quick_with_key(&other.api_key, "theirs").await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let theirs: Value = response.json().await.unwrap();
    for id in ids.iter().chain([&theirs["id"]]) {
        // Another account's generation is read through the operator API.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let page = list_generations(&app, "?status=succeeded").await;
            if page["data"]
                .as_array()
                .unwrap()
                .iter()
                .any(|generation| generation["id"] == *id)
            {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{id} never succeeded");
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        }
    }

    let all = list_generations(&app, "").await;
    let listed: Vec<&Value> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["id"])
        .collect();
    assert_eq!(listed, [&theirs["id"], &ids[1], &ids[0]]);
    assert_eq!(all["data"][0]["account_id"], other.account.id.as_str());
    assert_eq!(all["data"][0]["object"], "generation");
    assert_eq!(all["has_more"], false);

    let only_mine = list_generations(&app, &format!("?account_id={mine}")).await;
    let listed: Vec<&Value> = only_mine["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["id"])
        .collect();
    assert_eq!(listed, [&ids[1], &ids[0]]);

    // Cursor pagination as in the public list.
    let first_page = list_generations(&app, "?limit=2").await;
    assert_eq!(first_page["data"].as_array().unwrap().len(), 2);
    assert_eq!(first_page["has_more"], true);
    let cursor = first_page["next_cursor"].as_str().unwrap();
    let second_page = list_generations(&app, &format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(second_page["data"][0]["id"], ids[0]);
    assert_eq!(second_page["has_more"], false);

    assert!(
        list_generations(&app, "?status=failed").await["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        list_generations(&app, "?model=vendor_2/model_2").await["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        list_generations(&app, "?model=vendor_1/model_1").await["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let future = "2999-01-01T00:00:00Z";
    assert!(
        list_generations(&app, &format!("?created_from={future}")).await["data"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        list_generations(&app, &format!("?created_until={future}")).await["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let response = operator_get(&app, "/generations?created_from=yesterday").await;
    assert_invalid_request(response, "created_from").await;
    app.server.shutdown().await;
}

async fn list_generations(app: &TestApp, query: &str) -> Value {
    let response = operator_get(app, &format!("/generations{query}")).await;
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    response.json().await.unwrap()
}

/// The actions the CLI had alone: rotating an account's webhook secret,
/// signing a dashboard user out everywhere, removing one.
async fn webhook_secrets_rotate_and_users_are_signed_out_and_removed(store: StoreKind) {
    let app = spawn_operated_app(store).await;
    let account_id = app.account.account.id.clone();
    let post = |path: String| as_operator(app.client.post(admin_url(&app, &path))).send();

    let rotated = post(format!("/accounts/{account_id}/webhook-secret/rotate"))
        .await
        .unwrap();
    assert_eq!(rotated.status(), StatusCode::OK);
    let rotated: Value = rotated.json().await.unwrap();
    assert_eq!(rotated["account_id"], account_id.as_str());
    let secret = rotated["webhook_secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{rotated}");
    assert_ne!(secret, app.account.account.webhook_secret);
    assert!(
        rotated["previous_secret_expires_at"].is_string(),
        "{rotated}"
    );
    let account = app.account_state(&account_id).await;
    assert_eq!(account.webhook_secret, secret);
    assert_eq!(
        account.previous_webhook_secret.as_deref(),
        Some(app.account.account.webhook_secret.as_str())
    );
    let missing = post("/accounts/acct_missing/webhook-secret/rotate".to_owned())
        .await
        .unwrap();
    assert_error(missing, StatusCode::NOT_FOUND, "not_found", None).await;

    let user = vidgate_server::application::users::create_user(
        app.server.store.as_ref(),
        &account_id,
        "ada@example.com",
        None,
    )
    .await
    .unwrap();
    app.server
        .store
        .users()
        .create_session(&vidgate_server::store::NewSession {
            id: "session_1".into(),
            token_sha256: "session-token-digest".into(),
            user_id: user.user.id.clone(),
            account_id: account_id.clone(),
            csrf_token: "csrf".into(),
            expires_at: vidgate_server::store::now_millis() + 3_600_000,
        })
        .await
        .unwrap();
    let signed_out = post("/users/Ada@Example.com/revoke-sessions".to_owned())
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::OK);
    let signed_out: Value = signed_out.json().await.unwrap();
    assert_eq!(signed_out["id"], user.user.id.as_str());
    assert_eq!(signed_out["sessions_revoked"], 1);
    let removed = as_operator(app.client.delete(admin_url(&app, "/users/ada@example.com")))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    let removed: Value = removed.json().await.unwrap();
    assert_eq!(removed["account_id"], account_id.as_str());
    assert_eq!(removed["removed"], true);
    assert_eq!(
        app.server
            .store
            .users()
            .by_email("ada@example.com")
            .await
            .unwrap(),
        None
    );
    let again = as_operator(app.client.delete(admin_url(&app, "/users/ada@example.com")))
        .send()
        .await
        .unwrap();
    assert_error(again, StatusCode::NOT_FOUND, "not_found", None).await;

    let log = audit_log(&app).await;
    let actions = actions_of(&log);
    assert_eq!(
        actions,
        [
            "user.remove",
            "user.revoke_sessions",
            "account.rotate_webhook_secret"
        ]
    );
    assert_eq!(log["data"][1]["detail"]["sessions_revoked"], 1);
    app.server.shutdown().await;
}

on_both_stores!(
    webhook_secrets_rotate_and_users_are_signed_out_and_removed,
    generations_are_listed_across_accounts_with_filters,
    debits_take_money_back_once_and_never_below_zero,
    deleting_an_account_keeps_only_its_books,
    keys_limits_users_and_usage,
    refused_without_a_configured_token,
    refused_with_a_wrong_token,
    accounts_are_created_listed_and_shown,
    a_top_up_is_applied_exactly_once,
    model_pauses_and_every_change_are_audited,
);
