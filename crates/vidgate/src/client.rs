//! The `vidgate` client commands for people at a terminal. They follow the
//! advice of SPEC.md section 7 so that a user does the right thing without
//! thinking about it: retry 429, 500, 502 and 503 with exponential backoff and
//! jitter (about 1, 2, 4, 8 s, capped at 30 s), never retry other 4xx
//! unchanged, poll no tighter than every 5 seconds, and make submits safe to
//! retry with an Idempotency-Key. `run --wait` follows the generation live,
//! by its event stream, or by reads the server holds until it is final
//! (`Prefer: wait`), and polls only a server that offers neither.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use rand::RngExt;
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};

/// The spec's polling floor for video: no tighter than every 5 seconds.
const MIN_POLL_INTERVAL: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
const MAX_ATTEMPTS: u32 = 8;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// What each read of a wait asks the server to hold it for, under
/// `REQUEST_TIMEOUT`.
const WAIT_PREFERENCE: &str = "wait=50";
/// An event stream sends a comment every 15 s; silent this long, it is lost.
const STREAM_SILENCE: Duration = Duration::from_secs(60);
/// A stream lasts at most 30 minutes on the server.
const STREAM_TIMEOUT: Duration = Duration::from_secs(31 * 60);

/// How the client reaches the API. Each client command takes these options
/// itself (not the `vidgate` command as a whole), so that `serve --help` and
/// `admin --help` list only their own options.
#[derive(Args)]
pub struct ClientArgs {
    /// Base URL of the API, ending in /api/v1.
    #[arg(
        long,
        env = "VIDGATE_BASE_URL",
        default_value = "http://127.0.0.1:8080/api/v1"
    )]
    base_url: String,
    /// API key (vg_live_…).
    #[arg(long, env = "VIDGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Print JSON for scripts instead of text for people.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum ClientCommand {
    /// List the models and their endpoints.
    Models {
        #[command(flatten)]
        connection: ClientArgs,
    },
    /// Price a request without running it: vidgate quote vendor_1/model_1/text-to-video --param duration=8
    Quote {
        endpoint: String,
        /// A request parameter as name=value (numbers, booleans and JSON arrays are understood).
        #[arg(long = "param", value_name = "NAME=VALUE")]
        parameters: Vec<String>,
        #[command(flatten)]
        connection: ClientArgs,
    },
    /// Submit a generation, optionally wait for it and download the clip.
    Run {
        #[command(flatten)]
        options: RunOptions,
        #[command(flatten)]
        connection: ClientArgs,
    },
    /// Upload a local media file and print its URL for use in requests.
    Upload {
        file: PathBuf,
        #[command(flatten)]
        connection: ClientArgs,
    },
    /// Show one generation.
    Get {
        id: String,
        #[command(flatten)]
        connection: ClientArgs,
    },
    /// Cancel a queued generation.
    Cancel {
        id: String,
        #[command(flatten)]
        connection: ClientArgs,
    },
    /// List recent generations, newest first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        status: Option<String>,
        #[command(flatten)]
        connection: ClientArgs,
    },
}

impl ClientCommand {
    fn connection(&self) -> &ClientArgs {
        match self {
            ClientCommand::Models { connection }
            | ClientCommand::Quote { connection, .. }
            | ClientCommand::Run { connection, .. }
            | ClientCommand::Upload { connection, .. }
            | ClientCommand::Get { connection, .. }
            | ClientCommand::Cancel { connection, .. }
            | ClientCommand::List { connection, .. } => connection,
        }
    }
}

#[derive(Args)]
pub struct RunOptions {
    endpoint: String,
    #[arg(long)]
    prompt: String,
    /// A request parameter as name=value (numbers, booleans and JSON arrays are understood).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    parameters: Vec<String>,
    /// Opening image (image-to-video): a URL, or a local file that is uploaded first.
    #[arg(long)]
    image: Option<String>,
    /// Wait until the generation is finished, showing its progress.
    #[arg(long)]
    wait: bool,
    /// Download the finished clip here (implies --wait).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// An error answer from the API, in the spec's shape.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {code}: {message}{}", param.as_ref().map(|param| format!(" (param: {param})")).unwrap_or_default())]
pub struct ApiError {
    status: StatusCode,
    code: String,
    message: String,
    param: Option<String>,
}

fn api_error(status: StatusCode, body: &Value) -> ApiError {
    let error = &body["error"];
    ApiError {
        status,
        code: error["code"].as_str().unwrap_or("unknown").to_owned(),
        message: error["message"].as_str().unwrap_or("no message").to_owned(),
        param: error["param"].as_str().map(str::to_owned),
    }
}

struct Client {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
}

/// Statuses worth retrying unchanged: the spec's 429, 500, 502 and 503.
fn is_retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 500 | 502 | 503)
}

