//! `GET /admin/v1/generations`: generations across accounts, newest first,
//! with the public list's filters and cursor (`status`, `model`, `cursor`,
//! `limit`) plus `account_id` and a creation range (`created_from`
//! inclusive, `created_until` exclusive, RFC 3339). Each generation also
//! shows the hosted provider that serves it, the operator's cost and why
//! routing chose that provider.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::ToSchema;

use super::answer;
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::http::generations::{
    DEFAULT_PAGE_SIZE, ListParameters, MAX_PAGE_SIZE, parse_list_filter,
};
use crate::http::openapi::{Operation, Parameter, Schema, Success, record};
use crate::representation::{GenerationRecord, ListKind, one_page};
use crate::store::{GenerationProvider, OperatorGenerationFilter};

#[derive(Deserialize)]
pub struct GenerationsQuery {
    account_id: Option<String>,
    created_from: Option<String>,
    created_until: Option<String>,
    #[serde(flatten)]
    list: ListParameters,
}

/// A page of generations across accounts, newest first.
#[derive(Serialize, ToSchema)]
#[schema(as = OperatorGenerationList)]
pub struct GenerationPage<'a> {
    data: Vec<OperatorGenerationRecord<'a>>,
    has_more: bool,
    #[schema(required = true)]
    next_cursor: Option<String>,
    #[schema(inline)]
    object: ListKind,
}

/// A generation as the customer sees it, with its account and the hosted
/// provider that serves it: the operator's, never the customer's, view.
#[derive(Serialize, ToSchema)]
#[schema(as = OperatorGeneration)]
pub struct OperatorGenerationRecord<'a> {
    account_id: &'a str,
    #[serde(flatten)]
    generation: GenerationRecord<'a>,
    /// Null for a model not at a hosted provider.
    #[schema(required = true)]
    provider: Option<ProviderRecord<'a>>,
}

/// Which provider serves a generation, what it cost the operator and why
/// routing chose the provider.
#[derive(Serialize, ToSchema)]
pub struct ProviderRecord<'a> {
    #[schema(required = true)]
    cost_micros: Option<i64>,
    name: &'a str,
    #[schema(required = true)]
    route_reason: Option<&'a str>,
}

/// A time given as RFC 3339, in the store's Unix milliseconds.
fn unix_millis(param: &str, text: Option<String>) -> Result<Option<i64>, ApiError> {
    let Some(text) = text.filter(|text| !text.is_empty()) else {
        return Ok(None);
    };
    let time = OffsetDateTime::parse(&text, &Rfc3339).map_err(|_| {
        ApiError::invalid(
            param,
            format!("{param} must be an RFC 3339 time, e.g. 2026-11-23T00:00:00Z."),
        )
    })?;
    Ok(Some((time.unix_timestamp_nanos() / 1_000_000) as i64))
}

/// A text filter of the list, described.
const fn text_filter(name: &'static str, description: &'static str) -> Parameter {
    Parameter::Query {
        name,
        description: Some(description),
        schema: Schema::TEXT,
    }
}

pub const LIST: Operation = Operation {
    id: "operator_list_generations",
    summary: "Generations across accounts, newest first, with filters",
    parameters: &[
        text_filter("account_id", "Only this account's generations."),
        text_filter("status", "queued, running, succeeded, failed or canceled."),
        text_filter("model", "A model id, e.g. vendor_1/model_1."),
        text_filter("created_from", "RFC 3339: created at or after this time."),
        text_filter("created_until", "RFC 3339: created before this time."),
        text_filter("cursor", "next_cursor of the previous page."),
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
    ],
    body: None,
    success: Success::json(
        "200",
        "A page of Generation records, each with its account_id and its provider (name, cost_micros, route_reason; null for a model not at a hosted provider), as the public list answers.",
        Schema::Of(record::<GenerationPage<'static>>),
    ),
    refusals: &[],
    ..Operation::PLAIN
};

pub async fn list(
    State(state): State<AppState>,
    query: Result<Query<GenerationsQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let mut filter = OperatorGenerationFilter {
        account_id: query.account_id.filter(|account_id| !account_id.is_empty()),
        created_from: unix_millis("created_from", query.created_from)?,
        created_until: unix_millis("created_until", query.created_until)?,
        list: parse_list_filter(query.list)?,
    };
    let page_size = filter.list.limit as usize;
    // One extra row tells whether another page exists.
    filter.list.limit += 1;
    let generations = state
        .store
        .operator()
        .list_generations_across_accounts(&filter)
        .await?;
    let (generations, next_cursor) = one_page(generations, page_size);
    let ids: Vec<String> = generations
        .iter()
        .map(|generation| generation.id.clone())
        .collect();
    let providers: HashMap<String, GenerationProvider> = state
        .store
        .provider_jobs()
        .generation_providers(&ids)
        .await?
        .into_iter()
        .map(|provider| (provider.generation_id.clone(), provider))
        .collect();
    let data = generations
        .iter()
        .map(|generation| OperatorGenerationRecord {
            account_id: &generation.account_id,
            generation: GenerationRecord::new(generation, &state.api_base),
            provider: providers
                .get(&generation.id)
                .map(|provider| ProviderRecord {
                    cost_micros: provider.cost.map(|cost| cost.0),
                    name: &provider.provider,
                    route_reason: provider.route_reason.as_deref(),
                }),
        })
        .collect();
    Ok(answer(GenerationPage {
        data,
        has_more: next_cursor.is_some(),
        next_cursor,
        object: ListKind::List,
    }))
}
