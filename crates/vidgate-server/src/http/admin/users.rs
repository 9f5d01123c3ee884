//! Dashboard users: `POST /admin/v1/accounts/{id}/users` (a user of an
//! account, with a one-time password, shown once, the person changes at
//! sign-in), `DELETE /admin/v1/users/{email}` (the user and its sessions)
//! and `POST /admin/v1/users/{email}/revoke-sessions` (signed out
//! everywhere), each through its operator action
//! (`operator_actions::users`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Operator;
use super::openapi::{Field, NOT_FOUND, Operation, Parameter, Refusal, Schema, Success};
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::operator_actions::users;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    email: String,
}

pub const CREATE: Operation = Operation {
    id: "operator_create_user",
    summary: "Create a dashboard user of an account, with a one-time password",
    parameters: &[Parameter::Operator, Parameter::Path("account_id")],
    body: Some(&[Field {
        name: "email",
        required: true,
        schema: Schema::TEXT,
    }]),
    success: Success {
        status: "201",
        description: "The user (an owner of the account) and its one-time password, \
                      which the user must change at the first sign-in.",
        also_csv: false,
    },
    refusals: &[
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: a user with this email exists, or the account was deleted.",
        },
    ],
};

/// The refusal of an operation on a user that is not there.
const USER_NOT_FOUND: Refusal = Refusal {
    status: "404",
    description: "not_found: no user has this email.",
};
const USER_PATH: [Parameter; 2] = [Parameter::Operator, Parameter::Path("email")];

pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let created =
        users::create(state.store.as_ref(), &actor, &account_id, &body.email, None).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "id": created.user.id,
            "account_id": created.user.account_id,
            "email": created.user.email,
            "password": created.one_time_password,
        })),
    ))
}

pub const REMOVE: Operation = Operation {
    id: "operator_remove_user",
    summary: "Remove a dashboard user; its sessions end at once and the API keys they made are revoked",
    parameters: &USER_PATH,
    body: None,
    success: Success {
        status: "200",
        description: "The user's id, account_id and email, removed.",
        also_csv: false,
    },
    refusals: &[USER_NOT_FOUND],
};

pub async fn remove(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(email): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let user = users::remove(state.store.as_ref(), &actor, &email).await?;
    Ok(Json(json!({
        "id": user.id,
        "account_id": user.account_id,
        "email": user.email,
        "removed": true,
    })))
}

pub const REVOKE_SESSIONS: Operation = Operation {
    id: "operator_revoke_user_sessions",
    summary: "End every session of a dashboard user, signed in anywhere; the user can sign in again",
    parameters: &USER_PATH,
    body: None,
    success: Success {
        status: "200",
        description: "The user's id and email, and how many sessions were live.",
        also_csv: false,
    },
    refusals: &[USER_NOT_FOUND],
};

pub async fn revoke_sessions(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(email): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (user, revoked) = users::revoke_sessions(state.store.as_ref(), &actor, &email).await?;
    Ok(Json(json!({
        "id": user.id,
        "email": user.email,
        "sessions_revoked": revoked,
    })))
}
