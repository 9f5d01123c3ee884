//! An account's low-balance alert (migration 0023): the threshold it sets,
//! the URL its event goes to, and the event `account.balance_low`, written
//! to the webhook outbox once per downward crossing of the threshold, in the
//! transaction of the ledger change (or the new threshold) that crosses it,
//! unless one is still pending (migration 0028). PostgreSQL's submit
//! function makes the same decision for its hold
//! (`migrations/postgres/functions/vidgate_submit_generation.sql`).

use serde_json::json;
use vidgate_core::Micros;

use super::accounts::Account;
use super::accounts::Accounts;
use super::database::WriteTransaction;
use super::{Store, StoreError, now_millis};

/// The event type of a delivery about an account whose balance fell below
/// its threshold.
pub const BALANCE_LOW_EVENT: &str = "account.balance_low";

/// What a movement of money or a new threshold leaves: the balance the
/// customer sees (`balance - debt`), the threshold, and whether the alert is
/// raised.
pub(super) type LowBalanceState = (i64, Option<i64>, bool);

/// An account's low-balance alert as the owner or the operator sets it:
/// `None` as the threshold removes the alert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowBalanceSetting {
    pub threshold: Option<Micros>,
    pub webhook_url: Option<String>,
}

impl Store {
    /// Raises or re-arms the account's alert after its balance or its
    /// threshold changed to `state`, in the caller's transaction. A balance
    /// below the threshold with the alert not raised is a downward crossing:
    /// the alert is raised and the event's delivery written (when the
    /// account gave a URL), so the event exists exactly when the change that
    /// caused it does, and is written once until a balance at or above the
    /// threshold re-arms the alert; and never while an earlier one is
    /// still pending.
    pub(super) async fn settle_low_balance_alert_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
        (shown_balance, threshold, raised): LowBalanceState,
    ) -> Result<(), StoreError> {
        let below = threshold.is_some_and(|threshold| shown_balance < threshold);
        if below == raised {
            return Ok(());
        }
        execute_in_transaction!(
            transaction,
            sqlx::query("UPDATE accounts SET low_balance_alerted = $1 WHERE id = $2")
                .bind(below)
                .bind(account_id)
        )?;
        if !below {
            return Ok(());
        }
        // The event's data is fixed now, so every attempt sends the
        // balance that crossed the threshold, whatever happened since. At
        // most one alert waits per account (migration 0028): one already
        // pending tells the receiver the account is low, and a threshold
        // set and removed in a loop must not fill the outbox. The account's
        // row, updated above, is locked until the commit, so no other
        // crossing can insert beside this one.
        let payload = json!({
            "account_id": account_id,
            "balance_micros": shown_balance,
            "threshold_micros": threshold,
        });
        let now = now_millis();
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO webhook_deliveries (id, generation_id, account_id, event_type, url, \
                 status, next_attempt_at, created_at, payload) \
                 SELECT $1, NULL, id, $2, low_balance_webhook_url, 'pending', $3, $3, $4 \
                 FROM accounts WHERE id = $5 AND low_balance_webhook_url IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries \
                   WHERE account_id = $5 AND status = 'pending' AND event_type = $2)",
            )
            .bind(crate::ids::new_webhook_message_id())
            .bind(BALANCE_LOW_EVENT)
            .bind(now)
            .bind(payload.to_string())
            .bind(account_id)
        )?;
        Ok(())
    }

    /// Sets (or, with no threshold, removes) the account's low-balance
    /// alert in the caller's transaction, and settles it against the
    /// balance now: a threshold above the balance raises the alert at once.
    /// `None` when there is no such account (or it is deleted).
    pub(super) async fn set_low_balance_alert_in(
        transaction: &mut WriteTransaction,
        account_id: &str,
        setting: &LowBalanceSetting,
    ) -> Result<Option<Account>, StoreError> {
        let state: Option<LowBalanceState> = fetch_in_transaction!(
            &mut *transaction,
            fetch_optional,
            sqlx::query_as(
                "UPDATE accounts SET low_balance_threshold_micros = $1, \
                 low_balance_webhook_url = $2 WHERE id = $3 AND deleted_at IS NULL \
                 RETURNING balance_micros - debt_micros, low_balance_threshold_micros, \
                 low_balance_alerted",
            )
            .bind(setting.threshold.map(|threshold| threshold.0))
            .bind(setting.threshold.and(setting.webhook_url.as_deref()))
            .bind(account_id)
        )?;
        let Some(state) = state else {
            return Ok(None);
        };
        Self::settle_low_balance_alert_in(transaction, account_id, state).await?;
        Self::account_in(transaction, account_id).await
    }
}

impl Accounts<'_> {
    /// Sets the account's low-balance alert, as the dashboard's owner or
    /// admin does; `None` when there is no such account.
    pub async fn set_low_balance_alert(
        self,
        account_id: &str,
        setting: &LowBalanceSetting,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let account =
            Store::set_low_balance_alert_in(&mut transaction, account_id, setting).await?;
        transaction.commit().await?;
        Ok(account)
    }
}
