//! Money in through Stripe Checkout (issue 41): the settings, the amounts an
//! account may buy, the calls vidgate makes to Stripe's API (`api.rs`), the
//! check of Stripe's webhook signatures (`signature.rs`) and what each
//! event Stripe sends does (`events.rs`). vidgate talks to Stripe's HTTP
//! API itself, form-encoded as Stripe takes it: no Stripe SDK crate.
//!
//! Without a secret key and a webhook secret nothing of this runs: the
//! routes answer 404 and the dashboard shows no "Add credit".

mod api;
mod events;
mod signature;

use sha2::Digest;
use vidgate_core::Micros;
use vidgate_core::money::MICROS_PER_CENT;

pub use api::{CheckoutSession, ConfirmedSession, NewCheckoutSession, StripeApi, StripeApiError};
pub use events::{StripeEventError, StripeEventOutcome, handle_event};
pub use signature::{SIGNATURE_TOLERANCE_SECONDS, SignatureError, verify_signature};

/// Where Stripe's API is when `VIDGATE_STRIPE_API_URL` does not say.
pub const DEFAULT_STRIPE_API_URL: &str = "https://api.stripe.com";

/// How vidgate reaches Stripe. Deliberately not `Debug`: it holds the
/// secret key and the webhook secret.
#[derive(Clone)]
pub struct StripeSettings {
    /// `sk_…` (or a restricted `rk_…` key allowed to write Checkout
    /// Sessions).
    pub secret_key: String,
    /// The `whsec_…` secret of the webhook endpoint, the key of Stripe's
    /// signatures.
    pub webhook_secret: String,
    /// Stripe's API, or a fake's in tests; no trailing slash.
    pub api_url: String,
    pub amounts: CheckoutAmounts,
}

