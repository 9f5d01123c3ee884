//! The other dialects vidgate speaks (issue 53): each surface over plain
//! HTTP on both stores, and driven by its official client when the test
//! environment names one (`VIDGATE_TEST_DROPIN_PYTHON`, a Python with the
//! pinned `openai` SDK; `VIDGATE_TEST_DROPIN_NODE`, a Node for the pinned
//! `@openrouter/sdk`; `.ci/run` sets both).

mod mcp;
mod one_account;
mod openai;
mod openrouter;

use serde_json::Value;

use crate::common::TestApp;

/// The variable naming a Python with the clients of the other dialects.
pub const DROPIN_PYTHON: &str = "VIDGATE_TEST_DROPIN_PYTHON";

/// The variable naming a Node for `tests/openrouter_client`.
pub const DROPIN_NODE: &str = "VIDGATE_TEST_DROPIN_NODE";

/// The URL of `path` on the server's root (outside `/api/v1`).
pub fn root_url(app: &TestApp, path: &str) -> String {
    let root = app
        .api_base
        .strip_suffix("/api/v1")
        .expect("the API base ends in /api/v1");
    format!("{root}{path}")
}

/// A generation as `/api/v1` shows it.
pub async fn api_generation(app: &TestApp, key: &str, id: &str) -> Value {
    app.get_json(&format!("/generations/{id}"), key).await
}
