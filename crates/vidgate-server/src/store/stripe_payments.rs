//! Money that came in and went back through Stripe (migrations 0020, 0023
//! and 0026): each Checkout Session vidgate made, recorded before its
//! customer sees it; each such session credited once when paid; the refunds
//! and disputes that take it back, waiting for the credit when they arrive
//! first; a won dispute's money given back once; and the record of every
//! Stripe event that moved money, each written in the transaction of the
//! movement it caused.

use vidgate_core::Micros;

use super::database::WriteTransaction;
use super::ledger::Movement;
use super::{Store, StoreError, now_millis};

/// A paid Checkout Session to credit, as Stripe confirmed it. The account
/// and the amount credited are the ones vidgate recorded when it made the
/// session, not what the session says.
#[derive(Debug, Clone)]
pub struct StripeCredit {
    pub event_id: String,
    pub event_type: String,
    pub checkout_session_id: String,
    pub payment_intent_id: Option<String>,
    /// What Stripe reports paid; it must be the amount recorded.
    pub paid: Micros,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StripeCreditOutcome {
    /// The recorded amount was credited to the recorded account; `took_back`
    /// is what refunds and disputes that had arrived first took back of it
    /// in the same transaction.
    Credited {
        account_id: String,
        amount: Micros,
        took_back: Micros,
    },
    /// Another event about the same session credited it already.
    SessionAlreadyCredited,
    /// This event was handled before (Stripe delivered it again).
    EventAlreadyHandled,
    /// vidgate never made this session (another product sold on the same
    /// Stripe account), or its account is gone; nothing was written.
    NotVidgatesSession,
    /// Stripe reports another amount paid than vidgate asked for; nothing
    /// was written.
    AmountDiffers { recorded: Micros },
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
    /// No credited Checkout Session was paid with this payment intent (yet):
    /// the event waits and is applied when the payment's credit arrives. A
    /// payment of another product is never credited, so it takes nothing.
    WaitsForCredit,
}

/// A dispute of a credited payment that Stripe closed in the seller's
/// favour (`charge.dispute.closed` with status `won`, or `warning_closed`
/// for an inquiry that never became a chargeback).
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
    /// As for a take-back: waits for the payment's credit.
    WaitsForCredit,
}

