//! The fake of Replicate's HTTP API: create a prediction of an official
//! model (`Prefer: wait`, `Cancel-After`), get, list (newest first, 100 a
//! page, `created_after`), cancel, the default webhook secret, the
//! delivery links of outputs (which want the token), problem+json errors,
//! 429 with `ratelimit-*` headers, and Standard Webhooks-signed webhooks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::{
    CallClass, FakeJob, FakeProvider, FakeProviders, FakeState, FakeStatus, JobDeadline, Provider,
    REPLICATE_TOKEN, RateLimits, Switches, listed_input, now_seconds,
};

/// The models the fake hosts (the official video models of
/// UPSTREAMS.md); any other answers 404 as Replicate does.
pub const MODELS: &[&str] = &[
    "alibaba/wan-3",
    "alibaba/wan-3-prime",
    "google/veo-3.1-lite",
    "black-forest-labs/flux-3",
    "bytedance/seedance-2.0",
    "kwaivgi/kling-v3-video",
    "kwaivgi/kling-v3-omni-video",
];

impl Provider {
    /// Replicate's predictions API and its default webhook secret.
    pub const REPLICATE: Provider = Provider(&FakeProvider {
        name: "replicate",
        routes,
        job_id,
        credential: ("REPLICATE_API_TOKEN", REPLICATE_TOKEN),
        point_at,
        rate_limits,
        cancel_queued,
        webhook_request: filtered_webhook,
    });
}

/// Replicate's ids are 26 lowercase base32 characters.
fn job_id(next: u64) -> String {
    format!("fakepred{next:018}")
}

fn point_at(fake: &FakeProviders, entry: &mut Value) {
    entry["api_url"] = json!(fake.replicate_api_url());
}

/// Replicate's documented limits, when a test turns them on (GUESS
/// replicate-rate-window).
fn rate_limits(switches: &Switches) -> Option<RateLimits> {
    switches.replicate_limits
}

/// A queued prediction's cancel comes back as the recorded one did (GUESS
/// replicate-cancel-answer-while-queued): it started (at the earliest
/// 47 ms after its creation) and ran 0.128 s before the cancel stopped it.
fn cancel_queued(job: &mut FakeJob, now: f64) {
    let started = (job.created_at + 0.047).max(now);
    job.started_at = Some(started);
    job.completed_at = Some(started + 0.128);
}

/// Replicate sends the events the prediction's `webhook_events_filter`
/// names (all of them without one).
fn filtered_webhook(
    state: &FakeState,
    job: &FakeJob,
    event: &str,
    url: &str,
) -> Option<reqwest::RequestBuilder> {
    let wanted = job.webhook_events.is_empty() || job.webhook_events.iter().any(|e| e == event);
    wanted.then(|| webhook_request(state, job, url))
}

pub fn routes() -> Router<Arc<FakeState>> {
    Router::new()
        .route(
            "/replicate/v1/models/{owner}/{name}/predictions",
            post(create),
        )
        .route("/replicate/v1/predictions", get(list))
        .route("/replicate/v1/predictions/{id}", get(read))
        .route("/replicate/v1/predictions/{id}/cancel", post(cancel))
        .route("/replicate/v1/webhooks/default/secret", get(secret))
        .route("/replicate/delivery/{id}/output.mp4", get(delivery))
}

fn problem(status: StatusCode, title: &str, detail: &str) -> Response {
    (
        status,
        [("content-type", "application/problem+json")],
        json!({ "title": title, "detail": detail, "status": status.as_u16() }).to_string(),
    )
        .into_response()
}

fn authorized(state: &FakeState, headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        == Some(&format!("Bearer {}", state.replicate_token))
}

/// The checks every API call passes first: the token, an outage and the
/// rate limits (the `rate_limit_next` switch, and the documented limits
/// per minute of the call's class when `replicate_limits` is set).
fn gate(state: &FakeState, headers: &HeaderMap, class: CallClass) -> Option<Response> {
    if !authorized(state, headers) {
        return Some(problem(
            StatusCode::UNAUTHORIZED,
            "Unauthenticated",
            "You did not pass a valid authentication token",
        ));
    }
    if state.is_down() {
        return Some(problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            "Replicate is temporarily unavailable",
        ));
    }
    let with_headers = state.switches.lock().unwrap().replicate_429_headers;
    if let Some(reset) = state.count_call(Provider::REPLICATE, class) {
        return Some(throttled(reset, with_headers));
    }
    if state.take(|switches| &mut switches.rate_limit_next) {
        return Some(throttled(1, with_headers));
    }
    None
}

