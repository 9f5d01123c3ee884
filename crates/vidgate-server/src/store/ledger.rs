//! The ledger and the account totals it moves: holds, captures, releases,
//! credits and debits, and the reads of the ledger.

use vidgate_core::Micros;

use super::accounts::Account;
use super::database::WriteTransaction;
use super::low_balance::LowBalanceState;
use super::{Store, StoreError, now_millis};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    pub id: i64,
    pub generation_id: Option<String>,
    pub kind: String,
    pub amount: Micros,
    pub created_at: i64,
    /// The outside ids of the movement (Stripe's, for money that came in
    /// or went back through Stripe).
    pub reference: Option<String>,
}

/// The latest ledger entries of an account, newest first, and its
/// available balance as it stood after the newest of them (none without
/// entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentLedger {
    pub entries: Vec<LedgerEntry>,
    pub balance_after_newest: Option<Micros>,
}

/// The money captured on one UTC day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailySpend {
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub captured: Micros,
}

/// A model's business on one UTC day: what customers paid for its
/// succeeded generations (captured), and what its providers cost the
/// operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDayUsage {
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub model: String,
    pub generations: i64,
    pub revenue: Micros,
    pub provider_cost: Micros,
    /// Generations without a recorded cost (run on the operator's own
    /// engine or servers, or at a provider without a price line).
    pub uncosted: i64,
}

/// A model's revenue, cost and margin at one provider over a period: its
/// succeeded generations there, and the generations that earned nothing
/// but cost the operator something there (as `ModelDayUsage` counts them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderModelUsage {
    pub model: String,
    /// The provider that ran them; `None` for the operator's own engine
    /// or servers.
    pub provider: Option<String>,
    pub generations: i64,
    pub revenue: Micros,
    pub provider_cost: Micros,
    pub uncosted: i64,
}

/// The six ways money moves. Each is one ledger entry plus the matching
/// change of the account's running totals, always in the caller's transaction.
///
/// Money that reaches the balance (a credit, a released hold) pays the
/// account's debt first (migration 0020): the part that pays it leaves
/// `credited` as it leaves the debt, so `credited = balance + held +
/// captured` holds, and the balance the customer sees, `balance - debt`,
/// grows by the whole amount.
#[derive(Clone, Copy)]
pub(super) enum Movement {
    Credit,
    /// Money an operator takes back: `credited` is the net credit, so the
    /// invariant `credited = balance + held + captured` still holds.
    Debit,
    /// Money a payment system took back (a refund, a dispute): what the
    /// balance holds of it is debited, the rest becomes debt. Its ledger
    /// kind is `debit`, since the customer sees the same thing.
    TakeBack,
    Hold,
    Capture,
    Release,
}

impl Movement {
    /// The ledger kind and the update of the account's totals, which
    /// answers the account's `LowBalanceState` after it.
    pub(super) fn statements(self) -> (&'static str, &'static str) {
        match self {
            Movement::Credit => (
                "credit",
                "UPDATE accounts SET \
                 balance_micros = balance_micros + $1 \
                 - CASE WHEN debt_micros < $1 THEN debt_micros ELSE $1 END, \
                 credited_micros = credited_micros + $1 \
                 - CASE WHEN debt_micros < $1 THEN debt_micros ELSE $1 END, \
                 debt_micros = debt_micros \
                 - CASE WHEN debt_micros < $1 THEN debt_micros ELSE $1 END \
                 WHERE id = $2 RETURNING balance_micros - debt_micros, \
                 low_balance_threshold_micros, low_balance_alerted",
            ),
            Movement::Debit => (
                "debit",
                "UPDATE accounts SET balance_micros = balance_micros - $1, \
                 credited_micros = credited_micros - $1 WHERE id = $2 RETURNING balance_micros - debt_micros, \
                 low_balance_threshold_micros, low_balance_alerted",
            ),
            Movement::TakeBack => (
                "debit",
                "UPDATE accounts SET \
                 balance_micros = balance_micros \
                 - CASE WHEN balance_micros < $1 THEN balance_micros ELSE $1 END, \
                 credited_micros = credited_micros \
                 - CASE WHEN balance_micros < $1 THEN balance_micros ELSE $1 END, \
                 debt_micros = debt_micros + $1 \
                 - CASE WHEN balance_micros < $1 THEN balance_micros ELSE $1 END \
                 WHERE id = $2 RETURNING balance_micros - debt_micros, \
                 low_balance_threshold_micros, low_balance_alerted",
            ),
            Movement::Hold => (
                "hold",
                "UPDATE accounts SET balance_micros = balance_micros - $1, \
                 held_micros = held_micros + $1 WHERE id = $2 RETURNING balance_micros - debt_micros, \
                 low_balance_threshold_micros, low_balance_alerted",
            ),
            Movement::Capture => (
                "capture",
                "UPDATE accounts SET held_micros = held_micros - $1, \
                 captured_micros = captured_micros + $1 WHERE id = $2 RETURNING balance_micros - debt_micros, \
                 low_balance_threshold_micros, low_balance_alerted",
            ),
            Movement::Release => (
                "release",
                "UPDATE accounts SET held_micros = held_micros - $1, \
                 balance_micros = balance_micros + $1 \
                 - CASE WHEN debt_micros < $1 THEN debt_micros ELSE $1 END, \
                 credited_micros = credited_micros \
                 - CASE WHEN debt_micros < $1 THEN debt_micros ELSE $1 END, \
                 debt_micros = debt_micros \
                 - CASE WHEN debt_micros < $1 THEN debt_micros ELSE $1 END \
                 WHERE id = $2 RETURNING balance_micros - debt_micros, \
                 low_balance_threshold_micros, low_balance_alerted",
            ),
        }
    }
}

