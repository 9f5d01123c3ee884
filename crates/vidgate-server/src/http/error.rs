//! The one place where failures become HTTP responses. Every error body has
//! the shape of SPEC.md section 7: `{"error":{"code","message","param"?}}`.
//! Server-side failures say nothing internal; their cause chain is logged.

use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::application::callers::CallerRefusal;
use crate::application::submit::{CONCURRENCY_RETRY_AFTER, IDEMPOTENCY_KEY, SubmitError};
use crate::application::users::UserError;
use crate::backend::WebhookRefusal;
use crate::backend::WebhookRejection;
use crate::diagnostics::log_cause_chain;
use crate::operator_actions::OperatorActionError;
use crate::store::{CONNECTION_WAIT, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    InvalidRequest {
        message: String,
        param: Option<String>,
    },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    InsufficientBalance(String),
    /// Authenticated, but the request may not be made this way (a dashboard
    /// session's unsafe call without its CSRF token).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{message}")]
    Conflict {
        message: String,
        param: Option<String>,
    },
    /// The file was deleted by the retention sweep (or with its account):
    /// it existed, and will not come back.
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after: Duration,
    },
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    DirectUploadUnavailable(String),
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    ModelUnavailable(String),
    /// This node is fetching as much request media as it may at once; the
    /// same request may pass after `retry_after` (503 with `Retry-After`,
    /// under the spec's only 503 code).
    #[error("{message}")]
    Busy {
        message: String,
        retry_after: Duration,
    },
    /// The database could not be reached within `CONNECTION_WAIT`: 503
    /// with `Retry-After`, under the spec's only 503 code, so clients back
    /// off and retry instead of piling up.
    #[error("The service cannot reach its database at the moment. Retry with backoff.")]
    DatabaseUnavailable,
}

/// Marks a response answered because the database was unreachable, so the
/// envelope reports the outage once to `Health` instead of logging an
/// error for every request it refused.
#[derive(Debug, Clone, Copy)]
pub struct DatabaseUnreachable;

/// Marks a server error whose cause its handler logged itself, throttled
/// (a provider webhook refused while the provider's keys cannot be read,
/// which anyone can provoke with a request), so the envelope does not log
/// each one.
#[derive(Debug, Clone, Copy)]
pub struct LoggedByHandler;

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::InvalidRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    pub fn internal(error: impl std::error::Error + Send + Sync + 'static) -> ApiError {
        ApiError::Internal(Box::new(error))
    }

    /// The same error with the field at fault under another surface's name
    /// (`rename` maps vidgate's field names to the surface's), for the
    /// errors of the shared submit and upload paths behind another dialect.
    pub fn with_param_renamed(self, rename: fn(&str) -> &str) -> ApiError {
        let renamed = |param: Option<String>| param.map(|param| rename(&param).to_owned());
        match self {
            ApiError::InvalidRequest { message, param } => ApiError::InvalidRequest {
                message,
                param: renamed(param),
            },
            ApiError::Conflict { message, param } => ApiError::Conflict {
                message,
                param: renamed(param),
            },
            other => other,
        }
    }

    fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        match self {
            ApiError::InvalidRequest { .. } => (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized),
            ApiError::InsufficientBalance(_) => {
                (StatusCode::PAYMENT_REQUIRED, ErrorCode::InsufficientBalance)
            }
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
            ApiError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed)
            }
            ApiError::Conflict { .. } => (StatusCode::CONFLICT, ErrorCode::Conflict),
            ApiError::Gone(_) => (StatusCode::GONE, ErrorCode::Gone),
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
            }
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::RateLimited),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::InternalError),
            ApiError::DirectUploadUnavailable(_) => (
                StatusCode::NOT_IMPLEMENTED,
                ErrorCode::DirectUploadUnavailable,
            ),
            ApiError::Upstream(_) => (StatusCode::BAD_GATEWAY, ErrorCode::UpstreamError),
            ApiError::ModelUnavailable(_)
            | ApiError::Busy { .. }
            | ApiError::DatabaseUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ModelUnavailable)
            }
        }
    }
}

