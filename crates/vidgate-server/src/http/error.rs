//! The one place where failures become HTTP responses. Every error body has
//! the shape of SPEC.md section 7: `{"error":{"code","message","param"?}}`.
//! Server-side failures say nothing internal; their cause chain is logged.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::StoreError;

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
}

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

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::InvalidRequest { .. } => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::InsufficientBalance(_) => {
                (StatusCode::PAYMENT_REQUIRED, "insufficient_balance")
            }
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            ApiError::DirectUploadUnavailable(_) => {
                (StatusCode::NOT_IMPLEMENTED, "direct_upload_unavailable")
            }
            ApiError::Upstream(_) => (StatusCode::BAD_GATEWAY, "upstream_error"),
            ApiError::ModelUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "model_unavailable"),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ApiError::internal(error)
    }
}

/// Writes an error's whole cause chain on one log line.
pub fn log_cause_chain(error: &(dyn std::error::Error + 'static)) {
    let mut chain = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push_str(": ");
        chain.push_str(&cause.to_string());
        source = cause.source();
    }
    tracing::error!(error = %chain, "request failed on the service side");
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
        let mut body = json!({ "error": { "code": code, "message": message } });
        if let Some(param) = param {
            body["error"]["param"] = json!(param);
        }
        let mut response = (status, axum::Json(body)).into_response();
        if let ApiError::RateLimited { retry_after, .. } = &self {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
