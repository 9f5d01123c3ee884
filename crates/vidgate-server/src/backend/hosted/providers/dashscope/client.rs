//! DashScope's asynchronous video synthesis (Alibaba Cloud Model Studio),
//! and nothing else: creating a task (`POST
//! {api}/services/aigc/video-generation/video-synthesis` with
//! `X-DashScope-Async: enable`), reading one (`GET {api}/tasks/{task_id}`),
//! listing the account's tasks to reconcile a create whose outcome is
//! unknown (`GET {api}/tasks`), and canceling a task that is still
//! `PENDING` (`POST {api}/tasks/{task_id}/cancel`).
//!
//! Sources, named once here and at each use below:
//! - SDK: the official Python SDK `dashscope` 2.0.2 from PyPI:
//!   `client/base_api.py` (`BaseAsyncApi.async_call`, `fetch`, `list`,
//!   `cancel`: the paths, the list's query and "Cancel PENDING task"),
//!   `api_entities/http_request.py` (`X-DashScope-Async: enable`, `Bearer`),
//!   `api_entities/api_request_factory.py` (the path
//!   `services/{task_group}/{task}/{function}`), `aigc/video_synthesis.py`
//!   (the input fields, `video-generation/video-synthesis`, which arguments
//!   go in `parameters`), `common/constants.py` (`TaskStatus`) and
//!   `common/env.py` (the region's base URLs).
//! - TASKS: Model Studio's "Asynchronous task management API"
//!   (https://www.alibabacloud.com/help/en/model-studio/manage-asynchronous-tasks):
//!   "20 QPS per Alibaba Cloud account", the task states, "cancel queued
//!   tasks", and completed tasks kept for 24 hours.
//! - T2V: Model Studio's "Wan - text-to-video API reference"
//!   (https://www.alibabacloud.com/help/en/model-studio/text-to-video-api-reference):
//!   the Singapore, Virginia and Beijing endpoints, `X-DashScope-Async`,
//!   "the task_id is valid for 24 hours. Do not create duplicate tasks".
//!
//! DashScope documents no callback for video synthesis and no idempotency
//! key: a create whose answer is lost is settled through the task list,
//! never by a second create.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use crate::backend::hosted::protocol::{
    BearerApi, CancelOutcome, FailureKind, InputUnknownJob, JobToCreate, ProviderError,
    ProviderFailure, ProviderJobState, ProviderProtocol, ProviderTarget, SubmittedSearch,
    VerifiedWebhook, WebhookError, WebhookRejection, classify_status, limited_body, same_value,
    shortened, unreadable,
};

/// DashScope's international (Singapore) API root, unless configured
/// otherwise: T2V's "Singapore" endpoint. Virginia is
/// `https://dashscope-us.aliyuncs.com/api/v1` and Beijing
/// `https://dashscope.aliyuncs.com/api/v1` (T2V; SDK `common/env.py`
/// defaults to Beijing). A key works in its own region only.
pub const DEFAULT_API_URL: &str = "https://dashscope-intl.aliyuncs.com/api/v1";

/// The path of a video synthesis create under the API root (SDK
/// `api_request_factory.py`: `services/` + task group `aigc` + task
/// `video-generation` + function `video-synthesis`).
const CREATE_PATH: &str = "services/aigc/video-generation/video-synthesis";

/// The fields of a flat input that DashScope takes in the body's
/// `parameters`, not its `input`: the arguments `VideoSynthesis.call` (SDK
/// `aigc/video_synthesis.py`) passes as keyword arguments, which the SDK
/// sends as `parameters` (`api_request_data.py`), and `audio`, which T2V
/// lists under `parameters`. Every other field goes in `input`.
pub const PARAMETER_FIELDS: &[&str] = &[
    "size",
    "resolution",
    "ratio",
    "duration",
    "seed",
    "prompt_extend",
    "watermark",
    "shot_type",
    "audio",
    "audio_setting",
    "enable_thinking",
];

/// How many tasks a list page asks for: the SDK's default `page_size`
/// (`base_api.py`); DashScope documents no larger page in our sources.
const LIST_PAGE_SIZE: usize = 10;
/// How many list pages a reconcile reads at most.
const MAX_LIST_PAGES: usize = 20;