// Every code an error answer can carry. The Error schema's list of codes is
// derived from this enum, so a new code is documented as soon as an error
// answers with it.
/// Stable machine-readable code. Branch on this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    InsufficientBalance,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    Gone,
    PayloadTooLarge,
    RateLimited,
    InternalError,
    DirectUploadUnavailable,
    UpstreamError,
    ModelUnavailable,
}

/// The body of every error answer (SPEC.md section 7).
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    #[schema(inline)]
    error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
struct ErrorDetail {
    // Its description is the enum's: a description here too would wrap the
    // inlined enum in an `allOf`.
    #[schema(inline)]
    code: ErrorCode,
    /// Human-readable text; wording may change.
    message: String,
    /// The request field that caused the error, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    param: Option<String>,
}

impl From<vidgate_media::InspectError> for ApiError {
    fn from(error: vidgate_media::InspectError) -> Self {
        match error {
            vidgate_media::InspectError::Invalid(invalid) => ApiError::InvalidRequest {
                message: invalid.message,
                param: invalid.param,
            },
            vidgate_media::InspectError::Busy { retry_after } => ApiError::Busy {
                message: format!(
                    "The service is fetching as much request media as it can at once. Retry in {} s; nothing was charged.",
                    retry_after.as_secs().max(1)
                ),
                retry_after,
            },
            // A limit on this one client, not the node failing to serve:
            // 429, so that monitoring does not read a flood from one
            // address as the model being down.
            vidgate_media::InspectError::RequesterAtLimit { limit, retry_after } => {
                ApiError::RateLimited {
                    message: format!(
                        "Too many requests: this client is already fetching request media {limit} at a time, the most one client may. Retry in {} s; nothing was charged.",
                        retry_after.as_secs().max(1)
                    ),
                    retry_after,
                }
            }
        }
    }
}

/// A query string that does not fit its handler's parameters (a number
/// where text is expected, an unknown value): the whole query is named,
/// since the rejection does not say which field.
impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::InvalidRequest {
            message: format!("The query string could not be read: {rejection}"),
            param: None,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        if error.is_unavailable() {
            ApiError::DatabaseUnavailable
        } else {
            ApiError::internal(error)
        }
    }
}

/// What the API answers to credentials that name no caller.
impl From<CallerRefusal> for ApiError {
    fn from(refusal: CallerRefusal) -> Self {
        match refusal {
        CallerRefusal::MalformedApiKey => ApiError::Unauthorized(
            "Malformed Authorization header: expected `Bearer vg_live_…`.".into(),
        ),
        CallerRefusal::UnknownApiKey => {
            ApiError::Unauthorized("The API key is unknown or revoked.".into())
        }
        CallerRefusal::SessionEnded => ApiError::Unauthorized(
            "The dashboard session has ended: sign in again, or send `Authorization: Bearer <API key>`."
                .into(),
        ),
        CallerRefusal::MissingCsrfToken => ApiError::Forbidden(
            "A request made with the dashboard session needs the page's X-CSRF-Token header."
                .into(),
        ),
        CallerRefusal::PasswordChangeRequired => ApiError::Forbidden(
            "The dashboard user must replace their one-time password first, at /dashboard/password."
                .into(),
        ),
        CallerRefusal::Store(error) => error.into(),
    }
    }
}