/// The wait before retry number `attempt` (0-based): 1, 2, 4, 8 … seconds
/// capped at 30, plus up to a second of jitter so that many clients do not
/// retry in step. A server's Retry-After is honoured when it asks for longer.
fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exponential = Duration::from_secs(1u64 << attempt.min(5)).min(MAX_BACKOFF);
    let jitter = Duration::from_millis(rand::rng().random_range(0..1000));
    exponential.max(retry_after.unwrap_or_default().min(MAX_BACKOFF)) + jitter
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let seconds: u64 = response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

impl Client {
    fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()?,
            base_url: args.base_url.trim_end_matches('/').to_owned(),
            api_key: args.api_key.clone(),
        })
    }

    fn require_key(&self) -> anyhow::Result<&str> {
        self.api_key
            .as_deref()
            .context("set VIDGATE_API_KEY (or --api-key) to an API key")
    }

    /// Sends a request, retrying what the spec says to retry. A request whose
    /// outcome is unknown (a timeout after it was sent) is retried only when
    /// `idempotent` is true.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
        idempotent: bool,
    ) -> anyhow::Result<(StatusCode, Value, reqwest::header::HeaderMap)> {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base_url)
        };
        let build = || {
            let mut request = self.http.request(method.clone(), &url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            match body {
                Some(body) => request.json(body),
                None => request,
            }
        };
        self.send_built(&format!("{method} {url}"), build, idempotent)
            .await
    }

    /// The retry loop every request goes through: `build` makes a fresh
    /// request for each attempt, to which the API key is added here.
    async fn send_built(
        &self,
        description: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
        idempotent: bool,
    ) -> anyhow::Result<(StatusCode, Value, reqwest::header::HeaderMap)> {
        let mut attempt = 0;
        loop {
            let mut request = build();
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    if is_retryable(status) && attempt + 1 < MAX_ATTEMPTS {
                        let wait = backoff(attempt, retry_after(&response));
                        eprintln!(
                            "vidgate: {status} from the API; retrying in {:.1} s",
                            wait.as_secs_f64()
                        );
                        tokio::time::sleep(wait).await;
                        attempt += 1;
                        continue;
                    }
                    let headers = response.headers().clone();
                    let value: Value = response.json().await.unwrap_or(Value::Null);
                    if status.is_success() {
                        return Ok((status, value, headers));
                    }
                    return Err(api_error(status, &value).into());
                }
                // A connection that was never made sent nothing: always safe.
                Err(error) if (error.is_connect() || idempotent) && attempt + 1 < MAX_ATTEMPTS => {
                    let wait = backoff(attempt, None);
                    eprintln!("vidgate: {error}; retrying in {:.1} s", wait.as_secs_f64());
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(error) => return Err(error).context(description.to_owned()),
            }
        }
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.send(Method::GET, path, None, &[], true).await?.1)
    }
}

/// Parses `name=value`: JSON numbers, booleans and arrays keep their type,
/// anything else is a string.
fn parse_parameter(text: &str) -> anyhow::Result<(String, Value)> {
    let (name, raw) = text
        .split_once('=')
        .with_context(|| format!("--param {text:?} is not NAME=VALUE"))?;
    let value = match serde_json::from_str::<Value>(raw) {
        Ok(value @ (Value::Number(_) | Value::Bool(_) | Value::Array(_) | Value::Null)) => value,
        _ => Value::String(raw.to_owned()),
    };
    Ok((name.to_owned(), value))
}

fn parameters_body(parameters: &[String]) -> anyhow::Result<Map<String, Value>> {
    parameters
        .iter()
        .map(|text| parse_parameter(text))
        .collect()
}

fn print(value: &Value, as_json: bool, human: impl FnOnce(&Value) -> String) {
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        println!("{}", human(value));
    }
}

