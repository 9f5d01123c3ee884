//! `GET /admin/v1/accounts/{id}/usage?days=30&format=json|csv`: the money
//! an account spent (captured) per UTC day, for billing and reports. Days
//! without any spend are left out.

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{NOT_FOUND, answer};
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::http::openapi::{Content, Operation, Parameter, Schema, Success, record};
use crate::store::now_millis;

const DEFAULT_DAYS: u32 = 30;
const MAX_DAYS: u32 = 366;
const MILLIS_PER_DAY: i64 = 86_400_000;

#[derive(Deserialize)]
pub struct UsageQuery {
    days: Option<u32>,
    format: Option<String>,
}

/// `YYYY-MM-DD` of a day counted from the Unix epoch.
fn date_of(day: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(day * 86_400)
        .map(|moment| moment.date().to_string())
        .unwrap_or_default()
}

/// The money an account spent on each UTC day with spend, oldest first.
#[derive(Serialize, ToSchema)]
#[schema(as = Usage)]
pub struct UsageRecord<'a> {
    account_id: &'a str,
    data: Vec<DayRecord>,
    days: u32,
}

#[derive(Serialize, ToSchema)]
struct DayRecord {
    /// `YYYY-MM-DD`.
    #[schema(format = Date)]
    date: String,
    spent_micros: i64,
}

pub const SHOW: Operation = Operation {
    id: "operator_usage",
    summary: "Money an account spent per UTC day (JSON, or CSV with format=csv)",
    parameters: &[
        Parameter::Operator,
        Parameter::Path("account_id"),
        Parameter::Query {
            name: "days",
            description: None,
            schema: Schema::Integer {
                minimum: Some(1),
                maximum: Some(MAX_DAYS as i64),
                default: Some(DEFAULT_DAYS as i64),
                description: None,
            },
        },
        Parameter::Query {
            name: "format",
            description: None,
            schema: Schema::Choice {
                values: &["json", "csv"],
                default: "json",
            },
        },
    ],
    body: None,
    success: Success {
        status: "200",
        description: "The days with spend.",
        content: Content::JsonOrCsv(Schema::Of(record::<UsageRecord<'static>>)),
        headers: &[],
    },
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub async fn show(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
    Query(query): Query<UsageQuery>,
) -> Result<Response, ApiError> {
    let days = query.days.unwrap_or(DEFAULT_DAYS);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(ApiError::invalid(
            "days",
            format!("days must be between 1 and {MAX_DAYS}."),
        ));
    }
    let csv = match query.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(ApiError::invalid("format", "format must be json or csv.")),
    };
    if state.store.accounts().get(&account_id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "No account {account_id:?} exists."
        )));
    }
    // Whole UTC days: today and the `days - 1` before it.
    let today = now_millis() / MILLIS_PER_DAY;
    let since = (today - i64::from(days) + 1) * MILLIS_PER_DAY;
    let spend = state.store.ledger().daily_spend(&account_id, since).await?;
    if csv {
        let mut body = String::from("date,account_id,spent_micros\n");
        for day in &spend {
            body.push_str(&format!(
                "{},{account_id},{}\n",
                date_of(day.day),
                day.captured.0
            ));
        }
        return Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], body).into_response());
    }
    let data = spend
        .iter()
        .map(|day| DayRecord {
            date: date_of(day.day),
            spent_micros: day.captured.0,
        })
        .collect();
    let usage = UsageRecord {
        account_id: &account_id,
        data,
        days,
    };
    Ok(answer(usage).into_response())
}
