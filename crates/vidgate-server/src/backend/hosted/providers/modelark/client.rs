//! BytePlus ModelArk's content-generation tasks API, and nothing else:
//! creating a task (`POST {api}/contents/generations/tasks`), reading one
//! (`GET …/tasks/{id}`), listing the account's tasks to reconcile a create
//! whose outcome is unknown (`GET …/tasks`), canceling a queued one
//! (`DELETE …/tasks/{id}`), and taking its unsigned callback as a hint.
//!
//! Sources, each named where it is used: the official SDK
//! `byteplus-python-sdk-v2` 3.0.63 (`byteplussdkarkruntime/resources/
//! content_generation/tasks.py` for the four calls and their parameters,
//! `types/content_generation/*.py` for the task object,
//! `_base_client.py` for the error body and which statuses it retries,
//! `_constants.py` for the API root), and BytePlus's Video Generation API
//! page, https://docs.byteplus.com/en/docs/ModelArk/1520757 (the limit of
//! 120 queued tasks, read through a stored copy), whose statuses and
//! defaults are also quoted by third-party copies of it.
//!
//! ModelArk takes no idempotency key. A create whose answer is lost is
//! found again in the task list by its `safety_identifier`, which the
//! create sets to a digest of the target and the input sent, and which the
//! SDK's task object returns (`ContentGenerationTask.safety_identifier`):
//! the list shows neither a task's prompt nor its media, so it is the one
//! field that ties a listed task to what was sent.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};
use sha2::Digest;

use crate::backend::hosted::protocol::{
    BearerApi, CancelOutcome, FailureKind, JobToCreate, ProviderError, ProviderFailure,
    ProviderJobState, ProviderProtocol, ProviderTarget, SubmittedSearch, VerifiedWebhook,
    WebhookError, WebhookRejection, classify_status, shortened, unreadable,
};

/// ModelArk's API root in the ap-southeast-1 region, the SDK's `BASE_URL`
/// (`_constants.py`), unless configured otherwise (tests use a fake).
pub const DEFAULT_API_URL: &str = "https://ark.ap-southeast.bytepluses.com/api/v3";

/// The tasks a list page asks for, and the most pages a reconcile reads.
/// The SDK passes `page_num` and `page_size` through without a bound; the
/// page size is a GUESS within what the documentation's examples use.
const LIST_PAGE_SIZE: usize = 100;
const MAX_LIST_PAGES: usize = 20;

/// `execution_expires_after`'s bounds, in seconds: a task not finished this
/// long after its creation ends as `expired`. The SDK sends the number
/// through; the range is the documentation page's, as its copies quote it
/// (default 172800) — the bounds are a GUESS where the copies differ.
const EXPIRES_AFTER_MIN_SECONDS: u64 = 3600;
const EXPIRES_AFTER_MAX_SECONDS: u64 = 259_200;

/// The input fields vidgate's backends file names that become items of
/// the task's `content` list, with their item type and `role` (the SDK's
/// `CreateTaskContent*Param`; the roles are the documentation page's).
/// Every other input field is a top-level field of the create's body.
const CONTENT_FIELDS: [(&str, &str, &str); 5] = [
    ("first_frame", "image_url", "first_frame"),
    ("last_frame", "image_url", "last_frame"),
    ("reference_images", "image_url", "reference_image"),
    ("reference_videos", "video_url", "reference_video"),
    ("reference_audios", "audio_url", "reference_audio"),
];

/// A client of one ModelArk account's API key.
pub struct ModelArkClient {
    api: BearerApi,
}

