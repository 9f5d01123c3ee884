//! `GET /admin/v1/audit-log`: every change made through the operator API,
//! newest first, paged with `before` (an entry's id) and `limit`.

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{PAGE_LIMIT, answer, page_limit};
use crate::application::state::AppState;
use crate::http::openapi::{Operation, Parameter, Schema, Success, record};
use crate::http::{ApiError, rfc3339};

#[derive(Deserialize)]
pub struct AuditQuery {
    before: Option<i64>,
    limit: Option<u32>,
}

/// A page of the audit log, newest first, and the id the next page
/// starts before.
#[derive(Serialize, ToSchema)]
#[schema(as = AuditLog)]
pub struct AuditPage<'a> {
    data: Vec<AuditEntryRecord<'a>>,
    #[schema(required = true)]
    next_before: Option<i64>,
}

/// One change made through the operator API.
#[derive(Serialize, ToSchema)]
#[schema(as = AuditEntry)]
pub struct AuditEntryRecord<'a> {
    /// What was done, e.g. `account.credit`.
    action: &'a str,
    /// Who made the change (`X-Operator`).
    actor: &'a str,
    #[schema(format = DateTime)]
    created_at: String,
    /// The change's figures.
    #[schema(value_type = Object)]
    detail: Value,
    id: i64,
    /// The account, key, user or model it was done to.
    target: &'a str,
}

pub const LIST: Operation = Operation {
    id: "operator_audit_log",
    summary: "Every change made through the operator API, newest first",
    parameters: &[
        Parameter::Query {
            name: "before",
            description: Some("An entry id: the page starts before it."),
            schema: Schema::INTEGER,
        },
        PAGE_LIMIT,
    ],
    body: None,
    success: Success::json(
        "200",
        "A page of audit entries and `next_before`.",
        Schema::Of(record::<AuditPage<'static>>),
    ),
    refusals: &[],
    ..Operation::PLAIN
};

pub async fn list(
    State(state): State<AppState>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let entries = state
        .store
        .operator()
        .audit_log(query.before, limit)
        .await?;
    let data = entries
        .iter()
        .map(|entry| AuditEntryRecord {
            action: &entry.action,
            actor: &entry.actor,
            created_at: rfc3339(entry.created_at),
            // Written by the store from a JSON value, so it parses; a row
            // that does not shows as text rather than failing the page.
            detail: serde_json::from_str::<Value>(&entry.detail)
                .unwrap_or_else(|_| Value::String(entry.detail.clone())),
            id: entry.id,
            target: &entry.target,
        })
        .collect();
    let next_before = (entries.len() == limit as usize)
        .then(|| entries.last().map(|entry| entry.id))
        .flatten();
    Ok(answer(AuditPage { data, next_before }))
}
