//! `GET /healthz` and `GET /readyz`, outside `/api/v1` for load balancers
//! and orchestrators: unauthenticated, not rate-limited, and cheap.
//! `/healthz` answers whenever the process can answer at all (liveness: a
//! failure means restart it); `/readyz` answers 503 while the node should
//! get no traffic (readiness: database, storage, queue, draining; see
//! `health.rs`).

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::application::state::AppState;

pub async fn healthz() -> Response {
    no_store(StatusCode::OK, json!({ "status": "ok" }))
}

pub async fn readyz(State(state): State<AppState>) -> Response {
    let readiness = state.health.readiness().await;
    let mut checks = Map::new();
    checks.insert("database".into(), readiness.database.as_str().into());
    checks.insert("storage".into(), readiness.storage.as_str().into());
    if let Some(queue) = readiness.queue {
        checks.insert("queue".into(), queue.as_str().into());
    }
    checks.insert("shutdown".into(), readiness.shutdown.as_str().into());
    let (status, word) = if readiness.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not_ready")
    };
    let mut response = no_store(
        status,
        json!({ "status": word, "checks": Value::Object(checks) }),
    );
    if !readiness.is_ready() {
        response.extensions_mut().insert(NotReady);
    }
    response
}

/// Marks the 503 of a node that is not ready: an answer the probe asked
/// for, whose causes `Health` logs when it finds them, so the envelope does
/// not log each probe's answer as a failure.
#[derive(Debug, Clone, Copy)]
pub struct NotReady;

/// A probe's answer must never come from a cache between the prober and us.
fn no_store(status: StatusCode, body: Value) -> Response {
    (status, [(header::CACHE_CONTROL, "no-store")], Json(body)).into_response()
}
