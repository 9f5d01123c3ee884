//! `POST /run/{vendor}/{model}/{mode}`: submit a generation.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use vidgate_core::{Endpoint, Purpose};
use vidgate_media::Scope;

use super::generations::generation_json;
use super::{ApiError, AppState, body_bytes, endpoint_from_path, invalid_request};
use crate::backend::{Admission, Rejection};
use crate::ids::{new_generation_id, sha256_hex};
use crate::store::{
    Caller, Generation, IdempotencyKey, NewGeneration, SubmitOutcome, SubmitRefusal,
};

const IDEMPOTENCY_HEADER: &str = "Idempotency-Key";
const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 255;

fn idempotency_key(
    headers: &HeaderMap,
    endpoint_id: &str,
    body: &[u8],
) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|key| !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LENGTH)
        .ok_or_else(|| {
            ApiError::invalid(
                IDEMPOTENCY_HEADER,
                format!(
                    "{IDEMPOTENCY_HEADER} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters."
                ),
            )
        })?;
    // The digest covers the endpoint too: the same body sent to another
    // model is a different request.
    let mut request = endpoint_id.as_bytes().to_vec();
    request.push(b'\n');
    request.extend_from_slice(body);
    Ok(Some(IdempotencyKey {
        key: key.to_owned(),
        request_sha256: sha256_hex(&request),
    }))
}

pub async fn submit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(segments): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let endpoint = endpoint_from_path(&state.catalog, &segments)?;
    let body = body_bytes(body)?;
    let (generation, replayed) =
        submit_generation(&state, &caller, endpoint, &body, &headers).await?;

    let url = format!("{}/generations/{}", state.api_base, generation.id);
    let mut response = (
        StatusCode::ACCEPTED,
        axum::Json(generation_json(&generation, &state.api_base)),
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

/// Validates, prices, admits and queues one generation for `caller`, holding
/// its price; the API's submit and the dashboard's playground both come
/// here. Answers the generation and whether it replays an earlier request
/// with the same `Idempotency-Key` header.
pub(crate) async fn submit_generation(
    state: &AppState,
    caller: &Caller,
    endpoint: Endpoint<'_>,
    body: &[u8],
    headers: &HeaderMap,
) -> Result<(Generation, bool), ApiError> {
    let input = endpoint
        .validate(body, Purpose::Submit)
        .map_err(invalid_request)?;
    super::uploads::check_upload_ownership(state, caller, &input).await?;
    let endpoint_id = endpoint.id();
    let idempotency = idempotency_key(headers, &endpoint_id, body)?;
    let model = endpoint.model;

    let backend = state.backends.for_model(model).ok_or_else(|| {
        ApiError::ModelUnavailable(format!(
            "{} has no backend configured on this deployment.",
            model.id
        ))
    })?;
    if state.store.is_model_paused(&model.id).await? {
        return Err(ApiError::ModelUnavailable(format!(
            "{} is temporarily not accepting new generations. Retry later with backoff.",
            model.id
        )));
    }
    // Media is fetched and checked only once the cheap checks passed; its
    // probed durations price reference videos, exactly as a quote does.
    let media_facts = state
        .media
        .inspect(endpoint, &input, Scope::Everything)
        .await
        .map_err(invalid_request)?;
    let price = endpoint.price(&input, &media_facts);
    // The backend is asked before anything is held, so that a refusal is an
    // HTTP error with nothing charged and no generation left behind; asking
    // after the commit would race a worker that already claimed the job.
    let admission = Admission {
        model,
        mode: endpoint.mode,
        input: &input,
    };
    backend
        .admit(&admission)
        .await
        .map_err(|rejection| match rejection {
            Rejection::Unavailable(message) => ApiError::ModelUnavailable(message),
            Rejection::Upstream(message) => ApiError::Upstream(format!(
                "The model refused the job: {message}. Nothing was charged."
            )),
        })?;
    let generation_id = new_generation_id();
    let outcome = state
        .store
        .submit_generation(NewGeneration {
            id: generation_id.clone(),
            account_id: caller.account_id.clone(),
            api_key_id: caller.key_id.clone(),
            model: model.id.clone(),
            endpoint: endpoint_id,
            mode: endpoint.mode.as_str().to_owned(),
            input: input.to_json(),
            price: price.amount,
            official_price: price.official,
            webhook_url: input.webhook_url().map(str::to_owned),
            idempotency,
            max_attempts: state.max_attempts,
        })
        .await
        .map_err(|refusal| match refusal {
            SubmitRefusal::ConcurrencyLimit { limit } => ApiError::RateLimited {
                message: format!(
                    "Too many generations in progress: at most {limit} may be queued or running at once per account. Wait for one to finish."
                ),
                retry_after: std::time::Duration::from_secs(5),
            },
            SubmitRefusal::InsufficientBalance { balance, price } => ApiError::InsufficientBalance(format!(
                "The balance of {:.2} USD does not cover the price of {:.2} USD. Nothing was charged.",
                balance.to_usd(),
                price.to_usd()
            )),
            SubmitRefusal::IdempotencyMismatch => ApiError::Conflict {
                message: format!(
                    "This {IDEMPOTENCY_HEADER} was already used with a different request."
                ),
                param: Some(IDEMPOTENCY_HEADER.to_owned()),
            },
            SubmitRefusal::AccountNotFound => {
                ApiError::Unauthorized("The account of this API key no longer exists.".into())
            }
            SubmitRefusal::Store(error) => ApiError::internal(error),
        })?;

    let (generation, replayed) = match outcome {
        SubmitOutcome::Created(generation) => (generation, false),
        SubmitOutcome::Replayed(generation) => (generation, true),
    };
    if !replayed {
        state.queue_wakeup.notify_one();
    }
    Ok((generation, replayed))
}
