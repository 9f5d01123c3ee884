//! Money at a glance (issue 44 item 1) and the webhooks page's next attempt
//! and test event: the spend chart's ranges, axes and empty state, the
//! ledger's pages and kind filter with the balance after each entry, and a
//! `webhook.test` event signed like every delivery.

use super::*;
use crate::common::fast_webhook_settings;
use crate::webhooks::Receiver;
use vidgate_core::Micros;
use vidgate_server::webhook_senders::WebhookSettings;

/// The text of every `<td class="{class}">` of a page, in order.
fn cells<'page>(page: &'page Page, class: &str) -> Vec<&'page str> {
    let marker = format!("<td class=\"{class}\">");
    page.body
        .split(marker.as_str())
        .skip(1)
        .map(|rest| &rest[..rest.find("</td>").unwrap()])
        .collect()
}

/// The `href` of the link with `id`, with the escaped `&` read back.
fn link(page: &Page, id: &str) -> Option<String> {
    let marker = format!("id=\"{id}\" href=\"");
    let start = page.body.find(&marker)? + marker.len();
    let end = start + page.body[start..].find('"').unwrap();
    Some(
        page.body[start..end]
            .replace("&#38;", "&")
            .replace("&amp;", "&"),
    )
}

async fn the_spend_chart_has_ranges_axes_and_an_empty_state(store: StoreKind) {
    let app = spawn_app(store).await;
    let (mut browser, _) = signed_in_browser(&app).await;

    // Nothing charged yet: words instead of a blank box.
    let empty = browser.get("/dashboard").await;
    assert!(empty.body.contains("id=\"spend-empty\""), "{}", empty.body);
    assert!(!empty.body.contains("<svg id=\"spend-chart\""));
    assert!(
        empty
            .body
            .contains("No generation was charged in the last 30 days")
    );

    let done = app.run_to_success(M1_T2V, quick_body("a kite")).await;
    let price = done["cost"]["amount_usd"]
        .as_f64()
        .map(|usd| Micros((usd * 1e6).round() as i64))
        .unwrap_or_else(|| panic!("a cost: {done}"));
    let month = browser.get("/dashboard").await;
    assert!(
        month.body.contains("<svg id=\"spend-chart\""),
        "{}",
        month.body
    );
    assert!(!month.body.contains("id=\"spend-empty\""));
    assert!(month.body.contains("aria-current=\"true\">30 days</a>"));
    assert_eq!(month.body.matches("<rect class=\"bar\"").count(), 30);
    // The y axis is labelled in amounts, from a round top down to $0, and
    // the x axis in days; the table says the same figures in words.
    assert!(
        month
            .body
            .contains("<div class=\"y-axis\" aria-hidden=\"true\"><span>$")
    );
    assert!(month.body.contains("</span><span>$0</span></div>"));
    assert!(
        month
            .body
            .contains("<div class=\"x-axis\" aria-hidden=\"true\">")
    );
    let charged = vidgate_server::dashboard::usd(price);
    assert!(
        month
            .body
            .contains(&format!("<td class=\"number\">{charged}</td>")),
        "the spend table shows {charged}: {}",
        month.body
    );
    assert!(
        month
            .body
            .contains(&format!("the most in a day, {charged} on "))
    );

    let week = browser.get("/dashboard?days=7").await;
    assert!(week.body.contains("aria-current=\"true\">7 days</a>"));
    assert_eq!(week.body.matches("<rect class=\"bar\"").count(), 7);
    let quarter = browser.get("/dashboard?days=90").await;
    assert_eq!(quarter.body.matches("<rect class=\"bar\"").count(), 90);
    // A range not offered falls back to 30 days.
    for odd in ["5", "abc", "-30", "100000000"] {
        let page = browser.get(&format!("/dashboard?days={odd}")).await;
        assert_eq!(page.status, StatusCode::OK, "{odd}");
        assert!(
            page.body.contains("aria-current=\"true\">30 days</a>"),
            "{odd}"
        );
    }
}

