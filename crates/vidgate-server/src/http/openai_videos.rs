//! The OpenAI Videos API at `/v1/videos` (issue 53): the official `openai`
//! SDKs' `client.videos`, pointed at vidgate by `base_url=".../v1"` and a
//! vidgate key. Thin: each handler reads the request, translates it in
//! `dialects::openai_videos` (no I/O there), goes through the same submit,
//! reads and cancel as `/api/v1`, and writes the answer in OpenAI's shape.
//! Every error answer of these routes, the key check's and rate limit's
//! too, is rewritten into OpenAI's error object by `openai_errors`.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ApiError, AppState, dialect_errors, files, generations, uploads};
use crate::application::submit::{IDEMPOTENCY_KEY, Submission, submit};
use crate::dialects::openai_videos::{self, StoredReference};
use crate::dialects::{Invalid, form_to_object};
use crate::store::{Caller, Generation, ListFilter, Source};

/// Where the surface is mounted: clients set `base_url` to `https://HOST/v1`.
const PREFIX: &str = "/v1";

/// How long `create_and_poll` should sleep between two reads of an
/// unfinished video (`resources/videos.py`'s `poll` reads the
/// `openai-poll-after-ms` header, else sleeps 1 s): the same 5 s as the
/// `Retry-After` of `/api/v1`'s reads (SPEC.md section 6.2).
const POLL_AFTER_MS: u32 = 5_000;

/// The `input_reference` form field that carries a file.
const REFERENCE_FIELD: &str = "input_reference";

/// The routes, behind the same key check and rate limit as `/api/v1`, and
/// OpenAI's error shape around both.
pub fn routes(state: &AppState) -> Router<AppState> {
    let upload_limit = usize::try_from(state.max_upload_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(64 * 1024);
    Router::new()
        .route(
            &format!("{PREFIX}/videos"),
            get(list)
                .post(create)
                // Room for an `input_reference` file and the form around it.
                .layer(axum::extract::DefaultBodyLimit::max(upload_limit)),
        )
        .route(
            &format!("{PREFIX}/videos/{{id}}"),
            get(retrieve).delete(delete),
        )
        .route(&format!("{PREFIX}/videos/{{id}}/content"), get(content))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            super::authenticate,
        ))
        .route_layer(middleware::from_fn(openai_errors))
}

/// `POST /v1/videos`: a form (what the SDK always sends, `create` in
/// `resources/videos.py`) or a JSON body.
async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    request: Request,
) -> Result<Response, ApiError> {
    let idempotency_key = request
        .headers()
        .get(IDEMPOTENCY_KEY)
        .map(|value| value.to_str().unwrap_or("").to_owned());
    let is_form = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("multipart/form-data"));
    let (fields, file) = if is_form {
        read_form(&state, &caller, request).await?
    } else {
        let body = Bytes::from_request(request, &state)
            .await
            .map_err(|rejection| invalid_body(&rejection.to_string()))?;
        (read_json_object(&body)?, None)
    };
    let translated =
        openai_videos::create_request(&state.catalog, fields, is_form, file).map_err(invalid)?;
    let submission = Submission {
        body: &translated.body,
        idempotency_key: idempotency_key.as_deref(),
        idempotency_request: &translated.idempotency_request,
        source: Source::OpenAi,
    };
    let (generation, replayed) = submit(&state, &caller, translated.endpoint, submission)
        .await
        .map_err(|error| ApiError::from(error).with_param_renamed(openai_videos::surface_param))?;
    let mut response = video_response(&state, &generation);
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// The fields of a form as one object, the `input_reference` file kept as
/// an upload of the caller's account (`uploads::keep_upload`, the same
/// checks and quota as `POST /uploads`).
async fn read_form(
    state: &AppState,
    caller: &Caller,
    request: Request,
) -> Result<(Map<String, Value>, Option<StoredReference>), ApiError> {
    let mut multipart = Multipart::from_request(request, state)
        .await
        .map_err(|rejection| invalid_body(&rejection.to_string()))?;
    let mut pairs = Vec::new();
    let mut file = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|error| invalid_body(&error.to_string()))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        if name == REFERENCE_FIELD && field.file_name().is_some() {
            if file.is_some() {
                return Err(ApiError::invalid(
                    REFERENCE_FIELD,
                    "Send one input_reference file.",
                ));
            }
            let kept = uploads::keep_upload(state, caller, field)
                .await
                .map_err(|error| error.with_param_renamed(openai_videos::surface_param))?;
            file = Some(StoredReference {
                url: kept.record.url,
                sha256: kept.sha256,
            });
            continue;
        }
        let text = field
            .text()
            .await
            .map_err(|error| invalid_body(&error.to_string()))?;
        pairs.push((name, text));
    }
    Ok((form_to_object(pairs).map_err(invalid)?, file))
}

fn read_json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(invalid_body("The body must be a JSON object.")),
        Err(error) => Err(invalid_body(&format!(
            "The body is not valid JSON: {error}"
        ))),
    }
}

fn invalid_body(message: &str) -> ApiError {
    ApiError::InvalidRequest {
        message: format!("The request body could not be read: {message}"),
        param: None,
    }
}

fn invalid(invalid: Invalid) -> ApiError {
    ApiError::InvalidRequest {
        message: invalid.message,
        param: invalid.param,
    }
}

/// A Video object, with the pace of polling while it is unfinished.
fn video_response(state: &AppState, generation: &Generation) -> Response {
    let mut response =
        Json(openai_videos::video_object(generation, &state.catalog)).into_response();
    if !generation.status.is_final() {
        response
            .headers_mut()
            .insert("openai-poll-after-ms", HeaderValue::from(POLL_AFTER_MS));
    }
    response
}

