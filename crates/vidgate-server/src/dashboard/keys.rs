//! API keys: the list with who made each, creation (the secret shown
//! once), revocation and spend limits. The changes are
//! `keys_and_secrets`'s, the operator's own, each with its audit row
//! (actor `dashboard:<email>`); a member makes them only when the
//! account's owners allow members to manage keys and secrets.

use askama::Template;
use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::{CsrfForm, SignedIn};
use super::{Confirmation, Layout, Section, confirm_page, display_time, error_page, render, usd};
use crate::application::keys_and_secrets::{self, Changer, KeyChangeError};
use crate::application::state::AppState;
use crate::spend_limits::{SpendPeriod, parse_spend_limit};
use crate::store::{ApiKeyRecord, Session, User};

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
    /// Who made it: a person's email, "a removed person", or "the
    /// operator" for a key made outside the dashboard (or before keys
    /// recorded their maker).
    made_by: String,
}

impl KeyRow {
    fn new(key: ApiKeyRecord, people: &[User]) -> KeyRow {
        let made_by = match &key.created_by_user_id {
            None => "the operator".to_owned(),
            Some(user_id) => people
                .iter()
                .find(|person| &person.id == user_id)
                .map_or_else(
                    || "a removed person".to_owned(),
                    |person| person.email.clone(),
                ),
        };
        KeyRow {
            made_by,
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
    /// Whether the signed-in person may create and revoke keys and change
    /// spend limits: only then does the page hold the forms.
    may_manage: bool,
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
    let store = state.store.as_ref();
    let loaded = async {
        Ok::<_, crate::store::StoreError>((
            store.accounts().api_keys(&session.account_id).await?,
            store.users().account_users(&session.account_id).await?,
            keys_and_secrets::person_may_manage(store, session).await?,
        ))
    };
    match loaded.await {
        Ok((keys, people, may_manage)) => {
            let keys: Vec<KeyRow> = keys
                .into_iter()
                .map(|key| KeyRow::new(key, &people))
                .collect();
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
                    may_manage,
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
    let session = &signed_in.0;
    match keys_and_secrets::create_key(
        state.store.as_ref(),
        Changer::Person(session),
        &session.account_id,
        name,
    )
    .await
    {
        Ok(created) => {
            let extras = KeysPageExtras {
                new_key_secret: Some(created.api_key),
                ..KeysPageExtras::default()
            };
            keys_page(&state, &signed_in, StatusCode::OK, extras).await
        }
        Err(error) => refused(session, error),
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
    match keys_and_secrets::person_may_manage(state.store.as_ref(), session).await {
        Ok(true) => {}
        Ok(false) => return refused(session, KeyChangeError::NotAllowed),
        Err(error) => return super::internal_error(error),
    }
    let keys = match state.store.accounts().api_keys(&session.account_id).await {
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
            choice: None,
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
    let session = &signed_in.0;
    match keys_and_secrets::revoke_key(state.store.as_ref(), Changer::Person(session), &key_id)
        .await
    {
        Ok(()) => Redirect::to(&format!("/dashboard/keys?revoked={key_id}")).into_response(),
        Err(error) => refused(session, error),
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
    let session = &signed_in.0;
    match keys_and_secrets::set_spend_limit(
        state.store.as_ref(),
        Changer::Person(session),
        &key_id,
        limit,
    )
    .await
    {
        Ok(()) => Redirect::to("/dashboard/keys").into_response(),
        Err(error) => refused(session, error),
    }
}

/// The answer to a refused change of keys or the webhook secret: a 403
/// page for a member the owners do not allow, not found for another
/// account's key (as for an unknown one).
pub fn refused(session: &Session, error: KeyChangeError) -> Response {
    match error {
        KeyChangeError::NotAllowed => error_page(
            StatusCode::FORBIDDEN,
            Some(session),
            "Owners only",
            &error.to_string(),
        ),
        KeyChangeError::KeyNotFound(_) | KeyChangeError::Account(_) => {
            super::not_found(Some(session))
        }
        KeyChangeError::Store(error) => super::internal_error(error),
    }
}
