//! What every request and response of the public listener passes through,
//! in one layer: a request id (the client's `X-Request-Id`, or a new one),
//! a log span carrying it, the request's timing in the metrics, the spec's
//! error shape, and the id on the response.
//!
//! tower-http offers each of these as a layer of its own; four layers cost
//! four times the bookkeeping per request, which on a small read measured
//! more than the handler (BENCHMARKS.md, session 7).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::cog_callbacks;
use super::ensure_error_shape;
use super::error::{DatabaseUnreachable, LoggedByHandler};
use super::files;
use super::health::NotReady;
use crate::backend::loggable_provider_webhook_path;
use crate::health::Health;
use crate::metrics::{Metrics, UNMATCHED_ROUTE};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Runs the request inside its span and answers with its id. The route
/// template it is timed under comes from `NoteMatchedRoute`, which puts
/// it on the response (the routing happens inside this layer).
pub(super) async fn envelope(
    State((metrics, health)): State<(Arc<Metrics>, Arc<Health>)>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .cloned()
        .unwrap_or_else(new_request_id);
    let path = loggable_path(request.uri().path());
    let span = tracing::info_span!(
        "request",
        method = %method,
        path = %path,
        request_id = request_id.to_str().unwrap_or("-"),
    );
    let response = next.run(request).instrument(span.clone()).await;

    let status = response.status();
    let elapsed = started.elapsed();
    let route = response
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
    metrics.record_request(route, method.as_str(), status.as_u16(), elapsed);
    let latency_ms = elapsed.as_millis() as u64;
    if response.extensions().get::<DatabaseUnreachable>().is_some() {
        // One error for the whole outage, from `Health`, rather than one
        // per request it refused.
        health.database_unreachable();
    } else if status.is_server_error()
        && response.extensions().get::<NotReady>().is_none()
        && response.extensions().get::<LoggedByHandler>().is_none()
    {
        span.in_scope(|| tracing::error!(status = status.as_u16(), latency_ms, "response failed"));
    } else if tracing::enabled!(tracing::Level::DEBUG) {
        span.in_scope(|| {
            tracing::debug!(
                status = status.as_u16(),
                latency_ms,
                "finished processing request"
            );
        });
    }
    // The error is shaped after it was timed: shaping rebuilds some
    // responses, which drops the route template; the status stays.
    let mut response = ensure_error_shape(response);
    response.headers_mut().insert(REQUEST_ID, request_id);
    response
}

/// `path` without its capability segments (a Cog callback's or a provider
/// webhook's token, a file's name), which never reach a log or a trace.
pub(super) fn loggable_path(path: &str) -> Cow<'_, str> {
    match files::loggable_path(path) {
        Some(path) => Cow::Owned(path),
        None => match cog_callbacks::loggable_path(path) {
            Cow::Borrowed(path) => loggable_provider_webhook_path(path),
            redacted => redacted,
        },
    }
}

/// A random UUID (version 4) from the thread's generator; a `getrandom`
/// system call per request (tower-http's `MakeRequestUuid`) was about 4 %
/// of the CPU of a small read.
fn new_request_id() -> HeaderValue {
    let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    let mut text = uuid::Uuid::encode_buffer();
    HeaderValue::from_str(id.hyphenated().encode_lower(&mut text))
        .expect("a UUID is a valid header value")
}
