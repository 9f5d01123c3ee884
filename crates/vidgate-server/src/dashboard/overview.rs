//! The overview: balance (with the low-balance warning and alert), spend
//! per day and the ledger.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use vidgate_core::Micros;

use super::session::SignedIn;
use super::{Layout, Section, display_time, render, usd};
use serde::Deserialize;

use super::ledger::{LedgerRow, ledger_rows};
use crate::application::state::AppState;
use crate::store::{DailySpend, LedgerPageRequest, now_millis};
use crate::stripe::plain_dollars;

const DAY_MILLIS: i64 = 24 * 60 * 60 * 1000;
/// The spend chart's ranges, in days, today included.
const CHART_RANGES: [i64; 3] = [7, 30, 90];
const DEFAULT_CHART_DAYS: i64 = 30;
/// Ledger entries the overview lists, newest first; the ledger's own page
/// has the rest.
const LEDGER_ROWS: u32 = 10;

/// The chart's drawing area, in SVG user units: each day is `DAY_WIDTH`
/// wide, and the drawing stretches to the card's width (the axes' labels
/// are HTML beside it, so no text is stretched).
const CHART_HEIGHT: i64 = 160;
const DAY_WIDTH: i64 = 10;
const BAR_WIDTH: i64 = 8;

/// One day's bar: geometry as attributes (the CSP allows no inline style),
/// and a label for hover.
struct Bar {
    x: i64,
    y: i64,
    height: i64,
    label: String,
}

/// A label under one day of the chart: every day has a cell, so the labels
/// line up with the bars, and some cells are empty.
struct DayTick {
    label: String,
}

/// A day with spend, for the table beside the chart.
struct SpendDay {
    day: String,
    amount: String,
}

struct RangeLink {
    days: i64,
    current: bool,
}

/// The spend chart: bars scaled to a round top amount, labelled axes, and
/// the same figures as a table.
struct SpendChart {
    days: i64,
    ranges: Vec<RangeLink>,
    total: String,
    first_day: String,
    last_day: String,
    /// The largest day, in words; none when nothing was spent.
    highest: Option<String>,
    view_width: i64,
    height: i64,
    bar_width: i64,
    bars: Vec<Bar>,
    /// The y axis: the round top amount and its half.
    scale_top: String,
    scale_middle: String,
    middle_y: i64,
    ticks: Vec<DayTick>,
    spend_days: Vec<SpendDay>,
}

/// The smallest round amount (1, 2 or 5 times a power of ten micro-dollars,
/// at least 10) at or above `largest`: the chart's top, so that its axis
/// reads in round figures.
fn round_top(largest: Micros) -> Micros {
    let mut power: i64 = 10;
    loop {
        for multiple in [1, 2, 5] {
            let candidate = power.saturating_mul(multiple);
            if candidate >= largest.0 || candidate == i64::MAX {
                return Micros(candidate);
            }
        }
        power = power.saturating_mul(10);
    }
}

/// `Nov 28`, or the day of the month alone when the month is the one the
/// previous label named.
fn tick_label(day: i64, previous_month: &mut Option<time::Month>) -> String {
    let date = time::OffsetDateTime::from_unix_timestamp(day * 86_400)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let month = date.month();
    let label = if *previous_month == Some(month) {
        date.day().to_string()
    } else {
        format!("{} {}", &month.to_string()[..3], date.day())
    };
    *previous_month = Some(month);
    label
}

/// The chart of the `days` days ending `today` (days since the epoch).
fn spend_chart(spend: &[DailySpend], today: i64, days: i64) -> SpendChart {
    let first = today - days + 1;
    let spent_on = |day: i64| {
        spend
            .iter()
            .find(|spent| spent.day == day)
            .map_or(Micros::ZERO, |spent| spent.captured)
    };
    let in_range: Vec<&DailySpend> = spend
        .iter()
        .filter(|spent| spent.day >= first && spent.day <= today && spent.captured.0 > 0)
        .collect();
    let total = in_range
        .iter()
        .fold(Micros::ZERO, |total, day| total + day.captured);
    let largest = in_range.iter().max_by_key(|day| day.captured.0);
    let top = round_top(largest.map_or(Micros::ZERO, |day| day.captured));
    let bars = (first..=today)
        .map(|day| {
            let captured = spent_on(day);
            // Integer arithmetic; a day with any spend gets at least 1 unit
            // so it is visible beside empty days.
            let height = if captured.0 <= 0 {
                0
            } else {
                ((captured.0 as i128 * CHART_HEIGHT as i128) / top.0 as i128).max(1) as i64
            };
            Bar {
                x: (day - first) * DAY_WIDTH + (DAY_WIDTH - BAR_WIDTH) / 2,
                y: CHART_HEIGHT - height,
                height,
                label: format!("{}: {}", day_label(day), usd(captured)),
            }
        })
        .collect();
    // Label every day of a week, and about six days of longer ranges,
    // counted back from today so that today is always labelled.
    let step = match days {
        ..=7 => 1,
        8..=30 => 7,
        _ => 15,
    };
    let mut previous_month = None;
    let ticks = (first..=today)
        .map(|day| DayTick {
            label: if (today - day) % step == 0 {
                tick_label(day, &mut previous_month)
            } else {
                String::new()
            },
        })
        .collect();
    SpendChart {
        days,
        ranges: CHART_RANGES
            .iter()
            .map(|range| RangeLink {
                days: *range,
                current: *range == days,
            })
            .collect(),
        total: usd(total),
        first_day: day_label(first),
        last_day: day_label(today),
        highest: largest.map(|day| format!("{} on {}", usd(day.captured), day_label(day.day))),
        view_width: days * DAY_WIDTH,
        height: CHART_HEIGHT,
        bar_width: BAR_WIDTH,
        bars,
        scale_top: usd(top),
        scale_middle: usd(Micros(top.0 / 2)),
        middle_y: CHART_HEIGHT / 2,
        ticks,
        spend_days: in_range
            .iter()
            .map(|day| SpendDay {
                day: day_label(day.day),
                amount: usd(day.captured),
            })
            .collect(),
    }
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    layout: Layout,
    balance: String,
    held: String,
    spent: String,
    chart: SpendChart,
    ledger_rows: Vec<LedgerRow>,
    /// Whether the ledger rows carry the balance after each (always here).
    show_balance: bool,
    empty_text: &'static str,
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
    /// The chart's range in days: one of `CHART_RANGES`.
    #[serde(default)]
    days: Option<String>,
}