/// What a node that sells credit through Stripe keeps: the API client, the
/// webhook secret and the amounts, built at start-up from the settings.
pub struct StripeCheckout {
    pub api: StripeApi,
    pub webhook_secret: String,
    pub amounts: CheckoutAmounts,
    /// Where Stripe sends the customer back: the dashboard's overview.
    pub return_url: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StripeSetupError {
    #[error("{0}")]
    Amounts(String),
    #[error("could not build the HTTP client for Stripe")]
    Client(#[source] StripeApiError),
}

impl StripeCheckout {
    /// The node's Stripe connection; `public_url` is the node's public
    /// base, which the dashboard's address is made from.
    pub fn new(
        settings: &StripeSettings,
        public_url: &str,
    ) -> Result<StripeCheckout, StripeSetupError> {
        if let Some(problem) = settings.amounts.problem() {
            return Err(StripeSetupError::Amounts(problem));
        }
        Ok(StripeCheckout {
            api: StripeApi::new(settings).map_err(StripeSetupError::Client)?,
            webhook_secret: settings.webhook_secret.clone(),
            amounts: settings.amounts.clone(),
            return_url: format!("{}/dashboard", public_url.trim_end_matches('/')),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    #[error(transparent)]
    Amount(#[from] AmountRefusal),
    #[error("Stripe could not create the Checkout Session")]
    Stripe(#[from] StripeApiError),
    /// The account started as many Checkout Sessions as it may for now
    /// (`rate_limit::CallerRateLimiter::check_checkout`); the next may start
    /// after `retry_after`.
    #[error("{}", crate::rate_limit::checkout_refusal_message())]
    TooMany { retry_after: std::time::Duration },
    /// The session could not be recorded: its URL is not handed out, so
    /// nobody pays a session vidgate would not credit.
    #[error("the Checkout Session could not be recorded")]
    Store(#[from] crate::store::StoreError),
}

/// Starts a Checkout in which the customer buys `amount_text` of credit for
/// `account_id`. A retried request that sends the same `client_key` (its
/// `Idempotency-Key`) reaches the same session at Stripe; without one,
/// every request makes a session of its own. An amount that may be bought
/// takes one session from the account's Checkout limit (a refused amount
/// reaches no one and takes nothing), whichever door it came through. The
/// session is recorded before it is answered: only recorded sessions are
/// credited when paid.
pub async fn start_checkout(
    store: &crate::store::Store,
    limiter: &crate::rate_limit::CallerRateLimiter,
    checkout: &StripeCheckout,
    account_id: &str,
    amount_text: &str,
    client_key: Option<&str>,
) -> Result<CheckoutSession, CheckoutError> {
    let amount = checkout.amounts.parse(amount_text)?;
    let allowed = limiter.check_checkout(account_id).await;
    if !allowed.allowed {
        return Err(CheckoutError::TooMany {
            retry_after: allowed.reset,
        });
    }
    // The account is part of the key, so two accounts sending the same
    // client key never share a session.
    let idempotency_key = match client_key {
        Some(client_key) => {
            let digest = sha2::Sha256::digest(format!("{account_id}\n{client_key}").as_bytes());
            let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
            format!("vidgate-checkout-{hex}")
        }
        None => format!("vidgate-checkout-{}", uuid::Uuid::now_v7()),
    };
    let session = checkout
        .api
        .create_checkout_session(&NewCheckoutSession {
            account_id,
            amount,
            success_url: &format!("{}?checkout=success", checkout.return_url),
            cancel_url: &format!("{}?checkout=canceled", checkout.return_url),
            idempotency_key: &idempotency_key,
        })
        .await?;
    store
        .stripe_payments()
        .record_checkout_session(&session.id, account_id, amount)
        .await?;
    Ok(session)
}

/// The amounts an account may buy in one Checkout: any whole-cent amount
/// from `minimum` to `maximum`, with `choices` offered as buttons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutAmounts {
    pub minimum: Micros,
    pub maximum: Micros,
    pub choices: Vec<Micros>,
}

impl Default for CheckoutAmounts {
    /// $5 to $1000, offering $10, $20, $50 and $100. Stripe's own minimum
    /// charge in US dollars is $0.50; $5 keeps card fees a small share.
    fn default() -> CheckoutAmounts {
        CheckoutAmounts {
            minimum: Micros::from_usd_cents(500),
            maximum: Micros::from_usd_cents(100_000),
            choices: [1_000, 2_000, 5_000, 10_000]
                .map(Micros::from_usd_cents)
                .to_vec(),
        }
    }
}

/// Why an amount may not be bought; the message is for the customer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AmountRefusal {
    #[error("amount_usd must be a dollar amount such as \"20.00\"")]
    Malformed,
    #[error("amount_usd must be a whole number of cents")]
    NotWholeCents,
    #[error("amount_usd must be from {minimum} to {maximum}")]
    OutOfRange { minimum: String, maximum: String },
}

impl CheckoutAmounts {
    /// The amount `text` names (`"20.00"`, `"20"`), if it may be bought.
    pub fn parse(&self, text: &str) -> Result<Micros, AmountRefusal> {
        let amount = Micros::parse_usd(text).map_err(|_| AmountRefusal::Malformed)?;
        if amount.0 % MICROS_PER_CENT != 0 {
            return Err(AmountRefusal::NotWholeCents);
        }
        if amount < self.minimum || amount > self.maximum {
            return Err(AmountRefusal::OutOfRange {
                minimum: plain_dollars(self.minimum),
                maximum: plain_dollars(self.maximum),
            });
        }
        Ok(amount)
    }

    /// Why these settings cannot be used, for start-up to refuse them.
    pub fn problem(&self) -> Option<String> {
        let whole_cents = |amount: Micros| amount.0 % MICROS_PER_CENT == 0;
        if self.minimum.0 <= 0 || !whole_cents(self.minimum) || !whole_cents(self.maximum) {
            return Some("the Stripe minimum and maximum must be positive whole cents".into());
        }
        if self.minimum > self.maximum {
            return Some("the Stripe minimum is above the maximum".into());
        }
        self.choices
            .iter()
            .find(|choice| {
                !whole_cents(**choice) || **choice < self.minimum || **choice > self.maximum
            })
            .map(|choice| {
                format!(
                    "the Stripe amount choice {} is not a whole-cent amount from {} to {}",
                    plain_dollars(*choice),
                    plain_dollars(self.minimum),
                    plain_dollars(self.maximum)
                )
            })
    }
}

/// A whole-cent amount as customers and Stripe's forms write it: `20.00`.
pub fn plain_dollars(amount: Micros) -> String {
    let cents = amount.0 / MICROS_PER_CENT;
    format!("{}.{:02}", cents / 100, cents % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_whole_cents_within_the_range() {
        let amounts = CheckoutAmounts::default();
        assert_eq!(amounts.parse("20.00"), Ok(Micros::from_usd_cents(2_000)));
        assert_eq!(amounts.parse("5"), Ok(Micros::from_usd_cents(500)));
        assert_eq!(
            amounts.parse("1000.00"),
            Ok(Micros::from_usd_cents(100_000))
        );
        assert_eq!(amounts.parse("20.005"), Err(AmountRefusal::NotWholeCents));
        assert_eq!(amounts.parse("twenty"), Err(AmountRefusal::Malformed));
        assert_eq!(amounts.parse("-20"), Err(AmountRefusal::Malformed));
        for outside in ["4.99", "1000.01"] {
            assert!(
                matches!(
                    amounts.parse(outside),
                    Err(AmountRefusal::OutOfRange { .. })
                ),
                "{outside}"
            );
        }
        assert_eq!(amounts.problem(), None);
    }

    #[test]
    fn settings_whose_choices_cannot_be_bought_are_refused() {
        let amounts = CheckoutAmounts {
            choices: vec![Micros::from_usd_cents(200_000)],
            ..CheckoutAmounts::default()
        };
        assert!(amounts.problem().is_some());
        let upside_down = CheckoutAmounts {
            minimum: Micros::from_usd_cents(1_000),
            maximum: Micros::from_usd_cents(500),
            choices: Vec::new(),
        };
        assert!(upside_down.problem().is_some());
    }
}
