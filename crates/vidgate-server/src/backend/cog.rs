//! An adapter for model servers that speak Cog's HTTP API (Replicate's
//! `cog`, or anything compatible): `PUT /predictions/{id}` to dispatch,
//! completion webhooks to learn the result, `GET /health-check` to decide
//! whether submits are admitted. Which models run this way, and how our
//! parameters map to the predictor's inputs, comes from the backends file
//! (`--backends-file`; see docs/cog.md).
//!
//! Cog forgets a prediction once it has finished: re-sending the PUT for a
//! finished id starts it again. So the completion webhook is how a result
//! normally arrives, and re-sending the PUT only reads the state of a
//! prediction still in flight (and notices a server that died). When the
//! webhook cannot reach us (no HTTP listener on this node) or was missed,
//! the adapter dispatches synchronously instead: the PUT without
//! `Prefer: respond-async` answers only when the prediction is finished.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::cog_config::CogModelConfig;
use super::contract::{Admission, Backend, ClipBytes, Job, JobFailure, Rejection, RenderedClip};
use super::output::{self, DownloadError, upstream_failure};
use crate::bound_media::MEDIA_URL_MARGIN;
use crate::ids::{random_token, sha256_hex};
use crate::storage::Storage;

/// A duration from the backends file's seconds, never zero (a zero timeout
/// would fail every request) and saturating instead of panicking.
fn seconds(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.max(0.001)).unwrap_or(Duration::MAX)
}

/// The predictions that wait for a completion webhook on this process, and
/// the URL the webhooks are sent to. The HTTP route hands each webhook to
/// the job waiting for it; a webhook without the job's token is refused.
#[derive(Default)]
pub struct CogCallbacks {
    /// Base of the callback URLs (the server's public URL); `None` on a
    /// node without an HTTP listener, which then dispatches synchronously.
    base_url: Option<String>,
    waiting: Mutex<HashMap<String, WaitingPrediction>>,
}

struct WaitingPrediction {
    token_digest: String,
    sender: mpsc::Sender<Value>,
}

impl CogCallbacks {
    /// The callbacks of a process that webhooks reach at `base_url`, or
    /// of one no webhook reaches (`None`).
    pub fn new(base_url: Option<&str>) -> CogCallbacks {
        CogCallbacks {
            base_url: base_url.map(|base_url| base_url.trim_end_matches('/').to_owned()),
            waiting: Mutex::default(),
        }
    }

    /// Hands a webhook's prediction to the job waiting for it. Returns false
    /// when no job on this process waits for `generation_id` with `token`.
    pub fn deliver(&self, generation_id: &str, token: &str, prediction: Value) -> bool {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match waiting.get(generation_id) {
            // Comparing digests keeps the comparison's timing from telling
            // an attacker how much of a guessed token was right.
            Some(entry) if entry.token_digest == sha256_hex(token.as_bytes()) => {
                entry.sender.try_send(prediction).is_ok()
            }
            _ => false,
        }
    }

    /// Whether a webhook for `generation_id` with `token` would be taken,
    /// checked before its (possibly large) body is read.
    pub fn expects(&self, generation_id: &str, token: &str) -> bool {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        waiting
            .get(generation_id)
            .is_some_and(|entry| entry.token_digest == sha256_hex(token.as_bytes()))
    }

    fn register(self: &Arc<Self>, generation_id: &str) -> Option<CallbackRegistration> {
        let base_url = self.base_url.as_deref()?;
        let token = random_token(32);
        let (sender, receiver) = mpsc::channel(4);
        self.waiting
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .insert(
                generation_id.to_owned(),
                WaitingPrediction {
                    token_digest: sha256_hex(token.as_bytes()),
                    sender,
                },
            );
        Some(CallbackRegistration {
            // The token is the path's last segment, which request logs
            // redact (`http::cog_callbacks::loggable_path`); in a query
            // string it would reach the access logs of every proxy between
            // the model server and this node.
            url: format!("{base_url}/internal/cog/{generation_id}/{token}"),
            receiver,
            callbacks: self.clone(),
            generation_id: generation_id.to_owned(),
            token_digest: sha256_hex(token.as_bytes()),
        })
    }
}

