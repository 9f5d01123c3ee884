//! OpenRouter's video API inside `/api/v1` (issue 53): `@openrouter/sdk`'s
//! `videoGeneration`, pointed at vidgate by `serverURL: ".../api/v1"` and a
//! vidgate key. Thin: the translation is `dialects::openrouter_videos`
//! (no I/O); the submit, reads and clip are `/api/v1`'s own. Every error
//! answer of these routes is rewritten into OpenRouter's error object by
//! `openrouter_errors`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::openapi::{
    BodyContent, Content, Door, Operation, Parameter, Refusal, RequestBody, Schema, Success,
    Surface, Tag, described, record,
};
use super::{API_PREFIX, ApiError, AppState, body_bytes, dialect_errors, openai_videos};
use crate::application::submit::{IDEMPOTENCY_KEY, Submission, submit};
use crate::dialects::Invalid;
use crate::dialects::openrouter_videos::{self, ErrorObject, Job, ModelList};
use crate::store::{Caller, Generation, Source};

const TAG: Tag = Tag {
    name: "openrouter-videos",
    description: "OpenRouter's video API inside /api/v1: @openrouter/sdk's videoGeneration with serverURL https://HOST/api/v1 and a vidgate key (docs/dialects.md). Errors are OpenRouter's error object: code is the HTTP status, metadata.code vidgate's error code.",
};

/// The model list's door: public like `/api/v1/models`.
const PUBLIC_DOOR: Door = Door {
    error: Schema::Of(record::<ErrorObject>),
    tag: Some(TAG),
    ..super::fair_use::PUBLIC
};

/// The jobs' door: the customers' key check.
const DOOR: Door = Door {
    mount: API_PREFIX,
    security: Some(super::API_KEY),
    tag: Some(TAG),
    refusals: super::KEY_CHECK_REFUSALS,
    rate_limit_headers: true,
    error: Schema::Of(record::<ErrorObject>),
};

/// The model list, within the public fair-use limit, in OpenRouter's
/// error shape.
pub(super) fn public_surface() -> Surface {
    Surface {
        door: &PUBLIC_DOOR,
        routes: vec![described(Method::GET, "/videos/models", models, &MODELS)],
        guard: |routes, state| {
            routes
                .route_layer(super::fair_use::FairUse::new(state.clone()))
                .route_layer(middleware::from_fn(openrouter_errors))
        },
    }
}

/// The jobs, behind the key check and rate limit of `/api/v1`, in
/// OpenRouter's error shape.
pub(super) fn surface() -> Surface {
    Surface {
        door: &DOOR,
        routes: vec![
            described(Method::POST, "/videos", create, &CREATE),
            described(Method::GET, "/videos/{id}", retrieve, &RETRIEVE),
            described(Method::GET, "/videos/{id}/content", content, &CONTENT),
        ],
        guard: |routes, state| {
            routes
                .route_layer(middleware::from_fn_with_state(
                    state.clone(),
                    super::authenticate,
                ))
                .route_layer(middleware::from_fn(openrouter_errors))
        },
    }
}

const NOT_FOUND: Refusal = Refusal {
    status: "404",
    description: "not_found: no video job of that id in this account.",
};

pub const CREATE: Operation = Operation {
    id: "openrouter_create_video",
    summary: "Create a video job (videoGeneration.generate)",
    parameters: &[super::runs::IDEMPOTENCY_KEY_PARAMETER],
    body: Some(RequestBody {
        required: true,
        content: BodyContent::Json(Schema::Of(|context| {
            openrouter_videos::create_schema(context.catalog)
        })),
    }),
    success: Success::json(
        "202",
        "The job, pending, its price held.",
        Schema::Of(record::<Job>),
    ),
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: a missing, unknown or out-of-range field; metadata.param names it as this API does.",
        },
        super::runs::INSUFFICIENT_BALANCE,
        super::runs::IDEMPOTENCY_CONFLICT,
        Refusal {
            status: "413",
            description: "payload_too_large: the body is larger than the limit.",
        },
        super::runs::UPSTREAM_REFUSED,
        super::runs::MODEL_UNAVAILABLE,
    ],
    ..Operation::PLAIN
};

