//! Credit through Stripe Checkout against the fake Stripe
//! (`fake_stripe.rs`): the Checkout call vidgate makes, the webhook's
//! signature check, each session credited once however its events arrive,
//! and refunds and disputes taking the money back, on both stores.

use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::stripe::{CheckoutAmounts, StripeSettings};

use crate::common::{
    M1_T2V, StoreKind, TestApp, TestSettings, assert_error, assert_insufficient_balance,
    assert_invalid_request, on_both_stores, quick_body, spawn_app_with,
};
use crate::fake_stripe::{
    FakeStripe, STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET, now_seconds, stripe_event,
    stripe_signature,
};

on_both_stores!(
    checkout_creates_the_session_at_stripe,
    a_paid_session_is_credited_once_however_its_events_arrive,
    bad_and_stale_signatures_change_nothing,
    a_refund_after_the_money_was_spent_leaves_a_debt_that_stops_submits,
    a_dispute_and_refunds_never_take_back_more_than_was_paid,
    a_won_dispute_gives_the_money_back_once,
    take_backs_that_arrive_before_their_credit_wait_for_it,
    a_paid_session_vidgate_did_not_make_credits_nothing,
    an_inquiry_closed_without_a_chargeback_gives_the_money_back,
);

fn stripe_settings(fake: &FakeStripe) -> StripeSettings {
    StripeSettings {
        secret_key: STRIPE_SECRET_KEY.into(),
        webhook_secret: STRIPE_WEBHOOK_SECRET.into(),
        api_url: fake.base_url.clone(),
        amounts: CheckoutAmounts::default(),
    }
}

async fn app_with_stripe(store: StoreKind) -> (TestApp, FakeStripe) {
    let fake = FakeStripe::start().await;
    let app = spawn_app_with(TestSettings {
        stripe: Some(stripe_settings(&fake)),
        ..TestSettings::new(store)
    })
    .await;
    (app, fake)
}

/// The node's root (the webhook is outside /api/v1).
fn root(app: &TestApp) -> String {
    app.api_base.trim_end_matches("/api/v1").to_owned()
}

/// Sends `payload` to the webhook with `signature` as `Stripe-Signature`.
async fn send_signed(app: &TestApp, payload: &str, signature: Option<&str>) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/webhooks/stripe", root(app)))
        .header("content-type", "application/json")
        .body(payload.to_owned());
    if let Some(signature) = signature {
        request = request.header("stripe-signature", signature);
    }
    request.send().await.unwrap()
}

/// Sends `payload` signed now with the endpoint's secret, as Stripe does,
/// and asserts Stripe would see it received.
async fn deliver(app: &TestApp, payload: &str) {
    let signature = stripe_signature(payload, STRIPE_WEBHOOK_SECRET, now_seconds());
    let response = send_signed(app, payload, Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::OK, "{payload}");
}

