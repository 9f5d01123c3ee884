//! Sessions and CSRF.
//!
//! A session is a random 32-byte token in the `vg_session` cookie (HttpOnly,
//! SameSite=Lax, Path=/, Secure behind https); the database keeps its
//! SHA-256 only. It ends after `IDLE_TIMEOUT` without use, at
//! `ABSOLUTE_LIFETIME` after sign-in however active, or at sign-out, which
//! revokes it in the database so the cookie is refused from then on.
//!
//! Every session has its own random CSRF token. Each dashboard form sends it
//! as `csrf_token`, and the dashboard's API calls as `X-CSRF-Token`; it is
//! compared in constant time. Before there is a session (the sign-in and
//! sign-up forms) a double-submit cookie, `vg_csrf`, plays that part, so a
//! foreign site cannot sign a browser in to the attacker's account either.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng;
use subtle::ConstantTimeEq;

use crate::http::{ApiError, AppState};
use crate::ids::{random_token, sha256_hex};
use crate::store::{Caller, NewSession, Session, Store, StoreError, User, now_millis};

pub const SESSION_COOKIE: &str = "vg_session";
pub const PRE_SESSION_CSRF_COOKIE: &str = "vg_csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A session unused for this long has ended.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// A session ends this long after sign-in, however active it is.
pub const ABSOLUTE_LIFETIME: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Tokens are 43 characters; anything much longer is not one of ours and
/// is refused before hashing.
const MAX_TOKEN_CHARS: usize = 128;

/// 32 random bytes, base64url without padding.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The value of one cookie of the request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty() && value.len() <= MAX_TOKEN_CHARS)
}

/// A `Set-Cookie` value for one of the dashboard's cookies. `max_age` zero
/// deletes the cookie.
pub fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        max_age.as_secs()
    );
    // Names and values are our own base64url tokens, always valid.
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""))
}

pub fn tokens_match(expected: &str, given: &str) -> bool {
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The live session the request's cookie names, if any.
pub async fn current_session(
    store: &dyn Store,
    headers: &HeaderMap,
) -> Result<Option<Session>, StoreError> {
    match cookie(headers, SESSION_COOKIE) {
        Some(token) => {
            store
                .session(&sha256_hex(token.as_bytes()), IDLE_TIMEOUT)
                .await
        }
        None => Ok(None),
    }
}

/// Starts a session for a user who just proved their password; returns the
/// `Set-Cookie` header value that carries it.
pub async fn start_session(
    store: &dyn Store,
    user: &User,
    secure: bool,
) -> Result<HeaderValue, StoreError> {
    let token = random_secret();
    store
        .create_session(&NewSession {
            id: format!("ses_{}", random_token(20)),
            token_sha256: sha256_hex(token.as_bytes()),
            user_id: user.id.clone(),
            account_id: user.account_id.clone(),
            csrf_token: random_secret(),
            expires_at: now_millis() + ABSOLUTE_LIFETIME.as_millis() as i64,
        })
        .await?;
    Ok(set_cookie(
        SESSION_COOKIE,
        &token,
        ABSOLUTE_LIFETIME,
        secure,
    ))
}

/// A signed-in dashboard request. Extracting it from a request without a
/// live session redirects to the sign-in page.
pub struct SignedIn(pub Session);

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        match current_session(state.store.as_ref(), &parts.headers).await {
            Ok(Some(session)) => Ok(SignedIn(session)),
            Ok(None) => Err(Redirect::to("/dashboard/sign-in").into_response()),
            Err(error) => Err(super::internal_error(error)),
        }
    }
}

impl SignedIn {
    /// The 403 page for a form whose `csrf_token` is not this session's.
    pub fn csrf_refusal(&self, form_token: &str) -> Option<Response> {
        (!tokens_match(&self.0.csrf_token, form_token)).then(|| csrf_refused(Some(&self.0)))
    }
}

pub fn csrf_refused(session: Option<&Session>) -> Response {
    super::error_page(
        StatusCode::FORBIDDEN,
        session,
        "Form expired",
        "The form was not sent from this dashboard page, or it is out of date. \
         Reload the page and try again.",
    )
}

/// The API caller behind a dashboard session, for `/api/v1` requests that
/// carry no `Authorization` header. `None` without a session cookie. A
/// cookie that names no live session is refused, and so is an unsafe method
/// without the session's `X-CSRF-Token` (a cookie alone is sent by any site
/// the browser visits). The session has its own rate-limit bucket,
/// `session:<id>`.
pub async fn session_caller(
    state: &AppState,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Option<Caller>, ApiError> {
    if cookie(headers, SESSION_COOKIE).is_none() {
        return Ok(None);
    }
    let session = current_session(state.store.as_ref(), headers)
        .await?
        .ok_or_else(|| {
            ApiError::Unauthorized(
                "The dashboard session has ended: sign in again, or send `Authorization: Bearer <API key>`."
                    .into(),
            )
        })?;
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe {
        let given = headers
            .get(CSRF_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if !tokens_match(&session.csrf_token, given) {
            return Err(ApiError::Forbidden(
                "A request made with the dashboard session needs the page's X-CSRF-Token header."
                    .into(),
            ));
        }
    }
    Ok(Some(api_caller(&session)))
}

/// The session as an API caller: the session's account, with a rate-limit
/// bucket of its own, so the dashboard's calls count without sharing a key's.
pub fn api_caller(session: &Session) -> Caller {
    Caller {
        key_id: format!("session:{}", session.id),
        account_id: session.account_id.clone(),
        limits: session.limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_exact_name() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("xvg_session=no; vg_session=abc; other=1"),
        );
        assert_eq!(cookie(&headers, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&headers, PRE_SESSION_CSRF_COOKIE), None);
    }

    #[test]
    fn tokens_must_match_exactly_and_not_be_empty() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abc", "abd"));
        assert!(!tokens_match("abc", ""));
        assert!(!tokens_match("", ""));
    }
}
