//! Replicate's predictions API, and nothing else: creating a prediction of
//! an official model (`POST /v1/models/{owner}/{name}/predictions` with
//! `Cancel-After` as the job's whole lifetime), reading one, listing recent
//! ones to reconcile a create whose outcome is unknown, canceling one that
//! has not started, the account's webhook secret, and verifying its
//! Standard Webhooks signatures.
//! Which model runs what, and when to call which operation, is decided by
//! the shared remote-job machinery.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use url::Url;

use crate::backend::hosted::protocol::{
    BearerApi, CachedKeys, CancelOutcome, FailureKind, InputUnknownJob, JobToCreate, ProviderError,
    ProviderFailure, ProviderJobState, ProviderProtocol, ProviderTarget, SubmittedSearch,
    VerifiedWebhook, WEBHOOK_TOLERANCE_SECONDS, WebhookError, WebhookRejection, classify_status,
    iso8601, listed_input_is_known, require_signature_headers, sent_fields_match, shortened,
    unix_seconds, unreadable,
};

/// Replicate's API root, unless configured otherwise (tests use a fake).
pub const DEFAULT_API_URL: &str = "https://api.replicate.com/v1";

/// How many pages of the prediction list a reconcile reads at most: 100
/// predictions a page, newest first, from the intent's time on.
const MAX_LIST_PAGES: usize = 20;

/// A client of one Replicate account.
pub struct ReplicateClient {
    api: BearerApi,
    /// The account's webhook signing secret, read from the API.
    signing_secret: CachedKeys<String>,
}

impl ReplicateClient {
    /// `api_url` is the API root with its `/v1`; `token` is the account's
    /// API token (kept here only, never logged).
    pub fn new(
        api_url: &str,
        token: String,
        request_timeout: Duration,
    ) -> Result<ReplicateClient, String> {
        Ok(ReplicateClient {
            api: BearerApi::new("Replicate", api_url, token, request_timeout)?,
            signing_secret: CachedKeys::default(),
        })
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<Value, ProviderError> {
        self.api.call(request, error_from_response).await
    }

    /// The signing secret of the account's webhooks
    /// (`GET /v1/webhooks/default/secret`).
    pub async fn webhook_secret(&self) -> Result<String, ProviderError> {
        let answer = self
            .call(self.api.http().get(self.api.url("webhooks/default/secret")))
            .await?;
        answer["key"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| unreadable("the webhook secret answer has no key"))
    }
}

#[async_trait]
impl ProviderProtocol for ReplicateClient {
    fn name(&self) -> &'static str {
        "replicate"
    }

    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        let (path, body) = create_request(&job.target.0, job.input, job.webhook_url);
        let prediction = self
            .call(
                self.api
                    .http()
                    .post(self.api.url(&path))
                    // Replicate's OpenAPI: "the maximum time the prediction
                    // can run before it is automatically canceled. The
                    // lifetime is measured from when the prediction is
                    // created". So the whole job's deadline goes here; the
                    // start deadline is vidgate's to keep.
                    .header("Cancel-After", cancel_after(job.deadlines.lifetime))
                    .json(&body),
            )
            .await?;
        prediction_id(&prediction)
    }

    async fn state(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        let prediction = self
            .call(
                self.api
                    .http()
                    .get(self.api.url(&format!("predictions/{job_id}"))),
            )
            .await?;
        prediction_state(&prediction)
    }

    async fn cancel(
        &self,
        _target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        let prediction = match self
            .call(
                self.api
                    .http()
                    .post(self.api.url(&format!("predictions/{job_id}/cancel"))),
            )
            .await
        {
            Ok(prediction) => prediction,
            Err(ProviderError::NotFound { .. }) => return Ok(CancelOutcome::NotFound),
            Err(error) => return Err(error),
        };
        Ok(cancel_outcome(&prediction))
    }

    async fn verify_webhook(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        require_signature_headers(
            headers,
            &["webhook-id", "webhook-timestamp", "webhook-signature"],
        )?;
        let secret = self
            .signing_secret
            .get(|| self.webhook_secret())
            .await
            .map_err(WebhookError::KeysUnavailable)?;
        let now = crate::store::now_millis() / 1000;
        let prediction = verify_webhook(headers, body, &secret, now)?;
        let job_id = prediction_id(&prediction)
            .map_err(|_| WebhookRejection::InvalidBody("the prediction has no id".into()))?;
        // Standard Webhooks keeps `webhook-id` across the retries of one
        // delivery; verification found it present.
        let delivery_id = headers
            .get("webhook-id")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok(VerifiedWebhook {
            job_id,
            delivery_id,
            input: Some(prediction["input"].clone()).filter(Value::is_object),
        })
    }

    /// Replicate lists "all predictions created by the user or organization",
    /// whatever their status, newest first, filtered by `created_after`.
    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        let model = target.0.split(':').next().unwrap_or_default();
        let mut page = self.api.url("predictions");
        page.query_pairs_mut()
            .append_pair("created_after", &iso8601(since));
        let mut found = SubmittedSearch::default();
        for _ in 0..MAX_LIST_PAGES {
            let answer = self.call(self.api.http().get(page.clone())).await?;
            let on_page = search_page(&answer, model, input);
            found.matching.extend(on_page.matching);
            found.input_unknown.extend(on_page.input_unknown);
            match answer["next"]
                .as_str()
                .and_then(|next| Url::parse(next).ok())
            {
                // The next page must stay on the API's host: the token goes
                // with it.
                Some(next) if next.origin() == self.api.api_url().origin() => page = next,
                _ => break,
            }
        }
        // Each page is newest first, and so is the list: oldest first now.
        found.matching.reverse();
        found.input_unknown.reverse();
        Ok(found)
    }

    fn lists_unfinished_jobs(&self) -> bool {
        true
    }

    fn start_deadline_is_ours(&self) -> bool {
        true
    }

    fn output_headers(&self, video_url: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let Ok(url) = Url::parse(video_url) else {
            return headers;
        };
        let delivery = url.host_str().is_some_and(|host| {
            host == "replicate.delivery" || host.ends_with(".replicate.delivery")
        });
        if delivery || url.origin() == self.api.api_url().origin() {
            headers.insert(AUTHORIZATION, self.api.authorization());
        }
        headers
    }
}

