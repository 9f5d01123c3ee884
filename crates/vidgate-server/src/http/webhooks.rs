//! Webhooks for the customer: `POST /account/webhook-secret/rotate` (a new
//! signing secret), and the delivery log of a generation with its re-send,
//! `GET /generations/{id}/webhook-deliveries` and
//! `POST /generations/{id}/webhook-deliveries/{delivery_id}/retry`.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use vidgate_core::GenerationStatus;

use super::account::account_gone;
use super::openapi::{Operation, Parameter, Refusal, Schema, Success, record};
use super::{ApiError, AppState, rfc3339};
use crate::application::keys_and_secrets::{self, Changer, KeyChangeError};
use crate::representation::{ListKind, nullable_time_schema, object_kind, one_of_strings};
use crate::store::{
    Account, Caller, DeliveryRetryOutcome, MAX_MANUAL_RETRIES, SESSION_CALLER_PREFIX,
    WebhookDelivery,
};

// `"object": "webhook_secret"`.
object_kind!(WebhookSecretKind, WebhookSecret);

// `"object": "webhook_delivery"`.
object_kind!(WebhookDeliveryKind, WebhookDelivery);

/// The account's current secret and how long the previous one still signs.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookSecret)]
pub struct WebhookSecretRecord<'a> {
    #[schema(inline)]
    object: WebhookSecretKind,
    #[schema(schema_with = nullable_time_schema, required = true)]
    previous_secret_expires_at: Option<String>,
    #[schema(pattern = "^whsec_")]
    webhook_secret: &'a str,
}

impl<'a> WebhookSecretRecord<'a> {
    pub fn new(account: &'a Account) -> WebhookSecretRecord<'a> {
        WebhookSecretRecord {
            object: WebhookSecretKind::WebhookSecret,
            previous_secret_expires_at: account.previous_webhook_secret_expires_at.map(rfc3339),
            webhook_secret: &account.webhook_secret,
        }
    }
}

/// The secret as `vidgate admin account rotate-webhook-secret` shows it.
pub fn webhook_secret_json(account: &Account) -> Value {
    serde_json::to_value(WebhookSecretRecord::new(account))
        .expect("a webhook secret record is plain JSON")
}

pub const ROTATE_SECRET: Operation = Operation {
    id: "rotate_webhook_secret",
    summary: "Issue a new webhook signing secret; the old one keeps signing for 24 hours",
    tag: "webhooks",
    success: Success::json(
        "200",
        "The new secret, shown once.",
        Schema::Of(record::<WebhookSecretRecord<'static>>),
    ),
    refusals: &[Refusal {
        status: "403",
        description: "forbidden: the request is authenticated by a dashboard session cookie; people rotate the secret on the dashboard's Webhooks page, where the account's owners decide who may and the change is audited.",
    }],
    ..Operation::PLAIN
};

/// Returns the new secret once; it is not shown by any other endpoint.
/// A dashboard session is refused: a person rotates the secret on the
/// dashboard's Webhooks page, which checks what the account's owners allow
/// and writes the audit row naming them.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    if caller.key_id.starts_with(SESSION_CALLER_PREFIX) {
        return Err(ApiError::Forbidden(
            "Rotate the webhook signing secret on the dashboard's Webhooks page, or with an API \
             key."
                .into(),
        ));
    }
    let account = keys_and_secrets::rotate_webhook_secret(
        state.store.as_ref(),
        Changer::ApiKey(&caller.key_id),
        &caller.account_id,
    )
    .await
    .map_err(|refused| match refused {
        KeyChangeError::Store(error) => ApiError::from(error),
        // A key's own account can only be gone (a deleted account), and
        // the key with it; a key holds its account's full rights, so
        // nothing else refuses it.
        KeyChangeError::NotAllowed
        | KeyChangeError::KeyNotFound(_)
        | KeyChangeError::Account(_) => account_gone(),
    })?;
    tracing::info!(account = %account.id, "webhook secret rotated");
    Ok(Json(WebhookSecretRecord::new(&account)).into_response())
}

/// A delivery and its attempts, for the delivery log.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookDelivery)]
pub struct DeliveryRecord<'a> {
    attempt_count: i64,
    #[schema(inline)]
    attempts: Vec<AttemptRecord<'a>>,
    #[schema(schema_with = nullable_time_schema, required = true)]
    completed_at: Option<String>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(schema_with = event_type_schema)]
    event_type: &'a str,
    generation_id: &'a str,
    /// Sent as webhook-id on every attempt.
    id: &'a str,
    in_flight: bool,
    #[schema(schema_with = nullable_time_schema, required = true)]
    next_attempt_at: Option<String>,
    #[schema(inline)]
    object: WebhookDeliveryKind,
    status: &'static str,
    url: &'a str,
}