/// A ledger row: id, generation, kind, amount in micro-dollars, time,
/// outside reference.
type LedgerRow = (i64, Option<String>, String, i64, i64, Option<String>);

/// A ledger row followed by the account's balance less its debt.
type RecentLedgerRow = (i64, Option<String>, String, i64, i64, Option<String>, i64);

fn ledger_entry_from_row(
    (id, generation_id, kind, amount, created_at, reference): LedgerRow,
) -> LedgerEntry {
    LedgerEntry {
        id,
        generation_id,
        kind,
        amount: Micros(amount),
        created_at,
        reference,
    }
}

impl Store {
    pub(super) async fn move_money(
        transaction: &mut WriteTransaction,
        account_id: &str,
        generation_id: Option<&str>,
        movement: Movement,
        amount: Micros,
    ) -> Result<(), StoreError> {
        Self::move_money_with_reference(
            transaction,
            account_id,
            generation_id,
            None,
            movement,
            amount,
        )
        .await
    }

    /// As `move_money`, with the outside ids the ledger entry carries.
    pub(super) async fn move_money_with_reference(
        transaction: &mut WriteTransaction,
        account_id: &str,
        generation_id: Option<&str>,
        reference: Option<&str>,
        movement: Movement,
        amount: Micros,
    ) -> Result<(), StoreError> {
        if amount == Micros::ZERO {
            return Ok(());
        }
        let (kind, update) = movement.statements();
        let low_balance: Option<LowBalanceState> = fetch_in_transaction!(
            transaction,
            fetch_optional,
            sqlx::query_as(update).bind(amount.0).bind(account_id)
        )?;
        if let Some(low_balance) = low_balance {
            Self::settle_low_balance_alert_in(transaction, account_id, low_balance).await?;
        }
        execute_in_transaction!(
            transaction,
            sqlx::query(
                "INSERT INTO ledger_entries \
                 (account_id, generation_id, kind, amount_micros, created_at, reference) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(account_id)
            .bind(generation_id)
            .bind(kind)
            .bind(amount.0)
            .bind(now_millis())
            .bind(reference)
        )?;
        Ok(())
    }
}

impl Store {
    /// Adds credit; `None` when the account does not exist.
    pub async fn credit_account(
        &self,
        account_id: &str,
        amount: Micros,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.begin_write().await?;
        if Self::account_in(&mut transaction, account_id)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        Self::move_money(&mut transaction, account_id, None, Movement::Credit, amount).await?;
        let account = Self::account_in(&mut transaction, account_id).await?;
        transaction.commit().await?;
        Ok(account)
    }

    pub async fn ledger_entries(&self, account_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let rows: Vec<LedgerRow> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(
                "SELECT id, generation_id, kind, amount_micros, created_at, reference \
                 FROM ledger_entries WHERE account_id = $1 ORDER BY id",
            )
            .bind(account_id)
        )?;
        Ok(rows.into_iter().map(ledger_entry_from_row).collect())
    }

