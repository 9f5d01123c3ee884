//! `GET /generations`, `GET /generations/{id}`, `POST /generations/{id}/cancel`
//! and the Generation record of SPEC.md section 2.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use vidgate_core::{CancelRefusal, GenerationStatus};

use serde_json::{Value, json};

use super::openapi::{
    Content, Context, Header, Operation, Parameter, Refusal, Schema, Success, record,
};
use super::{ApiError, AppState, live};
use crate::backend::StartedJobCancel;
use crate::representation::{
    GenerationPageWriter, GenerationRecord, ListKind, RECORD_BYTES, decode_cursor,
    write_generation_json,
};
use crate::store::{Caller, CancelOutcome, Generation, ListFilter};

/// Seconds a client should wait before polling an unfinished generation
/// again (SPEC.md section 6.2 asks for no tighter than 5 to 10 seconds).
const POLL_HINT_SECONDS: u32 = 5;

pub(super) const DEFAULT_PAGE_SIZE: u32 = 20;
pub(super) const MAX_PAGE_SIZE: u32 = 100;

/// A JSON answer of `body`, with the headers of axum's `Json`. The hot
/// reads write their JSON by hand into a buffer with room for it from the
/// start (`representation::write_generation_json`): axum's `Json` starts
/// with 128 bytes and writes each of serde_json's small pieces through
/// `BytesMut`'s checks (BENCHMARKS.md, sessions 18 and 19).
fn json_answer(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A generation response, with the polling hint while it is unfinished.
pub fn generation_response(generation: &Generation, api_base: &str) -> Response {
    let mut body = Vec::with_capacity(RECORD_BYTES);
    write_generation_json(&mut body, &generation.view(), api_base);
    let mut response = json_answer(body);
    if !generation.status.is_final() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(POLL_HINT_SECONDS));
    }
    response
}

/// The refusal of a generation that is not the caller's account's.
const NOT_FOUND: Refusal = Refusal {
    status: "404",
    description: "not_found: no such generation in this account.",
};

pub const SHOW: Operation = Operation {
    id: "get_generation",
    summary: "One generation (poll no tighter than every 5 seconds, or wait with Prefer: wait=N)",
    tag: "generations",
    parameters: &[Parameter::Path("id"), live::PREFER_WAIT_PARAMETER],
    success: Success {
        status: "200",
        description: "The generation; Retry-After: 5 while it is not final.",
        content: Content::Json(Schema::Of(record::<GenerationRecord<'static>>)),
        headers: &[
            live::PREFERENCE_APPLIED_HEADER,
            Header {
                name: "Retry-After",
                description: "Seconds before polling again, while the generation is not final.",
                schema: Schema::INTEGER,
            },
        ],
    },
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: a malformed Prefer: wait; param is Prefer.",
        },
        NOT_FOUND,
    ],
    ..Operation::PLAIN
};

fn not_found(generation_id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "No generation {generation_id:?} exists in this account."
    ))
}

/// `GET /generations/{id}`; with `Prefer: wait=N`, answered once the
/// generation is final or after N seconds (`live.rs`).
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(generation_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(wait) = live::requested_wait(&headers)? else {
        let generation = state
            .store
            .generations()
            .get(&caller.account_id, &generation_id)
            .await?
            .ok_or_else(|| not_found(&generation_id))?;
        return Ok(generation_response(&generation, &state.api_base));
    };
    let generation = live::wait_for_final(&state, &caller, &generation_id, wait)
        .await?
        .ok_or_else(|| not_found(&generation_id))?;
    let mut response = generation_response(&generation, &state.api_base);
    live::mark_wait_applied(&state, &mut response, wait);
    Ok(response)
}