impl ModelArkClient {
    /// `api_url` is the API root with its `/api/v3`; `api_key` is the
    /// account's API key (kept here only, never logged).
    pub fn new(
        api_url: &str,
        api_key: String,
        request_timeout: Duration,
    ) -> Result<ModelArkClient, String> {
        Ok(ModelArkClient {
            api: BearerApi::new("ModelArk", api_url, api_key, request_timeout)?,
        })
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<Value, ProviderError> {
        self.api.call(request, error_from_response).await
    }
}

#[async_trait]
impl ProviderProtocol for ModelArkClient {
    fn name(&self) -> &'static str {
        "modelark"
    }

    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        let body = create_body(
            &job.target.0,
            job.input,
            job.webhook_url,
            job.deadlines.lifetime,
        )
        .map_err(|reason| ProviderError::Refused {
            status: 400,
            kind: FailureKind::Failed,
            message: reason,
        })?;
        let answer = self
            .call(
                self.api
                    .http()
                    .post(self.api.url("contents/generations/tasks"))
                    .json(&body),
            )
            .await?;
        task_id(&answer)
    }

    async fn state(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        let task = self
            .call(
                self.api.http().get(
                    self.api
                        .url(&format!("contents/generations/tasks/{job_id}")),
                ),
            )
            .await?;
        task_state(&task)
    }

    /// ModelArk's `DELETE` cancels a queued task and refuses a running one
    /// ("only tasks in the queued state can be canceled", the documentation
    /// page); its answer (the SDK discards it) does not say which happened,
    /// so the task's state is read to confirm (`CancelOutcome::Requested`).
    async fn cancel(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        match self
            .call(
                self.api.http().delete(
                    self.api
                        .url(&format!("contents/generations/tasks/{job_id}")),
                ),
            )
            .await
        {
            Ok(_) => Ok(CancelOutcome::Requested),
            Err(ProviderError::NotFound { .. }) => Ok(CancelOutcome::NotFound),
            Err(ProviderError::Refused { .. }) => Ok(CancelOutcome::Refused),
            Err(error) => Err(error),
        }
    }

    /// The same `DELETE` removes a finished task's record (the SDK's
    /// `Tasks.delete` is one call for both; docs/upstreams.md), so a task
    /// gone after it may have finished, billed, between the read and the
    /// cancel.
    fn cancel_deletes_finished_jobs(&self) -> bool {
        true
    }

    /// ModelArk documents no signature on its callbacks: the body is taken
    /// for the task id it names only, as a hint to read the task with our
    /// own key. The URL it came to carries the generation's token, so a
    /// callback reaches only the generation it was registered for; but
    /// because nothing proves the body, it never proves the task of a
    /// submit whose answer was lost: it is given an empty listed input,
    /// which matches no input sent, and reconcile's list read decides.
    async fn verify_webhook(
        &self,
        _headers: &HeaderMap,
        body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        let task: Value = serde_json::from_slice(body)
            .map_err(|error| WebhookRejection::InvalidBody(error.to_string()))?;
        let job_id = task_id(&task)
            .map_err(|_| WebhookRejection::InvalidBody("the task has no id".into()))?;
        // One delivery per status a task reached: a retry of the same
        // callback is a duplicate, a later status a new hint.
        let delivery_id = format!(
            "{job_id}:{}:{}",
            task["status"].as_str().unwrap_or_default(),
            task["updated_at"].as_i64().unwrap_or_default()
        );
        Ok(VerifiedWebhook {
            job_id,
            delivery_id,
            input: Some(Value::Object(Map::new())),
        })
    }

    /// Reads the account's task list (`GET …/tasks?page_num=&page_size=`,
    /// the SDK's `Tasks.list`), every status, for tasks created at or after
    /// `since` whose `safety_identifier` is the digest the submit sent.
    /// The order of the list is not documented (GUESS: newest first), so
    /// every page up to `MAX_LIST_PAGES` is read until one comes back short.
    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        let wanted = submit_identifier(&target.0, input);
        let mut found: Vec<(i64, String)> = Vec::new();
        for page_num in 1..=MAX_LIST_PAGES {
            let mut page = self.api.url("contents/generations/tasks");
            page.query_pairs_mut()
                .append_pair("page_num", &page_num.to_string())
                .append_pair("page_size", &LIST_PAGE_SIZE.to_string());
            let answer = self.call(self.api.http().get(page)).await?;
            let items = answer["items"].as_array().cloned().unwrap_or_default();
            for task in &items {
                let created_at = task["created_at"].as_i64().unwrap_or(i64::MAX);
                if created_at >= since
                    && task["safety_identifier"].as_str() == Some(wanted.as_str())
                    && let Some(id) = task["id"].as_str()
                {
                    found.push((created_at, id.to_owned()));
                }
            }
            if items.len() < LIST_PAGE_SIZE {
                break;
            }
        }
        found.sort();
        Ok(SubmittedSearch {
            matching: found.into_iter().map(|(_, id)| id).collect(),
            // Every task vidgate creates carries its identifier, and the
            // list keeps it as long as the task: no listed task is one
            // whose input cannot be compared.
            input_unknown: Vec::new(),
            list_incomplete: false,
        })
    }

    /// The list shows tasks in every status (its `filter.status` takes
    /// `queued` and `running`, the SDK's example).
    fn lists_unfinished_jobs(&self) -> bool {
        true
    }

    /// `execution_expires_after` bounds the whole task, from its creation,
    /// and is at least an hour: a task still queued at vidgate's start
    /// deadline is canceled by vidgate, for free while it is queued.
    fn start_deadline_is_ours(&self) -> bool {
        true
    }
}

