//! A fake of DashScope's asynchronous video synthesis (Alibaba Cloud Model
//! Studio) on its own port-0 axum server: create a task, read it, list the
//! account's tasks, cancel a queued one, its error bodies and its 429.
//! Each task is a small state machine (PENDING → RUNNING → SUCCEEDED or
//! FAILED, or CANCELED while PENDING) driven by a task of its own, and a
//! successful task's `video_url` serves a real MP4 rendered by our engine.
//!
//! A fake proves only what its source proves. Sources:
//! - SDK: the official Python SDK `dashscope` 2.0.2 (PyPI):
//!   `client/base_api.py` (`BaseAsyncApi.async_call`, `fetch`, `list` and
//!   its query `start_time`, `end_time`, `model_name`, `status`, `page_no`,
//!   `page_size`, `cancel`: "Cancel PENDING task"),
//!   `api_entities/http_request.py` (`Authorization: Bearer`,
//!   `X-DashScope-Async: enable`), `api_entities/api_request_factory.py`
//!   (`{base}/services/aigc/video-generation/video-synthesis`),
//!   `common/constants.py` (`TaskStatus`), `common/utils.py` (error bodies
//!   `{request_id, code, message}`).
//! - TASKS: https://www.alibabacloud.com/help/en/model-studio/manage-asynchronous-tasks
//!   (the task states; `output.task_id`, `task_status`, `submit_time`,
//!   `scheduled_time`, `end_time`, `code`, `message`; "20 QPS per Alibaba
//!   Cloud account" for task queries; cancel of queued tasks only).
//! - T2V: https://www.alibabacloud.com/help/en/model-studio/text-to-video-api-reference
//!   (the create's body `{model, input, parameters}`, `X-DashScope-Async`
//!   required, `output.video_url`).
//! - The Java SDK's `VideoSynthesisOutput` (dashscope/dashscope-sdk-java):
//!   `orig_prompt` in a task's output.
//!
//! - The list's answer: the v2 SDK's `JobList.from_payload`
//!   (`v2/resources/_jobs.py`) reads a flat `{tasks: [...], total, page_no,
//!   page_size}` (or the same under `output`), each task as a `Job`
//!   (`task_id`, `task_status`, `submit_time`, …); the 1.x SDK's
//!   `http_request.py` also keeps a top-level `data` list of tasks
//!   ("Compatible with wan"). The fake answers the v2 reading; the switch
//!   `list_shape` gives the 1.x one, and two answers no reading proves
//!   anything by (`ListShape::NotAList`, `ListShape::TotalAboveTasks`).
//! - A task read's `usage`: the Python SDK's `VideoSynthesisUsage`
//!   (`video_count`, `video_duration`, `video_ratio`).
//!
//! Where the sources are silent the fake guesses, and every guess is here:
//! - GUESS dashscope-list-shape: which of the SDK's two readings the list
//!   answers (no first-party page shows it); listed newest first, each task
//!   with its `model_name`.
//! - GUESS dashscope-usage: a task shows its `usage` once it succeeded,
//!   with `video_ratio` the `size` sent (`1280*720`), or the `ratio` sent
//!   (`16:9`) where no size was, and `SR` its resolution's lines (`720`
//!   for `720P`: only third-party copies of the task read show `SR`).
//! - GUESS dashscope-cancel-refusal: a cancel of a task that is not
//!   PENDING answers 400 with code `UnsupportedOperation`; the sources say
//!   only that queued tasks can be canceled.
//! - GUESS dashscope-429: a throttled call answers 429 with code
//!   `Throttling.RateQuota` and no `Retry-After`, counted per second.
//! - GUESS dashscope-missing-async: a create without `X-DashScope-Async`
//!   answers 403 `AccessDenied` ("current user api does not support
//!   synchronous calls", as T2V quotes the message).
//! - GUESS dashscope-moderation: input the content checks refuse answers
//!   400 `DataInspectionFailed` at create; an output they refuse ends the
//!   task FAILED with the same code.
//! - GUESS dashscope-unknown-task: a read of a task the account does not
//!   have answers 200 with `task_status: UNKNOWN` (TASKS: "the task does not
//!   exist or its status is unknown").
//!
//! Markers in the prompt steer one task: `[fake:fail]`,
//! `[fake:moderate]` (the output refused), `[fake:moderate-input]` (the
//! create refused), `[fake:never-start]`; `DashScopeSwitches` steer the
//! fake (an outage, throttling, a lost create answer, the query limit).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{now_seconds, render};

