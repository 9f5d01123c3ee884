//! The log subscriber of `vidgate serve`, and with `OTEL_*` set the
//! OpenTelemetry layer that exports its traces (issue 54,
//! `vidgate_server::telemetry`).
//!
//! Without tracing the subscriber is what it always was: the formatter
//! behind `VIDGATE_LOG`'s filter. With tracing, the formatter writes each
//! line's `trace_id` and `span_id` (as fields of `--log-json`), and the
//! OpenTelemetry layer sees only the spans of a generation's life and of
//! the requests: background work (claims that find nothing, sweeps, the
//! rescuer, budget refills) makes no traces.

use std::io::IsTerminal;

use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{self as formatter, FmtContext};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use vidgate_server::telemetry::{self, TelemetryError, Tracing};

/// Installs the subscriber; starts the trace exporter when the `OTEL_*`
/// variables ask for it, and answers it so it is shut down (flushed) at
/// exit.
pub fn init(json: bool) -> Result<Option<Tracing>, TelemetryError> {
    let settings = match telemetry::tracing_settings(|name| std::env::var(name).ok()) {
        Ok(Some(settings)) => settings,
        Ok(None) => {
            init_without_tracing(json);
            return Ok(None);
        }
        Err(error) => {
            init_without_tracing(json);
            return Err(error);
        }
    };
    let (tracing, tracer) = match Tracing::start(&settings) {
        Ok(started) => started,
        Err(error) => {
            init_without_tracing(json);
            return Err(error);
        }
    };
    let exported = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(is_exported));
    let lines = formatter::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // `VIDGATE_LOG` filters the lines only: a quiet log (`error`) still
    // exports every span of a trace.
    let registry = tracing_subscriber::registry().with(exported);
    if json {
        registry
            .with(
                lines
                    .json()
                    .event_format(WithTraceIds::json(format::format().json()))
                    .with_filter(filter()),
            )
            .init();
    } else {
        registry
            .with(
                lines
                    .event_format(WithTraceIds::text(format::format()))
                    .with_filter(filter()),
            )
            .init();
    }
    Ok(Some(tracing))
}

fn filter() -> EnvFilter {
    EnvFilter::try_from_env("VIDGATE_LOG").unwrap_or_else(|_| EnvFilter::new("info"))
}

fn init_without_tracing(json: bool) {
    // Colours only for a person at a terminal: a log file or journald would
    // keep the escape codes, and writing them costs every request's span.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The spans a trace is made of: each request's SERVER span, a job's run
/// and what it calls, and each webhook delivery; and the log events (at
/// `info` and above) inside them, as span events.
fn is_exported(metadata: &Metadata<'_>) -> bool {
    let name = metadata.name();
    if *metadata.level() > Level::INFO {
        return false;
    }
    metadata.is_event()
        || matches!(
            name,
            "http.server" | "job.run" | "webhook.deliver" | "cog.predict"
        )
        || name.starts_with("provider.")
}

/// A line format that adds the `trace_id` and `span_id` of the span the
/// event is in, when that span is traced: as the first fields of a JSON
/// line, or at the end of a text line.
struct WithTraceIds<F> {
    inner: F,
    json: bool,
}

impl<F> WithTraceIds<F> {
    fn json(inner: F) -> Self {
        WithTraceIds { inner, json: true }
    }

    fn text(inner: F) -> Self {
        WithTraceIds { inner, json: false }
    }
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
    N: for<'writer> FormatFields<'writer> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let Some(ids) = telemetry::current_trace_ids() else {
            return self.inner.format_event(context, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(context, Writer::new(&mut line), event)?;
        let (trace_id, span_id) = (&ids.trace_id, &ids.span_id);
        match line.strip_prefix('{').filter(|_| self.json) {
            Some(fields) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{fields}"
            ),
            None => writeln!(
                writer,
                "{} trace_id={trace_id} span_id={span_id}",
                line.trim_end_matches('\n')
            ),
        }
    }
}