/// What the operator API answers to an action it refused.
impl From<OperatorActionError> for ApiError {
    fn from(error: OperatorActionError) -> Self {
        let deleted = |account_id: String, consequence: &str| ApiError::Conflict {
            message: format!("The account {account_id:?} was deleted; {consequence}."),
            param: None,
        };
        match error {
            OperatorActionError::Invalid { param, message } => ApiError::invalid(param, message),
            OperatorActionError::AccountNotFound(account_id) => {
                ApiError::NotFound(format!("No account {account_id:?} exists."))
            }
            OperatorActionError::AccountDeleted(account_id) => {
                deleted(account_id, "it cannot be changed")
            }
            OperatorActionError::BooksClosed(account_id) => {
                deleted(account_id, "its books are closed")
            }
            OperatorActionError::IdempotencyKeyReused => ApiError::Conflict {
                message: format!(
                    "This {IDEMPOTENCY_KEY} was already used for a different account, kind or amount."
                ),
                param: Some(IDEMPOTENCY_KEY.to_owned()),
            },
            OperatorActionError::InsufficientBalance { balance } => {
                ApiError::InsufficientBalance(format!(
                    "The balance is {} micro-dollars; a debit cannot take it below zero. Nothing was taken.",
                    balance.0
                ))
            }
            OperatorActionError::AccountBusy { generations, .. } => ApiError::Conflict {
                message: format!(
                    "The account has {generations} generations queued or running; cancel them or \
                     wait until they finish, then delete it."
                ),
                param: None,
            },
            OperatorActionError::KeyNotFound(key_id) => {
                ApiError::NotFound(format!("No unrevoked key {key_id:?} exists."))
            }
            OperatorActionError::NotAllowed(message) => ApiError::Forbidden(message),
            OperatorActionError::ModelNotFound(model_id) => {
                ApiError::NotFound(format!("No model {model_id:?} exists."))
            }
            OperatorActionError::UserNotFound(email) => {
                ApiError::NotFound(format!("No user {email:?} exists."))
            }
            OperatorActionError::User(error) => error.into(),
            OperatorActionError::Store(error) => error.into(),
        }
    }
}

impl From<UserError> for ApiError {
    fn from(error: UserError) -> Self {
        let message = error.to_string();
        match error {
            UserError::InvalidEmail(_) => ApiError::invalid("email", message),
            UserError::InvalidPassword(_) => ApiError::invalid("password", message),
            UserError::EmailTaken(_) => ApiError::Conflict {
                message,
                param: Some("email".to_owned()),
            },
            UserError::NoAccount(account_id) => {
                ApiError::NotFound(format!("No account {account_id:?} exists."))
            }
            UserError::AccountDeleted(account_id) => ApiError::Conflict {
                message: format!("The account {account_id:?} was deleted; it cannot be changed."),
                param: None,
            },
            UserError::Store(error) => error.into(),
            UserError::Password(error) => match error.busy_retry_after() {
                Some(retry_after) => ApiError::Busy {
                    message: format!(
                        "The server is hashing too many passwords at the moment. Retry after {} seconds.",
                        retry_after.as_secs().max(1)
                    ),
                    retry_after,
                },
                None => ApiError::internal(error),
            },
        }
    }
}

/// What a provider is answered when its webhook is refused.
impl From<WebhookRefusal> for ApiError {
    fn from(refusal: WebhookRefusal) -> Self {
        let message = refusal.to_string();
        match refusal {
            WebhookRefusal::UnknownJob => ApiError::NotFound(message),
            WebhookRefusal::Rejected(
                WebhookRejection::Malformed(_) | WebhookRejection::InvalidBody(_),
            ) => ApiError::InvalidRequest {
                message,
                param: None,
            },
            WebhookRefusal::Rejected(
                WebhookRejection::Stale
                | WebhookRejection::BadSignature
                | WebhookRejection::OtherAccount,
            ) => ApiError::Unauthorized(message),
            // The provider's own error text stays in the log.
            WebhookRefusal::Unavailable(_) => ApiError::Upstream(
                "The webhook could not be verified now; nothing was taken. Retry later.".into(),
            ),
            WebhookRefusal::Store(error) => error.into(),
        }
    }
}

