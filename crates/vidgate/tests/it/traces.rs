//! Traces over OTLP/HTTP (issue 54), read by an OTLP receiver the tests
//! start: `vidgate serve` with `OTEL_EXPORTER_OTLP_ENDPOINT` sends the
//! spans of a generation's life, one trace from the customer's request
//! through the queue (on another node on PostgreSQL), each provider call
//! (which passes its `traceparent` on) and each webhook delivery; log lines
//! carry the trace's ids. Without `OTEL_*`, nothing is sent anywhere.

use crate::support::{self, Node};
use crate::test_database::{PostgresTestDatabase, postgres_server_url};

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use prost::Message;
use serde_json::{Value, json};

/// A span as the receiver was sent it.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    name: String,
    kind: SpanKind,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, String>,
    status: SpanStatus,
    /// The resource's attributes (`service.name`, `service.instance.id`).
    resource: HashMap<String, String>,
}

/// An OTLP/HTTP receiver (`POST /v1/traces`, protobuf), keeping every span.
struct Receiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            let value = match pair.value.as_ref().and_then(|value| value.value.as_ref()) {
                Some(AnyValue::StringValue(text)) => text.clone(),
                Some(AnyValue::IntValue(number)) => number.to_string(),
                Some(AnyValue::BoolValue(flag)) => flag.to_string(),
                Some(AnyValue::DoubleValue(number)) => number.to_string(),
                other => format!("{other:?}"),
            };
            (pair.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

async fn receive(State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>, body: Bytes) -> StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut received = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = attributes(
            &resource_spans
                .resource
                .map(|resource| resource.attributes)
                .unwrap_or_default(),
        );
        for span in resource_spans
            .scope_spans
            .into_iter()
            .flat_map(|scope| scope.spans)
        {
            received.push(ReceivedSpan {
                name: span.name.clone(),
                kind: SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified),
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_span_id: hex(&span.parent_span_id),
                attributes: attributes(&span.attributes),
                status: span
                    .status
                    .and_then(|status| SpanStatus::try_from(status.code).ok())
                    .unwrap_or(SpanStatus::Unset),
                resource: resource.clone(),
            });
        }
    }
    StatusCode::OK
}

impl Receiver {
    async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let router = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Receiver {
            endpoint,
            spans,
            task,
        }
    }

    /// The spans of `trace_id` once `wanted` holds of them, waiting for
    /// the exporters' batches (sent every few seconds).
    async fn trace_where(
        &self,
        trace_id: &str,
        wanted: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let trace: Vec<ReceivedSpan> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|span| span.trace_id == trace_id)
                .cloned()
                .collect();
            if wanted(&trace) {
                return trace;
            }
            if Instant::now() > deadline {
                let all: Vec<(String, String)> = self
                    .spans
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|span| (span.trace_id.clone(), span.name.clone()))
                    .collect();
                panic!("the trace never had what was wanted: {trace:#?}; every span: {all:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn named<'a>(trace: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    trace.iter().filter(|span| span.name == name).collect()
}

fn has(trace: &[ReceivedSpan], name: &str) -> bool {
    trace.iter().any(|span| span.name == name)
}

/// A provider that refuses every job with 422 (Replicate's problem+json),
/// keeping the `traceparent` each request carried.
struct RefusingProvider {
    api_url: String,
    traceparents: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RefusingProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn refuse(
    State(traceparents): State<Arc<Mutex<Vec<String>>>>,
    headers: HeaderMap,
) -> impl IntoResponse {
    if let Some(traceparent) = headers.get("traceparent") {
        traceparents
            .lock()
            .unwrap()
            .push(traceparent.to_str().unwrap().to_owned());
    }
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        [("content-type", "application/problem+json")],
        json!({ "title": "Input validation failed", "detail": "the fake refuses every job",
            "status": 422 })
        .to_string(),
    )
}