/// The path and body of a create: an official model's endpoint for
/// `owner/name`, or the versioned endpoint for `owner/name:version`.
fn create_request(model: &str, input: &Value, webhook_url: Option<&str>) -> (String, Value) {
    let (path, mut body) = match model.split_once(':') {
        Some((_, version)) => (
            "predictions".to_owned(),
            json!({ "version": version, "input": input }),
        ),
        None => (
            format!("models/{model}/predictions"),
            json!({ "input": input }),
        ),
    };
    if let Some(webhook_url) = webhook_url {
        body["webhook"] = json!(webhook_url);
        // `start` tells us the prediction left the queue (and can no longer
        // be canceled for free); `completed` brings the result.
        body["webhook_events_filter"] = json!(["start", "completed"]);
    }
    (path, body)
}

/// `Cancel-After` in Go's duration syntax, at least Replicate's minimum of 5 s.
fn cancel_after(deadline: Duration) -> String {
    format!("{}s", deadline.as_secs().max(5))
}

fn prediction_id(prediction: &Value) -> Result<String, ProviderError> {
    prediction["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| unreadable("the prediction has no id"))
}

/// The state of a prediction object (as `GET`, a list or a webhook gives
/// it).
pub fn prediction_state(prediction: &Value) -> Result<ProviderJobState, ProviderError> {
    let status = prediction["status"]
        .as_str()
        .ok_or_else(|| unreadable("the prediction has no status"))?;
    let error_text = || match &prediction["error"] {
        Value::String(text) => shortened(text),
        Value::Null => "no reason given".to_owned(),
        other => shortened(&other.to_string()),
    };
    Ok(match status {
        "starting" => ProviderJobState::Queued,
        "succeeded" => match first_output(&prediction["output"]) {
            Some(url) => ProviderJobState::Succeeded {
                video_url: url.to_owned(),
            },
            None if prediction["data_removed"] == true => {
                ProviderJobState::Failed(ProviderFailure {
                    kind: FailureKind::Failed,
                    message: "the provider removed the output before it was copied".into(),
                })
            }
            None => ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Failed,
                message: "the prediction succeeded without a video output".into(),
            }),
        },
        "failed" => {
            let message = error_text();
            ProviderJobState::Failed(ProviderFailure {
                kind: failure_kind(&message),
                message,
            })
        }
        "canceled" => ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::Canceled,
            message: "the prediction was canceled at the provider".into(),
        }),
        "aborted" => ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::TimedOut,
            message: "the prediction did not start before its deadline".into(),
        }),
        // `processing`, and any status newer than this code: treated as
        // started, so nothing is canceled that may already be billed.
        _ => ProviderJobState::Running,
    })
}

