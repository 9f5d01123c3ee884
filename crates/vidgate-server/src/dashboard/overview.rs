//! The overview: balance, spend per day and the ledger.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use vidgate_core::Micros;

use super::session::SignedIn;
use super::{Layout, Section, display_time, render, usd};
use crate::state::AppState;
use crate::store::{DailySpend, LedgerEntry, now_millis};

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
    kind: String,
    amount: String,
    generation_id: Option<String>,
}

impl From<LedgerEntry> for LedgerRow {
    fn from(entry: LedgerEntry) -> LedgerRow {
        LedgerRow {
            time: display_time(entry.created_at),
            kind: entry.kind,
            amount: usd(entry.amount),
            generation_id: entry.generation_id,
        }
    }
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

pub async fn show(State(state): State<AppState>, signed_in: SignedIn) -> Response {
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
    let (account, spend, ledger) = match loaded.await {
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
            balance: usd(account.balance),
            held: usd(account.held),
            spent: usd(account.captured),
            spent_in_chart: usd(spent_in_chart),
            chart_width: CHART_WIDTH,
            chart_height: CHART_HEIGHT,
            bar_width: BAR_WIDTH,
            bars: bars(&spend, today),
            first_day: day_label(today - CHART_DAYS + 1),
            last_day: day_label(today),
            ledger: ledger.into_iter().map(LedgerRow::from).collect(),
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
}
