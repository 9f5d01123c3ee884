//! Traces over OTLP/HTTP (issue 54), on when the standard `OTEL_*`
//! variables ask for them and absent otherwise.
//!
//! The `opentelemetry` crates read the variables themselves (the endpoint,
//! its headers, the sampler and the resource); this module decides whether
//! tracing is on at all, refuses what the binary cannot do (a protocol other
//! than `http/protobuf`), starts the exporter, and gives the rest of the
//! server a few verbs that are free when tracing is off: carry a trace
//! across the queue as W3C `traceparent` text, continue a caller's trace,
//! pass ours to a provider, and mark a span failed.
//!
//! Which spans are exported, and how a log line names its trace, is the
//! binary's subscriber's business (`vidgate/src/logging.rs`).

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The service name of the traces unless `OTEL_SERVICE_NAME` (or
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES`) names another.
pub const DEFAULT_SERVICE_NAME: &str = "vidgate";

/// Whether this process exports traces: set once, before the server starts,
/// and read by the paths that only do tracing's work when it is on.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are exported.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// What the `OTEL_*` variables ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingSettings {
    /// `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name no service, so
    /// the traces are `vidgate`'s.
    pub default_service_name: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TelemetryError {
    #[error(
        "{variable}={value:?}: vidgate exports traces over http/protobuf only; set it to http/protobuf or leave it unset"
    )]
    UnsupportedProtocol {
        variable: &'static str,
        value: String,
    },
    #[error("the OTLP trace exporter could not be built: {0}")]
    Exporter(String),
}

/// Reads the `OTEL_*` variables through `variable`: tracing is on when an
/// endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none` turn it off. Without an endpoint nothing is
/// exported: the SDK's default (localhost:4318) is never dialled.
pub fn tracing_settings(
    variable: impl Fn(&str) -> Option<String>,
) -> Result<Option<TracingSettings>, TelemetryError> {
    let set = |name: &str| variable(name).filter(|value| !value.trim().is_empty());
    let endpoint =
        set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let disabled = set("OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|value| value.eq_ignore_ascii_case("none"));
    if endpoint.is_none() || disabled {
        return Ok(None);
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(value) = set(name).filter(|value| value != "http/protobuf") {
            return Err(TelemetryError::UnsupportedProtocol {
                variable: name,
                value,
            });
        }
    }
    let names_a_service = set("OTEL_SERVICE_NAME").is_some()
        || set("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
    Ok(Some(TracingSettings {
        default_service_name: !names_a_service,
    }))
}

/// The exporter while it runs: its batch processor sends from a thread of
/// its own with the blocking HTTP client, so it needs no runtime. `shutdown`
/// sends what is still buffered.
pub struct Tracing {
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Starts the exporter and turns tracing on; the tracer is what the
    /// subscriber's OpenTelemetry layer records into.
    pub fn start(settings: &TracingSettings) -> Result<(Tracing, SdkTracer), TelemetryError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
            .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
        let resource = if settings.default_service_name {
            Resource::builder()
                .with_service_name(DEFAULT_SERVICE_NAME)
                .build()
        } else {
            Resource::builder().build()
        };
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("vidgate");
        ON.store(true, Ordering::Relaxed);
        Ok((Tracing { provider }, tracer))
    }

    /// Sends the spans still buffered and stops the exporter.
    pub fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(error = %error, "the trace exporter did not shut down cleanly");
        }
    }
}

/// `span`'s place in its trace as W3C `traceparent` text, to be stored with
/// a generation so the work done for it later, on any node, joins the
/// trace; `None` when tracing is off or the span is not traced.
pub fn traceparent_of(span: &Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let mut carrier = Carrier::default();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.traceparent
}

/// Makes `span` a child of the span `traceparent` names (stored with a
/// generation by `traceparent_of`). Call it before the span is entered.
pub fn continue_trace(span: &Span, traceparent: &str) {
    if !enabled() {
        return;
    }
    let carrier = Carrier {
        traceparent: Some(traceparent.to_owned()),
    };
    let parent = TraceContextPropagator::new().extract(&carrier);
    if parent.span().span_context().is_valid() {
        // Refused only once the span has started; the callers set the
        // parent first.
        let _ = span.set_parent(parent);
    }
}