/// The `safety_identifier` of a create: a digest of the target and the
/// input, so that the task list tells a task of this submit from others.
/// BytePlus describes the field as an identifier of the end user for its
/// abuse checks; vidgate's digest names no one (GUESS: any string of up to
/// 64 characters is taken; this one has 40).
pub fn submit_identifier(target: &str, input: &Value) -> String {
    let mut digest = sha2::Sha256::new();
    digest.update(target.as_bytes());
    digest.update([0]);
    digest.update(input.to_string().as_bytes());
    let bytes = digest.finalize();
    let hex: String = bytes[..18]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("vg-{hex}")
}

/// The body of a create: `model`, the `content` list (the prompt first,
/// then each media item with its role), the other input fields at the top
/// level, the callback, the task's expiry, and the identifier that finds
/// it again.
pub fn create_body(
    target: &str,
    input: &Value,
    callback_url: Option<&str>,
    lifetime: Duration,
) -> Result<Value, String> {
    let fields = input
        .as_object()
        .ok_or_else(|| "the input is not an object".to_owned())?;
    let mut content = Vec::new();
    if let Some(prompt) = fields.get("prompt") {
        content.push(json!({ "type": "text", "text": prompt }));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(target));
    for (name, value) in fields {
        if name == "prompt" {
            continue;
        }
        match CONTENT_FIELDS.iter().find(|(field, _, _)| field == name) {
            Some((_, kind, role)) => {
                let urls = match value {
                    Value::Array(items) => items.clone(),
                    single => vec![single.clone()],
                };
                for url in urls {
                    let url = url
                        .as_str()
                        .ok_or_else(|| format!("{name}: a URL is required"))?;
                    let mut item = Map::new();
                    item.insert("type".into(), json!(kind));
                    item.insert((*kind).into(), json!({ "url": url }));
                    item.insert("role".into(), json!(role));
                    content.push(Value::Object(item));
                }
            }
            None => {
                body.insert(name.clone(), value.clone());
            }
        }
    }
    body.insert("content".into(), Value::Array(content));
    if let Some(callback_url) = callback_url {
        body.insert("callback_url".into(), json!(callback_url));
    }
    body.insert(
        "execution_expires_after".into(),
        json!(
            lifetime
                .as_secs()
                .clamp(EXPIRES_AFTER_MIN_SECONDS, EXPIRES_AFTER_MAX_SECONDS)
        ),
    );
    body.insert(
        "safety_identifier".into(),
        json!(submit_identifier(target, input)),
    );
    Ok(Value::Object(body))
}

