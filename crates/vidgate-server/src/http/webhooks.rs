//! Webhooks for the customer: `POST /account/webhook-secret/rotate` (a new
//! signing secret), and the delivery log of a generation with its re-send,
//! `GET /generations/{id}/webhook-deliveries` and
//! `POST /generations/{id}/webhook-deliveries/{delivery_id}/retry`.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, AppState, rfc3339};
use crate::accounts;
use crate::store::{Account, Caller, DeliveryRetryOutcome, MAX_MANUAL_RETRIES, WebhookDelivery};

/// The account's current secret and how long the previous one still signs,
/// as the API and `vidgate admin account rotate-webhook-secret` show them.
pub fn webhook_secret_json(account: &Account) -> Value {
    json!({
        "object": "webhook_secret",
        "webhook_secret": account.webhook_secret,
        "previous_secret_expires_at": account.previous_webhook_secret_expires_at.map(rfc3339),
    })
}

/// Returns the new secret once; it is not shown by any other endpoint.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let account = accounts::rotate_webhook_secret(state.store.as_ref(), &caller.account_id)
        .await?
        .ok_or_else(|| {
            ApiError::Unauthorized("The account of this API key no longer exists.".into())
        })?;
    tracing::info!(account = %account.id, "webhook secret rotated");
    Ok(Json(webhook_secret_json(&account)))
}

/// A delivery and its attempts, for the delivery log.
fn delivery_json(generation_id: &str, delivery: &WebhookDelivery) -> Value {
    let attempts: Vec<Value> = delivery
        .attempt_log
        .iter()
        .map(|attempt| {
            json!({
                "attempt": attempt.attempt,
                "started_at": rfc3339(attempt.record.started_at),
                "duration_ms": attempt.record.duration_ms,
                "status_code": attempt.record.status_code,
                "error": attempt.record.error,
                "response_body": attempt.record.response_body,
                "next_attempt_at": attempt.next_attempt_at.map(rfc3339),
            })
        })
        .collect();
    json!({
        "id": delivery.id,
        "object": "webhook_delivery",
        "generation_id": generation_id,
        "event_type": delivery.event_type,
        "url": delivery.url,
        "status": delivery.status.as_str(),
        "in_flight": delivery.in_flight,
        "attempt_count": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at.map(rfc3339),
        "created_at": rfc3339(delivery.created_at),
        "completed_at": delivery.completed_at.map(rfc3339),
        "attempts": attempts,
    })
}

/// 404 unless the generation exists in the caller's account, so that the
/// delivery log says nothing about other accounts' generations.
async fn require_generation(
    state: &AppState,
    caller: &Caller,
    generation_id: &str,
) -> Result<(), ApiError> {
    match state
        .store
        .generation(&caller.account_id, generation_id)
        .await?
    {
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound(format!(
            "No generation {generation_id:?} exists in this account."
        ))),
    }
}

/// `GET /generations/{id}/webhook-deliveries`: every delivery of the
/// generation with every attempt, oldest first.
pub async fn list_deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(generation_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    require_generation(&state, &caller, &generation_id).await?;
    let deliveries = state
        .store
        .webhook_deliveries(&caller.account_id, &generation_id)
        .await?;
    Ok(Json(json!({
        "object": "list",
        "data": deliveries
            .iter()
            .map(|delivery| delivery_json(&generation_id, delivery))
            .collect::<Vec<_>>(),
    })))
}

/// Manual re-sends per account: this many at once, then one more every
/// `RETRY_REFILL`.
const RETRY_BURST: u32 = 10;
const RETRY_REFILL: std::time::Duration = std::time::Duration::from_secs(6);

/// `POST /generations/{id}/webhook-deliveries/{delivery_id}/retry`: sends
/// the delivery again now, whether it is waiting, delivered or failed. A
/// failed delivery gets one more attempt; a waiting one keeps its schedule
/// after this attempt.
pub async fn retry_delivery(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((generation_id, delivery_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    require_generation(&state, &caller, &generation_id).await?;
    // Each re-send is an outgoing request from a shared sender pool, so an
    // account's re-sends are limited apart from its request rate.
    let allowed = state
        .rate_limiter
        .check_every(
            &format!("webhook-retry:{}", caller.account_id),
            RETRY_REFILL,
            RETRY_BURST,
        )
        .await;
    if !allowed.allowed {
        return Err(ApiError::RateLimited {
            message: format!(
                "Too many webhook re-sends for this account: {RETRY_BURST} at once, then one every {} seconds.",
                RETRY_REFILL.as_secs()
            ),
            retry_after: allowed.reset,
        });
    }
    match state
        .store
        .retry_webhook_delivery(&caller.account_id, &generation_id, &delivery_id)
        .await?
    {
        DeliveryRetryOutcome::Scheduled => {}
        DeliveryRetryOutcome::InFlight => {
            return Err(ApiError::Conflict {
                message: "This delivery is being attempted right now.".into(),
                param: None,
            });
        }
        DeliveryRetryOutcome::RetriesExhausted => {
            return Err(ApiError::Conflict {
                message: format!(
                    "This delivery was already re-sent {MAX_MANUAL_RETRIES} times on request, the most allowed."
                ),
                param: None,
            });
        }
        DeliveryRetryOutcome::NotFound => {
            return Err(ApiError::NotFound(format!(
                "No webhook delivery {delivery_id:?} exists for this generation."
            )));
        }
    }
    tracing::info!(delivery = %delivery_id, generation = %generation_id, "webhook re-send requested");
    let deliveries = state
        .store
        .webhook_deliveries(&caller.account_id, &generation_id)
        .await?;
    let delivery = deliveries
        .iter()
        .find(|delivery| delivery.id == delivery_id)
        .ok_or_else(|| ApiError::Internal("a scheduled delivery vanished".into()))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(delivery_json(&generation_id, delivery)),
    )
        .into_response())
}
