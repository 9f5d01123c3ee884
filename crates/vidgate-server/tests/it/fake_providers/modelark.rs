//! The fake of BytePlus ModelArk's content-generation tasks API: create a
//! task (`POST /api/v3/contents/generations/tasks`), get one, list them
//! (`page_num`, `page_size`, `filter.status`), `DELETE` one (a queued task
//! is canceled, a finished one's record removed, a running one refused),
//! the task's video link, the `{"error": {code, message}}` error body, 429s,
//! and unsigned callbacks of the task object.
//!
//! Sources. The official SDK, `byteplus-python-sdk-v2` 3.0.63 from PyPI:
//! - `byteplussdkarkruntime/resources/content_generation/tasks.py`: the
//!   four calls, their paths and methods, the create's body fields (the
//!   fake refuses any other), the list's query (`page_num`, `page_size`,
//!   `filter.status`, `filter.model`, `filter.task_ids`,
//!   `filter.service_tier`);
//! - `types/content_generation/create_task_content_param.py`: the content
//!   items (`text`; `image_url`, `video_url`, `audio_url` with `url` and a
//!   `role`);
//! - `types/content_generation/content_generation_task.py`: the task
//!   object (`id`, `model`, `status`, `error.code`/`error.message`,
//!   `content.video_url`, `usage.completion_tokens`, `created_at` and
//!   `updated_at` in Unix seconds, `seed`, `ratio`, `resolution`,
//!   `duration`, `framespersecond`, `generate_audio`, `safety_identifier`,
//!   `service_tier`, `execution_expires_after`); its create answer is
//!   `{id}` (`content_generation_task_id.py`); the list answers
//!   `{total, items}` (`list_content_generation_tasks_response.py`);
//! - `_base_client.py`: an error's body is `{"error": {...}}` with `code`
//!   and `message`; 401, 403, 404, 429 and 5xx each its own exception.
//!
//! BytePlus's Video Generation API page
//! (https://docs.byteplus.com/en/docs/ModelArk/1520757, a stored copy):
//! at most 120 queued tasks per account; only a queued task can be
//! canceled; the statuses `queued`, `running`, `cancelled`, `succeeded`,
//! `failed`, `expired` (the last from third-party copies of the page).
//!
//! Guesses, each marked where it is used:
//! - GUESS modelark-queue-full: a create beyond the 120 queued tasks is
//!   answered 429 with a `code` naming the limit; the page says only that
//!   the limit exists. Switch: `Switches::modelark_queued_limit`.
//! - GUESS modelark-429: a 429 carries no wait header (the SDK reads none
//!   for a task call) and the code `RateLimitExceeded`.
//! - GUESS modelark-running-delete: a `DELETE` of a running task answers
//!   400 with a code; the page says only that running tasks cannot be
//!   canceled. vidgate never sends it (it reads the state first).
//! - GUESS modelark-callback-events: a callback is sent when the task
//!   starts and when it ends, its body the task object as `GET` answers
//!   it, with no signature header (none is documented).
//! - GUESS modelark-list-order: the list is newest first.
//! - GUESS modelark-moderation-code: a task that fails the output safety
//!   check ends `failed` with the code `OutputVideoSensitiveContentDetected`
//!   and a message about sensitive information (the wording of third-party
//!   copies of such failures).
//!
//! The marker switches of `mod.rs` (`[fake:fail]`, `[fake:moderate]`, …)
//! steer a task through its prompt, as for the other providers.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};

use super::{
    ARK_API_KEY, CallClass, FakeJob, FakeProvider, FakeProviders, FakeState, FakeStatus,
    JobDeadline, Provider,
};

/// The models the fake serves; another answers 404.
pub const MODELS: &[&str] = &["dreamina-seedance-2-0-260128"];

/// What ModelArk keeps of a task beyond the flat input the fake's jobs
/// hold.
#[derive(Debug, Clone, Default)]
pub struct TaskExtras {
    pub safety_identifier: Option<String>,
    pub execution_expires_after: Option<u64>,
    /// The whole body the task was created with, for assertions.
    pub body: Value,
}

impl Provider {
    /// BytePlus ModelArk's content-generation tasks API.
    pub const MODELARK: Provider = Provider(&FakeProvider {
        name: "modelark",
        routes,
        job_id,
        credential: ("ARK_API_KEY", ARK_API_KEY),
        point_at,
        rate_limits: super::no_rate_limits,
        cancel_queued: super::canceled_at_once,
        webhook_request: every_change_callback,
    });
}

