//! `POST /run/{vendor}/{model}/{mode}`: submit a generation; with `Prefer:
//! wait=N`, answered once it is final or after N seconds (`live.rs`), still
//! with 202.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, body_bytes, endpoint_from_path, live};
use crate::application::submit::{IDEMPOTENCY_KEY, submit_generation};
use crate::representation::GenerationRecord;
use crate::store::Caller;

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
    // Both refusals of a wait come before the submit, so neither charges.
    let wait = live::requested_wait(&headers)?;
    let slot = wait.map(|_| live::admit(&state, &caller)).transpose()?;
    let (mut generation, replayed) =
        submit_generation(&state, &caller, endpoint, &body, idempotency_key).await?;
    if let (Some(seconds), Some(slot)) = (wait, slot) {
        // A replay waits the same way: for the generation it first created.
        generation = live::wait_after_submit(&state, &caller, generation, seconds, slot).await?;
    }

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
    if let Some(seconds) = wait {
        live::mark_wait_applied(&state, &mut response, seconds);
    }
    Ok(response)
}
