//! `POST /quote/{vendor}/{model}/{mode}`: the price of a request without
//! running it. Public: no key needed.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use vidgate_core::{Breakdown, Endpoint, Mode, Purpose};
use vidgate_media::{InspectError, Requester, Scope};

use super::openapi::{
    BodyContent, Context, Operation, PerEndpoint, Refusal, RequestBody, Schema, Success, record,
};
use super::runs::{run_schema, with_nullable_optionals};
use super::{ApiError, AppState, body_bytes, endpoint_from_path, invalid_request};
use crate::application::client_address::ClientAddress;
use crate::metrics::RateLimit;
use crate::rate_limit::NetworkBucket;
use crate::representation::{Cost, object_kind};

pub const QUOTE: Operation = Operation {
    summary: "",
    tag: "catalog",
    body: Some(RequestBody {
        required: false,
        content: BodyContent::Json(Schema::Of(quote_schema)),
    }),
    success: Success::json("200", "The price.", Schema::Of(record::<QuoteRecord>)),
    refusals: &[
        Refusal {
            status: "400",
            description: "invalid_request: a parameter is invalid; param names it.",
        },
        Refusal {
            status: "413",
            description: "payload_too_large",
        },
        Refusal {
            status: "429",
            description: "rate_limited: too many requests to the public endpoints from this client address, or this client network is already fetching as much request media as one client may at once; Retry-After says when to try again.",
        },
        Refusal {
            status: "500",
            description: "internal_error",
        },
        Refusal {
            status: "503",
            description: "model_unavailable: this node is fetching as much request media as it may at once; Retry-After says when to try again.",
        },
    ],
    per_endpoint: Some(PerEndpoint {
        id: |endpoint| format!("quote_{}", endpoint.id().replace(['/', '-'], "_")),
        summary: |endpoint| {
            format!(
                "Price a {} request to {} without running it",
                endpoint.mode.as_str(),
                endpoint.model.label
            )
        },
    }),
    ..Operation::PLAIN
};

/// A quote validates what is present but requires nothing, so its schema is
/// the run schema without `required`.
fn quote_schema(context: &mut Context<'_>) -> Value {
    let mut schema = run_schema(context);
    if let Some(object) = schema.as_object_mut() {
        object.remove("required");
    }
    // Lists that a run requires (M6 reference images) may be empty in a quote.
    if let Some(properties) = schema["properties"].as_object_mut() {
        for property in properties.values_mut() {
            if let Some(object) = property.as_object_mut() {
                object.remove("minItems");
            }
        }
    }
    // Every field is optional in a quote, so every field may be null.
    with_nullable_optionals(schema)
}

pub async fn quote(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    Path(segments): Path<(String, String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<QuoteRecord>, ApiError> {
    let endpoint = endpoint_from_path(&state.catalog, &segments)?;
    let body = body_bytes(body)?;
    // A quote's fetches are anonymous: few per client network (an IPv6
    // /48, not one of its many /64s), and never in the slots kept for
    // accounts' submits.
    let requester = Requester::Anonymous {
        client: NetworkBucket(client).to_string(),
    };
    Ok(Json(price(&state, &requester, endpoint, &body).await?))
}

/// The quote of `body` for `endpoint`, its media fetched as `requester`'s
/// (the MCP server's `quote` tool prices with it too).
pub(super) async fn price(
    state: &AppState,
    requester: &Requester,
    endpoint: Endpoint<'_>,
    body: &[u8],
) -> Result<QuoteRecord, ApiError> {
    // An empty body asks for the price of the defaults.
    let body: &[u8] = if body.is_empty() { b"{}" } else { body };
    let input = endpoint
        .validate(body, Purpose::Quote)
        .map_err(invalid_request)?;
    crate::application::submit::refuse_kept_media(&state.api_base, &input)?;
    // Only the media that changes the price is fetched: reference videos,
    // whose probed durations are billed. The submit prices them the same way
    // (from the probe cache when it follows soon), so the quote is the charge.
    let media_facts = state
        .media
        .inspect(requester, endpoint, &input, Scope::PriceAffecting)
        .await
        .inspect_err(|error| {
            if let InspectError::RequesterAtLimit { .. } = error {
                state
                    .metrics
                    .record_rate_limit_refusal(RateLimit::MediaFetches);
            }
        })?;
    let price = endpoint.price(&input, &media_facts);
    Ok(QuoteRecord {
        cost: Cost::quoted(&price),
        breakdown: price.breakdown,
        endpoint: endpoint.id(),
        input: input.to_json(),
        mode: endpoint.mode,
        model: endpoint.model.id.clone(),
        object: QuoteKind::Quote,
    })
}

// `"object": "quote"`.
object_kind!(QuoteKind, Quote);

// The fields are in alphabetical order, as the answer's bytes were when it
// was a value.
/// The price of a request, without running it.
#[derive(Serialize, ToSchema)]
#[schema(as = Quote)]
pub struct QuoteRecord {
    /// How the price was computed: billed unit, seconds or tokens, frame, rates (integer micro-dollars).
    #[schema(value_type = Object)]
    breakdown: Breakdown,
    cost: Cost,
    endpoint: String,
    #[schema(value_type = Object)]
    input: Value,
    #[schema(inline)]
    mode: Mode,
    model: String,
    #[schema(inline)]
    object: QuoteKind,
}
