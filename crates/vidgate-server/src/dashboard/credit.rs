//! "Add credit": the overview's form starts a Stripe Checkout for the
//! account and answers a page whose link takes the person to Stripe's
//! payment page. A link rather than a redirect of the form, because the
//! dashboard's `form-action 'self'` policy stops a form from landing on
//! another origin, and Stripe's page is one.

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::session::SignedIn;
use super::{Layout, Section, render};
use crate::application::state::AppState;
use crate::stripe::{self, CheckoutError};

#[derive(Deserialize)]
pub struct AddCreditForm {
    #[serde(default)]
    amount_usd: String,
    #[serde(default)]
    csrf_token: String,
}

#[derive(Template)]
#[template(path = "checkout.html")]
struct CheckoutPage {
    layout: Layout,
    amount: String,
    url: String,
}

pub async fn add_credit(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Form(form): Form<AddCreditForm>,
) -> Response {
    if let Some(refused) = signed_in.csrf_refusal(&form.csrf_token) {
        return refused;
    }
    let session = &signed_in.0;
    let Some(checkout) = state.stripe.as_deref() else {
        return super::not_found(Some(session));
    };
    match stripe::start_checkout(
        state.store.as_ref(),
        &state.rate_limiter,
        checkout,
        &session.account_id,
        &form.amount_usd,
        None,
    )
    .await
    {
        Ok(created) => render(
            StatusCode::OK,
            &CheckoutPage {
                layout: Layout::signed_in(session, "Add credit", Section::Overview),
                amount: form.amount_usd,
                url: created.url,
            },
        ),
        Err(CheckoutError::Amount(refusal)) => super::error_page(
            StatusCode::BAD_REQUEST,
            Some(session),
            "Add credit",
            &format!("{refusal}."),
        ),
        Err(refused @ CheckoutError::TooMany { retry_after }) => super::with_retry_after(
            super::error_page(
                StatusCode::TOO_MANY_REQUESTS,
                Some(session),
                "Add credit",
                &refused.to_string(),
            ),
            retry_after,
        ),
        Err(CheckoutError::Store(error)) => super::internal_error(error),
        Err(CheckoutError::Stripe(error)) => {
            crate::diagnostics::log_cause_chain(&error);
            super::error_page(
                StatusCode::BAD_GATEWAY,
                Some(session),
                "Add credit",
                "Stripe could not start the payment. Try again in a minute.",
            )
        }
    }
}
