//! The overview: balance (with the low-balance warning and alert), spend
//! per day and the ledger.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use vidgate_core::Micros;

use super::session::SignedIn;
use super::{Layout, Section, display_time, display_time_to_the_second, render, usd};
use serde::Deserialize;

use crate::state::AppState;
use crate::store::{DailySpend, LedgerEntry, now_millis};
use crate::stripe::plain_dollars;

const DAY_MILLIS: i64 = 24 * 60 * 60 * 1000;
/// Days the spend chart covers, today included.
const CHART_DAYS: i64 = 30;
/// Ledger entries listed, newest first.
const LEDGER_ROWS: u32 = 50;

/// The chart's drawing area, in SVG user units.
const CHART_WIDTH: i64 = 600;
const CHART_HEIGHT: i64 = 160;
const BAR_STEP: i64 = CHART_WIDTH / CHART_DAYS;
const BAR_WIDTH: i64 = BAR_STEP - 4;

/// One day's bar: geometry as attributes (the CSP allows no inline style),
/// and a label for assistive technology and hover.
struct Bar {
    x: i64,
    y: i64,
    height: i64,
    label: String,
}

struct LedgerRow {
    time: String,
    /// The time to the second, shown on hover.
    full_time: String,
    /// The kind in words ("Refund", "Charge").
    kind: &'static str,
    /// The change of the available balance, signed ("+$5.00", "-$0.10"), or
    /// for a capture, which moves held money to spent, the amount and what
    /// it did.
    change: String,
    /// `in`, `out` or `held`: how the row is coloured.
    direction: &'static str,
    /// The available balance after this entry.
    balance_after: String,
    generation_id: Option<String>,
    /// Stripe's ids, for money that came in or went back through Stripe.
    reference: Option<String>,
}

/// How a ledger entry changes the money the account can still spend
/// (`balance`): a hold takes it aside and a release gives it back, while a
/// capture only turns held money into spent money.
fn available_balance_change(kind: &str, amount: Micros) -> Micros {
    match kind {
        "credit" | "release" => amount,
        "hold" | "debit" => Micros::ZERO - amount,
        _ => Micros::ZERO,
    }
}

fn kind_in_words(kind: &str) -> &'static str {
    match kind {
        "credit" => "Credit",
        "debit" => "Debit",
        "hold" => "Hold",
        "capture" => "Charge",
        "release" => "Refund",
        _ => "Other",
    }
}

/// The rows of the ledger, newest first, each with the balance after it:
/// the newest's is the account's balance read with the entries, and each
/// older one's is the next newer's less that entry's change.
fn ledger_rows(entries: Vec<LedgerEntry>, balance_after_newest: Micros) -> Vec<LedgerRow> {
    let mut balance_after = balance_after_newest;
    entries
        .into_iter()
        .map(|entry| {
            let change = available_balance_change(&entry.kind, entry.amount);
            let (shown_change, direction) = if entry.kind == "capture" {
                (format!("{} held \u{2192} spent", usd(entry.amount)), "held")
            } else if change.is_negative() {
                (format!("-{}", usd(Micros::ZERO - change)), "out")
            } else {
                (format!("+{}", usd(change)), "in")
            };
            let row = LedgerRow {
                time: display_time(entry.created_at),
                full_time: display_time_to_the_second(entry.created_at),
                kind: kind_in_words(&entry.kind),
                change: shown_change,
                direction,
                balance_after: usd(balance_after),
                generation_id: entry.generation_id,
                reference: entry.reference,
            };
            balance_after = balance_after - change;
            row
        })
        .collect()
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    layout: Layout,
    balance: String,
    held: String,
    spent: String,
    spent_in_chart: String,
    chart_width: i64,
    chart_height: i64,
    bar_width: i64,
    bars: Vec<Bar>,
    first_day: String,
    last_day: String,
    ledger: Vec<LedgerRow>,
    /// The amounts "Add credit" offers, as `20.00`; empty without Stripe.
    credit_choices: Vec<String>,
    /// What the person is told on coming back from Stripe's page.
    checkout_notice: Option<&'static str>,
    /// The warning shown while the balance is below the account's
    /// low-balance threshold.
    low_balance_warning: Option<String>,
    /// The alert's threshold as `5.00` and its URL, empty without them.
    low_balance_threshold: String,
    low_balance_webhook_url: String,
}

#[derive(Deserialize)]
pub struct OverviewQuery {
    #[serde(default)]
    checkout: Option<String>,
}

fn day_label(day: i64) -> String {
    display_time(day * DAY_MILLIS)[..10].to_owned()
}

