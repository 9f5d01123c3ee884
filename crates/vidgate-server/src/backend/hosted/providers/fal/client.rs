//! fal's queue API, and nothing else: submitting a request to an endpoint
//! (`POST {queue}/{owner}/{app}[/{path}]`, with `X-Fal-Request-Timeout` as
//! the deadline to start and `fal_webhook` for the result), reading its
//! status and result, canceling it while it waits in the queue, listing an
//! endpoint's requests to reconcile a submit whose outcome is unknown, and
//! verifying fal's Ed25519-signed webhooks against its JWKS.
//!
//! fal names requests by endpoint id (`owner/app/path`), but status, result
//! and cancel live under `owner/app` only, as fal's own clients build them.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_lc_rs::signature::{ED25519, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::Value;
use sha2::{Digest, Sha256};
use url::Url;

use crate::backend::hosted::protocol::{
    CachedKeys, CancelOutcome, FailureKind, InputUnknownJob, JobToCreate, MAX_ANSWER_BYTES,
    ProviderError, ProviderFailure, ProviderJobState, ProviderProtocol, ProviderTarget,
    SubmittedSearch, VerifiedWebhook, WEBHOOK_TOLERANCE_SECONDS, WebhookError, WebhookRejection,
    classify_status, credential_client, iso8601, json_body, limited_body, listed_input_is_known,
    require_signature_headers, send_traced, sent_fields_match, shortened, transport_error,
    unix_seconds, unreadable,
};

/// The headers that turn fal's model fallbacks off for one request, sent
/// with `true` on every submit. By default fal may reroute a request that
/// failed five retries "to equivalent alternative endpoints" (fal's
/// *Reliability* page, "Model fallbacks"): the customer who paid for one
/// model could get another's video. fal spells the switch two ways: its
/// *Platform Headers* page `x-app-fal-disable-fallback`, its *Reliability*
/// page `x-fal-disable-fallbacks` (with no value given); fal's own clients
/// (fal-js, fal_client) set neither. Both are sent, as a header fal does
/// not know is ignored, so whichever fal reads takes effect.
pub const DISABLE_FALLBACK_HEADERS: [&str; 2] =
    ["x-app-fal-disable-fallback", "x-fal-disable-fallbacks"];

/// fal's queue, unless configured otherwise (tests use a fake).
pub const DEFAULT_QUEUE_URL: &str = "https://queue.fal.run";
/// fal's platform API (request listing), unless configured otherwise.
pub const DEFAULT_API_URL: &str = "https://api.fal.ai";
/// Where fal publishes the keys its webhooks are signed with.
pub const DEFAULT_JWKS_URL: &str = "https://rest.alpha.fal.ai/.well-known/jwks.json";

/// The headers of fal's webhook signature.
const SIGNATURE_HEADERS: [&str; 4] = [
    "x-fal-webhook-request-id",
    "x-fal-webhook-user-id",
    "x-fal-webhook-timestamp",
    "x-fal-webhook-signature",
];

/// How many pages of an endpoint's request list a reconcile reads at most.
const MAX_LIST_PAGES: usize = 20;

/// A client of one fal account.
pub struct FalClient {
    http: reqwest::Client,
    queue_url: Url,
    api_url: Url,
    key: String,
    request_timeout: Duration,
    jwks_url: Url,
    /// fal's webhook keys, read from `jwks_url`.
    webhook_keys: CachedKeys<Vec<[u8; 32]>>,
    /// The operator's fal user id, when the backends file gives it
    /// (`webhook_user_id`): webhooks signed for another account are refused.
    webhook_user_id: Option<String>,
}

