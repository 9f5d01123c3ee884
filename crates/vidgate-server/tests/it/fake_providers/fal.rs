//! The fake of fal: the queue API (`POST /fal/queue/{endpoint id}`, then
//! status, result and cancel under `owner/app/requests/{id}`, the full
//! endpoint path accepted too), the platform API's request listing, the
//! media CDN, the JWKS, and Ed25519-signed webhooks.

use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    FAL_KEY, FakeJob, FakeProvider, FakeProviders, FakeState, FakeStatus, JobDeadline, Provider,
    listed_input, now_seconds,
};

pub const USER_ID: &str = "fake-fal-user";

/// A second fal account, a stranger's, with its own key and user id: fal
/// signs its webhooks with the same keys as the operator's.
pub const OTHER_KEY: &str = "fal-other-key:secret";
pub const OTHER_USER_ID: &str = "fake-fal-other-user";

/// The fake's fal accounts: each key and the user id fal names in its
/// webhooks.
const ACCOUNTS: [(&str, &str); 2] = [(FAL_KEY, USER_ID), (OTHER_KEY, OTHER_USER_ID)];

/// The user id of the account whose key is `account`.
fn user_id_of(account: &str) -> &'static str {
    ACCOUNTS
        .iter()
        .find(|(key, _)| *key == account)
        .map_or(USER_ID, |(_, user_id)| user_id)
}

impl Provider {
    /// fal's queue API, its platform API's request list and its JWKS.
    pub const FAL: Provider = Provider(&FakeProvider {
        name: "fal",
        routes,
        job_id,
        credential: ("FAL_KEY", FAL_KEY),
        point_at,
        rate_limits: super::no_rate_limits,
        cancel_queued: super::canceled_at_once,
        webhook_request: completion_webhook,
    });
}

/// fal request ids are UUIDs.
fn job_id(next: u64) -> String {
    format!("00000000-0000-4000-8000-{next:012x}")
}

fn point_at(fake: &FakeProviders, entry: &mut Value) {
    entry["api_url"] = json!(fake.fal_queue_url());
    entry["platform_url"] = json!(fake.fal_api_url());
    entry["jwks_url"] = json!(fake.fal_jwks_url());
}

/// fal sends only the final result.
fn completion_webhook(
    state: &FakeState,
    job: &FakeJob,
    event: &str,
    url: &str,
) -> Option<reqwest::RequestBuilder> {
    (event == "completed").then(|| webhook_request(state, job, url))
}

pub fn routes() -> Router<Arc<FakeState>> {
    Router::new()
        .route(
            "/fal/queue/{*path}",
            get(queue_get).post(submit).put(cancel),
        )
        .route("/fal/api/v1/models/requests/by-endpoint", get(list))
        .route("/fal/media/{file}", get(media))
        .route("/fal/jwks.json", get(jwks))
}

fn error(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// The account whose key a call carries, if any.
fn caller_account(headers: &HeaderMap) -> Option<&'static str> {
    let presented = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())?;
    ACCOUNTS
        .iter()
        .map(|(key, _)| *key)
        .find(|key| presented == format!("Key {key}"))
}

/// The checks every fal API call passes first: the key, an outage, and the
/// rate-limit switch.
fn gate(state: &FakeState, headers: &HeaderMap) -> Option<Response> {
    if caller_account(headers).is_none() {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            json!({ "detail": "Authentication is required to access this application." }),
        ));
    }
    if state.is_down() {
        let mut response = error(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "detail": "Runner scheduling failure", "error_type": "runner_scheduling_failure" }),
        );
        response.headers_mut().insert(
            "x-fal-error-type",
            "runner_scheduling_failure".parse().unwrap(),
        );
        return Some(response);
    }
    if state.take(|switches| &mut switches.rate_limit_next) {
        let mut response = error(
            StatusCode::TOO_MANY_REQUESTS,
            json!({ "detail": "Too many requests" }),
        );
        response
            .headers_mut()
            .insert("retry-after", "1".parse().unwrap());
        return Some(response);
    }
    None
}