/// The key the fake's one account answers to.
pub const DASHSCOPE_KEY: &str = "sk-test-dashscope";

/// The task queries DashScope takes a second per account (TASKS).
pub const QUERIES_PER_SECOND: u32 = 20;

/// The models the fake serves; any other is refused as DashScope refuses
/// a model it does not have (400 `InvalidParameter`, a guess of the code).
pub const MODELS: &[&str] = &["wan2.6-t2v", "wan2.6-i2v", "wan2.6-r2v"];

/// Where a task is in its life (SDK `TaskStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskStatus {
    Pending,
    Running,
    Succeeded,
    Failed { code: String, message: String },
    Canceled,
}

impl TaskStatus {
    fn name(&self) -> &'static str {
        match self {
            TaskStatus::Pending => "PENDING",
            TaskStatus::Running => "RUNNING",
            TaskStatus::Succeeded => "SUCCEEDED",
            TaskStatus::Failed { .. } => "FAILED",
            TaskStatus::Canceled => "CANCELED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct FakeTask {
    pub task_id: String,
    pub model: String,
    /// The create's `input` and `parameters`, as sent.
    pub input: Value,
    pub parameters: Value,
    pub status: TaskStatus,
    pub submitted_at: f64,
    pub scheduled_at: Option<f64>,
    pub ended_at: Option<f64>,
    /// The headers of its create (names in lower case, without the key).
    pub create_headers: HashMap<String, String>,
}

impl FakeTask {
    fn marker(&self, name: &str) -> bool {
        self.input["prompt"]
            .as_str()
            .is_some_and(|prompt| prompt.contains(&format!("[fake:{name}]")))
    }
}

/// How the task list answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListShape {
    /// `{tasks, total, page_no, page_size}`: the v2 SDK's `JobList`.
    Tasks,
    /// `{data, total, page_no, page_size}`: the 1.x SDK's "Compatible with
    /// wan" reading.
    Data,
    /// The tasks under a key neither SDK reads (`items`).
    NotAList,
    /// A page whose `total` counts the tasks but which shows none of them.
    TotalAboveTasks,
}

/// Whole-fake misbehaviour, changed by tests at any time.
#[derive(Debug, Clone)]
pub struct DashScopeSwitches {
    /// Every call answers 500, as in an outage.
    pub down: bool,
    /// The next this-many calls answer 429.
    pub throttle_next: u32,
    /// The next this-many creates make their task but their answer is lost:
    /// the connection is held until the client gives up.
    pub lose_create_answers: u32,
    /// Task queries beyond `QUERIES_PER_SECOND` in a second answer 429.
    pub enforce_query_limit: bool,
    /// Whether a task's read shows `orig_prompt` (the Java SDK's field).
    pub shows_orig_prompt: bool,
    pub list_shape: ListShape,
    pub queue_for: Duration,
    pub run_for: Duration,
}

impl Default for DashScopeSwitches {
    fn default() -> DashScopeSwitches {
        DashScopeSwitches {
            down: false,
            throttle_next: 0,
            lose_create_answers: 0,
            enforce_query_limit: false,
            shows_orig_prompt: true,
            list_shape: ListShape::Tasks,
            queue_for: Duration::from_millis(100),
            run_for: Duration::from_millis(100),
        }
    }
}

pub struct DashScopeState {
    base_url: Mutex<String>,
    pub tasks: Mutex<Vec<FakeTask>>,
    pub switches: Mutex<DashScopeSwitches>,
    outputs: Mutex<HashMap<String, Bytes>>,
    /// Task queries by Unix second: those answered and those refused.
    queries: Mutex<HashMap<u64, (u32, u32)>>,
    /// Cancels that arrived for a task that was running (vidgate never
    /// sends one: DashScope refuses them, and vidgate reads first).
    pub cancels_of_running_tasks: Mutex<u32>,
    next_id: Mutex<u64>,
}

