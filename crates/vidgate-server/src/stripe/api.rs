//! The two calls vidgate makes to Stripe's API: creating a Checkout
//! Session (`POST /v1/checkout/sessions`) and reading one back
//! (`GET /v1/checkout/sessions/{id}`) to confirm what an event says before
//! crediting it. Requests are form-encoded with Stripe's bracket notation
//! for nested fields, and authenticated with the secret key as a Bearer
//! token, as Stripe's API reference describes.

use std::time::Duration;

use serde::Deserialize;
use vidgate_core::Micros;
use vidgate_core::money::MICROS_PER_CENT;

use super::{StripeSettings, plain_dollars};

/// How long one call to Stripe may take. A customer waits for the Checkout
/// call; a webhook that waits longer than Stripe's own timeout is retried
/// by Stripe anyway.
const STRIPE_CALL_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum StripeApiError {
    #[error("Stripe could not be reached")]
    Unreachable(#[source] reqwest::Error),
    #[error("Stripe answered {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("Stripe's answer could not be read: {0}")]
    Unreadable(String),
}

/// What a new Checkout Session is for: one line, the credit, paid once.
pub struct NewCheckoutSession<'a> {
    pub account_id: &'a str,
    pub amount: Micros,
    /// Where Stripe sends the customer after paying, and after giving up.
    pub success_url: &'a str,
    pub cancel_url: &'a str,
    /// Sent as `Idempotency-Key`, so that a retried call makes one session.
    pub idempotency_key: &'a str,
}

/// A created session: the customer pays at `url`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CheckoutSession {
    pub id: String,
    pub url: String,
}

/// A session as Stripe reports it when asked, the fields a credit needs
/// (the `checkout.session` object of Stripe's OpenAPI document).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ConfirmedSession {
    pub id: String,
    pub mode: String,
    /// `paid`, `unpaid` or `no_payment_required`.
    pub payment_status: String,
    /// In the smallest unit of `currency`: cents for `usd`.
    pub amount_total: Option<i64>,
    pub currency: Option<String>,
    /// Its id, since vidgate never asks Stripe to expand it.
    pub payment_intent: Option<String>,
}

impl ConfirmedSession {
    /// `amount_total` in micro-dollars, exactly, when the session was paid
    /// in US dollars.
    pub fn paid_amount(&self) -> Option<Micros> {
        let cents = self.amount_total.filter(|cents| *cents > 0)?;
        if self.currency.as_deref() != Some("usd") {
            return None;
        }
        cents.checked_mul(MICROS_PER_CENT).map(Micros)
    }
}

/// Stripe's API with the operator's secret key.
pub struct StripeApi {
    client: reqwest::Client,
    api_url: String,
    secret_key: String,
}

impl StripeApi {
    pub fn new(settings: &StripeSettings) -> Result<StripeApi, StripeApiError> {
        let client = reqwest::Client::builder()
            .timeout(STRIPE_CALL_TIMEOUT)
            .build()
            .map_err(StripeApiError::Unreachable)?;
        Ok(StripeApi {
            client,
            api_url: settings.api_url.trim_end_matches('/').to_owned(),
            secret_key: settings.secret_key.clone(),
        })
    }

    /// Creates a Checkout Session that sells `session.amount` of credit to
    /// `session.account_id`. The account id goes in `client_reference_id`
    /// (what fulfilment credits) and in `metadata[account_id]` (what the
    /// operator sees in Stripe's dashboard).
    pub async fn create_checkout_session(
        &self,
        session: &NewCheckoutSession<'_>,
    ) -> Result<CheckoutSession, StripeApiError> {
        let unit_amount = (session.amount.0 / MICROS_PER_CENT).to_string();
        let product_name = format!("vidgate credit (${})", plain_dollars(session.amount));
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("mode", "payment")
            .append_pair("line_items[0][price_data][currency]", "usd")
            .append_pair("line_items[0][price_data][unit_amount]", &unit_amount)
            .append_pair(
                "line_items[0][price_data][product_data][name]",
                &product_name,
            )
            .append_pair("line_items[0][quantity]", "1")
            .append_pair("client_reference_id", session.account_id)
            .append_pair("metadata[account_id]", session.account_id)
            .append_pair("success_url", session.success_url)
            .append_pair("cancel_url", session.cancel_url)
            .finish();
        let response = self
            .client
            .post(format!("{}/v1/checkout/sessions", self.api_url))
            .bearer_auth(&self.secret_key)
            .header("Idempotency-Key", session.idempotency_key)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .map_err(StripeApiError::Unreachable)?;
        read_answer(response).await
    }

    /// The session `session_id` as Stripe has it now.
    pub async fn checkout_session(
        &self,
        session_id: &str,
    ) -> Result<ConfirmedSession, StripeApiError> {
        let mut url = url::Url::parse(&format!("{}/v1/checkout/sessions", self.api_url))
            .map_err(|error| StripeApiError::Unreadable(error.to_string()))?;
        url.path_segments_mut()
            .map_err(|()| StripeApiError::Unreadable("the Stripe API URL has no path".into()))?
            .push(session_id);
        let response = self
            .client
            .get(url)
            .bearer_auth(&self.secret_key)
            .send()
            .await
            .map_err(StripeApiError::Unreachable)?;
        read_answer(response).await
    }
}

/// Stripe's answer as `T`, or its error object's message.
async fn read_answer<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, StripeApiError> {
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(StripeApiError::Unreachable)?;
    if !status.is_success() {
        #[derive(Deserialize)]
        struct ErrorBody {
            error: ErrorObject,
        }
        #[derive(Deserialize)]
        struct ErrorObject {
            message: Option<String>,
        }
        let message = serde_json::from_slice::<ErrorBody>(&body)
            .ok()
            .and_then(|error| error.error.message)
            .unwrap_or_else(|| "no message".to_owned());
        return Err(StripeApiError::Refused {
            status: status.as_u16(),
            message,
        });
    }
    serde_json::from_slice(&body).map_err(|error| StripeApiError::Unreadable(error.to_string()))
}