/// Replicate's 429: the body its rate-limits page documents, and, as GUESS
/// replicate-429-headers has it, `ratelimit-remaining` and
/// `ratelimit-reset`; no `Retry-After`.
fn throttled(reset_seconds: u64, with_headers: bool) -> Response {
    let mut response = (
        StatusCode::TOO_MANY_REQUESTS,
        [("content-type", "application/problem+json")],
        json!({ "detail": format!("Request was throttled. Your rate limit resets in ~{reset_seconds}s."), "status": 429 })
            .to_string(),
    )
        .into_response();
    if with_headers {
        let headers = response.headers_mut();
        headers.insert("ratelimit-remaining", "0".parse().unwrap());
        headers.insert("ratelimit-reset", reset_seconds.into());
    }
    response
}

fn iso(seconds: f64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos((seconds * 1e9) as i128)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// A prediction object as `GET /v1/predictions/{id}` returns it.
pub fn prediction(state: &FakeState, job: &FakeJob) -> Value {
    let base = state.base_url.lock().unwrap().clone();
    let api = format!("{base}/replicate/v1/predictions/{}", job.id);
    let (status, output, error) = match &job.status {
        FakeStatus::Queued => ("starting", Value::Null, Value::Null),
        FakeStatus::Running => ("processing", Value::Null, Value::Null),
        FakeStatus::Succeeded => (
            "succeeded",
            json!(format!("{base}/replicate/delivery/{}/output.mp4", job.id)),
            Value::Null,
        ),
        FakeStatus::Failed { message, moderated } => (
            "failed",
            Value::Null,
            json!(if *moderated {
                format!("NSFW content detected: {message}")
            } else {
                message.clone()
            }),
        ),
        FakeStatus::Canceled => ("canceled", Value::Null, Value::Null),
        FakeStatus::TimedOut => ("aborted", Value::Null, Value::Null),
    };
    let mut prediction = json!({
        "id": job.id,
        "model": job.target,
        "version": "hidden",
        "input": listed_input(&job.input),
        "logs": "",
        "output": output,
        "data_removed": false,
        "error": error,
        "status": status,
        "source": "api",
        "created_at": iso(job.created_at),
        "urls": {
            "get": api,
            "cancel": format!("{api}/cancel"),
            "web": format!("https://replicate.com/p/{}", job.id),
        },
        "metrics": match (job.started_at, job.completed_at) {
            (Some(started), Some(completed)) => json!({ "predict_time": completed - started }),
            _ => json!({}),
        },
    });
    let removes_after = state.switches.lock().unwrap().replicate_removes_data_after;
    let data_removed =
        job.completed_at
            .zip(removes_after)
            .is_some_and(|(completed_at, removes_after)| {
                now_seconds() >= completed_at + removes_after.as_secs_f64()
            });
    if data_removed {
        prediction["input"] = json!({});
        prediction["output"] = Value::Null;
        prediction["data_removed"] = json!(true);
    }
    // Replicate leaves the times out until they happen (the recorded
    // `starting` prediction has neither), never null.
    for (name, time) in [
        ("started_at", job.started_at),
        ("completed_at", job.completed_at),
    ] {
        if let Some(time) = time {
            prediction[name] = json!(iso(time));
        }
    }
    prediction
}

/// Reads `Cancel-After` in Go duration syntax (`30s`, `5m`, `1h30m45s`),
/// where a number without a unit is seconds (`30` is `30s`).
fn parse_go_duration(text: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut number = String::new();
    for character in text.chars() {
        if character.is_ascii_digit() || character == '.' {
            number.push(character);
            continue;
        }
        let value: f64 = number.parse().ok()?;
        number.clear();
        total += value
            * match character {
                'h' => 3600.0,
                'm' => 60.0,
                's' => 1.0,
                _ => return None,
            };
    }
    if number.is_empty() {
        return (!text.is_empty()).then_some(total);
    }
    Some(total + number.parse::<f64>().ok()?)
}

/// What is wrong with a prediction request's body, as Replicate checks it
/// before the model's own input schema: `input` an object, the other
/// fields of their types, and no field it does not know.
fn invalid_prediction_request(request: &Value) -> Option<String> {
    let Some(fields) = request.as_object() else {
        return Some("the body must be a JSON object".into());
    };
    if !request["input"].is_object() {
        return Some("input: an object is required".into());
    }
    for (name, value) in fields {
        let valid = match name.as_str() {
            "input" => true,
            "stream" => value.is_boolean(),
            "webhook" => value.is_string(),
            "webhook_events_filter" => value.as_array().is_some_and(|events| {
                events.iter().all(|event| {
                    matches!(
                        event.as_str(),
                        Some("start" | "output" | "logs" | "completed")
                    )
                })
            }),
            _ => return Some(format!("{name}: additional properties are not allowed")),
        };
        if !valid {
            return Some(format!("{name}: not a valid value"));
        }
    }
    None
}

async fn create(
    State(state): State<Arc<FakeState>>,
    Path((owner, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Creates) {
        return refused;
    }
    if state.submits_are_down_at(Provider::REPLICATE) {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            "Replicate is temporarily unavailable",
        );
    }
    let model = format!("{owner}/{name}");
    if !MODELS.contains(&model.as_str()) {
        return problem(
            StatusCode::NOT_FOUND,
            "Not found",
            "The requested resource could not be found.",
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return problem(
            StatusCode::BAD_REQUEST,
            "Invalid JSON",
            "The request body is not valid JSON.",
        );
    };
    if let Some(refusal) = invalid_prediction_request(&request) {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Input validation failed",
            &refusal,
        );
    }
    let input = request["input"].clone();
    if !input["prompt"].is_string() {
        return problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Input validation failed",
            "input: prompt is required",
        );
    }
    // Replicate checks the input against the model version's schema; the
    // 422 problem+json it answers is the fake's guess (GUESS replicate-422:
    // its OpenAPI document lists no status for a refused input).
    if state.validates_inputs() {
        let problems = super::invalid_input(Provider::REPLICATE, &model, &input);
        if !problems.is_empty() {
            return problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Input validation failed",
                &problems.join("; "),
            );
        }
    }
    let cancel_after = match headers
        .get("cancel-after")
        .and_then(|value| value.to_str().ok())
    {
        Some(text) => match parse_go_duration(text) {
            Some(seconds) if seconds >= 5.0 => Some(seconds),
            _ => {
                return problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid Cancel-After",
                    "Cancel-After must be a duration of at least 5s",
                );
            }
        },
        None => None,
    };
    let wait = match headers.get("prefer").and_then(|value| value.to_str().ok()) {
        Some("wait") => Some(60),
        Some(text) => match text
            .strip_prefix("wait=")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(seconds) if (1..=60).contains(&seconds) => Some(seconds),
            _ => {
                return problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid Prefer header",
                    "Prefer must be wait or wait=1..60",
                );
            }
        },
        None => None,
    };
    let events = request["webhook_events_filter"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let job = state.create_job(
        Provider::REPLICATE,
        &model,
        input,
        request["webhook"].as_str().map(str::to_owned),
        events,
        cancel_after.map(JobDeadline::Lifetime),
    );
    if state.take(|switches| &mut switches.lose_submit_answers) {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let mut answer_headers = vec![
        ("ratelimit-remaining", "599".to_owned()),
        ("ratelimit-reset", "1".to_owned()),
    ];
    let job = if let Some(seconds) = wait {
        // `Prefer: wait` holds the answer until the prediction finishes or
        // the wait runs out.
        let until = Instant::now() + Duration::from_secs(seconds);
        let mut current = job;
        while !current.status.is_final() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
            current = state.job(&current.id).unwrap();
        }
        answer_headers.push(("preference-applied", format!("wait={seconds}")));
        current
    } else {
        job
    };
    let mut response = (StatusCode::CREATED, Json(prediction(&state, &job))).into_response();
    for (name, value) in answer_headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

async fn read(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Others) {
        return refused;
    }
    state.count_state_read(&id);
    match state
        .job(&id)
        .filter(|job| job.provider == Provider::REPLICATE)
    {
        Some(job) => Json(prediction(&state, &job)).into_response(),
        None => problem(
            StatusCode::NOT_FOUND,
            "Not found",
            "The requested resource could not be found.",
        ),
    }
}