/// The error code DashScope gives an input or output its content checks
/// refused (T2V's error codes; the SDK's `X-DashScope-DataInspection`
/// header names the same check).
const DATA_INSPECTION_FAILED: &str = "DataInspectionFailed";

/// A client of one DashScope account in one region.
pub struct DashScopeClient {
    api: BearerApi,
}

impl DashScopeClient {
    /// `api_url` is the region's API root with its `/api/v1`; `key` is the
    /// account's API key (kept here only, never logged).
    pub fn new(
        api_url: &str,
        key: String,
        request_timeout: Duration,
    ) -> Result<DashScopeClient, String> {
        Ok(DashScopeClient {
            api: BearerApi::new("DashScope", api_url, key, request_timeout)?,
        })
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<Value, ProviderError> {
        self.api.call(request, error_from_response).await
    }

    /// One page of the account's tasks of `model` created from `since`
    /// (unix seconds) on (SDK `BaseAsyncApi.list`).
    async fn list_page(
        &self,
        model: &str,
        since: i64,
        page_no: usize,
    ) -> Result<Value, ProviderError> {
        let mut url = self.api.url("tasks");
        url.query_pairs_mut()
            .append_pair("start_time", &list_time(since))
            .append_pair("model_name", model)
            .append_pair("page_no", &page_no.to_string())
            .append_pair("page_size", &LIST_PAGE_SIZE.to_string());
        self.call(self.api.http().get(url)).await
    }
}

#[async_trait]
impl ProviderProtocol for DashScopeClient {
    fn name(&self) -> &'static str {
        "dashscope"
    }

    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        // DashScope takes no deadline with a task (T2V lists none): the
        // start deadline is vidgate's (`start_deadline_is_ours`), and a
        // task that runs past the whole job's deadline is given up.
        let answer = self
            .call(
                self.api
                    .http()
                    .post(self.api.url(CREATE_PATH))
                    // T2V and SDK `http_request.py`: without it the create
                    // is refused ("current user api does not support
                    // synchronous calls").
                    .header("X-DashScope-Async", "enable")
                    .json(&create_body(&job.target.0, job.input)),
            )
            .await?;
        task_id(&answer)
    }

    async fn state(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        let answer = self
            .call(
                self.api
                    .http()
                    .get(self.api.url(&format!("tasks/{job_id}"))),
            )
            .await?;
        task_state(&answer)
    }

    /// TASKS and SDK `BaseAsyncApi.cancel` ("Cancel PENDING task"): only a
    /// task still queued can be canceled, so a success says that it ended
    /// before it ran; a task that is no longer queued is refused.
    async fn cancel(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        match self
            .call(
                self.api
                    .http()
                    .post(self.api.url(&format!("tasks/{job_id}/cancel"))),
            )
            .await
        {
            Ok(_) => Ok(CancelOutcome::Canceled { ran_seconds: None }),
            Err(ProviderError::NotFound { .. }) => Ok(CancelOutcome::NotFound),
            // A task that is no longer PENDING is refused with a 4xx.
            Err(ProviderError::Refused { .. }) => Ok(CancelOutcome::Refused),
            Err(error) => Err(error),
        }
    }

    /// DashScope documents no callback for video synthesis, so nothing that
    /// arrives claiming to be one is taken.
    async fn verify_webhook(
        &self,
        _headers: &HeaderMap,
        _body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        Err(WebhookError::Rejected(WebhookRejection::Malformed(
            "DashScope sends no callbacks for video synthesis".into(),
        )))
    }

    /// The account's tasks of the target's model created since the intent
    /// (the list's `model_name` and `start_time` filters, SDK
    /// `BaseAsyncApi.list`). The list shows no task's request, so each
    /// listed task is read (`GET /tasks/{id}`) and compared with what was
    /// sent by everything the read shows of it (`compare_task`): a task
    /// that differs in any of it is not ours, one that shows all of it the
    /// same is, and one that does not yet show all of it (a task's usage,
    /// with its duration and resolution, shows once it has run) can be
    /// neither matched nor ruled out, and is read again on the next round.
    ///
    /// A page that cannot be read as a list of tasks, a `total` above the
    /// tasks read, or more pages than `MAX_LIST_PAGES` proves nothing:
    /// `SubmittedSearch::cannot_tell`.
    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        let mut listed = Vec::new();
        let mut read_whole = false;
        let mut tasks_read = 0;
        let mut total = 0;
        for page_no in 1..=MAX_LIST_PAGES {
            let answer = self.list_page(&target.0, since, page_no).await?;
            let Some(page) = ListPage::read(&answer) else {
                tracing::warn!(
                    provider = "dashscope",
                    page_no,
                    "a page of the task list is not a list of tasks; it proves nothing"
                );
                return Ok(SubmittedSearch::cannot_tell());
            };
            tasks_read += page.tasks.len();
            total = total.max(page.total.unwrap_or(0));
            let full_page = page.tasks.len() >= LIST_PAGE_SIZE;
            listed.extend(listed_task_ids(&page.tasks, &target.0));
            if !full_page {
                read_whole = true;
                break;
            }
        }
        if !read_whole || total > tasks_read {
            tracing::warn!(
                provider = "dashscope",
                total,
                tasks_read,
                "the task list was not read whole; it proves nothing"
            );
            return Ok(SubmittedSearch::cannot_tell());
        }
        let mut found = SubmittedSearch::default();
        for task_id in listed {
            let task = match self
                .call(
                    self.api
                        .http()
                        .get(self.api.url(&format!("tasks/{task_id}"))),
                )
                .await
            {
                Ok(task) => task,
                // Gone since it was listed (its 24 hours ended): not a task
                // vidgate could still follow.
                Err(ProviderError::NotFound { .. }) => continue,
                Err(error) => return Err(error),
            };
            match compare_task(input, &task) {
                TaskComparison::Same => found.matching.push(task_id),
                TaskComparison::Different => {}
                TaskComparison::NotShown => found.input_unknown.push(InputUnknownJob {
                    job_id: task_id,
                    created_at: None,
                    ran_seconds: None,
                }),
            }
        }
        // Listed newest first (GUESS: the order is not documented); oldest
        // first is what reconcile takes.
        found.matching.reverse();
        found.input_unknown.reverse();
        Ok(found)
    }

    /// The list's `status` filter takes `PENDING` and `RUNNING` (SDK
    /// `BaseAsyncApi.list`), so it shows tasks that have not finished.
    fn lists_unfinished_jobs(&self) -> bool {
        true
    }

    /// DashScope takes no deadline with a task: a task still queued at
    /// the start deadline is canceled by vidgate.
    fn start_deadline_is_ours(&self) -> bool {
        true
    }

    /// DashScope documents no callback for video synthesis (T2V, SDK): its
    /// tasks are polled from the start, even where vidgate has a public URL.
    fn sends_webhooks(&self) -> bool {
        false
    }
}