async fn the_ledger_pages_back_and_filters_by_kind(store: StoreKind) {
    let app = spawn_app(store).await;
    let account_id = app.account.account.id.clone();
    // 60 credits and a generation's hold and charge: more than one page.
    for cents in 1..=60 {
        app.server
            .store
            .ledger()
            .credit(&account_id, Micros::from_usd_cents(cents))
            .await
            .unwrap()
            .unwrap();
    }
    let done = app
        .run_to_success(M1_T2V, quick_body("a lighthouse in the fog"))
        .await;
    let generation_id = done["id"].as_str().unwrap();
    // Another account's money never shows.
    let other = app.new_account(7).await;
    let (mut browser, _) = signed_in_browser(&app).await;
    let account = app.account_state(&account_id).await;

    let first = browser.get("/dashboard/ledger").await;
    assert_eq!(first.status, StatusCode::OK);
    let kinds = cells(&first, "kind");
    assert_eq!(kinds.len(), 50);
    assert_eq!(&kinds[..3], &["Charge", "Hold", "Credit"]);
    let balances = cells(&first, "number balance-after");
    assert_eq!(
        balances[0],
        vidgate_server::dashboard::usd(account.balance),
        "the newest entry's balance after it is the balance now"
    );
    assert!(first.body.contains("lighthouse in the fog"));
    assert!(
        first
            .body
            .contains(&format!("<code>{generation_id}</code>"))
    );
    assert!(!first.body.contains(&other.account.id));
    assert!(link(&first, "first-page").is_none());

    let older = link(&first, "next-page").expect("a link to older entries");
    assert!(older.starts_with("/dashboard/ledger?before="), "{older}");
    let second = browser.get(&older).await;
    let second_kinds = cells(&second, "kind");
    // 60 credits, the account's first credit, a hold and a charge.
    assert_eq!(second_kinds.len(), 63 - 50);
    assert!(second_kinds.iter().all(|kind| *kind == "Credit"));
    assert!(link(&second, "next-page").is_none());
    assert_eq!(
        link(&second, "first-page").as_deref(),
        Some("/dashboard/ledger")
    );
    // The oldest entry is the account's first credit, and the balance after
    // it is that credit: the balances run unbroken across the pages.
    let second_balances = cells(&second, "number balance-after");
    let first_credit = app
        .server
        .store
        .ledger()
        .entries(&account_id)
        .await
        .unwrap()
        .first()
        .unwrap()
        .amount;
    assert_eq!(
        *second_balances.last().unwrap(),
        vidgate_server::dashboard::usd(first_credit)
    );
    // Page two's newest row follows page one's oldest: page one ends at
    // the 13-cent credit ($100 first, then 1 + 2 + … + 13 cents), and page
    // two starts at the 12-cent one before it.
    assert_eq!(*balances.last().unwrap(), "$100.91", "{balances:?}");
    assert_eq!(second_balances[0], "$100.78", "{second_balances:?}");

    // One kind: its rows only, with no balance column (the rows are not
    // consecutive), said so in words.
    let holds = browser.get("/dashboard/ledger?kind=hold").await;
    assert_eq!(cells(&holds, "kind"), vec!["Hold"]);
    assert!(cells(&holds, "number balance-after").is_empty());
    assert!(holds.body.contains("id=\"balance-hint\""));
    assert!(holds.body.contains("<option value=\"hold\" selected>"));
    assert!(holds.body.contains("lighthouse in the fog"));
    let refunds = browser.get("/dashboard/ledger?kind=release").await;
    assert!(refunds.body.contains("No entries of this kind."));
    let credits = browser.get("/dashboard/ledger?kind=credit").await;
    let next = link(&credits, "next-page").unwrap();
    assert!(
        next.starts_with("/dashboard/ledger?kind=credit&before="),
        "{next}"
    );
    assert_eq!(cells(&browser.get(&next).await, "kind").len(), 61 - 50);

    // Links edited by hand show the newest page, saying so.
    for (path, said) in [
        (
            "/dashboard/ledger?kind=bribe",
            "That kind of entry does not exist",
        ),
        (
            "/dashboard/ledger?before=yesterday",
            "That page link is not valid",
        ),
        ("/dashboard/ledger?before=-4", "That page link is not valid"),
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(page.body.contains(said), "{path}");
        assert_eq!(cells(&page, "kind").len(), 50, "{path}");
    }

    // The overview lists the newest ten and links to the rest.
    let overview = browser.get("/dashboard").await;
    assert_eq!(cells(&overview, "kind").len(), 10);
    assert_eq!(
        link(&overview, "whole-ledger").as_deref(),
        Some("/dashboard/ledger")
    );
}