fn task_id(task: &Value) -> Result<String, ProviderError> {
    task["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| unreadable("the task has no id"))
}

/// The state of a task object (as `GET`, the list or a callback gives it):
/// `queued`, `running`, `succeeded` with `content.video_url`, `failed`
/// with `error.code` and `error.message`, `cancelled`, `expired` (the
/// SDK's `ContentGenerationTask`; `expired` from the documentation page).
pub fn task_state(task: &Value) -> Result<ProviderJobState, ProviderError> {
    let status = task["status"]
        .as_str()
        .ok_or_else(|| unreadable("the task has no status"))?;
    Ok(match status {
        "queued" => ProviderJobState::Queued,
        "succeeded" => match task["content"]["video_url"].as_str() {
            Some(url) if !url.is_empty() => ProviderJobState::Succeeded {
                video_url: url.to_owned(),
            },
            _ => ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Failed,
                message: "the task succeeded without a video".into(),
            }),
        },
        "failed" => {
            let code = task["error"]["code"].as_str().unwrap_or_default();
            let message = task["error"]["message"]
                .as_str()
                .map(shortened)
                .unwrap_or_else(|| "no reason given".to_owned());
            ProviderJobState::Failed(ProviderFailure {
                kind: failure_kind(code, &message),
                message,
            })
        }
        "cancelled" => ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::Canceled,
            message: "the task was canceled at the provider".into(),
        }),
        "expired" => ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::TimedOut,
            message: "the task did not finish before its expiry".into(),
        }),
        // `running`, and any status newer than this code: treated as
        // started, so nothing is canceled that may already be billed.
        _ => ProviderJobState::Running,
    })
}

/// ModelArk names a safety refusal by its error code
/// (`InputTextSensitiveContentDetected`, `OutputVideoSensitiveContentDetected`
/// and their kin, ModelArk's error-code page), and its messages say
/// "sensitive information"; the words of the other providers' refusals are
/// taken too.
fn failure_kind(code: &str, message: &str) -> FailureKind {
    let text = format!("{code} {message}").to_lowercase();
    if ["sensitive", "nsfw", "safety", "moderat", "risk"]
        .iter()
        .any(|word| text.contains(word))
    {
        FailureKind::Moderated
    } else {
        FailureKind::Failed
    }
}

/// Classifies an error answer. Its body is `{"error": {"code", "message",
/// "param", "type"}}` (the SDK's `_make_status_error` reads `error`).
async fn error_from_response(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = crate::backend::hosted::protocol::limited_body(response, 64 * 1024)
        .await
        .unwrap_or_default();
    classify_error(status, &headers, &body, SystemTime::now())
}