/// Starts a Checkout of `amount_usd` with `key`; the session's id.
async fn start_checkout(app: &TestApp, key: &str, amount_usd: &str) -> String {
    let response = app
        .post_json(
            "/account/checkout",
            key,
            &json!({ "amount_usd": amount_usd }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// The completed event of a paid session, as Stripe sends it.
fn completed_event(event_id: &str, session: &Value) -> String {
    stripe_event(event_id, "checkout.session.completed", session.clone())
}

fn charge(payment_intent: &str, amount_refunded_cents: i64) -> Value {
    json!({
        "id": format!("ch_{}", &payment_intent[3..]),
        "object": "charge",
        "amount": 2000,
        "amount_refunded": amount_refunded_cents,
        "currency": "usd",
        "payment_intent": payment_intent,
        "refunded": amount_refunded_cents > 0,
    })
}

/// Delivers `charge.refunded` for `payment_intent` with `refunded_cents`
/// refunded in total, and asserts the balance it leaves.
async fn refund_leaves(
    app: &TestApp,
    event_id: &str,
    payment_intent: &str,
    refunded_cents: i64,
    (account_id, balance): (&str, Micros),
) {
    deliver(
        app,
        &stripe_event(
            event_id,
            "charge.refunded",
            charge(payment_intent, refunded_cents),
        ),
    )
    .await;
    assert_eq!(
        app.account_state(account_id).await.balance,
        balance,
        "{event_id}"
    );
}

/// Tops up `key`'s account with `amount_usd` through the whole flow: the
/// Checkout, the payment, the completed event. The paid session.
async fn top_up(app: &TestApp, fake: &FakeStripe, key: &str, amount_usd: &str) -> Value {
    let session_id = start_checkout(app, key, amount_usd).await;
    let paid = fake.pay(&session_id);
    deliver(app, &completed_event(&format!("evt_{session_id}"), &paid)).await;
    paid
}

async fn checkout_creates_the_session_at_stripe(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let response = app
        .post_json(
            "/account/checkout",
            app.key(),
            &json!({ "amount_usd": "20.00" }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    let session_id = body["id"].as_str().unwrap();
    assert_eq!(body["url"], fake.session(session_id)["url"]);

    let account_id = app.account.account.id.as_str();
    let sent = &fake.create_requests()[0];
    let field = |name: &str| {
        sent.iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(field("mode"), Some("payment"));
    assert_eq!(field("line_items[0][price_data][currency]"), Some("usd"));
    assert_eq!(
        field("line_items[0][price_data][unit_amount]"),
        Some("2000")
    );
    assert_eq!(field("line_items[0][quantity]"), Some("1"));
    assert!(field("line_items[0][price_data][product_data][name]").is_some());
    assert_eq!(field("client_reference_id"), Some(account_id));
    assert_eq!(field("metadata[account_id]"), Some(account_id));
    let dashboard = format!("{}/dashboard", root(&app));
    assert!(
        field("success_url").unwrap().starts_with(&dashboard),
        "{sent:?}"
    );
    assert!(
        field("cancel_url").unwrap().starts_with(&dashboard),
        "{sent:?}"
    );

    // Nothing is credited by starting a Checkout.
    assert_eq!(
        app.account_state(account_id).await.balance,
        Micros(100_000_000)
    );
    for amount in [
        json!("4.99"),
        json!("1000.01"),
        json!("20.001"),
        json!("lots"),
        json!(null),
    ] {
        let response = app
            .post_json(
                "/account/checkout",
                app.key(),
                &json!({ "amount_usd": amount }),
            )
            .await;
        assert_invalid_request(response, "amount_usd").await;
    }
    assert_eq!(
        fake.create_requests().len(),
        1,
        "refused amounts reach no one"
    );
}

/// A node without the Stripe settings serves nothing of Stripe.
#[tokio::test]
async fn without_the_settings_nothing_of_stripe_is_served() {
    let app = spawn_app_with(TestSettings::new(StoreKind::Sqlite)).await;
    let response = app
        .post_json(
            "/account/checkout",
            app.key(),
            &json!({ "amount_usd": "20.00" }),
        )
        .await;
    assert_error(response, StatusCode::NOT_FOUND, "not_found", None).await;
    let payload = stripe_event("evt_1", "checkout.session.completed", json!({}));
    let signature = stripe_signature(&payload, STRIPE_WEBHOOK_SECRET, now_seconds());
    let response = send_signed(&app, &payload, Some(&signature)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

async fn a_paid_session_is_credited_once_however_its_events_arrive(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let account_id = app.account.account.id.clone();
    let session_id = start_checkout(&app, app.key(), "20.00").await;

    // Completed but not yet paid (a bank debit): nothing yet.
    let unpaid = fake.session(&session_id);
    assert_eq!(unpaid["payment_status"], "unpaid");
    deliver(&app, &completed_event("evt_completed", &unpaid)).await;
    assert_eq!(
        app.account_state(&account_id).await.balance,
        Micros(100_000_000)
    );

    let paid = fake.pay(&session_id);
    let succeeded = stripe_event(
        "evt_async_succeeded",
        "checkout.session.async_payment_succeeded",
        paid.clone(),
    );
    deliver(&app, &succeeded).await;
    let credited = Micros(120_000_000);
    assert_eq!(app.account_state(&account_id).await.balance, credited);

    // The same event again (Stripe retries for three days), and another
    // event about the same session: nothing more.
    deliver(&app, &succeeded).await;
    deliver(&app, &completed_event("evt_completed_paid", &paid)).await;
    assert_eq!(app.account_state(&account_id).await.balance, credited);

    // One ledger entry, carrying Stripe's ids; visible in the API's balance.
    let entries = app
        .server
        .store
        .ledger()
        .entries(&account_id)
        .await
        .unwrap();
    let stripe_entries: Vec<_> = entries
        .iter()
        .filter(|entry| entry.reference.is_some())
        .collect();
    assert_eq!(stripe_entries.len(), 1, "{entries:?}");
    assert_eq!(stripe_entries[0].kind, "credit");
    assert_eq!(stripe_entries[0].amount, Micros(20_000_000));
    let reference = stripe_entries[0].reference.as_deref().unwrap();
    assert!(reference.contains(&session_id), "{reference}");
    assert!(
        reference.contains(paid["payment_intent"].as_str().unwrap()),
        "{reference}"
    );
    let account = app.get_json("/account", app.key()).await;
    assert_eq!(account["balance_usd"], json!(120.0));
    app.assert_ledger_invariant(&account_id).await;

    // An event vidgate does not act on is received and ignored.
    deliver(
        &app,
        &stripe_event("evt_other", "customer.created", json!({ "id": "cus_1" })),
    )
    .await;
    assert_eq!(app.account_state(&account_id).await.balance, credited);
}

async fn bad_and_stale_signatures_change_nothing(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let account_id = app.account.account.id.clone();
    let session_id = start_checkout(&app, app.key(), "20.00").await;
    let paid = fake.pay(&session_id);
    let payload = completed_event("evt_signed", &paid);
    let now = now_seconds();
    let good = stripe_signature(&payload, STRIPE_WEBHOOK_SECRET, now);
    let cases = [
        ("no signature", None),
        (
            "another secret",
            Some(stripe_signature(&payload, "whsec_another", now)),
        ),
        (
            "another body",
            Some(stripe_signature(
                &payload.replace("2000", "9000"),
                STRIPE_WEBHOOK_SECRET,
                now,
            )),
        ),
        (
            "stale by a second",
            Some(stripe_signature(&payload, STRIPE_WEBHOOK_SECRET, now - 301)),
        ),
        ("no v1", Some(good.replace("v1=", "v0="))),
        (
            "no timestamp",
            Some(good.split_once(',').unwrap().1.to_owned()),
        ),
    ];
    for (case, signature) in cases {
        let response = send_signed(&app, &payload, signature.as_deref()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{case}");
    }
    assert_eq!(
        app.account_state(&account_id).await.balance,
        Micros(100_000_000)
    );

    // Nothing was recorded either: the event, signed well, still credits.
    let response = send_signed(&app, &payload, Some(&good)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.account_state(&account_id).await.balance,
        Micros(120_000_000)
    );
}

async fn a_refund_after_the_money_was_spent_leaves_a_debt_that_stops_submits(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let customer = app.new_account(0).await;
    let key = customer.api_key.as_str();
    let account_id = customer.account.id.as_str();
    let paid = top_up(&app, &fake, key, "5.00").await;
    assert_eq!(
        app.account_state(account_id).await.balance,
        Micros(5_000_000)
    );

    // Part of it is spent on a generation that succeeds.
    let submitted: Value = app
        .post_json(
            &format!("/run/{M1_T2V}"),
            key,
            &quick_body("spent before the refund"),
        )
        .await
        .json()
        .await
        .unwrap();
    let generation_id = submitted["id"].as_str().unwrap();
    loop {
        let generation = app
            .get_json(&format!("/generations/{generation_id}"), key)
            .await;
        if generation["status"] == "succeeded" {
            break;
        }
        assert_ne!(generation["status"], "failed", "{generation}");
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    let spent = app.account_state(account_id).await.captured;
    assert!(spent > Micros::ZERO);

    // The whole payment is refunded: the balance goes negative by what
    // was spent, and submits are refused until a top-up pays it.
    let payment_intent = paid["payment_intent"].as_str().unwrap();
    deliver(
        &app,
        &stripe_event("evt_refund", "charge.refunded", charge(payment_intent, 500)),
    )
    .await;
    let account = app.account_state(account_id).await;
    assert_eq!(account.balance, Micros::ZERO);
    assert_eq!(account.debt, spent);
    assert_eq!(account.shown_balance(), Micros::ZERO - spent);
    let shown = app.get_json("/account", key).await;
    assert_eq!(shown["balance_usd"], json!((Micros::ZERO - spent).to_usd()));
    app.assert_ledger_invariant(account_id).await;
    let refused = app
        .post_json(&format!("/run/{M1_T2V}"), key, &quick_body("while in debt"))
        .await;
    let refused = assert_insufficient_balance(refused).await;
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "The balance is {} USD",
            (Micros::ZERO - spent).usd_text()
        )),
        "the 402 names the negative balance: {message}"
    );

    // A replay of the refund takes nothing more; a top-up pays the debt first.
    deliver(
        &app,
        &stripe_event("evt_refund", "charge.refunded", charge(payment_intent, 500)),
    )
    .await;
    assert_eq!(app.account_state(account_id).await.debt, spent);
    top_up(&app, &fake, key, "10.00").await;
    let account = app.account_state(account_id).await;
    assert_eq!(account.debt, Micros::ZERO);
    assert_eq!(account.balance, Micros(10_000_000) - spent);
    app.assert_ledger_invariant(account_id).await;
    let accepted = app
        .post_json(
            &format!("/run/{M1_T2V}"),
            key,
            &quick_body("after the top-up"),
        )
        .await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
}

async fn a_dispute_and_refunds_never_take_back_more_than_was_paid(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let customer = app.new_account(0).await;
    let key = customer.api_key.as_str();
    let account_id = customer.account.id.as_str();
    let paid = top_up(&app, &fake, key, "20.00").await;
    let payment_intent = paid["payment_intent"].as_str().unwrap();

    // $5 refunded, then $8 in total (Stripe reports the running total);
    // the older refund event arriving late takes nothing.
    for (event_id, refunded_cents, balance) in [
        ("evt_r1", 500, 15_000_000),
        ("evt_r2", 800, 12_000_000),
        ("evt_r1_late", 500, 12_000_000),
    ] {
        refund_leaves(
            &app,
            event_id,
            payment_intent,
            refunded_cents,
            (account_id, Micros(balance)),
        )
        .await;
    }

    // A dispute of the whole $20 can take only the $12 not yet refunded.
    let dispute = json!({
        "id": "dp_1",
        "object": "dispute",
        "amount": 2000,
        "charge": format!("ch_{}", &payment_intent[3..]),
        "currency": "usd",
        "payment_intent": payment_intent,
    });
    deliver(
        &app,
        &stripe_event("evt_dispute", "charge.dispute.created", dispute),
    )
    .await;
    let account = app.account_state(account_id).await;
    assert_eq!(account.balance, Micros::ZERO);
    assert_eq!(account.debt, Micros::ZERO);
    app.assert_ledger_invariant(account_id).await;

    // A charge of another payment (the Stripe account sells other things)
    // is received and ignored.
    deliver(
        &app,
        &stripe_event("evt_foreign", "charge.refunded", charge("pi_foreign", 500)),
    )
    .await;
    let entries = app.server.store.ledger().entries(account_id).await.unwrap();
    let debits: Vec<i64> = entries
        .iter()
        .filter(|entry| entry.kind == "debit")
        .map(|entry| entry.amount.0)
        .collect();
    assert_eq!(debits, vec![5_000_000, 3_000_000, 12_000_000]);
    assert!(
        entries
            .iter()
            .filter(|entry| entry.kind == "debit")
            .all(|entry| entry
                .reference
                .as_deref()
                .is_some_and(|reference| reference.contains(payment_intent)))
    );
}

/// A dispute of `payment_intent` in `status`, as Stripe's events carry it
/// (the fields of the `Dispute` object of the official `stripe` package).
fn dispute(id: &str, payment_intent: &str, status: &str) -> Value {
    json!({
        "id": id,
        "object": "dispute",
        "amount": 1000,
        "charge": format!("ch_{}", &payment_intent[3..]),
        "currency": "usd",
        "payment_intent": payment_intent,
        "status": status,
    })
}

async fn a_won_dispute_gives_the_money_back_once(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let customer = app.new_account(0).await;
    let key = customer.api_key.as_str();
    let account_id = customer.account.id.as_str();
    let app_ref = &app;
    let balance = || async move { app_ref.account_state(account_id).await.shown_balance() };
    let won_payment = top_up(&app, &fake, key, "10.00").await;
    let won = won_payment["payment_intent"].as_str().unwrap();

    deliver(
        &app,
        &stripe_event(
            "evt_won_opened",
            "charge.dispute.created",
            dispute("dp_won", won, "needs_response"),
        ),
    )
    .await;
    assert_eq!(balance().await, Micros::ZERO);
    // Won: the $10 comes back once, however often Stripe says so.
    for event_id in ["evt_won", "evt_won", "evt_won_again"] {
        deliver(
            &app,
            &stripe_event(
                event_id,
                "charge.dispute.closed",
                dispute("dp_won", won, "won"),
            ),
        )
        .await;
        assert_eq!(balance().await, Micros(10_000_000), "{event_id}");
    }
    let entries = app.server.store.ledger().entries(account_id).await.unwrap();
    let given_back: Vec<&str> = entries
        .iter()
        .filter(|entry| entry.kind == "credit")
        .filter_map(|entry| entry.reference.as_deref())
        .filter(|reference| reference.contains("dp_won"))
        .collect();
    assert_eq!(given_back.len(), 1, "{entries:?}");
    assert!(given_back[0].contains("evt_won"), "{}", given_back[0]);

    // A lost dispute keeps what it took.
    let lost = top_up(&app, &fake, key, "10.00").await;
    let lost = lost["payment_intent"].as_str().unwrap();
    for (event_id, event_type, status) in [
        (
            "evt_lost_opened",
            "charge.dispute.created",
            "needs_response",
        ),
        ("evt_lost", "charge.dispute.closed", "lost"),
    ] {
        deliver(
            &app,
            &stripe_event(event_id, event_type, dispute("dp_lost", lost, status)),
        )
        .await;
    }
    assert_eq!(balance().await, Micros(10_000_000));

    // Won before its creation arrived (Stripe's order is not promised):
    // nothing was taken, so nothing is given back, and the late creation
    // takes nothing.
    let early = top_up(&app, &fake, key, "10.00").await;
    let early = early["payment_intent"].as_str().unwrap();
    for (event_id, event_type, status) in [
        ("evt_early_won", "charge.dispute.closed", "won"),
        (
            "evt_early_opened",
            "charge.dispute.created",
            "needs_response",
        ),
    ] {
        deliver(
            &app,
            &stripe_event(event_id, event_type, dispute("dp_early", early, status)),
        )
        .await;
    }
    assert_eq!(balance().await, Micros(20_000_000));
    app.assert_ledger_invariant(account_id).await;
}

/// Issue 50: Stripe does not promise order, and a completion whose first
/// delivery failed arrives late, so a refund or a dispute can come before the
/// credit of its payment. Whatever the order, the account ends where it would
/// have ended in order.
async fn take_backs_that_arrive_before_their_credit_wait_for_it(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let customer = app.new_account(0).await;
    let key = customer.api_key.as_str();
    let account_id = customer.account.id.as_str();
    let balance = || async { app.account_state(account_id).await.shown_balance() };

    // A full refund of $20, then the completion: nothing is kept.
    let refunded_session = start_checkout(&app, key, "20.00").await;
    let refunded = fake.pay(&refunded_session);
    let refunded_intent = refunded["payment_intent"].as_str().unwrap();
    let early_refund = stripe_event(
        "evt_early_refund",
        "charge.refunded",
        charge(refunded_intent, 2000),
    );
    deliver(&app, &early_refund).await;
    assert_eq!(balance().await, Micros::ZERO, "nothing to take back yet");
    deliver(&app, &completed_event("evt_late_completion", &refunded)).await;
    assert_eq!(balance().await, Micros::ZERO, "credited and refunded");
    // The refund again, now that the payment is known: nothing more.
    deliver(&app, &early_refund).await;
    assert_eq!(balance().await, Micros::ZERO);

    // A chargeback of $50, then the completion: nothing is kept.
    let disputed_session = start_checkout(&app, key, "50.00").await;
    let disputed = fake.pay(&disputed_session);
    let disputed_intent = disputed["payment_intent"].as_str().unwrap();
    let mut chargeback = dispute("dp_early", disputed_intent, "needs_response");
    chargeback["amount"] = json!(5000);
    deliver(
        &app,
        &stripe_event("evt_early_dispute", "charge.dispute.created", chargeback),
    )
    .await;
    assert_eq!(balance().await, Micros::ZERO);
    deliver(&app, &completed_event("evt_late_disputed", &disputed)).await;
    assert_eq!(balance().await, Micros::ZERO, "credited and disputed");

    // A $5 refund, a dispute of $10 opened and won, all before the
    // completion of a $30 payment: $25 is kept, as in order.
    let mixed_session = start_checkout(&app, key, "30.00").await;
    let mixed = fake.pay(&mixed_session);
    let mixed_intent = mixed["payment_intent"].as_str().unwrap();
    for (event_id, event_type, object) in [
        (
            "evt_mixed_refund",
            "charge.refunded",
            charge(mixed_intent, 500),
        ),
        (
            "evt_mixed_opened",
            "charge.dispute.created",
            dispute("dp_mixed", mixed_intent, "needs_response"),
        ),
        (
            "evt_mixed_won",
            "charge.dispute.closed",
            dispute("dp_mixed", mixed_intent, "won"),
        ),
    ] {
        deliver(&app, &stripe_event(event_id, event_type, object)).await;
    }
    assert_eq!(balance().await, Micros::ZERO);
    deliver(&app, &completed_event("evt_late_mixed", &mixed)).await;
    assert_eq!(balance().await, Micros(25_000_000));
    // The completion again credits nothing and applies nothing twice.
    deliver(&app, &completed_event("evt_late_mixed_again", &mixed)).await;
    assert_eq!(balance().await, Micros(25_000_000));
    app.assert_ledger_invariant(account_id).await;
    // Every take-back is in the ledger with the event that caused it.
    let entries = app.server.store.ledger().entries(account_id).await.unwrap();
    for event_id in ["evt_early_refund", "evt_early_dispute", "evt_mixed_refund"] {
        assert!(
            entries.iter().any(|entry| entry.kind == "debit"
                && entry
                    .reference
                    .as_deref()
                    .is_some_and(|reference| reference.contains(event_id))),
            "{event_id}: {entries:?}"
        );
    }
}

/// Issue 50: a paid session of another product on the same Stripe account
/// credits nothing, even when it names an account of vidgate's.
async fn a_paid_session_vidgate_did_not_make_credits_nothing(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let account_id = app.account.account.id.clone();
    // Another product's server makes a $2,500 session with the secret key.
    let form = [
        ("mode", "payment"),
        ("line_items[0][price_data][currency]", "usd"),
        ("line_items[0][price_data][unit_amount]", "250000"),
        ("line_items[0][price_data][product_data][name]", "a sofa"),
        ("line_items[0][quantity]", "1"),
        ("client_reference_id", account_id.as_str()),
        ("success_url", "https://shop.example/done"),
        ("cancel_url", "https://shop.example/cart"),
    ];
    let created: Value = reqwest::Client::new()
        .post(format!("{}/v1/checkout/sessions", fake.base_url))
        .bearer_auth(STRIPE_SECRET_KEY)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish(),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let foreign = fake.pay(created["id"].as_str().unwrap());
    assert_eq!(foreign["amount_total"], json!(250000), "{foreign}");
    deliver(&app, &completed_event("evt_foreign_session", &foreign)).await;
    assert_eq!(
        app.account_state(&account_id).await.balance,
        Micros(100_000_000)
    );
    // The same account's own top-up still credits.
    top_up(&app, &fake, app.key(), "20.00").await;
    assert_eq!(
        app.account_state(&account_id).await.balance,
        Micros(120_000_000)
    );
    app.assert_ledger_invariant(&account_id).await;
}

/// Issue 50: an inquiry (`warning_needs_response`) takes the money back in
/// case it becomes a chargeback; closed without one (`warning_closed`), it
/// gives it back once.
async fn an_inquiry_closed_without_a_chargeback_gives_the_money_back(store: StoreKind) {
    let (app, fake) = app_with_stripe(store).await;
    let customer = app.new_account(0).await;
    let key = customer.api_key.as_str();
    let account_id = customer.account.id.as_str();
    let paid = top_up(&app, &fake, key, "10.00").await;
    let intent = paid["payment_intent"].as_str().unwrap();
    deliver(
        &app,
        &stripe_event(
            "evt_inquiry",
            "charge.dispute.created",
            dispute("dp_inquiry", intent, "warning_needs_response"),
        ),
    )
    .await;
    assert_eq!(
        app.account_state(account_id).await.shown_balance(),
        Micros::ZERO
    );
    for event_id in ["evt_inquiry_closed", "evt_inquiry_closed_again"] {
        deliver(
            &app,
            &stripe_event(
                event_id,
                "charge.dispute.closed",
                dispute("dp_inquiry", intent, "warning_closed"),
            ),
        )
        .await;
        assert_eq!(
            app.account_state(account_id).await.shown_balance(),
            Micros(10_000_000),
            "{event_id}"
        );
    }
    app.assert_ledger_invariant(account_id).await;
}

/// The fake checked with the client Stripe wrote: the official Python
/// package `stripe` creates, replays and reads a Checkout Session through
/// it (`tests/stripe_client.py`), and signs an event, which must be the
/// header `stripe_signature` makes and which vidgate must accept. It runs
/// when `VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON` names a Python with the
/// package (`.ci/run` installs it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripes_own_client_works_against_the_fake() {
    let Some(python) = crate::providers::program_named_by(
        "VIDGATE_TEST_PROVIDER_CLIENTS_PYTHON",
        "a Python with the stripe package to check the fake with Stripe's own client",
    ) else {
        return;
    };
    let (app, fake) = app_with_stripe(StoreKind::Sqlite).await;
    let account_id = app.account.account.id.clone();
    let session_id = start_checkout(&app, app.key(), "20.00").await;
    let payload = completed_event("evt_signed_by_python", &fake.pay(&session_id));
    let timestamp = now_seconds();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stripe_client.py");
    let mut command = std::process::Command::new(python);
    command
        .arg(script)
        .arg(&fake.base_url)
        .arg(STRIPE_SECRET_KEY)
        .arg(&account_id)
        .arg(STRIPE_WEBHOOK_SECRET)
        .arg(&payload)
        .arg(timestamp.to_string());
    let (status, printed) = crate::providers::run_program(command, "the Python runs").await;
    assert!(status.success(), "{printed}");
    assert!(
        printed.contains("stripe: create, replay, retrieve, errors: ok"),
        "{printed}"
    );
    let python_header = printed
        .lines()
        .find_map(|line| line.strip_prefix("signature: "))
        .expect("the script prints the header");
    assert_eq!(
        python_header,
        stripe_signature(&payload, STRIPE_WEBHOOK_SECRET, timestamp)
    );
    let response = send_signed(&app, &payload, Some(python_header)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        app.account_state(&account_id).await.balance,
        Micros(120_000_000)
    );
}