pub const CANCEL: Operation = Operation {
    id: "cancel_generation",
    summary: "Cancel a queued generation (refunded)",
    description: Some(
        "A queued generation is canceled and refunded. A running one whose job still waits in a hosted provider's queue is canceled there first, then canceled and refunded here; any other running or finished one answers 409.",
    ),
    tag: "generations",
    parameters: &[Parameter::Path("id")],
    success: Success::json(
        "200",
        "The canceled generation.",
        Schema::Of(record::<GenerationRecord<'static>>),
    ),
    refusals: &[
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: the generation is already running or finished.",
        },
        Refusal {
            status: "502",
            description: "upstream_error: the model's provider could not be reached to cancel its queued job; nothing changed.",
        },
    ],
    ..Operation::PLAIN
};

pub async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(generation_id): Path<String>,
) -> Result<Response, ApiError> {
    let generation = cancel_generation(&state, &caller, &generation_id).await?;
    Ok(generation_response(&generation, &state.api_base))
}

/// Cancels the caller's generation as `POST /generations/{id}/cancel` does
/// (the other surfaces' cancels and deletes call it too): the canceled
/// generation, or the refusal.
pub(super) async fn cancel_generation(
    state: &AppState,
    caller: &Caller,
    generation_id: &str,
) -> Result<Generation, ApiError> {
    let mut outcome = state
        .store
        .generations()
        .cancel(&caller.account_id, generation_id)
        .await?;
    if matches!(outcome, CancelOutcome::Refused(GenerationStatus::Running)) {
        outcome = cancel_before_start(state, caller, generation_id, outcome).await?;
    }
    match outcome {
        CancelOutcome::Canceled(generation) => {
            crate::bound_media::release_generation_media(
                state.store.as_ref(),
                &state.storage,
                &generation.id,
            )
            .await;
            Ok(*generation)
        }
        CancelOutcome::NotFound => Err(not_found(generation_id)),
        CancelOutcome::Refused(status) => {
            let refusal: CancelRefusal = status
                .check_cancel()
                .expect_err("the store refuses only what the rule refuses");
            Err(ApiError::Conflict {
                message: format!("Cannot cancel: {refusal}."),
                param: None,
            })
        }
    }
}

/// A running generation whose job still waits in a hosted provider's
/// queue: canceled there first, and once the provider ended it, canceled
/// here with its refund (the seconds a job that slipped into running may
/// be billed for are the operator's). A running generation whose job has
/// started stays refused (`refused`); one whose cancel the provider did
/// not carry out is refused saying so.
async fn cancel_before_start(
    state: &AppState,
    caller: &Caller,
    generation_id: &str,
    refused: CancelOutcome,
) -> Result<CancelOutcome, ApiError> {
    let Some(generation) = state
        .store
        .generations()
        .get(&caller.account_id, generation_id)
        .await?
    else {
        return Ok(refused);
    };
    let Some(backend) = state
        .catalog
        .model(&generation.model)
        .and_then(|model| state.backends.for_model(model))
    else {
        return Ok(refused);
    };
    match backend
        .cancel_before_start(generation_id, &generation.input.value()?)
        .await
    {
        // The worker following the job may fail it in the moment between
        // the provider's cancel and this update (it reads the job as
        // canceled): the refund is then the worker's, and the cancel is
        // refused with the state the generation reached.
        StartedJobCancel::Canceled { provider_run } => Ok(state
            .store.generations()
            .cancel_canceled_at_provider(
                &caller.account_id,
                generation_id,
                &provider_run,
            )
            .await?),
        StartedJobCancel::Started => Ok(refused),
        StartedJobCancel::NotCarried => Err(ApiError::Conflict {
            message: "Cannot cancel: the model's provider did not carry out the cancel, and the generation continues.".into(),
            param: None,
        }),
        StartedJobCancel::Unreachable(reason) => {
            tracing::warn!(generation = %generation_id, %reason, "canceling at the provider failed");
            Err(ApiError::Upstream(
                "The model's provider could not be reached to cancel the job; nothing changed. Try again."
                    .into(),
            ))
        }
    }
}

#[derive(Deserialize)]
pub(super) struct ListParameters {
    limit: Option<String>,
    cursor: Option<String>,
    status: Option<String>,
    model: Option<String>,
}

