//! Money that came in and went back through Stripe (migration 0020): each
//! paid Checkout Session credited once, the refunds and disputes that take
//! it back, a won dispute's money given back once (migration 0023), and the
//! record of every Stripe event that moved money, each written in the
//! transaction of the movement it caused.

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
    /// The charge's or the dispute's id, for the ledger entry (and, for a
    /// dispute, the key of what it took).
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

/// A dispute of a credited payment that Stripe reports won
/// (`charge.dispute.closed` with status `won`).
#[derive(Debug, Clone)]
pub struct StripeDisputeWon {
    pub event_id: String,
    pub event_type: String,
    pub payment_intent_id: String,
    pub dispute_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeDisputeWonOutcome {
    /// What the dispute took back was credited again.
    GaveBack {
        account_id: String,
        amount: Micros,
    },
    /// The dispute took nothing (it was reported won before its creation
    /// arrived, which then takes nothing), or was given back before.
    NothingToGiveBack,
    EventAlreadyHandled,
    UnknownPayment,
}

/// A credited session's figures: session, account, amount, refunded,
/// disputed.
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
                // A dispute takes once: one already recorded (created
                // before, or reported won before its creation arrived)
                // takes nothing more.
                let taken = disputed_amount.0.min(amount - refunded - disputed).max(0);
                let recorded = execute_in_transaction!(
                    &mut transaction,
                    sqlx::query(
                        "INSERT INTO stripe_disputes (dispute_id, checkout_session_id, \
                         taken_micros) VALUES ($1, $2, $3) ON CONFLICT (dispute_id) DO NOTHING",
                    )
                    .bind(&take_back.object_id)
                    .bind(&session_id)
                    .bind(taken)
                )?;
                if recorded == 0 {
                    (0, refunded, disputed)
                } else {
                    (taken, refunded, disputed + taken)
                }
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

    /// Gives back, once, what a dispute Stripe reports won took back: the
    /// event, the dispute's new state, the payment's figures and the credit
    /// with its ledger entry in one transaction, under the account's lock.
    pub async fn give_back_won_stripe_dispute(
        &self,
        won: &StripeDisputeWon,
    ) -> Result<StripeDisputeWonOutcome, StoreError> {
        let mut transaction = self.begin_write().await?;
        if !Self::record_stripe_event_in(&mut transaction, &won.event_id, &won.event_type).await? {
            transaction.rollback().await?;
            return Ok(StripeDisputeWonOutcome::EventAlreadyHandled);
        }
        let Some((_, account_id, ..)) =
            Self::stripe_payment_in(&mut transaction, &won.payment_intent_id).await?
        else {
            transaction.commit().await?;
            return Ok(StripeDisputeWonOutcome::UnknownPayment);
        };
        Self::account_in(&mut transaction, &account_id).await?;
        let (session_id, account_id, ..) =
            Self::stripe_payment_in(&mut transaction, &won.payment_intent_id)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a Stripe payment vanished".into()))?;
        let now = now_millis();
        let dispute: Option<(i64, Option<i64>)> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_as(
                "SELECT taken_micros, won_at FROM stripe_disputes WHERE dispute_id = $1",
            )
            .bind(&won.dispute_id)
        )?;
        let given_back = match dispute {
            // Won before its creation arrived: recorded as won with
            // nothing taken, so the creation takes nothing either.
            None => {
                execute_in_transaction!(
                    &mut transaction,
                    sqlx::query(
                        "INSERT INTO stripe_disputes (dispute_id, checkout_session_id, \
                         taken_micros, won_at) VALUES ($1, $2, 0, $3)",
                    )
                    .bind(&won.dispute_id)
                    .bind(&session_id)
                    .bind(now)
                )?;
                0
            }
            Some((_, Some(_))) => 0,
            Some((taken, None)) => {
                execute_in_transaction!(
                    &mut transaction,
                    sqlx::query("UPDATE stripe_disputes SET won_at = $1 WHERE dispute_id = $2")
                        .bind(now)
                        .bind(&won.dispute_id)
                )?;
                execute_in_transaction!(
                    &mut transaction,
                    sqlx::query(
                        "UPDATE stripe_payments SET disputed_micros = disputed_micros - $1 \
                         WHERE checkout_session_id = $2",
                    )
                    .bind(taken)
                    .bind(&session_id)
                )?;
                taken
            }
        };
        if given_back == 0 {
            transaction.commit().await?;
            return Ok(StripeDisputeWonOutcome::NothingToGiveBack);
        }
        let reference = format!(
            "stripe {session_id} {} {} {}",
            won.payment_intent_id, won.dispute_id, won.event_id
        );
        Self::move_money_with_reference(
            &mut transaction,
            &account_id,
            None,
            Some(&reference),
            Movement::Credit,
            Micros(given_back),
        )
        .await?;
        transaction.commit().await?;
        Ok(StripeDisputeWonOutcome::GaveBack {
            account_id,
            amount: Micros(given_back),
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
