//! What each Stripe event does, once its signature is verified. The
//! events vidgate acts on (the ones the operator subscribes the endpoint
//! to, docs/deploy.md):
//!
//! - `checkout.session.completed` with `payment_status: paid` (a card
//!   payment) and `checkout.session.async_payment_succeeded` (a bank debit
//!   that cleared later) credit a session vidgate made (recorded when it
//!   made it) with the amount it recorded, to the account it recorded, after
//!   reading the session back from Stripe: the event's copy is not trusted
//!   alone. A paid session vidgate did not make (another product on the
//!   same Stripe account) is answered and credits nothing, whatever its
//!   `client_reference_id` says.
//! - `charge.refunded` takes back what the charge's refunds add.
//! - `charge.dispute.created` takes back the disputed amount (an inquiry's
//!   too, status `warning_needs_response`, in case it becomes a chargeback).
//! - `charge.dispute.closed` with the dispute's `status` `won` (or
//!   `warning_closed`, an inquiry that ended without a chargeback) gives
//!   back, once, what its creation took back.
//!
//! Every other event is answered and ignored. Stripe retries an event for
//! up to three days, in any order, so each is handled at most once (the
//! store records its id), and each session is credited at most once. A
//! refund or dispute that arrives before its payment's credit waits in the
//! store and is applied with the credit, so the account ends where it would
//! have ended in order.
//!
//! Sources of the fields read: the `charge` and `dispute` objects of
//! `openapi/fixtures3.json` in the public `stripe/openapi` repository (commit
//! f6c2a48, the one `tests/fixtures/stripe/` names) carry `payment_intent`,
//! `amount_refunded` (a charge's refunds in total, in cents) and `amount` (a
//! dispute's, in cents); the session's `payment_status`, `amount_total` and
//! `payment_intent` are those of its `checkout.session` object. Reading
//! `amount_refunded` as a running total, so that only its growth is taken
//! back, follows that object's field; that a `charge.refunded` event carries
//! the charge as `data.object` is Stripe's API reference ("Types of
//! events"), not read from a recorded event here. A dispute's `status` and
//! its value `won` are the `Dispute` object's of the official `stripe` Python
//! package, version 16.1.0 (`stripe/_dispute.py`, generated from Stripe's
//! OpenAPI document: "Possible values include … `won`, `lost`"); that a
//! closed dispute's event is `charge.dispute.closed` with the dispute as
//! `data.object` is Stripe's API reference ("Types of events").

use serde::Deserialize;
use serde_json::Value;
use vidgate_core::Micros;
use vidgate_core::money::MICROS_PER_CENT;

use super::api::{StripeApi, StripeApiError};
use crate::store::{
    Store, StoreError, StripeCredit, StripeCreditOutcome, StripeDisputeWon,
    StripeDisputeWonOutcome, StripeTakeBack, StripeTakeBackKind, StripeTakeBackOutcome,
};

#[derive(Debug, thiserror::Error)]
pub enum StripeEventError {
    /// Not an event as Stripe sends them; Stripe will not send it again
    /// differently, so it is refused.
    #[error("the event could not be read: {0}")]
    Malformed(String),
    /// Stripe could not confirm the session now: the event is answered
    /// with an error so that Stripe retries it.
    #[error("the Checkout Session could not be confirmed with Stripe")]
    Confirmation(#[source] StripeApiError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What an event did, for the log and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeEventOutcome {
    Credited(StripeCreditOutcome),
    TookBack(StripeTakeBackOutcome),
    GaveBack(StripeDisputeWonOutcome),
    /// Why nothing was done: an event type vidgate does not act on, a
    /// session not paid (yet), a payment in another currency.
    Ignored(&'static str),
}

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: EventData,
}

#[derive(Deserialize)]
struct EventData {
    object: Value,
}

/// The fields of a `charge` (for `charge.refunded`) or a `dispute` (for
/// `charge.dispute.created`) that vidgate reads.
#[derive(Deserialize)]
struct PaymentObject {
    id: String,
    payment_intent: Option<String>,
    /// A charge's refunds so far, in cents.
    #[serde(default)]
    amount_refunded: Option<i64>,
    /// A dispute's amount, in cents.
    #[serde(default)]
    amount: Option<i64>,
    currency: Option<String>,
    /// A dispute's state (`won`, `lost`, `needs_response`, …).
    #[serde(default)]
    status: Option<String>,
}

/// Handles the verified event `body`.
pub async fn handle_event(
    store: &Store,
    api: &StripeApi,
    body: &[u8],
) -> Result<StripeEventOutcome, StripeEventError> {
    let event: Event = serde_json::from_slice(body)
        .map_err(|error| StripeEventError::Malformed(error.to_string()))?;
    match event.kind.as_str() {
        "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
            // A completed session paid by a method that clears later is
            // `unpaid` here; its `async_payment_succeeded` credits it.
            if event.kind == "checkout.session.completed"
                && event
                    .data
                    .object
                    .get("payment_status")
                    .and_then(Value::as_str)
                    != Some("paid")
            {
                return Ok(StripeEventOutcome::Ignored("the session is not paid yet"));
            }
            let session_id = event
                .data
                .object
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| StripeEventError::Malformed("the session has no id".into()))?;
            credit_session(store, api, &event, session_id).await
        }
        "charge.refunded" | "charge.dispute.created" => {
            let object: PaymentObject = serde_json::from_value(event.data.object.clone())
                .map_err(|error| StripeEventError::Malformed(error.to_string()))?;
            take_back(store, &event, object).await
        }
        "charge.dispute.closed" => {
            let object: PaymentObject = serde_json::from_value(event.data.object.clone())
                .map_err(|error| StripeEventError::Malformed(error.to_string()))?;
            give_back_won_dispute(store, &event, object).await
        }
        _ => Ok(StripeEventOutcome::Ignored(
            "vidgate does not act on this event type",
        )),
    }
}

