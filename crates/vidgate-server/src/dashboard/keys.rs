//! API keys: the list, creation (the secret shown once) and revocation.

use askama::Template;
use axum::Form;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::{CsrfForm, SignedIn};
use super::{Layout, Section, display_time, render};
use crate::accounts;
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
}

async fn keys_page(
    state: &AppState,
    signed_in: &SignedIn,
    status: StatusCode,
    new_key_secret: Option<String>,
    alert: Option<String>,
) -> Response {
    let session = &signed_in.0;
    match state.store.api_keys(&session.account_id).await {
        Ok(keys) => render(
            status,
            &KeysPage {
                layout: Layout::signed_in(session, "API keys", Section::Keys),
                keys: keys.into_iter().map(KeyRow::from).collect(),
                new_key_secret,
                alert,
            },
        ),
        Err(error) => super::internal_error(error),
    }
}

pub async fn list(State(state): State<AppState>, signed_in: SignedIn) -> Response {
    keys_page(&state, &signed_in, StatusCode::OK, None, None).await
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
        return keys_page(
            &state,
            &signed_in,
            StatusCode::BAD_REQUEST,
            None,
            Some(alert),
        )
        .await;
    }
    match accounts::create_api_key(state.store.as_ref(), &signed_in.0.account_id, name).await {
        Ok(created) => {
            keys_page(
                &state,
                &signed_in,
                StatusCode::OK,
                Some(created.api_key),
                None,
            )
            .await
        }
        Err(error) => super::internal_error(error),
    }
}

/// Revokes one of the session's account's keys; another account's key, an
/// unknown one or one already revoked is not found.
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
        Ok(true) => Redirect::to("/dashboard/keys").into_response(),
        Ok(false) => super::not_found(Some(&signed_in.0)),
        Err(error) => super::internal_error(error),
    }
}