/// A job's place in `CogCallbacks`; removed when the job stops waiting.
struct CallbackRegistration {
    url: String,
    receiver: mpsc::Receiver<Value>,
    callbacks: Arc<CogCallbacks>,
    generation_id: String,
    token_digest: String,
}

impl Drop for CallbackRegistration {
    fn drop(&mut self) {
        let mut waiting = self
            .callbacks
            .waiting
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        // A later attempt of the same job may have registered again.
        if waiting
            .get(&self.generation_id)
            .is_some_and(|entry| entry.token_digest == self.token_digest)
        {
            waiting.remove(&self.generation_id);
        }
    }
}

/// What the last health check found.
#[derive(Debug, Clone)]
struct Health {
    checked_at: Instant,
    ready: bool,
    detail: String,
}

pub struct CogBackend {
    model_id: String,
    config: CogModelConfig,
    client: reqwest::Client,
    slots: Arc<Semaphore>,
    callbacks: Arc<CogCallbacks>,
    health: Mutex<Option<Health>>,
    /// Outputs given as URLs are downloaded into its incoming directory.
    storage: Arc<Storage>,
}

impl CogBackend {
    /// Builds the backend and starts its health checks, which stop when the
    /// backend is dropped.
    pub fn new(
        model_id: &str,
        config: CogModelConfig,
        callbacks: Arc<CogCallbacks>,
        storage: Arc<Storage>,
    ) -> Result<Arc<CogBackend>, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(seconds(config.timeouts.request_seconds))
            // The model server is named by the operator; proxy variables
            // meant for outgoing customer traffic must not reroute it.
            .no_proxy()
            .build()?;
        let backend = Arc::new(CogBackend {
            model_id: model_id.to_owned(),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            client,
            callbacks,
            health: Mutex::new(None),
            storage,
        });
        tokio::spawn(health_loop(Arc::downgrade(&backend)));
        Ok(backend)
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.config.base_url.trim_end_matches('/'), path)
    }

    async fn check_health(&self) -> Health {
        let answer = self
            .client
            .get(self.url("health-check"))
            .timeout(seconds(self.config.timeouts.request_seconds))
            .send()
            .await;
        let (ready, detail) = match answer {
            Ok(response) => match read_json(response).await {
                Ok(body) => {
                    let status = body["status"].as_str().unwrap_or("UNKNOWN").to_owned();
                    // BUSY means every slot is taken: the job waits in our
                    // queue, so the model is still available to submits.
                    (matches!(status.as_str(), "READY" | "BUSY"), status)
                }
                Err(error) => (false, format!("an unreadable health answer: {error}")),
            },
            Err(error) => (false, format!("unreachable: {error}")),
        };
        let health = Health {
            checked_at: Instant::now(),
            ready,
            detail,
        };
        let previous = self
            .health
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .replace(health.clone());
        if previous.as_ref().map(|previous| previous.ready) != Some(health.ready) {
            tracing::info!(model = %self.model_id, ready = health.ready, detail = %health.detail, "cog model server health changed");
        }
        health
    }

    /// The predictor's inputs for a job starting now, through the configured
    /// mapping. Media fields carry the URLs of the copies vidgate kept at
    /// submit, so the model server fetches exactly the checked bytes, from
    /// vidgate, and never a customer's URL from inside the operator's
    /// network; they are signed to stay valid until the prediction's
    /// deadline and `MEDIA_URL_MARGIN` after it.
    fn prediction_input(&self, job: &Job) -> Value {
        let media_input = job.fetchable_media_input(
            seconds(self.config.timeouts.prediction_seconds) + MEDIA_URL_MARGIN,
        );
        let mut input = self.config.constants.clone();
        for (ours, theirs) in &self.config.inputs {
            let value = match ours.as_str() {
                "seed" => Some(json!(job.seed)),
                "width" => Some(json!(job.width)),
                "height" => Some(json!(job.height)),
                "mode" => Some(json!(job.mode.to_string())),
                "duration" => Some(json!(job.input.duration_s())),
                name => media_input.get(name).cloned(),
            };
            if let Some(value) = value.filter(|value| !value.is_null()) {
                input.insert(theirs.clone(), value);
            }
        }
        Value::Object(input)
    }

    /// Tells the server to stop a prediction; best effort, since the job is
    /// ending either way.
    async fn cancel_remote(&self, generation_id: &str) {
        let sent = self
            .client
            .post(self.url(&format!("predictions/{generation_id}/cancel")))
            .timeout(seconds(self.config.timeouts.request_seconds))
            .send()
            .await;
        if let Err(error) = sent {
            tracing::warn!(generation = %generation_id, error = %error, "could not cancel the cog prediction");
        }
    }

    #[tracing::instrument(name = "cog.predict", skip_all, fields(generation_id = %job.generation_id, model = %self.model_id))]
    async fn run_prediction(
        &self,
        job: &Job,
        cancel: &CancellationToken,
    ) -> Result<RenderedClip, JobFailure> {
        let generation_id = job.generation_id.as_str();
        let timeouts = &self.config.timeouts;
        let deadline = Instant::now() + seconds(timeouts.prediction_seconds);
        // One input for every PUT of this run, its media URLs signed once.
        let input = self.prediction_input(job);
        let mut registration = self.callbacks.register(generation_id);
        let mut unreachable_since: Option<Instant> = None;
        let mut at_capacity_backoff = Duration::from_millis(500);
        let mut dispatched = false;
        // Set once we cancel a rerun ourselves, so that its "canceled" state,
        // if a later PUT reads it before Cog forgets it, is not taken for
        // the model's verdict.
        let mut canceled_rerun = false;
        loop {
            if Instant::now() >= deadline {
                self.cancel_remote(generation_id).await;
                return Err(upstream_failure(format!(
                    "the model server did not finish within {} s",
                    timeouts.prediction_seconds
                )));
            }
            // A webhook that arrived while we slept must be used before a
            // re-sent PUT would start the finished prediction again.
            if let Some(prediction) = registration
                .as_mut()
                .and_then(|registration| registration.receiver.try_recv().ok())
                .filter(is_final)
            {
                return self.finished(job, prediction).await;
            }
            let answer = self
                .put_prediction(
                    generation_id,
                    &input,
                    registration.as_ref(),
                    deadline,
                    cancel,
                )
                .await?;
            let Some(prediction) = self
                .read_answer(
                    answer,
                    &mut unreachable_since,
                    &mut at_capacity_backoff,
                    cancel,
                    generation_id,
                )
                .await?
            else {
                continue;
            };
            if canceled_rerun && prediction["status"] == "canceled" {
                self.pause(seconds(timeouts.poll_seconds), cancel, generation_id)
                    .await?;
                continue;
            }
            if is_final(&prediction) {
                return self.finished(job, prediction).await;
            }
            // Cog answers a PUT that starts a prediction with only its id and
            // status, and one for a prediction in flight with its input too.
            // A fresh start after our dispatch means the first run finished
            // and its webhook never came: that result is lost, so the rerun
            // is canceled and the job continues without webhooks.
            let fresh_start = prediction.get("input").is_none();
            if dispatched && fresh_start && registration.is_some() {
                tracing::warn!(generation = %generation_id, "the cog completion webhook was missed; dispatching synchronously");
                self.cancel_remote(generation_id).await;
                registration = None;
                canceled_rerun = true;
                continue;
            }
            dispatched = true;
            if let Some(prediction) = self
                .await_completion(registration.as_mut(), cancel, generation_id)
                .await?
            {
                return self.finished(job, prediction).await;
            }
        }
    }

    /// Sends the prediction's PUT: with a webhook registered, answered at
    /// once (`Prefer: respond-async`); without one, the request itself
    /// waits for the end, up to `deadline`. An interrupted job cancels the
    /// prediction.
    async fn put_prediction(
        &self,
        generation_id: &str,
        input: &Value,
        registration: Option<&CallbackRegistration>,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<Result<reqwest::Response, reqwest::Error>, JobFailure> {
        let mut body = json!({ "input": input });
        let mut request = self
            .client
            .put(self.url(&format!("predictions/{generation_id}")));
        match registration {
            Some(registration) => {
                body["webhook"] = json!(registration.url);
                body["webhook_events_filter"] = json!(["completed"]);
                request = request
                    .header("Prefer", "respond-async")
                    .timeout(seconds(self.config.timeouts.request_seconds));
            }
            None => {
                request = request.timeout(deadline.saturating_duration_since(Instant::now()));
            }
        }
        tokio::select! {
            answer = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .send() => Ok(answer),
            _ = cancel.cancelled() => {
                self.cancel_remote(generation_id).await;
                Err(JobFailure::Interrupted)
            }
        }
    }

    /// The prediction a PUT answered, or `None` when it is to be sent again
    /// after a pause: the server busy (409, with a growing backoff), not
    /// answering, or answering what is not a prediction. A refusal (4xx)
    /// fails the job, and so does a server that stays unreachable.
    async fn read_answer(
        &self,
        answer: Result<reqwest::Response, reqwest::Error>,
        unreachable_since: &mut Option<Instant>,
        at_capacity_backoff: &mut Duration,
        cancel: &CancellationToken,
        generation_id: &str,
    ) -> Result<Option<Value>, JobFailure> {
        let poll = seconds(self.config.timeouts.poll_seconds);
        let unreachable = match answer {
            Ok(response) if response.status() == reqwest::StatusCode::CONFLICT => {
                // Every slot of the server is busy (other clients, or a
                // prediction of ours still being canceled): try again.
                *unreachable_since = None;
                self.pause(*at_capacity_backoff, cancel, generation_id)
                    .await?;
                *at_capacity_backoff = (*at_capacity_backoff * 2).min(poll);
                return Ok(None);
            }
            Ok(response) if response.status().is_client_error() => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                return Err(upstream_failure(format!(
                    "the model server refused the prediction ({status}): {}",
                    text.chars().take(300).collect::<String>()
                )));
            }
            Ok(response) if response.status().is_success() => match read_json(response).await {
                Ok(prediction) => {
                    *unreachable_since = None;
                    return Ok(Some(prediction));
                }
                Err(error) => error,
            },
            Ok(response) => format!("it answered {}", response.status()),
            Err(error) => error.to_string(),
        };
        self.note_unreachable(unreachable_since, &unreachable)?;
        self.pause(poll, cancel, generation_id).await?;
        Ok(None)
    }

    /// Waits for the prediction's completion webhook, or the poll interval
    /// when none is registered (or none comes): the final prediction the
    /// webhook delivered, if any.
    async fn await_completion(
        &self,
        registration: Option<&mut CallbackRegistration>,
        cancel: &CancellationToken,
        generation_id: &str,
    ) -> Result<Option<Value>, JobFailure> {
        let poll = seconds(self.config.timeouts.poll_seconds);
        let Some(registration) = registration else {
            self.pause(poll, cancel, generation_id).await?;
            return Ok(None);
        };
        tokio::select! {
            delivered = registration.receiver.recv() => Ok(delivered.filter(is_final)),
            _ = tokio::time::sleep(poll) => Ok(None),
            _ = cancel.cancelled() => {
                self.cancel_remote(generation_id).await;
                Err(JobFailure::Interrupted)
            }
        }
    }

    /// Waits, giving up (and canceling the prediction) if the job is
    /// interrupted meanwhile.
    async fn pause(
        &self,
        duration: Duration,
        cancel: &CancellationToken,
        generation_id: &str,
    ) -> Result<(), JobFailure> {
        tokio::select! {
            _ = tokio::time::sleep(duration) => Ok(()),
            _ = cancel.cancelled() => {
                self.cancel_remote(generation_id).await;
                Err(JobFailure::Interrupted)
            }
        }
    }

    /// Records that the server did not answer, and fails the job once it has
    /// not answered for longer than the configured grace.
    fn note_unreachable(
        &self,
        unreachable_since: &mut Option<Instant>,
        reason: &str,
    ) -> Result<(), JobFailure> {
        let since = *unreachable_since.get_or_insert_with(Instant::now);
        tracing::warn!(model = %self.model_id, %reason, "the cog model server did not answer");
        if since.elapsed() >= seconds(self.config.timeouts.unreachable_seconds) {
            return Err(upstream_failure(format!(
                "the model server stopped answering: {reason}"
            )));
        }
        Ok(())
    }

    /// The seed the model server was sent: the prediction's listed input
    /// where it shows it, else the job's, and `None` when the mapping sends
    /// no seed (the predictor takes none).
    fn seed_sent(&self, job: &Job, prediction: &Value) -> Option<u64> {
        let field = self.config.inputs.get("seed")?;
        Some(
            prediction
                .pointer(&format!(
                    "/input/{}",
                    field.replace('~', "~0").replace('/', "~1")
                ))
                .and_then(Value::as_u64)
                .unwrap_or(job.seed),
        )
    }

    /// Turns a final prediction into the job's result.
    async fn finished(&self, job: &Job, prediction: Value) -> Result<RenderedClip, JobFailure> {
        match prediction["status"].as_str() {
            Some("succeeded") => {
                let output = first_output(&prediction["output"]).ok_or_else(|| {
                    upstream_failure("the prediction succeeded without a video output".into())
                })?;
                let mp4 = self.output_clip(output).await?;
                tracing::info!(generation = %job.generation_id, "cog prediction succeeded");
                let mut clip = output::probe_clip(mp4).await?;
                clip.seed = self.seed_sent(job, &prediction);
                Ok(clip)
            }
            Some("canceled") => Err(JobFailure::Failed {
                code: "generation_failed".into(),
                message: "the model server canceled the prediction".into(),
            }),
            _ => {
                let error = prediction["error"].as_str().unwrap_or("no reason given");
                Err(JobFailure::Failed {
                    code: "generation_failed".into(),
                    message: format!(
                        "the model failed: {}",
                        error.chars().take(500).collect::<String>()
                    ),
                })
            }
        }
    }

    /// An output given as a data URI (decoded in memory, where it already
    /// is) or an http(s) URL (streamed into the storage's incoming
    /// directory, never whole in memory).
    async fn output_clip(&self, output: &str) -> Result<ClipBytes, JobFailure> {
        let limit = self.config.max_output_bytes;
        if let Some(data) = output.strip_prefix("data:") {
            let (header, payload) = data
                .split_once(',')
                .ok_or_else(|| upstream_failure("the output data URI has no payload".into()))?;
            if !header.ends_with(";base64") {
                return Err(upstream_failure(
                    "the output data URI is not base64-encoded".into(),
                ));
            }
            let too_large = || upstream_failure(format!("the output is larger than {limit} bytes"));
            // Refuse before decoding what is certainly too large: every four
            // base64 characters make three bytes, less at most two of padding.
            if (payload.len() as u64 / 4 * 3).saturating_sub(2) > limit {
                return Err(too_large());
            }
            let decoded = STANDARD.decode(payload).map_err(|error| {
                upstream_failure(format!("the output data URI is not valid base64: {error}"))
            })?;
            if decoded.len() as u64 > limit {
                return Err(too_large());
            }
            return Ok(ClipBytes::InMemory(decoded));
        }
        let url = url::Url::parse(output)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| {
                upstream_failure("the output is neither a data URI nor an http URL".into())
            })?;
        let fetch_failed = |error: reqwest::Error| {
            upstream_failure(format!("fetching the output failed: {error}"))
        };
        let response = self
            .client
            .get(url)
            .timeout(seconds(self.config.timeouts.prediction_seconds))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(fetch_failed)?;
        let downloaded = output::download_to_incoming(&self.storage, response, limit)
            .await
            .map_err(|error| match error {
                DownloadError::TooLarge { .. } => upstream_failure(error.to_string()),
                DownloadError::Network(error) => fetch_failed(error),
                DownloadError::Scratch(error) => output::scratch_failure(&error),
            })?;
        Ok(ClipBytes::File(downloaded))
    }
}