fn queue_status(state: &FakeState, job: &FakeJob) -> Value {
    let base = state.base_url.lock().unwrap().clone();
    let app = job
        .target
        .splitn(3, '/')
        .take(2)
        .collect::<Vec<_>>()
        .join("/");
    let request_url = format!("{base}/fal/queue/{app}/requests/{}", job.id);
    let mut status = json!({
        "request_id": job.id,
        "gateway_request_id": job.id,
        "response_url": request_url,
        "status_url": format!("{request_url}/status"),
        "cancel_url": format!("{request_url}/cancel"),
    });
    // Started and finished requests carry `logs` (null unless asked for
    // with `logs=1`): fal's own client reads the key unconditionally
    // (`fal_client` 1.0.3, `_parse_status`), which caught its absence here.
    if job.status != FakeStatus::Queued {
        status["logs"] = Value::Null;
    }
    match &job.status {
        FakeStatus::Queued => {
            status["status"] = json!("IN_QUEUE");
            status["queue_position"] = json!(0);
        }
        FakeStatus::Running => status["status"] = json!("IN_PROGRESS"),
        FakeStatus::Succeeded => {
            status["status"] = json!("COMPLETED");
            status["metrics"] = json!({ "inference_time": 0.1 });
        }
        FakeStatus::Failed { message, moderated } => {
            status["status"] = json!("COMPLETED");
            status["error"] = json!(message);
            // GUESS fal-list-status-code (the error type of a failure).
            status["error_type"] = json!(if *moderated {
                "content_policy_violation"
            } else {
                "internal_server_error"
            });
        }
        FakeStatus::Canceled => {
            status["status"] = json!("COMPLETED");
            status["error"] = json!("Request was cancelled");
            status["error_type"] = json!("request_cancelled");
        }
        FakeStatus::TimedOut => {
            status["status"] = json!("COMPLETED");
            status["error"] = json!("Request timed out");
            status["error_type"] = json!("request_timeout");
        }
    }
    status
}

fn result_body(state: &FakeState, job: &FakeJob) -> Value {
    let base = state.base_url.lock().unwrap().clone();
    let size = state.output(&job.id).map_or(0, |bytes| bytes.len());
    json!({
        "video": {
            "url": format!("{base}/fal/media/{}.mp4", job.id),
            "content_type": "video/mp4",
            "file_name": "output.mp4",
            "file_size": size,
        },
        "seed": job.input["seed"].as_u64().unwrap_or(1),
    })
}