pub struct FakeDashScope {
    pub state: Arc<DashScopeState>,
    base_url: String,
}

impl FakeDashScope {
    pub async fn start() -> FakeDashScope {
        let state = Arc::new(DashScopeState {
            base_url: Mutex::new(String::new()),
            tasks: Mutex::new(Vec::new()),
            switches: Mutex::new(DashScopeSwitches::default()),
            outputs: Mutex::new(HashMap::new()),
            queries: Mutex::new(HashMap::new()),
            cancels_of_running_tasks: Mutex::new(0),
            next_id: Mutex::new(0),
        });
        let router = Router::new()
            .route(
                "/api/v1/services/aigc/video-generation/video-synthesis",
                post(create),
            )
            .route("/api/v1/tasks", get(list))
            .route("/api/v1/tasks/{task_id}", get(read))
            .route("/api/v1/tasks/{task_id}/cancel", post(cancel))
            .route("/oss/{task_id}/output.mp4", get(output))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        *state.base_url.lock().unwrap() = base_url.clone();
        tokio::spawn(async move { axum::serve(listener, router).await });
        FakeDashScope { state, base_url }
    }

    /// The API root, as `DASHSCOPE_HTTP_BASE_URL` and the backends file's
    /// `api_url` take it.
    pub fn api_url(&self) -> String {
        format!("{}/api/v1", self.base_url)
    }

    pub fn switches(&self, change: impl FnOnce(&mut DashScopeSwitches)) {
        change(&mut self.state.switches.lock().unwrap());
    }

    /// Creates a task as another client of the same account would (a
    /// staging deployment sharing the key, an operator's script): `body`
    /// is the create's `{model, input, parameters}`; the task's id.
    pub async fn create_as_another_client(&self, body: Value) -> String {
        let answer: Value = reqwest::Client::new()
            .post(format!(
                "{}/services/aigc/video-generation/video-synthesis",
                self.api_url()
            ))
            .bearer_auth(DASHSCOPE_KEY)
            .header("X-DashScope-Async", "enable")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["output"]["task_id"]
            .as_str()
            .expect("the create is taken")
            .to_owned()
    }

    pub fn tasks(&self) -> Vec<FakeTask> {
        self.state.tasks.lock().unwrap().clone()
    }

    pub fn task(&self, task_id: &str) -> Option<FakeTask> {
        self.state.task(task_id)
    }

    /// The task queries refused with 429, over every second.
    pub fn refused_queries(&self) -> u32 {
        self.state
            .queries
            .lock()
            .unwrap()
            .values()
            .map(|(_, refused)| refused)
            .sum()
    }

    /// The most task queries answered in any one second.
    pub fn most_queries_in_a_second(&self) -> u32 {
        self.state
            .queries
            .lock()
            .unwrap()
            .values()
            .map(|(answered, _)| *answered)
            .max()
            .unwrap_or(0)
    }
}

impl DashScopeState {
    fn task(&self, task_id: &str) -> Option<FakeTask> {
        self.tasks
            .lock()
            .unwrap()
            .iter()
            .find(|task| task.task_id == task_id)
            .cloned()
    }

    fn update(&self, task_id: &str, change: impl FnOnce(&mut FakeTask)) -> Option<FakeTask> {
        let mut tasks = self.tasks.lock().unwrap();
        let task = tasks.iter_mut().find(|task| task.task_id == task_id)?;
        change(task);
        Some(task.clone())
    }

    fn take(&self, pick: impl FnOnce(&mut DashScopeSwitches) -> &mut u32) -> bool {
        let mut switches = self.switches.lock().unwrap();
        let counter = pick(&mut switches);
        if *counter > 0 {
            *counter -= 1;
            true
        } else {
            false
        }
    }

