//! A fake of the part of Stripe's API vidgate uses: Checkout Sessions,
//! created (`POST /v1/checkout/sessions`) and read back
//! (`GET /v1/checkout/sessions/{session}`), plus the hosted payment page
//! (`GET /pay/{session}`) a customer is sent to, and the signing of the
//! events Stripe would send about them.
//!
//! A fake proves only what its source proves. The sources:
//! - The session object is Stripe's own example (`tests/fixtures/stripe/
//!   checkout_session.json`, from `openapi/fixtures3.json` of the public
//!   `stripe/openapi` repository) with the fields the request set
//!   replaced, so every field has the type Stripe's OpenAPI document gives.
//! - The form fields read (`mode`, `line_items[0][price_data][currency]`,
//!   `…[unit_amount]`, `…[product_data][name]`, `line_items[0][quantity]`,
//!   `client_reference_id`, `metadata[…]`, `success_url`, `cancel_url`) and
//!   their meaning are Stripe's API reference for creating a Checkout
//!   Session, and the official `stripe` Python package sends them this way
//!   (`tests/stripe_client.py`). The snapshot of `stripe/openapi` held its
//!   `spec3` documents only as absent large files, so the form body was not
//!   checked against the OpenAPI operation itself. That `mode` is required
//!   and a `payment` session needs `line_items` is the reference's words.
//! - Authentication with the secret key as a Bearer token, the error object
//!   (`{"error": {"type", "message"}}`), 401 for a wrong key and 404
//!   `resource_missing` for an unknown session: Stripe's API reference
//!   ("Authentication", "Errors").
//! - Idempotency: Stripe's API reference ("Idempotent requests"): a key
//!   reused with the same parameters answers the first result; with other
//!   parameters, 400 `idempotency_error`.
//! - A new session is `open` and `unpaid` with no payment intent until paid
//!   (the example object and the `checkout.session` schema's nullable
//!   `payment_intent`); `pay` makes it `complete` and `paid`, as Stripe's
//!   hosted page does.
//! - Event signatures: `stripe_signature` signs as Stripe's libraries do
//!   (`WebhookSignature.generate_signature_header` of the Python package);
//!   the Python test (`tests/stripe_client.py`) checks that both agree.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

pub const STRIPE_SECRET_KEY: &str = "sk_test_vidgate_fake";
pub const STRIPE_WEBHOOK_SECRET: &str = "whsec_vidgate_fake_secret";

const EXAMPLE_SESSION: &str = include_str!("../fixtures/stripe/checkout_session.json");

#[derive(Default)]
struct FakeStripeState {
    sessions: Vec<Value>,
    /// Idempotency key → the request's form and the session it made.
    idempotency: HashMap<String, (Vec<(String, String)>, String)>,
    /// Every create request's form, in order, for the tests to read.
    create_requests: Vec<Vec<(String, String)>>,
}

#[derive(Clone)]
pub struct FakeStripe {
    pub base_url: String,
    state: Arc<Mutex<FakeStripeState>>,
}

impl FakeStripe {
    pub async fn start() -> FakeStripe {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let fake = FakeStripe {
            base_url,
            state: Arc::default(),
        };
        let router = Router::new()
            .route("/v1/checkout/sessions", post(create_session))
            .route("/v1/checkout/sessions/{session}", get(retrieve_session))
            .route("/pay/{session}", get(payment_page))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        fake
    }

    /// The forms of the create requests received so far.
    pub fn create_requests(&self) -> Vec<Vec<(String, String)>> {
        self.state.lock().unwrap().create_requests.clone()
    }

    pub fn session(&self, session_id: &str) -> Value {
        let state = self.state.lock().unwrap();
        state
            .sessions
            .iter()
            .find(|session| session["id"] == session_id)
            .cloned()
            .expect("the fake made this session")
    }

    /// The customer pays: the session becomes `complete` and `paid`, with
    /// a payment intent. Answers the session as it is then.
    pub fn pay(&self, session_id: &str) -> Value {
        let mut state = self.state.lock().unwrap();
        let session = state
            .sessions
            .iter_mut()
            .find(|session| session["id"] == session_id)
            .expect("the fake made this session");
        session["status"] = json!("complete");
        session["payment_status"] = json!("paid");
        session["payment_intent"] = json!(format!("pi_{}", &session_id[3..]));
        session.clone()
    }
}

fn stripe_error(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    let mut error = json!({ "type": kind, "message": message });
    if let Some(code) = code {
        error["code"] = json!(code);
    }
    (status, Json(json!({ "error": error }))).into_response()
}

/// Stripe's 401 for a request without the secret key, or `None` when it
/// has it.
fn unauthenticated(headers: &HeaderMap) -> Option<Response> {
    let presented = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok());
    (presented != Some(&format!("Bearer {STRIPE_SECRET_KEY}"))).then(|| {
        stripe_error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            None,
            "Invalid API Key provided.",
        )
    })
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

