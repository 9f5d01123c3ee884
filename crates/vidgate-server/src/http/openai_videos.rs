//! The OpenAI Videos API at `/v1/videos` (issue 53): the official `openai`
//! SDKs' `client.videos`, pointed at vidgate by `base_url=".../v1"` and a
//! vidgate key. Thin: each handler reads the request, translates it in
//! `dialects::openai_videos` (no I/O there), goes through the same submit,
//! reads and cancel as `/api/v1`, and writes the answer in OpenAI's shape.
//! Every error answer of these routes, the key check's and rate limit's
//! too, is rewritten into OpenAI's error object by `openai_errors`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, FromRequest, Multipart, Path, Query, Request, State};
use axum::http::Method;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::openapi::{
    BodyContent, Content, Door, Header, Operation, Parameter, Refusal, RequestBody, Schema,
    Success, Surface, Tag, described, record,
};
use super::{ApiError, AppState, dialect_errors, files, generations, uploads};
use crate::application::submit::{IDEMPOTENCY_KEY, Submission, submit};
use crate::dialects::openai_videos::{
    self, ErrorObject, StoredReference, Video, VideoDeleted, VideoList,
};
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

/// The door: the customers' key check, in OpenAI's error object.
const DOOR: Door = Door {
    mount: PREFIX,
    security: Some(super::API_KEY),
    tag: Some(Tag {
        name: "openai-videos",
        description: "The OpenAI Videos API at /v1: the official openai SDKs' client.videos with base_url https://HOST/v1 and a vidgate key (docs/dialects.md). Errors are OpenAI's error object, whose code is vidgate's error code.",
    }),
    refusals: super::KEY_CHECK_REFUSALS,
    rate_limit_headers: true,
    error: Schema::Of(record::<ErrorObject>),
};

/// The routes behind the door, and OpenAI's error shape around the key
/// check, the rate limit and the handlers.
pub(super) fn surface(max_upload_bytes: u64) -> Surface {
    let video = "/videos/{id}";
    Surface {
        door: &DOOR,
        routes: vec![
            // Room for an `input_reference` file and the form around it.
            super::with_upload_limit(
                described(Method::POST, "/videos", create, &CREATE),
                max_upload_bytes,
            ),
            described(Method::GET, "/videos", list, &LIST),
            described(Method::GET, video, retrieve, &RETRIEVE),
            described(Method::DELETE, video, delete, &DELETE),
            described(Method::GET, "/videos/{id}/content", content, &CONTENT),
        ],
        guard: |routes, state| {
            routes
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    super::authenticate,
                ))
                .route_layer(middleware::from_fn(openai_errors))
        },
    }
}

/// The `openai-poll-after-ms` header of an unfinished video.
const POLL_AFTER_HEADER: Header = Header {
    name: "openai-poll-after-ms",
    description: "Milliseconds before reading the video again, while it is unfinished.",
    schema: Schema::INTEGER,
};

const NOT_FOUND: Refusal = Refusal {
    status: "404",
    description: "not_found: no video of that id in this account.",
};

pub const CREATE: Operation = Operation {
    id: "openai_create_video",
    summary: "Create a video (videos.create): a form, as the SDK sends, or JSON",
    parameters: &[super::runs::IDEMPOTENCY_KEY_PARAMETER],
    body: Some(RequestBody {
        required: true,
        content: BodyContent::FormOrJson {
            form: Schema::Of(|context| openai_videos::create_schema(context.catalog, true)),
            json: Schema::Of(|context| openai_videos::create_schema(context.catalog, false)),
        },
    }),
    success: Success {
        status: "200",
        description: "The video, queued, its price held.",
        content: Content::Json(Schema::Of(record::<Video>)),
        headers: &[POLL_AFTER_HEADER],
    },
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: a missing, unknown or out-of-range field; param names it as this API does (seconds, size, input_reference).",
        },
        super::runs::INSUFFICIENT_BALANCE,
        super::runs::IDEMPOTENCY_CONFLICT,
        Refusal {
            status: "413",
            description: "payload_too_large: the body or the input_reference file is larger than the limit.",
        },
        super::runs::UPSTREAM_REFUSED,
        super::runs::MODEL_UNAVAILABLE,
    ],
    ..Operation::PLAIN
};

pub const LIST: Operation = Operation {
    id: "openai_list_videos",
    summary: "The account's videos, newest first (videos.list)",
    parameters: &[
        Parameter::Query {
            name: "after",
            description: Some("The last id of the previous page."),
            schema: Schema::TEXT,
        },
        Parameter::Query {
            name: "limit",
            description: None,
            schema: Schema::Integer {
                minimum: Some(1),
                maximum: Some(generations::MAX_PAGE_SIZE as i64),
                default: Some(generations::DEFAULT_PAGE_SIZE as i64),
                description: None,
            },
        },
        Parameter::Query {
            name: "order",
            description: Some("Only desc: vidgate lists videos newest first."),
            schema: Schema::Choice {
                values: &["desc"],
                default: "desc",
            },
        },
    ],
    success: Success::json("200", "A page of videos.", Schema::Of(record::<VideoList>)),
    refusals: &[Refusal {
        status: "400",
        description: "invalid_request: a malformed limit or order, or an after that names no video of this account.",
    }],
    ..Operation::PLAIN
};

pub const RETRIEVE: Operation = Operation {
    id: "openai_retrieve_video",
    summary: "One video (videos.retrieve)",
    parameters: &[Parameter::Path("id")],
    success: Success {
        status: "200",
        description: "The video.",
        content: Content::Json(Schema::Of(record::<Video>)),
        headers: &[POLL_AFTER_HEADER],
    },
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub const DELETE: Operation = Operation {
    id: "openai_delete_video",
    summary: "Cancel an unfinished video (videos.delete); a finished one is kept",
    parameters: &[Parameter::Path("id")],
    success: Success::json(
        "200",
        "deleted is true when the video was canceled (now or before), false when it had finished.",
        Schema::Of(record::<VideoDeleted>),
    ),
    refusals: &[
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: the video is running and its model cannot stop it.",
        },
    ],
    ..Operation::PLAIN
};

pub const CONTENT: Operation = Operation {
    id: "openai_download_video_content",
    summary: "The MP4 of a completed video (videos.download_content)",
    parameters: &[
        Parameter::Path("id"),
        Parameter::Query {
            name: "variant",
            description: Some("Only video: vidgate makes no thumbnail or spritesheet."),
            schema: Schema::Choice {
                values: &["video"],
                default: "video",
            },
        },
    ],
    success: Success {
        status: "200",
        description: "The clip.",
        content: Content::Bytes("video/mp4"),
        headers: &[],
    },
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: a variant other than video.",
        },
        Refusal {
            status: "404",
            description: "not_found: no video of that id in this account, or it has no content (it is not completed).",
        },
        Refusal {
            status: "410",
            description: "gone: the clip was deleted after the retention time.",
        },
    ],
    ..Operation::PLAIN
};

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
    super::runs::mark_replayed(response.headers_mut(), replayed);
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
    Ok(Json(VideoDeleted::new(id, deleted)).into_response())
}

/// A query parameter the client's SDK never sends is refused (400), as
/// on `/api/v1`, rather than ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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

/// A query parameter the client's SDK never sends is refused (400), as
/// on `/api/v1`, rather than ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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
    let data: Vec<Video> = page
        .iter()
        .map(|generation| openai_videos::video_object(generation, &state.catalog))
        .collect();
    Ok(Json(VideoList {
        object: "list",
        first_id: data.first().map(|video| video.id.clone()),
        last_id: data.last().map(|video| video.id.clone()),
        data,
        has_more,
    })
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