async fn list(
    State(state): State<Arc<FakeState>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Others) {
        return refused;
    }
    if state.lists_are_down() {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            "Replicate is temporarily unavailable",
        );
    }
    // Replicate refuses a time filter that is not a date-time, and a
    // source other than `web`, the one it filters by.
    let mut bounds = [f64::MIN, f64::MAX];
    for (bound, name) in bounds.iter_mut().zip(["created_after", "created_before"]) {
        if let Some(text) = query.get(name) {
            match super::parse_rfc3339(text) {
                Some(time) => *bound = time,
                None => {
                    return problem(
                        StatusCode::BAD_REQUEST,
                        "Invalid query parameter",
                        &format!("{name}: enter a valid date/time"),
                    );
                }
            }
        }
    }
    let [after, before] = bounds;
    let from_the_web_only = match query.get("source").map(String::as_str) {
        None => false,
        Some("web") => true,
        Some(_) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Invalid query parameter",
                "source: the only supported value is web",
            );
        }
    };
    let page: usize = query
        .get("cursor")
        .and_then(|cursor| cursor.parse().ok())
        .unwrap_or(0);
    let mut matching: Vec<FakeJob> = state
        .jobs
        .lock()
        .unwrap()
        .iter()
        .filter(|job| job.provider == Provider::REPLICATE)
        // Every prediction of the fake was created through the API.
        .filter(|_| !from_the_web_only)
        .filter(|job| job.created_at >= after && job.created_at < before)
        .cloned()
        .collect();
    matching.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
    const PAGE: usize = 100;
    let results: Vec<Value> = matching
        .iter()
        .skip(page * PAGE)
        .take(PAGE)
        .map(|job| prediction(&state, job))
        .collect();
    let base = state.base_url.lock().unwrap().clone();
    let next = (matching.len() > (page + 1) * PAGE).then(|| {
        let mut url = url::Url::parse(&format!("{base}/replicate/v1/predictions")).unwrap();
        {
            let mut pairs = url.query_pairs_mut();
            for (name, value) in &query {
                if name != "cursor" {
                    pairs.append_pair(name, value);
                }
            }
            pairs.append_pair("cursor", &(page + 1).to_string());
        }
        url.to_string()
    });
    Json(json!({ "next": next, "previous": null, "results": results })).into_response()
}