fn describe_generation(generation: &Value) -> String {
    let mut text = format!(
        "{}  {}  {}  ${}{}",
        generation["id"].as_str().unwrap_or("?"),
        generation["status"].as_str().unwrap_or("?"),
        generation["endpoint"].as_str().unwrap_or("?"),
        generation["cost"]["amount_usd"],
        if generation["cost"]["estimated"] == true {
            " (estimate)"
        } else {
            ""
        },
    );
    if let Some(url) = generation["output"]["video_url"].as_str() {
        text.push_str(&format!("\n  video: {url}"));
    }
    if let Some(message) = generation["error"]["message"].as_str() {
        text.push_str(&format!("\n  error: {message}"));
    }
    text
}

/// Shows a generation's status each time it changes.
struct Progress {
    started: Instant,
    last_status: String,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            started: Instant::now(),
            last_status: String::new(),
        }
    }

    /// Shows `generation`'s status if it is new; true once it is final.
    fn show(&mut self, generation: &Value) -> bool {
        let status = generation["status"].as_str().unwrap_or("?");
        if status != self.last_status {
            eprintln!(
                "vidgate: {} is {status} ({:.0} s)",
                generation["id"].as_str().unwrap_or("?"),
                self.started.elapsed().as_secs_f64()
            );
            self.last_status = status.to_owned();
        }
        matches!(status, "succeeded" | "failed" | "canceled")
    }
}

/// Follows the generation until it is final, showing each change of its
/// status as it happens: by its event stream, then (a server without
/// streams, or a stream cut short) by reads the server holds until it is
/// final, and against a server that answers those at once, by polling at
/// the spec's pace.
async fn wait_until_final(client: &Client, generation: Value) -> anyhow::Result<Value> {
    let url = generation["urls"]["get"]
        .as_str()
        .context("the generation has no urls.get")?
        .to_owned();
    let mut progress = Progress::new();
    if progress.show(&generation) {
        return Ok(generation);
    }
    if let Some(finished) = follow_events(client, &url, &mut progress).await {
        return Ok(finished);
    }
    loop {
        let (_, value, headers) = client
            .send(
                Method::GET,
                &url,
                None,
                &[("Prefer", WAIT_PREFERENCE)],
                true,
            )
            .await?;
        if progress.show(&value) {
            return Ok(value);
        }
        if headers.contains_key("preference-applied") {
            continue;
        }
        // Honour a longer polling hint from the server, never a shorter one.
        let hint = headers
            .get("retry-after")
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or_default();
        tokio::time::sleep(hint.max(MIN_POLL_INTERVAL)).await;
    }
}

/// Shows each event of the generation's stream (at `url`/events); the
/// final generation, or `None` when the stream is not offered or ended
/// before it.
async fn follow_events(client: &Client, url: &str, progress: &mut Progress) -> Option<Value> {
    let mut request = client
        .http
        .get(format!("{url}/events"))
        .header("accept", "text/event-stream")
        .timeout(STREAM_TIMEOUT);
    if let Some(key) = &client.api_key {
        request = request.bearer_auth(key);
    }
    let mut response = request.send().await.ok()?;
    if response.status() != StatusCode::OK {
        return None;
    }
    let mut buffer = Vec::new();
    loop {
        let chunk = tokio::time::timeout(STREAM_SILENCE, response.chunk())
            .await
            .ok()?
            .ok()??;
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|pair| pair == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let event = String::from_utf8_lossy(&event);
            for data in event.lines().filter_map(|line| line.strip_prefix("data:")) {
                let generation: Value = serde_json::from_str(data.trim_start()).ok()?;
                if progress.show(&generation) {
                    return Some(generation);
                }
            }
        }
    }
}

/// Uploads a local file with multipart/form-data. Retried like any request:
/// a repeated upload only stores the file twice, it bills nothing.
async fn upload_file(client: &Client, path: &PathBuf) -> anyhow::Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file_name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("upload")
        .to_owned();
    let url = format!("{}/uploads", client.base_url);
    let build = || {
        let part = reqwest::multipart::Part::bytes(bytes.clone()).file_name(file_name.clone());
        client
            .http
            .post(&url)
            .multipart(reqwest::multipart::Form::new().part("file", part))
    };
    Ok(client
        .send_built(&format!("POST {url}"), build, true)
        .await?
        .1)
}

