//! Money that came in and went back through Stripe (migration 0020): each
//! paid Checkout Session credited once, the refunds and disputes that take
//! it back, and the record of every Stripe event that moved money, each
//! written in the transaction of the movement it caused.

use vidgate_core::Micros;

use super::database::WriteTransaction;
use super::ledger::Movement;
use super::{Store, StoreError, now_millis};

/// A paid Checkout Session to credit, as Stripe confirmed it.
#[derive(Debug, Clone)]
pub struct StripeCredit {
    pub event_id: String,
    pub event_type: String,
    pub checkout_session_id: String,
    pub payment_intent_id: Option<String>,
    pub account_id: String,
    pub amount: Micros,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeCreditOutcome {
    Credited,
    /// Another event about the same session credited it already.
    SessionAlreadyCredited,
    /// This event was handled before (Stripe delivered it again).
    EventAlreadyHandled,
    /// The session names no account of this database; nothing was written.
    UnknownAccount,
}

/// Money Stripe took back from a payment: a refund reports the total
/// refunded so far, a dispute the amount it disputes.
#[derive(Debug, Clone)]
pub struct StripeTakeBack {
    pub event_id: String,
    pub event_type: String,
    pub payment_intent_id: String,
    /// The charge's or the dispute's id, for the ledger entry.
    pub object_id: String,
    pub kind: StripeTakeBackKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeTakeBackKind {
    /// `amount_refunded` of the charge: every refund of it so far.
    Refund {
        refunded_in_total: Micros,
    },
    Dispute {
        amount: Micros,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeTakeBackOutcome {
    TookBack {
        account_id: String,
        amount: Micros,
    },
    /// Everything this event reports was taken back before (an older
    /// refund event arriving after a newer one, or the payment is already
    /// taken back whole).
    NothingLeftToTake,
    EventAlreadyHandled,
    /// No credited Checkout Session was paid with this payment intent: the
    /// Stripe account sold something else. The event is recorded.
    UnknownPayment,
}

/// A credited session's figures: account, amount, refunded, disputed.
type StripePaymentRow = (String, String, i64, i64, i64);

impl Store {
    /// Records `event_id` as handled; false when it already was, and the
    /// caller then moves no money.
    async fn record_stripe_event_in(
        transaction: &mut WriteTransaction,
        event_id: &str,
        event_type: &str,
    ) -> Result<bool, StoreError> {
        let inserted = execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO stripe_events (event_id, event_type, received_at) \
                 VALUES ($1, $2, $3) ON CONFLICT (event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(event_type)
            .bind(now_millis())
        )?;
        Ok(inserted == 1)
    }

    /// Credits a paid Checkout Session once: the event, the session and the
    /// credit with its ledger entry are written in one transaction, so a
    /// retried or a second event about the session finds one of them and
    /// credits nothing.
    pub async fn credit_stripe_checkout(
        &self,
        credit: &StripeCredit,
    ) -> Result<StripeCreditOutcome, StoreError> {
        let mut transaction = self.begin_write().await?;
        if Self::account_in(&mut transaction, &credit.account_id)
            .await?
            .is_none()
        {
            transaction.rollback().await?;
            return Ok(StripeCreditOutcome::UnknownAccount);
        }
        if !Self::record_stripe_event_in(&mut transaction, &credit.event_id, &credit.event_type)
            .await?
        {
            transaction.rollback().await?;
            return Ok(StripeCreditOutcome::EventAlreadyHandled);
        }
        let now = now_millis();
        let inserted = execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "INSERT INTO stripe_payments (checkout_session_id, account_id, \
                 payment_intent_id, amount_micros, credited_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (checkout_session_id) DO NOTHING",
            )
            .bind(&credit.checkout_session_id)
            .bind(&credit.account_id)
            .bind(&credit.payment_intent_id)
            .bind(credit.amount.0)
            .bind(now)
        )?;
        if inserted == 0 {
            // The event is kept as handled: it will never credit.
            transaction.commit().await?;
            return Ok(StripeCreditOutcome::SessionAlreadyCredited);
        }
        let reference = match &credit.payment_intent_id {
            Some(payment_intent_id) => format!(
                "stripe {} {payment_intent_id} {}",
                credit.checkout_session_id, credit.event_id
            ),
            None => format!("stripe {} {}", credit.checkout_session_id, credit.event_id),
        };
        Self::move_money_with_reference(
            &mut transaction,
            &credit.account_id,
            None,
            Some(&reference),
            Movement::Credit,
            credit.amount,
        )
        .await?;
        transaction.commit().await?;
        Ok(StripeCreditOutcome::Credited)
    }

    /// Takes back what a refund or a dispute of a credited session's
    /// payment adds to what was taken back before, never more than the
    /// session paid. The account is locked before the session's figures are
    /// read, so two events about one payment take turns.
    pub async fn take_back_stripe_payment(
        &self,
        take_back: &StripeTakeBack,
    ) -> Result<StripeTakeBackOutcome, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::record_stripe_event_in(
            &mut transaction,
            &take_back.event_id,
            &take_back.event_type,
        )
        .await?
        {
            transaction.rollback().await?;
            return Ok(StripeTakeBackOutcome::EventAlreadyHandled);
        }
        let Some((_, account_id, ..)) =
            Self::stripe_payment_in(&mut transaction, &take_back.payment_intent_id).await?
        else {
            transaction.commit().await?;
            return Ok(StripeTakeBackOutcome::UnknownPayment);
        };
        Self::account_in(&mut transaction, &account_id).await?;
        // Read again under the account's lock: another event may have
        // changed the figures since.
        let (session_id, account_id, amount, refunded, disputed) =
            Self::stripe_payment_in(&mut transaction, &take_back.payment_intent_id)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a Stripe payment vanished".into()))?;
        let (taken, refunded, disputed) = match take_back.kind {
            StripeTakeBackKind::Refund { refunded_in_total } => {
                let refunded_now = refunded_in_total.0.min(amount - disputed).max(refunded);
                (refunded_now - refunded, refunded_now, disputed)
            }
            StripeTakeBackKind::Dispute {
                amount: disputed_amount,
            } => {
                let taken = disputed_amount.0.min(amount - refunded - disputed).max(0);
                (taken, refunded, disputed + taken)
            }
        };
        if taken == 0 {
            transaction.commit().await?;
            return Ok(StripeTakeBackOutcome::NothingLeftToTake);
        }
        execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "UPDATE stripe_payments SET refunded_micros = $1, disputed_micros = $2 \
                 WHERE checkout_session_id = $3",
            )
            .bind(refunded)
            .bind(disputed)
            .bind(&session_id)
        )?;
        let reference = format!(
            "stripe {session_id} {} {} {}",
            take_back.payment_intent_id, take_back.object_id, take_back.event_id
        );
        Self::move_money_with_reference(
            &mut transaction,
            &account_id,
            None,
            Some(&reference),
            Movement::TakeBack,
            Micros(taken),
        )
        .await?;
        transaction.commit().await?;
        Ok(StripeTakeBackOutcome::TookBack {
            account_id,
            amount: Micros(taken),
        })
    }

    async fn stripe_payment_in(
        transaction: &mut WriteTransaction,
        payment_intent_id: &str,
    ) -> Result<Option<StripePaymentRow>, StoreError> {
        Ok(fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(
                "SELECT checkout_session_id, account_id, amount_micros, refunded_micros, \
                 disputed_micros FROM stripe_payments WHERE payment_intent_id = $1",
            )
            .bind(payment_intent_id)
        )?)
    }
}
