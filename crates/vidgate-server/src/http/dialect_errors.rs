//! Error answers in another service's shape, for the routes of the other
//! dialects (issue 53): vidgate's error body (`error.rs`, from a handler,
//! the key check or the rate limit) is read back and written as the
//! dialect's, with the same status and headers.

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

/// `response` with its JSON error body in `shape`, which writes a dialect's
/// error record from the status and vidgate's code, message and field at
/// fault; any other answer as it is.
pub async fn reshaped<E: Serialize>(
    response: Response,
    shape: fn(status: u16, code: &str, message: &str, param: Option<&str>) -> E,
) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // vidgate's error bodies are a few hundred bytes.
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return (parts.status, parts.headers).into_response();
    };
    let vidgate: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let error = &vidgate["error"];
    let reshaped = shape(
        status.as_u16(),
        error["code"].as_str().unwrap_or("error"),
        error["message"].as_str().unwrap_or(""),
        error["param"].as_str(),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::to_vec(&reshaped).expect("an error record is plain JSON");
    Response::from_parts(parts, Body::from(body))
}
