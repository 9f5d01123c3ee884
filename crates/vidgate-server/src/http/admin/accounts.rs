//! Accounts across the service: `GET /admin/v1/accounts` (list),
//! `POST /admin/v1/accounts` (create, with its first API key),
//! `GET /admin/v1/accounts/{id}` (show),
//! `POST /admin/v1/accounts/{id}/credit` (a credit adjustment, applied once
//! per `Idempotency-Key`), `POST /admin/v1/accounts/{id}/debit` (the same,
//! taking money back), `POST /admin/v1/accounts/{id}/limits`,
//! `POST /admin/v1/accounts/{id}/low-balance` (the low-balance alert),
//! `POST /admin/v1/accounts/{id}/webhook-secret/rotate` and
//! `DELETE /admin/v1/accounts/{id}` (its media and personal data; the
//! tombstone keeps the money figures). Each calls its operator action
//! (`operator_actions::accounts`) and shows what it answers.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use vidgate_core::Micros;

use super::openapi::{
    ACCOUNT_DELETED, Field, NOT_FOUND, Operation, Parameter, Refusal, Schema, Success,
};
use super::{Operator, PAGE_LIMIT, page_limit};
use crate::application::state::AppState;
use crate::application::submit::IDEMPOTENCY_KEY;
use crate::http::{ApiError, account_json, rfc3339, webhook_secret_json};
use crate::operator_actions::accounts::{
    self, Adjusted, AdjustmentRequest, LimitChanges, MAX_ADJUSTMENT, MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_LIMIT_FIGURE, MAX_NAME_LENGTH, MAX_REASON_LENGTH,
};
use crate::representation::low_balance_alert_json;
use crate::store::{Account, AdjustmentKind};

/// The account as operators see it: the customer's view plus when it was
/// made and, for a tombstone, deleted (never its webhook secret).
fn operator_account_json(account: &Account) -> Value {
    let mut shown = account_json(account);
    shown["created_at"] = json!(rfc3339(account.created_at));
    shown["deleted_at"] = json!(account.deleted_at.map(rfc3339));
    shown["low_balance_alert"] = low_balance_alert_json(account);
    shown
}

const ACCOUNT_PATH: [Parameter; 2] = [Parameter::Operator, Parameter::Path("account_id")];

pub const DELETE: Operation = Operation {
    id: "operator_delete_account",
    summary: "Delete an account's media and personal data; the tombstone keeps its money figures",
    parameters: &ACCOUNT_PATH,
    body: None,
    success: Success {
        status: "200",
        description: "The tombstone (deleted_at set), also when it was deleted before.",
        also_csv: false,
    },
    refusals: &[
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: generations of the account are queued or running; cancel them or wait.",
        },
    ],
};

/// Deletes an account's media and personal data, or answers the tombstone
/// of an account deleted before; 409 while generations are queued or
/// running.
pub async fn delete(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let deleted = accounts::delete(state.store.as_ref(), &actor, &account_id).await?;
    Ok(Json(operator_account_json(&deleted.account)))
}

pub const LIST: Operation = Operation {
    id: "operator_list_accounts",
    summary: "Every account, in id order",
    parameters: &[
        Parameter::Query {
            name: "after",
            description: Some("An account id: the page starts after it."),
            schema: Schema::TEXT,
        },
        PAGE_LIMIT,
    ],
    body: None,
    success: Success {
        status: "200",
        description: "A page of accounts and `next_after`.",
        also_csv: false,
    },
    refusals: &[],
};

#[derive(Deserialize)]
pub struct ListQuery {
    after: Option<String>,
    limit: Option<u32>,
}

pub async fn list(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = page_limit(query.limit)?;
    let accounts = state
        .store
        .operator()
        .list_accounts(query.after.as_deref(), limit)
        .await?;
    let next_after = (accounts.len() == limit as usize)
        .then(|| accounts.last().map(|account| account.id.clone()))
        .flatten();
    Ok(Json(json!({
        "data": accounts.iter().map(operator_account_json).collect::<Vec<_>>(),
        "next_after": next_after,
    })))
}

pub const SHOW: Operation = Operation {
    id: "operator_get_account",
    summary: "One account",
    parameters: &ACCOUNT_PATH,
    body: None,
    success: Success {
        status: "200",
        description: "The account.",
        also_csv: false,
    },
    refusals: &[NOT_FOUND],
};

