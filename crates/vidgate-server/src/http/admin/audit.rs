//! `GET /admin/v1/audit-log`: every change made through the operator API,
//! newest first, paged with `before` (an entry's id) and `limit`.

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::openapi::{Operation, Parameter, Schema, Success};
use super::{PAGE_LIMIT, page_limit};
use crate::application::state::AppState;
use crate::http::{ApiError, rfc3339};

#[derive(Deserialize)]
pub struct AuditQuery {
    before: Option<i64>,
    limit: Option<u32>,
}

pub const LIST: Operation = Operation {
    id: "operator_audit_log",
    summary: "Every change made through the operator API, newest first",
    parameters: &[
        Parameter::Query {
            name: "before",
            description: Some("An entry id: the page starts before it."),
            schema: Schema::Integer {
                minimum: None,
                maximum: None,
                default: None,
                description: None,
            },
        },
        PAGE_LIMIT,
    ],
    body: None,
    success: Success {
        status: "200",
        description: "A page of audit entries and `next_before`.",
        also_csv: false,
    },
    refusals: &[],
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
    let data: Vec<Value> = entries
        .iter()
        .map(|entry| {
            json!({
                "id": entry.id,
                "actor": entry.actor,
                "action": entry.action,
                "target": entry.target,
                // Written by the store from a JSON value, so it parses; a
                // row that does not shows as text rather than failing the page.
                "detail": serde_json::from_str::<Value>(&entry.detail)
                    .unwrap_or_else(|_| Value::String(entry.detail.clone())),
                "created_at": rfc3339(entry.created_at),
            })
        })
        .collect();
    let next_before = (entries.len() == limit as usize)
        .then(|| entries.last().map(|entry| entry.id))
        .flatten();
    Ok(Json(json!({ "data": data, "next_before": next_before })))
}
