//! OpenRouter's video API inside `/api/v1` (issue 53): `@openrouter/sdk`'s
//! `videoGeneration`, pointed at vidgate by `serverURL: ".../api/v1"` and a
//! vidgate key. Thin: the translation is `dialects::openrouter_videos`
//! (no I/O); the submit, reads and clip are `/api/v1`'s own. Every error
//! answer of these routes is rewritten into OpenRouter's error object by
//! `openrouter_errors`.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ApiError, AppState, api_path, body_bytes, dialect_errors, openai_videos};
use crate::application::submit::{IDEMPOTENCY_KEY, Submission, submit};
use crate::dialects::Invalid;
use crate::dialects::openrouter_videos;
use crate::store::{Caller, Generation, Source};

/// The routes: the model list is public like `/api/v1/models`; the jobs
/// are behind the key check and rate limit of `/api/v1`.
pub fn routes(state: &AppState) -> Router<AppState> {
    let public = Router::new()
        .route(&api_path("/videos/models"), get(models))
        .route_layer(super::fair_use::FairUse::new(state.clone()));
    let authenticated = Router::new()
        .route(&api_path("/videos"), post(create))
        .route(&api_path("/videos/{id}"), get(retrieve))
        .route(&api_path("/videos/{id}/content"), get(content))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            super::authenticate,
        ));
    Router::new()
        .merge(public)
        .merge(authenticated)
        .route_layer(middleware::from_fn(openrouter_errors))
}

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
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
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

#[derive(Deserialize)]
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
    let data: Vec<Value> = state
        .catalog
        .models()
        .iter()
        .map(openrouter_videos::model_object)
        .collect();
    Json(json!({ "data": data })).into_response()
}

/// Every JSON error answer of these routes in OpenRouter's error object:
/// its SDK reads `error.code` as a number (the HTTP status) and refuses
/// vidgate's text code.
async fn openrouter_errors(request: Request, next: Next) -> Response {
    dialect_errors::reshaped(next.run(request).await, openrouter_videos::error_object).await
}
