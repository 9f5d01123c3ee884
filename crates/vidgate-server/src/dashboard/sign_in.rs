//! Sign-in, sign-up and sign-out.

use std::time::Duration;

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::{
    self, CsrfForm, SignedInBeforePasswordChange, cookie, device_cookie, pre_session_csrf_cookie,
    session_cookie, set_cookie,
};
use super::{Layout, render};
use crate::application::client_address::client_address_of;
use crate::application::passwords;
use crate::application::sessions::{DEVICE_LIFETIME, PRE_SESSION_LIFETIME, tokens_match};
use crate::application::state::AppState;
use crate::application::users::{self, UserError};
use crate::metrics::RateLimit;
use crate::rate_limit::SignInDevice;
use crate::store::now_millis;

/// What a sign-up with an email that already has a user is told.
const SIGN_UP_REFUSED: &str = "No account could be created with this email and password. To use an existing account, sign in.";

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    layout: Layout,
    /// `sign-in` or `sign-up`.
    form_id: &'static str,
    email: String,
    alert: Option<String>,
    allow_sign_up: bool,
}

#[derive(Deserialize)]
pub struct Credentials {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf_token: String,
}

/// The pre-session CSRF token of the request, when it is one we issued and
/// has not expired, or a new one with the cookie that sets it.
fn pre_session_token(state: &AppState, headers: &HeaderMap) -> (String, Option<HeaderValue>) {
    let csrf = &state.dashboard.pre_session_csrf;
    let secure = state.dashboard.secure_cookies;
    let name = pre_session_csrf_cookie(secure);
    match cookie(headers, name) {
        Some(token) if csrf.is_valid(token, now_millis()) => (token.to_owned(), None),
        _ => {
            let token = csrf.issue(now_millis());
            let set = set_cookie(name, &token, PRE_SESSION_LIFETIME, secure);
            (token, Some(set))
        }
    }
}

fn sign_in_page(
    state: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    form_id: &'static str,
    email: &str,
    alert: Option<String>,
) -> Response {
    let (token, set) = pre_session_token(state, headers);
    let title = if form_id == "sign-up" {
        "Create an account"
    } else {
        "Sign in"
    };
    let mut response = render(
        status,
        &SignInPage {
            layout: Layout::signed_out(title, &token),
            form_id,
            email: email.to_owned(),
            alert,
            allow_sign_up: state.dashboard.allow_sign_up,
        },
    );
    if let Some(set) = set {
        response.headers_mut().append(header::SET_COOKIE, set);
    }
    response
}

/// A session already signed in goes straight to the overview.
async fn already_signed_in(state: &AppState, headers: &HeaderMap) -> bool {
    matches!(
        session::current_session(
            state.store.as_ref(),
            headers,
            state.dashboard.secure_cookies
        )
        .await,
        Ok(Some(_))
    )
}

pub async fn show(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if already_signed_in(&state, &headers).await {
        return Redirect::to("/dashboard").into_response();
    }
    sign_in_page(&state, &headers, StatusCode::OK, "sign-in", "", None)
}

/// The form echoes the cookie's token (double submit), and the token is one
/// we issued that has not expired.
fn pre_session_csrf_ok(state: &AppState, headers: &HeaderMap, form_token: &str) -> bool {
    cookie(
        headers,
        pre_session_csrf_cookie(state.dashboard.secure_cookies),
    )
    .is_some_and(|token| {
        tokens_match(token, form_token)
            && state
                .dashboard
                .pre_session_csrf
                .is_valid(token, now_millis())
    })
}

/// Answers a successful sign-in or sign-up: the session cookie, the device
/// cookie that makes this browser known to the email, and a redirect to the
/// overview, or to the password page for a user who must change their
/// password first.
async fn signed_in(state: &AppState, user: &crate::store::User) -> Response {
    let secure = state.dashboard.secure_cookies;
    match session::start_session(state.store.as_ref(), user, secure).await {
        Ok(cookie) => {
            let next = if user.must_change_password {
                session::PASSWORD_PAGE
            } else {
                "/dashboard"
            };
            let mut response = Redirect::to(next).into_response();
            response.headers_mut().append(header::SET_COOKIE, cookie);
            let device = state
                .dashboard
                .device_cookies
                .issue(&user.email, now_millis());
            response.headers_mut().append(
                header::SET_COOKIE,
                set_cookie(device_cookie(secure), &device, DEVICE_LIFETIME, secure),
            );
            response
        }
        Err(error) => super::internal_error(error),
    }
}

/// Whether the request comes from a browser that signed in to `email`
/// before.
pub(super) fn device_of(state: &AppState, headers: &HeaderMap, email: &str) -> SignInDevice {
    let known =
        cookie(headers, device_cookie(state.dashboard.secure_cookies)).is_some_and(|value| {
            state
                .dashboard
                .device_cookies
                .is_valid_for(value, email, now_millis())
        });
    if known {
        SignInDevice::Known
    } else {
        SignInDevice::Unknown
    }
}