async fn create_session(
    State(fake): State<FakeStripe>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if let Some(refused) = unauthenticated(&headers) {
        return refused;
    }
    let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes())
        .into_owned()
        .collect();
    let mut state = fake.state.lock().unwrap();
    state.create_requests.push(form.clone());
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(key) = &idempotency_key
        && let Some((first_form, session_id)) = state.idempotency.get(key)
    {
        if *first_form != form {
            return stripe_error(
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                None,
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
            );
        }
        let session_id = session_id.clone();
        let session = state
            .sessions
            .iter()
            .find(|session| session["id"] == session_id)
            .cloned();
        return Json(session).into_response();
    }
    let Some(mode) = field(&form, "mode") else {
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("parameter_missing"),
            "Missing required param: mode.",
        );
    };
    if !["payment", "setup", "subscription"].contains(&mode) {
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("parameter_invalid_empty"),
            "Invalid mode.",
        );
    }
    let unit_amount = field(&form, "line_items[0][price_data][unit_amount]")
        .and_then(|amount| amount.parse::<i64>().ok());
    let quantity =
        field(&form, "line_items[0][quantity]").and_then(|quantity| quantity.parse::<i64>().ok());
    let currency = field(&form, "line_items[0][price_data][currency]");
    let product_name = field(&form, "line_items[0][price_data][product_data][name]");
    let (Some(unit_amount), Some(quantity), Some(currency), Some(_)) =
        (unit_amount, quantity, currency, product_name)
    else {
        return stripe_error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Some("parameter_missing"),
            "`line_items` is required in `payment` mode, each with a price_data (currency, unit_amount, product_data[name]) and a quantity.",
        );
    };
    let mut metadata = serde_json::Map::new();
    for (key, value) in &form {
        if let Some(name) = key
            .strip_prefix("metadata[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            metadata.insert(name.to_owned(), json!(value));
        }
    }
    let number = state.sessions.len() + 1;
    let session_id = format!("cs_test_fake{number:04}");
    let mut session: Value = serde_json::from_str(EXAMPLE_SESSION).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for (name, value) in [
        ("id", json!(session_id)),
        ("mode", json!(mode)),
        ("amount_subtotal", json!(unit_amount * quantity)),
        ("amount_total", json!(unit_amount * quantity)),
        ("currency", json!(currency)),
        (
            "client_reference_id",
            json!(field(&form, "client_reference_id")),
        ),
        ("metadata", Value::Object(metadata)),
        ("success_url", json!(field(&form, "success_url"))),
        ("cancel_url", json!(field(&form, "cancel_url"))),
        ("payment_status", json!("unpaid")),
        ("status", json!("open")),
        ("payment_intent", Value::Null),
        ("created", json!(now)),
        ("expires_at", json!(now + 24 * 60 * 60)),
        ("url", json!(format!("{}/pay/{session_id}", fake.base_url))),
    ] {
        session[name] = value;
    }
    state.sessions.push(session.clone());
    if let Some(key) = idempotency_key {
        state.idempotency.insert(key, (form, session_id));
    }
    Json(session).into_response()
}

async fn retrieve_session(
    State(fake): State<FakeStripe>,
    headers: HeaderMap,
    Path(session_id): Path<String>,
) -> Response {
    if let Some(refused) = unauthenticated(&headers) {
        return refused;
    }
    let state = fake.state.lock().unwrap();
    match state
        .sessions
        .iter()
        .find(|session| session["id"] == session_id)
    {
        Some(session) => Json(session.clone()).into_response(),
        None => stripe_error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            Some("resource_missing"),
            &format!("No such checkout.session: '{session_id}'"),
        ),
    }
}

/// Stripe's hosted payment page, reduced to what a browser test needs: it
/// names the session and its amount.
async fn payment_page(State(fake): State<FakeStripe>, Path(session_id): Path<String>) -> Response {
    let state = fake.state.lock().unwrap();
    match state
        .sessions
        .iter()
        .find(|session| session["id"] == session_id)
    {
        Some(session) => Html(format!(
            "<!doctype html><title>Fake Stripe Checkout</title><h1 id=\"fake-checkout\">Pay {} cents for {}</h1>",
            session["amount_total"], session_id
        ))
        .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The `Stripe-Signature` header of `payload` at `timestamp`, as Stripe's
/// libraries make it: `t={timestamp},v1={hex HMAC-SHA256 of
/// "{timestamp}.{payload}" keyed by the whole whsec_ secret}`.
pub fn stripe_signature(payload: &str, secret: &str, timestamp: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{timestamp}.{payload}").as_bytes());
    let signature: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("t={timestamp},v1={signature}")
}

/// An event as Stripe sends it (the `event` object: id, type, created,
/// `data.object`).
pub fn stripe_event(event_id: &str, event_type: &str, object: Value) -> String {
    json!({
        "id": event_id,
        "object": "event",
        "api_version": "2025-01-27.acacia",
        "created": now_seconds(),
        "livemode": false,
        "pending_webhooks": 1,
        "request": { "id": null, "idempotency_key": null },
        "type": event_type,
        "data": { "object": object },
    })
    .to_string()
}

pub fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}
