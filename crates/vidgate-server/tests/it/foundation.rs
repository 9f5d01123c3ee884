//! The foundation over real HTTP: the public catalog and quotes, API keys,
//! the account, and the error model of SPEC.md section 7.

use crate::common;

use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn models_are_public_cacheable_and_complete(store: StoreKind) {
    let app = spawn_app(store).await;
    let response = app.get_without_key("/models").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("max-age")
    );
    let etag = response.headers()["etag"].clone();
    let body: Value = response.json().await.unwrap();
    let models = body["data"].as_array().unwrap();
    assert_eq!(models.len(), 6);
    let m1 = models.iter().find(|model| model["label"] == "M1").unwrap();
    assert_eq!(m1["id"], "vendor_1/model_1");
    assert_eq!(m1["description_version"], "1.0.0");

    let unchanged = app
        .client
        .get(app.url("/models"))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);

    // The same id with a percent-escape names the same model.
    let mut records = Vec::new();
    for path in ["/models/vendor_4/model_4", "/models/vendor%5F4/model_4"] {
        let record: Value = app.get_without_key(path).await.json().await.unwrap();
        records.push(record);
    }
    assert_eq!(records[0]["label"], "M4");
    assert_eq!(records[1], records[0]);
    let missing = app.get_without_key("/models/vendor_9/model_9").await;
    assert_error(missing, StatusCode::NOT_FOUND, "not_found", None).await;
}