impl FalClient {
    /// `key` is the account's `FAL_KEY` (kept here only, never logged);
    /// `jwks_url` is where fal publishes its webhook keys.
    pub fn new(
        queue_url: &str,
        api_url: &str,
        jwks_url: &str,
        key: String,
        request_timeout: Duration,
    ) -> Result<FalClient, String> {
        let parse = |text: &str, what: &str| {
            Url::parse(&format!("{}/", text.trim_end_matches('/')))
                .map_err(|error| format!("the fal {what} URL is not valid: {error}"))
        };
        let http = credential_client()?;
        Ok(FalClient {
            http,
            queue_url: parse(queue_url, "queue")?,
            api_url: parse(api_url, "API")?,
            key,
            request_timeout,
            jwks_url: Url::parse(jwks_url)
                .map_err(|error| format!("the fal JWKS URL is not valid: {error}"))?,
            webhook_keys: CachedKeys::default(),
            webhook_user_id: None,
        })
    }

    /// Refuses webhooks that fal signed for another account than
    /// `user_id`'s, when one is given.
    pub fn with_webhook_user_id(mut self, user_id: Option<String>) -> FalClient {
        self.webhook_user_id = user_id;
        self
    }

    /// fal's published webhook keys. Read without our key: the JWKS is
    /// public, and our key goes to fal's API only.
    async fn fetch_jwks(&self) -> Result<Vec<[u8; 32]>, ProviderError> {
        let response = self
            .http
            .get(self.jwks_url.clone())
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(transport_error)?;
        if !response.status().is_success() {
            return Err(error_from_response(response).await);
        }
        let document = limited_body(response, 64 * 1024).await?;
        parse_jwks(&document).map_err(|message| unreadable(&message))
    }

    fn authorization(&self) -> HeaderValue {
        let mut value = HeaderValue::from_str(&format!("Key {}", self.key))
            .unwrap_or_else(|_| HeaderValue::from_static("Key invalid"));
        value.set_sensitive(true);
        value
    }

    fn request_url(&self, endpoint_id: &str, request_id: &str, tail: &str) -> Url {
        self.queue_url
            .join(&format!(
                "{}/requests/{request_id}{tail}",
                app_id(endpoint_id)
            ))
            .expect("paths built here are relative URLs")
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(u16, Value), ProviderError> {
        let request = request
            .header(AUTHORIZATION, self.authorization())
            .timeout(self.request_timeout);
        let response = send_traced("fal", request).await.map_err(transport_error)?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            return Err(error_from_response(response).await);
        }
        Ok((status, json_body(response, MAX_ANSWER_BYTES).await?))
    }
}