async fn download(client: &Client, url: &str, destination: &PathBuf) -> anyhow::Result<u64> {
    let response = client.http.get(url).send().await?.error_for_status()?;
    let bytes = response.bytes().await?;
    let temporary = destination.with_extension("partial");
    std::fs::File::create(&temporary)?.write_all(&bytes)?;
    std::fs::rename(&temporary, destination)?;
    Ok(bytes.len() as u64)
}

/// After a submit whose outcome stayed unknown, look for a generation the
/// server accepted anyway before the user submits (and pays) again: the same
/// endpoint and prompt, created since this command started (with a minute of
/// leeway for clock skew).
async fn find_recent_match(
    client: &Client,
    endpoint: &str,
    prompt: &str,
    started_unix_millis: i64,
) -> Option<Value> {
    let listed = client.get("/generations?limit=20").await.ok()?;
    // Both timestamps have the API's fixed RFC 3339 form, so they compare as text.
    let earliest = vidgate_server::http::rfc3339(started_unix_millis - 60_000);
    listed["data"]
        .as_array()?
        .iter()
        .find(|generation| {
            generation["endpoint"] == endpoint
                && generation["input"]["prompt"] == prompt
                && generation["created_at"]
                    .as_str()
                    .is_some_and(|created| created >= earliest.as_str())
        })
        .cloned()
}

async fn run(client: &Client, options: &RunOptions, as_json: bool) -> anyhow::Result<()> {
    client.require_key()?;
    let RunOptions {
        endpoint,
        prompt,
        parameters,
        image,
        wait,
        out,
    } = options;
    let mut body = parameters_body(parameters)?;
    body.insert("prompt".into(), json!(prompt));
    if let Some(image) = image {
        let url = if image.starts_with("http://") || image.starts_with("https://") {
            image.clone()
        } else {
            let upload = upload_file(client, &PathBuf::from(image)).await?;
            upload["url"]
                .as_str()
                .context("the upload has no url")?
                .to_owned()
        };
        body.insert("image_url".into(), json!(url));
    }
    let body = Value::Object(body);
    // One key for every retry of this submit: the server returns the original
    // generation instead of billing a second one.
    let idempotency_key = format!("cli-{}", vidgate_server::ids::random_token(24));
    let started_unix_millis = vidgate_server::store::now_millis();
    let submitted = client
        .send(
            Method::POST,
            &format!("/run/{endpoint}"),
            Some(&body),
            &[("Idempotency-Key", &idempotency_key)],
            true,
        )
        .await;
    let generation = match submitted {
        Ok((_, generation, _)) => generation,
        Err(error) if error.downcast_ref::<ApiError>().is_none() => {
            if let Some(found) =
                find_recent_match(client, endpoint, prompt, started_unix_millis).await
            {
                eprintln!(
                    "vidgate: the submit's outcome is unknown, but this matching generation exists; not resubmitting:"
                );
                print(&found, as_json, describe_generation);
                return Ok(());
            }
            return Err(error.context(
                "the submit's outcome is unknown; check `vidgate list` before submitting again",
            ));
        }
        Err(error) => return Err(error),
    };
    if !(*wait || out.is_some()) {
        print(&generation, as_json, describe_generation);
        return Ok(());
    }
    let finished = wait_until_final(client, generation).await?;
    print(&finished, as_json, describe_generation);
    if let Some(destination) = out {
        let url = finished["output"]["video_url"]
            .as_str()
            .context("the generation has no video to download")?;
        let size = download(client, url, destination).await?;
        eprintln!("vidgate: saved {size} bytes to {}", destination.display());
    }
    if finished["status"] != "succeeded" {
        bail!("the generation ended {}", finished["status"]);
    }
    Ok(())
}

/// The catalog as text: each model's label and id, and its endpoints.
fn describe_models(models: &Value) -> String {
    let mut lines = Vec::new();
    for model in models["data"].as_array().into_iter().flatten() {
        lines.push(format!(
            "{}  {}",
            model["label"].as_str().unwrap_or("?"),
            model["id"].as_str().unwrap_or("?")
        ));
        for endpoint in model["endpoints"].as_array().into_iter().flatten() {
            lines.push(format!("    {}", endpoint["id"].as_str().unwrap_or("?")));
        }
    }
    lines.join("\n")
}

