//! The account dashboard: server-rendered HTML pages under `/dashboard` for
//! the people of an account (sign-in, API keys, balance and ledger,
//! generations, a playground, webhooks, the account's people and one's own
//! password).
//!
//! Pages are askama templates compiled into the binary and escaped by
//! default; the little JavaScript there is (copy buttons, the live quote and
//! the playground's run) and the stylesheet are served from the binary under
//! a content-hashed path. Every response carries a strict Content-Security-
//! Policy without `unsafe-inline`, so the templates hold no inline script or
//! style at all.
//!
//! A signed-in browser holds a random session token in an HttpOnly cookie;
//! the database keeps only its SHA-256 (`session.rs`). Every form carries the
//! session's CSRF token, and the sign-in form a pre-session one. The same
//! session is an API caller (`crate::application::callers`), used by the playground.
//! Every read and action is scoped to the session's account: what belongs
//! to another account answers 404, as an unknown id does.

mod assets;
mod change_password;
mod credit;
mod generations;
mod keys;
mod ledger;
mod low_balance;
mod overview;
mod people;
mod playground;
mod session;
mod sign_in;
mod webhooks;

use askama::Template;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use vidgate_core::Micros;
use vidgate_core::money::MICROS_PER_CENT;

pub use session::{CSRF_HEADER, session_token};

use crate::application::state::AppState;
use crate::store::Session;

/// Largest form body a dashboard page accepts; the playground's prompt
/// (5000 characters) and a few URLs fit many times over.
const MAX_FORM_BYTES: usize = 64 * 1024;

const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; media-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes: `GET /` sends people to it, and everything else
/// lives under `/dashboard`.
pub fn router() -> Router<AppState> {
    let pages = Router::new()
        .route("/", get(overview::show))
        .route("/add-credit", post(credit::add_credit))
        .route("/low-balance", post(low_balance::set_alert))
        .route("/sign-in", get(sign_in::show).post(sign_in::submit))
        .route(
            "/sign-up",
            get(sign_in::show_sign_up).post(sign_in::sign_up),
        )
        .route("/sign-out", post(sign_in::sign_out))
        .route("/ledger", get(ledger::show))
        .route("/keys", get(keys::list).post(keys::create))
        .route(
            "/keys/{key_id}/revoke",
            get(keys::confirm_revoke).post(keys::revoke),
        )
        .route("/keys/{key_id}/limit", post(keys::set_limit))
        .route(
            "/password",
            get(change_password::show).post(change_password::submit),
        )
        .route("/people", get(people::list).post(people::invite))
        .route(
            "/people/members",
            post(people::set_members_manage_keys_and_secrets),
        )
        .route("/people/{user_id}/role", post(people::set_role))
        .route(
            "/people/{user_id}/remove",
            get(people::confirm_remove).post(people::remove),
        )
        .route("/generations", get(generations::list))
        .route("/generations/{generation_id}", get(generations::show))
        .route(
            "/playground",
            get(playground::show).post(playground::submit),
        )
        .route("/webhooks", get(webhooks::show))
        .route(
            "/webhooks/rotate",
            get(webhooks::confirm_rotate).post(webhooks::rotate),
        )
        .route("/webhooks/secret", get(webhooks::secret))
        .route("/webhooks/test", post(webhooks::send_test_event))
        .route("/assets/{version}/{name}", get(assets::serve))
        .fallback(unknown_page)
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(middleware::from_fn(security_headers));
    Router::new()
        .route("/", get(|| async { Redirect::to("/dashboard") }))
        .nest("/dashboard", pages)
}

/// Headers every dashboard response carries. Pages are never cached (they
/// show balances and secrets); assets set their own long cache.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Which navigation entry a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Keys,
    Generations,
    Playground,
    Webhooks,
    People,
    /// The signed-in user's own password, linked from their email.
    Password,
    None,
}

impl Section {
    fn name(self) -> &'static str {
        match self {
            Section::Overview => "overview",
            Section::Keys => "keys",
            Section::Generations => "generations",
            Section::Playground => "playground",
            Section::Webhooks => "webhooks",
            Section::People => "people",
            Section::Password => "password",
            Section::None => "",
        }
    }
}

/// What the shared layout (`base.html`) shows around every page.
pub struct Layout {
    pub title: String,
    /// The signed-in user's email; no navigation without one.
    pub email: Option<String>,
    /// The token forms and the page's own API calls send back.
    pub csrf_token: String,
    pub section: Section,
    /// The user must change their password before anything else: the
    /// navigation's links, which would all lead back to the password page,
    /// are left out.
    pub must_change_password: bool,
    pub stylesheet: &'static str,
    pub script: &'static str,
    pub icon: &'static str,
}

impl Layout {
    pub fn signed_in(session: &Session, title: &str, section: Section) -> Layout {
        Layout {
            title: title.to_owned(),
            email: Some(session.email.clone()),
            csrf_token: session.csrf_token.clone(),
            section,
            must_change_password: session.must_change_password,
            stylesheet: assets::stylesheet_path(),
            script: assets::script_path(),
            icon: assets::icon_path(),
        }
    }

    pub fn signed_out(title: &str, csrf_token: &str) -> Layout {
        Layout {
            title: title.to_owned(),
            email: None,
            csrf_token: csrf_token.to_owned(),
            section: Section::None,
            must_change_password: false,
            stylesheet: assets::stylesheet_path(),
            script: assets::script_path(),
            icon: assets::icon_path(),
        }
    }