async fn credit_session(
    store: &Store,
    api: &StripeApi,
    event: &Event,
    session_id: &str,
) -> Result<StripeEventOutcome, StripeEventError> {
    let session = api
        .checkout_session(session_id)
        .await
        .map_err(StripeEventError::Confirmation)?;
    if session.mode != "payment" || session.payment_status != "paid" {
        return Ok(StripeEventOutcome::Ignored(
            "Stripe does not report the session paid",
        ));
    }
    let Some(paid) = session.paid_amount() else {
        return Ok(StripeEventOutcome::Ignored(
            "the session was not paid in US dollars",
        ));
    };
    let outcome = store
        .stripe_payments()
        .credit_checkout(&StripeCredit {
            event_id: event.id.clone(),
            event_type: event.kind.clone(),
            checkout_session_id: session.id,
            payment_intent_id: session.payment_intent,
            paid,
        })
        .await?;
    Ok(StripeEventOutcome::Credited(outcome))
}

async fn take_back(
    store: &Store,
    event: &Event,
    object: PaymentObject,
) -> Result<StripeEventOutcome, StripeEventError> {
    let Some(payment_intent_id) = object.payment_intent else {
        return Ok(StripeEventOutcome::Ignored(
            "the charge has no payment intent",
        ));
    };
    if object.currency.as_deref() != Some("usd") {
        return Ok(StripeEventOutcome::Ignored(
            "the charge is not in US dollars",
        ));
    }
    let cents = |field: Option<i64>, name: &str| {
        field
            .filter(|cents| *cents >= 0)
            .and_then(|cents| cents.checked_mul(MICROS_PER_CENT))
            .map(Micros)
            .ok_or_else(|| StripeEventError::Malformed(format!("the event has no {name}")))
    };
    let kind = if event.kind == "charge.refunded" {
        StripeTakeBackKind::Refund {
            refunded_in_total: cents(object.amount_refunded, "amount_refunded")?,
        }
    } else {
        StripeTakeBackKind::Dispute {
            amount: cents(object.amount, "amount")?,
        }
    };
    let outcome = store
        .stripe_payments()
        .take_back_payment(&StripeTakeBack {
            event_id: event.id.clone(),
            event_type: event.kind.clone(),
            payment_intent_id,
            object_id: object.id,
            kind,
        })
        .await?;
    Ok(StripeEventOutcome::TookBack(outcome))
}

/// A closed dispute: one Stripe decided for the seller (`won`), or an
/// inquiry closed without becoming a chargeback (`warning_closed`), gives
/// back what its creation took; any other ending (`lost`) keeps what was
/// taken. Both statuses are values of the `Dispute` object's `status` in
/// the official `stripe` Python package 16.1.0 (`stripe/_dispute.py`).
async fn give_back_won_dispute(
    store: &Store,
    event: &Event,
    object: PaymentObject,
) -> Result<StripeEventOutcome, StripeEventError> {
    if !matches!(object.status.as_deref(), Some("won" | "warning_closed")) {
        return Ok(StripeEventOutcome::Ignored("the dispute was not won"));
    }
    let Some(payment_intent_id) = object.payment_intent else {
        return Ok(StripeEventOutcome::Ignored(
            "the dispute has no payment intent",
        ));
    };
    let outcome = store
        .stripe_payments()
        .give_back_won_dispute(&StripeDisputeWon {
            event_id: event.id.clone(),
            event_type: event.kind.clone(),
            payment_intent_id,
            dispute_id: object.id,
        })
        .await?;
    Ok(StripeEventOutcome::GaveBack(outcome))
}