#[async_trait]
impl ProviderProtocol for FalClient {
    fn name(&self) -> &'static str {
        "fal"
    }

    async fn submit(&self, job: &JobToCreate<'_>) -> Result<String, ProviderError> {
        let mut url =
            self.queue_url
                .join(&job.target.0)
                .map_err(|error| ProviderError::Refused {
                    status: 0,
                    kind: FailureKind::Failed,
                    message: format!("the endpoint id is not a path: {error}"),
                })?;
        if let Some(webhook_url) = job.webhook_url {
            url.query_pairs_mut()
                .append_pair("fal_webhook", webhook_url);
        }
        let (_, queued) = self
            .send(
                self.http
                    .post(url)
                    // fal's documented meaning: a deadline to *start* ("once a
                    // runner begins processing, the timeout stops"), so the
                    // start deadline goes here and fal ends a request that
                    // never started, for free.
                    .header(
                        "X-Fal-Request-Timeout",
                        job.deadlines.start.as_secs().max(1),
                    )
                    .header(DISABLE_FALLBACK_HEADERS[0], "true")
                    .header(DISABLE_FALLBACK_HEADERS[1], "true")
                    .json(job.input),
            )
            .await?;
        queued["request_id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| unreadable("the queue answer has no request_id"))
    }

    async fn state(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<ProviderJobState, ProviderError> {
        let (_, status) = self
            .send(
                self.http
                    .get(self.request_url(&target.0, job_id, "/status?logs=0")),
            )
            .await?;
        match queue_state(&status)? {
            QueueState::InQueue => Ok(ProviderJobState::Queued),
            QueueState::InProgress => Ok(ProviderJobState::Running),
            QueueState::CompletedWithError(failure) => Ok(ProviderJobState::Failed(failure)),
            QueueState::Completed => {
                match self
                    .send(self.http.get(self.request_url(&target.0, job_id, "")))
                    .await
                {
                    Ok((_, result)) => Ok(result_state(&result)),
                    // The result call answers a failed request with its
                    // error: the job failed, for good.
                    Err(ProviderError::Refused { kind, message, .. }) => {
                        Ok(ProviderJobState::Failed(ProviderFailure { kind, message }))
                    }
                    Err(error) => Err(error),
                }
            }
        }
    }

    async fn cancel(
        &self,
        target: &ProviderTarget,
        job_id: &str,
    ) -> Result<CancelOutcome, ProviderError> {
        match self
            .send(
                self.http
                    .put(self.request_url(&target.0, job_id, "/cancel")),
            )
            .await
        {
            Ok((_, answer)) => Ok(cancel_outcome(&answer)),
            Err(ProviderError::NotFound { .. }) => Ok(CancelOutcome::NotFound),
            // 400 "already completed" and the like: it is no longer queued.
            Err(ProviderError::Refused { .. }) => Ok(CancelOutcome::Refused),
            Err(error) => Err(error),
        }
    }

    async fn verify_webhook(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<VerifiedWebhook, WebhookError> {
        require_signature_headers(headers, &SIGNATURE_HEADERS)?;
        let keys = self
            .webhook_keys
            .get(|| self.fetch_jwks())
            .await
            .map_err(WebhookError::KeysUnavailable)?;
        let now = crate::store::now_millis() / 1000;
        let verified = verify_webhook(headers, body, &keys, now)?;
        // fal signs every customer's webhooks with the same keys: only the
        // user id it signed says whose request it is.
        if self
            .webhook_user_id
            .as_deref()
            .is_some_and(|ours| ours != verified.user_id)
        {
            return Err(WebhookRejection::OtherAccount.into());
        }
        // fal sends one webhook per request: its retries carry the same
        // request id.
        Ok(VerifiedWebhook {
            delivery_id: verified.request_id.clone(),
            job_id: verified.request_id,
            // fal's webhook carries the result, not the input.
            input: None,
        })
    }

    /// fal's request list is of finished requests ("sorted by end time",
    /// with a status filter of `success`, `error` and `user_error`): a
    /// request our lost submit created shows here only once it ended.
    async fn find_submitted(
        &self,
        target: &ProviderTarget,
        input: &Value,
        since: i64,
    ) -> Result<SubmittedSearch, ProviderError> {
        let mut cursor: Option<String> = None;
        let mut found = Vec::new();
        let mut input_unknown = Vec::new();
        for _ in 0..MAX_LIST_PAGES {
            let mut url = self
                .api_url
                .join("v1/models/requests/by-endpoint")
                .expect("a relative URL");
            {
                let mut query = url.query_pairs_mut();
                query
                    .append_pair("endpoint_id", &target.0)
                    .append_pair("start", &iso8601(since))
                    .append_pair("limit", "100")
                    .append_pair("expand", "payloads");
                if let Some(cursor) = &cursor {
                    query.append_pair("cursor", cursor);
                }
            }
            let (_, page) = self.send(self.http.get(url)).await?;
            found.extend(matching_requests(&page, &target.0, input, since));
            input_unknown.extend(input_unknown_requests(&page, &target.0, since));
            match (page["has_more"].as_bool(), page["next_cursor"].as_str()) {
                (Some(true), Some(next)) => cursor = Some(next.to_owned()),
                _ => break,
            }
        }
        found.sort();
        Ok(SubmittedSearch {
            matching: found.into_iter().map(|(_, id)| id).collect(),
            input_unknown,
            list_incomplete: false,
        })
    }

    fn lists_unfinished_jobs(&self) -> bool {
        false
    }
}

/// Whether an error answer came from fal's ingress rather than its
/// servers, by the test fal's own Python client applies before it sends a
/// submit again (`fal_client/client.py`, `_is_ingress_error`, version
/// 1.0.3): a 502, 503 or 504 without the `x-fal-request-id` header that
/// fal's servers set ("this is clearly returned from our server"), whose
/// body names nginx. Such a submit never reached the queue.
fn is_ingress_error(status: u16, headers: &HeaderMap, body: &[u8]) -> bool {
    matches!(status, 502..=504)
        && !headers.contains_key("x-fal-request-id")
        && String::from_utf8_lossy(body).contains("nginx")
}

/// `owner/app` of an endpoint id `owner/app[/path]`.
pub fn app_id(endpoint_id: &str) -> String {
    endpoint_id
        .trim_matches('/')
        .splitn(3, '/')
        .take(2)
        .collect::<Vec<_>>()
        .join("/")
}

/// A `QueueStatus` as fal's status call (and submit) answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum QueueState {
    InQueue,
    InProgress,
    Completed,
    /// fal reports a failed request as `COMPLETED` with `error` and
    /// `error_type`.
    CompletedWithError(ProviderFailure),
}

fn queue_state(status: &Value) -> Result<QueueState, ProviderError> {
    match status["status"].as_str() {
        Some("IN_QUEUE") => Ok(QueueState::InQueue),
        Some("IN_PROGRESS") => Ok(QueueState::InProgress),
        Some("COMPLETED") => {
            let error = &status["error"];
            let error_type = status["error_type"].as_str();
            if error.is_null() && error_type.is_none() {
                return Ok(QueueState::Completed);
            }
            let message = error
                .as_str()
                .map(shortened)
                .unwrap_or_else(|| error_type.unwrap_or("no reason given").to_owned());
            Ok(QueueState::CompletedWithError(ProviderFailure {
                kind: error_type.map_or(FailureKind::Failed, kind_of_error_type),
                message,
            }))
        }
        _ => Err(unreadable("the queue status is not one fal documents")),
    }
}

/// The state of a finished request from its result (the model's output).
fn result_state(result: &Value) -> ProviderJobState {
    match result["video"]["url"].as_str() {
        Some(url) if !url.is_empty() => ProviderJobState::Succeeded {
            video_url: url.to_owned(),
        },
        _ => ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::Failed,
            message: "the request finished without a video output".into(),
        }),
    }
}

