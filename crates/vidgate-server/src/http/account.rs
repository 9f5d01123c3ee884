//! `GET /account`: the caller's own account, balance and limits.

use axum::Json;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::openapi::{Operation, Schema, Success, record};
use super::{ApiError, AppState};
use crate::representation::object_kind;
use crate::store::{Account, Caller};

// `"object": "account"`.
object_kind!(AccountKind, Account);

// The fields are in alphabetical order, the order of a `serde_json::Value`
// object, so the answer is the same bytes as the value the operator's views
// extend.
/// The caller's account, balance and limits, as the API and `vidgate admin
/// account show` present it.
#[derive(Serialize, ToSchema)]
#[schema(as = Account)]
pub struct AccountRecord<'a> {
    balance_usd: f64,
    credited_usd: f64,
    held_usd: f64,
    id: &'a str,
    #[schema(inline)]
    limits: LimitsRecord,
    name: &'a str,
    #[schema(inline)]
    object: AccountKind,
    spent_usd: f64,
}

#[derive(Serialize, ToSchema)]
struct LimitsRecord {
    burst: u32,
    max_concurrent_generations: u32,
    requests_per_second: u32,
}

impl<'a> AccountRecord<'a> {
    pub fn new(account: &'a Account) -> AccountRecord<'a> {
        AccountRecord {
            balance_usd: account.shown_balance().to_usd(),
            credited_usd: account.credited.to_usd(),
            held_usd: account.held.to_usd(),
            id: &account.id,
            limits: LimitsRecord {
                burst: account.limits.burst,
                max_concurrent_generations: account.limits.max_concurrent,
                requests_per_second: account.limits.requests_per_second,
            },
            name: &account.name,
            object: AccountKind::Account,
            spent_usd: account.captured.to_usd(),
        }
    }
}

/// The account record as a JSON value, for the operator's views that add
/// to it.
pub fn account_json(account: &Account) -> Value {
    serde_json::to_value(AccountRecord::new(account)).expect("an account record is plain JSON")
}

pub const SHOW: Operation = Operation {
    id: "get_account",
    summary: "The caller's account, balance and limits",
    tag: "account",
    success: Success::json(
        "200",
        "The account.",
        Schema::Of(record::<AccountRecord<'static>>),
    ),
    ..Operation::PLAIN
};

pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    let account = caller_account(&state, &caller).await?;
    Ok(Json(AccountRecord::new(&account)).into_response())
}

/// The caller's account. An API key outlives its account only for the
/// moment an account deletion takes, and is then refused as unknown.
pub(super) async fn caller_account(state: &AppState, caller: &Caller) -> Result<Account, ApiError> {
    state
        .store
        .accounts()
        .get(&caller.account_id)
        .await?
        .ok_or_else(account_gone)
}

/// What a key whose account no longer exists is answered.
pub(super) fn account_gone() -> ApiError {
    ApiError::Unauthorized("The account of this API key no longer exists.".into())
}