pub(in crate::backend::hosted) fn classify_error(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> ProviderError {
    let answer: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let error = answer.get("error").unwrap_or(&answer);
    let code = error["code"].as_str().unwrap_or_default();
    let message = error["message"]
        .as_str()
        .map(|message| shortened(&format!("{code}: {message}")))
        .unwrap_or_else(|| shortened(&String::from_utf8_lossy(body)));
    let mut classified = classify_status(
        status,
        headers,
        message.clone(),
        failure_kind(code, &message),
        now,
    );
    // A 429 without a wait in its headers pauses the budget's class for a
    // while of the SDK's own: it reads no header of ModelArk's for a wait,
    // and retries after 0.5 s doubling to at most 8 s (`_base_client.py`'s
    // `_calculate_retry_timeout`, `_constants.py`); the budget slows the
    // class further on each 429.
    if let ProviderError::RateLimited {
        retry_after: retry_after @ None,
        ..
    } = &mut classified
    {
        *retry_after = Some(UNDOCUMENTED_RATE_LIMIT_WAIT);
    }
    classified
}

/// How long a 429 without a stated wait pauses the budget's class: the
/// SDK's third wait (0.5 s, 1 s, 2 s).
const UNDOCUMENTED_RATE_LIMIT_WAIT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flat_input_becomes_a_content_list_and_top_level_fields() {
        let input = json!({"prompt": "a fox", "first_frame": "https://a/1.png",
            "reference_videos": ["https://a/v.mp4"], "ratio": "16:9", "duration": 5});
        let body = create_body(
            "dreamina-seedance-2-0-260128",
            &input,
            Some("https://us/hook/x"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(body["model"], "dreamina-seedance-2-0-260128");
        assert_eq!(body["content"][0], json!({"type": "text", "text": "a fox"}));
        assert_eq!(
            body["content"][1],
            json!({"type": "image_url", "image_url": {"url": "https://a/1.png"}, "role": "first_frame"})
        );
        assert_eq!(
            body["content"][2],
            json!({"type": "video_url", "video_url": {"url": "https://a/v.mp4"}, "role": "reference_video"})
        );
        assert_eq!(body["ratio"], "16:9");
        assert_eq!(body["duration"], 5);
        assert_eq!(body["callback_url"], "https://us/hook/x");
        // An hour at least, whatever vidgate's own deadline.
        assert_eq!(body["execution_expires_after"], 3600);
        let identifier = body["safety_identifier"].as_str().unwrap();
        assert_eq!(identifier.len(), 39);
        assert_eq!(
            identifier,
            submit_identifier("dreamina-seedance-2-0-260128", &input)
        );
        assert_ne!(
            identifier,
            submit_identifier("dreamina-seedance-2-0-260128", &json!({"prompt": "a cat"}))
        );
    }

    #[test]
    fn task_statuses_and_failures_are_read_as_the_sdk_names_them() {
        assert_eq!(
            task_state(&json!({"id": "cgt-1", "status": "queued"})).unwrap(),
            ProviderJobState::Queued
        );
        assert_eq!(
            task_state(&json!({"id": "cgt-1", "status": "running"})).unwrap(),
            ProviderJobState::Running
        );
        assert_eq!(
            task_state(&json!({"status": "succeeded", "content": {"video_url": "https://v"}}))
                .unwrap(),
            ProviderJobState::Succeeded {
                video_url: "https://v".into()
            }
        );
        let moderated = task_state(&json!({"status": "failed", "error": {
            "code": "OutputVideoSensitiveContentDetected",
            "message": "The request failed because the output video may contain sensitive information."}}))
        .unwrap();
        assert!(matches!(
            moderated,
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Moderated,
                ..
            })
        ));
        let failed = task_state(
            &json!({"status": "failed", "error": {"code": "InternalServiceError", "message": "boom"}}),
        )
        .unwrap();
        assert!(matches!(
            failed,
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Failed,
                ..
            })
        ));
        for (status, kind) in [
            ("cancelled", FailureKind::Canceled),
            ("expired", FailureKind::TimedOut),
        ] {
            assert!(matches!(
                task_state(&json!({"status": status})).unwrap(),
                ProviderJobState::Failed(ProviderFailure { kind: found, .. }) if found == kind
            ));
        }
    }

    #[test]
    fn errors_are_classified_by_status_with_the_code_in_the_message() {
        let now = SystemTime::UNIX_EPOCH;
        let body = |code: &str| {
            json!({"error": {"code": code, "message": "why", "type": "BadRequest"}}).to_string()
        };
        let refused = classify_error(
            400,
            &HeaderMap::new(),
            body("InputTextSensitiveContentDetected").as_bytes(),
            now,
        );
        assert!(matches!(
            refused,
            ProviderError::Refused {
                status: 400,
                kind: FailureKind::Moderated,
                ..
            }
        ));
        let limited = classify_error(
            429,
            &HeaderMap::new(),
            body("RateLimitExceeded").as_bytes(),
            now,
        );
        assert_eq!(limited.retry_after(), Some(UNDOCUMENTED_RATE_LIMIT_WAIT));
        assert!(classify_error(500, &HeaderMap::new(), b"", now).is_transient());
    }
}