/// The body of a create: the model, and the flat input split into
/// DashScope's `input` and `parameters` (`PARAMETER_FIELDS`).
pub fn create_body(model: &str, flat_input: &Value) -> Value {
    let mut input = Map::new();
    let mut parameters = Map::new();
    for (name, value) in flat_input.as_object().into_iter().flatten() {
        if PARAMETER_FIELDS.contains(&name.as_str()) {
            parameters.insert(name.clone(), value.clone());
        } else {
            input.insert(name.clone(), value.clone());
        }
    }
    json!({ "model": model, "input": input, "parameters": parameters })
}

/// A create's or a read's `output.task_id` (SDK `_get_task_id`).
fn task_id(answer: &Value) -> Result<String, ProviderError> {
    answer["output"]["task_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| unreadable("the task has no task_id"))
}

/// The state of a task as `GET /tasks/{task_id}` gives it (TASKS; SDK
/// `TaskStatus`).
pub fn task_state(answer: &Value) -> Result<ProviderJobState, ProviderError> {
    let output = &answer["output"];
    let status = output["task_status"]
        .as_str()
        .ok_or_else(|| unreadable("the task has no task_status"))?;
    Ok(match status {
        "PENDING" => ProviderJobState::Queued,
        "SUCCEEDED" => match output["video_url"].as_str().filter(|url| !url.is_empty()) {
            Some(url) => ProviderJobState::Succeeded {
                video_url: url.to_owned(),
            },
            None => ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Failed,
                message: "the task succeeded without a video_url".into(),
            }),
        },
        "FAILED" => {
            let code = output["code"].as_str().unwrap_or_default();
            let message = output["message"]
                .as_str()
                .map(shortened)
                .unwrap_or_else(|| "no reason given".into());
            ProviderJobState::Failed(ProviderFailure {
                kind: failure_kind(code),
                message: if code.is_empty() {
                    message
                } else {
                    format!("{code}: {message}")
                },
            })
        }
        "CANCELED" => ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::Canceled,
            message: "the task was canceled at the provider".into(),
        }),
        // TASKS: "UNKNOWN: the task does not exist or its status is
        // unknown", as after its 24 hours.
        "UNKNOWN" => {
            return Err(ProviderError::NotFound {
                message: "the task does not exist or its status is unknown".into(),
            });
        }
        // `RUNNING`, `SUSPENDED` (SDK `TaskStatus`, undocumented in TASKS)
        // and any status newer than this code: treated as started, so
        // nothing is canceled that may already be billed.
        _ => ProviderJobState::Running,
    })
}

