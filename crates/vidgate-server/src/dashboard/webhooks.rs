//! Webhooks: the signing secret (revealed on demand, rotated), the
//! account's recent deliveries with when each pending one is tried next, and
//! a test event sent to a URL of the person's choosing. Only a person who
//! may manage keys and secrets (an owner, or a member the owners allow)
//! reads or rotates the secret; the rotation is `keys_and_secrets`'s, the
//! operator's own, with its audit row.

use askama::Template;
use axum::Form;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::keys::refused;
use super::session::{CSRF_HEADER, CsrfForm, SignedIn};
use super::{
    Confirmation, Layout, Section, confirm_page, display_time, display_time_to_the_second, render,
};
use crate::application::accounts::{self, MAX_LOW_BALANCE_URL_LENGTH};
use crate::application::keys_and_secrets::{self, Changer, KeyChangeError};
use crate::application::state::AppState;
use crate::store::{AccountDelivery, DeliveryStatus, MAX_PENDING_TEST_EVENTS, now_millis};

/// Deliveries listed, newest first.
const DELIVERY_ROWS: u32 = 50;

struct DeliveryRow {
    event: String,
    /// None for an event about the account (`account.balance_low`).
    generation_id: Option<String>,
    status: &'static str,
    attempts: i64,
    created: String,
    /// The last attempt's HTTP status or error.
    last_response: String,
    /// When a pending delivery is tried next, in words; empty once it is
    /// settled.
    next_attempt: String,
    /// The full time of the next attempt, for hover.
    next_attempt_full: String,
    /// The URL it goes to, for the test form's default.
    url: String,
}

/// When a pending delivery is tried next, in words: "due now" once it is
/// due, else in how many seconds, minutes or hours (the time itself is the
/// cell's hover title).
fn next_attempt_in_words(next_attempt_at: i64, now: i64) -> String {
    let wait_seconds = (next_attempt_at - now) / 1000;
    match wait_seconds {
        ..=0 => "due now".to_owned(),
        1..60 => format!("in {wait_seconds} s"),
        60..3600 => format!("in {} min", wait_seconds / 60),
        _ => format!(
            "in {} h {} min",
            wait_seconds / 3600,
            wait_seconds % 3600 / 60
        ),
    }
}

impl DeliveryRow {
    fn new(found: AccountDelivery, now: i64) -> DeliveryRow {
        let delivery = found.delivery;
        let last_response = delivery
            .attempt_log
            .last()
            .map(
                |attempt| match (&attempt.record.status_code, &attempt.record.error) {
                    (Some(code), _) => format!("HTTP {code}"),
                    (None, Some(error)) => error.clone(),
                    (None, None) => "no response".to_owned(),
                },
            )
            .unwrap_or_else(|| "not attempted yet".to_owned());
        // While a sender holds the delivery, its `next_attempt_at` is the
        // end of the lease, not an attempt: it is being tried now.
        let (next_attempt, next_attempt_full) = match delivery.next_attempt_at {
            _ if delivery.in_flight => ("sending now".to_owned(), String::new()),
            Some(next) if delivery.status == DeliveryStatus::Pending => (
                next_attempt_in_words(next, now),
                display_time_to_the_second(next),
            ),
            _ => (String::new(), String::new()),
        };
        DeliveryRow {
            event: delivery.event_type,
            generation_id: found.generation_id,
            status: if delivery.in_flight {
                "sending"
            } else {
                delivery.status.as_str()
            },
            attempts: delivery.attempts,
            created: display_time(delivery.created_at),
            last_response,
            next_attempt,
            next_attempt_full,
            url: delivery.url,
        }
    }
}