    /// The task object as `GET /tasks/{task_id}` shows it (TASKS, T2V).
    fn task_answer(&self, task: &FakeTask) -> Value {
        let mut output = json!({
            "task_id": task.task_id,
            "task_status": task.status.name(),
            "submit_time": beijing_time(task.submitted_at),
        });
        if self.switches.lock().unwrap().shows_orig_prompt {
            output["orig_prompt"] = task.input["prompt"].clone();
        }
        if let Some(at) = task.scheduled_at {
            output["scheduled_time"] = json!(beijing_time(at));
        }
        if let Some(at) = task.ended_at {
            output["end_time"] = json!(beijing_time(at));
        }
        match &task.status {
            TaskStatus::Succeeded => {
                let base = self.base_url.lock().unwrap().clone();
                output["video_url"] = json!(format!("{base}/oss/{}/output.mp4", task.task_id));
            }
            TaskStatus::Failed { code, message } => {
                output["code"] = json!(code);
                output["message"] = json!(message);
            }
            _ => {}
        }
        let mut answer = json!({ "request_id": request_id(), "output": output });
        // GUESS dashscope-usage.
        if task.status == TaskStatus::Succeeded {
            let parameters = &task.parameters;
            let size = parameters["size"].as_str();
            let lines = match (parameters["resolution"].as_str(), size) {
                (Some(resolution), _) => resolution.trim_end_matches(['P', 'p']).parse().ok(),
                (None, Some(size)) => size
                    .split('*')
                    .filter_map(|side| side.parse::<u64>().ok())
                    .min(),
                (None, None) => Some(1080),
            };
            answer["usage"] = json!({ "video_count": 1,
                "video_duration": parameters["duration"].as_u64().unwrap_or(5),
                "video_ratio": size.or(parameters["ratio"].as_str()).unwrap_or("16:9"),
                "SR": lines });
        }
        answer
    }

    /// Counts a task query in its second; true when it is over the limit.
    fn query_refused(&self) -> bool {
        let second = now_seconds() as u64;
        let enforce = self.switches.lock().unwrap().enforce_query_limit;
        let mut queries = self.queries.lock().unwrap();
        let counts = queries.entry(second).or_default();
        if enforce && counts.0 >= QUERIES_PER_SECOND {
            counts.1 += 1;
            return true;
        }
        counts.0 += 1;
        false
    }
}

/// A time as DashScope writes it (`2023-12-20 21:36:31.896`, TASKS), in
/// Beijing time (a guess: the zone is not written).
fn beijing_time(unix_seconds: f64) -> String {
    let time = time::OffsetDateTime::from_unix_timestamp_nanos((unix_seconds * 1e9) as i128)
        .unwrap()
        .to_offset(time::UtcOffset::from_hms(8, 0, 0).unwrap());
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
        time.year(),
        u8::from(time.month()),
        time.day(),
        time.hour(),
        time.minute(),
        time.second(),
        time.millisecond()
    )
}

fn request_id() -> String {
    format!("req-{}", (now_seconds() * 1e6) as u64)
}

/// An error answer (SDK `common/utils.py`: `{request_id, code, message}`).
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        Json(json!({ "request_id": request_id(), "code": code, "message": message })),
    )
        .into_response()
}

/// The checks every call passes first: the key, an outage, throttling.
fn gate(state: &DashScopeState, headers: &HeaderMap) -> Option<Response> {
    let authorized = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        == Some(&format!("Bearer {DASHSCOPE_KEY}"));
    if !authorized {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "InvalidApiKey",
            "Invalid API-key provided.",
        ));
    }
    if state.switches.lock().unwrap().down {
        return Some(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "An internal error has occured, please try again later.",
        ));
    }
    if state.take(|switches| &mut switches.throttle_next) {
        return Some(throttled());
    }
    None
}

/// GUESS dashscope-429.
fn throttled() -> Response {
    error(
        StatusCode::TOO_MANY_REQUESTS,
        "Throttling.RateQuota",
        "Requests rate limit exceeded, please try again later.",
    )
}

