//! `GET /account`: the caller's own account, balance and limits.

use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Value, json};

use super::{ApiError, AppState};
use crate::store::{Account, Caller};

/// The account as the API and `vidgate admin account show` present it.
pub fn account_json(account: &Account) -> Value {
    json!({
        "id": account.id,
        "object": "account",
        "name": account.name,
        "balance_usd": account.balance.to_usd(),
        "held_usd": account.held.to_usd(),
        "spent_usd": account.captured.to_usd(),
        "credited_usd": account.credited.to_usd(),
        "limits": {
            "requests_per_second": account.limits.requests_per_second,
            "burst": account.limits.burst,
            "max_concurrent_generations": account.limits.max_concurrent,
        },
    })
}

pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let account = state
        .store
        .account(&caller.account_id)
        .await?
        .ok_or_else(|| {
            ApiError::Unauthorized("The account of this API key no longer exists.".into())
        })?;
    Ok(Json(account_json(&account)))
}