impl RefusingProvider {
    async fn start() -> RefusingProvider {
        let traceparents = Arc::new(Mutex::new(Vec::new()));
        let router = Router::new()
            .fallback(post(refuse))
            .with_state(traceparents.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        RefusingProvider {
            api_url,
            traceparents,
            task,
        }
    }

    /// A backends file that sends vendor_2/model_2 to this provider, as
    /// `examples/hosted/replicate.json` configures it.
    fn backends_file(&self, directory: &Path) -> String {
        let example =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hosted/replicate.json");
        let example: Value =
            serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
        let mut model = example["models"]["vendor_2/model_2"].clone();
        model["api_url"] = json!(self.api_url);
        let file = directory.join("backends.json");
        let backends = json!({ "models": { "vendor_2/model_2": model } });
        std::fs::write(&file, backends.to_string()).unwrap();
        file.to_str().unwrap().to_owned()
    }
}

/// A webhook receiver that answers 204 to every delivery.
async fn start_webhook_receiver() -> (String, tokio::task::JoinHandle<()>) {
    let router = Router::new().fallback(post(|| async { StatusCode::NO_CONTENT }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (url, task)
}

/// The caller's span: the trace the test starts, as a W3C `traceparent`.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// Submits a generation with the caller's `traceparent`; its id.
async fn submit(api_base: &str, api_key: &str, endpoint: &str, body: Value) -> String {
    let response = reqwest::Client::new()
        .post(format!("{api_base}/run/{endpoint}"))
        .bearer_auth(api_key)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let generation: Value = response.json().await.unwrap();
    generation["id"].as_str().unwrap().to_owned()
}

/// The environment of a node that exports to `receiver` as `instance`.
fn tracing_environment<'a>(receiver: &'a Receiver, instance: &'a str) -> Vec<(&'a str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("service.instance.id={instance}"),
        ),
        // Batches leave quickly, so the test does not wait for them.
        ("OTEL_BSP_SCHEDULE_DELAY", "200".to_owned()),
        ("REPLICATE_API_TOKEN", "r8_tracing_test".to_owned()),
    ]
}

fn start(environment: &[(&str, String)], arguments: &[&str], log: Option<&Path>) -> Node {
    let environment: Vec<(&str, &str)> = environment
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    match log {
        Some(log) => support::start_node_logging_to(&environment, arguments, log),
        None => support::start_node(&environment, arguments),
    }
}

fn create_account(environment: &[(&str, String)]) -> String {
    let environment: Vec<(&str, &str)> = environment
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let created = support::admin(
        &environment,
        &[
            "account",
            "create",
            "--name",
            "traced",
            "--credit-usd",
            "50",
        ],
    );
    created["api_key"].as_str().unwrap().to_owned()
}

/// The local job that succeeds and tells a webhook receiver: the request's
/// SERVER span continues the caller's, the job's run (`node`) continues
/// the request's, and the delivery is a CLIENT span of the same trace.
async fn check_a_generation_is_one_trace(
    receiver: &Receiver,
    api_base: &str,
    api_key: &str,
    webhook_url: &str,
    worker_instance: &str,
) {
    let id = submit(
        api_base,
        api_key,
        "vendor_1/model_1/text-to-video",
        json!({ "prompt": "a traced kite", "duration": 2, "resolution": "480p",
            "generate_audio": false, "webhook_url": webhook_url }),
    )
    .await;
    let trace = receiver
        .trace_where(CALLER_TRACE, |trace| {
            has(trace, "POST /api/v1/run/{vendor}/{model}/{mode}")
                && has(trace, "job.run")
                && has(trace, "webhook.deliver")
        })
        .await;
    let server = named(&trace, "POST /api/v1/run/{vendor}/{model}/{mode}")[0];
    assert_eq!(server.kind, SpanKind::Server);
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    assert_eq!(server.attributes["http.request.method"], "POST");
    assert_eq!(
        server.attributes["http.route"],
        "/api/v1/run/{vendor}/{model}/{mode}"
    );
    assert_eq!(
        server.attributes["url.path"],
        "/api/v1/run/vendor_1/model_1/text-to-video"
    );
    assert_eq!(server.attributes["http.response.status_code"], "202");
    assert_eq!(server.attributes["vidgate.generation.id"], id);
    assert_eq!(
        server.attributes["gen_ai.request.model"],
        "vendor_1/model_1"
    );
    assert!(server.attributes["vidgate.account.id"].starts_with("acct_"));
    assert_eq!(server.resource["service.name"], "vidgate");

    let run = named(&trace, "job.run")[0];
    assert_eq!(
        run.parent_span_id, server.span_id,
        "the run continues the submit"
    );
    assert_eq!(run.attributes["vidgate.generation.id"], id);
    assert_eq!(run.status, SpanStatus::Unset);
    assert_eq!(run.resource["service.instance.id"], worker_instance);

    let delivery = named(&trace, "webhook.deliver")[0];
    assert_eq!(delivery.kind, SpanKind::Client);
    assert_eq!(delivery.attributes["http.response.status_code"], "204");
    assert_eq!(delivery.parent_span_id, server.span_id);
}

