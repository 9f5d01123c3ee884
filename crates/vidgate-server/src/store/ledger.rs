//! The ledger and the account totals it moves: holds, captures, releases,
//! credits and debits, and the reads of the ledger.

use sqlx::AssertSqlSafe;
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

/// The kinds of ledger entries, as the `kind` column names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerKind {
    Credit,
    Debit,
    Hold,
    Capture,
    Release,
}

impl LedgerKind {
    pub const ALL: [LedgerKind; 5] = [
        LedgerKind::Credit,
        LedgerKind::Debit,
        LedgerKind::Hold,
        LedgerKind::Capture,
        LedgerKind::Release,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Credit => "credit",
            LedgerKind::Debit => "debit",
            LedgerKind::Hold => "hold",
            LedgerKind::Capture => "capture",
            LedgerKind::Release => "release",
        }
    }

    pub fn parse(text: &str) -> Option<LedgerKind> {
        LedgerKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// Which page of an account's ledger to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerPageRequest {
    /// Only entries of this kind.
    pub kind: Option<LedgerKind>,
    /// Only entries older than this entry id (the previous page's last).
    pub before: Option<i64>,
    pub limit: u32,
}

/// The generation a ledger entry belongs to, as far as the ledger shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerGeneration {
    pub model: String,
    pub input: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LedgerPageEntry {
    pub entry: LedgerEntry,
    /// None for money not moved by a generation, or when the generation's
    /// row is gone.
    pub generation: Option<LedgerGeneration>,
}

/// A page of an account's ledger, newest first.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerPage {
    pub entries: Vec<LedgerPageEntry>,
    /// The available balance, less any debt, after the newest entry listed:
    /// only on an unfiltered page with entries.
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
    /// The part of `provider_cost` the providers may have billed but could
    /// not confirm, and the generations it is of (see `ProviderRun`).
    pub possible_cost: Micros,
    pub possible_cost_generations: i64,
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
    pub possible_cost: Micros,
    pub possible_cost_generations: i64,
}

/// A row of `model_usage`: the day, the model, the generations, the
/// revenue, the provider cost, the uncosted generations, the possible cost
/// and the generations it is of.
type ModelDayRow = (i64, String, i64, i64, i64, i64, i64, i64);
/// A row of `provider_usage`: the model and provider, then as
/// `ModelDayRow`.
type ProviderModelRow = (String, Option<String>, i64, i64, i64, i64, i64, i64);

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

/// A ledger row followed by its generation's model and input.
type LedgerPageRow = (
    i64,
    Option<String>,
    String,
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
);

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
    /// The available balance (less any debt) right after the entry
    /// `entry_id`: the balance now less the change of every later entry,
    /// in one statement, so one snapshot.
    async fn balance_after_entry(
        &self,
        account_id: &str,
        entry_id: i64,
    ) -> Result<Micros, StoreError> {
        let (balance,): (i64,) = fetch_on_reader!(
            self,
            fetch_one,
            sqlx::query_as(
                "SELECT a.balance_micros - a.debt_micros - CAST(COALESCE((\
                 SELECT SUM(CASE l.kind WHEN 'credit' THEN l.amount_micros \
                 WHEN 'release' THEN l.amount_micros WHEN 'hold' THEN -l.amount_micros \
                 WHEN 'debit' THEN -l.amount_micros ELSE 0 END) \
                 FROM ledger_entries l WHERE l.account_id = a.id AND l.id > $2), 0) AS BIGINT) \
                 FROM accounts a WHERE a.id = $1",
            )
            .bind(account_id)
            .bind(entry_id)
        )?;
        Ok(Micros(balance))
    }
}

/// The operations of `ledger` (see `Store::ledger`).
#[derive(Clone, Copy)]
pub struct Ledger<'store> {
    pub(super) store: &'store Store,
}

