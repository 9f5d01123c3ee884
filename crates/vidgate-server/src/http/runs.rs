//! `POST /run/{vendor}/{model}/{mode}`: submit a generation; with `Prefer:
//! wait=N`, answered once it is final or after N seconds (`live.rs`), still
//! with 202.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use serde_json::{Value, json};

use super::openapi::{
    BodyContent, Content, Context, Header, Operation, Parameter, PerEndpoint, Refusal, RequestBody,
    Schema, Success, record,
};
use super::{ApiError, AppState, body_bytes, endpoint_from_path, live};
use crate::application::submit::{IDEMPOTENCY_KEY, MAX_IDEMPOTENCY_KEY_LENGTH, submit_generation};
use crate::representation::GenerationRecord;
use crate::store::Caller;

/// The `Idempotency-Key` header of every create, on every surface.
pub(super) const IDEMPOTENCY_KEY_PARAMETER: Parameter = Parameter::Header {
    name: IDEMPOTENCY_KEY,
    required: false,
    description: Some(
        "Replays the original generation for the same key and request within 24 hours (with Prefer: wait, the replay waits for it too).",
    ),
    schema: Schema::text_up_to(MAX_IDEMPOTENCY_KEY_LENGTH),
    example: None,
};

/// Says on a create's answer that it replays an earlier create of the same
/// `Idempotency-Key` (every surface that submits).
pub(super) fn mark_replayed(headers: &mut axum::http::HeaderMap, replayed: bool) {
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
}

/// The refusals every create shares, on every surface that submits.
pub(super) const INSUFFICIENT_BALANCE: Refusal = Refusal {
    status: "402",
    description: "insufficient_balance: the balance does not cover the price. Nothing is charged.",
};

pub(super) const IDEMPOTENCY_CONFLICT: Refusal = Refusal {
    status: "409",
    description: "conflict: the Idempotency-Key was used with a different request.",
};

pub(super) const UPSTREAM_REFUSED: Refusal = Refusal {
    status: "502",
    description: "upstream_error: the model refused the job; any held amount was refunded.",
};

pub(super) const MODEL_UNAVAILABLE: Refusal = Refusal {
    status: "503",
    description: "model_unavailable: the model is temporarily not accepting new generations, or this node is fetching as much request media as it may at once (Retry-After says when to try again).",
};

pub const SUBMIT: Operation = Operation {
    tag: "generations",
    parameters: &[IDEMPOTENCY_KEY_PARAMETER, live::PREFER_WAIT_PARAMETER],
    body: Some(RequestBody {
        required: true,
        content: BodyContent::Json(Schema::Of(run_schema)),
    }),
    success: Success {
        status: "202",
        description: "Accepted: the generation is queued and its price is held.",
        content: Content::Json(Schema::Of(record::<GenerationRecord<'static>>)),
        headers: &[
            Header {
                name: "Location",
                description: "The generation's URL.",
                schema: Schema::Of(uri),
            },
            live::PREFERENCE_APPLIED_HEADER,
        ],
    },
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: invalid JSON, a missing, unknown or out-of-range parameter, or a malformed Prefer: wait; param names it.",
        },
        INSUFFICIENT_BALANCE,
        IDEMPOTENCY_CONFLICT,
        Refusal {
            status: "413",
            description: "payload_too_large: the body is larger than the limit.",
        },
        UPSTREAM_REFUSED,
        MODEL_UNAVAILABLE,
    ],
    per_endpoint: Some(PerEndpoint {
        id: |endpoint| format!("run_{}", endpoint.id().replace(['/', '-'], "_")),
        summary: |endpoint| {
            format!(
                "Submit a {} generation to {} ({})",
                endpoint.mode.as_str(),
                endpoint.model.label,
                endpoint.model.id
            )
        },
    }),
    ..Operation::PLAIN
};

fn uri(_: &mut Context<'_>) -> Value {
    json!({ "type": "string", "format": "uri" })
}

/// The endpoint's request schema: the catalog's own rules
/// (`Endpoint::input_schema`), which the validator applies.
pub(super) fn run_schema(context: &mut Context<'_>) -> Value {
    with_nullable_optionals(context.endpoint().input_schema())
}

/// The validator treats a JSON `null` in an optional field as "omitted", as
/// clients that serialise absent values as null expect; the published request
/// schema says so by allowing null beside each optional field's own schema.
pub(super) fn with_nullable_optionals(catalog_schema: Value) -> Value {
    let mut schema = catalog_schema;
    let required: Vec<Value> = schema["required"].as_array().cloned().unwrap_or_default();
    if let Some(properties) = schema["properties"].as_object_mut() {
        for (name, property) in properties.iter_mut() {
            if required.contains(&Value::String(name.clone())) {
                continue;
            }
            let description = property.get("description").cloned();
            let mut nullable = json!({ "anyOf": [property.take(), { "type": "null" }] });
            if let Some(description) = description {
                nullable["description"] = description;
            }
            *property = nullable;
        }
    }
    schema
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
    mark_replayed(response_headers, replayed);
    if let Some(seconds) = wait {
        live::mark_wait_applied(&state, &mut response, seconds);
    }
    Ok(response)
}
