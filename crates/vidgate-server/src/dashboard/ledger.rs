//! The ledger: every movement of the account's money, newest first, with
//! its sign, the balance after it, and the generation (model and prompt)
//! that caused it. The overview shows the newest few; the ledger's own page
//! filters by kind and pages back through all of it.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use vidgate_core::{Catalog, Micros};

use super::generations::{model_name, prompt_preview};
use super::session::SignedIn;
use super::{Layout, Section, display_time, display_time_to_the_second, render, usd};
use crate::application::state::AppState;
use crate::store::{LedgerKind, LedgerPageEntry, LedgerPageRequest};

/// Entries on one page of the ledger.
const PAGE_ROWS: u32 = 50;

pub struct LedgerRow {
    pub time: String,
    /// The time to the second, shown on hover.
    pub full_time: String,
    /// The kind in words ("Refund", "Charge").
    pub kind: &'static str,
    /// The change of the available balance, signed ("+$5.00", "-$0.10"), or
    /// for a capture, which moves held money to spent, the amount and what
    /// it did.
    pub change: String,
    /// `in`, `out` or `held`: how the row is coloured.
    pub direction: &'static str,
    /// The available balance after this entry; none on a filtered page,
    /// whose rows are not consecutive.
    pub balance_after: Option<String>,
    pub generation_id: Option<String>,
    /// The generation's model and the start of its prompt.
    pub model: Option<String>,
    pub prompt: String,
    /// Stripe's ids, for money that came in or went back through Stripe.
    pub reference: Option<String>,
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

/// The kind in words, as the ledger and its filter name it.
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

/// The rows of a ledger page, newest first. With the balance after the
/// newest (an unfiltered page), each row carries the balance after it: the
/// next newer row's less that row's change.
pub fn ledger_rows(
    catalog: &Catalog,
    entries: Vec<LedgerPageEntry>,
    balance_after_newest: Option<Micros>,
) -> Vec<LedgerRow> {
    let mut balance_after = balance_after_newest;
    entries
        .into_iter()
        .map(|LedgerPageEntry { entry, generation }| {
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
                balance_after: balance_after.map(usd),
                generation_id: entry.generation_id,
                model: generation
                    .as_ref()
                    .map(|generation| model_name(catalog, &generation.model)),
                prompt: generation
                    .as_ref()
                    .map(|generation| prompt_preview(&generation.input))
                    .unwrap_or_default(),
                reference: entry.reference,
            };
            balance_after = balance_after.map(|balance| balance - change);
            row
        })
        .collect()
}

/// The filter and position, as the page's GET form and links send them;
/// empty values mean none (an HTML form sends them empty).
#[derive(Deserialize, Default)]
pub struct LedgerQuery {
    #[serde(default)]
    kind: String,
    /// The id of the last entry of the page before; the page lists older
    /// entries.
    #[serde(default)]
    before: String,
}

struct KindOption {
    value: &'static str,
    label: &'static str,
    selected: bool,
}

#[derive(Template)]
#[template(path = "ledger.html")]
struct LedgerPageView {
    layout: Layout,
    ledger_rows: Vec<LedgerRow>,
    kinds: Vec<KindOption>,
    filtered: bool,
    /// Whether the rows carry the balance after each (unfiltered pages).
    show_balance: bool,
    /// What the table says without rows.
    empty_text: &'static str,
    first_page_href: Option<String>,
    next_page_href: Option<String>,
    alert: Option<String>,
}

/// `/dashboard/ledger` with the kind and position given, only those set.
fn ledger_href(kind: Option<LedgerKind>, before: Option<i64>) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    if let Some(kind) = kind {
        query.append_pair("kind", kind.as_str());
    }
    if let Some(before) = before {
        query.append_pair("before", &before.to_string());
    }
    let query = query.finish();
    if query.is_empty() {
        "/dashboard/ledger".to_owned()
    } else {
        format!("/dashboard/ledger?{query}")
    }
}