async fn quotes_price_requests_without_a_key_or_a_charge(store: StoreKind) {
    let app = spawn_app(store).await;
    let before = app.account_state(&app.account.account.id).await;
    let response = app
        .client
        .post(app.url("/quote/vendor_1/model_1/text-to-video"))
        .json(&json!({ "duration": 5, "resolution": "720p" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let quote: Value = response.json().await.unwrap();
    assert_eq!(quote["cost"]["amount_usd"], 0.5);
    assert_eq!(quote["cost"]["official_usd"], 0.6);
    assert_eq!(quote["cost"]["saved_usd"], 0.1);
    assert_eq!(quote["cost"]["estimated"], true);
    assert_eq!(quote["cost"]["currency"], "usd");
    assert_eq!(quote["breakdown"]["unit"], "second");

    // A key is accepted on public endpoints, and an empty body quotes the defaults.
    let with_key = app
        .client
        .post(app.url("/quote/vendor_2/model_2/text-to-video"))
        .bearer_auth(app.key())
        .send()
        .await
        .unwrap();
    assert_eq!(with_key.status(), StatusCode::OK);
    let m2: Value = with_key.json().await.unwrap();
    assert_eq!(m2["cost"]["amount_usd"], 0.8);

    let invalid = app
        .client
        .post(app.url("/quote/vendor_1/model_1/text-to-video"))
        .json(&json!({ "duration": 31 }))
        .send()
        .await
        .unwrap();
    assert_invalid_request(invalid, "duration").await;
    let unknown = app
        .client
        .post(app.url("/quote/vendor_2/model_2/reference-to-video"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_error(unknown, StatusCode::NOT_FOUND, "not_found", None).await;
    assert_eq!(app.account_state(&app.account.account.id).await, before);
}

async fn missing_malformed_unknown_and_revoked_keys_are_refused(store: StoreKind) {
    let app = spawn_app(store).await;
    let no_key = app.get_without_key("/account").await;
    assert_error(no_key, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
    for header in [
        "Basic abc",
        "Bearer",
        "Bearer not-a-key",
        "Bearer vg_live_unknownkeyunknownkeyunknownkey",
    ] {
        let response = app
            .client
            .get(app.url("/account"))
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
    }
    let response = app.get("/account", app.key()).await;
    assert_eq!(response.status(), StatusCode::OK);
    app.revoke_own_key_and_see_it_refused().await;
}

async fn the_account_shows_balance_and_limits(store: StoreKind) {
    let app = spawn_app(store).await;
    let response = app.get("/account", app.key()).await;
    assert_eq!(response.status(), StatusCode::OK);
    for header in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert!(response.headers().contains_key(header), "{header}");
    }
    let account: Value = response.json().await.unwrap();
    assert_eq!(account["id"], app.account.account.id.as_str());
    assert_eq!(account["balance_usd"], 100.0);
    assert_eq!(account["held_usd"], 0.0);
    assert_eq!(account["limits"]["requests_per_second"], 10);
    assert_eq!(account["limits"]["burst"], 20);
    assert_eq!(account["limits"]["max_concurrent_generations"], 20);
}

async fn every_error_has_the_spec_shape_and_a_request_id(store: StoreKind) {
    let app = spawn_app(store).await;
    let unknown_route = app.get_without_key("/nothing/here").await;
    assert!(unknown_route.headers().contains_key("x-request-id"));
    assert_error(unknown_route, StatusCode::NOT_FOUND, "not_found", None).await;
    let outside_api = app
        .client
        .get(format!(
            // `/` itself leads to the dashboard.
            "http://{}/elsewhere",
            app.server.local_addr.expect("the test server listens")
        ))
        .send()
        .await
        .unwrap();
    assert_error(outside_api, StatusCode::NOT_FOUND, "not_found", None).await;

    let wrong_method = app.client.delete(app.url("/models")).send().await.unwrap();
    assert_error(
        wrong_method,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        None,
    )
    .await;

    // The same limit holds on a key's routes and on the public ones.
    let huge = "x".repeat(300 * 1024);
    for too_large in [
        app.client
            .post(app.url(&format!("/run/{M1_T2V}")))
            .bearer_auth(app.key()),
        app.client.post(app.url(&format!("/quote/{M1_T2V}"))),
    ] {
        let refused = too_large.body(huge.clone()).send().await.unwrap();
        assert_error(
            refused,
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            None,
        )
        .await;
    }

    let not_json = app
        .client
        .post(app.url(&format!("/run/{M1_T2V}")))
        .bearer_auth(app.key())
        .body("{prompt")
        .send()
        .await
        .unwrap();
    assert_error(not_json, StatusCode::BAD_REQUEST, "invalid_request", None).await;

    let unknown_endpoint = app
        .submit("vendor_1/model_1/sound-to-video", json!({ "prompt": "x" }))
        .await;
    assert_error(unknown_endpoint, StatusCode::NOT_FOUND, "not_found", None).await;

    let missing_file = app.get_without_key("/files/outputs/nothing.mp4").await;
    assert_error(missing_file, StatusCode::NOT_FOUND, "not_found", None).await;

    let direct_upload = app
        .post_json("/uploads/initiate", app.key(), &json!({}))
        .await;
    assert_error(
        direct_upload,
        StatusCode::NOT_IMPLEMENTED,
        "direct_upload_unavailable",
        None,
    )
    .await;
}

async fn submit_validation_errors_name_the_parameter_and_charge_nothing(store: StoreKind) {
    let app = spawn_app(store).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (M1_T2V, json!({}), "prompt"),
        (M1_T2V, json!({ "prompt": "x", "colour": "red" }), "colour"),
        (
            M1_T2V,
            json!({ "prompt": "x", "duration": "5" }),
            "duration",
        ),
        (
            M1_T2V,
            json!({ "prompt": "x", "duration": 5.5 }),
            "duration",
        ),
        (
            M1_T2V,
            json!({ "prompt": "x", "resolution": "4k" }),
            "resolution",
        ),
        (
            M1_T2V,
            json!({ "prompt": "x", "image_url": "https://example.com/a.png" }),
            "image_url",
        ),
        (
            M1_T2V,
            json!({ "prompt": "x", "webhook_url": "not a url" }),
            "webhook_url",
        ),
        (M1_T2V, json!({ "prompt": "look at @Image1" }), "prompt"),
        (
            "vendor_1/model_1/image-to-video",
            json!({ "prompt": "x" }),
            "image_url",
        ),
        (
            "vendor_3/model_3/text-to-video",
            json!({ "prompt": "x", "resolution": "720p" }),
            "resolution",
        ),
        (
            "vendor_6/model_6/text-to-video",
            json!({ "prompt": "x", "seed": 1 }),
            "seed",
        ),
    ];
    for (endpoint, body, param) in cases {
        let response = app.submit(endpoint, body.clone()).await;
        assert_invalid_request(response, param).await;
    }
    let array_body = app
        .post_json(&format!("/run/{M1_T2V}"), app.key(), &json!(["prompt"]))
        .await;
    assert_error(array_body, StatusCode::BAD_REQUEST, "invalid_request", None).await;
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(account.held.0, 0);
    assert_eq!(account.balance.0, 100_000_000);
}

on_both_stores!(
    models_are_public_cacheable_and_complete,
    quotes_price_requests_without_a_key_or_a_charge,
    missing_malformed_unknown_and_revoked_keys_are_refused,
    the_account_shows_balance_and_limits,
    every_error_has_the_spec_shape_and_a_request_id,
    submit_validation_errors_name_the_parameter_and_charge_nothing,
);

/// A request id is the client's own `X-Request-Id` when it sends one, so a
/// client can find its call in our logs, and otherwise a new UUID for each
/// request, on success and error alike. It does not depend on the store.
#[tokio::test]
async fn a_request_id_is_the_clients_own_or_a_new_uuid() {
    let app = spawn_app(StoreKind::Sqlite).await;
    let request_id = |response: &reqwest::Response| {
        response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let chosen = app
        .client
        .get(app.url("/models"))
        .header("x-request-id", "client-chosen-42")
        .send()
        .await
        .unwrap();
    assert_eq!(chosen.status(), StatusCode::OK);
    assert_eq!(request_id(&chosen), "client-chosen-42");

    let mut seen = std::collections::HashSet::new();
    for path in ["/models", "/models", "/nothing/here"] {
        let response = app.get_without_key(path).await;
        let id = request_id(&response);
        let parsed = uuid::Uuid::parse_str(&id).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4, "{id}");
        assert!(seen.insert(id), "each request has its own id");
    }
}

/// The OpenAPI document describes every route the server answers, and every
/// route answers with a status the document lists for it. The document does
/// not depend on the store, so one store suffices.
#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let app = spawn_app(StoreKind::Sqlite).await;
    let document: Value = app
        .get_without_key("/openapi.json")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    let run = &paths["/run/vendor_1/model_1/text-to-video"]["post"];
    let schema = &run["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(schema["additionalProperties"], false);
    assert!(
        schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("prompt"))
    );
    // The customer list and the operator's list across accounts are both
    // documented: the operator's path is written in full, so it does not
    // take the customer path's key.
    assert_eq!(
        paths["/generations"]["get"]["operationId"],
        "list_generations"
    );
    assert_eq!(
        paths["/admin/v1/generations"]["get"]["tags"],
        json!(["operator"])
    );
    // One run and one quote path per catalog endpoint (M1, M4, M5, M6 have
    // three modes; M2 and M3 two).
    assert_eq!(
        paths
            .keys()
            .filter(|path| path.starts_with("/run/"))
            .count(),
        16
    );
    assert_eq!(
        paths
            .keys()
            .filter(|path| path.starts_with("/quote/"))
            .count(),
        16
    );

    for (path, operations) in paths {
        let concrete = path
            .replace("{vendor}", "vendor_1")
            .replace("{model}", "model_1")
            .replace("{id}", "gen_missing")
            .replace("{delivery_id}", "msg_missing")
            .replace("{account_id}", "acct_missing")
            .replace("{key_id}", "key_missing");
        // The operator API's paths name their own server (/admin/v1).
        let url = match operations["servers"][0]["url"].as_str() {
            Some(server) => format!("{server}{concrete}"),
            None => app.url(&concrete),
        };
        for (method, operation) in operations.as_object().unwrap() {
            let request = match method.as_str() {
                "servers" => continue,
                "get" => app.client.get(&url),
                "delete" => app.client.delete(&url),
                "post" => app
                    .client
                    .post(&url)
                    .json(&json!({ "prompt": "documented", "duration": 2, "resolution": "480p" })),
                other => panic!("undocumented method {other}"),
            };
            let response = request.bearer_auth(app.key()).send().await.unwrap();
            let status = response.status().as_u16().to_string();
            assert!(
                operation["responses"].get(&status).is_some(),
                "{method} {concrete} answered {status}, which the document does not list"
            );
        }
    }
}