fn day_label(day: i64) -> String {
    display_time(day * DAY_MILLIS)[..10].to_owned()
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<OverviewQuery>,
) -> Response {
    let session = &signed_in.0;
    let today = now_millis() / DAY_MILLIS;
    let days = query
        .days
        .as_deref()
        .and_then(|days| days.parse::<i64>().ok())
        .filter(|days| CHART_RANGES.contains(days))
        .unwrap_or(DEFAULT_CHART_DAYS);
    let since = (today - days + 1) * DAY_MILLIS;
    let store = state.store.as_ref();
    let loaded = async {
        let account = store.accounts().get(&session.account_id).await?;
        let spend = store
            .ledger()
            .daily_spend(&session.account_id, since)
            .await?;
        let ledger = store
            .ledger()
            .page(
                &session.account_id,
                &LedgerPageRequest {
                    kind: None,
                    before: None,
                    limit: LEDGER_ROWS,
                },
            )
            .await?;
        Ok::<_, crate::store::StoreError>((account, spend, ledger))
    };
    let (account, spend, recent) = match loaded.await {
        Ok((Some(account), spend, ledger)) => (account, spend, ledger),
        Ok((None, _, _)) => return super::not_found(Some(session)),
        Err(error) => return super::internal_error(error),
    };
    render(
        StatusCode::OK,
        &OverviewPage {
            layout: Layout::signed_in(session, "Overview", Section::Overview),
            balance: usd(account.shown_balance()),
            held: usd(account.held),
            spent: usd(account.captured),
            chart: spend_chart(&spend, today, days),
            ledger_rows: ledger_rows(&state.catalog, recent.entries, recent.balance_after_newest),
            show_balance: true,
            empty_text: "No money has moved yet.",
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

    fn spend(day: i64, cents: i64) -> DailySpend {
        DailySpend {
            day,
            captured: Micros::from_usd_cents(cents),
        }
    }

    #[test]
    fn the_top_of_the_scale_is_a_round_amount_at_or_above_the_largest_day() {
        assert_eq!(round_top(Micros(0)), Micros(10));
        assert_eq!(round_top(Micros(400_000)), Micros(500_000));
        assert_eq!(round_top(Micros(500_000)), Micros(500_000));
        assert_eq!(round_top(Micros(500_001)), Micros(1_000_000));
        assert_eq!(round_top(Micros(1_500_000)), Micros(2_000_000));
        assert_eq!(round_top(Micros(i64::MAX)), Micros(i64::MAX));
    }

    #[test]
    fn bars_cover_the_range_scaled_to_the_round_top() {
        let today = 20_000;
        let chart = spend_chart(&[spend(today - 29, 100), spend(today, 400)], today, 30);
        assert_eq!(chart.bars.len(), 30);
        assert_eq!(chart.scale_top, "$5.00");
        assert_eq!(chart.scale_middle, "$2.50");
        assert_eq!(chart.bars[0].height, CHART_HEIGHT / 5);
        assert_eq!(chart.bars[29].height, CHART_HEIGHT * 4 / 5);
        assert_eq!(chart.bars[15].height, 0);
        assert!(
            chart.bars[29].label.ends_with("$4.00"),
            "{}",
            chart.bars[29].label
        );
        assert_eq!(chart.total, "$5.00");
        assert_eq!(chart.spend_days.len(), 2);
        assert!(
            chart
                .highest
                .as_deref()
                .is_some_and(|text| text.starts_with("$4.00 on "))
        );
    }

    #[test]
    fn a_shorter_range_leaves_older_days_out() {
        let today = 20_000;
        let chart = spend_chart(&[spend(today - 29, 100), spend(today, 400)], today, 7);
        assert_eq!(chart.bars.len(), 7);
        assert_eq!(chart.total, "$4.00");
        assert_eq!(chart.spend_days.len(), 1);
        assert_eq!(chart.view_width, 7 * DAY_WIDTH);
    }

    #[test]
    fn an_empty_range_has_no_highest_day() {
        let chart = spend_chart(&[], 20_000, 90);
        assert_eq!(chart.total, "$0.00");
        assert!(chart.highest.is_none());
        assert!(chart.bars.iter().all(|bar| bar.height == 0));
    }

    #[test]
    fn ticks_label_today_and_count_back_by_the_step() {
        // 2026-11-28 is day 20_785 since the epoch.
        let today = 20_785;
        let week = spend_chart(&[], today, 7);
        let labels: Vec<&str> = week.ticks.iter().map(|tick| tick.label.as_str()).collect();
        assert_eq!(labels, vec!["Nov 22", "23", "24", "25", "26", "27", "28"]);
        let month = spend_chart(&[], today, 30);
        let labelled: Vec<&str> = month
            .ticks
            .iter()
            .map(|tick| tick.label.as_str())
            .filter(|label| !label.is_empty())
            .collect();
        assert_eq!(labelled, vec!["Oct 31", "Nov 7", "14", "21", "28"]);
        assert_eq!(month.ticks.len(), 30);
    }
}