pub async fn show(
    State(state): State<AppState>,
    signed_in: SignedIn,
    Query(query): Query<LedgerQuery>,
) -> Response {
    let session = &signed_in.0;
    // A filter or page link edited by hand shows the newest entries of what
    // still makes sense, saying so, rather than an error page.
    let mut alerts = Vec::new();
    let kind = match query.kind.as_str() {
        "" => None,
        text => {
            let kind = LedgerKind::parse(text);
            if kind.is_none() {
                alerts.push("That kind of entry does not exist; showing every kind.");
            }
            kind
        }
    };
    let before = match query.before.as_str() {
        "" => None,
        text => {
            let before = text.parse::<i64>().ok().filter(|id| *id > 0);
            if before.is_none() {
                alerts.push("That page link is not valid; showing the newest entries.");
            }
            before
        }
    };
    let request = LedgerPageRequest {
        kind,
        before,
        // One row more than the page tells whether another page exists.
        limit: PAGE_ROWS + 1,
    };
    let mut page = match state
        .store
        .ledger()
        .page(&session.account_id, &request)
        .await
    {
        Ok(page) => page,
        Err(error) => return super::internal_error(error),
    };
    let next_page_href = if page.entries.len() > PAGE_ROWS as usize {
        page.entries.truncate(PAGE_ROWS as usize);
        page.entries
            .last()
            .map(|oldest| ledger_href(kind, Some(oldest.entry.id)))
    } else {
        None
    };
    render(
        StatusCode::OK,
        &LedgerPageView {
            layout: Layout::signed_in(session, "Ledger", Section::Overview),
            ledger_rows: ledger_rows(&state.catalog, page.entries, page.balance_after_newest),
            kinds: LedgerKind::ALL
                .into_iter()
                .map(|option| KindOption {
                    value: option.as_str(),
                    label: kind_in_words(option.as_str()),
                    selected: kind == Some(option),
                })
                .collect(),
            filtered: kind.is_some(),
            show_balance: kind.is_none(),
            empty_text: if kind.is_some() {
                "No entries of this kind."
            } else {
                "No money has moved yet."
            },
            first_page_href: before.map(|_| ledger_href(kind, None)),
            next_page_href,
            alert: (!alerts.is_empty()).then(|| alerts.join(" ")),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{LedgerEntry, LedgerGeneration};

    fn entry(kind: &str, usd_cents: i64) -> LedgerPageEntry {
        LedgerPageEntry {
            entry: LedgerEntry {
                id: 0,
                generation_id: None,
                kind: kind.to_owned(),
                amount: Micros::from_usd_cents(usd_cents),
                created_at: 0,
                reference: None,
            },
            generation: None,
        }
    }

    fn shown(rows: &[LedgerRow]) -> Vec<(&str, &str, &str, Option<&str>)> {
        rows.iter()
            .map(|row| {
                (
                    row.kind,
                    row.change.as_str(),
                    row.direction,
                    row.balance_after.as_deref(),
                )
            })
            .collect()
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
        let rows = ledger_rows(
            &Catalog::embedded(),
            newest_first,
            Some(Micros::from_usd_cents(2000)),
        );
        assert_eq!(
            shown(&rows),
            vec![
                ("Debit", "-$3.00", "out", Some("$20.00")),
                (
                    "Charge",
                    "$2.00 held \u{2192} spent",
                    "held",
                    Some("$23.00")
                ),
                ("Hold", "-$2.00", "out", Some("$23.00")),
                ("Refund", "+$1.00", "in", Some("$25.00")),
                ("Hold", "-$1.00", "out", Some("$24.00")),
                ("Credit", "+$25.00", "in", Some("$25.00")),
            ]
        );
    }

    #[test]
    fn a_filtered_page_shows_no_balance_and_names_the_generation() {
        let mut hold = entry("hold", 50);
        hold.entry.generation_id = Some("gen_1".into());
        hold.generation = Some(LedgerGeneration {
            model: "vendor_1/model_1".into(),
            input: serde_json::json!({ "prompt": "a red kite over the sea" }),
        });
        let rows = ledger_rows(&Catalog::embedded(), vec![hold], None);
        assert_eq!(shown(&rows), vec![("Hold", "-$0.50", "out", None)]);
        assert_eq!(rows[0].prompt, "a red kite over the sea");
        assert!(
            rows[0]
                .model
                .as_deref()
                .is_some_and(|model| model.contains("M1"))
        );
    }

    #[test]
    fn page_links_carry_only_what_is_set() {
        assert_eq!(ledger_href(None, None), "/dashboard/ledger");
        assert_eq!(
            ledger_href(Some(LedgerKind::Release), Some(42)),
            "/dashboard/ledger?kind=release&before=42"
        );
    }
}