/// Replicate reports a failure as free text; safety refusals say so in it.
fn failure_kind(message: &str) -> FailureKind {
    let lower = message.to_lowercase();
    if ["nsfw", "safety", "flagged", "moderat", "sensitive"]
        .iter()
        .any(|word| lower.contains(word))
    {
        FailureKind::Moderated
    } else {
        FailureKind::Failed
    }
}

/// A video model's output: one URL, or a list whose first item is the
/// video.
fn first_output(output: &Value) -> Option<&str> {
    match output {
        Value::String(text) => Some(text),
        Value::Array(items) => items.first().and_then(Value::as_str),
        _ => None,
    }
}

/// The predictions on a list page created for `model`, newest first as
/// listed: those whose listed input has every field of `input`, and those
/// whose input is gone. Replicate removes a prediction's input and output
/// "after an hour" (`data_removed: true`, its OpenAPI document), so a list
/// read that late cannot tell whether such a prediction was sent `input`.
fn search_page(page: &Value, model: &str, input: &Value) -> SubmittedSearch {
    let mut found = SubmittedSearch::default();
    let predictions = page["results"].as_array().into_iter().flatten();
    for prediction in predictions.filter(|prediction| prediction["model"] == model) {
        let Some(id) = prediction["id"].as_str() else {
            continue;
        };
        if prediction["data_removed"] == true || !listed_input_is_known(&prediction["input"]) {
            found.input_unknown.push(InputUnknownJob {
                job_id: id.to_owned(),
                created_at: prediction["created_at"].as_str().and_then(unix_seconds),
                ran_seconds: prediction["metrics"]["predict_time"].as_f64(),
            });
        } else if sent_fields_match(input, &prediction["input"]) {
            found.matching.push(id.to_owned());
        }
    }
    found
}

/// What a cancel's answer, the prediction, says happened. `canceled` and
/// `aborted` mean it ended, even when it started in the moment before:
/// Replicate's recorded cancel of a prediction canceled right after its
/// creation came back `canceled` with a `started_at` and 0.13 s of
/// `predict_time`, the seconds it bills.
fn cancel_outcome(prediction: &Value) -> CancelOutcome {
    match prediction["status"].as_str() {
        Some("canceled" | "aborted") => CancelOutcome::Canceled {
            ran_seconds: prediction["started_at"].as_str().map(|_| {
                prediction["metrics"]["predict_time"]
                    .as_f64()
                    .unwrap_or(0.0)
            }),
        },
        Some("succeeded" | "failed") => CancelOutcome::Refused,
        // Still starting or processing: the cancel is under way.
        _ => CancelOutcome::Requested,
    }
}

/// Classifies an error answer; its body is problem+json
/// (`{title, detail, status}`), or `{detail}` on a 429.
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
    let problem: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let message = problem["detail"]
        .as_str()
        .or_else(|| problem["title"].as_str())
        .map(shortened)
        .unwrap_or_else(|| shortened(&String::from_utf8_lossy(body)));
    let mut error = classify_status(
        status,
        headers,
        message,
        failure_kind_of_body(&problem),
        now,
    );
    // Replicate documents its 429 by its body alone; that the answer also
    // carries `ratelimit-reset` was never recorded (a guess). Without a
    // wait in the headers, the body's is taken, or the 30 s it documents.
    if let ProviderError::RateLimited {
        retry_after: retry_after @ None,
        ..
    } = &mut error
    {
        *retry_after = Some(
            problem["detail"]
                .as_str()
                .and_then(reset_in_body)
                .unwrap_or(DOCUMENTED_RATE_LIMIT_RESET),
        );
    }
    error
}

/// The wait Replicate's documented 429 body gives: "Request was throttled.
/// Your rate limit resets in ~30s." (its rate-limits page).
const DOCUMENTED_RATE_LIMIT_RESET: Duration = Duration::from_secs(30);

/// The seconds of "resets in ~Ns" in a 429's `detail`, if it says so.
fn reset_in_body(detail: &str) -> Option<Duration> {
    let after = detail.split_once("resets in ~")?.1;
    let digits = after
        .find(|character: char| !character.is_ascii_digit())
        .unwrap_or(after.len());
    if !after[digits..].starts_with('s') {
        return None;
    }
    after[..digits].parse().ok().map(Duration::from_secs)
}

fn failure_kind_of_body(problem: &Value) -> FailureKind {
    failure_kind(&problem.to_string())
}

