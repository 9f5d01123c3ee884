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
    VerifiedWebhook, WebhookError, WebhookRejection, classify_status, limited_body, shortened,
    unreadable,
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
    /// `BaseAsyncApi.list`). The list is not documented to show a task's
    /// input, so each listed task is read (`GET /tasks/{id}`), whose
    /// `output.orig_prompt` is the prompt it was sent (the official Java
    /// SDK's `VideoSynthesisOutput.origPrompt`; GUESS: the Python SDK and
    /// the pages in our sources do not show it). A task with another prompt
    /// is not ours; one with the prompt sent is matched, as Replicate's are
    /// by every sent field; one whose prompt the read does not show can be
    /// neither matched nor ruled out.
    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        let mut listed = Vec::new();
        for page_no in 1..=MAX_LIST_PAGES {
            let page = self.list_page(&target.0, since, page_no).await?;
            let tasks = listed_task_ids(&page, &target.0);
            let full_page = page_items(&page).len() >= LIST_PAGE_SIZE;
            listed.extend(tasks);
            if !full_page {
                break;
            }
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
            match sent_prompt_matches(input, &task) {
                Some(true) => found.matching.push(task_id),
                Some(false) => {}
                None => found.input_unknown.push(InputUnknownJob {
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

/// A list page's tasks (GUESS: `data`, as the console's task list shows
/// them; the list's answer is not shown in our sources beyond the SDK
/// handing it back whole).
fn page_items(page: &Value) -> Vec<&Value> {
    page["data"].as_array().into_iter().flatten().collect()
}

/// The ids of a list page's tasks of `model`: a task that names another
/// model is left out, one that names none is kept (the list was asked for
/// `model`).
fn listed_task_ids(page: &Value, model: &str) -> Vec<String> {
    page_items(page)
        .into_iter()
        .filter(|task| {
            task["model_name"]
                .as_str()
                .is_none_or(|named| named == model)
        })
        .filter_map(|task| task["task_id"].as_str().map(str::to_owned))
        .collect()
}

/// Whether a task read shows the prompt that was sent: `None` when the
/// read does not show it (or nothing was sent as a prompt).
fn sent_prompt_matches(sent: &Value, task: &Value) -> Option<bool> {
    let sent_prompt = sent["prompt"].as_str()?;
    let shown = task["output"]["orig_prompt"].as_str()?;
    Some(shown == sent_prompt)
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

    #[test]
    fn a_listed_task_is_ours_only_with_the_sent_prompt() {
        let sent = json!({ "prompt": "a kite", "duration": 5 });
        let read = |prompt: Option<&str>| json!({ "output": { "task_status": "PENDING", "orig_prompt": prompt } });
        assert_eq!(
            sent_prompt_matches(&sent, &read(Some("a kite"))),
            Some(true)
        );
        assert_eq!(
            sent_prompt_matches(&sent, &read(Some("a cat"))),
            Some(false)
        );
        assert_eq!(sent_prompt_matches(&sent, &read(None)), None);
        let page = json!({ "data": [
            { "task_id": "a", "model_name": "wan2.6-t2v" },
            { "task_id": "b", "model_name": "wan2.6-i2v" },
            { "task_id": "c" },
        ]});
        assert_eq!(listed_task_ids(&page, "wan2.6-t2v"), ["a", "c"]);
    }

    #[test]
    fn the_list_time_is_utc_digits() {
        assert_eq!(list_time(1_700_000_000), "20231114221320");
    }
}
