//! `POST /run/{vendor}/{model}/{mode}`: submit a generation.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, body_bytes, endpoint_from_path};
use crate::representation::GenerationRecord;
use crate::store::Caller;
use crate::submit::{IDEMPOTENCY_KEY, submit_generation};

pub async fn submit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(segments): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let endpoint = endpoint_from_path(&state.catalog, &segments)?;
    let body = body_bytes(body)?;
    // A header value that is not visible ASCII is passed on as an empty key,
    // which the submit path refuses as it refuses an empty one.
    let idempotency_key = headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| value.to_str().unwrap_or(""));
    let (generation, replayed) =
        submit_generation(&state, &caller, endpoint, &body, idempotency_key).await?;

    let url = format!("{}/generations/{}", state.api_base, generation.id);
    let mut response = (
        StatusCode::ACCEPTED,
        axum::Json(GenerationRecord::new(&generation, &state.api_base)),
    )
        .into_response();
    let response_headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&url) {
        response_headers.insert(header::LOCATION, location);
    }
    if replayed {
        response_headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}