    /// The account's latest ledger entries, newest first, with the
    /// account's available balance read by the same statement (so in the
    /// same snapshot): the balance after the newest entry listed, from which
    /// the balance after each older one follows. The balance is the one the
    /// customer sees, less any debt, so every entry moves it by its amount.
    pub async fn recent_ledger_entries(
        &self,
        account_id: &str,
        limit: u32,
    ) -> Result<RecentLedger, StoreError> {
        let rows: Vec<RecentLedgerRow> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(
                "SELECT l.id, l.generation_id, l.kind, l.amount_micros, l.created_at, \
                 l.reference, a.balance_micros - a.debt_micros \
                 FROM ledger_entries l JOIN accounts a ON a.id = l.account_id \
                 WHERE l.account_id = $1 ORDER BY l.id DESC LIMIT $2",
            )
            .bind(account_id)
            .bind(limit as i64)
        )?;
        let balance_after_newest = rows.first().map(|row| Micros(row.6));
        let entries = rows
            .into_iter()
            .map(
                |(id, generation_id, kind, amount, created_at, reference, _)| {
                    ledger_entry_from_row((id, generation_id, kind, amount, created_at, reference))
                },
            )
            .collect();
        Ok(RecentLedger {
            entries,
            balance_after_newest,
        })
    }

    /// Money captured per UTC day since `since` (Unix ms), days without any
    /// left out, oldest first.
    pub async fn daily_spend(
        &self,
        account_id: &str,
        since: i64,
    ) -> Result<Vec<DailySpend>, StoreError> {
        // Integer division of non-negative milliseconds is the UTC
        // day in both databases.
        let rows: Vec<(i64, i64)> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(
                "SELECT created_at / 86400000 AS day, CAST(SUM(amount_micros) AS BIGINT) \
                 FROM ledger_entries \
                 WHERE account_id = $1 AND kind = 'capture' AND created_at >= $2 \
                 GROUP BY created_at / 86400000 ORDER BY day",
            )
            .bind(account_id)
            .bind(since)
        )?;
        Ok(rows
            .into_iter()
            .map(|(day, captured)| DailySpend {
                day,
                captured: Micros(captured),
            })
            .collect())
    }

    /// Each model's succeeded generations per UTC day completed at or
    /// after `since` (Unix ms): revenue and provider cost.
    pub async fn model_usage(&self, since: i64) -> Result<Vec<ModelDayUsage>, StoreError> {
        let rows: Vec<(i64, String, i64, i64, i64, i64)> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(
                // A generation canceled at its provider after its job
                // slipped into running earns nothing but may cost the
                // operator the seconds it ran, and one failed because its
                // provider could no longer tell whether its submit made a
                // job may cost the operator that job: their costs count,
                // and they do not count as generations.
                "SELECT completed_at / 86400000 AS day, model, \
                 CAST(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(SUM(CASE WHEN status = 'succeeded' THEN price_micros ELSE 0 END) AS BIGINT), \
                 CAST(COALESCE(SUM(provider_cost_micros), 0) AS BIGINT), \
                 CAST(SUM(CASE WHEN status = 'succeeded' AND provider_cost_micros IS NULL \
                 THEN 1 ELSE 0 END) AS BIGINT) \
                 FROM generations WHERE (status = 'succeeded' \
                 OR (status IN ('canceled', 'failed') AND provider_cost_micros > 0)) \
                 AND completed_at >= $1 \
                 GROUP BY completed_at / 86400000, model ORDER BY day, model",
            )
            .bind(since)
        )?;
        Ok(rows
            .into_iter()
            .map(
                |(day, model, generations, revenue, provider_cost, uncosted)| ModelDayUsage {
                    day,
                    model,
                    generations,
                    revenue: Micros(revenue),
                    provider_cost: Micros(provider_cost),
                    uncosted,
                },
            )
            .collect())
    }

    /// Each model's usage per provider, over the generations completed at
    /// or after `since` (Unix ms), counted as `model_usage` counts them.
    pub async fn provider_usage(&self, since: i64) -> Result<Vec<ProviderModelUsage>, StoreError> {
        let rows: Vec<(String, Option<String>, i64, i64, i64, i64)> = fetch_on_reader!(
            self,
            fetch_all,
            sqlx::query_as(
                "SELECT model, provider, \
                 CAST(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(SUM(CASE WHEN status = 'succeeded' THEN price_micros ELSE 0 END) AS BIGINT), \
                 CAST(COALESCE(SUM(provider_cost_micros), 0) AS BIGINT), \
                 CAST(SUM(CASE WHEN status = 'succeeded' AND provider_cost_micros IS NULL \
                 THEN 1 ELSE 0 END) AS BIGINT) \
                 FROM generations WHERE (status = 'succeeded' \
                 OR (status IN ('canceled', 'failed') AND provider_cost_micros > 0)) \
                 AND completed_at >= $1 \
                 GROUP BY model, provider ORDER BY model, provider",
            )
            .bind(since)
        )?;
        Ok(rows
            .into_iter()
            .map(
                |(model, provider, generations, revenue, provider_cost, uncosted)| {
                    ProviderModelUsage {
                        model,
                        provider,
                        generations,
                        revenue: Micros(revenue),
                        provider_cost: Micros(provider_cost),
                        uncosted,
                    }
                },
            )
            .collect())
    }
}
