//! Completion webhooks from hosted providers (fal, Replicate), at
//! `/internal/providers/{vendor}/{model}/{generation_id}`: the URL a hosted
//! backend registers with each job when a public URL is configured. The
//! model's backend verifies the provider's signature, checks that the
//! webhook is about the generation's provider job, drops a delivery it
//! took before, and wakes the job's follower, which reads the job's state
//! from the provider: a webhook hastens a job, never decides it. The route
//! sits outside the public API and its key authentication.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ApiError, AppState};
use crate::backend::{WebhookReceipt, WebhookRefusal};

/// Largest webhook body read: a prediction or a fal result with its
/// output links is a few KB; Replicate's include the input and logs.
const MAX_PROVIDER_WEBHOOK_BYTES: usize = 1024 * 1024;

pub async fn receive(
    State(state): State<AppState>,
    Path((vendor, model, generation_id)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let backend = state
        .catalog
        .model(&format!("{vendor}/{model}"))
        .and_then(|model| state.backends.for_model(model))
        .ok_or_else(|| ApiError::from(WebhookRefusal::UnknownJob))?;
    let body = axum::body::to_bytes(body, MAX_PROVIDER_WEBHOOK_BYTES)
        .await
        .map_err(|error| ApiError::InvalidRequest {
            message: format!("The webhook body could not be read: {error}"),
            param: None,
        })?;
    let receipt = backend
        .receive_provider_webhook(&generation_id, &headers, &body)
        .await
        .inspect_err(|refusal| {
            tracing::warn!(generation = %generation_id, %refusal, "a provider webhook was refused");
        })?;
    // A duplicate is acknowledged too, so the provider stops retrying it.
    Ok(axum::Json(json!({ "duplicate": receipt == WebhookReceipt::Duplicate })).into_response())
}
