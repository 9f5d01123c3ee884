//! API keys of any account: `POST /admin/v1/accounts/{id}/keys` (create;
//! the secret is shown once), `POST /admin/v1/keys/{key_id}/revoke` and
//! `POST /admin/v1/keys/{key_id}/limits` (its spend limit), each through
//! its operator action (`operator_actions::keys`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{ACCOUNT_DELETED, NOT_FOUND, Operator, answer};
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::http::openapi::{Field, Operation, Parameter, RequestBody, Schema, Success, record};
use crate::operator_actions::keys::{self, MAX_KEY_NAME_LENGTH};
use crate::representation::SpendLimitRecord;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    name: Option<String>,
}

/// A new API key; its secret is shown once.
#[derive(Serialize, ToSchema)]
#[schema(as = CreatedKey)]
pub struct CreatedKeyRecord<'a> {
    account_id: &'a str,
    #[schema(pattern = "^vg_live_")]
    api_key: &'a str,
    key_id: &'a str,
    name: &'a str,
}

/// A key that is refused from now on.
#[derive(Serialize, ToSchema)]
#[schema(as = RevokedKey)]
pub struct RevokedKeyRecord<'a> {
    key_id: &'a str,
    revoked: bool,
}

pub const CREATE: Operation = Operation {
    id: "operator_create_key",
    summary: "Create an API key for an account (the secret is shown once)",
    parameters: &[Parameter::Operator, Parameter::Path("account_id")],
    body: Some(RequestBody::fields(&[Field {
        name: "name",
        required: false,
        schema: Schema::text_up_to(MAX_KEY_NAME_LENGTH),
    }])),
    success: Success::json(
        "201",
        "The key's id and secret.",
        Schema::Of(record::<CreatedKeyRecord<'static>>),
    ),
    refusals: &[NOT_FOUND, ACCOUNT_DELETED],
    ..Operation::PLAIN
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
    let shown = CreatedKeyRecord {
        account_id: &account_id,
        api_key: &created.key.api_key,
        key_id: &created.key.key_id,
        name: &created.name,
    };
    Ok((StatusCode::CREATED, answer(shown)))
}

pub const REVOKE: Operation = Operation {
    id: "operator_revoke_key",
    summary: "Revoke an API key; it is refused from then on",
    parameters: &[Parameter::Operator, Parameter::Path("key_id")],
    body: None,
    success: Success::json(
        "200",
        "The key's id, revoked.",
        Schema::Of(record::<RevokedKeyRecord<'static>>),
    ),
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
};

pub async fn revoke(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(key_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    keys::revoke(state.store.as_ref(), &actor, &key_id).await?;
    Ok(answer(RevokedKeyRecord {
        key_id: &key_id,
        revoked: true,
    }))
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
    body: Some(RequestBody::fields(&[
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
    ])),
    success: Success::json(
        "200",
        "The key's id and its spend limit (null when removed).",
        Schema::Of(record::<SpendLimitRecord<'static>>),
    ),
    refusals: &[NOT_FOUND],
    ..Operation::PLAIN
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
    Ok(answer(SpendLimitRecord::new(&key_id, limit)))
}