/// DashScope names a content refusal by its code, `DataInspectionFailed`
/// (with `data_inspection_failed` and `IPInfringementSuspect` in T2V's
/// error codes for the same checks).
fn failure_kind(code: &str) -> FailureKind {
    if code == DATA_INSPECTION_FAILED
        || code.eq_ignore_ascii_case("data_inspection_failed")
        || code == "IPInfringementSuspect"
    {
        FailureKind::Moderated
    } else {
        FailureKind::Failed
    }
}

/// One page of the task list, as the SDK reads it: v2's `JobList`
/// (`v2/resources/_jobs.py`) takes a flat `tasks` list with `total`,
/// `page_no` and `page_size` (or the same under `output`, through
/// `flatten_envelope`); 1.x's `http_request.py` keeps a top-level `data`
/// list of tasks with a `task_id` ("Compatible with wan"). No first-party
/// page shows the answer, so every reading the SDK accepts is accepted.
struct ListPage<'a> {
    tasks: Vec<&'a Value>,
    /// How many tasks the list holds in all, where the page says.
    total: Option<usize>,
}

impl<'a> ListPage<'a> {
    /// `None` when the page is not a list of tasks: no list under any of
    /// the keys the SDK reads (unless its `total` says there are none), a
    /// list that is not one of task objects with a `task_id`, or a `total`
    /// that is not a count.
    fn read(answer: &'a Value) -> Option<ListPage<'a>> {
        let body = if answer["tasks"].is_null() && answer["output"].is_object() {
            &answer["output"]
        } else {
            answer
        };
        let total = match &body["total"] {
            Value::Null => None,
            count => Some(usize::try_from(count.as_u64()?).ok()?),
        };
        let list = [&body["tasks"], &body["data"]]
            .into_iter()
            .find(|list| !list.is_null());
        let tasks: Vec<&Value> = match list {
            Some(list) => list.as_array()?.iter().collect(),
            // A page that names no list but counts no task says there are
            // none.
            None if total == Some(0) => Vec::new(),
            None => return None,
        };
        let all_tasks = tasks
            .iter()
            .all(|task| task["task_id"].as_str().is_some_and(|id| !id.is_empty()));
        all_tasks.then_some(ListPage { tasks, total })
    }
}

/// The ids of a page's tasks of `model`: a task that names another model
/// is left out, one that names none is kept (the list was asked for
/// `model`).
fn listed_task_ids(tasks: &[&Value], model: &str) -> Vec<String> {
    tasks
        .iter()
        .filter(|task| {
            task["model_name"]
                .as_str()
                .is_none_or(|named| named == model)
        })
        .filter_map(|task| task["task_id"].as_str().map(str::to_owned))
        .collect()
}

/// What a task's read says of whether it is the request that was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskComparison {
    /// It shows the prompt, and everything else sent that a read can show,
    /// each the same.
    Same,
    /// Something it shows differs from what was sent.
    Different,
    /// Nothing it shows differs, but it does not (yet) show all of it.
    NotShown,
}

