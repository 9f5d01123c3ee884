//! Who is calling the API: the holder of an API key, or a dashboard session
//! used as an API caller (the playground's own calls). The HTTP layer reads
//! the credentials from the request and decides what a refusal answers;
//! this module decides whether the credentials name a caller.

use crate::application::sessions::{api_caller, live_session, tokens_match};
use crate::ids::{API_KEY_PREFIX, sha256_hex};
use crate::store::{Caller, Store, StoreError};

/// API keys are about 50 characters; anything much longer is not one of
/// ours and is refused before hashing.
const MAX_API_KEY_CHARS: usize = 128;

/// Why credentials name no caller.
#[derive(Debug, thiserror::Error)]
pub enum CallerRefusal {
    #[error("the API key is not in vidgate's format")]
    MalformedApiKey,
    #[error("the API key is unknown or revoked")]
    UnknownApiKey,
    #[error("the dashboard session has ended")]
    SessionEnded,
    #[error("a state-changing request with a session lacks the session's CSRF token")]
    MissingCsrfToken,
    #[error("the session's user must replace a one-time password first")]
    PasswordChangeRequired,
    #[error("could not read the caller")]
    Store(#[from] StoreError),
}

/// The caller an API key belongs to.
pub async fn caller_for_api_key(store: &Store, key: &str) -> Result<Caller, CallerRefusal> {
    if !key.starts_with(API_KEY_PREFIX) || key.len() > MAX_API_KEY_CHARS {
        return Err(CallerRefusal::MalformedApiKey);
    }
    store
        .accounts()
        .authenticate(&sha256_hex(key.as_bytes()))
        .await?
        .ok_or(CallerRefusal::UnknownApiKey)
}

/// The caller behind a dashboard session token. A token that names no live
/// session is refused, and so is a request that may change something
/// (`changes_state`) without the session's CSRF token: a browser sends the
/// session's cookie along with requests any site makes it send.
pub async fn caller_for_session(
    store: &Store,
    session_token: &str,
    changes_state: bool,
    csrf_token: &str,
) -> Result<Caller, CallerRefusal> {
    let session = live_session(store, session_token)
        .await?
        .ok_or(CallerRefusal::SessionEnded)?;
    if changes_state && !tokens_match(&session.csrf_token, csrf_token) {
        return Err(CallerRefusal::MissingCsrfToken);
    }
    // Every dashboard page sends such a user to the password page; the API
    // the pages call is held to the same, or a one-time password would
    // open it without ever being replaced.
    if session.must_change_password {
        return Err(CallerRefusal::PasswordChangeRequired);
    }
    Ok(api_caller(&session))
}
