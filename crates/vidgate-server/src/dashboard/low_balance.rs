//! The low-balance alert, set from the overview: the threshold below which
//! the overview warns, and the URL the event `account.balance_low` goes to
//! each time the balance falls below it. A threshold above the balance
//! sends the event at once (`store/low_balance.rs`).

use axum::Form;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::session::SignedIn;
use crate::application::accounts::parse_low_balance_setting;
use crate::application::state::AppState;

#[derive(Deserialize)]
pub struct LowBalanceForm {
    /// Dollars; empty removes the alert.
    #[serde(default)]
    threshold_usd: String,
    #[serde(default)]
    webhook_url: String,
    #[serde(default)]
    csrf_token: String,
}

pub async fn set_alert(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<LowBalanceForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let session = &signed_in.0;
    let setting =
        match parse_low_balance_setting(Some(&form.threshold_usd), Some(&form.webhook_url)) {
            Ok(setting) => setting,
            Err(error) => {
                return super::error_page(
                    StatusCode::BAD_REQUEST,
                    Some(session),
                    "Low balance alert",
                    &error.message,
                );
            }
        };
    match state
        .store
        .accounts()
        .set_low_balance_alert(&session.account_id, &setting)
        .await
    {
        Ok(Some(_)) => Redirect::to("/dashboard").into_response(),
        Ok(None) => super::not_found(Some(session)),
        Err(error) => super::internal_error(error),
    }
}