async fn read_generation(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Generation, ApiError> {
    state
        .store
        .generations()
        .get(&caller.account_id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No video {id:?} exists in this account.")))
}

/// `GET /v1/videos/{id}`.
async fn retrieve(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let generation = read_generation(&state, &caller, &id).await?;
    Ok(video_response(&state, &generation))
}

/// `DELETE /v1/videos/{id}` (`VideoDeleteResponse`). A queued video is
/// canceled, as `/api/v1`'s cancel does, its hold released: it is gone
/// from the queue and from the bill, though its record stays readable (the
/// ledger names it). A finished one's record and clip are kept (the clip
/// until the retention time), so it answers `deleted: false`; a running
/// one that cannot be stopped answers 409 as `/api/v1`'s cancel does.
async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let generation = read_generation(&state, &caller, &id).await?;
    let deleted = if generation.status.is_final() {
        generation.status == vidgate_core::GenerationStatus::Canceled
    } else {
        generations::cancel_generation(&state, &caller, &id).await?;
        true
    };
    Ok(Json(json!({ "id": id, "object": "video.deleted", "deleted": deleted })).into_response())
}

#[derive(Deserialize)]
struct ContentParameters {
    variant: Option<String>,
}

/// `GET /v1/videos/{id}/content`: the MP4 bytes of a completed video
/// (`variant=video`, the default; vidgate makes no thumbnail or
/// spritesheet), served as `/api/v1/files` serves them.
async fn content(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    parameters: Result<Query<ContentParameters>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(parameters) = parameters?;
    if parameters
        .variant
        .as_deref()
        .is_some_and(|variant| variant != "video")
    {
        return Err(ApiError::invalid(
            "variant",
            "variant must be video: vidgate makes no thumbnail or spritesheet.",
        ));
    }
    let generation = read_generation(&state, &caller, &id).await?;
    clip_of(&state, &generation, headers, ApiError::NotFound).await
}

/// The stored clip of a succeeded generation as an answer (410 once the
/// retention sweep deleted it); any other state has none, and answers
/// `not_ready` with a message saying which state it is in.
pub(super) async fn clip_of(
    state: &AppState,
    generation: &Generation,
    headers: HeaderMap,
    not_ready: impl FnOnce(String) -> ApiError,
) -> Result<Response, ApiError> {
    let output = generation
        .output
        .as_ref()
        .and_then(|output| output.value().ok())
        .filter(|_| generation.status == vidgate_core::GenerationStatus::Succeeded)
        .ok_or_else(|| {
            not_ready(format!(
                "Video {:?} has no content: it is {}.",
                generation.id,
                generation.status.as_str()
            ))
        })?;
    if output["expired"] == Value::Bool(true) {
        return Err(ApiError::Gone(
            "The clip was deleted after the retention time.".into(),
        ));
    }
    let relative_path = output["video_url"]
        .as_str()
        .and_then(|url| crate::media::own_file_path(&state.api_base, url))
        .ok_or_else(|| ApiError::internal(std::io::Error::other("a clip URL is not ours")))?;
    files::serve_stored(state, relative_path, headers).await
}

#[derive(Deserialize)]
struct ListParameters {
    after: Option<String>,
    limit: Option<String>,
    order: Option<String>,
}

/// `GET /v1/videos` (`SyncConversationCursorPage`: `data`, `has_more` and
/// `last_id`, whose next page the SDK asks for with `after=last_id`),
/// newest first.
async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    parameters: Result<Query<ListParameters>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(parameters) = parameters?;
    let limit = match parameters.limit.as_deref() {
        None => generations::DEFAULT_PAGE_SIZE,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|limit| (1..=generations::MAX_PAGE_SIZE).contains(limit))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!(
                        "limit must be an integer from 1 to {}.",
                        generations::MAX_PAGE_SIZE
                    ),
                )
            })?,
    };
    match parameters.order.as_deref() {
        None | Some("desc") => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "order",
                "order must be desc: vidgate lists videos newest first.",
            ));
        }
    }
    let before = match parameters
        .after
        .as_deref()
        .filter(|after| !after.is_empty())
    {
        None => None,
        Some(after) => {
            let generation = state
                .store
                .generations()
                .get(&caller.account_id, after)
                .await?
                .ok_or_else(|| {
                    ApiError::invalid(
                        "after",
                        format!("No video {after:?} exists in this account."),
                    )
                })?;
            Some((generation.created_at, generation.id))
        }
    };
    let filter = ListFilter {
        status: None,
        model: None,
        before,
        // One more tells whether another page follows.
        limit: limit + 1,
    };
    let mut page = state
        .store
        .generations()
        .list(&caller.account_id, &filter)
        .await?;
    let has_more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let data: Vec<Value> = page
        .iter()
        .map(|generation| openai_videos::video_object(generation, &state.catalog))
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "first_id": page.first().map(|generation| generation.id.clone()),
        "last_id": page.last().map(|generation| generation.id.clone()),
        "has_more": has_more,
    }))
    .into_response())
}

/// Every JSON error answer of these routes (from a handler, the key check
/// or the rate limit) in OpenAI's error object, with the surface's field
/// names. A 409 is marked `x-should-retry: false`: the SDK retries a 409
/// as a lock timeout (`_base_client._should_retry`), but vidgate's 409s (a
/// reused idempotency key, a cancel too late) answer the same every time.
async fn openai_errors(request: Request, next: Next) -> Response {
    let mut response =
        dialect_errors::reshaped(next.run(request).await, openai_videos::error_object).await;
    if response.status() == StatusCode::CONFLICT {
        response
            .headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    response
}