/// One attempt of a delivery.
#[derive(Serialize, ToSchema)]
struct AttemptRecord<'a> {
    attempt: i64,
    duration_ms: i64,
    #[schema(required = true)]
    error: Option<&'a str>,
    #[schema(schema_with = nullable_time_schema, required = true)]
    next_attempt_at: Option<String>,
    #[schema(required = true)]
    response_body: Option<&'a str>,
    #[schema(format = DateTime)]
    started_at: String,
    #[schema(required = true)]
    status_code: Option<u16>,
}

/// The schema of `event_type`: a final state's event.
fn event_type_schema() -> utoipa::openapi::Object {
    let events: Vec<String> = GenerationStatus::ALL
        .iter()
        .filter(|status| status.is_final())
        .map(|status| format!("generation.{}", status.as_str()))
        .collect();
    one_of_strings(events.iter().map(String::as_str))
}

impl<'a> DeliveryRecord<'a> {
    fn new(generation_id: &'a str, delivery: &'a WebhookDelivery) -> DeliveryRecord<'a> {
        DeliveryRecord {
            attempt_count: delivery.attempts,
            attempts: delivery
                .attempt_log
                .iter()
                .map(|attempt| AttemptRecord {
                    attempt: attempt.attempt,
                    duration_ms: attempt.record.duration_ms,
                    error: attempt.record.error.as_deref(),
                    next_attempt_at: attempt.next_attempt_at.map(rfc3339),
                    response_body: attempt.record.response_body.as_deref(),
                    started_at: rfc3339(attempt.record.started_at),
                    status_code: attempt.record.status_code,
                })
                .collect(),
            completed_at: delivery.completed_at.map(rfc3339),
            created_at: rfc3339(delivery.created_at),
            event_type: &delivery.event_type,
            generation_id,
            id: &delivery.id,
            in_flight: delivery.in_flight,
            next_attempt_at: delivery.next_attempt_at.map(rfc3339),
            object: WebhookDeliveryKind::WebhookDelivery,
            status: delivery.status.as_str(),
            url: &delivery.url,
        }
    }
}

/// A generation's webhook deliveries, oldest first.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookDeliveryList)]
pub struct DeliveryList<'a> {
    data: Vec<DeliveryRecord<'a>>,
    #[schema(inline)]
    object: ListKind,
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
        .generations()
        .get(&caller.account_id, generation_id)
        .await?
    {
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound(format!(
            "No generation {generation_id:?} exists in this account."
        ))),
    }
}

pub const LIST_DELIVERIES: Operation = Operation {
    id: "list_webhook_deliveries",
    summary: "The webhook deliveries of a generation, with every attempt",
    tag: "webhooks",
    parameters: &[Parameter::Path("id")],
    success: Success::json(
        "200",
        "The deliveries, oldest first.",
        Schema::Of(record::<DeliveryList<'static>>),
    ),
    refusals: &[Refusal {
        status: "404",
        description: "not_found: no such generation in this account.",
    }],
    ..Operation::PLAIN
};

/// `GET /generations/{id}/webhook-deliveries`: every delivery of the
/// generation with every attempt, oldest first.
pub async fn list_deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(generation_id): Path<String>,
) -> Result<Response, ApiError> {
    require_generation(&state, &caller, &generation_id).await?;
    let deliveries = state
        .store
        .webhook_log()
        .deliveries(&caller.account_id, &generation_id)
        .await?;
    Ok(Json(DeliveryList {
        data: deliveries
            .iter()
            .map(|delivery| DeliveryRecord::new(&generation_id, delivery))
            .collect(),
        object: ListKind::List,
    })
    .into_response())
}

/// Manual re-sends per account: this many at once, then one more every
/// `RETRY_REFILL`.
const RETRY_BURST: u32 = 10;
const RETRY_REFILL: std::time::Duration = std::time::Duration::from_secs(6);

pub const RETRY_DELIVERY: Operation = Operation {
    id: "retry_webhook_delivery",
    summary: "Send a webhook delivery again now",
    tag: "webhooks",
    parameters: &[Parameter::Path("id"), Parameter::Path("delivery_id")],
    success: Success::json(
        "202",
        "The delivery, scheduled for now.",
        Schema::Of(record::<DeliveryRecord<'static>>),
    ),
    refusals: &[
        Refusal {
            status: "404",
            description: "not_found: no such generation or delivery in this account.",
        },
        Refusal {
            status: "409",
            description: "conflict: the delivery is being attempted right now.",
        },
    ],
    ..Operation::PLAIN
};

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
        .webhook_log()
        .retry_delivery(&caller.account_id, &generation_id, &delivery_id)
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
        .webhook_log()
        .deliveries(&caller.account_id, &generation_id)
        .await?;
    let delivery = deliveries
        .iter()
        .find(|delivery| delivery.id == delivery_id)
        .ok_or_else(|| ApiError::Internal("a scheduled delivery vanished".into()))?;
    Ok((
        StatusCode::ACCEPTED,
        Json(DeliveryRecord::new(&generation_id, delivery)),
    )
        .into_response())
}