#[derive(Template)]
#[template(path = "webhooks.html")]
struct WebhooksPage {
    layout: Layout,
    /// Only after the reveal button's plain GET (without JavaScript): the
    /// page does not carry the secret otherwise, and the script fetches it
    /// from `secret` when the button is pressed.
    secret: Option<String>,
    /// Until when the replaced secret still signs deliveries.
    previous_valid_until: Option<String>,
    deliveries: Vec<DeliveryRow>,
    /// Right after a rotation: the page says so.
    rotated: bool,
    /// The test form's URL: the one just tried, else the newest delivery's.
    test_url: String,
    /// What the test form's last use did, or why it was refused.
    test_notice: Option<String>,
    test_alert: Option<String>,
    /// Whether the signed-in person may read and rotate the secret: only
    /// then does the page offer to.
    may_manage: bool,
}

#[derive(Deserialize)]
pub struct WebhooksQuery {
    #[serde(default)]
    reveal: Option<String>,
    #[serde(default)]
    rotated: Option<String>,
    /// Set after a test event was queued.
    #[serde(default)]
    tested: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<WebhooksQuery>,
) -> Response {
    let test = TestOutcome {
        url: None,
        notice: query.tested.is_some().then(|| {
            "A webhook.test event was queued: it is sent within seconds and shows below.".to_owned()
        }),
        alert: None,
    };
    webhooks_page(&state, &signed_in, &query, StatusCode::OK, test).await
}

/// What the test form last did, shown above it.
struct TestOutcome {
    url: Option<String>,
    notice: Option<String>,
    alert: Option<String>,
}

async fn webhooks_page(
    state: &AppState,
    signed_in: &SignedIn,
    query: &WebhooksQuery,
    status: StatusCode,
    test: TestOutcome,
) -> Response {
    let session = &signed_in.0;
    let store = state.store.as_ref();
    let loaded = async {
        let account = store.accounts().get(&session.account_id).await?;
        let deliveries = store
            .webhook_log()
            .recent_deliveries(&session.account_id, DELIVERY_ROWS)
            .await?;
        let may_manage = keys_and_secrets::person_may_manage(store, session).await?;
        Ok::<_, crate::store::StoreError>((account, deliveries, may_manage))
    };
    let (account, deliveries, may_manage) = match loaded.await {
        Ok((Some(account), deliveries, may_manage)) => (account, deliveries, may_manage),
        Ok((None, _, _)) => return super::not_found(Some(session)),
        Err(error) => return super::internal_error(error),
    };
    if query.reveal.is_some() && !may_manage {
        return refused(session, KeyChangeError::NotAllowed);
    }
    let now = now_millis();
    let deliveries: Vec<DeliveryRow> = deliveries
        .into_iter()
        .map(|delivery| DeliveryRow::new(delivery, now))
        .collect();
    render(
        status,
        &WebhooksPage {
            layout: Layout::signed_in(session, "Webhooks", Section::Webhooks),
            previous_valid_until: account
                .previous_webhook_secret_expires_at
                .filter(|expires_at| *expires_at > now)
                .map(display_time),
            secret: query.reveal.is_some().then_some(account.webhook_secret),
            test_url: test
                .url
                .or_else(|| deliveries.first().map(|delivery| delivery.url.clone()))
                .unwrap_or_default(),
            deliveries,
            rotated: query.rotated.is_some(),
            test_notice: test.notice,
            test_alert: test.alert,
            may_manage,
        },
    )
}

#[derive(Deserialize)]
pub struct TestEventForm {
    #[serde(default)]
    csrf_token: String,
    #[serde(default)]
    url: String,
}

