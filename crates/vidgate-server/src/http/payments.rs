//! Credit through Stripe: `POST /account/checkout` starts a Checkout for
//! the caller's account, and `POST /webhooks/stripe` (outside /api/v1)
//! receives Stripe's events. Both answer 404 on a node without the Stripe
//! settings, as if they did not exist.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::openapi::{
    Context, Field, Operation, Parameter, Refusal, RequestBody, Schema, Success, record,
};
use super::{ApiError, AppState, body_bytes};
use crate::application::submit::IDEMPOTENCY_KEY;
use crate::representation::object_kind;
use crate::store::{Caller, now_millis};
use crate::stripe::{self, AmountRefusal, CheckoutError, StripeCheckout, StripeEventError};

/// The node's Stripe connection, or the 404 of a node without one.
fn stripe_checkout(state: &AppState) -> Result<&StripeCheckout, ApiError> {
    state
        .stripe
        .as_deref()
        .ok_or_else(|| ApiError::NotFound("No such endpoint.".into()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckoutRequest {
    amount_usd: serde_json::Value,
}

// `"object": "checkout_session"`.
object_kind!(CheckoutSessionKind, CheckoutSession);

/// A Stripe Checkout Session started for the caller's account: send the
/// customer to `url`; the credit arrives with Stripe's webhook.
#[derive(Serialize, ToSchema)]
#[schema(as = CheckoutSession)]
pub struct CheckoutSessionRecord {
    /// Stripe's id of the session, `cs_…`.
    id: String,
    #[schema(inline)]
    object: CheckoutSessionKind,
    /// Stripe's hosted payment page.
    url: String,
}

// Served only where Stripe is configured (docs/stripe.md); elsewhere
// every call is answered 404, which the document says.
pub const CHECKOUT: Operation = Operation {
    id: "create_checkout",
    summary: "Start a Stripe Checkout to add credit to the account (only where the operator connected Stripe)",
    tag: "account",
    parameters: &[Parameter::Header {
        name: IDEMPOTENCY_KEY,
        required: false,
        description: Some("The same key answers the same session when the request is retried."),
        schema: Schema::TEXT,
        example: None,
    }],
    body: Some(RequestBody::fields(&[Field {
        name: "amount_usd",
        required: true,
        schema: Schema::Of(amount_usd_schema),
    }])),
    success: Success::json(
        "201",
        "The session: send the customer to its url.",
        Schema::Of(record::<CheckoutSessionRecord>),
    ),
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: the amount is outside the allowed range or not in whole cents, or the body is not {\"amount_usd\": \"20.00\"}; param is amount_usd.",
        },
        Refusal {
            status: "404",
            description: "not_found: this deployment does not sell credit through Stripe.",
        },
        Refusal {
            status: "502",
            description: "upstream_error: Stripe could not create the session; retry with backoff.",
        },
    ],
    ..Operation::PLAIN
};

fn amount_usd_schema(_: &mut Context<'_>) -> Value {
    json!({ "type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$", "examples": ["20.00"],
        "description": "Whole cents of US dollars, within the deployment's minimum and maximum." })
}

/// `POST /account/checkout` `{"amount_usd": "20.00"}`: 201 with the
/// session's `id` and the `url` the customer pays at; 429 with
/// `Retry-After` past the account's Checkout Sessions
/// (`rate_limit::CHECKOUT_BURST`).
pub async fn checkout(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let checkout = stripe_checkout(&state)?;
    let body = body_bytes(body)?;
    let request: CheckoutRequest =
        serde_json::from_slice(&body).map_err(|error| ApiError::InvalidRequest {
            message: format!("The body must be {{\"amount_usd\": \"20.00\"}}: {error}"),
            param: Some("amount_usd".into()),
        })?;
    // A number is taken as written; a string is the documented form.
    let amount_text = match &request.amount_usd {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Number(number) => number.to_string(),
        _ => String::new(),
    };
    let client_key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|value| value.to_str().ok());
    let session = stripe::start_checkout(
        state.store.as_ref(),
        &state.rate_limiter,
        checkout,
        &caller.account_id,
        &amount_text,
        client_key,
    )
    .await
    .map_err(|error| match error {
        CheckoutError::Amount(refusal) => amount_refused(&refusal),
        CheckoutError::Stripe(error) => {
            tracing::error!(error = %error, "Stripe refused to create a Checkout Session");
            ApiError::Upstream(
                "Stripe could not create the Checkout Session. Retry with backoff.".into(),
            )
        }
        CheckoutError::Store(error) => error.into(),
        refused @ CheckoutError::TooMany { retry_after } => ApiError::RateLimited {
            message: refused.to_string(),
            retry_after,
        },
    })?;
    Ok((
        StatusCode::CREATED,
        Json(CheckoutSessionRecord {
            id: session.id,
            object: CheckoutSessionKind::CheckoutSession,
            url: session.url,
        }),
    )
        .into_response())
}

/// The answer to an amount outside what an account may buy.
fn amount_refused(refusal: &AmountRefusal) -> ApiError {
    ApiError::InvalidRequest {
        message: format!("{refusal}."),
        param: Some("amount_usd".into()),
    }
}

/// `POST /webhooks/stripe`: an event from Stripe, verified by its
/// signature over the raw body before anything is read. A bad or stale
/// signature and an unreadable event get 400 and change nothing; a failure
/// to confirm or to record gets an error status, so Stripe sends the event
/// again later.
pub async fn receive_event(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let checkout = stripe_checkout(&state)?;
    let body = body_bytes(body)?;
    let signature = headers
        .get("stripe-signature")
        .and_then(|value| value.to_str().ok());
    stripe::verify_signature(
        signature,
        &body,
        &checkout.webhook_secret,
        now_millis() / 1000,
    )
    .map_err(|refusal| ApiError::InvalidRequest {
        message: format!("The Stripe signature is refused: {refusal}."),
        param: None,
    })?;
    let outcome = stripe::handle_event(state.store.as_ref(), &checkout.api, &body)
        .await
        .map_err(|error| match error {
            StripeEventError::Malformed(_) => ApiError::InvalidRequest {
                message: format!("{error}."),
                param: None,
            },
            StripeEventError::Confirmation(source) => {
                tracing::warn!(error = %source, "a Stripe event could not be confirmed; Stripe will retry it");
                ApiError::Upstream("Stripe could not confirm the session; send it again.".into())
            }
            StripeEventError::Store(error) => ApiError::from(error),
        })?;
    tracing::info!(outcome = ?outcome, "a Stripe event was handled");
    Ok(Json(json!({ "received": true })).into_response())
}
