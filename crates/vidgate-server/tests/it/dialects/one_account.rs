//! One account through every surface (`/api/v1`, `/v1`, OpenRouter's
//! `/api/v1/videos` and `/mcp`): its generations are one set, each charged
//! once, whichever dialect made it.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;

use super::root_url;
use crate::common::{M1_T2V, StoreKind, on_both_stores, quick_body, spawn_app};

on_both_stores!(one_account_through_every_surface_is_charged_once_for_each_generation);

async fn one_account_through_every_surface_is_charged_once_for_each_generation(store: StoreKind) {
    let app = spawn_app(store).await;
    let key = app.key().to_owned();
    let account_id = app.account.account.id.clone();
    let credit = app.account_state(&account_id).await.balance;
    let mut made: Vec<(String, &str)> = Vec::new();

    let native = app.submit_ok(M1_T2V, quick_body("through /api/v1")).await;
    made.push((native["id"].as_str().unwrap().to_owned(), "api"));

    let openai = app
        .client
        .post(root_url(&app, "/v1/videos"))
        .bearer_auth(&key)
        .json(&json!({ "model": "vendor_1/model_1", "prompt": "through /v1", "seconds": "2", "size": "854x480" }))
        .send()
        .await
        .unwrap();
    assert_eq!(openai.status(), StatusCode::OK);
    let openai: Value = openai.json().await.unwrap();
    made.push((openai["id"].as_str().unwrap().to_owned(), "openai"));

    let openrouter = app
        .post_json(
            "/videos",
            &key,
            &json!({ "model": "vendor_1/model_1", "prompt": "through OpenRouter's API", "duration": 2, "resolution": "480p" }),
        )
        .await;
    assert_eq!(openrouter.status(), StatusCode::ACCEPTED);
    let openrouter: Value = openrouter.json().await.unwrap();
    made.push((openrouter["id"].as_str().unwrap().to_owned(), "openrouter"));

    // The MCP server's tool, as one JSON-RPC request (it runs stateless:
    // no session to open first).
    let mcp = app
        .client
        .post(root_url(&app, "/mcp"))
        .bearer_auth(&key)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "create_generation",
                "arguments": {
                    "model": "vendor_1/model_1",
                    "mode": "text-to-video",
                    "input": { "prompt": "through MCP", "duration": 2, "resolution": "480p" },
                },
            },
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::OK);
    let mcp: Value = mcp.json().await.unwrap();
    let created = &mcp["result"]["structuredContent"];
    assert_eq!(created["object"], "generation", "{mcp}");
    made.push((created["id"].as_str().unwrap().to_owned(), "mcp"));

    let mut charged = Micros::ZERO;
    for (id, source) in &made {
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        assert_eq!(done["source"], *source, "{done}");
        charged += Micros((done["cost"]["amount_usd"].as_f64().unwrap() * 1e6).round() as i64);
    }
    // Each surface reads the others' generations.
    let (openai_id, openrouter_id) = (&made[1].0, &made[2].0);
    let through_openai: Value = app
        .client
        .get(root_url(&app, &format!("/v1/videos/{openrouter_id}")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(through_openai["status"], "completed");
    let through_openrouter = app.get_json(&format!("/videos/{openai_id}"), &key).await;
    assert_eq!(through_openrouter["status"], "completed");

    let listed = app.get_json("/generations?limit=100", &key).await;
    let listed: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|generation| generation["id"].as_str().unwrap())
        .collect();
    let unique: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "each generation once: {listed:?}"
    );
    let expected: BTreeSet<&str> = made.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(unique, expected);

    let account = app.account_state(&account_id).await;
    assert_eq!(account.held, Micros::ZERO, "nothing held");
    assert_eq!(
        account.balance,
        credit - charged,
        "balance = credit − charges"
    );
    assert_eq!(account.captured, charged);
    app.assert_ledger_invariant(&account_id).await;
}
