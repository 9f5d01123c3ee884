//! Sessions and CSRF.
//!
//! A session (`crate::application::sessions`: its token, lifetimes and CSRF token) is
//! carried in the `vg_session` cookie (HttpOnly, SameSite=Lax, Path=/);
//! behind https it is `__Host-vg_session` (Secure, no Domain), which no
//! sibling subdomain or plain-HTTP answer can set, so nobody can plant a
//! session of their own in a browser (login CSRF). Sign-out revokes it in
//! the database so the cookie is refused from then on.
//!
//! Every session has its own random CSRF token. Each dashboard form sends it
//! as `csrf_token`, and the dashboard's API calls as `X-CSRF-Token`; it is
//! compared in constant time. Before there is a session (the sign-in and
//! sign-up forms) a double-submit cookie, `vg_csrf`, plays that part, so a
//! foreign site cannot sign a browser in to the attacker's account either;
//! behind https it is `__Host-vg_csrf`, which no other host can set.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use crate::application::sessions::{self, ABSOLUTE_LIFETIME, live_session, tokens_match};
use crate::application::state::AppState;
use crate::store::{Session, Store, StoreError, User};

pub const SESSION_COOKIE: &str = "vg_session";
/// The session cookie's name behind https, `__Host-` prefixed for the same
/// reason as the pre-session CSRF cookie's.
pub const SECURE_SESSION_COOKIE: &str = "__Host-vg_session";

/// The session cookie's name: `__Host-` prefixed when the cookies are
/// `Secure` (the public URL is https). Only that name is read then: a plain
/// `vg_session` cookie is someone else's.
pub fn session_cookie(secure: bool) -> &'static str {
    if secure {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}
pub const PRE_SESSION_CSRF_COOKIE: &str = "vg_csrf";
/// The pre-session CSRF cookie's name behind https: a browser takes a
/// `__Host-` cookie only from this very host over https, with `Path=/` and
/// no `Domain`, so a sibling subdomain or a plain-HTTP answer cannot plant
/// one that the sign-in form would then match.
pub const SECURE_PRE_SESSION_CSRF_COOKIE: &str = "__Host-vg_csrf";

/// The pre-session CSRF cookie's name: `__Host-` prefixed when the cookies
/// are `Secure` (the public URL is https).
pub fn pre_session_csrf_cookie(secure: bool) -> &'static str {
    if secure {
        SECURE_PRE_SESSION_CSRF_COOKIE
    } else {
        PRE_SESSION_CSRF_COOKIE
    }
}
/// The cookie of a browser that signed in to an email
/// (`sessions::DeviceCookies`); `__Host-` over https, as the others.
pub const DEVICE_COOKIE: &str = "vg_device";
pub const SECURE_DEVICE_COOKIE: &str = "__Host-vg_device";

pub fn device_cookie(secure: bool) -> &'static str {
    if secure {
        SECURE_DEVICE_COOKIE
    } else {
        DEVICE_COOKIE
    }
}
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Tokens are 43 characters; anything much longer is not one of ours and
/// is refused before hashing.
const MAX_TOKEN_CHARS: usize = 128;

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

/// The session token the request's session cookie carries, if any.
pub fn session_token(headers: &HeaderMap, secure: bool) -> Option<&str> {
    cookie(headers, session_cookie(secure))
}

/// The live session the request's cookie names, if any.
pub async fn current_session(
    store: &Store,
    headers: &HeaderMap,
    secure: bool,
) -> Result<Option<Session>, StoreError> {
    match session_token(headers, secure) {
        Some(token) => live_session(store, token).await,
        None => Ok(None),
    }
}

/// Starts a session for a user who just proved their password; returns the
/// `Set-Cookie` header value that carries it.
pub async fn start_session(
    store: &Store,
    user: &User,
    secure: bool,
) -> Result<HeaderValue, StoreError> {
    let token = sessions::start_session(store, user).await?;
    Ok(set_cookie(
        session_cookie(secure),
        &token,
        ABSOLUTE_LIFETIME,
        secure,
    ))
}

/// Where a user whose password must change is sent from every other page.
pub const PASSWORD_PAGE: &str = "/dashboard/password";

/// A signed-in dashboard request of a user who may use the dashboard.
/// Extracting it from a request without a live session redirects to the
/// sign-in page, and from a user who must change their password (a one-time
/// password that someone else saw) to the password page.
pub struct SignedIn(pub Session);

/// A signed-in dashboard request, whether or not the user must change their
/// password first: the password page itself and sign-out take it.
pub struct SignedInBeforePasswordChange(pub Session);

/// The live session of the request, or the redirect to the sign-in page.
async fn signed_in_session(parts: &Parts, state: &AppState) -> Result<Session, Response> {
    match current_session(
        state.store.as_ref(),
        &parts.headers,
        state.dashboard.secure_cookies,
    )
    .await
    {
        Ok(Some(session)) => Ok(session),
        Ok(None) => Err(Redirect::to("/dashboard/sign-in").into_response()),
        Err(error) => Err(super::internal_error(error)),
    }
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let session = signed_in_session(parts, state).await?;
        if session.must_change_password {
            return Err(Redirect::to(PASSWORD_PAGE).into_response());
        }
        Ok(SignedIn(session))
    }
}

impl FromRequestParts<AppState> for SignedInBeforePasswordChange {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        Ok(SignedInBeforePasswordChange(
            signed_in_session(parts, state).await?,
        ))
    }
}

/// A form that sends nothing but its CSRF token (sign-out, revoking a key,
/// rotating the webhook secret).
#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf_token: String,
}

/// The 403 page for a form whose `csrf_token` is not the session's.
fn session_csrf_refusal(session: &Session, form_token: &str) -> Option<Response> {
    (!tokens_match(&session.csrf_token, form_token)).then(|| csrf_refused(Some(session)))
}

impl SignedIn {
    /// The 403 page for a form whose `csrf_token` is not this session's.
    pub fn csrf_refusal(&self, form_token: &str) -> Option<Response> {
        session_csrf_refusal(&self.0, form_token)
    }
}

impl SignedInBeforePasswordChange {
    /// The 403 page for a form whose `csrf_token` is not this session's.
    pub fn csrf_refusal(&self, form_token: &str) -> Option<Response> {
        session_csrf_refusal(&self.0, form_token)
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
}
