//! `GET /models` and `GET /models/{vendor}/{model}`: the public catalog,
//! cacheable by clients and proxies.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, AppState};
use crate::ids::sha256_hex;

/// The catalog changes only when the operator replaces it and restarts.
const CACHE_CONTROL: &str = "public, max-age=300";

/// A JSON response with a strong ETag, answering 304 when the client already
/// holds this version.
fn cacheable_json(request_headers: &HeaderMap, body: &Value) -> Response {
    let text = body.to_string();
    let etag = format!("\"{}\"", &sha256_hex(text.as_bytes())[..32]);
    let unchanged = request_headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| {
            tags.split(',')
                .any(|tag| tag.trim() == etag || tag.trim() == "*")
        });
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], text).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    response
}

pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let models: Vec<Value> = state
        .catalog
        .models()
        .iter()
        .map(|model| model.public_json(&state.api_base))
        .collect();
    cacheable_json(&headers, &json!({ "object": "list", "data": models }))
}

pub async fn show(
    State(state): State<AppState>,
    Path((vendor, model)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let model_id = format!("{vendor}/{model}");
    let model = state
        .catalog
        .model(&model_id)
        .ok_or_else(|| ApiError::NotFound(format!("No model {model_id:?} exists.")))?;
    Ok(cacheable_json(
        &headers,
        &model.public_json(&state.api_base),
    ))
}
