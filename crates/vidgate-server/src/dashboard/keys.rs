//! API keys: the list, creation (the secret shown once) and revocation.

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::{CsrfForm, SignedIn};
use super::{Confirmation, Layout, Section, confirm_page, display_time, render, usd};
use crate::accounts;
use crate::spend_limits::{SpendPeriod, parse_spend_limit};
use crate::state::AppState;
use crate::store::ApiKeyRecord;

/// Key names are labels for people; longer ones are refused.
const MAX_KEY_NAME_CHARS: usize = 100;

struct KeyRow {
    id: String,
    name: String,
    prefix: String,
    created: String,
    last_used: String,
    revoked: bool,
    /// The limit in words ("$1.00 per day", "none").
    spend_limit: String,
    /// The form's values: the amount as `1.00` (empty without a limit) and
    /// the period.
    spend_limit_usd: String,
    spend_limit_period: &'static str,
}

impl From<ApiKeyRecord> for KeyRow {
    fn from(key: ApiKeyRecord) -> KeyRow {
        KeyRow {
            id: key.id,
            name: key.name,
            prefix: key.prefix,
            created: display_time(key.created_at),
            last_used: key
                .last_used_at
                .map(display_time)
                .unwrap_or_else(|| "never".to_owned()),
            revoked: key.revoked_at.is_some(),
            spend_limit: key.spend_limit.map_or_else(
                || "none".to_owned(),
                |limit| match limit.period {
                    SpendPeriod::Total => format!("{} in total", usd(limit.amount)),
                    period => format!("{} per {}", usd(limit.amount), period.as_str()),
                },
            ),
            spend_limit_usd: key
                .spend_limit
                .map(|limit| limit.amount.usd_text())
                .unwrap_or_default(),
            spend_limit_period: key.spend_limit.map_or("day", |limit| limit.period.as_str()),
        }
    }
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    layout: Layout,
    keys: Vec<KeyRow>,
    /// The secret of the key just created: shown this once, never stored.
    new_key_secret: Option<String>,
    alert: Option<String>,
    /// What the last action did ("The key … was revoked").
    notice: Option<String>,
}

/// What the keys page shows besides the list.
#[derive(Default)]
struct KeysPageExtras {
    new_key_secret: Option<String>,
    alert: Option<String>,
    /// The key a revocation just revoked, named in a notice.
    revoked_key_id: Option<String>,
}

async fn keys_page(
    state: &AppState,
    signed_in: &SignedIn,
    status: StatusCode,
    extras: KeysPageExtras,
) -> Response {
    let session = &signed_in.0;
    match state.store.api_keys(&session.account_id).await {
        Ok(keys) => {
            let keys: Vec<KeyRow> = keys.into_iter().map(KeyRow::from).collect();
            // Only a key of this account that is revoked is named, so the
            // query cannot make the page say anything else.
            let notice = extras.revoked_key_id.and_then(|revoked_id| {
                keys.iter()
                    .find(|key| key.id == revoked_id && key.revoked)
                    .map(|key| {
                        format!(
                            "The key \u{201c}{}\u{201d} was revoked: every request with it is refused.",
                            key.name
                        )
                    })
            });
            render(
                status,
                &KeysPage {
                    layout: Layout::signed_in(session, "API keys", Section::Keys),
                    keys,
                    new_key_secret: extras.new_key_secret,
                    alert: extras.alert,
                    notice,
                },
            )
        }
        Err(error) => super::internal_error(error),
    }
}

#[derive(Deserialize)]
pub struct KeysQuery {
    #[serde(default)]
    revoked: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<KeysQuery>,
) -> Response {
    let extras = KeysPageExtras {
        revoked_key_id: query.revoked,
        ..KeysPageExtras::default()
    };
    keys_page(&state, &signed_in, StatusCode::OK, extras).await
}

#[derive(Deserialize)]
pub struct NewKeyForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    csrf_token: String,
}

/// Creates a key and answers the keys page itself (no redirect), the only
/// response that ever holds the secret.
pub async fn create(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<NewKeyForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let name = form.name.trim();
    if name.is_empty() || name.chars().count() > MAX_KEY_NAME_CHARS {
        let alert = format!("Give the key a name of 1 to {MAX_KEY_NAME_CHARS} characters.");
        let extras = KeysPageExtras {
            alert: Some(alert),
            ..KeysPageExtras::default()
        };
        return keys_page(&state, &signed_in, StatusCode::BAD_REQUEST, extras).await;
    }
    match accounts::create_api_key(state.store.as_ref(), &signed_in.0.account_id, name).await {
        Ok(created) => {
            let extras = KeysPageExtras {
                new_key_secret: Some(created.api_key),
                ..KeysPageExtras::default()
            };
            keys_page(&state, &signed_in, StatusCode::OK, extras).await
        }
        Err(error) => super::internal_error(error),
    }
}

/// Asks before a key is revoked: revoking cannot be undone, and every
/// program that uses the key stops working. Another account's key, an
/// unknown one or one already revoked is not found.
pub async fn confirm_revoke(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(key_id): Path<String>,
) -> Response {
    let session = &signed_in.0;
    let keys = match state.store.api_keys(&session.account_id).await {
        Ok(keys) => keys,
        Err(error) => return super::internal_error(error),
    };
    let Some(key) = keys
        .into_iter()
        .find(|key| key.id == key_id && key.revoked_at.is_none())
    else {
        return super::not_found(Some(session));
    };
    let question = format!("Revoke the key \u{201c}{}\u{201d}?", key.name);
    let consequence = format!(
        "Every request with the key {}\u{2026} is refused within a second, and it cannot be \
         used again. Programs that use it need another key first.",
        key.prefix
    );
    let action = format!("/dashboard/keys/{}/revoke", key.id);
    confirm_page(
        session,
        Section::Keys,
        Confirmation {
            question: &question,
            consequence: &consequence,
            action: &action,
            confirm_label: "Revoke key",
            cancel_href: "/dashboard/keys",
        },
    )
}

/// Revokes one of the session's account's keys (the confirmation page's
/// form); another account's key, an unknown one or one already revoked is
/// not found.
pub async fn revoke(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(key_id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    match state
        .store
        .revoke_account_api_key(&signed_in.0.account_id, &key_id)
        .await
    {
        Ok(true) => Redirect::to(&format!("/dashboard/keys?revoked={key_id}")).into_response(),
        Ok(false) => super::not_found(Some(&signed_in.0)),
        Err(error) => super::internal_error(error),
    }
}

#[derive(Deserialize)]
pub struct LimitForm {
    #[serde(default)]
    spend_limit_usd: String,
    #[serde(default)]
    spend_limit_period: String,
    #[serde(default)]
    csrf_token: String,
}

/// Sets or (with an empty amount) removes the spend limit of one of the
/// session's account's keys; another account's key is not found.
pub async fn set_limit(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Path(key_id): Path<String>,
    Form(form): Form<LimitForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let limit = match parse_spend_limit(Some(&form.spend_limit_usd), Some(&form.spend_limit_period))
    {
        Ok(limit) => limit,
        Err(error) => {
            let extras = KeysPageExtras {
                alert: Some(error.message),
                ..KeysPageExtras::default()
            };
            return keys_page(&state, &signed_in, StatusCode::BAD_REQUEST, extras).await;
        }
    };
    match state
        .store
        .set_account_key_spend_limit(&signed_in.0.account_id, &key_id, limit)
        .await
    {
        Ok(true) => Redirect::to("/dashboard/keys").into_response(),
        Ok(false) => super::not_found(Some(&signed_in.0)),
        Err(error) => super::internal_error(error),
    }
}
