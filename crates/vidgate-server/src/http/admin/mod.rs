//! The operator API under `/admin/v1`: what `vidgate admin` does, over HTTP,
//! for operators' tools and payment systems. Each change is an operator
//! action (`operator_actions`), the function the CLI calls too; the
//! handlers read the request and show the answer. One operator token (from
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
mod usage;
mod users;

use axum::Json;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use super::ApiError;
use super::openapi::{
    Door, Parameter, Refusal, Route, Schema, SecurityScheme, Surface, Tag, VIDGATE_ERROR, described,
};
use crate::application::state::AppState;

/// Names the operator in the audit log; optional.
const OPERATOR_HEADER: &str = "x-operator";
const MAX_OPERATOR_NAME_LENGTH: usize = 100;
/// The name recorded when a request names no operator.
const DEFAULT_OPERATOR: &str = "operator";

/// The operator API's door: the operator token, and the refusals every
/// operation may answer. Its paths are written in full (`/admin/v1/…`)
/// under a path-level server naming the origin, and its operations are
/// under the tag `operator`, so tools that read only the customer API can
/// leave them out by tag or by server.
const DOOR: Door = Door {
    mount: "/admin/v1",
    security: Some(SecurityScheme {
        name: "operator_token",
        description: "The operator token (--admin-token-file or VIDGATE_ADMIN_TOKEN).",
    }),
    tag: Some(Tag {
        name: "operator",
        description: "The operator API under /admin/v1, with the operator token; not for customers.",
    }),
    refusals: &[
        Refusal {
            status: "401",
            description: "unauthorized: no operator token is configured, or this is not it.",
        },
        Refusal {
            status: "400",
            description: "invalid_request: a bad parameter or body; param names it.",
        },
    ],
    rate_limit_headers: false,
    error: VIDGATE_ERROR,
};

/// The refusal of an operation on an account or a model that is not there.
const NOT_FOUND: Refusal = Refusal {
    status: "404",
    description: "not_found: no such account or model.",
};

/// The refusal of a change to an account that was deleted.
const ACCOUNT_DELETED: Refusal = Refusal {
    status: "409",
    description: "conflict: the account was deleted.",
};

/// The operator API's routes behind its door, for the router and the
/// document (`http::surfaces`).
pub(super) fn surface() -> Surface {
    Surface {
        door: &DOOR,
        routes: routes(),
        guard: |routes, state| {
            routes.route_layer(middleware::from_fn_with_state(
                state.clone(),
                authenticate_operator,
            ))
        },
    }
}

/// An answer of the operator API: its record, with the fields of every
/// object in alphabetical order, as when the answers were built as JSON
/// values (`vidgate admin` prints the same values).
fn answer(record: impl Serialize) -> Json<Value> {
    Json(serde_json::to_value(record).expect("an operator record is plain JSON"))
}

/// Every route of the operator API with its description: the router and
/// the OpenAPI document are both made from this list.
fn routes() -> Vec<Route> {
    let account = "/accounts/{account_id}";
    vec![
        described(Method::GET, "/accounts", accounts::list, &accounts::LIST),
        described(
            Method::POST,
            "/accounts",
            accounts::create,
            &accounts::CREATE,
        ),
        described(Method::GET, account, accounts::show, &accounts::SHOW),
        described(Method::DELETE, account, accounts::delete, &accounts::DELETE),
        described(
            Method::POST,
            "/accounts/{account_id}/credit",
            accounts::credit,
            &accounts::CREDIT,
        ),
        described(
            Method::POST,
            "/accounts/{account_id}/debit",
            accounts::debit,
            &accounts::DEBIT,
        ),
        described(
            Method::POST,
            "/accounts/{account_id}/limits",
            accounts::limits,
            &accounts::LIMITS,
        ),
        described(
            Method::POST,
            "/accounts/{account_id}/low-balance",
            accounts::low_balance,
            &accounts::LOW_BALANCE,
        ),
        described(
            Method::POST,
            "/accounts/{account_id}/webhook-secret/rotate",
            accounts::rotate_webhook_secret,
            &accounts::ROTATE_WEBHOOK_SECRET,
        ),
        described(
            Method::POST,
            "/accounts/{account_id}/keys",
            keys::create,
            &keys::CREATE,
        ),
        described(
            Method::POST,
            "/accounts/{account_id}/users",
            users::create,
            &users::CREATE,
        ),
        described(
            Method::GET,
            "/accounts/{account_id}/usage",
            usage::show,
            &usage::SHOW,
        ),
        described(
            Method::POST,
            "/keys/{key_id}/revoke",
            keys::revoke,
            &keys::REVOKE,
        ),
        described(
            Method::POST,
            "/keys/{key_id}/limits",
            keys::limits,
            &keys::LIMITS,
        ),
        described(
            Method::DELETE,
            "/users/{email}",
            users::remove,
            &users::REMOVE,
        ),
        described(
            Method::POST,
            "/users/{email}/revoke-sessions",
            users::revoke_sessions,
            &users::REVOKE_SESSIONS,
        ),
        described(
            Method::POST,
            "/models/{vendor}/{model}/pause",
            models::pause,
            &models::PAUSE,
        ),
        described(
            Method::POST,
            "/models/{vendor}/{model}/resume",
            models::resume,
            &models::RESUME,
        ),
        described(
            Method::GET,
            "/generations",
            generations::list,
            &generations::LIST,
        ),
        described(Method::GET, "/audit-log", audit::list, &audit::LIST),
    ]
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

/// The page size of the operator's lists (accounts, the audit log) when
/// `limit` asks for none, and the largest it may ask for.
const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

/// The `limit` query parameter of the operator's lists, as `page_limit`
/// reads it.
const PAGE_LIMIT: Parameter = Parameter::Query {
    name: "limit",
    description: None,
    schema: Schema::Integer {
        minimum: Some(1),
        maximum: Some(MAX_LIMIT as i64),
        default: Some(DEFAULT_LIMIT as i64),
        description: None,
    },
};

/// The page size of the operator's lists (accounts, the audit log): 50
/// unless `limit` asks for 1 to 500.
fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
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
