//! API keys of any account: `POST /admin/v1/accounts/{id}/keys` (create;
//! the secret is shown once), `POST /admin/v1/keys/{key_id}/revoke` and
//! `POST /admin/v1/keys/{key_id}/limits` (its spend limit).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Operator;
use crate::accounts;
use crate::http::ApiError;
use crate::representation::spend_limit_json;
use crate::spend_limits::parse_spend_limit;
use crate::state::AppState;
use crate::store::NewAuditEntry;

const MAX_KEY_NAME_LENGTH: usize = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: Option<String>,
}

pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = body.name.as_deref().map(str::trim).unwrap_or("default");
    if name.is_empty() || name.chars().count() > MAX_KEY_NAME_LENGTH {
        return Err(ApiError::invalid(
            "name",
            format!("name must be 1 to {MAX_KEY_NAME_LENGTH} characters."),
        ));
    }
    accounts::changeable_account(state.store.as_ref(), &account_id).await?;
    let key = accounts::create_api_key(state.store.as_ref(), &account_id, name).await?;
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: "key.create",
            target: key.key_id.clone(),
            detail: json!({ "account_id": account_id, "name": name }),
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "key_id": key.key_id,
            "api_key": key.api_key,
            "account_id": account_id,
            "name": name,
        })),
    ))
}

pub async fn revoke(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(key_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if !state.store.revoke_api_key(&key_id).await? {
        return Err(ApiError::NotFound(format!(
            "No unrevoked key {key_id:?} exists."
        )));
    }
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: "key.revoke",
            target: key_id.clone(),
            detail: json!({}),
        })
        .await?;
    Ok(Json(json!({ "key_id": key_id, "revoked": true })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    /// `"1.00"`; `null` removes the limit.
    spend_limit_usd: Option<String>,
    spend_limit_period: Option<String>,
}

/// `POST /keys/{key_id}/limits` `{"spend_limit_usd": "1.00",
/// "spend_limit_period": "day"}`: sets the key's spend limit, or removes it
/// with `"spend_limit_usd": null`.
pub async fn limits(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(key_id): Path<String>,
    Json(body): Json<LimitsBody>,
) -> Result<Json<Value>, ApiError> {
    let limit = parse_spend_limit(
        body.spend_limit_usd.as_deref(),
        body.spend_limit_period.as_deref(),
    )
    .map_err(|error| ApiError::invalid(error.param, error.message))?;
    if !state.store.set_spend_limit(&key_id, limit).await? {
        return Err(ApiError::NotFound(format!("No key {key_id:?} exists.")));
    }
    let shown = spend_limit_json(&key_id, limit);
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: "key.limit",
            target: key_id.clone(),
            detail: shown.clone(),
        })
        .await?;
    Ok(Json(shown))
}
