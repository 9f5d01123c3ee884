//! API keys of any account: `POST /admin/v1/accounts/{id}/keys` (create;
//! the secret is shown once), `POST /admin/v1/keys/{key_id}/revoke` and
//! `POST /admin/v1/keys/{key_id}/limits` (its spend limit), each through
//! its operator action (`operator_actions::keys`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Operator;
use super::openapi::{ACCOUNT_DELETED, Field, NOT_FOUND, Operation, Parameter, Schema, Success};
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::operator_actions::keys::{self, MAX_KEY_NAME_LENGTH};
use crate::representation::spend_limit_json;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: Option<String>,
}

pub const CREATE: Operation = Operation {
    id: "operator_create_key",
    summary: "Create an API key for an account (the secret is shown once)",
    parameters: &[Parameter::Operator, Parameter::Path("account_id")],
    body: Some(&[Field {
        name: "name",
        required: false,
        schema: Schema::text_up_to(MAX_KEY_NAME_LENGTH),
    }]),
    success: Success {
        status: "201",
        description: "The key's id and secret.",
        also_csv: false,
    },
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
};

pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let created = keys::create(
        state.store.as_ref(),
        &actor,
        &account_id,
        body.name.as_deref(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "key_id": created.key.key_id,
            "api_key": created.key.api_key,
            "account_id": account_id,
            "name": created.name,
        })),
    ))
}

pub const REVOKE: Operation = Operation {
    id: "operator_revoke_key",
    summary: "Revoke an API key; it is refused from then on",
    parameters: &[Parameter::Operator, Parameter::Path("key_id")],
    body: None,
    success: Success {
        status: "200",
        description: "The key's id, revoked.",
        also_csv: false,
    },
    refusals: &[NOT_FOUND],
};

pub async fn revoke(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(key_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    keys::revoke(state.store.as_ref(), &actor, &key_id).await?;
    Ok(Json(json!({ "key_id": key_id, "revoked": true })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsBody {
    /// `"1.00"`; `null` (or left out) removes the limit.
    spend_limit_usd: Option<String>,
    spend_limit_period: Option<String>,
}

pub const LIMITS: Operation = Operation {
    id: "operator_set_key_spend_limit",
    summary: "Set or remove an API key's spend limit",
    parameters: &[Parameter::Operator, Parameter::Path("key_id")],
    body: Some(&[
        Field {
            name: "spend_limit_usd",
            required: false,
            schema: Schema::TEXT,
        },
        Field {
            name: "spend_limit_period",
            required: false,
            schema: Schema::Choice {
                values: &["day", "month", "total"],
                default: "day",
            },
        },
    ]),
    success: Success {
        status: "200",
        description: "The key's id and its spend limit (null when removed).",
        also_csv: false,
    },
    refusals: &[NOT_FOUND],
};

/// `POST /keys/{key_id}/limits` `{"spend_limit_usd": "1.00",
/// "spend_limit_period": "day"}`: sets the key's spend limit, or removes it
/// with `"spend_limit_usd": null`.
pub async fn limits(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(key_id): Path<String>,
    Json(body): Json<LimitsBody>,
) -> Result<Json<Value>, ApiError> {
    let limit = keys::set_spend_limit(
        state.store.as_ref(),
        &actor,
        &key_id,
        body.spend_limit_usd.as_deref(),
        body.spend_limit_period.as_deref(),
    )
    .await?;
    Ok(Json(spend_limit_json(&key_id, limit)))
}
