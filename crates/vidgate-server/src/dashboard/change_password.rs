//! The signed-in user's own password (`/dashboard/password`): the current
//! one, a new one and the new one repeated. A user with a one-time password
//! is held here by every other page until they choose their own
//! (`session::SignedIn`).

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::SignedInBeforePasswordChange;
use super::{Layout, Section, render};
use crate::application::client_address::client_address_of;
use crate::application::state::AppState;
use crate::application::users;
use crate::metrics::RateLimit;

#[derive(Template)]
#[template(path = "password.html")]
struct PasswordPage {
    layout: Layout,
    alert: Option<String>,
    /// The form field the alert is about (`current_password`,
    /// `new_password` or `repeat_password`), marked invalid.
    invalid_field: &'static str,
    /// Right after a change: what it did.
    notice: Option<String>,
}

fn password_page(
    session: &crate::store::Session,
    status: StatusCode,
    alert: Option<String>,
    invalid_field: &'static str,
    notice: Option<String>,
) -> Response {
    render(
        status,
        &PasswordPage {
            layout: Layout::signed_in(session, "Your password", Section::Password),
            alert,
            invalid_field,
            notice,
        },
    )
}

#[derive(Deserialize)]
pub struct PasswordQuery {
    #[serde(default)]
    changed: Option<String>,
}

pub async fn show(
    signed_in: SignedInBeforePasswordChange,
    Query(query): Query<PasswordQuery>,
) -> Response {
    // The notice is fixed words: the query cannot put its own on the page.
    let notice = query
        .changed
        .is_some()
        .then(|| "Your password was changed. You are signed out everywhere else.".to_owned());
    password_page(&signed_in.0, StatusCode::OK, None, "", notice)
}

#[derive(Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    current_password: String,
    #[serde(default)]
    new_password: String,
    #[serde(default)]
    repeat_password: String,
    #[serde(default)]
    csrf_token: String,
}

pub async fn submit(
    State(state): State<AppState>,
    signed_in: SignedInBeforePasswordChange,
    parts: Parts,
    Form(form): Form<PasswordForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let session = &signed_in.0;
    // The current password is checked as a sign-in checks one, within the
    // same limits, so a stolen session cannot guess it at leisure: a session
    // without its browser's device cookie counts against the email's bucket.
    let address = client_address_of(&parts, &state.trusted_proxies);
    let device = super::sign_in::device_of(&state, &parts.headers, &session.email);
    match state
        .dashboard
        .sign_in_limits
        .check(&session.email, address, device)
        .await
    {
        Ok(()) => {}
        Err(wait) => {
            state.metrics.record_rate_limit_refusal(RateLimit::SignIn);
            let alert = format!(
                "Too many attempts. Wait {} seconds and try again.",
                wait.as_secs().max(1)
            );
            return password_page(
                session,
                StatusCode::TOO_MANY_REQUESTS,
                Some(alert),
                "",
                None,
            );
        }
    }
    match users::change_password(
        state.store.as_ref(),
        session,
        form.current_password,
        form.new_password,
        &form.repeat_password,
    )
    .await
    {
        Ok(_) => Redirect::to("/dashboard/password?changed=1").into_response(),
        Err(error) => match error.field() {
            Some(field) => password_page(
                session,
                StatusCode::BAD_REQUEST,
                Some(error.to_string()),
                field,
                None,
            ),
            None => match error.busy_retry_after() {
                Some(wait) => super::with_retry_after(
                    password_page(
                        session,
                        StatusCode::SERVICE_UNAVAILABLE,
                        Some(super::hashing_busy_alert(wait)),
                        "",
                        None,
                    ),
                    wait,
                ),
                None => super::internal_error(error),
            },
        },
    }
}