#[async_trait]
impl Backend for CogBackend {
    fn kind(&self) -> &'static str {
        "cog"
    }

    async fn admit(&self, _admission: &Admission<'_>) -> Result<(), Rejection> {
        let cached = self
            .health
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone();
        // A health answer older than a few check intervals means the checks
        // are stuck; ask again rather than trust it.
        let stale_after = seconds(self.config.timeouts.health_seconds * 3.0);
        let health = match cached {
            Some(health) if health.checked_at.elapsed() < stale_after => health,
            _ => self.check_health().await,
        };
        if health.ready {
            Ok(())
        } else {
            Err(Rejection::Unavailable(format!(
                "The model {} is not available right now; try again later.",
                self.model_id
            )))
        }
    }

    async fn run(&self, job: Job, cancel: CancellationToken) -> Result<RenderedClip, JobFailure> {
        // The permit is held for the whole prediction, so this node never
        // has more predictions on the server than its configured slots.
        let _permit = tokio::select! {
            permit = self.slots.clone().acquire_owned() => permit.map_err(|_| JobFailure::Interrupted)?,
            _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
        };
        self.run_prediction(&job, &cancel).await
    }
}

async fn health_loop(backend: Weak<CogBackend>) {
    loop {
        let interval = {
            let Some(backend) = backend.upgrade() else {
                return;
            };
            backend.check_health().await;
            seconds(backend.config.timeouts.health_seconds)
        };
        tokio::time::sleep(interval).await;
    }
}