async fn create(
    State(state): State<Arc<DashScopeState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    // T2V: the header is required (GUESS dashscope-missing-async for the
    // answer).
    if headers
        .get("x-dashscope-async")
        .and_then(|value| value.to_str().ok())
        != Some("enable")
    {
        return error(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            "current user api does not support synchronous calls",
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "The request body is not valid JSON.",
        );
    };
    let model = request["model"].as_str().unwrap_or_default().to_owned();
    if !MODELS.contains(&model.as_str()) {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "Model not exist.",
        );
    }
    let input = request["input"].clone();
    if !input["prompt"].is_string() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            "input.prompt is required",
        );
    }
    if input["prompt"]
        .as_str()
        .is_some_and(|prompt| prompt.contains("[fake:moderate-input]"))
    {
        return error(
            StatusCode::BAD_REQUEST,
            "DataInspectionFailed",
            "Input data may contain inappropriate content.",
        );
    }
    // The flat input vidgate planned, as its transcribed schema takes it.
    let mut flat = input.as_object().cloned().unwrap_or_default();
    flat.extend(
        request["parameters"]
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let problems = invalid_input(&model, &Value::Object(flat));
    if !problems.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            &problems.join("; "),
        );
    }
    let task_id = {
        let mut next = state.next_id.lock().unwrap();
        *next += 1;
        format!("0385dc79-5ff8-4d82-bcb6-{:012x}", *next)
    };
    let task = FakeTask {
        task_id: task_id.clone(),
        model,
        input,
        parameters: request["parameters"].clone(),
        status: TaskStatus::Pending,
        submitted_at: now_seconds(),
        scheduled_at: None,
        ended_at: None,
        create_headers: headers
            .iter()
            .filter(|(name, _)| *name != "authorization")
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect(),
    };
    state.tasks.lock().unwrap().push(task);
    tokio::spawn(drive(state.clone(), task_id.clone()));
    if state.take(|switches| &mut switches.lose_create_answers) {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    // T2V: the create answers the task's id and PENDING.
    Json(json!({ "request_id": request_id(),
        "output": { "task_id": task_id, "task_status": "PENDING" } }))
    .into_response()
}

/// What is wrong with a flat input for `model`, by the transcribed schema
/// of `fixtures/provider_schemas/dashscope/`.
fn invalid_input(model: &str, input: &Value) -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/provider_schemas/dashscope")
        .join(format!("{model}.json"));
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let fixture: Value = serde_json::from_str(&text).expect("a transcribed schema is JSON");
    vidgate_server::backend::hosted::schemas::InputSchema::standalone(fixture["schema"].clone())
        .validate(input)
        .iter()
        .map(|difference| format!("{}: {difference:?}", difference.field()))
        .collect()
}

async fn read(
    State(state): State<Arc<DashScopeState>>,
    Path(task_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    if state.query_refused() {
        return throttled();
    }
    match state.task(&task_id) {
        Some(task) => Json(state.task_answer(&task)).into_response(),
        // GUESS dashscope-unknown-task.
        None => Json(json!({ "request_id": request_id(),
            "output": { "task_id": task_id, "task_status": "UNKNOWN" } }))
        .into_response(),
    }
}

async fn list(
    State(state): State<Arc<DashScopeState>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    // SDK `list`: `start_time` as `YYYYMMDDhhmmss`, read here in UTC.
    let since = match query.get("start_time") {
        Some(text) => match parse_list_time(text) {
            Some(since) => since,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "InvalidParameter",
                    "start_time must be yyyyMMddHHmmss",
                );
            }
        },
        None => f64::MIN,
    };
    let page_no: usize = query
        .get("page_no")
        .and_then(|page| page.parse().ok())
        .unwrap_or(1)
        .max(1);
    let page_size: usize = query
        .get("page_size")
        .and_then(|size| size.parse().ok())
        .unwrap_or(10)
        .clamp(1, 100);
    let mut tasks: Vec<FakeTask> = state
        .tasks
        .lock()
        .unwrap()
        .iter()
        .filter(|task| {
            query
                .get("model_name")
                .is_none_or(|model| *model == task.model)
        })
        .filter(|task| {
            query
                .get("status")
                .is_none_or(|status| status == task.status.name())
        })
        .filter(|task| task.submitted_at >= since)
        .cloned()
        .collect();
    tasks.sort_by(|a, b| b.submitted_at.total_cmp(&a.submitted_at));
    let total = tasks.len();
    let data: Vec<Value> = tasks
        .iter()
        .skip((page_no - 1) * page_size)
        .take(page_size)
        .map(|task| {
            json!({ "task_id": task.task_id, "task_status": task.status.name(),
                "model_name": task.model, "submit_time": beijing_time(task.submitted_at) })
        })
        .collect();
    // GUESS dashscope-list-shape.
    let shape = state.switches.lock().unwrap().list_shape;
    let key = match shape {
        ListShape::Tasks | ListShape::TotalAboveTasks => "tasks",
        ListShape::Data => "data",
        ListShape::NotAList => "items",
    };
    let data = if shape == ListShape::TotalAboveTasks {
        Vec::new()
    } else {
        data
    };
    let mut answer = json!({ "request_id": request_id(), "total": total,
        "page_no": page_no, "page_size": page_size });
    answer[key] = json!(data);
    Json(answer).into_response()
}