/// ModelArk's task ids begin `cgt-` (the documentation's examples).
fn job_id(next: u64) -> String {
    format!("cgt-20261128{next:012}")
}

fn point_at(fake: &FakeProviders, entry: &mut Value) {
    entry["api_url"] = json!(fake.modelark_api_url());
}

/// ModelArk calls back on each change of a task's status (GUESS
/// modelark-callback-events), unsigned.
fn every_change_callback(
    state: &FakeState,
    job: &FakeJob,
    _event: &str,
    url: &str,
) -> Option<reqwest::RequestBuilder> {
    Some(callback_request(state, job, url))
}

pub fn routes() -> Router<Arc<FakeState>> {
    Router::new()
        .route(
            "/modelark/api/v3/contents/generations/tasks",
            get(list).post(create),
        )
        .route(
            "/modelark/api/v3/contents/generations/tasks/{id}",
            get(read).delete(delete),
        )
        .route("/modelark/output/{id}", get(output))
}

/// The SDK's error body: `{"error": {"code", "message", "param", "type"}}`.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({ "error": { "code": code, "message": message, "param": "", "type": "" } })),
    )
        .into_response()
}

fn gate(state: &FakeState, headers: &HeaderMap, class: CallClass) -> Option<Response> {
    let authorized = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        == Some(&format!("Bearer {}", super::ARK_API_KEY));
    if !authorized {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "AuthenticationError",
            "The API key in the request is missing or invalid.",
        ));
    }
    if state.is_down() {
        return Some(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "The service is temporarily unavailable.",
        ));
    }
    state.count_call(Provider::MODELARK, class);
    if state.take(|switches| &mut switches.rate_limit_next) {
        // GUESS modelark-429.
        return Some(error(
            StatusCode::TOO_MANY_REQUESTS,
            "RateLimitExceeded",
            "Your account has exceeded its rate limit. Please try again later.",
        ));
    }
    None
}

/// The body fields `Tasks.create` sends (the SDK's keyword parameters).
const CREATE_FIELDS: &[&str] = &[
    "model",
    "content",
    "safety_identifier",
    "callback_url",
    "return_last_frame",
    "service_tier",
    "execution_expires_after",
    "priority",
    "generate_audio",
    "draft",
    "camera_fixed",
    "watermark",
    "seed",
    "resolution",
    "ratio",
    "duration",
    "frames",
    "output_format",
    "omni_reference_task_type",
];

/// The flat input of a create's body, in the form the backends file and
/// the transcribed schema (`fixtures/provider_schemas/modelark/`) name:
/// the text item as `prompt`, each media item under its role's name, and
/// the model's settings as they are. Fields that steer the task rather
/// than the model are left out.
fn flat_input(body: &Map<String, Value>) -> Result<Value, String> {
    let mut input = Map::new();
    let items = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or("content: a list is required")?;
    for item in items {
        let kind = item["type"].as_str().unwrap_or_default();
        let url = |field: &str| {
            item[field]["url"]
                .as_str()
                .map(str::to_owned)
                .ok_or(format!("content: {field}.url is required"))
        };
        match kind {
            "text" => {
                let text = item["text"].as_str().ok_or("content: text is required")?;
                input.insert("prompt".into(), json!(text));
            }
            "image_url" | "video_url" | "audio_url" => {
                let url = url(kind)?;
                // The first frame's role may be left out (the page's first
                // image-to-video example has none).
                let role = item["role"].as_str().unwrap_or("first_frame");
                let name = match role {
                    "first_frame" | "last_frame" => {
                        input.insert(role.into(), json!(url));
                        continue;
                    }
                    "reference_image" => "reference_images",
                    "reference_video" => "reference_videos",
                    "reference_audio" => "reference_audios",
                    other => return Err(format!("content: the role {other} is not valid")),
                };
                input
                    .entry(name)
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                    .unwrap()
                    .push(json!(url));
            }
            other => return Err(format!("content: the type {other} is not valid")),
        }
    }
    for (name, value) in body {
        if !matches!(
            name.as_str(),
            "model"
                | "content"
                | "safety_identifier"
                | "callback_url"
                | "execution_expires_after"
                | "service_tier"
                | "priority"
        ) {
            input.insert(name.clone(), value.clone());
        }
    }
    Ok(Value::Object(input))
}