async fn cancel(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Others) {
        return refused;
    }
    if state
        .job(&id)
        .filter(|job| job.provider == Provider::REPLICATE)
        .is_none()
    {
        return problem(
            StatusCode::NOT_FOUND,
            "Not found",
            "The requested resource could not be found.",
        );
    }
    let (_, job) = state.cancel(&id).unwrap();
    Json(prediction(&state, &job)).into_response()
}

async fn secret(State(state): State<Arc<FakeState>>, headers: HeaderMap) -> Response {
    state.count_key_fetch(Provider::REPLICATE);
    if let Some(refused) = gate(&state, &headers, CallClass::Others) {
        return refused;
    }
    Json(json!({ "key": state.replicate_webhook_secret })).into_response()
}

async fn delivery(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    // Delivery links may want the API token.
    if !authorized(&state, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    state.output_response(&id)
}

/// A webhook with the prediction as its body, signed as Standard Webhooks
/// signs: `v1,` base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`.
pub fn webhook_request(state: &FakeState, job: &FakeJob, url: &str) -> reqwest::RequestBuilder {
    let body = prediction(state, job).to_string();
    let message_id = format!("msg_{}_{}", job.id, (now_seconds() * 1000.0) as u64);
    let timestamp = (now_seconds() as i64).to_string();
    let signature = sign(
        &state.replicate_webhook_secret,
        &message_id,
        &timestamp,
        &body,
    );
    state
        .http
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", message_id)
        .header("webhook-timestamp", timestamp)
        .header("webhook-signature", signature)
        .body(body)
}

pub fn sign(secret: &str, message_id: &str, timestamp: &str, body: &str) -> String {
    let key = STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{message_id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}