/// fal's documented cancel answers: `{"status": "OK" | "CANCELLATION_REQUESTED"
/// | "ALREADY_COMPLETED" | "NOT_FOUND"}`, or `{"success": bool}` in the
/// per-endpoint OpenAPI documents.
///
/// fal says that a queued request is removed and a running one gets a
/// cancellation signal that its app may act on, but not which answer each
/// gets; so no answer is taken as proof that the request ended, and the
/// request's state tells (`provider::cancel_if_queued`).
fn cancel_outcome(answer: &Value) -> CancelOutcome {
    match (answer["status"].as_str(), answer["success"].as_bool()) {
        (Some("OK" | "CANCELLATION_REQUESTED"), _) | (None, Some(true)) => CancelOutcome::Requested,
        (Some("NOT_FOUND"), _) => CancelOutcome::NotFound,
        _ => CancelOutcome::Refused,
    }
}

/// What a request error's `error_type` (or a model error's `type`) says
/// about the failure.
fn kind_of_error_type(error_type: &str) -> FailureKind {
    let lower = error_type.to_lowercase();
    if lower.contains("cancel") {
        FailureKind::Canceled
    } else if lower.contains("timeout") {
        FailureKind::TimedOut
    } else if ["content_policy", "moderation", "nsfw", "safety"]
        .iter()
        .any(|word| lower.contains(word))
    {
        FailureKind::Moderated
    } else {
        FailureKind::Failed
    }
}