pub async fn show(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let account = accounts::show(state.store.as_ref(), &account_id).await?;
    Ok(Json(operator_account_json(&account)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: String,
}

pub const CREATE: Operation = Operation {
    id: "operator_create_account",
    summary: "Create an account (no credit) with its first API key, shown once",
    parameters: &[Parameter::Operator],
    body: Some(&[Field {
        name: "name",
        required: true,
        schema: Schema::text_up_to(MAX_NAME_LENGTH),
    }]),
    success: Success {
        status: "201",
        description: "The account, its API key and its webhook secret.",
        also_csv: false,
    },
    refusals: &[],
};

/// Creates an account with no credit and its first API key (shown once);
/// credit is added with a credit adjustment, so money always has a reason.
pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let created = accounts::create(state.store.as_ref(), &actor, &body.name, Micros::ZERO).await?;
    let mut shown = operator_account_json(&created.account);
    shown["api_key"] = json!(created.api_key);
    shown["key_id"] = json!(created.key_id);
    shown["webhook_secret"] = json!(created.account.webhook_secret);
    Ok((StatusCode::CREATED, Json(shown)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentBody {
    /// Exact integer micro-dollars, more than zero.
    amount_micros: i64,
    reason: String,
}

fn adjustment_json(
    Adjusted {
        adjustment,
        account,
        ..
    }: &Adjusted,
) -> Value {
    json!({
        "object": "credit_adjustment",
        "idempotency_key": adjustment.idempotency_key,
        "account_id": adjustment.account_id,
        "kind": adjustment.kind.as_str(),
        "amount_micros": adjustment.amount.0,
        "reason": adjustment.reason,
        "actor": adjustment.actor,
        "created_at": rfc3339(adjustment.created_at),
        "account": operator_account_json(account),
    })
}

/// What a credit and a debit take: the account, the key that applies it
/// once, the amount and the reason.
const ADJUSTMENT_PARAMETERS: [Parameter; 3] = [
    Parameter::Operator,
    Parameter::Path("account_id"),
    Parameter::Header {
        name: IDEMPOTENCY_KEY,
        schema: Schema::text_up_to(MAX_IDEMPOTENCY_KEY_LENGTH),
    },
];
const ADJUSTMENT_FIELDS: [Field; 2] = [
    Field {
        name: "amount_micros",
        required: true,
        schema: Schema::Integer {
            minimum: Some(1),
            maximum: Some(MAX_ADJUSTMENT.0),
            default: None,
            description: Some("Exact integer micro-dollars."),
        },
    },
    Field {
        name: "reason",
        required: true,
        schema: Schema::text_up_to(MAX_REASON_LENGTH),
    },
];
const ADJUSTMENT_APPLIED: Success = Success {
    status: "201",
    description: "Applied. A repeated key for the same account and amount answers 200 with the first adjustment.",
    also_csv: false,
};
const ADJUSTMENT_CONFLICT: Refusal = Refusal {
    status: "409",
    description: "conflict: the Idempotency-Key was used for another account, kind or amount, or the account was deleted.",
};

pub const CREDIT: Operation = Operation {
    id: "operator_credit_account",
    summary: "Add credit once per Idempotency-Key (a payment system's top-up)",
    parameters: &ADJUSTMENT_PARAMETERS,
    body: Some(&ADJUSTMENT_FIELDS),
    success: ADJUSTMENT_APPLIED,
    refusals: &[NOT_FOUND, ADJUSTMENT_CONFLICT],
};

/// Adds credit once per `Idempotency-Key` (required): a payment system's
/// webhook delivered twice tops the account up once, and the second
/// delivery gets the first one's answer with 200 instead of 201.
pub async fn credit(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<AdjustmentBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    adjust(
        &state,
        actor,
        account_id,
        &headers,
        body,
        AdjustmentKind::Credit,
    )
    .await
}

pub const DEBIT: Operation = Operation {
    id: "operator_debit_account",
    summary: "Take credit back once per Idempotency-Key (a chargeback, a correction), never below a zero balance",
    parameters: &ADJUSTMENT_PARAMETERS,
    body: Some(&ADJUSTMENT_FIELDS),
    success: ADJUSTMENT_APPLIED,
    refusals: &[
        NOT_FOUND,
        ADJUSTMENT_CONFLICT,
        Refusal {
            status: "402",
            description: "insufficient_balance: the debit is larger than the balance; nothing was taken.",
        },
    ],
};

/// Takes credit back (a chargeback, a correction) once per
/// `Idempotency-Key`, as `credit` adds it. A debit larger than the balance
/// is refused with 402 and takes nothing: money held for running jobs and
/// money already spent are not the operator's to take, and a balance below
/// zero would break the books.
pub async fn debit(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    Json(body): Json<AdjustmentBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    adjust(
        &state,
        actor,
        account_id,
        &headers,
        body,
        AdjustmentKind::Debit,
    )
    .await
}

async fn adjust(
    state: &AppState,
    actor: String,
    account_id: String,
    headers: &HeaderMap,
    body: AdjustmentBody,
    kind: AdjustmentKind,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    // A missing or unreadable header is refused by the action as an empty
    // key, with the same message as one too long.
    let idempotency_key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let adjusted = accounts::adjust_credit(
        state.store.as_ref(),
        &actor,
        AdjustmentRequest {
            account_id: &account_id,
            kind,
            amount: Micros(body.amount_micros),
            reason: &body.reason,
            idempotency_key,
        },
    )
    .await?;
    // A replay answers the first adjustment again, with 200 instead of 201.
    let status = if adjusted.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(adjustment_json(&adjusted))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    requests_per_second: Option<u32>,
    burst: Option<u32>,
    max_concurrent_generations: Option<u32>,
}

pub const LIMITS: Operation = Operation {
    id: "operator_set_limits",
    summary: "Change an account's limits; figures left out stay as they are",
    parameters: &ACCOUNT_PATH,
    body: Some(&[
        Field {
            name: "requests_per_second",
            required: false,
            schema: Schema::integer(1, MAX_LIMIT_FIGURE as i64),
        },
        Field {
            name: "burst",
            required: false,
            schema: Schema::integer(1, MAX_LIMIT_FIGURE as i64),
        },
        Field {
            name: "max_concurrent_generations",
            required: false,
            schema: Schema::integer(0, MAX_LIMIT_FIGURE as i64),
        },
    ]),
    success: Success {
        status: "200",
        description: "The account.",
        also_csv: false,
    },
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
};

/// Changes an account's limits; figures left out stay as they are.
pub async fn limits(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<LimitsBody>,
) -> Result<Json<Value>, ApiError> {
    let changes = LimitChanges {
        requests_per_second: body.requests_per_second,
        burst: body.burst,
        max_concurrent: body.max_concurrent_generations,
    };
    let account = accounts::set_limits(state.store.as_ref(), &actor, &account_id, changes).await?;
    Ok(Json(operator_account_json(&account)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LowBalanceBody {
    /// `"5.00"`; `null` (or left out) removes the alert.
    low_balance_threshold_usd: Option<String>,
    low_balance_webhook_url: Option<String>,
}

pub const LOW_BALANCE: Operation = Operation {
    id: "operator_set_low_balance_alert",
    summary: "Set or remove an account's low-balance alert: the threshold the dashboard warns below, and the URL the account.balance_low event goes to",
    parameters: &ACCOUNT_PATH,
    body: Some(&[
        Field {
            name: "low_balance_threshold_usd",
            required: false,
            schema: Schema::TEXT,
        },
        Field {
            name: "low_balance_webhook_url",
            required: false,
            schema: Schema::TEXT,
        },
    ]),
    success: Success {
        status: "200",
        description: "The account, with its low_balance_alert (null when removed).",
        also_csv: false,
    },
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
};

/// `POST /accounts/{account_id}/low-balance` `{"low_balance_threshold_usd":
/// "5.00", "low_balance_webhook_url": "https://…"}`: sets the alert, or
/// removes it without a threshold.
pub async fn low_balance(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<LowBalanceBody>,
) -> Result<Json<Value>, ApiError> {
    let account = accounts::set_low_balance_alert(
        state.store.as_ref(),
        &actor,
        &account_id,
        body.low_balance_threshold_usd.as_deref(),
        body.low_balance_webhook_url.as_deref(),
    )
    .await?;
    Ok(Json(operator_account_json(&account)))
}

pub const ROTATE_WEBHOOK_SECRET: Operation = Operation {
    id: "operator_rotate_webhook_secret",
    summary: "Issue a new webhook signing secret (shown once); deliveries are signed with the previous one too for 24 hours",
    parameters: &ACCOUNT_PATH,
    body: None,
    success: Success {
        status: "200",
        description: "The account's id, its new webhook_secret and when the previous one stops signing.",
        also_csv: false,
    },
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
};

/// Issues a new webhook signing secret (shown once); deliveries carry
/// signatures with both the old and the new secret for 24 hours.
pub async fn rotate_webhook_secret(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let account =
        accounts::rotate_webhook_secret(state.store.as_ref(), &actor, &account_id).await?;
    let mut shown = webhook_secret_json(&account);
    shown["account_id"] = json!(account.id);
    Ok(Json(shown))
}