async fn submit(
    State(state): State<Arc<FakeState>>,
    Path(endpoint_id): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    if state.submits_are_down_at(Provider::FAL) {
        if !state.switches.lock().unwrap().fal_submit_outage_at_ingress {
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({ "detail": "Service temporarily unavailable" }),
            );
            response.headers_mut().insert(
                "x-fal-request-id",
                "00000000-0000-4000-8000-ffffffffffff".parse().unwrap(),
            );
            return response;
        }
        // An outage in front of fal's queue: its ingress answers, in the
        // shape fal's own client recognises (a 502/503/504 without
        // `x-fal-request-id`, from nginx), and the queue never sees the
        // request.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("content-type", "text/html")],
            "<html><head><title>503 Service Temporarily Unavailable</title></head><body><center><h1>503 Service Temporarily Unavailable</h1></center><hr><center>nginx</center></body></html>",
        )
            .into_response();
    }
    if endpoint_id.contains("/requests/") || endpoint_id.split('/').count() < 2 {
        return error(
            StatusCode::NOT_FOUND,
            json!({ "detail": "Application not found" }),
        );
    }
    let Ok(input) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "detail": [{ "loc": ["body"], "msg": "Input should be a valid dictionary", "type": "dict_type" }] }),
        );
    };
    if !input.is_object() || !input["prompt"].is_string() {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "detail": [{ "loc": ["body", "prompt"], "msg": "Field required", "type": "missing" }] }),
        );
    }
    // fal validates the input against the endpoint's schema and answers 422
    // with one `detail` item per problem ("Model errors", fal's error
    // reference); fal says a 422 may still be charged.
    if state.validates_inputs() {
        let problems = super::invalid_input(Provider::FAL, &endpoint_id, &input);
        if !problems.is_empty() {
            let detail: Vec<Value> = problems
                .iter()
                .map(|problem| json!({ "loc": ["body"], "msg": problem, "type": "value_error" }))
                .collect();
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({ "detail": detail }),
            );
        }
    }
    let deadline = headers
        .get("x-fal-request-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<f64>().ok())
        .map(JobDeadline::Start);
    let job = state.create_job_in(
        caller_account(&headers).unwrap_or(FAL_KEY),
        Provider::FAL,
        &endpoint_id,
        input,
        query.get("fal_webhook").cloned(),
        Vec::new(),
        deadline,
    );
    // Kept for the tests: fal's model fallbacks are turned off per request
    // by a header (fal's *Platform Headers* and *Reliability* pages).
    state.record_submit_headers(&job.id, &headers);
    if state.take(|switches| &mut switches.lose_submit_answers) {
        // The job exists; the answer never arrives before the client gives
        // up.
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    Json(queue_status(&state, &job)).into_response()
}

/// `owner/app[/path]/requests/{id}[/status|/cancel]`, split into the job id
/// and what is asked of it.
fn parse_request_path(path: &str) -> Option<(String, String, &'static str)> {
    let (prefix, rest) = path.split_once("/requests/")?;
    let (id, action) = match rest.split_once('/') {
        Some((id, "status")) => (id, "status"),
        Some((id, "cancel")) => (id, "cancel"),
        Some(_) => return None,
        None => (rest, "result"),
    };
    Some((prefix.to_owned(), id.to_owned(), action))
}

/// The job a request path names, if its prefix is the job's app (or its
/// full endpoint id, which the per-endpoint OpenAPI documents use) and it
/// is in the caller's account: another account's request is not found
/// (GUESS fal-foreign-request).
fn job_for_path(
    state: &FakeState,
    headers: &HeaderMap,
    path: &str,
) -> Option<(FakeJob, &'static str)> {
    let (prefix, id, action) = parse_request_path(path)?;
    let job = state
        .job(&id)
        .filter(|job| job.provider == Provider::FAL)
        .filter(|job| Some(job.account) == caller_account(headers))?;
    let app = job
        .target
        .splitn(3, '/')
        .take(2)
        .collect::<Vec<_>>()
        .join("/");
    (prefix == app || prefix == job.target).then_some((job, action))
}

async fn queue_get(
    State(state): State<Arc<FakeState>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    let Some((job, action)) = job_for_path(&state, &headers, &path) else {
        return error(
            StatusCode::NOT_FOUND,
            json!({ "detail": "Request not found" }),
        );
    };
    match action {
        "status" => {
            // 202 while queued or in progress, 200 when complete.
            let code = if job.status.is_final() {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            (code, Json(queue_status(&state, &job))).into_response()
        }
        "result" => match &job.status {
            FakeStatus::Succeeded => Json(result_body(&state, &job)).into_response(),
            FakeStatus::Failed { message, moderated } => error(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({ "detail": [{ "loc": ["body", "prompt"], "msg": message,
                    "type": if *moderated { "content_policy_violation" } else { "generation_error" } }] }),
            ),
            FakeStatus::TimedOut => {
                let mut response = error(
                    StatusCode::GATEWAY_TIMEOUT,
                    json!({ "detail": "Request timed out", "error_type": "request_timeout" }),
                );
                response
                    .headers_mut()
                    .insert("x-fal-request-timeout-type", "user".parse().unwrap());
                response
            }
            FakeStatus::Canceled => error(
                StatusCode::BAD_REQUEST,
                json!({ "detail": "Request was cancelled" }),
            ),
            FakeStatus::Queued | FakeStatus::Running => error(
                StatusCode::BAD_REQUEST,
                json!({ "detail": "Request is still in progress" }),
            ),
        },
        _ => error(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({ "detail": "Method not allowed" }),
        ),
    }
}

async fn cancel(
    State(state): State<Arc<FakeState>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    let Some((job, "cancel")) = job_for_path(&state, &headers, &path) else {
        return error(StatusCode::NOT_FOUND, json!({ "status": "NOT_FOUND" }));
    };
    if job.status.is_final() {
        return error(
            StatusCode::BAD_REQUEST,
            json!({ "status": "ALREADY_COMPLETED" }),
        );
    }
    let queued_answer = state.switches.lock().unwrap().fal_cancel_queued_answer;
    match state.cancel(&job.id) {
        Some((FakeStatus::Queued, _)) => (
            StatusCode::ACCEPTED,
            Json(json!({ "status": queued_answer })),
        )
            .into_response(),
        _ => (
            StatusCode::ACCEPTED,
            Json(json!({ "status": "CANCELLATION_REQUESTED" })),
        )
            .into_response(),
    }
}

fn iso(seconds: f64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos((seconds * 1e9) as i128)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

async fn list(
    State(state): State<Arc<FakeState>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    if state.lists_are_down() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "detail": "Service temporarily unavailable" }),
        );
    }
    let Some(endpoint_id) = query.get("endpoint_id") else {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({ "detail": [{ "loc": ["query", "endpoint_id"], "msg": "Field required", "type": "missing" }] }),
        );
    };
    let start = query
        .get("start")
        .and_then(|text| super::parse_rfc3339(text))
        .unwrap_or(now_seconds() - 86_400.0);
    let limit: usize = query
        .get("limit")
        .and_then(|limit| limit.parse().ok())
        .unwrap_or(50)
        .clamp(1, 100);
    let page: usize = query
        .get("cursor")
        .and_then(|cursor| URL_SAFE_NO_PAD.decode(cursor).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.parse().ok())
        .unwrap_or(0);
    let payloads = query
        .get("expand")
        .is_some_and(|expand| expand.contains("payloads"));
    // fal's list is of finished requests: "Status (success, error,
    // user_error)" filters, "sorted by end time (default)" (fal's
    // "List requests by endpoint(s)" page), unless GUESS
    // fal-list-finished-only is played the other way. The `start` bound is
    // read as the end time (GUESS fal-list-time).
    let shows_unfinished = state.switches.lock().unwrap().fal_list_shows_unfinished;
    let mut matching: Vec<FakeJob> = state
        .jobs
        .lock()
        .unwrap()
        .iter()
        .filter(|job| job.provider == Provider::FAL && &job.target == endpoint_id)
        .filter(|job| Some(job.account) == caller_account(&headers))
        .filter(|job| shows_unfinished || job.status.is_final())
        .filter(|job| job.completed_at.unwrap_or(job.created_at) >= start)
        .cloned()
        .collect();
    matching.sort_by(|a, b| {
        b.completed_at
            .unwrap_or_default()
            .total_cmp(&a.completed_at.unwrap_or_default())
    });
    let items: Vec<Value> = matching
        .iter()
        .skip(page * limit)
        .take(limit)
        .map(|job| {
            let mut item = json!({
                "request_id": job.id,
                "endpoint_id": job.target,
                "sent_at": iso(job.created_at),
                "started_at": job.started_at.map(iso),
                "ended_at": job.completed_at.map(iso),
                // GUESS fal-list-status-code: the page's example shows 200
                // for a success; a failure's code is not shown.
                "status_code": match &job.status {
                    FakeStatus::Succeeded => json!(200),
                    FakeStatus::Queued | FakeStatus::Running => Value::Null,
                    _ => json!(500),
                },
            });
            if payloads {
                item["json_input"] = listed_input(&job.input);
            }
            item
        })
        .collect();
    let has_more = matching.len() > (page + 1) * limit;
    Json(json!({
        "items": items,
        "has_more": has_more,
        "next_cursor": has_more.then(|| URL_SAFE_NO_PAD.encode((page + 1).to_string())),
    }))
    .into_response()
}