/// Compares a task's read with the flat input that was sent, by all that
/// a read shows of a request:
/// - the prompt, `output.orig_prompt` (the official Java SDK's
///   `VideoSynthesisOutput.origPrompt`; GUESS dashscope-orig-prompt: the
///   Python SDK does not name it);
/// - the duration, `usage.video_duration` (the Python SDK's
///   `VideoSynthesisUsage`);
/// - the size or ratio, `usage.video_ratio` (the same class; GUESS
///   dashscope-video-ratio: whether it is written `1280*720` as `size` is
///   or `16:9` as `ratio` is, so it is compared with whichever was sent in
///   the same form);
/// - the resolution, `usage.SR` (`720` for `720P`; GUESS dashscope-sr:
///   only third-party copies of the task read show it).
///
/// The model was compared by the list already. The seed and the media sent
/// (`img_url`, `reference_video_urls`, …) show in no read in our sources,
/// so they cannot be compared: two requests that differ only there cannot
/// be told apart, and reconcile treats more than one candidate as a
/// question it cannot settle. The usage shows once the task has run, so a
/// task still queued or running is `NotShown` until then.
fn compare_task(sent: &Value, task: &Value) -> TaskComparison {
    let usage = &task["usage"];
    // The size or ratio sent, and the usage's `video_ratio` where it is
    // written in the same form (`W*H` or `W:H`); one in the other form
    // cannot be compared.
    let sent_shape = ["size", "ratio"]
        .into_iter()
        .find_map(|field| sent[field].as_str());
    let shown_shape = usage["video_ratio"].as_str().map(|shown| {
        let same_form =
            sent_shape.is_none_or(|sent_shape| sent_shape.contains('*') == shown.contains('*'));
        same_form.then(|| Value::from(shown))
    });
    let sent_resolution = sent["resolution"]
        .as_str()
        .map(|resolution| Value::from(resolution.to_ascii_uppercase()));
    let comparisons = [
        (
            sent.get("prompt").cloned(),
            task["output"]["orig_prompt"]
                .as_str()
                .map(|shown| Some(Value::from(shown))),
        ),
        (
            sent.get("duration").cloned(),
            usage
                .get("video_duration")
                .filter(|shown| shown.is_number())
                .map(|shown| Some(shown.clone())),
        ),
        (
            sent_resolution,
            usage["SR"]
                .as_u64()
                .map(|lines| Some(Value::from(format!("{lines}P")))),
        ),
        (sent_shape.map(Value::from), shown_shape),
    ];
    let mut all_shown = sent.get("prompt").is_some();
    for (sent_value, shown) in comparisons {
        let Some(sent_value) = sent_value else {
            continue;
        };
        match shown {
            // Shown in a form that cannot be compared.
            Some(None) => {}
            Some(Some(shown)) => {
                if !same_value(&sent_value, &shown) {
                    return TaskComparison::Different;
                }
            }
            None => all_shown = false,
        }
    }
    if all_shown {
        TaskComparison::Same
    } else {
        TaskComparison::NotShown
    }
}

/// The list's time filter, `YYYYMMDDhhmmss` (SDK `list`: "for example:
/// 20230420000000"), in UTC. Which zone DashScope reads it in is not
/// documented; read as Beijing time, a UTC time is eight hours earlier,
/// so the list only shows more tasks, never fewer.
fn list_time(unix_seconds: i64) -> String {
    let time = time::OffsetDateTime::from_unix_timestamp(unix_seconds)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        time.year(),
        u8::from(time.month()),
        time.day(),
        time.hour(),
        time.minute(),
        time.second()
    )
}

/// Classifies an error answer; its body is `{request_id, code, message}`
/// (SDK `_handle_error_message`).
async fn error_from_response(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = limited_body(response, 64 * 1024).await.unwrap_or_default();
    classify_error(status, &headers, &body, SystemTime::now())
}