/// The sign-in page of an attempt refused by a sign-in limit, with the
/// wait before the next one.
fn sign_in_refused(state: &AppState, headers: &HeaderMap, email: &str, wait: Duration) -> Response {
    state.metrics.record_rate_limit_refusal(RateLimit::SignIn);
    let response = sign_in_page(
        state,
        headers,
        StatusCode::TOO_MANY_REQUESTS,
        "sign-in",
        email,
        Some(format!(
            "Too many sign-in attempts. Wait {} seconds and try again.",
            wait.as_secs().max(1)
        )),
    );
    super::with_retry_after(response, wait)
}

pub async fn submit(
    State(state): State<AppState>,
    parts: Parts,
    Form(credentials): Form<Credentials>,
) -> Response {
    let headers = &parts.headers;
    if !pre_session_csrf_ok(&state, headers, &credentials.csrf_token) {
        return session::csrf_refused(None);
    }
    let email = credentials.email.trim().to_lowercase();
    let address = client_address_of(&parts, &state.trusted_proxies);
    let device = device_of(&state, headers, &email);
    if let Err(wait) = state
        .dashboard
        .sign_in_limits
        .check(&email, address, device)
        .await
    {
        return sign_in_refused(&state, headers, &email, wait);
    }
    let user = match state.store.users().by_email(&email).await {
        Ok(user) => user,
        Err(error) => return super::internal_error(error),
    };
    let stored = user.as_ref().map(|user| user.password_hash.clone());
    // `verify` accepts no password without a stored hash, so a match always
    // comes with its user.
    match (passwords::verify(credentials.password, stored).await, user) {
        (Ok(true), Some(user)) if user.one_time_password_expired(now_millis()) => sign_in_page(
            &state,
            headers,
            StatusCode::UNAUTHORIZED,
            "sign-in",
            &email,
            Some(users::ONE_TIME_PASSWORD_EXPIRED.into()),
        ),
        (Ok(true), Some(user)) => signed_in(&state, &user).await,
        (Ok(_), _) => sign_in_page(
            &state,
            headers,
            StatusCode::UNAUTHORIZED,
            "sign-in",
            &email,
            Some("The email or the password is wrong.".into()),
        ),
        (Err(error), _) => match error.busy_retry_after() {
            Some(wait) => super::with_retry_after(
                sign_in_page(
                    &state,
                    headers,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "sign-in",
                    &email,
                    Some(super::hashing_busy_alert(wait)),
                ),
                wait,
            ),
            None => super::internal_error(error),
        },
    }
}

pub async fn show_sign_up(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !state.dashboard.allow_sign_up {
        return super::not_found(None);
    }
    sign_in_page(&state, &headers, StatusCode::OK, "sign-up", "", None)
}

pub async fn sign_up(
    State(state): State<AppState>,
    parts: Parts,
    Form(credentials): Form<Credentials>,
) -> Response {
    if !state.dashboard.allow_sign_up {
        return super::not_found(None);
    }
    let headers = &parts.headers;
    if !pre_session_csrf_ok(&state, headers, &credentials.csrf_token) {
        return session::csrf_refused(None);
    }
    // Sign-ups hash a password too, so they share the address limit.
    let address = client_address_of(&parts, &state.trusted_proxies);
    let email = credentials.email.trim().to_lowercase();
    let device = device_of(&state, headers, &email);
    match state
        .dashboard
        .sign_in_limits
        .check(&email, address, device)
        .await
    {
        Ok(()) => {}
        Err(wait) => {
            state.metrics.record_rate_limit_refusal(RateLimit::SignIn);
            return sign_in_page(
                &state,
                headers,
                StatusCode::TOO_MANY_REQUESTS,
                "sign-up",
                &email,
                Some(format!(
                    "Too many attempts. Wait {} seconds and try again.",
                    wait.as_secs().max(1)
                )),
            );
        }
    }
    match users::sign_up(state.store.as_ref(), &email, credentials.password).await {
        Ok((_, user)) => signed_in(&state, &user).await,
        Err(
            error @ (UserError::InvalidEmail(_)
            | UserError::InvalidPassword(_)
            | UserError::EmailTaken(_)),
        ) => {
            let message = match error {
                // Not "that email has a user": the form must not tell
                // strangers which emails are registered.
                UserError::EmailTaken(_) => SIGN_UP_REFUSED.to_owned(),
                other => other.to_string(),
            };
            sign_in_page(
                &state,
                headers,
                StatusCode::BAD_REQUEST,
                "sign-up",
                &email,
                Some(message),
            )
        }
        Err(error) => match error.busy_retry_after() {
            Some(wait) => super::with_retry_after(
                sign_in_page(
                    &state,
                    headers,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "sign-up",
                    &email,
                    Some(super::hashing_busy_alert(wait)),
                ),
                wait,
            ),
            None => super::internal_error(error),
        },
    }
}

/// Revokes the session in the database (the cookie is refused from now on,
/// wherever a copy of it is) and deletes the cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    signed_in: SignedInBeforePasswordChange,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    if let Err(error) = state.store.users().revoke_session(&signed_in.0.id).await {
        return super::internal_error(error);
    }
    let mut response = Redirect::to("/dashboard/sign-in").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(
            session_cookie(state.dashboard.secure_cookies),
            "",
            Duration::ZERO,
            state.dashboard.secure_cookies,
        ),
    );
    response
}