/// The hosted job its provider refuses: the provider's call is a CLIENT
/// span whose `traceparent` the provider received, and the failed run is
/// an ERROR span carrying the generation's error code.
async fn check_a_provider_call_and_a_failure_are_traced(
    receiver: &Receiver,
    provider: &RefusingProvider,
    api_base: &str,
    api_key: &str,
) {
    let id = submit(
        api_base,
        api_key,
        "vendor_2/model_2/text-to-video",
        json!({ "prompt": "a refused kite" }),
    )
    .await;
    let trace = receiver
        .trace_where(CALLER_TRACE, |trace| {
            trace.iter().any(|span| {
                span.name == "job.run" && span.attributes["vidgate.generation.id"] == id
            }) && has(trace, "POST replicate")
        })
        .await;
    let call = named(&trace, "POST replicate")[0];
    assert_eq!(call.kind, SpanKind::Client);
    assert_eq!(call.attributes["gen_ai.provider.name"], "replicate");
    assert_eq!(call.attributes["http.response.status_code"], "422");
    assert_eq!(call.status, SpanStatus::Error);
    let sent = format!("00-{}-{}-01", call.trace_id, call.span_id);
    assert!(
        provider.traceparents.lock().unwrap().contains(&sent),
        "the provider was not sent {sent}: {:?}",
        provider.traceparents.lock().unwrap()
    );
    let run = trace
        .iter()
        .find(|span| span.name == "job.run" && span.attributes["vidgate.generation.id"] == id)
        .unwrap();
    assert_eq!(run.status, SpanStatus::Error);
    let generation = support::get_json(
        &reqwest::Client::new(),
        api_base,
        &format!("/generations/{id}"),
        api_key,
    )
    .await;
    assert_eq!(generation["status"], "failed");
    assert_eq!(run.attributes["error.type"], generation["error"]["code"]);
}

#[tokio::test]
async fn one_node_on_sqlite_traces_each_generation_over_otlp() {
    let receiver = Receiver::start().await;
    let provider = RefusingProvider::start().await;
    let (webhook_url, _webhooks) = start_webhook_receiver().await;
    let data_dir = tempfile::tempdir().unwrap();
    let log = data_dir.path().join("serve.log");
    let mut environment = tracing_environment(&receiver, "only-node");
    environment.push(("VIDGATE_DATA_DIR", data_dir.path().to_str().unwrap().into()));
    let backends = provider.backends_file(data_dir.path());
    let node = start(
        &environment,
        &[
            "--backends-file",
            &backends,
            "--allow-private-network",
            "--log-json",
        ],
        Some(&log),
    );
    let api_key = create_account(&environment);
    check_a_generation_is_one_trace(
        &receiver,
        node.api_base(),
        &api_key,
        &webhook_url,
        "only-node",
    )
    .await;
    check_a_provider_call_and_a_failure_are_traced(&receiver, &provider, node.api_base(), &api_key)
        .await;

    // The log lines inside the trace name it, as fields of --log-json.
    let lines = std::fs::read_to_string(&log).unwrap();
    let traced: Vec<Value> = lines
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["trace_id"] == CALLER_TRACE)
        .collect();
    assert!(
        traced
            .iter()
            .any(|line| line["fields"]["message"] == "job started" && line["span_id"].is_string()),
        "no log line of the job names its trace:\n{lines}"
    );
}

