//! Spend limits per API key: a submit whose hold would take its key past
//! the key's limit is refused (402, nothing held), decided in the submit's
//! transaction, so that many submits at once never pass it, on either
//! store; a refund gives the room back.

use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::spend_limits::{SpendLimit, SpendPeriod};
use vidgate_server::store::AccountLimits;

use crate::common::{
    M1_T2V, StoreKind, TestSettings, assert_error, assert_error_message_contains,
    assert_insufficient_balance, on_both_stores, quick_body, set_account_limits, spawn_app_with,
    spawn_app_without_workers,
};

on_both_stores!(fifty_submits_at_once_never_pass_a_key_limit);

const OPERATOR_TOKEN: &str = "operator-token-for-spend-limits-0123456789";

async fn fifty_submits_at_once_never_pass_a_key_limit(store: StoreKind) {
    // No workers: every accepted generation stays queued, its hold counting.
    let app = spawn_app_without_workers(store).await;
    let customer = app.new_account(100).await;
    let account_id = customer.account.id.clone();
    // Neither the request rate nor the concurrency cap may refuse first.
    set_account_limits(
        &app.server.store,
        &account_id,
        AccountLimits {
            requests_per_second: 10_000,
            burst: 10_000,
            max_concurrent: 10_000,
        },
    )
    .await;
    let price = app.quoted_price(M1_T2V, &quick_body("a quote")).await;
    assert!(price > Micros::ZERO);
    let limit = SpendLimit {
        amount: Micros(price.0 * 7 + price.0 / 2),
        period: SpendPeriod::Day,
    };
    vidgate_server::application::keys_and_secrets::set_spend_limit(
        app.server.store.as_ref(),
        vidgate_server::application::keys_and_secrets::Changer::Operator("test"),
        &customer.key_id,
        Some(limit),
    )
    .await
    .unwrap();

    let mut submits = tokio::task::JoinSet::new();
    for number in 0..50 {
        let client = app.client.clone();
        let url = app.url(&format!("/run/{M1_T2V}"));
        let key = customer.api_key.clone();
        submits.spawn(async move {
            client
                .post(url)
                .bearer_auth(key)
                .json(&quick_body(&format!("one of fifty, number {number}")))
                .send()
                .await
                .unwrap()
        });
    }
    let mut accepted = Vec::new();
    let mut refused = 0;
    while let Some(response) = submits.join_next().await {
        let response = response.unwrap();
        match response.status() {
            StatusCode::ACCEPTED => accepted.push(response.json::<Value>().await.unwrap()),
            _ => {
                let body = assert_insufficient_balance(response).await;
                assert_error_message_contains(&body, "per UTC day");
                assert_error_message_contains(&body, "resets at");
                refused += 1;
            }
        }
    }
    assert_eq!(accepted.len(), 7, "seven prices fit in the limit");
    assert_eq!(refused, 43);
    let account = app.account_state(&account_id).await;
    assert_eq!(
        account.held,
        Micros(price.0 * 7),
        "nothing refused was held"
    );
    app.assert_ledger_invariant(&account_id).await;

    // A canceled generation's refund gives its room back, once.
    let canceled = app.cancel(&accepted[0], &customer.api_key).await;
    assert_eq!(canceled.status(), StatusCode::OK);
    let run_path = format!("/run/{M1_T2V}");
    let again = app
        .post_json(
            &run_path,
            &customer.api_key,
            &quick_body("in the room a refund gave back"),
        )
        .await;
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    let past = app
        .post_json(
            &run_path,
            &customer.api_key,
            &quick_body("past the limit again"),
        )
        .await;
    assert_insufficient_balance(past).await;

    // Another key of the account is not limited by this one's limit.
    assert_eq!(
        app.submit(M1_T2V, quick_body("the account's other key"))
            .await
            .status(),
        StatusCode::ACCEPTED
    );
}

/// The operator sets and removes a key's limit through the operator API.
#[tokio::test]
async fn the_operator_sets_a_key_limit() {
    let app = spawn_app_with(TestSettings {
        operator_token: Some(OPERATOR_TOKEN.to_owned()),
        workers: 0,
        hosted_jobs: 0,
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    let root = app.api_base.trim_end_matches("/api/v1").to_owned();
    let set = |key_id: &str, body: Value| {
        app.client
            .post(format!("{root}/admin/v1/keys/{key_id}/limits"))
            .bearer_auth(OPERATOR_TOKEN)
            .header("X-Operator", "ada@ops")
            .json(&body)
            .send()
    };
    let key_id = app.account.key_id.clone();
    let response = set(
        &key_id,
        json!({ "spend_limit_usd": "0.01", "spend_limit_period": "month" }),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let shown: Value = response.json().await.unwrap();
    assert_eq!(
        shown,
        json!({ "key_id": key_id, "spend_limit_usd": "0.01", "spend_limit_period": "month" })
    );
    let refused = app.submit(M1_T2V, quick_body("over a cent")).await;
    let body = assert_insufficient_balance(refused).await;
    assert_error_message_contains(&body, "0.01 USD per UTC month");

    let response = set(&key_id, json!({ "spend_limit_usd": null }))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.submit(M1_T2V, quick_body("no limit now"))
            .await
            .status(),
        StatusCode::ACCEPTED
    );

    let response = set(
        &key_id,
        json!({ "spend_limit_usd": "1", "spend_limit_period": "week" }),
    )
    .await
    .unwrap();
    assert_error(
        response,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        Some("spend_limit_period"),
    )
    .await;
    let response = set(
        "key_unknown",
        json!({ "spend_limit_usd": "1", "spend_limit_period": "day" }),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}
