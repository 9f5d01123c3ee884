//! Accounts across the service: `GET /admin/v1/accounts` (list),
//! `POST /admin/v1/accounts` (create, with its first API key),
//! `GET /admin/v1/accounts/{id}` (show),
//! `POST /admin/v1/accounts/{id}/credit` (a credit adjustment, applied once
//! per `Idempotency-Key`), `POST /admin/v1/accounts/{id}/debit` (the same,
//! taking money back), `POST /admin/v1/accounts/{id}/limits` and
//! `DELETE /admin/v1/accounts/{id}` (its media and personal data; the
//! tombstone keeps the money figures).

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use vidgate_core::Micros;

use super::{Operator, page_limit};
use crate::accounts;
use crate::http::{ApiError, account_json, rfc3339};
use crate::state::AppState;
use crate::store::{
    Account, AccountDeletion, AccountLimits, AdjustmentKind, AdjustmentOutcome, CreditAdjustment,
    NewAuditEntry, NewCreditAdjustment,
};
use crate::submit::IDEMPOTENCY_KEY;

const MAX_NAME_LENGTH: usize = 200;
const MAX_REASON_LENGTH: usize = 500;
const MAX_IDEMPOTENCY_KEY_LENGTH: usize = 255;
/// The highest figure any limit may be set to, a bound against typos.
const MAX_LIMIT_FIGURE: u32 = 10_000;
/// The largest single adjustment, a bound against a typo's extra zeros.
const MAX_ADJUSTMENT: Micros = Micros(1_000_000 * 1_000_000);

/// The account as operators see it: the customer's view plus when it was
/// made and, for a tombstone, deleted (never its webhook secret).
fn operator_account_json(account: &Account) -> Value {
    let mut shown = account_json(account);
    shown["created_at"] = json!(rfc3339(account.created_at));
    shown["deleted_at"] = json!(account.deleted_at.map(rfc3339));
    shown
}

/// Deletes an account's media and personal data. Refused with 409 while
/// generations are queued or running: the operator cancels them (or waits)
/// first, so no job finishes into a deleted account. Deleting a deleted
/// account answers the tombstone again.
pub async fn delete(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.store.delete_account(&account_id, &actor).await? {
        AccountDeletion::Deleted { account, .. } | AccountDeletion::AlreadyDeleted(account) => {
            Ok(Json(operator_account_json(&account)))
        }
        AccountDeletion::Active { generations } => Err(ApiError::Conflict {
            message: format!(
                "The account has {generations} generations queued or running; cancel them or \
                 wait until they finish, then delete it."
            ),
            param: None,
        }),
        AccountDeletion::AccountNotFound => Err(ApiError::NotFound(format!(
            "No account {account_id:?} exists."
        ))),
    }
}

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

pub async fn show(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let account = state
        .store
        .account(&account_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No account {account_id:?} exists.")))?;
    Ok(Json(operator_account_json(&account)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: String,
}

/// Creates an account with no credit and its first API key (shown once);
/// credit is added with a credit adjustment, so money always has a reason.
pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LENGTH {
        return Err(ApiError::invalid(
            "name",
            format!("name must be 1 to {MAX_NAME_LENGTH} characters."),
        ));
    }
    let created = accounts::create_account(state.store.as_ref(), name, Micros::ZERO).await?;
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: "account.create",
            target: created.account.id.clone(),
            detail: json!({ "name": name, "key_id": created.key_id }),
        })
        .await?;
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

fn adjustment_json(adjustment: &CreditAdjustment, account: &Account) -> Value {
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
    let idempotency_key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|key| !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY_LENGTH)
        .ok_or_else(|| {
            ApiError::invalid(
                IDEMPOTENCY_KEY,
                format!(
                    "A {} needs an {IDEMPOTENCY_KEY} header of 1 to \
                     {MAX_IDEMPOTENCY_KEY_LENGTH} characters, so that it is applied once.",
                    kind.as_str()
                ),
            )
        })?
        .to_owned();
    let amount = Micros(body.amount_micros);
    if amount.0 <= 0 || amount > MAX_ADJUSTMENT {
        return Err(ApiError::invalid(
            "amount_micros",
            format!(
                "amount_micros must be more than 0 and at most {}.",
                MAX_ADJUSTMENT.0
            ),
        ));
    }
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_LENGTH {
        return Err(ApiError::invalid(
            "reason",
            format!("reason must be 1 to {MAX_REASON_LENGTH} characters."),
        ));
    }
    let outcome = state
        .store
        .adjust_credit(NewCreditAdjustment {
            idempotency_key,
            account_id: account_id.clone(),
            kind,
            amount,
            reason: reason.to_owned(),
            actor,
        })
        .await?;
    match outcome {
        AdjustmentOutcome::Applied(adjustment, account) => Ok((
            StatusCode::CREATED,
            Json(adjustment_json(&adjustment, &account)),
        )),
        AdjustmentOutcome::Replayed(adjustment, account) => {
            Ok((StatusCode::OK, Json(adjustment_json(&adjustment, &account))))
        }
        AdjustmentOutcome::KeyReused => Err(ApiError::Conflict {
            message: format!(
                "This {IDEMPOTENCY_KEY} was already used for a different account, kind or amount."
            ),
            param: Some(IDEMPOTENCY_KEY.to_owned()),
        }),
        AdjustmentOutcome::InsufficientBalance { balance } => {
            Err(ApiError::InsufficientBalance(format!(
                "The balance is {} micro-dollars; a debit cannot take it below zero. Nothing was taken.",
                balance.0
            )))
        }
        AdjustmentOutcome::AccountDeleted => Err(ApiError::Conflict {
            message: format!("The account {account_id:?} was deleted; its books are closed."),
            param: None,
        }),
        AdjustmentOutcome::AccountNotFound => Err(ApiError::NotFound(format!(
            "No account {account_id:?} exists."
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    requests_per_second: Option<u32>,
    burst: Option<u32>,
    max_concurrent_generations: Option<u32>,
}

/// Changes an account's limits; figures left out stay as they are.
pub async fn limits(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<LimitsBody>,
) -> Result<Json<Value>, ApiError> {
    for (param, figure, minimum) in [
        ("requests_per_second", body.requests_per_second, 1),
        ("burst", body.burst, 1),
        (
            "max_concurrent_generations",
            body.max_concurrent_generations,
            0,
        ),
    ] {
        if let Some(figure) = figure
            && !(minimum..=MAX_LIMIT_FIGURE).contains(&figure)
        {
            return Err(ApiError::invalid(
                param,
                format!("{param} must be between {minimum} and {MAX_LIMIT_FIGURE}."),
            ));
        }
    }
    let current = accounts::changeable_account(state.store.as_ref(), &account_id)
        .await?
        .limits;
    let limits = AccountLimits {
        requests_per_second: body
            .requests_per_second
            .unwrap_or(current.requests_per_second),
        burst: body.burst.unwrap_or(current.burst),
        max_concurrent: body
            .max_concurrent_generations
            .unwrap_or(current.max_concurrent),
    };
    let account = state
        .store
        .set_account_limits(&account_id, limits)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("No account {account_id:?} exists.")))?;
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: "account.limits",
            target: account_id,
            detail: json!({
                "requests_per_second": limits.requests_per_second,
                "burst": limits.burst,
                "max_concurrent_generations": limits.max_concurrent,
            }),
        })
        .await?;
    Ok(Json(operator_account_json(&account)))
}
