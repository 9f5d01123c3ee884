//! `POST /admin/v1/accounts/{id}/users`: a dashboard user of an account,
//! with a one-time password (shown once) the person changes at sign-in.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Operator;
use crate::dashboard::users;
use crate::http::ApiError;
use crate::state::AppState;
use crate::store::NewAuditEntry;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    email: String,
}

pub async fn create(
    State(state): State<AppState>,
    Operator(actor): Operator,
    Path(account_id): Path<String>,
    Json(body): Json<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let created = users::create_user(state.store.as_ref(), &account_id, &body.email, None).await?;
    state
        .store
        .record_audit(NewAuditEntry {
            actor,
            action: "user.create",
            target: created.user.id.clone(),
            detail: json!({ "account_id": account_id, "email": created.user.email }),
        })
        .await?;
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