/// Makes `span` a child of the caller's span, when the request carries a
/// W3C `traceparent` (and `tracestate`). Call it before the span is entered.
pub fn continue_callers_trace(span: &Span, headers: &axum::http::HeaderMap) {
    if !enabled() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Adds `span`'s `traceparent` to an outgoing request's headers, so the
/// server it calls (a provider) can join the trace.
pub fn pass_on(span: &Span, headers: &mut axum::http::HeaderMap) {
    if !enabled() {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeadersMut(headers));
}

/// Sets OpenTelemetry attributes on `span`, which the log lines do not show.
pub fn describe(span: &Span, attributes: &[(&'static str, &str)]) {
    if !enabled() {
        return;
    }
    for (key, value) in attributes {
        span.set_attribute(*key, value.to_string());
    }
}

/// Sets a numeric OpenTelemetry attribute on `span` (an HTTP status).
pub fn describe_number(span: &Span, key: &'static str, value: i64) {
    if !enabled() {
        return;
    }
    span.set_attribute(key, value);
}

/// Marks `span` failed with `code` (`error.type`), as a failed generation or
/// a failed delivery shows in its trace.
pub fn mark_failed(span: &Span, code: &str) {
    if !enabled() {
        return;
    }
    span.set_attribute("error.type", code.to_owned());
    span.set_status(Status::error(code.to_owned()));
}

/// The trace and span of a log line, in hex.
pub struct TraceIds {
    pub trace_id: String,
    pub span_id: String,
}

/// The ids of the span the caller is in, when it is traced.
pub fn current_trace_ids() -> Option<TraceIds> {
    if !enabled() {
        return None;
    }
    let context = Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| TraceIds {
        trace_id: span_context.trace_id().to_string(),
        span_id: span_context.span_id().to_string(),
    })
}

/// A `traceparent` held as text.
#[derive(Default)]
struct Carrier {
    traceparent: Option<String>,
}

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        if key == "traceparent" {
            self.traceparent = Some(value);
        }
    }
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.traceparent.as_deref()?)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut axum::http::HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::try_from(key),
            axum::http::HeaderValue::try_from(value),
        ) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(variables: &[(&str, &str)]) -> Result<Option<TracingSettings>, TelemetryError> {
        let variables: HashMap<String, String> = variables
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        tracing_settings(|name| variables.get(name).cloned())
    }

    #[test]
    fn tracing_is_off_without_an_endpoint_and_when_turned_off() {
        assert_eq!(settings(&[]), Ok(None));
        // The sampler and the service name alone do not turn it on.
        assert_eq!(
            settings(&[
                ("OTEL_SERVICE_NAME", "gateway"),
                ("OTEL_TRACES_SAMPLER", "always_on")
            ]),
            Ok(None)
        );
        assert_eq!(settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), Ok(None));
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                settings(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                    off
                ]),
                Ok(None)
            );
        }
    }

    #[test]
    fn either_endpoint_turns_tracing_on_with_vidgate_as_the_default_service() {
        for endpoint in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            assert_eq!(
                settings(&[(endpoint, "http://collector:4318")]),
                Ok(Some(TracingSettings {
                    default_service_name: true
                }))
            );
        }
        for named in [
            ("OTEL_SERVICE_NAME", "gateway"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod, service.name=gateway",
            ),
        ] {
            assert_eq!(
                settings(&[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                    named
                ]),
                Ok(Some(TracingSettings {
                    default_service_name: false
                }))
            );
        }
    }

    #[test]
    fn a_protocol_other_than_http_protobuf_is_refused() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert!(
            settings(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])
                .unwrap()
                .is_some()
        );
        for (variable, value) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ] {
            assert_eq!(
                settings(&[endpoint, (variable, value)]),
                Err(TelemetryError::UnsupportedProtocol {
                    variable,
                    value: value.to_owned()
                })
            );
        }
    }

    /// With tracing off (no subscriber layer, `ON` unset), the verbs do
    /// nothing: no trace context is made or stored.
    #[test]
    fn the_verbs_do_nothing_while_tracing_is_off() {
        let span = tracing::info_span!("job.run");
        assert_eq!(traceparent_of(&span), None);
        let mut headers = axum::http::HeaderMap::new();
        pass_on(&span, &mut headers);
        assert!(headers.is_empty());
    }
}
