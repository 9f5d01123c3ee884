//! Webhooks: the signing secret (revealed on demand, rotated) and the
//! account's recent deliveries.

use askama::Template;
use axum::Form;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::{CSRF_HEADER, CsrfForm, SignedIn};
use super::{Confirmation, Layout, Section, confirm_page, display_time, render};
use crate::accounts;
use crate::state::AppState;
use crate::store::{AccountDelivery, now_millis};

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
}

impl From<AccountDelivery> for DeliveryRow {
    fn from(found: AccountDelivery) -> DeliveryRow {
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
}

#[derive(Deserialize)]
pub struct WebhooksQuery {
    #[serde(default)]
    reveal: Option<String>,
    #[serde(default)]
    rotated: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<WebhooksQuery>,
) -> Response {
    let session = &signed_in.0;
    let store = state.store.as_ref();
    let loaded = async {
        let account = store.account(&session.account_id).await?;
        let deliveries = store
            .recent_webhook_deliveries(&session.account_id, DELIVERY_ROWS)
            .await?;
        Ok::<_, crate::store::StoreError>((account, deliveries))
    };
    let (account, deliveries) = match loaded.await {
        Ok((Some(account), deliveries)) => (account, deliveries),
        Ok((None, _)) => return super::not_found(Some(session)),
        Err(error) => return super::internal_error(error),
    };
    let now = now_millis();
    render(
        StatusCode::OK,
        &WebhooksPage {
            layout: Layout::signed_in(session, "Webhooks", Section::Webhooks),
            previous_valid_until: account
                .previous_webhook_secret_expires_at
                .filter(|expires_at| *expires_at > now)
                .map(display_time),
            secret: query.reveal.is_some().then_some(account.webhook_secret),
            deliveries: deliveries.into_iter().map(DeliveryRow::from).collect(),
            rotated: query.rotated.is_some(),
        },
    )
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
    match state.store.account(&signed_in.0.account_id).await {
        Ok(Some(account)) => {
            Json(serde_json::json!({ "webhook_secret": account.webhook_secret })).into_response()
        }
        Ok(None) => super::not_found(Some(&signed_in.0)),
        Err(error) => super::internal_error(error),
    }
}

/// Asks before the secret is rotated: receivers that check signatures must
/// be given the new secret within the day the old one keeps signing.
pub async fn confirm_rotate(signed_in: SignedIn) -> Response {
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
        },
    )
}

/// Issues a new secret (the confirmation page's form); the replaced one
/// keeps signing beside it for a day, as `POST /account/webhook-secret/rotate`
/// does.
pub async fn rotate(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    match accounts::rotate_webhook_secret(state.store.as_ref(), &signed_in.0.account_id).await {
        Ok(Some(_)) => Redirect::to("/dashboard/webhooks?rotated=1").into_response(),
        Ok(None) => super::not_found(Some(&signed_in.0)),
        Err(error) => super::internal_error(error),
    }
}
