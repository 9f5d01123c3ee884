//! Completion webhooks from Cog model servers. Cog signs nothing and sends
//! no headers we choose, so each dispatch carries a random token as the last
//! segment of its webhook URL (`/internal/cog/{generation_id}/{token}`), and
//! only a webhook with the token of a prediction this process is waiting
//! for is taken. Request logs show the path with the token replaced
//! (`loggable_path`). The route sits outside the public API and its key
//! authentication.

use std::borrow::Cow;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::{ApiError, AppState};

/// Largest webhook body read. Outputs arrive inline as data URIs, about a
/// third larger than the clip; this allows clips of up to 384 MiB.
const MAX_CALLBACK_BODY_BYTES: usize = 512 * 1024 * 1024;

/// The prefix of the callback route; what follows is the generation id and
/// the token.
const CALLBACK_PATH_PREFIX: &str = "/internal/cog/";

/// What replaces a callback token in logged paths.
const REDACTED: &str = "[redacted]";

#[derive(Deserialize)]
pub struct CallbackPath {
    generation_id: String,
    token: String,
}

/// `path` as request logs may show it: a callback's token segment replaced,
/// every other path unchanged.
pub fn loggable_path(path: &str) -> Cow<'_, str> {
    let Some(rest) = path.strip_prefix(CALLBACK_PATH_PREFIX) else {
        return Cow::Borrowed(path);
    };
    match rest.split_once('/') {
        Some((generation_id, _token)) => {
            Cow::Owned(format!("{CALLBACK_PATH_PREFIX}{generation_id}/{REDACTED}"))
        }
        None => Cow::Borrowed(path),
    }
}

pub async fn receive(
    State(state): State<AppState>,
    Path(CallbackPath {
        generation_id,
        token,
    }): Path<CallbackPath>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let callbacks = state.backends.cog_callbacks();
    // The token is checked before the body is read, so a stranger cannot
    // make the server buffer a large body.
    if !callbacks.expects(&generation_id, &token) {
        return Err(ApiError::NotFound(
            "No prediction waits for this callback.".into(),
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_CALLBACK_BODY_BYTES)
        .await
        .map_err(|error| ApiError::InvalidRequest {
            message: format!("The callback body could not be read: {error}"),
            param: None,
        })?;
    let prediction: Value =
        serde_json::from_slice(&bytes).map_err(|error| ApiError::InvalidRequest {
            message: format!("The callback body is not JSON: {error}"),
            param: None,
        })?;
    if callbacks.deliver(&generation_id, &token, prediction) {
        Ok(StatusCode::OK)
    } else {
        Err(ApiError::NotFound(
            "No prediction waits for this callback.".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_paths_never_show_a_callback_token() {
        let token = "Zq8vT1sYb2xW9kLmN3pR5tU7wX0aC4eG";
        let callback = format!("/internal/cog/gen_01abc/{token}");
        assert_eq!(
            loggable_path(&callback),
            "/internal/cog/gen_01abc/[redacted]"
        );
        // Whatever follows the generation id is hidden, extra segments too.
        let longer = format!("/internal/cog/gen_01abc/{token}/more");
        let logged = loggable_path(&longer);
        assert!(!logged.contains(token), "{logged}");
        assert_eq!(
            loggable_path("/api/v1/generations/gen_01abc"),
            "/api/v1/generations/gen_01abc"
        );
        assert_eq!(
            loggable_path("/internal/cog/gen_01abc"),
            "/internal/cog/gen_01abc"
        );
    }
}