/// What the API answers to a generation that was not submitted.
impl From<SubmitError> for ApiError {
    fn from(error: SubmitError) -> Self {
        let message = error.to_string();
        match error {
            SubmitError::Invalid { message, param } => ApiError::InvalidRequest { message, param },
            SubmitError::ModelUnavailable(_) => ApiError::ModelUnavailable(message),
            SubmitError::RefusedUpstream(_) => ApiError::Upstream(message),
            SubmitError::ConcurrencyLimit { .. } => ApiError::RateLimited {
                message,
                retry_after: CONCURRENCY_RETRY_AFTER,
            },
            SubmitError::InsufficientBalance { .. } => ApiError::InsufficientBalance(message),
            // SPEC.md's 402 is money that does not cover the price, retried
            // after fixing; its 429 is for request rates and generations in
            // progress, retried with backoff, which a day's limit would not
            // cure. No request field caused it, so no param.
            SubmitError::SpendLimit { .. } => ApiError::InsufficientBalance(message),
            SubmitError::IdempotencyKeyReused => ApiError::Conflict {
                message,
                param: Some(IDEMPOTENCY_KEY.to_owned()),
            },
            SubmitError::AccountNotFound => ApiError::Unauthorized(message),
            SubmitError::MediaBusy { retry_after } => ApiError::Busy {
                message,
                retry_after,
            },
            SubmitError::MediaFetchLimit { retry_after, .. } => ApiError::RateLimited {
                message,
                retry_after,
            },
            SubmitError::DatabaseUnavailable => ApiError::DatabaseUnavailable,
            SubmitError::Internal(source) => ApiError::Internal(source),
        }
    }
}

impl ApiError {
    /// What a client may be told: the message and the parameter at fault.
    /// An internal error's cause chain goes to the log here instead, and the
    /// client is told only that the service failed.
    fn public_message_and_param(&self) -> (String, Option<String>) {
        match self {
            ApiError::Internal(source) => {
                log_cause_chain(source.as_ref());
                (
                    "The service failed to handle the request. Retry with backoff.".to_owned(),
                    None,
                )
            }
            ApiError::InvalidRequest { message, param } | ApiError::Conflict { message, param } => {
                (message.clone(), param.clone())
            }
            other => (other.to_string(), None),
        }
    }

    /// The status and the message a client may see, for pages that show an
    /// API error in their own form (the dashboard's playground).
    pub fn status_and_public_message(&self) -> (StatusCode, String) {
        (self.status_and_code().0, self.public_message_and_param().0)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let (message, param) = self.public_message_and_param();
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message,
                param,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        let retry_after = match &self {
            ApiError::RateLimited { retry_after, .. } | ApiError::Busy { retry_after, .. } => {
                Some(*retry_after)
            }
            ApiError::DatabaseUnavailable => {
                response.extensions_mut().insert(DatabaseUnreachable);
                Some(CONNECTION_WAIT)
            }
            _ => None,
        };
        if let Some(retry_after) = retry_after {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use vidgate_core::Micros;

    use super::*;

    /// The submit metrics label a refusal with `SubmitError::code`; it must
    /// be the code the API answers.
    #[test]
    fn every_submit_refusal_is_counted_under_the_code_the_api_answers() {
        let refusals = [
            SubmitError::Invalid {
                message: "bad".into(),
                param: None,
            },
            SubmitError::ModelUnavailable("paused".into()),
            SubmitError::RefusedUpstream("refused".into()),
            SubmitError::ConcurrencyLimit { limit: 1 },
            SubmitError::InsufficientBalance {
                balance: Micros(0),
                price: Micros(1),
            },
            SubmitError::SpendLimit {
                limit: crate::spend_limits::SpendLimit {
                    amount: Micros(1),
                    period: crate::spend_limits::SpendPeriod::Day,
                },
                spent: Micros(1),
                price: Micros(1),
                resets_at: Some(0),
            },
            SubmitError::IdempotencyKeyReused,
            SubmitError::AccountNotFound,
            SubmitError::MediaBusy {
                retry_after: Duration::from_secs(1),
            },
            SubmitError::MediaFetchLimit {
                limit: 4,
                retry_after: Duration::from_secs(1),
            },
            SubmitError::DatabaseUnavailable,
            SubmitError::Internal(Box::new(std::io::Error::other("disk"))),
        ];
        for refusal in refusals {
            let counted = refusal.code();
            let answered = ApiError::from(refusal).status_and_code().1;
            assert_eq!(serde_json::json!(counted), serde_json::json!(answered));
        }
    }
}
