//! The operator API under `/admin/v1`: what `vidgate admin` does, over HTTP,
//! for operators' tools and payment systems. One operator token (from
//! `--admin-token-file` or `VIDGATE_ADMIN_TOKEN`) authenticates it, compared
//! in constant time; without one configured every request is refused. It is
//! never rate-limited per key (it has no key) and sees every account.
//! Every change is written to the audit log, with the operator's name from
//! the `X-Operator` header.

mod accounts;
mod audit;
mod generations;
mod keys;
mod models;
pub mod openapi;
mod usage;
mod users;

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use super::ApiError;
use crate::state::AppState;

/// Names the operator in the audit log; optional.
const OPERATOR_HEADER: &str = "x-operator";
const MAX_OPERATOR_NAME_LENGTH: usize = 100;
/// The name recorded when a request names no operator.
const DEFAULT_OPERATOR: &str = "operator";

pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/accounts", get(accounts::list).post(accounts::create))
        .route(
            "/accounts/{account_id}",
            get(accounts::show).delete(accounts::delete),
        )
        .route("/accounts/{account_id}/credit", post(accounts::credit))
        .route("/accounts/{account_id}/debit", post(accounts::debit))
        .route("/accounts/{account_id}/limits", post(accounts::limits))
        .route("/accounts/{account_id}/keys", post(keys::create))
        .route("/accounts/{account_id}/users", post(users::create))
        .route("/accounts/{account_id}/usage", get(usage::show))
        .route("/keys/{key_id}/revoke", post(keys::revoke))
        .route("/keys/{key_id}/limits", post(keys::limits))
        .route("/models/{vendor}/{model}/pause", post(models::pause))
        .route("/models/{vendor}/{model}/resume", post(models::resume))
        .route("/generations", get(generations::list))
        .route("/audit-log", get(audit::list))
        .route_layer(middleware::from_fn_with_state(state, authenticate_operator))
}

async fn authenticate_operator(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(token) = &state.operator_token else {
        return Err(ApiError::Unauthorized(
            "The operator API is off: start the server with --admin-token-file or VIDGATE_ADMIN_TOKEN."
                .into(),
        ));
    };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    if !token.matches(presented) {
        return Err(ApiError::Unauthorized(
            "Send the operator token as `Authorization: Bearer <token>`.".into(),
        ));
    }
    Ok(next.run(request).await)
}

/// The page size of the operator's lists (accounts, the audit log): 50
/// unless `limit` asks for 1 to 500.
fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    const DEFAULT_LIMIT: u32 = 50;
    const MAX_LIMIT: u32 = 500;
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("limit must be between 1 and {MAX_LIMIT}."),
        ));
    }
    Ok(limit)
}

/// The operator's name for the audit log, from `X-Operator`.
pub struct Operator(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Operator, ApiError> {
        let Some(value) = parts.headers.get(OPERATOR_HEADER) else {
            return Ok(Operator(DEFAULT_OPERATOR.to_owned()));
        };
        let name = value
            .to_str()
            .ok()
            .map(str::trim)
            .filter(|name| {
                !name.is_empty()
                    && name.len() <= MAX_OPERATOR_NAME_LENGTH
                    && name.chars().all(|character| !character.is_control())
            })
            .ok_or_else(|| {
                ApiError::invalid(
                    "X-Operator",
                    format!(
                        "X-Operator must be 1 to {MAX_OPERATOR_NAME_LENGTH} printable characters."
                    ),
                )
            })?;
        Ok(Operator(name.to_owned()))
    }
}
