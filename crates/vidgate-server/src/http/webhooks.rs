//! `POST /account/webhook-secret/rotate`: a new signing secret for the
//! caller's account.

use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Value, json};

use super::{ApiError, AppState, rfc3339};
use crate::accounts;
use crate::store::{Account, Caller};

/// The account's current secret and how long the previous one still signs,
/// as the API and `vidgate admin account rotate-webhook-secret` show them.
pub fn webhook_secret_json(account: &Account) -> Value {
    json!({
        "object": "webhook_secret",
        "webhook_secret": account.webhook_secret,
        "previous_secret_expires_at": account.previous_webhook_secret_expires_at.map(rfc3339),
    })
}

/// Returns the new secret once; it is not shown by any other endpoint.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let account = accounts::rotate_webhook_secret(state.store.as_ref(), &caller.account_id)
        .await?
        .ok_or_else(|| {
            ApiError::Unauthorized("The account of this API key no longer exists.".into())
        })?;
    tracing::info!(account = %account.id, "webhook secret rotated");
    Ok(Json(webhook_secret_json(&account)))
}