/// A test event goes to the URL given, signed with the account's secret,
/// and shows among the deliveries; a URL of the wrong form and a missing
/// CSRF token are refused.
async fn a_test_event_is_signed_and_delivered(store: StoreKind) {
    let app = spawn_app(store).await;
    let receiver = Receiver::start().await;
    let (mut browser, csrf) = signed_in_browser(&app).await;

    let sent = browser
        .post(
            "/dashboard/webhooks/test",
            &[("csrf_token", &csrf), ("url", &receiver.url())],
        )
        .await;
    assert_eq!(sent.status, StatusCode::SEE_OTHER, "{}", sent.body);
    assert_eq!(sent.location(), "/dashboard/webhooks?tested=1");
    let received = receiver.wait_for(1).await;
    let account = app.account_state(&app.account.account.id).await;
    received[0]
        .verify_with(&account.webhook_secret)
        .expect("signed with the account's secret");
    let event = received[0].json();
    assert_eq!(event["type"], "webhook.test");
    assert_eq!(event["data"]["object"], "webhook_test");
    assert_eq!(event["data"]["account_id"], app.account.account.id.as_str());
    assert!(received[0].header("webhook-id").starts_with("msg_"));

    let page = browser.get("/dashboard/webhooks?tested=1").await;
    assert!(page.body.contains("id=\"test-notice\""));
    assert!(page.body.contains("<td><code>webhook.test</code></td>"));
    // The form offers the URL last sent to.
    assert!(page.body.contains(&format!("value=\"{}\"", receiver.url())));

    for bad in [
        "",
        "ftp://example.com/hook",
        "not a url",
        &format!("https://{}", "x".repeat(3000)),
    ] {
        let refused = browser
            .post(
                "/dashboard/webhooks/test",
                &[("csrf_token", &csrf), ("url", bad)],
            )
            .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(refused.body.contains("id=\"test-alert\""), "{bad}");
    }
    let forged = browser
        .post(
            "/dashboard/webhooks/test",
            &[("csrf_token", "forged"), ("url", &receiver.url())],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 1, "refused tests send nothing");
}

/// A delivery that failed says when it is tried next, and an account has at
/// most `MAX_PENDING_TEST_EVENTS` test events waiting.
async fn a_failed_delivery_says_when_it_is_tried_next(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        webhooks: WebhookSettings {
            retry_schedule: vec![Duration::from_secs(3600)],
            ..fast_webhook_settings()
        },
        ..TestSettings::new(store)
    })
    .await;
    let receiver = Receiver::start().await;
    receiver.answer_next((0..10).map(|_| (500, Vec::new())));
    let (mut browser, csrf) = signed_in_browser(&app).await;
    let limit = vidgate_server::store::MAX_PENDING_TEST_EVENTS as usize;
    for _ in 0..limit {
        let sent = browser
            .post(
                "/dashboard/webhooks/test",
                &[("csrf_token", &csrf), ("url", &receiver.url())],
            )
            .await;
        assert_eq!(sent.status, StatusCode::SEE_OTHER);
    }
    let refused = browser
        .post(
            "/dashboard/webhooks/test",
            &[("csrf_token", &csrf), ("url", &receiver.url())],
        )
        .await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.body.contains("test events are still waiting"));

    receiver.wait_for(limit).await;
    // Each failed once and waits an hour (less or more by the jitter).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let page = browser.get("/dashboard/webhooks").await;
        let next: Vec<&str> = cells(&page, "next-attempt");
        let settled = next.len() == limit
            && next.iter().all(|cell| {
                cell.contains(">in 5") && cell.contains(" min<") || cell.contains(">in 1 h ")
            });
        if settled {
            assert!(page.body.contains("HTTP 500"));
            assert!(next[0].starts_with("<span title=\""), "{}", next[0]);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{next:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_both_stores!(
    the_spend_chart_has_ranges_axes_and_an_empty_state,
    the_ledger_pages_back_and_filters_by_kind,
    a_test_event_is_signed_and_delivered,
    a_failed_delivery_says_when_it_is_tried_next,
);