async fn read_json(response: reqwest::Response) -> Result<Value, String> {
    let bytes = response.bytes().await.map_err(|error| error.to_string())?;
    serde_json::from_slice(&bytes).map_err(|error| format!("an unreadable answer: {error}"))
}

fn is_final(prediction: &Value) -> bool {
    matches!(
        prediction["status"].as_str(),
        Some("succeeded" | "failed" | "canceled")
    )
}

/// A video predictor returns one file, or a list whose first item is the
/// video.
fn first_output(output: &Value) -> Option<&str> {
    match output {
        Value::String(text) => Some(text),
        Value::Array(items) => items.first().and_then(Value::as_str),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: Value) -> CogModelConfig {
        let mut value = json!({ "base_url": "http://127.0.0.1:9" });
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    fn job(input: Value) -> Job {
        Job {
            generation_id: "gen_test".into(),
            model: "vendor_1/model_1".into(),
            mode: "text-to-video".parse().unwrap(),
            input: vidgate_core::ValidatedInput::from_stored_json(input.clone()),
            media_input: vidgate_core::ValidatedInput::from_stored_json(input),
            media: Default::default(),
            width: 854,
            height: 480,
            seed: 42,
            price: vidgate_core::Micros(0),
        }
    }

    #[tokio::test]
    async fn inputs_are_mapped_renamed_and_merged_over_constants() {
        let backend = CogBackend::new(
            "vendor_1/model_1",
            config(json!({
                "inputs": { "prompt": "text", "duration": "seconds", "seed": "seed",
                            "width": "w", "negative_prompt": "negative" },
                "constants": { "fps": 24, "text": "overridden" }
            })),
            Arc::default(),
            unused_storage(),
        )
        .unwrap();
        let input = backend.prediction_input(&job(json!({ "prompt": "a kite", "duration": 4 })));
        assert_eq!(
            input,
            json!({ "text": "a kite", "seconds": 4, "seed": 42, "w": 854, "fps": 24 })
        );
    }

    #[tokio::test]
    async fn media_fields_carry_the_kept_copies_never_the_customers_urls() {
        let backend = CogBackend::new(
            "vendor_1/model_1",
            config(json!({ "inputs": { "prompt": "prompt", "image_url": "image" } })),
            Arc::default(),
            unused_storage(),
        )
        .unwrap();
        let mut job = job(json!({ "prompt": "p", "image_url": "https://customer.example/a.png" }));
        job.media_input = vidgate_core::ValidatedInput::from_stored_json(
            json!({ "prompt": "p", "image_url": "https://vidgate.example/api/v1/files/media/t/a.png" }),
        );
        assert_eq!(
            backend.prediction_input(&job),
            json!({ "prompt": "p", "image": "https://vidgate.example/api/v1/files/media/t/a.png" })
        );
    }

    #[tokio::test]
    async fn data_uri_outputs_are_decoded_within_the_size_cap() {
        let backend = CogBackend::new(
            "vendor_1/model_1",
            config(json!({ "max_output_bytes": 8 })),
            Arc::default(),
            unused_storage(),
        )
        .unwrap();
        let decoded = backend
            .output_clip("data:video/mp4;base64,AAAAGGZ0eXA=")
            .await
            .unwrap();
        let ClipBytes::InMemory(decoded) = decoded else {
            panic!("a data URI stays in memory: {decoded:?}");
        };
        assert_eq!(&decoded[4..8], b"ftyp");
        for refused in [
            "data:video/mp4,plain-text",
            "data:video/mp4;base64,not base64!",
            "data:video/mp4;base64,AAAAGGZ0eXBBQUFBQUFB",
            "ftp://example.com/clip.mp4",
        ] {
            let failure = backend.output_clip(refused).await.unwrap_err();
            assert!(
                matches!(&failure, JobFailure::Failed { code, .. } if code == "upstream_error"),
                "{refused}: {failure:?}"
            );
        }
    }

    /// A storage for backends whose tests download nothing into it.
    fn unused_storage() -> Arc<Storage> {
        Arc::new(Storage::local(std::env::temp_dir().join("vidgate-unused")))
    }

    /// The files left in a storage's incoming directory.
    fn incoming_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(root.join("uploads").join(".incoming"))
            .into_iter()
            .flatten()
            .map(|entry| entry.unwrap().path())
            .collect()
    }

    #[tokio::test]
    async fn url_outputs_are_streamed_to_an_incoming_file_within_the_size_cap() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = axum::Router::new()
            .route("/clip.mp4", axum::routing::get(|| async { vec![7u8; 100] }))
            // Chunked, with no Content-Length to refuse it by: only counting
            // what arrives stops it.
            .route(
                "/endless.mp4",
                axum::routing::get(|| async {
                    axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(
                        tokio::io::repeat(7),
                    ))
                }),
            );
        tokio::spawn(async move { axum::serve(listener, router).await });
        let url = format!("http://{address}/clip.mp4");
        let root = tempfile::tempdir().unwrap();
        let storage = Arc::new(Storage::local(root.path().to_owned()));
        let backend_with_cap = |cap: u64| {
            CogBackend::new(
                "vendor_1/model_1",
                config(json!({ "max_output_bytes": cap })),
                Arc::default(),
                storage.clone(),
            )
            .unwrap()
        };
        let downloaded = backend_with_cap(100).output_clip(&url).await.unwrap();
        let ClipBytes::File(path) = downloaded else {
            panic!("a URL output is downloaded to a file: {downloaded:?}");
        };
        assert!(path.starts_with(root.path()), "{path:?}");
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 100]);
        drop(path);
        assert_eq!(
            incoming_files(root.path()),
            Vec::<std::path::PathBuf>::new()
        );

        let refused = backend_with_cap(99).output_clip(&url).await.unwrap_err();
        assert!(
            refused.to_string().contains("larger than 99 bytes"),
            "{refused}"
        );
        let endless = tokio::time::timeout(
            Duration::from_secs(10),
            backend_with_cap(1_000_000).output_clip(&format!("http://{address}/endless.mp4")),
        )
        .await
        .expect("an endless output is refused once past the cap")
        .unwrap_err();
        assert!(
            endless.to_string().contains("larger than 1000000 bytes"),
            "{endless}"
        );
        let missing = backend_with_cap(100)
            .output_clip(&format!("http://{address}/missing.mp4"))
            .await
            .unwrap_err();
        assert!(
            missing.to_string().contains("fetching the output failed"),
            "{missing}"
        );
        assert_eq!(
            incoming_files(root.path()),
            Vec::<std::path::PathBuf>::new(),
            "a refused output leaves no file behind"
        );
    }

    #[tokio::test]
    async fn a_dispatch_refused_with_a_4xx_other_than_409_fails_as_upstream_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = axum::Router::new().route(
            "/predictions/{id}",
            axum::routing::put(|| async {
                (
                    axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                    r#"{"detail": "duration: input should be at most 10"}"#,
                )
            }),
        );
        tokio::spawn(async move { axum::serve(listener, router).await });
        let mut refused_config = config(json!({}));
        refused_config.base_url = format!("http://{address}");
        let backend = CogBackend::new(
            "vendor_1/model_1",
            refused_config,
            Arc::default(),
            unused_storage(),
        )
        .unwrap();
        let failure = backend
            .run(
                job(json!({ "prompt": "too long", "duration": 12 })),
                CancellationToken::new(),
            )
            .await
            .unwrap_err();
        let JobFailure::Failed { code, message } = failure else {
            panic!("the job was not failed: {failure:?}");
        };
        assert_eq!(code, "upstream_error");
        assert!(
            message.contains("422") && message.contains("at most 10"),
            "{message}"
        );
    }
}
