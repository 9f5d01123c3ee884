//! Dashboard users: `POST /admin/v1/accounts/{id}/users` (a user of an
//! account, with a one-time password, shown once, the person changes at
//! sign-in), `DELETE /admin/v1/users/{email}` (the user and its sessions)
//! and `POST /admin/v1/users/{email}/revoke-sessions` (signed out
//! everywhere), each through its operator action
//! (`operator_actions::users`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::{NOT_FOUND, Operator, answer};
use crate::application::state::AppState;
use crate::http::ApiError;
use crate::http::openapi::{
    Field, Operation, Parameter, Refusal, RequestBody, Schema, Success, record,
};
use crate::operator_actions::users;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    email: String,
}

/// A new dashboard user and its one-time password, shown once.
#[derive(Serialize, ToSchema)]
#[schema(as = CreatedUser)]
pub struct CreatedUserRecord<'a> {
    account_id: &'a str,
    email: &'a str,
    id: &'a str,
    #[schema(required = true)]
    password: Option<&'a str>,
}

/// A dashboard user that was removed.
#[derive(Serialize, ToSchema)]
#[schema(as = RemovedUser)]
pub struct RemovedUserRecord<'a> {
    account_id: &'a str,
    email: &'a str,
    id: &'a str,
    removed: bool,
}

/// A dashboard user signed out everywhere.
#[derive(Serialize, ToSchema)]
#[schema(as = RevokedSessions)]
pub struct RevokedSessionsRecord<'a> {
    email: &'a str,
    id: &'a str,
    /// How many sessions were live.
    sessions_revoked: u64,
}

pub const CREATE: Operation = Operation {
    id: "operator_create_user",
    summary: "Create a dashboard user of an account, with a one-time password",
    parameters: &[Parameter::Operator, Parameter::Path("account_id")],
    body: Some(RequestBody::fields(&[Field {
        name: "email",
        required: true,
        schema: Schema::TEXT,
    }])),
    success: Success::json(
        "201",
        "The user (an owner of the account) and its one-time password, \
         which the user must change at the first sign-in.",
        Schema::Of(record::<CreatedUserRecord<'static>>),
    ),
    refusals: &[
        NOT_FOUND,
        Refusal {
            status: "409",
            description: "conflict: a user with this email exists, or the account was deleted.",
        },
    ],
    ..Operation::PLAIN
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
    let shown = CreatedUserRecord {
        account_id: &created.user.account_id,
        email: &created.user.email,
        id: &created.user.id,
        password: created.one_time_password.as_deref(),
    };
    Ok((StatusCode::CREATED, answer(shown)))
}

pub const REMOVE: Operation = Operation {
    id: "operator_remove_user",
    summary: "Remove a dashboard user; its sessions end at once and the API keys they made are revoked",
    parameters: &USER_PATH,
    body: None,
    success: Success::json(
        "200",
        "The user's id, account_id and email, removed.",
        Schema::Of(record::<RemovedUserRecord<'static>>),
    ),
    refusals: &[USER_NOT_FOUND],
    ..Operation::PLAIN
};

pub async fn remove(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(email): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let user = users::remove(state.store.as_ref(), &actor, &email).await?;
    Ok(answer(RemovedUserRecord {
        account_id: &user.account_id,
        email: &user.email,
        id: &user.id,
        removed: true,
    }))
}

pub const REVOKE_SESSIONS: Operation = Operation {
    id: "operator_revoke_user_sessions",
    summary: "End every session of a dashboard user, signed in anywhere; the user can sign in again",
    parameters: &USER_PATH,
    body: None,
    success: Success::json(
        "200",
        "The user's id and email, and how many sessions were live.",
        Schema::Of(record::<RevokedSessionsRecord<'static>>),
    ),
    refusals: &[USER_NOT_FOUND],
    ..Operation::PLAIN
};

pub async fn revoke_sessions(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(email): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (user, revoked) = users::revoke_sessions(state.store.as_ref(), &actor, &email).await?;
    Ok(answer(RevokedSessionsRecord {
        email: &user.email,
        id: &user.id,
        sessions_revoked: revoked,
    }))
}