/// A quote as text: the price, the list price and the saving.
fn describe_quote(quote: &Value) -> String {
    format!(
        "{}: ${} (list price ${}, you save ${})",
        quote["endpoint"].as_str().unwrap_or("?"),
        quote["cost"]["amount_usd"],
        quote["cost"]["official_usd"],
        quote["cost"]["saved_usd"]
    )
}

/// An upload as text: its id, type, size and URL.
fn describe_upload(upload: &Value) -> String {
    format!(
        "{}  {}  {} bytes\n  url: {}",
        upload["id"].as_str().unwrap_or("?"),
        upload["content_type"].as_str().unwrap_or("?"),
        upload["size_bytes"],
        upload["url"].as_str().unwrap_or("?")
    )
}

/// A page of generations as text, one line each.
fn describe_list(listed: &Value) -> String {
    listed["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(describe_generation)
        .collect::<Vec<_>>()
        .join("\n")
}

pub async fn run_command(command: ClientCommand) -> anyhow::Result<()> {
    let client = Client::new(command.connection())?;
    let as_json = command.connection().json;
    match command {
        ClientCommand::Models { .. } => {
            let models = client.get("/models").await?;
            print(&models, as_json, describe_models);
        }
        ClientCommand::Quote {
            endpoint,
            parameters,
            ..
        } => {
            let body = Value::Object(parameters_body(&parameters)?);
            let (_, quote, _) = client
                .send(
                    Method::POST,
                    &format!("/quote/{endpoint}"),
                    Some(&body),
                    &[],
                    true,
                )
                .await?;
            print(&quote, as_json, describe_quote);
        }
        ClientCommand::Run { options, .. } => {
            run(&client, &options, as_json).await?;
        }
        ClientCommand::Upload { file, .. } => {
            client.require_key()?;
            let upload = upload_file(&client, &file).await?;
            print(&upload, as_json, describe_upload);
        }
        ClientCommand::Get { id, .. } => {
            client.require_key()?;
            let generation = client.get(&format!("/generations/{id}")).await?;
            print(&generation, as_json, describe_generation);
        }
        ClientCommand::Cancel { id, .. } => {
            client.require_key()?;
            // Cancel is idempotent in effect: a repeat answers 409 at worst.
            let (_, generation, _) = client
                .send(
                    Method::POST,
                    &format!("/generations/{id}/cancel"),
                    None,
                    &[],
                    true,
                )
                .await?;
            print(&generation, as_json, describe_generation);
        }
        ClientCommand::List { limit, status, .. } => {
            client.require_key()?;
            let mut path = format!("/generations?limit={limit}");
            if let Some(status) = status {
                path.push_str(&format!("&status={status}"));
            }
            let listed = client.get(&path).await?;
            print(&listed, as_json, describe_list);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_spec_retryable_statuses_are_retried() {
        for code in [429, 500, 502, 503] {
            assert!(is_retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [400, 401, 402, 404, 409, 501] {
            assert!(!is_retryable(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }

    #[test]
    fn backoff_doubles_to_a_30_second_cap_with_jitter() {
        for (attempt, base) in [(0, 1), (1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (9, 30)] {
            let wait = backoff(attempt, None);
            assert!(
                wait >= Duration::from_secs(base) && wait < Duration::from_secs(base + 1),
                "{attempt}: {wait:?}"
            );
        }
        let honoured = backoff(0, Some(Duration::from_secs(7)));
        assert!(honoured >= Duration::from_secs(7) && honoured < Duration::from_secs(8));
        let capped = backoff(0, Some(Duration::from_secs(600)));
        assert!(capped < Duration::from_secs(31));
    }

    #[test]
    fn parameters_keep_their_json_types() {
        assert_eq!(
            parse_parameter("duration=8").unwrap(),
            ("duration".into(), json!(8))
        );
        assert_eq!(
            parse_parameter("generate_audio=false").unwrap(),
            ("generate_audio".into(), json!(false))
        );
        assert_eq!(
            parse_parameter("aspect_ratio=16:9").unwrap(),
            ("aspect_ratio".into(), json!("16:9"))
        );
        assert_eq!(
            parse_parameter("reference_image_urls=[\"https://a/b.png\"]")
                .unwrap()
                .1,
            json!(["https://a/b.png"])
        );
        assert!(parse_parameter("no-equals").is_err());
    }
}