async fn create(State(state): State<Arc<FakeState>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Creates) {
        return refused;
    }
    if state.submits_are_down_at(Provider::MODELARK) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "The service is temporarily unavailable.",
        );
    }
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "The request body is not a JSON object.",
        );
    };
    if let Some(unknown) = request
        .keys()
        .find(|name| !CREATE_FIELDS.contains(&name.as_str()))
    {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            &format!("The parameter {unknown} is not valid."),
        );
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !MODELS.contains(&model.as_str()) {
        return error(
            StatusCode::NOT_FOUND,
            "InvalidEndpointOrModel.NotFound",
            "The model or endpoint does not exist or you do not have access to it.",
        );
    }
    let input = match flat_input(&request) {
        Ok(input) => input,
        Err(reason) => return error(StatusCode::BAD_REQUEST, "InvalidParameter", &reason),
    };
    if state.validates_inputs() {
        let problems = super::invalid_input(Provider::MODELARK, &model, &input);
        if !problems.is_empty() {
            return error(
                StatusCode::BAD_REQUEST,
                "InvalidParameter",
                &problems.join("; "),
            );
        }
    }
    let queued_limit = state.switches.lock().unwrap().modelark_queued_limit;
    let queued = state
        .jobs
        .lock()
        .unwrap()
        .iter()
        .filter(|job| job.provider == Provider::MODELARK && job.status == FakeStatus::Queued)
        .count();
    if queued >= queued_limit {
        // GUESS modelark-queue-full.
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "QuotaExceeded.QueuedTasks",
            "The number of queued tasks of your account has reached its limit.",
        );
    }
    let expires_after = request
        .get("execution_expires_after")
        .and_then(Value::as_u64);
    let job = state.create_job(
        Provider::MODELARK,
        &model,
        input,
        request
            .get("callback_url")
            .and_then(Value::as_str)
            .map(str::to_owned),
        Vec::new(),
        expires_after.map(|seconds| JobDeadline::Expiry(seconds as f64)),
    );
    state.modelark_tasks.lock().unwrap().insert(
        job.id.clone(),
        TaskExtras {
            safety_identifier: request
                .get("safety_identifier")
                .and_then(Value::as_str)
                .map(str::to_owned),
            execution_expires_after: expires_after,
            body: Value::Object(request.clone()),
        },
    );
    if state.take(|switches| &mut switches.lose_submit_answers) {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    Json(json!({ "id": job.id })).into_response()
}

/// A task object as `GET …/tasks/{id}` answers it.
pub fn task(state: &FakeState, job: &FakeJob) -> Value {
    let base = state.base_url.lock().unwrap().clone();
    let extras = state
        .modelark_tasks
        .lock()
        .unwrap()
        .get(&job.id)
        .cloned()
        .unwrap_or_default();
    let (status, error) = match &job.status {
        FakeStatus::Queued => ("queued", Value::Null),
        FakeStatus::Running => ("running", Value::Null),
        FakeStatus::Succeeded => ("succeeded", Value::Null),
        // GUESS modelark-moderation-code.
        FakeStatus::Failed {
            moderated: true, ..
        } => (
            "failed",
            json!({ "code": "OutputVideoSensitiveContentDetected",
                "message": "The request failed because the output video may contain sensitive information." }),
        ),
        FakeStatus::Failed { message, .. } => (
            "failed",
            json!({ "code": "InternalServiceError", "message": message }),
        ),
        FakeStatus::Canceled => ("cancelled", Value::Null),
        FakeStatus::TimedOut => ("expired", Value::Null),
    };
    let updated_at = job
        .completed_at
        .or(job.started_at)
        .unwrap_or(job.created_at) as i64;
    let mut task = json!({
        "id": job.id,
        "model": job.target,
        "status": status,
        "error": error,
        "created_at": job.created_at as i64,
        "updated_at": updated_at,
        "seed": job.input.get("seed").cloned().unwrap_or(json!(12345)),
        "resolution": job.input.get("resolution").cloned().unwrap_or(json!("720p")),
        "ratio": job.input.get("ratio").cloned().unwrap_or(json!("16:9")),
        "duration": job.input.get("duration").cloned().unwrap_or(json!(5)),
        "framespersecond": 24,
        "generate_audio": job.input.get("generate_audio").cloned().unwrap_or(json!(true)),
        "service_tier": "default",
        "execution_expires_after": extras.execution_expires_after.unwrap_or(172_800),
        "draft": false,
    });
    if let Some(identifier) = extras.safety_identifier {
        task["safety_identifier"] = json!(identifier);
    }
    if job.status == FakeStatus::Succeeded {
        task["content"] = json!({ "video_url": format!("{base}/modelark/output/{}", job.id) });
        task["usage"] = json!({ "completion_tokens": 108_900, "total_tokens": 108_900 });
    }
    task
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
        .filter(|job| job.provider == Provider::MODELARK)
    {
        Some(job) => Json(task(&state, &job)).into_response(),
        None => not_found(),
    }
}

fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
        "The specified task does not exist.",
    )
}

async fn list(
    State(state): State<Arc<FakeState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Others) {
        return refused;
    }
    if state.lists_are_down() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "The service is temporarily unavailable.",
        );
    }
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let first = |name: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    let page_num: usize = first("page_num")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
        .max(1);
    let page_size: usize = first("page_size")
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
        .clamp(1, 500);
    let status = first("filter.status");
    let model = first("filter.model");
    let task_ids: Vec<&String> = pairs
        .iter()
        .filter(|(key, _)| key == "filter.task_ids")
        .map(|(_, value)| value)
        .collect();
    let mut tasks: Vec<Value> = state
        .jobs
        .lock()
        .unwrap()
        .iter()
        .filter(|job| job.provider == Provider::MODELARK)
        .filter(|job| model.as_ref().is_none_or(|model| &job.target == model))
        .filter(|job| task_ids.is_empty() || task_ids.contains(&&job.id))
        .map(|job| task(&state, job))
        .filter(|task| {
            status
                .as_ref()
                .is_none_or(|status| task["status"] == status.as_str())
        })
        .collect();
    // GUESS modelark-list-order: newest first.
    tasks.sort_by_key(|task| std::cmp::Reverse(task["created_at"].as_i64()));
    let total = tasks.len();
    let items: Vec<Value> = tasks
        .into_iter()
        .skip((page_num - 1) * page_size)
        .take(page_size)
        .collect();
    Json(json!({ "total": total, "items": items })).into_response()
}

async fn delete(
    State(state): State<Arc<FakeState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers, CallClass::Others) {
        return refused;
    }
    let Some(job) = state
        .job(&id)
        .filter(|job| job.provider == Provider::MODELARK)
    else {
        return not_found();
    };
    let finishes_first = state
        .switches
        .lock()
        .unwrap()
        .modelark_finishes_before_delete;
    match job.status {
        FakeStatus::Queued if finishes_first => {
            // It ran and finished a moment before the DELETE, billed; the
            // DELETE then removes its record.
            state.jobs.lock().unwrap().retain(|job| job.id != id);
            state.modelark_deleted_finished.lock().unwrap().push(id);
        }
        FakeStatus::Queued => {
            state.cancel(&id);
        }
        FakeStatus::Running => {
            // GUESS modelark-running-delete.
            return error(
                StatusCode::BAD_REQUEST,
                "InvalidAction.TaskRunning",
                "A running task can be neither canceled nor deleted.",
            );
        }
        // A finished task's record is deleted.
        _ => {
            state.jobs.lock().unwrap().retain(|job| job.id != id);
            state.modelark_deleted_finished.lock().unwrap().push(id);
        }
    }
    Json(json!({})).into_response()
}

/// The task's video: a link on ModelArk's storage that needs no key and
/// expires after 24 hours (not played: no test lasts that long).
async fn output(State(state): State<Arc<FakeState>>, Path(id): Path<String>) -> Response {
    state.output_response(&id)
}

/// A callback: the task object, posted to the task's `callback_url`
/// unsigned (GUESS modelark-callback-events).
pub fn callback_request(state: &FakeState, job: &FakeJob, url: &str) -> reqwest::RequestBuilder {
    state
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(task(state, job).to_string())
}

/// The body job `job_id` was created with, as sent.
pub fn created_body(state: &FakeState, job_id: &str) -> Value {
    state
        .modelark_tasks
        .lock()
        .unwrap()
        .get(job_id)
        .map(|extras| extras.body.clone())
        .unwrap_or_default()
}