async fn media(State(state): State<Arc<FakeState>>, Path(file): Path<String>) -> Response {
    // fal's CDN links are public: no key needed.
    state.output_response(file.trim_end_matches(".mp4"))
}

fn signing_key(state: &FakeState) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&state.fal_signing_seed).unwrap()
}

/// fal's published webhook keys; unauthenticated, and down in an outage
/// like the rest of fal.
async fn jwks(State(state): State<Arc<FakeState>>) -> Response {
    state.count_key_fetch(Provider::FAL);
    if state.is_down() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let public = URL_SAFE_NO_PAD.encode(signing_key(&state).public_key().as_ref());
    Json(json!({ "keys": [
        { "kty": "OKP", "crv": "Ed25519", "x": public, "kid": "fake-1", "use": "sig" }
    ]}))
    .into_response()
}

/// The completion webhook of a finished job, signed as fal signs them.
pub fn webhook_request(state: &FakeState, job: &FakeJob, url: &str) -> reqwest::RequestBuilder {
    let body = match &job.status {
        FakeStatus::Succeeded => json!({
            "request_id": job.id, "gateway_request_id": job.id, "status": "OK",
            "payload": result_body(state, job), "error": null,
        }),
        FakeStatus::Failed { message, moderated } => json!({
            "request_id": job.id, "gateway_request_id": job.id, "status": "ERROR",
            "error": "Invalid status code: 422",
            "payload": { "detail": [{ "loc": ["body", "prompt"], "msg": message,
                "type": if *moderated { "content_policy_violation" } else { "generation_error" } }] },
        }),
        other => json!({
            "request_id": job.id, "gateway_request_id": job.id, "status": "ERROR",
            "error": format!("{other:?}"), "payload": null,
        }),
    }
    .to_string();
    let timestamp = (now_seconds() as i64).to_string();
    let user_id = user_id_of(job.account);
    let signature = sign_for(state, user_id, &job.id, &timestamp, body.as_bytes());
    state
        .http
        .post(url)
        .header("content-type", "application/json")
        .header("x-fal-webhook-request-id", &job.id)
        .header("x-fal-webhook-user-id", user_id)
        .header("x-fal-webhook-timestamp", timestamp)
        .header("x-fal-webhook-signature", signature)
        .body(body)
}

/// fal's webhook signature: hex Ed25519 over `request_id`, user id,
/// timestamp and the body's SHA-256 (hex), one per line.
pub fn sign(state: &FakeState, request_id: &str, timestamp: &str, body: &[u8]) -> String {
    sign_for(state, USER_ID, request_id, timestamp, body)
}

/// fal's webhook signature of a request of the account `user_id`: fal
/// signs every account's webhooks with the same keys.
pub fn sign_for(
    state: &FakeState,
    user_id: &str,
    request_id: &str,
    timestamp: &str,
    body: &[u8],
) -> String {
    let body_digest: String = Sha256::digest(body)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let message = format!("{request_id}\n{user_id}\n{timestamp}\n{body_digest}");
    signing_key(state)
        .sign(message.as_bytes())
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}