pub(super) fn parse_list_filter(parameters: ListParameters) -> Result<ListFilter, ApiError> {
    // An empty free-text value (`?cursor=&model=`) means the same as leaving
    // it out, as HTML forms send it; `limit` and `status` stay strict.
    let present = |value: Option<String>| value.filter(|value| !value.is_empty());
    let parameters = ListParameters {
        cursor: present(parameters.cursor),
        model: present(parameters.model),
        ..parameters
    };
    let limit = match parameters.limit {
        None => DEFAULT_PAGE_SIZE,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|limit| (1..=MAX_PAGE_SIZE).contains(limit))
            .ok_or_else(|| {
                ApiError::invalid(
                    "limit",
                    format!("limit must be an integer from 1 to {MAX_PAGE_SIZE}."),
                )
            })?,
    };
    let before = parameters
        .cursor
        .map(|cursor| {
            decode_cursor(&cursor)
                .ok_or_else(|| ApiError::invalid("cursor", "cursor is not one this API returned."))
        })
        .transpose()?;
    let status = parameters
        .status
        .map(|status| {
            status.parse::<GenerationStatus>().map_err(|_| {
                ApiError::invalid(
                    "status",
                    "status must be one of queued, running, succeeded, failed, canceled.",
                )
            })
        })
        .transpose()?;
    Ok(ListFilter {
        status,
        model: parameters.model,
        before,
        limit,
    })
}

pub const LIST: Operation = Operation {
    id: "list_generations",
    summary: "Recent generations, newest first",
    tag: "generations",
    parameters: &[
        Parameter::Query {
            name: "limit",
            description: None,
            schema: Schema::Integer {
                minimum: Some(1),
                maximum: Some(MAX_PAGE_SIZE as i64),
                default: Some(DEFAULT_PAGE_SIZE as i64),
                description: None,
            },
        },
        Parameter::Query {
            name: "cursor",
            description: Some("next_cursor of the previous page."),
            schema: Schema::TEXT,
        },
        Parameter::Query {
            name: "status",
            description: None,
            schema: Schema::Of(statuses),
        },
        Parameter::Query {
            name: "model",
            description: None,
            schema: Schema::TEXT,
        },
    ],
    success: Success::json(
        "200",
        "A page of generations.",
        Schema::Of(record::<ListPage<'static>>),
    ),
    refusals: &[Refusal {
        status: "400",
        description: "invalid_request: a query parameter is invalid; param names it.",
    }],
    ..Operation::PLAIN
};

fn statuses(_: &mut Context<'_>) -> Value {
    let statuses: Vec<&str> = GenerationStatus::ALL
        .iter()
        .map(|status| status.as_str())
        .collect();
    json!({ "type": "string", "enum": statuses })
}

pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    parameters: Result<Query<ListParameters>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(parameters) = parameters?;
    Ok(json_answer(list_page(&state, &caller, parameters).await?))
}

/// One page of `caller`'s generations as the list answers it (JSON bytes),
/// for `GET /generations` and the MCP server's `list_generations`.
pub(super) async fn list_page(
    state: &AppState,
    caller: &Caller,
    parameters: ListParameters,
) -> Result<Vec<u8>, ApiError> {
    let mut filter = parse_list_filter(parameters)?;
    let page_size = filter.limit as usize;
    // One extra row tells whether another page exists.
    filter.limit += 1;
    // The page is written as the rows are read, without collecting them.
    let mut page = GenerationPageWriter::new(page_size, &state.api_base);
    state
        .store
        .generations()
        .visit(&caller.account_id, &filter, |generation| {
            page.push(generation)
        })
        .await?;
    Ok(page.finish())
}

/// A page of generations, newest first. Its answer is written by
/// `representation::GenerationPageWriter`; this type is what the document
/// describes, and CI's schemathesis run checks the answers against it.
#[derive(ToSchema)]
#[schema(as = GenerationList)]
#[expect(
    dead_code,
    reason = "the answer is written by hand; this is its schema"
)]
pub struct ListPage<'a> {
    data: Vec<GenerationRecord<'a>>,
    has_more: bool,
    #[schema(required = true)]
    next_cursor: Option<String>,
    #[schema(inline)]
    object: ListKind,
}
