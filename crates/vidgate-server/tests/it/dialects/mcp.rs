//! The MCP server at `/mcp`: its key check over plain HTTP, and the tools
//! driven by the official `mcp` Python SDK's Streamable HTTP client
//! (`tests/mcp_client.py`).

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{DROPIN_PYTHON, root_url};
use crate::common::{StoreKind, on_both_stores, spawn_app};

on_both_stores!(
    mcp_needs_a_key_and_initializes_with_one,
    the_mcp_sdk_drives_the_tools
);

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "vidgate-test", "version": "1" },
        },
    })
}

async fn mcp_needs_a_key_and_initializes_with_one(store: StoreKind) {
    let app = spawn_app(store).await;
    let post = |key: Option<&str>| {
        let mut request = app
            .client
            .post(root_url(&app, "/mcp"))
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize());
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    let refused = post(None).await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let refused = post(Some("vg_live_unknown")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let answered = post(Some(app.key())).await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    let body: Value = answered.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], "vidgate", "{body}");
    assert!(
        body["result"]["capabilities"]["tools"].is_object(),
        "{body}"
    );
}

/// The `mcp` SDK (2.3.0, as `.ci/run` pins it): `initialize`, `list_tools`
/// and `call_tool` of each tool. It runs when `VIDGATE_TEST_DROPIN_PYTHON`
/// names a Python with it.
async fn the_mcp_sdk_drives_the_tools(store: StoreKind) {
    let Some(python) = crate::providers::program_named_by(
        DROPIN_PYTHON,
        "a Python with mcp==2.3.0 to drive /mcp with the MCP SDK's client",
    ) else {
        return;
    };
    let app = spawn_app(store).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(root_url(&app, "/mcp"))
        .arg(app.key());
    let (status, printed) = crate::providers::run_program(command, "the Python runs").await;
    assert!(status.success(), "{printed}");
    for part in ["initialize", "list_tools", "call_tool"] {
        assert!(printed.contains(&format!("mcp: {part} ok")), "{printed}");
    }
    let ids = printed
        .lines()
        .find_map(|line| line.strip_prefix("ids: "))
        .expect("the script prints its ids");
    // Read from the store: the script has just spent the key's request
    // budget, and a 429 here would say nothing about the generations.
    for id in ids.split_whitespace() {
        let generation = app
            .server
            .store
            .generations()
            .get(&app.account.account.id, id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{id} is stored"));
        assert_eq!(generation.source, "mcp", "{id}");
    }
    app.assert_ledger_invariant(&app.account.account.id).await;
}