    /// `aria-current="page"` for the current section's link, named as in
    /// `Section::name`.
    pub fn current(&self, name: &str) -> &'static str {
        if self.section.name() == name {
            "page"
        } else {
            "false"
        }
    }
}

/// Renders a template as a response with a status.
pub fn render(status: StatusCode, template: &impl Template) -> Response {
    match template.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(error) => {
            tracing::error!(error = %error, "a dashboard template failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Html("<!doctype html><title>Error</title><p>The page could not be shown.</p>"),
            )
                .into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    layout: Layout,
    message: String,
}

/// An error page, inside the navigation when someone is signed in.
pub fn error_page(
    status: StatusCode,
    session: Option<&Session>,
    heading: &str,
    message: &str,
) -> Response {
    let layout = match session {
        Some(session) => Layout::signed_in(session, heading, Section::None),
        None => Layout::signed_out(heading, ""),
    };
    render(
        status,
        &ErrorPage {
            layout,
            message: message.to_owned(),
        },
    )
}

/// A path under `/dashboard` that is no page: not found, inside the
/// navigation when someone is signed in, so that they do not look signed
/// out.
async fn unknown_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let secure = state.dashboard.secure_cookies;
    match session::current_session(state.store.as_ref(), &headers, secure).await {
        Ok(session) => not_found(session.as_ref()),
        Err(error) => internal_error(error),
    }
}

#[derive(Template)]
#[template(path = "confirm.html")]
struct ConfirmPage<'a> {
    layout: Layout,
    question: &'a str,
    /// What the action does, in words, so that nobody takes it by a slip.
    consequence: &'a str,
    /// Where the confirmation posts (with the session's CSRF token).
    action: &'a str,
    confirm_label: &'a str,
    cancel_href: &'a str,
    choice: Option<ConfirmChoice<'a>>,
}

/// What a destructive action asks before it is taken: a page of its own
/// (no script needed), whose one button posts the action's form.
pub struct Confirmation<'a> {
    pub question: &'a str,
    pub consequence: &'a str,
    pub action: &'a str,
    pub confirm_label: &'a str,
    pub cancel_href: &'a str,
    /// A choice the form posts with the action (how it is taken), if any.
    pub choice: Option<ConfirmChoice<'a>>,
}

/// A choice of the confirmation's form: radio buttons named `name`, the
/// first option checked, so that posting without a choice takes the first.
pub struct ConfirmChoice<'a> {
    pub legend: &'a str,
    pub name: &'a str,
    /// Each option's value and label.
    pub options: Vec<(&'a str, &'a str)>,
}

pub fn confirm_page(
    session: &Session,
    section: Section,
    confirmation: Confirmation<'_>,
) -> Response {
    render(
        StatusCode::OK,
        &ConfirmPage {
            layout: Layout::signed_in(session, "Confirm", section),
            question: confirmation.question,
            consequence: confirmation.consequence,
            action: confirmation.action,
            confirm_label: confirmation.confirm_label,
            cancel_href: confirmation.cancel_href,
            choice: confirmation.choice,
        },
    )
}

pub fn not_found(session: Option<&Session>) -> Response {
    error_page(
        StatusCode::NOT_FOUND,
        session,
        "Not found",
        "There is nothing here, or it belongs to another account.",
    )
}

/// What a form refused because every password-hashing slot was taken says
/// (`application::passwords::PasswordError::Busy`).
pub fn hashing_busy_alert(retry_after: std::time::Duration) -> String {
    format!(
        "The server is checking too many passwords at the moment. Wait {} seconds and try again.",
        retry_after.as_secs().max(1)
    )
}

/// `response` with `Retry-After: wait` (whole seconds, at least one), for a
/// form refused for a while (429 or 503).
pub fn with_retry_after(mut response: Response, wait: std::time::Duration) -> Response {
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(wait.as_secs().max(1)),
    );
    response
}

/// A failure on our side; the cause goes to the log, not to the page.
pub fn internal_error(error: impl std::error::Error + 'static) -> Response {
    crate::diagnostics::log_cause_chain(&error);
    error_page(
        StatusCode::INTERNAL_SERVER_ERROR,
        None,
        "Something went wrong",
        "The page could not be shown. Try again in a moment.",
    )
}

/// An exact dollar amount: whole cents as `$12.34`, anything finer with all
/// six decimals (`$0.000125`), so nothing is rounded away.
pub fn usd(amount: Micros) -> String {
    if amount.0 % MICROS_PER_CENT == 0 {
        let sign = if amount.0 < 0 { "-" } else { "" };
        let cents = (amount.0 / MICROS_PER_CENT).unsigned_abs();
        format!("{sign}${}.{:02}", cents / 100, cents % 100)
    } else {
        amount.to_string()
    }
}

/// A time for people: `2026-11-21 22:50 UTC`.
pub fn display_time(unix_millis: i64) -> String {
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(unix_millis as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    time.format(&format).unwrap_or_default()
}

/// A time to the second, for hover titles: `2026-11-21 22:50:07 UTC`.
pub fn display_time_to_the_second(unix_millis: i64) -> String {
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(unix_millis as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let format =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    time.format(&format).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_shown_exactly() {
        assert_eq!(usd(Micros(12_340_000)), "$12.34");
        assert_eq!(usd(Micros(500_000)), "$0.50");
        assert_eq!(usd(Micros(0)), "$0.00");
        assert_eq!(usd(Micros(-1_050_000)), "-$1.05");
        assert_eq!(usd(Micros(125)), "$0.000125");
    }
}