pub const RETRIEVE: Operation = Operation {
    id: "openrouter_get_video",
    summary: "One video job (videoGeneration.getGeneration)",
    parameters: &[Parameter::Path("id")],
    success: Success::json("200", "The job.", Schema::Of(record::<Job>)),
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub const CONTENT: Operation = Operation {
    id: "openrouter_get_video_content",
    summary: "The MP4 of a completed job (videoGeneration.getVideoContent)",
    parameters: &[
        Parameter::Path("id"),
        Parameter::Query {
            name: "index",
            description: Some("Only 0: a job makes one video."),
            schema: Schema::Integer {
                minimum: Some(0),
                maximum: Some(0),
                default: Some(0),
                description: None,
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
            description: "invalid_request: an index other than 0.",
        },
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: the job has no content yet, or failed or was canceled.",
        },
        Refusal {
            status: "410",
            description: "gone: the clip was deleted after the retention time.",
        },
    ],
    ..Operation::PLAIN
};

pub const MODELS: Operation = Operation {
    id: "openrouter_list_video_models",
    summary: "Every model as OpenRouter's VideoModel (videoGeneration.listVideosModels)",
    success: Success::json("200", "The models.", Schema::Of(record::<ModelList>)),
    ..Operation::PLAIN
};

/// `POST /api/v1/videos`: 202 with the job (`videoGenerationGenerate`
/// accepts only 202).
async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let fields: Map<String, Value> = match serde_json::from_slice(&body) {
        Ok(Value::Object(fields)) => fields,
        _ => {
            return Err(ApiError::InvalidRequest {
                message: "The body must be a JSON object.".into(),
                param: None,
            });
        }
    };
    let translated = openrouter_videos::create_request(&state.catalog, fields).map_err(invalid)?;
    let idempotency_key = headers
        .get(IDEMPOTENCY_KEY)
        .map(|value| value.to_str().unwrap_or(""));
    let submission = Submission {
        body: &translated.body,
        idempotency_key,
        idempotency_request: &translated.body,
        source: Source::OpenRouter,
    };
    let (generation, replayed) = submit(&state, &caller, translated.endpoint, submission)
        .await
        .map_err(|error| {
            ApiError::from(error).with_param_renamed(openrouter_videos::surface_param)
        })?;
    let job = openrouter_videos::job_object(&generation, &state.api_base);
    let mut response = (StatusCode::ACCEPTED, Json(job)).into_response();
    super::runs::mark_replayed(response.headers_mut(), replayed);
    Ok(response)
}

fn invalid(invalid: Invalid) -> ApiError {
    ApiError::InvalidRequest {
        message: invalid.message,
        param: invalid.param,
    }
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
        .ok_or_else(|| ApiError::NotFound(format!("No video job {id:?} exists in this account.")))
}

/// `GET /api/v1/videos/{id}`.
async fn retrieve(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let generation = read_generation(&state, &caller, &id).await?;
    Ok(Json(openrouter_videos::job_object(&generation, &state.api_base)).into_response())
}

/// A query parameter the client's SDK never sends is refused (400), as
/// on `/api/v1`, rather than ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContentParameters {
    index: Option<String>,
}

/// `GET /api/v1/videos/{id}/content?index=0`: the clip as `video/mp4`
/// (`videoGenerationGetVideoContent` accepts only that type). An
/// unfinished job answers 409, which the SDK lists for this call.
async fn content(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    parameters: Result<Query<ContentParameters>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(parameters) = parameters?;
    if parameters
        .index
        .as_deref()
        .is_some_and(|index| index != "0")
    {
        return Err(ApiError::invalid(
            "index",
            "index must be 0: a job makes one video.",
        ));
    }
    let generation = read_generation(&state, &caller, &id).await?;
    openai_videos::clip_of(&state, &generation, headers, |message| ApiError::Conflict {
        message,
        param: None,
    })
    .await
}

/// `GET /api/v1/videos/models`: every catalog model as a `VideoModel`.
async fn models(State(state): State<AppState>) -> Response {
    let data = state
        .catalog
        .models()
        .iter()
        .map(openrouter_videos::model_object)
        .collect();
    Json(ModelList { data }).into_response()
}

/// Every JSON error answer of these routes in OpenRouter's error object:
/// its SDK reads `error.code` as a number (the HTTP status) and refuses
/// vidgate's text code.
async fn openrouter_errors(request: Request, next: Next) -> Response {
    dialect_errors::reshaped(next.run(request).await, openrouter_videos::error_object).await
}