/// Bars for the `CHART_DAYS` days ending today, scaled to the largest day.
fn bars(spend: &[DailySpend], today: i64) -> Vec<Bar> {
    let first = today - CHART_DAYS + 1;
    let largest = spend.iter().map(|day| day.captured.0).max().unwrap_or(0);
    (first..=today)
        .map(|day| {
            let captured = spend
                .iter()
                .find(|spent| spent.day == day)
                .map_or(Micros::ZERO, |spent| spent.captured);
            // Integer arithmetic; a day with any spend gets at least 1 unit
            // so it is visible beside empty days.
            let height = if largest == 0 || captured.0 == 0 {
                0
            } else {
                ((captured.0 as i128 * CHART_HEIGHT as i128) / largest as i128).max(1) as i64
            };
            Bar {
                x: (day - first) * BAR_STEP + 2,
                y: CHART_HEIGHT - height,
                height,
                label: format!("{}: {}", day_label(day), usd(captured)),
            }
        })
        .collect()
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<OverviewQuery>,
) -> Response {
    let session = &signed_in.0;
    let today = now_millis() / DAY_MILLIS;
    let since = (today - CHART_DAYS + 1) * DAY_MILLIS;
    let store = state.store.as_ref();
    let loaded = async {
        let account = store.account(&session.account_id).await?;
        let spend = store.daily_spend(&session.account_id, since).await?;
        let ledger = store
            .recent_ledger_entries(&session.account_id, LEDGER_ROWS)
            .await?;
        Ok::<_, crate::store::StoreError>((account, spend, ledger))
    };
    let (account, spend, recent) = match loaded.await {
        Ok((Some(account), spend, ledger)) => (account, spend, ledger),
        Ok((None, _, _)) => return super::not_found(Some(session)),
        Err(error) => return super::internal_error(error),
    };
    let spent_in_chart = spend
        .iter()
        .fold(Micros::ZERO, |total, day| total + day.captured);
    render(
        StatusCode::OK,
        &OverviewPage {
            layout: Layout::signed_in(session, "Overview", Section::Overview),
            balance: usd(account.shown_balance()),
            held: usd(account.held),
            spent: usd(account.captured),
            spent_in_chart: usd(spent_in_chart),
            chart_width: CHART_WIDTH,
            chart_height: CHART_HEIGHT,
            bar_width: BAR_WIDTH,
            bars: bars(&spend, today),
            first_day: day_label(today - CHART_DAYS + 1),
            last_day: day_label(today),
            ledger: ledger_rows(
                recent.entries,
                recent
                    .balance_after_newest
                    .unwrap_or(account.shown_balance()),
            ),
            credit_choices: state
                .stripe
                .as_deref()
                .map(|checkout| {
                    checkout
                        .amounts
                        .choices
                        .iter()
                        .map(|choice| plain_dollars(*choice))
                        .collect()
                })
                .unwrap_or_default(),
            checkout_notice: match query.checkout.as_deref() {
                Some("success") => Some(
                    "Thank you: the credit shows in the balance once Stripe confirms the payment.",
                ),
                Some("canceled") => Some("The payment was canceled; nothing was charged."),
                _ => None,
            },
            low_balance_warning: account
                .low_balance_alert
                .as_ref()
                .filter(|_| account.is_below_low_balance_threshold())
                .map(|alert| {
                    format!(
                        "The balance, {}, is below the {} you asked to be warned at. Add credit \
                         so that new generations are not refused.",
                        usd(account.shown_balance()),
                        usd(alert.threshold)
                    )
                }),
            low_balance_threshold: account
                .low_balance_alert
                .as_ref()
                .map(|alert| alert.threshold.usd_text())
                .unwrap_or_default(),
            low_balance_webhook_url: account
                .low_balance_alert
                .as_ref()
                .and_then(|alert| alert.webhook_url.clone())
                .unwrap_or_default(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_cover_thirty_days_scaled_to_the_largest() {
        let today = 20_000;
        let spend = vec![
            DailySpend {
                day: today - 29,
                captured: Micros(1_000_000),
            },
            DailySpend {
                day: today,
                captured: Micros(4_000_000),
            },
        ];
        let bars = bars(&spend, today);
        assert_eq!(bars.len(), 30);
        assert_eq!(bars[0].height, CHART_HEIGHT / 4);
        assert_eq!(bars[29].height, CHART_HEIGHT);
        assert_eq!(bars[29].y, 0);
        assert_eq!(bars[15].height, 0);
        assert!(bars[29].label.ends_with("$4.00"), "{}", bars[29].label);
    }

    fn entry(kind: &str, usd_cents: i64) -> LedgerEntry {
        LedgerEntry {
            id: 0,
            generation_id: None,
            kind: kind.to_owned(),
            amount: Micros::from_usd_cents(usd_cents),
            created_at: 0,
            reference: None,
        }
    }

    #[test]
    fn ledger_rows_are_signed_and_carry_the_balance_after_each() {
        // Oldest first: $25 credit, a $1 hold released, a $2 hold captured,
        // $3 debited. Balance now: 25 - 2 - 3 = $20.
        let newest_first = vec![
            entry("debit", 300),
            entry("capture", 200),
            entry("hold", 200),
            entry("release", 100),
            entry("hold", 100),
            entry("credit", 2500),
        ];
        let rows = ledger_rows(newest_first, Micros::from_usd_cents(2000));
        let shown: Vec<(&str, &str, &str, &str)> = rows
            .iter()
            .map(|row| {
                (
                    row.kind,
                    row.change.as_str(),
                    row.direction,
                    row.balance_after.as_str(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("Debit", "-$3.00", "out", "$20.00"),
                ("Charge", "$2.00 held \u{2192} spent", "held", "$23.00"),
                ("Hold", "-$2.00", "out", "$23.00"),
                ("Refund", "+$1.00", "in", "$25.00"),
                ("Hold", "-$1.00", "out", "$24.00"),
                ("Credit", "+$25.00", "in", "$25.00"),
            ]
        );
    }
}