/// The message and kind of a fal error body: `{"detail": "text",
/// "error_type": "…"}` (request errors) or `{"detail": [{"loc", "msg",
/// "type"}]}` (model errors, usually 422).
fn error_detail(body: &Value, header_type: Option<&str>) -> (String, FailureKind) {
    let mut kind = header_type
        .or_else(|| body["error_type"].as_str())
        .map_or(FailureKind::Failed, kind_of_error_type);
    let message = match &body["detail"] {
        Value::String(text) => shortened(text),
        Value::Array(items) => {
            for item in items {
                if let Some(item_type) = item["type"].as_str() {
                    let item_kind = kind_of_error_type(item_type);
                    if item_kind != FailureKind::Failed {
                        kind = item_kind;
                    }
                }
            }
            shortened(
                &items
                    .iter()
                    .map(|item| {
                        let field = item["loc"]
                            .as_array()
                            .and_then(|loc| loc.last())
                            .and_then(Value::as_str)
                            .unwrap_or("input");
                        format!("{field}: {}", item["msg"].as_str().unwrap_or("invalid"))
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        }
        Value::Null => "no reason given".to_owned(),
        other => shortened(&other.to_string()),
    };
    (message, kind)
}

async fn error_from_response(response: reqwest::Response) -> ProviderError {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = limited_body(response, 64 * 1024).await.unwrap_or_default();
    classify_error(status, &headers, &body, SystemTime::now())
}

fn classify_error(status: u16, headers: &HeaderMap, body: &[u8], now: SystemTime) -> ProviderError {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let header_type = headers
        .get("x-fal-error-type")
        .and_then(|value| value.to_str().ok());
    let (message, kind) = if parsed.is_null() {
        (
            shortened(&String::from_utf8_lossy(body)),
            FailureKind::Failed,
        )
    } else {
        error_detail(&parsed, header_type)
    };
    if is_ingress_error(status, headers, body) {
        return ProviderError::NotReceived { message };
    }
    // A 504 whose timeout fal marks as ours (`X-Fal-Request-Timeout-Type:
    // user`) is the deadline we set: the request is over, not unknown.
    let user_timeout = headers
        .get("x-fal-request-timeout-type")
        .is_some_and(|value| value == "user");
    if status == 504 && user_timeout {
        return ProviderError::Refused {
            status,
            kind: FailureKind::TimedOut,
            message,
        };
    }
    classify_status(status, headers, message, kind, now)
}

/// The requests on a list page of `endpoint_id` sent at or after `since`
/// (unix seconds) whose listed input has every field of `input`, each with
/// the time it was sent (unix seconds) for ordering.
fn matching_requests(
    page: &Value,
    endpoint_id: &str,
    input: &Value,
    since: i64,
) -> Vec<(i64, String)> {
    items_of_endpoint(page, endpoint_id)
        .filter(|item| sent_fields_match(input, &item["json_input"]))
        .filter_map(|item| {
            let id = item["request_id"].as_str()?.to_owned();
            // A time that cannot be read keeps the request in: missing a
            // job is what costs a second paid one.
            let sent_at = item["sent_at"].as_str().and_then(unix_seconds);
            if sent_at.is_some_and(|sent_at| sent_at < since) {
                return None;
            }
            Some((sent_at.unwrap_or(i64::MAX), id))
        })
        .collect()
}

/// The items of a list page that are requests of `endpoint_id` (an item
/// that names no endpoint is kept: the page was asked for that endpoint).
fn items_of_endpoint<'a>(page: &'a Value, endpoint_id: &'a str) -> impl Iterator<Item = &'a Value> {
    page["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |item| {
            item["endpoint_id"]
                .as_str()
                .is_none_or(|listed| listed == endpoint_id)
        })
}

/// The requests on a list page of `endpoint_id` sent at or after `since`
/// (unix seconds) that are listed without their input (fal stores no
/// payload for a request sent with `X-Fal-Store-IO: 0`): they can be
/// neither matched nor ruled out.
fn input_unknown_requests(page: &Value, endpoint_id: &str, since: i64) -> Vec<InputUnknownJob> {
    items_of_endpoint(page, endpoint_id)
        .filter(|item| !listed_input_is_known(&item["json_input"]))
        .filter_map(|item| {
            let created_at = item["sent_at"].as_str().and_then(unix_seconds);
            if created_at.is_some_and(|sent_at| sent_at < since) {
                return None;
            }
            Some(InputUnknownJob {
                job_id: item["request_id"].as_str()?.to_owned(),
                created_at,
                // fal's list gives no run time.
                ran_seconds: None,
            })
        })
        .collect()
}

/// The public keys of a JWKS document (`{"keys": [{"kty": "OKP", "crv":
/// "Ed25519", "x": base64url}]}`); other keys are skipped.
pub fn parse_jwks(document: &[u8]) -> Result<Vec<[u8; 32]>, String> {
    let document: Value = serde_json::from_slice(document)
        .map_err(|error| format!("the JWKS is not JSON: {error}"))?;
    let keys: Vec<[u8; 32]> = document["keys"]
        .as_array()
        .ok_or("the JWKS has no keys")?
        .iter()
        .filter(|key| key["kty"] == "OKP" && key["crv"] == "Ed25519")
        .filter_map(|key| key["x"].as_str())
        .filter_map(|x| URL_SAFE_NO_PAD.decode(x.trim_end_matches('=')).ok())
        .filter_map(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
        .collect();
    if keys.is_empty() {
        return Err("the JWKS has no Ed25519 key".into());
    }
    Ok(keys)
}

/// The bytes fal signs for a webhook:
/// `{request_id}\n{user_id}\n{timestamp}\n{hex sha256(body)}`.
pub fn signed_message(request_id: &str, user_id: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
    let digest = Sha256::digest(body);
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{request_id}\n{user_id}\n{timestamp}\n{hex}").into_bytes()
}

/// A verified fal webhook: which request it is about, and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FalWebhook {
    pub request_id: String,
    /// The fal account whose request it is.
    pub user_id: String,
    pub state: ProviderJobState,
}

/// Verifies a webhook fal signed (`X-Fal-Webhook-Request-Id`, `-User-Id`,
/// `-Timestamp` within five minutes of `now`, and `-Signature`, hex Ed25519
/// by any key of fal's JWKS) and reads its outcome.
pub fn verify_webhook(
    headers: &HeaderMap,
    body: &[u8],
    keys: &[[u8; 32]],
    now: i64,
) -> Result<FalWebhook, WebhookRejection> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .ok_or_else(|| WebhookRejection::Malformed(name.to_owned()))
    };
    let request_id = header("x-fal-webhook-request-id")?;
    let user_id = header("x-fal-webhook-user-id")?;
    let timestamp = header("x-fal-webhook-timestamp")?;
    let signature = decode_hex(header("x-fal-webhook-signature")?)
        .ok_or_else(|| WebhookRejection::Malformed("x-fal-webhook-signature".into()))?;
    let sent_at: i64 = timestamp
        .parse()
        .map_err(|_| WebhookRejection::Malformed("x-fal-webhook-timestamp".into()))?;
    if (now - sent_at).abs() > WEBHOOK_TOLERANCE_SECONDS {
        return Err(WebhookRejection::Stale);
    }
    let message = signed_message(request_id, user_id, timestamp, body);
    let verified = keys.iter().any(|key| {
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&message, &signature)
            .is_ok()
    });
    if !verified {
        return Err(WebhookRejection::BadSignature);
    }
    let payload: Value = serde_json::from_slice(body)
        .map_err(|error| WebhookRejection::InvalidBody(error.to_string()))?;
    if payload["request_id"].as_str() != Some(request_id) {
        return Err(WebhookRejection::InvalidBody(
            "the body is about another request".into(),
        ));
    }
    Ok(FalWebhook {
        request_id: request_id.to_owned(),
        user_id: user_id.to_owned(),
        state: webhook_state(&payload),
    })
}

/// A webhook body: `{"status": "OK", "payload": <result>}` or `{"status":
/// "ERROR", "error": "…", "payload": <error detail>}`.
fn webhook_state(payload: &Value) -> ProviderJobState {
    if payload["status"] == "OK" && payload["payload"].is_object() {
        return result_state(&payload["payload"]);
    }
    let (detail, kind) = error_detail(&payload["payload"], None);
    let message = payload["error"]
        .as_str()
        .map(|error| {
            if detail == "no reason given" {
                shortened(error)
            } else {
                shortened(&format!("{error}: {detail}"))
            }
        })
        .or_else(|| payload["payload_error"].as_str().map(shortened))
        .unwrap_or(detail);
    ProviderJobState::Failed(ProviderFailure { kind, message })
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|index| u8::from_str_radix(text.get(index..index + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests;