/// Queues a `webhook.test` event to the URL given, signed with the
/// account's secret like every event, so that a receiver can be tried
/// without running a generation. The URL is checked for its form here and
/// for where it points by the senders' address guard, as every target is.
pub async fn send_test_event(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<TestEventForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let url = form.url.trim();
    let refuse = |message: String| TestOutcome {
        url: Some(url.to_owned()),
        notice: None,
        alert: Some(message),
    };
    let no_query = WebhooksQuery {
        reveal: None,
        rotated: None,
        tested: None,
    };
    if !accounts::has_webhook_url_form(url) {
        let refused = refuse(format!(
            "Enter an http or https URL of at most {MAX_LOW_BALANCE_URL_LENGTH} characters, such \
             as https://example.com/webhooks."
        ));
        return webhooks_page(
            &state,
            &signed_in,
            &no_query,
            StatusCode::BAD_REQUEST,
            refused,
        )
        .await;
    }
    let payload = serde_json::json!({ "account_id": signed_in.0.account_id });
    match state
        .store
        .webhook_log()
        .queue_test(&signed_in.0.account_id, url, &payload)
        .await
    {
        Ok(true) => Redirect::to("/dashboard/webhooks?tested=1").into_response(),
        Ok(false) => {
            let refused = refuse(format!(
                "{MAX_PENDING_TEST_EVENTS} test events are still waiting to be sent; try again \
                 once they are."
            ));
            webhooks_page(
                &state,
                &signed_in,
                &no_query,
                StatusCode::TOO_MANY_REQUESTS,
                refused,
            )
            .await
        }
        Err(error) => super::internal_error(error),
    }
}

/// The signing secret as JSON, for the reveal button's script. It needs the
/// page's CSRF token in a header, so only a page of this dashboard asks.
pub async fn secret(
    State(state): State<AppState>,
    signed_in: SignedIn,
    headers: HeaderMap,
) -> Response {
    let token = headers
        .get(CSRF_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if let Some(refused) = signed_in.csrf_refusal(token) {
        return refused;
    }
    let session = &signed_in.0;
    match keys_and_secrets::person_may_manage(state.store.as_ref(), session).await {
        Ok(true) => {}
        Ok(false) => return refused(session, KeyChangeError::NotAllowed),
        Err(error) => return super::internal_error(error),
    }
    match state.store.accounts().get(&session.account_id).await {
        Ok(Some(account)) => {
            Json(serde_json::json!({ "webhook_secret": account.webhook_secret })).into_response()
        }
        Ok(None) => super::not_found(Some(&signed_in.0)),
        Err(error) => super::internal_error(error),
    }
}

/// Asks before the secret is rotated: receivers that check signatures must
/// be given the new secret within the day the old one keeps signing.
pub async fn confirm_rotate(State(state): State<AppState>, signed_in: SignedIn) -> Response {
    match keys_and_secrets::person_may_manage(state.store.as_ref(), &signed_in.0).await {
        Ok(true) => {}
        Ok(false) => return refused(&signed_in.0, KeyChangeError::NotAllowed),
        Err(error) => return super::internal_error(error),
    }
    confirm_page(
        &signed_in.0,
        Section::Webhooks,
        Confirmation {
            question: "Rotate the signing secret?",
            consequence: "A new secret signs every delivery from now on. The current one keeps \
                          signing beside it for 24 hours only: put the new secret in your \
                          receiver before then, or it will refuse the deliveries.",
            action: "/dashboard/webhooks/rotate",
            confirm_label: "Rotate secret",
            cancel_href: "/dashboard/webhooks",
            choice: None,
        },
    )
}

/// Issues a new secret (the confirmation page's form), with its audit row;
/// the replaced one keeps signing beside it for a day, as
/// `POST /account/webhook-secret/rotate` does.
pub async fn rotate(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let session = &signed_in.0;
    match keys_and_secrets::rotate_webhook_secret(
        state.store.as_ref(),
        Changer::Person(session),
        &session.account_id,
    )
    .await
    {
        Ok(_) => Redirect::to("/dashboard/webhooks?rotated=1").into_response(),
        Err(error) => refused(session, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_attempt_reads_as_a_wait() {
        let now = 1_764_300_000_000;
        assert_eq!(next_attempt_in_words(now - 5, now), "due now");
        assert_eq!(next_attempt_in_words(now + 30_000, now), "in 30 s");
        assert_eq!(
            next_attempt_in_words(now + 5 * 60_000 + 59_000, now),
            "in 5 min"
        );
        assert_eq!(
            next_attempt_in_words(now + 125 * 60_000, now),
            "in 2 h 5 min"
        );
    }
}