fn parse_list_time(text: &str) -> Option<f64> {
    if text.len() != 14 || !text.chars().all(|character| character.is_ascii_digit()) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text[range].parse::<u32>().ok();
    let date = time::Date::from_calendar_date(
        number(0..4)? as i32,
        time::Month::try_from(number(4..6)? as u8).ok()?,
        number(6..8)? as u8,
    )
    .ok()?;
    let clock = time::Time::from_hms(
        number(8..10)? as u8,
        number(10..12)? as u8,
        number(12..14)? as u8,
    )
    .ok()?;
    Some(
        time::PrimitiveDateTime::new(date, clock)
            .assume_utc()
            .unix_timestamp() as f64,
    )
}

/// SDK `cancel`: "Cancel PENDING task"; a task in any other state is
/// refused (GUESS dashscope-cancel-refusal).
async fn cancel(
    State(state): State<Arc<DashScopeState>>,
    Path(task_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = gate(&state, &headers) {
        return refused;
    }
    let Some(task) = state.task(&task_id) else {
        return error(StatusCode::NOT_FOUND, "NotFound", "Task not found.");
    };
    if task.status == TaskStatus::Running {
        *state.cancels_of_running_tasks.lock().unwrap() += 1;
    }
    if task.status != TaskStatus::Pending {
        return error(
            StatusCode::BAD_REQUEST,
            "UnsupportedOperation",
            "Only tasks in PENDING status can be canceled.",
        );
    }
    state.update(&task_id, |task| {
        task.status = TaskStatus::Canceled;
        task.ended_at = Some(now_seconds());
    });
    Json(json!({ "request_id": request_id() })).into_response()
}

/// The output's URL: an OSS link that needs no key (T2V: "valid for 24
/// hours").
async fn output(State(state): State<Arc<DashScopeState>>, Path(task_id): Path<String>) -> Response {
    match state.outputs.lock().unwrap().get(&task_id).cloned() {
        Some(bytes) => ([("content-type", "video/mp4")], bytes).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A task's life: wait in the queue, start, run, finish.
async fn drive(state: Arc<DashScopeState>, task_id: String) {
    let Some(task) = state.task(&task_id) else {
        return;
    };
    if task.marker("never-start") {
        return;
    }
    let (queue_for, run_for) = {
        let switches = state.switches.lock().unwrap();
        (switches.queue_for, switches.run_for)
    };
    tokio::time::sleep(queue_for).await;
    let Some(started) = state.update(&task_id, |task| {
        if task.status == TaskStatus::Pending {
            task.status = TaskStatus::Running;
            task.scheduled_at = Some(now_seconds());
        }
    }) else {
        return;
    };
    if started.status != TaskStatus::Running {
        return;
    }
    let outcome = if started.marker("moderate") {
        TaskStatus::Failed {
            code: "DataInspectionFailed".into(),
            message: "Output data may contain inappropriate content.".into(),
        }
    } else if started.marker("fail") {
        TaskStatus::Failed {
            code: "InternalError".into(),
            message: "The model failed while generating.".into(),
        }
    } else {
        let mut flat = started.input.clone();
        if let (Some(fields), Some(parameters)) =
            (flat.as_object_mut(), started.parameters.as_object())
        {
            fields.extend(parameters.clone());
        }
        let mp4 = tokio::task::spawn_blocking(move || render(&flat))
            .await
            .unwrap();
        state.outputs.lock().unwrap().insert(task_id.clone(), mp4);
        TaskStatus::Succeeded
    };
    tokio::time::sleep(run_for).await;
    state.update(&task_id, |task| {
        if task.status == TaskStatus::Running {
            task.status = outcome;
            task.ended_at = Some(now_seconds());
        }
    });
}