/// How a waiting event is stored (`stripe_pending_take_backs.kind`).
const PENDING_REFUND: &str = "refund";
const PENDING_DISPUTE: &str = "dispute";
const PENDING_DISPUTE_WON: &str = "dispute_won";

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

    /// Applies, in the order they arrived, the refunds and disputes of
    /// `payment_intent_id` that waited for its credit, and forgets them.
    /// Answers what they took back in all (less what won disputes gave back).
    async fn apply_waiting_take_backs_in(
        transaction: &mut WriteTransaction,
        payment_intent_id: &str,
    ) -> Result<Micros, StoreError> {
        let waiting: Vec<(String, String, String, String, i64)> = fetch_in_transaction!(
            &mut *transaction,
            fetch_all,
            sqlx::query_as(
                "SELECT event_id, event_type, object_id, kind, amount_micros \
                 FROM stripe_pending_take_backs WHERE payment_intent_id = $1 \
                 ORDER BY received_at, event_id",
            )
            .bind(payment_intent_id)
        )?;
        let mut took_back = 0_i64;
        for (event_id, event_type, object_id, kind, amount) in waiting {
            match kind.as_str() {
                PENDING_DISPUTE_WON => {
                    let won = StripeDisputeWon {
                        event_id,
                        event_type,
                        payment_intent_id: payment_intent_id.to_owned(),
                        dispute_id: object_id,
                    };
                    if let StripeDisputeWonOutcome::GaveBack { amount, .. } =
                        Self::give_back_won_dispute_in(transaction, &won).await?
                    {
                        took_back -= amount.0;
                    }
                }
                PENDING_REFUND | PENDING_DISPUTE => {
                    let kind = if kind == PENDING_REFUND {
                        StripeTakeBackKind::Refund {
                            refunded_in_total: Micros(amount),
                        }
                    } else {
                        StripeTakeBackKind::Dispute {
                            amount: Micros(amount),
                        }
                    };
                    let take_back = StripeTakeBack {
                        event_id,
                        event_type,
                        payment_intent_id: payment_intent_id.to_owned(),
                        object_id,
                        kind,
                    };
                    if let StripeTakeBackOutcome::TookBack { amount, .. } =
                        Self::take_back_in(transaction, &take_back).await?
                    {
                        took_back += amount.0;
                    }
                }
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "a waiting Stripe event of kind {other}"
                    )));
                }
            }
        }
        execute_in_transaction!(
            &mut *transaction,
            sqlx::query("DELETE FROM stripe_pending_take_backs WHERE payment_intent_id = $1")
                .bind(payment_intent_id)
        )?;
        Ok(Micros(took_back))
    }

    /// Keeps an event about a payment not credited (yet) until its credit.
    async fn wait_for_credit_in(
        transaction: &mut WriteTransaction,
        event_id: &str,
        event_type: &str,
        payment_intent_id: &str,
        object_id: &str,
        kind: &str,
        amount: Micros,
    ) -> Result<(), StoreError> {
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO stripe_pending_take_backs (event_id, event_type, \
                 payment_intent_id, object_id, kind, amount_micros, received_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(event_id)
            .bind(event_type)
            .bind(payment_intent_id)
            .bind(object_id)
            .bind(kind)
            .bind(amount.0)
            .bind(now_millis())
        )?;
        Ok(())
    }

    /// The take-back itself, in the transaction that recorded its event.
    /// The account is locked before the session's figures are read, so two
    /// events about one payment take turns.
    async fn take_back_in(
        transaction: &mut WriteTransaction,
        take_back: &StripeTakeBack,
    ) -> Result<StripeTakeBackOutcome, StoreError> {
        let Some((_, account_id, ..)) =
            Self::stripe_payment_in(transaction, &take_back.payment_intent_id).await?
        else {
            return Ok(StripeTakeBackOutcome::WaitsForCredit);
        };
        Self::account_in(transaction, &account_id).await?;
        // Read again under the account's lock: another event may have
        // changed the figures since.
        let (session_id, account_id, amount, refunded, disputed) =
            Self::stripe_payment_in(transaction, &take_back.payment_intent_id)
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
                    &mut *transaction,
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
            return Ok(StripeTakeBackOutcome::NothingLeftToTake);
        }
        execute_in_transaction!(
            &mut *transaction,
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
            transaction,
            &account_id,
            None,
            Some(&reference),
            Movement::TakeBack,
            Micros(taken),
        )
        .await?;
        Ok(StripeTakeBackOutcome::TookBack {
            account_id,
            amount: Micros(taken),
        })
    }

    /// The give-back itself, in the transaction that recorded its event.
    async fn give_back_won_dispute_in(
        transaction: &mut WriteTransaction,
        won: &StripeDisputeWon,
    ) -> Result<StripeDisputeWonOutcome, StoreError> {
        let Some((_, account_id, ..)) =
            Self::stripe_payment_in(transaction, &won.payment_intent_id).await?
        else {
            return Ok(StripeDisputeWonOutcome::WaitsForCredit);
        };
        Self::account_in(transaction, &account_id).await?;
        let (session_id, account_id, ..) =
            Self::stripe_payment_in(transaction, &won.payment_intent_id)
                .await?
                .ok_or_else(|| StoreError::Corrupt("a Stripe payment vanished".into()))?;
        let now = now_millis();
        let dispute: Option<(i64, Option<i64>)> = fetch_in_transaction!(
            &mut *transaction,
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
                    &mut *transaction,
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
                    &mut *transaction,
                    sqlx::query("UPDATE stripe_disputes SET won_at = $1 WHERE dispute_id = $2")
                        .bind(now)
                        .bind(&won.dispute_id)
                )?;
                execute_in_transaction!(
                    &mut *transaction,
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
            return Ok(StripeDisputeWonOutcome::NothingToGiveBack);
        }
        let reference = format!(
            "stripe {session_id} {} {} {}",
            won.payment_intent_id, won.dispute_id, won.event_id
        );
        Self::move_money_with_reference(
            transaction,
            &account_id,
            None,
            Some(&reference),
            Movement::Credit,
            Micros(given_back),
        )
        .await?;
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

/// The operations of `stripe_payments` (see `Store::stripe_payments`).
#[derive(Clone, Copy)]
pub struct StripePayments<'store> {
    pub(super) store: &'store Store,
}