pub(in crate::backend::hosted) fn classify_error(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> ProviderError {
    let error: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let code = error["code"].as_str().unwrap_or_default();
    let message = match (code, error["message"].as_str()) {
        ("", Some(message)) => shortened(message),
        (code, Some(message)) => shortened(&format!("{code}: {message}")),
        _ => shortened(&String::from_utf8_lossy(body)),
    };
    // DashScope answers a throttled call with 429 and a `Throttling…` code
    // (Model Studio's error codes); a throttling code under another status
    // is read the same way.
    if code.starts_with("Throttling") && status != 429 {
        return ProviderError::RateLimited {
            retry_after: crate::backend::hosted::protocol::requested_wait(headers, now),
            message,
        };
    }
    classify_status(status, headers, message, failure_kind(code), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_splits_the_flat_input_into_input_and_parameters() {
        let flat = json!({ "prompt": "a kite", "img_url": "https://a/1.png",
            "resolution": "720P", "duration": 5, "audio": true, "seed": 7 });
        assert_eq!(
            create_body("wan2.6-i2v", &flat),
            json!({
                "model": "wan2.6-i2v",
                "input": { "prompt": "a kite", "img_url": "https://a/1.png" },
                "parameters": { "resolution": "720P", "duration": 5, "audio": true, "seed": 7 },
            })
        );
    }

    #[test]
    fn task_states_map_to_provider_states() {
        let state = |output: Value| task_state(&json!({ "output": output }));
        assert_eq!(
            state(json!({ "task_id": "t", "task_status": "PENDING" })).unwrap(),
            ProviderJobState::Queued
        );
        assert_eq!(
            state(json!({ "task_status": "RUNNING" })).unwrap(),
            ProviderJobState::Running
        );
        assert_eq!(
            state(json!({ "task_status": "SUCCEEDED", "video_url": "https://oss/v.mp4" })).unwrap(),
            ProviderJobState::Succeeded {
                video_url: "https://oss/v.mp4".into()
            }
        );
        assert!(matches!(
            state(
                json!({ "task_status": "FAILED", "code": "DataInspectionFailed",
                "message": "Input data may contain inappropriate content." })
            )
            .unwrap(),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Moderated,
                ..
            })
        ));
        assert!(matches!(
            state(json!({ "task_status": "FAILED", "code": "InternalError", "message": "x" }))
                .unwrap(),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Failed,
                ..
            })
        ));
        assert!(matches!(
            state(json!({ "task_status": "CANCELED" })).unwrap(),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Canceled,
                ..
            })
        ));
        assert!(matches!(
            state(json!({ "task_status": "UNKNOWN" })),
            Err(ProviderError::NotFound { .. })
        ));
        assert!(state(json!({})).is_err());
    }

    #[test]
    fn errors_are_classified_by_status_and_code() {
        let now = SystemTime::now();
        let classify = |status: u16, body: Value| {
            classify_error(status, &HeaderMap::new(), body.to_string().as_bytes(), now)
        };
        assert_eq!(
            classify(
                400,
                json!({ "code": "DataInspectionFailed", "message": "Input data may contain inappropriate content." })
            ),
            ProviderError::Refused {
                status: 400,
                kind: FailureKind::Moderated,
                message: "DataInspectionFailed: Input data may contain inappropriate content."
                    .into()
            }
        );
        assert!(matches!(
            classify(
                429,
                json!({ "code": "Throttling.RateQuota", "message": "Requests rate limit exceeded" })
            ),
            ProviderError::RateLimited { .. }
        ));
        assert!(matches!(
            classify(
                400,
                json!({ "code": "Throttling", "message": "Requests throttling triggered." })
            ),
            ProviderError::RateLimited { .. }
        ));
        assert!(matches!(
            classify(
                401,
                json!({ "code": "InvalidApiKey", "message": "Invalid API-key provided." })
            ),
            ProviderError::Unauthorized { .. }
        ));
        assert!(classify(503, json!({})).is_transient());
        assert!(matches!(
            classify(
                400,
                json!({ "code": "InvalidParameter", "message": "duration" })
            ),
            ProviderError::Refused {
                kind: FailureKind::Failed,
                ..
            }
        ));
    }

    /// Issue 51: a task is ours only when its read shows the prompt and
    /// every other field sent that a read shows, each the same.
    #[test]
    fn a_listed_task_is_ours_only_when_all_it_shows_of_the_request_is_the_same() {
        let sent = json!({ "prompt": "a kite", "duration": 5, "resolution": "720P",
            "ratio": "16:9", "seed": 7 });
        let read = |prompt: Option<&str>, usage: Value| {
            json!({ "output": { "task_status": "SUCCEEDED", "orig_prompt": prompt },
                "usage": usage })
        };
        let shown = json!({ "video_count": 1, "video_duration": 5, "SR": 720,
            "video_ratio": "16:9" });
        assert_eq!(
            compare_task(&sent, &read(Some("a kite"), shown.clone())),
            TaskComparison::Same
        );
        assert_eq!(
            compare_task(&sent, &read(Some("a cat"), shown.clone())),
            TaskComparison::Different
        );
        // The same prompt, sent by someone else as a 15 s 1080p task.
        let mut longer = shown.clone();
        longer["video_duration"] = json!(15);
        assert_eq!(
            compare_task(&sent, &read(Some("a kite"), longer)),
            TaskComparison::Different
        );
        let mut sharper = shown.clone();
        sharper["SR"] = json!(1080);
        assert_eq!(
            compare_task(&sent, &read(Some("a kite"), sharper)),
            TaskComparison::Different
        );
        let mut portrait = shown.clone();
        portrait["video_ratio"] = json!("9:16");
        assert_eq!(
            compare_task(&sent, &read(Some("a kite"), portrait)),
            TaskComparison::Different
        );
        // A size written as `W*H` cannot be compared with a ratio sent.
        let mut sized = shown.clone();
        sized["video_ratio"] = json!("1280*720");
        assert_eq!(
            compare_task(&sent, &read(Some("a kite"), sized)),
            TaskComparison::Same
        );
        // A task that has not run shows no usage: neither ours nor not.
        assert_eq!(
            compare_task(&sent, &read(Some("a kite"), Value::Null)),
            TaskComparison::NotShown
        );
        assert_eq!(
            compare_task(&sent, &read(None, shown)),
            TaskComparison::NotShown
        );
    }

    /// Issue 51: the list is read as the SDK reads it, flat `tasks` (v2
    /// `JobList`), the same under `output`, or `data` (1.x), and a page
    /// that is not a list of tasks is not read as an empty one.
    #[test]
    fn a_list_page_is_read_as_the_sdk_reads_it_or_not_at_all() {
        let task = |id: &str, model: &str| json!({ "task_id": id, "model_name": model });
        let tasks = json!([task("a", "wan2.6-t2v"), task("b", "wan2.6-i2v"), { "task_id": "c" }]);
        for answer in [
            json!({ "request_id": "r", "tasks": tasks, "total": 3, "page_no": 1, "page_size": 10 }),
            json!({ "request_id": "r", "output": { "tasks": tasks, "total": 3 } }),
            json!({ "request_id": "r", "data": tasks, "total": 3 }),
        ] {
            let page = ListPage::read(&answer).expect("a list of tasks");
            assert_eq!(page.total, Some(3));
            assert_eq!(listed_task_ids(&page.tasks, "wan2.6-t2v"), ["a", "c"]);
        }
        let empty = json!({ "request_id": "r", "total": 0, "page_no": 1, "page_size": 10 });
        assert!(ListPage::read(&empty).unwrap().tasks.is_empty());
        for unreadable in [
            json!({ "request_id": "r" }),
            json!({ "request_id": "r", "total": 2 }),
            json!({ "request_id": "r", "tasks": { "a": {} } }),
            json!({ "request_id": "r", "tasks": [{ "id": "a" }] }),
            json!({ "request_id": "r", "tasks": [], "total": "many" }),
        ] {
            assert!(ListPage::read(&unreadable).is_none(), "{unreadable}");
        }
    }

    #[test]
    fn the_list_time_is_utc_digits() {
        assert_eq!(list_time(1_700_000_000), "20231114221320");
    }
}
