//! The SERVER span of each routed request while tracing is on (issue 54),
//! named by its route template (`POST /api/v1/run/{vendor}/{model}/{mode}`),
//! a child of the caller's span when the request carries a W3C
//! `traceparent`.
//!
//! A route layer, added only when tracing is on (`router`), because the
//! route template is known only once the router has matched it, and an
//! OpenTelemetry span's name is fixed when it starts. A request that
//! matches no route (a 404 of the fallback) has no span. With tracing off
//! the layer is not there, so a request costs what it did before.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::envelope::loggable_path;
use crate::telemetry;

pub(super) async fn server_span(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(String::new, |route| route.as_str().to_owned());
    let span = tracing::info_span!(
        "http.server",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
    );
    telemetry::continue_callers_trace(&span, request.headers());
    telemetry::describe(
        &span,
        &[
            ("http.request.method", method.as_str()),
            ("http.route", &route),
            ("url.path", &loggable_path(request.uri().path())),
        ],
    );
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    telemetry::describe_number(
        &span,
        "http.response.status_code",
        i64::from(status.as_u16()),
    );
    // OpenTelemetry's HTTP conventions: a server's span fails on a 5xx;
    // a 4xx is the caller's error, not the server's.
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}
