//! Completion webhooks from hosted providers (fal, Replicate), at
//! `/internal/providers/{vendor}/{model}/{generation_id}/{token}`: the URL
//! a hosted backend registers with each job when a public URL is
//! configured, its last segment a secret of the generation
//! (`backend/hosted/webhook_urls.rs`). The route checks the id's shape and the
//! secret before it reads the body; the model's backend then verifies the
//! provider's signature, checks that the webhook is about the generation's
//! provider job, drops a delivery it took before, and wakes the job's
//! follower, which reads the job's state from the provider: a webhook
//! hastens a job, never decides it. The route sits outside the public API
//! and its key authentication.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::error::LoggedByHandler;
use super::{ApiError, AppState};
use crate::backend::{WebhookReceipt, WebhookRefusal};
use crate::ids::is_generation_id;

/// Largest webhook body read: a prediction or a fal result with its
/// output links is a few KB; Replicate's include the input and logs.
const MAX_PROVIDER_WEBHOOK_BYTES: usize = 1024 * 1024;

/// At most one warning about refused webhooks per interval: anyone can post
/// forged ones, and a line for each would let them fill the log.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// When a refusal was last logged, and how many were refused since without
/// a line of their own.
static REFUSAL_LOG: Mutex<(Option<Instant>, u64)> = Mutex::new((None, 0));

/// Logs a refused webhook, unless one was logged within the interval; the
/// next line says how many were refused in between.
fn log_refusal(generation_id: &str, refusal: &WebhookRefusal) {
    let mut log = REFUSAL_LOG.lock().unwrap_or_else(PoisonError::into_inner);
    let (last_logged, unlogged) = &mut *log;
    if last_logged.is_some_and(|logged| logged.elapsed() < REFUSAL_LOG_INTERVAL) {
        *unlogged += 1;
        return;
    }
    tracing::warn!(
        generation = ?generation_id,
        %refusal,
        refused_without_a_line = *unlogged,
        "a provider webhook was refused"
    );
    *last_logged = Some(Instant::now());
    *unlogged = 0;
}

/// A body declared larger than the limit is refused before a byte of it is
/// read, and the connection is closed rather than kept for the rest.
fn declared_too_large(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .is_some_and(|length| length > MAX_PROVIDER_WEBHOOK_BYTES as u64)
}

#[derive(Deserialize)]
pub struct WebhookPath {
    vendor: String,
    model: String,
    generation_id: String,
    token: String,
}

pub async fn receive(
    State(state): State<AppState>,
    Path(WebhookPath {
        vendor,
        model,
        generation_id,
        token,
    }): Path<WebhookPath>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if declared_too_large(&headers) {
        let mut response = ApiError::PayloadTooLarge(format!(
            "A provider webhook body may be at most {MAX_PROVIDER_WEBHOOK_BYTES} bytes."
        ))
        .into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Ok(response);
    }
    // A path segment may decode to any text, line breaks included: nothing
    // else is looked up or logged for an id of the wrong shape.
    if !is_generation_id(&generation_id) {
        return Err(WebhookRefusal::UnknownJob.into());
    }
    let backend = state
        .catalog
        .model(&format!("{vendor}/{model}"))
        .and_then(|model| state.backends.for_model(model))
        .ok_or_else(|| ApiError::from(WebhookRefusal::UnknownJob))?;
    // The secret is checked before the body is read: only the provider
    // that vidgate sent the generation's job to knows it, so a webhook that
    // someone else registered for a request of theirs is refused whoever
    // signed it.
    if !state
        .backends
        .provider_webhooks()
        .expects(&generation_id, &token)
    {
        let refusal = WebhookRefusal::UnknownJob;
        log_refusal(&generation_id, &refusal);
        return Err(refusal.into());
    }
    let body = axum::body::to_bytes(body, MAX_PROVIDER_WEBHOOK_BYTES)
        .await
        .map_err(|error| ApiError::InvalidRequest {
            message: format!("The webhook body could not be read: {error}"),
            param: None,
        })?;
    match backend
        .receive_provider_webhook(&generation_id, &headers, &body)
        .await
    {
        // A duplicate is acknowledged too, so the provider stops retrying it.
        Ok(receipt) => Ok(
            axum::Json(json!({ "duplicate": receipt == WebhookReceipt::Duplicate }))
                .into_response(),
        ),
        Err(refusal) => {
            log_refusal(&generation_id, &refusal);
            let logged = matches!(refusal, WebhookRefusal::Unavailable(_));
            let mut response = ApiError::from(refusal).into_response();
            if logged {
                // Anyone can provoke this answer while the provider's keys
                // cannot be read: the throttled line above stands for all.
                response.extensions_mut().insert(LoggedByHandler);
            }
            Ok(response)
        }
    }
}