impl StripePayments<'_> {
    /// Records a Checkout Session vidgate made for `account_id` to buy
    /// `amount`, before its URL goes to the customer: only recorded sessions
    /// are credited. A retried checkout that reached the same session at
    /// Stripe (the same idempotency key) records nothing new.
    pub async fn record_checkout_session(
        self,
        checkout_session_id: &str,
        account_id: &str,
        amount: Micros,
    ) -> Result<(), StoreError> {
        let mut transaction = self.store.begin_write().await?;
        execute_in_transaction!(
            &mut transaction,
            sqlx::query(
                "INSERT INTO stripe_checkout_sessions (checkout_session_id, account_id, \
                 amount_micros, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (checkout_session_id) DO NOTHING",
            )
            .bind(checkout_session_id)
            .bind(account_id)
            .bind(amount.0)
            .bind(now_millis())
        )?;
        transaction.commit().await
    }

    /// Credits a paid Checkout Session once, to the account and for the
    /// amount vidgate recorded when it made the session: the event, the
    /// session and the credit with its ledger entry are written in one
    /// transaction, so a retried or a second event about the session finds
    /// one of them and credits nothing. Refunds and disputes of the payment
    /// that arrived first are applied in the same transaction.
    pub async fn credit_checkout(
        self,
        credit: &StripeCredit,
    ) -> Result<StripeCreditOutcome, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let recorded: Option<(String, i64)> = fetch_in_transaction!(
            &mut transaction,
            fetch_optional,
            sqlx::query_as(
                "SELECT account_id, amount_micros FROM stripe_checkout_sessions \
                 WHERE checkout_session_id = $1",
            )
            .bind(&credit.checkout_session_id)
        )?;
        let Some((account_id, recorded_amount)) = recorded else {
            transaction.rollback().await?;
            return Ok(StripeCreditOutcome::NotVidgatesSession);
        };
        if credit.paid.0 != recorded_amount {
            transaction.rollback().await?;
            return Ok(StripeCreditOutcome::AmountDiffers {
                recorded: Micros(recorded_amount),
            });
        }
        if Store::account_in(&mut transaction, &account_id)
            .await?
            .is_none()
        {
            transaction.rollback().await?;
            return Ok(StripeCreditOutcome::NotVidgatesSession);
        }
        if !Store::record_stripe_event_in(&mut transaction, &credit.event_id, &credit.event_type)
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
            .bind(&account_id)
            .bind(&credit.payment_intent_id)
            .bind(recorded_amount)
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
        Store::move_money_with_reference(
            &mut transaction,
            &account_id,
            None,
            Some(&reference),
            Movement::Credit,
            Micros(recorded_amount),
        )
        .await?;
        let took_back = match &credit.payment_intent_id {
            Some(payment_intent_id) => {
                Store::apply_waiting_take_backs_in(&mut transaction, payment_intent_id).await?
            }
            None => Micros(0),
        };
        transaction.commit().await?;
        Ok(StripeCreditOutcome::Credited {
            account_id,
            amount: Micros(recorded_amount),
            took_back,
        })
    }

    /// Takes back what a refund or a dispute of a credited session's
    /// payment adds to what was taken back before, never more than the
    /// session paid; one about a payment not credited yet waits for it.
    pub async fn take_back_payment(
        self,
        take_back: &StripeTakeBack,
    ) -> Result<StripeTakeBackOutcome, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::record_stripe_event_in(
            &mut transaction,
            &take_back.event_id,
            &take_back.event_type,
        )
        .await?
        {
            transaction.rollback().await?;
            return Ok(StripeTakeBackOutcome::EventAlreadyHandled);
        }
        let outcome = Store::take_back_in(&mut transaction, take_back).await?;
        if outcome == StripeTakeBackOutcome::WaitsForCredit {
            let (kind, amount) = match take_back.kind {
                StripeTakeBackKind::Refund { refunded_in_total } => {
                    (PENDING_REFUND, refunded_in_total)
                }
                StripeTakeBackKind::Dispute { amount } => (PENDING_DISPUTE, amount),
            };
            Store::wait_for_credit_in(
                &mut transaction,
                &take_back.event_id,
                &take_back.event_type,
                &take_back.payment_intent_id,
                &take_back.object_id,
                kind,
                amount,
            )
            .await?;
        }
        transaction.commit().await?;
        Ok(outcome)
    }

    /// Gives back, once, what a dispute Stripe reports won took back: the
    /// event, the dispute's new state, the payment's figures and the credit
    /// with its ledger entry in one transaction, under the account's lock.
    /// One about a payment not credited yet waits for it.
    pub async fn give_back_won_dispute(
        self,
        won: &StripeDisputeWon,
    ) -> Result<StripeDisputeWonOutcome, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if !Store::record_stripe_event_in(&mut transaction, &won.event_id, &won.event_type).await? {
            transaction.rollback().await?;
            return Ok(StripeDisputeWonOutcome::EventAlreadyHandled);
        }
        let outcome = Store::give_back_won_dispute_in(&mut transaction, won).await?;
        if outcome == StripeDisputeWonOutcome::WaitsForCredit {
            Store::wait_for_credit_in(
                &mut transaction,
                &won.event_id,
                &won.event_type,
                &won.payment_intent_id,
                &won.dispute_id,
                PENDING_DISPUTE_WON,
                Micros(0),
            )
            .await?;
        }
        transaction.commit().await?;
        Ok(outcome)
    }
}