/// Verifies a webhook Replicate signed with the account's secret
/// (Standard Webhooks: `webhook-id`, `webhook-timestamp` within five
/// minutes of `now`, and a `v1,` HMAC-SHA256 in `webhook-signature`), and
/// returns its prediction.
pub fn verify_webhook(
    headers: &HeaderMap,
    body: &[u8],
    secret: &str,
    now: i64,
) -> Result<Value, WebhookRejection> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| WebhookRejection::Malformed(name.to_owned()))
    };
    let message_id = header("webhook-id")?;
    let timestamp: i64 = header("webhook-timestamp")?
        .trim()
        .parse()
        .map_err(|_| WebhookRejection::Malformed("webhook-timestamp".into()))?;
    let signatures = header("webhook-signature")?;
    if (now - timestamp).abs() > WEBHOOK_TOLERANCE_SECONDS {
        return Err(WebhookRejection::Stale);
    }
    let text =
        std::str::from_utf8(body).map_err(|_| WebhookRejection::InvalidBody("not UTF-8".into()))?;
    let expected = crate::webhook_senders::sign(secret, message_id, timestamp, text)
        .map_err(|_| WebhookRejection::Malformed("the configured secret".into()))?;
    let expected_mac = STANDARD
        .decode(expected.trim_start_matches("v1,"))
        .unwrap_or_default();
    let matched = signatures
        .split_whitespace()
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|signature| STANDARD.decode(signature).ok())
        .any(|mac| bool::from(mac.ct_eq(&expected_mac)));
    if !matched {
        return Err(WebhookRejection::BadSignature);
    }
    serde_json::from_slice(body).map_err(|error| WebhookRejection::InvalidBody(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    /// A recorded interaction of Replicate's own client with the real API
    /// (see tests/fixtures/replicate/README.md).
    fn recorded(name: &str, index: usize) -> (u16, HeaderMap, Value) {
        let text = match name {
            "models-predictions-create" => {
                include_str!(
                    "../../../../../tests/fixtures/replicate/models-predictions-create.json"
                )
            }
            "models-predictions-create-blocking" => include_str!(
                "../../../../../tests/fixtures/replicate/models-predictions-create-blocking.json"
            ),
            "predictions-get" => {
                include_str!("../../../../../tests/fixtures/replicate/predictions-get.json")
            }
            "predictions-cancel" => {
                include_str!("../../../../../tests/fixtures/replicate/predictions-cancel.json")
            }
            "run__invalid-token" => {
                include_str!("../../../../../tests/fixtures/replicate/run__invalid-token.json")
            }
            other => panic!("no fixture {other}"),
        };
        let cassette: Value = serde_json::from_str(text).unwrap();
        let response = &cassette["interactions"][index]["response"];
        let mut headers = HeaderMap::new();
        for (name, value) in response["headers"].as_object().unwrap() {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value.as_str().unwrap()).unwrap(),
            );
        }
        (
            response["status"].as_u64().unwrap() as u16,
            headers,
            Value::String(response["body"].as_str().unwrap().to_owned()),
        )
    }

    fn recorded_json(name: &str, index: usize) -> Value {
        let (_, _, body) = recorded(name, index);
        serde_json::from_str(body.as_str().unwrap()).unwrap()
    }

    #[test]
    fn a_recorded_create_gives_the_prediction_id_and_a_running_state() {
        let created = recorded_json("models-predictions-create", 0);
        assert_eq!(
            prediction_id(&created).unwrap(),
            "heat2o3bzn3ahtr6bjfftvbaci"
        );
        assert_eq!(
            prediction_state(&created).unwrap(),
            ProviderJobState::Queued
        );
        let (status, headers, body) = recorded("models-predictions-create-blocking", 0);
        assert_eq!(status, 201);
        assert_eq!(headers["preference-applied"], "wait=10");
        let blocking: Value = serde_json::from_str(body.as_str().unwrap()).unwrap();
        assert_eq!(
            prediction_state(&blocking).unwrap(),
            ProviderJobState::Running
        );
    }

    #[test]
    fn a_recorded_create_then_get_moves_from_queued_to_succeeded_with_the_first_output() {
        assert_eq!(
            prediction_state(&recorded_json("predictions-cancel", 1)).unwrap(),
            ProviderJobState::Queued
        );
        let ProviderJobState::Succeeded { video_url } =
            prediction_state(&recorded_json("predictions-get", 1)).unwrap()
        else {
            panic!("the recorded prediction succeeded");
        };
        assert_eq!(
            video_url,
            "https://replicate.delivery/pbxt/9inf36wjsEWuQ6XTf84iezPftv9QZdePfGySnU5tUai3BOrWE/out-0.png"
        );
    }

    #[test]
    fn a_recorded_cancel_is_a_canceled_failure() {
        let canceled = recorded_json("predictions-cancel", 2);
        assert_eq!(canceled["status"], "canceled");
        assert!(matches!(
            prediction_state(&canceled).unwrap(),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Canceled,
                ..
            })
        ));
    }

    #[test]
    fn a_recorded_invalid_token_is_unauthorized_with_its_detail() {
        let (status, headers, body) = recorded("run__invalid-token", 0);
        assert_eq!(headers["content-type"], "application/problem+json");
        let error = classify_error(
            status,
            &headers,
            body.as_str().unwrap().as_bytes(),
            SystemTime::now(),
        );
        assert_eq!(
            error,
            ProviderError::Unauthorized {
                message: "You did not pass a valid authentication token".into()
            }
        );
    }

    #[test]
    fn a_throttled_create_waits_for_the_rate_limit_reset() {
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit-remaining", HeaderValue::from_static("0"));
        headers.insert("ratelimit-reset", HeaderValue::from_static("30"));
        let error = classify_error(
            429,
            &headers,
            br#"{"detail":"Request was throttled. Your rate limit resets in ~30s."}"#,
            SystemTime::now(),
        );
        assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
        assert!(error.is_transient());
    }

    /// Issue 37: Replicate documents its 429 by the body alone ("resets in
    /// ~30s"); with no header the wait is the body's, else the 30 s it
    /// documents, not a default of vidgate's.
    #[test]
    fn a_throttled_call_without_headers_waits_as_the_body_says() {
        let no_headers = HeaderMap::new();
        let wait_of =
            |body: &[u8]| classify_error(429, &no_headers, body, SystemTime::now()).retry_after();
        assert_eq!(
            wait_of(br#"{"detail":"Request was throttled. Your rate limit resets in ~30s."}"#),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            wait_of(br#"{"detail":"Request was throttled. Your rate limit resets in ~7s.","status":429}"#),
            Some(Duration::from_secs(7))
        );
        for unclear in [
            &br#"{"detail":"Request was throttled."}"#[..],
            br#"{"detail":"Your rate limit resets in ~soon."}"#,
            b"Too Many Requests",
        ] {
            assert_eq!(wait_of(unclear), Some(Duration::from_secs(30)));
        }
    }

    #[test]
    fn final_statuses_map_to_failures_of_their_kind() {
        let state = |prediction: Value| prediction_state(&prediction).unwrap();
        assert_eq!(
            state(json!({ "status": "aborted" })),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::TimedOut,
                message: "the prediction did not start before its deadline".into()
            })
        );
        assert!(matches!(
            state(json!({ "status": "failed", "error": "NSFW content detected" })),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Moderated,
                ..
            })
        ));
        assert!(matches!(
            state(json!({ "status": "failed", "error": "CUDA out of memory" })),
            ProviderJobState::Failed(ProviderFailure {
                kind: FailureKind::Failed,
                ..
            })
        ));
        assert!(matches!(
            state(json!({ "status": "succeeded", "output": null, "data_removed": true })),
            ProviderJobState::Failed(_)
        ));
        assert_eq!(
            state(json!({ "status": "something_new" })),
            ProviderJobState::Running
        );
        assert!(prediction_state(&json!({})).is_err());
    }

    #[test]
    fn creates_use_the_official_model_path_or_a_version() {
        let input = json!({ "prompt": "a kite" });
        let (path, body) = create_request("kwaivgi/kling-v3-video", &input, Some("https://h/x"));
        assert_eq!(path, "models/kwaivgi/kling-v3-video/predictions");
        assert_eq!(
            body,
            json!({ "input": input, "webhook": "https://h/x",
                    "webhook_events_filter": ["start", "completed"] })
        );
        let (path, body) = create_request("owner/name:abc123", &input, None);
        assert_eq!(path, "predictions");
        assert_eq!(body, json!({ "version": "abc123", "input": input }));
        assert_eq!(cancel_after(Duration::from_secs(1)), "5s");
        assert_eq!(cancel_after(Duration::from_secs(1800)), "1800s");
    }

    #[test]
    fn reconcile_matches_the_model_and_every_sent_field_newest_first() {
        let input = json!({ "prompt": "a kite", "duration": 5 });
        // Replicate lists the input with the model's defaults added.
        let listed = json!({ "prompt": "a kite", "duration": 5, "enable_prompt_expansion": true });
        let page = json!({ "next": null, "results": [
            { "id": "newer", "model": "a/b", "input": listed },
            { "id": "other_input", "model": "a/b", "input": { "prompt": "a kite" } },
            { "id": "oldest", "model": "a/b", "input": input },
            { "id": "other_model", "model": "a/c", "input": input },
        ]});
        assert_eq!(
            search_page(&page, "a/b", &input).matching,
            ["newer", "oldest"]
        );
        assert!(search_page(&page, "a/b", &input).input_unknown.is_empty());
        assert_eq!(
            search_page(&page, "x/y", &input),
            SubmittedSearch::default()
        );
    }

    #[test]
    fn a_prediction_whose_data_was_removed_is_neither_matched_nor_ruled_out() {
        let input = json!({ "prompt": "a kite", "duration": 5 });
        // As Replicate lists a prediction an hour after it ran: its input
        // and output removed, its times and metrics kept.
        let page = json!({ "next": null, "results": [
            { "id": "removed", "model": "a/b", "input": {}, "output": null, "data_removed": true,
              "created_at": "2026-11-23T12:00:01.5Z", "metrics": { "predict_time": 41.5 } },
            { "id": "no_input", "model": "a/b", "created_at": "2026-11-23T12:00:02Z" },
            { "id": "other_model", "model": "a/c", "input": {}, "data_removed": true },
        ]});
        let found = search_page(&page, "a/b", &input);
        assert!(found.matching.is_empty());
        assert_eq!(
            found.input_unknown,
            [
                InputUnknownJob {
                    job_id: "removed".into(),
                    created_at: unix_seconds("2026-11-23T12:00:01Z"),
                    ran_seconds: Some(41.5),
                },
                InputUnknownJob {
                    job_id: "no_input".into(),
                    created_at: unix_seconds("2026-11-23T12:00:02Z"),
                    ran_seconds: None,
                },
            ]
        );
    }

    #[test]
    fn the_recorded_cancel_ended_the_prediction_and_says_how_long_it_ran() {
        // The cassette's prediction was canceled right after its creation
        // and had started 47 ms in: it ended, and ran 0.128 s.
        let canceled = recorded_json("predictions-cancel", 2);
        assert_eq!(canceled["status"], "canceled");
        assert!(canceled["started_at"].is_string());
        assert_eq!(
            cancel_outcome(&canceled),
            CancelOutcome::Canceled {
                ran_seconds: Some(0.128148)
            }
        );
        assert_eq!(
            cancel_outcome(&json!({ "status": "aborted" })),
            CancelOutcome::Canceled { ran_seconds: None }
        );
        assert_eq!(
            cancel_outcome(&json!({ "status": "succeeded" })),
            CancelOutcome::Refused
        );
        assert_eq!(
            cancel_outcome(&json!({ "status": "processing" })),
            CancelOutcome::Requested
        );
    }

    #[test]
    fn verifies_the_standard_webhooks_test_vector_and_refuses_forgeries() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let headers = |signature: &str, timestamp: &str| {
            let mut map = HeaderMap::new();
            map.insert(
                "webhook-id",
                HeaderValue::from_static("msg_p5jXN8AQM9LWM0D4loKWxJek"),
            );
            map.insert(
                "webhook-timestamp",
                HeaderValue::from_str(timestamp).unwrap(),
            );
            map.insert(
                "webhook-signature",
                HeaderValue::from_str(signature).unwrap(),
            );
            map
        };
        let good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let now = 1_614_265_330;
        assert_eq!(
            verify_webhook(&headers(good, "1614265330"), body, secret, now).unwrap(),
            json!({ "test": 2432232314u64 })
        );
        // Another signature beside the right one still verifies.
        assert!(
            verify_webhook(
                &headers(&format!("v1,Zm9v {good}"), "1614265330"),
                body,
                secret,
                now
            )
            .is_ok()
        );
        assert_eq!(
            verify_webhook(&headers(good, "1614265330"), b"{\"test\": 1}", secret, now),
            Err(WebhookRejection::BadSignature)
        );
        assert_eq!(
            verify_webhook(&headers(good, "1614265330"), body, secret, now + 301),
            Err(WebhookRejection::Stale)
        );
        assert!(matches!(
            verify_webhook(&HeaderMap::new(), body, secret, now),
            Err(WebhookRejection::Malformed(_))
        ));
    }
}