impl Ledger<'_> {
    /// Adds credit; `None` when the account does not exist.
    pub async fn credit(
        self,
        account_id: &str,
        amount: Micros,
    ) -> Result<Option<Account>, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        if Store::account_in(&mut transaction, account_id)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        Store::move_money(&mut transaction, account_id, None, Movement::Credit, amount).await?;
        let account = Store::account_in(&mut transaction, account_id).await?;
        transaction.commit().await?;
        Ok(account)
    }

    pub async fn entries(self, account_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        let rows: Vec<LedgerRow> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT id, generation_id, kind, amount_micros, created_at, reference \
                 FROM ledger_entries WHERE account_id = $1 ORDER BY id",
            )
            .bind(account_id)
        )?;
        Ok(rows.into_iter().map(ledger_entry_from_row).collect())
    }

    /// One page of the account's ledger, newest first: entries older than
    /// `before` (an entry id), of one kind when asked, each with the model
    /// and input of the generation it belongs to.
    ///
    /// An unfiltered page is a run of consecutive entries, so it also
    /// carries the available balance after its newest entry, read in one
    /// statement as the balance now less every later entry's change; the
    /// balance after each older entry of the page follows from it. A
    /// filtered page skips entries between its rows and carries none.
    pub async fn page(
        self,
        account_id: &str,
        request: &LedgerPageRequest,
    ) -> Result<LedgerPage, StoreError> {
        let mut statement = String::from(
            "SELECT l.id, l.generation_id, l.kind, l.amount_micros, l.created_at, l.reference, \
             g.model, g.input FROM ledger_entries l \
             LEFT JOIN generations g ON g.id = l.generation_id WHERE l.account_id = $1",
        );
        let mut parameter = 1;
        if request.kind.is_some() {
            parameter += 1;
            statement.push_str(&format!(" AND l.kind = ${parameter}"));
        }
        if request.before.is_some() {
            parameter += 1;
            statement.push_str(&format!(" AND l.id < ${parameter}"));
        }
        statement.push_str(&format!(" ORDER BY l.id DESC LIMIT ${}", parameter + 1));
        let rows: Vec<LedgerPageRow> = fetch_on_reader!(self.store, fetch_all, {
            let mut query = sqlx::query_as(AssertSqlSafe(statement.clone())).bind(account_id);
            if let Some(kind) = request.kind {
                query = query.bind(kind.as_str());
            }
            if let Some(before) = request.before {
                query = query.bind(before);
            }
            query.bind(i64::from(request.limit))
        })?;
        let balance_after_newest = match (request.kind, rows.first()) {
            (None, Some(newest)) => {
                Some(self.store.balance_after_entry(account_id, newest.0).await?)
            }
            _ => None,
        };
        let entries = rows
            .into_iter()
            .map(
                |(id, generation_id, kind, amount, created_at, reference, model, input)| {
                    let generation = match (model, input) {
                        (Some(model), Some(input)) => Some(LedgerGeneration {
                            model,
                            input: serde_json::from_str(&input)?,
                        }),
                        _ => None,
                    };
                    Ok(LedgerPageEntry {
                        entry: ledger_entry_from_row((
                            id,
                            generation_id,
                            kind,
                            amount,
                            created_at,
                            reference,
                        )),
                        generation,
                    })
                },
            )
            .collect::<Result<Vec<_>, serde_json::Error>>()
            .map_err(|error| StoreError::Corrupt(format!("a generation's input: {error}")))?;
        Ok(LedgerPage {
            entries,
            balance_after_newest,
        })
    }

    /// Money captured per UTC day since `since` (Unix ms), days without any
    /// left out, oldest first.
    pub async fn daily_spend(
        self,
        account_id: &str,
        since: i64,
    ) -> Result<Vec<DailySpend>, StoreError> {
        // Integer division of non-negative milliseconds is the UTC
        // day in both databases.
        let rows: Vec<(i64, i64)> = fetch_on_reader!(
            self.store,
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
    pub async fn model_usage(self, since: i64) -> Result<Vec<ModelDayUsage>, StoreError> {
        let rows: Vec<ModelDayRow> = fetch_on_reader!(
            self.store,
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
                 THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(COALESCE(SUM(CASE WHEN provider_cost_possible \
                 THEN provider_cost_micros ELSE 0 END), 0) AS BIGINT), \
                 CAST(SUM(CASE WHEN provider_cost_possible THEN 1 ELSE 0 END) AS BIGINT) \
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
                |(
                    day,
                    model,
                    generations,
                    revenue,
                    provider_cost,
                    uncosted,
                    possible_cost,
                    possible_cost_generations,
                )| ModelDayUsage {
                    day,
                    model,
                    generations,
                    revenue: Micros(revenue),
                    provider_cost: Micros(provider_cost),
                    uncosted,
                    possible_cost: Micros(possible_cost),
                    possible_cost_generations,
                },
            )
            .collect())
    }

    /// Each model's usage per provider, over the generations completed at
    /// or after `since` (Unix ms), counted as `model_usage` counts them.
    pub async fn provider_usage(self, since: i64) -> Result<Vec<ProviderModelUsage>, StoreError> {
        let rows: Vec<ProviderModelRow> = fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT model, provider, \
                 CAST(SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(SUM(CASE WHEN status = 'succeeded' THEN price_micros ELSE 0 END) AS BIGINT), \
                 CAST(COALESCE(SUM(provider_cost_micros), 0) AS BIGINT), \
                 CAST(SUM(CASE WHEN status = 'succeeded' AND provider_cost_micros IS NULL \
                 THEN 1 ELSE 0 END) AS BIGINT), \
                 CAST(COALESCE(SUM(CASE WHEN provider_cost_possible \
                 THEN provider_cost_micros ELSE 0 END), 0) AS BIGINT), \
                 CAST(SUM(CASE WHEN provider_cost_possible THEN 1 ELSE 0 END) AS BIGINT) \
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
                |(
                    model,
                    provider,
                    generations,
                    revenue,
                    provider_cost,
                    uncosted,
                    possible_cost,
                    possible_cost_generations,
                )| ProviderModelUsage {
                    model,
                    provider,
                    generations,
                    revenue: Micros(revenue),
                    provider_cost: Micros(provider_cost),
                    uncosted,
                    possible_cost: Micros(possible_cost),
                    possible_cost_generations,
                },
            )
            .collect())
    }
}