#[tokio::test]
async fn a_job_run_on_another_postgres_node_continues_the_requests_trace() {
    let Some(server_url) =
        postgres_server_url("a_job_run_on_another_postgres_node_continues_the_requests_trace")
    else {
        return;
    };
    let database = PostgresTestDatabase::create(&server_url).await;
    let receiver = Receiver::start().await;
    let provider = RefusingProvider::start().await;
    let (webhook_url, _webhooks) = start_webhook_receiver().await;
    let data_dir = tempfile::tempdir().unwrap();
    let backends = provider.backends_file(data_dir.path());
    let node_environment = |instance| {
        let mut environment = tracing_environment(&receiver, instance);
        environment.push(("VIDGATE_DATABASE_URL", database.url.clone()));
        environment.push(("VIDGATE_DATA_DIR", data_dir.path().to_str().unwrap().into()));
        environment
    };
    let arguments = |role| {
        vec![
            "--role",
            role,
            "--backends-file",
            backends.as_str(),
            "--allow-private-network",
        ]
    };
    let api_node = start(&node_environment("api-node"), &arguments("api"), None);
    let _worker_node = start(&node_environment("worker-node"), &arguments("worker"), None);
    let api_key = create_account(&node_environment("api-node"));
    check_a_generation_is_one_trace(
        &receiver,
        api_node.api_base(),
        &api_key,
        &webhook_url,
        "worker-node",
    )
    .await;
    check_a_provider_call_and_a_failure_are_traced(
        &receiver,
        &provider,
        api_node.api_base(),
        &api_key,
    )
    .await;
}

/// Without `OTEL_EXPORTER_OTLP_ENDPOINT` nothing is exported, not even to
/// the SDK's default endpoint (127.0.0.1:4318), although other `OTEL_*`
/// variables are set.
#[tokio::test]
async fn without_an_endpoint_nothing_connects_to_a_collector() {
    let listener = match std::net::TcpListener::bind("127.0.0.1:4318") {
        Ok(listener) => listener,
        Err(error) => {
            panic!("the OTLP default port 4318 is taken, so this cannot be checked: {error}")
        }
    };
    listener.set_nonblocking(true).unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let environment = vec![
        (
            "VIDGATE_DATA_DIR",
            data_dir.path().to_str().unwrap().to_owned(),
        ),
        ("OTEL_SERVICE_NAME", "gateway".to_owned()),
        ("OTEL_TRACES_SAMPLER", "always_on".to_owned()),
    ];
    let node = start(&environment, &[], None);
    let api_key = create_account(&environment);
    let id = submit(
        node.api_base(),
        &api_key,
        "vendor_1/model_1/text-to-video",
        json!({ "prompt": "an untraced kite", "duration": 2, "resolution": "480p",
            "generate_audio": false }),
    )
    .await;
    support::wait_until_all_succeeded(
        &reqwest::Client::new(),
        node.api_base(),
        &api_key,
        &[id],
        Duration::from_secs(60),
        Duration::from_millis(100),
        "the submit",
    )
    .await;
    // Longer than the exporter's batch delay (5 s by default), had it run.
    tokio::time::sleep(Duration::from_secs(6)).await;
    match listener.accept() {
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("something connected to 127.0.0.1:4318: {other:?}"),
    }
}
