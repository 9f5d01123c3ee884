//! Completion webhooks from Cog model servers. Cog signs nothing, so each
//! dispatch carries a random token in its webhook URL and only a webhook
//! with the token of a prediction this process is waiting for is taken.
//! The route sits outside the public API and its key authentication.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::{ApiError, AppState};

/// Largest webhook body read. Outputs arrive inline as data URIs, about a
/// third larger than the clip; this allows clips of up to 384 MiB.
const MAX_CALLBACK_BODY_BYTES: usize = 512 * 1024 * 1024;

#[derive(Deserialize)]
pub struct CallbackQuery {
    token: String,
}

pub async fn receive(
    State(state): State<AppState>,
    Path(generation_id): Path<String>,
    Query(query): Query<CallbackQuery>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let callbacks = state.backends.cog_callbacks();
    // The token is checked before the body is read, so a stranger cannot
    // make the server buffer a large body.
    if !callbacks.expects(&generation_id, &query.token) {
        return Err(ApiError::NotFound(
            "No prediction waits for this callback.".into(),
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_CALLBACK_BODY_BYTES)
        .await
        .map_err(|error| ApiError::InvalidRequest {
            message: format!("The callback body could not be read: {error}"),
            param: None,
        })?;
    let prediction: Value =
        serde_json::from_slice(&bytes).map_err(|error| ApiError::InvalidRequest {
            message: format!("The callback body is not JSON: {error}"),
            param: None,
        })?;
    if callbacks.deliver(&generation_id, &query.token, prediction) {
        Ok(StatusCode::OK)
    } else {
        Err(ApiError::NotFound(
            "No prediction waits for this callback.".into(),
        ))
    }
}
