//! Money limits below the HTTP layer, on both stores: a debt refuses every
//! submit, a free one too, and reports the negative balance; the
//! low-balance alert is raised once per downward crossing, by any movement
//! of money (PostgreSQL's holds are its submit function's) or by a new
//! threshold, and re-armed when the balance is back at the threshold; at
//! most one alert waits per account, and the senders' claims let accounts
//! take turns, so one account's deliveries never wait behind another's.

use std::time::Duration;
use vidgate_core::Micros;

use vidgate_server::store::{
    AttemptOutcome, AttemptRecord, CancelOutcome, ClaimedDelivery, DeliverySubject,
    LowBalanceSetting, SenderFairness, Store, StripeCredit, StripeTakeBack, StripeTakeBackKind,
    SubmitRefusal,
};

use crate::common::{
    StoreKind, create_store_account, new_test_generation, on_both_stores, open_test_store,
};

on_both_stores!(
    a_debt_refuses_even_a_free_submit_and_reports_the_negative_balance,
    the_alert_is_raised_once_per_crossing_and_re_armed_at_the_threshold,
    a_threshold_above_the_balance_raises_the_alert_at_once,
    a_threshold_set_and_removed_in_a_loop_leaves_one_pending_alert,
    one_account_s_due_deliveries_do_not_hold_back_another_account_s,
);

const HOOK: &str = "https://hooks.example/low-balance";

fn alert(threshold_usd_cents: i64, webhook_url: Option<&str>) -> LowBalanceSetting {
    LowBalanceSetting {
        threshold: Some(Micros::from_usd_cents(threshold_usd_cents)),
        webhook_url: webhook_url.map(str::to_owned),
    }
}

/// Holds `price` for a new generation `id`, which must be accepted.
async fn hold(store: &Store, account_id: &str, id: &str, price: Micros) {
    store
        .generations()
        .submit(new_test_generation(
            id,
            account_id,
            "vendor_1/model_1",
            price,
        ))
        .await
        .unwrap_or_else(|refusal| panic!("{id} was refused: {refusal}"));
}

/// The account's `account.balance_low` deliveries, oldest first.
async fn balance_low_events(store: &Store, account_id: &str) -> usize {
    let deliveries = store
        .webhook_log()
        .recent_deliveries(account_id, 50)
        .await
        .unwrap();
    assert!(
        deliveries.iter().all(|found| found.generation_id.is_none()
            && found.delivery.event_type == "account.balance_low"
            && found.delivery.url == HOOK),
        "{deliveries:?}"
    );
    deliveries.len()
}

async fn a_debt_refuses_even_a_free_submit_and_reports_the_negative_balance(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    create_store_account(store, "acct_debtor", Micros::ZERO).await;
    store
        .stripe_payments()
        .record_checkout_session("cs_1", "acct_debtor", Micros(5_000_000))
        .await
        .unwrap();
    store
        .stripe_payments()
        .credit_checkout(&StripeCredit {
            event_id: "evt_paid".into(),
            event_type: "checkout.session.completed".into(),
            checkout_session_id: "cs_1".into(),
            payment_intent_id: Some("pi_1".into()),
            paid: Micros(5_000_000),
        })
        .await
        .unwrap();
    hold(store, "acct_debtor", "gen_spent", Micros(3_000_000)).await;
    // The whole payment is refunded while $3 of it is held: $2 comes out
    // of the balance and $3 becomes the debt.
    store
        .stripe_payments()
        .take_back_payment(&StripeTakeBack {
            event_id: "evt_refund".into(),
            event_type: "charge.refunded".into(),
            payment_intent_id: "pi_1".into(),
            object_id: "ch_1".into(),
            kind: StripeTakeBackKind::Refund {
                refunded_in_total: Micros(5_000_000),
            },
        })
        .await
        .unwrap();
    let account = store.accounts().get("acct_debtor").await.unwrap().unwrap();
    assert_eq!(account.shown_balance(), Micros(-3_000_000));

    for (id, price) in [("gen_free", Micros::ZERO), ("gen_paid", Micros(10_000))] {
        match store
            .generations()
            .submit(new_test_generation(
                id,
                "acct_debtor",
                "vendor_1/model_1",
                price,
            ))
            .await
        {
            Err(SubmitRefusal::InsufficientBalance {
                balance,
                price: refused,
            }) => {
                assert_eq!(balance, Micros(-3_000_000), "{id} reports the debt");
                assert_eq!(refused, price);
            }
            other => panic!("{id} in debt: {other:?}"),
        }
    }
    assert_eq!(
        store.accounts().get("acct_debtor").await.unwrap().unwrap(),
        account,
        "a refused submit changes nothing"
    );
}

async fn the_alert_is_raised_once_per_crossing_and_re_armed_at_the_threshold(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    create_store_account(store, "acct_low", Micros(10_000_000)).await;
    let account = store
        .accounts()
        .set_low_balance_alert("acct_low", &alert(500, Some(HOOK)))
        .await
        .unwrap()
        .unwrap();
    assert!(!account.low_balance_alert.unwrap().raised);
    assert_eq!(balance_low_events(store, "acct_low").await, 0);

    // $10 → $7: above. $7 → $4: the crossing. $4 → $3: still below.
    hold(store, "acct_low", "gen_1", Micros(3_000_000)).await;
    assert_eq!(balance_low_events(store, "acct_low").await, 0);
    hold(store, "acct_low", "gen_2", Micros(3_000_000)).await;
    assert_eq!(balance_low_events(store, "acct_low").await, 1);
    hold(store, "acct_low", "gen_3", Micros(1_000_000)).await;
    assert_eq!(balance_low_events(store, "acct_low").await, 1);
    let account = store.accounts().get("acct_low").await.unwrap().unwrap();
    assert!(account.is_below_low_balance_threshold());
    assert!(account.low_balance_alert.unwrap().raised);

    // A cancel's release to $4 stays below; a credit to exactly $5 re-arms
    // the alert without an event; the next hold crosses again.
    assert!(
        store
            .generations()
            .cancel("acct_low", "gen_3")
            .await
            .is_ok()
    );
    assert_eq!(balance_low_events(store, "acct_low").await, 1);
    store
        .ledger()
        .credit("acct_low", Micros(1_000_000))
        .await
        .unwrap();
    let account = store.accounts().get("acct_low").await.unwrap().unwrap();
    assert_eq!(account.shown_balance(), Micros(5_000_000));
    assert!(!account.low_balance_alert.unwrap().raised);
    assert_eq!(balance_low_events(store, "acct_low").await, 1);
    // The next hold crosses again, but the first event still waits to be
    // sent: no second one is written beside it.
    hold(store, "acct_low", "gen_4", Micros(10_000)).await;
    assert!(
        store
            .accounts()
            .get("acct_low")
            .await
            .unwrap()
            .unwrap()
            .low_balance_alert
            .unwrap()
            .raised
    );
    assert_eq!(balance_low_events(store, "acct_low").await, 1);

    // Once it is sent, the next crossing writes its own. The senders read
    // each event's data as it was fixed at its crossing.
    let first = claim(store, "test-1").await.expect("the alert is due");
    assert_eq!(alert_balance(&first), 4_000_000);
    delivered(store, &first, "test-1").await;
    store
        .ledger()
        .credit("acct_low", Micros(10_000))
        .await
        .unwrap();
    hold(store, "acct_low", "gen_5", Micros(20_000)).await;
    assert_eq!(balance_low_events(store, "acct_low").await, 2);
    let second = claim(store, "test-2").await.expect("the alert is due");
    assert_eq!(alert_balance(&second), 4_980_000);
}

/// Senders of one group that may each hold many deliveries of an account,
/// so only the order of the claims is tested.
fn senders() -> SenderFairness {
    SenderFairness {
        sender_group: "test".into(),
        max_in_flight_per_account: 100,
    }
}

async fn claim(store: &Store, sender: &str) -> Option<ClaimedDelivery> {
    store
        .webhooks()
        .claim_delivery(sender, Duration::from_secs(60), &senders())
        .await
        .unwrap()
}

/// Records `claimed`'s attempt by `sender` as delivered.
async fn delivered(store: &Store, claimed: &ClaimedDelivery, sender: &str) {
    let attempt = AttemptRecord {
        started_at: 0,
        duration_ms: 1,
        status_code: Some(200),
        error: None,
        response_body: None,
    };
    assert!(
        store
            .webhooks()
            .record_attempt(&claimed.id, sender, &attempt, AttemptOutcome::Delivered)
            .await
            .unwrap()
    );
}

/// The balance an `account.balance_low` delivery reports.
fn alert_balance(claimed: &ClaimedDelivery) -> i64 {
    let DeliverySubject::Account { data, .. } = &claimed.subject else {
        panic!("an account event was claimed as a generation's");
    };
    assert_eq!(data["threshold_micros"], 5_000_000);
    data["balance_micros"].as_i64().unwrap()
}

/// Setting and removing a threshold above the balance crosses it each time;
/// while the first crossing's event waits to be sent, no other is written,
/// and once it is sent the next crossing writes one again.
async fn a_threshold_set_and_removed_in_a_loop_leaves_one_pending_alert(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    create_store_account(store, "acct_empty", Micros::ZERO).await;
    let removed = LowBalanceSetting {
        threshold: None,
        webhook_url: None,
    };
    for _ in 0..20 {
        let account = store
            .accounts()
            .set_low_balance_alert("acct_empty", &alert(500, Some(HOOK)))
            .await
            .unwrap()
            .unwrap();
        assert!(account.low_balance_alert.unwrap().raised);
        store
            .accounts()
            .set_low_balance_alert("acct_empty", &removed)
            .await
            .unwrap();
    }
    assert_eq!(balance_low_events(store, "acct_empty").await, 1);

    let sent = claim(store, "test-1").await.expect("the alert is due");
    delivered(store, &sent, "test-1").await;
    store
        .accounts()
        .set_low_balance_alert("acct_empty", &alert(500, Some(HOOK)))
        .await
        .unwrap();
    assert_eq!(balance_low_events(store, "acct_empty").await, 2);
}

/// Writes a `generation.canceled` delivery to `url` for a new generation
/// of `account_id`.
async fn canceled_with_webhook(store: &Store, account_id: &str, id: &str, url: &str) {
    let mut generation = new_test_generation(id, account_id, "vendor_1/model_1", Micros::ZERO);
    generation.webhook_url = Some(url.to_owned());
    store.generations().submit(generation).await.unwrap();
    assert!(matches!(
        store.generations().cancel(account_id, id).await.unwrap(),
        CancelOutcome::Canceled(_)
    ));
}

/// A busy account's twenty due deliveries, written first, hold a quiet
/// account's one back by at most one claim: the senders take the accounts
/// in turns, not the outbox in the order it was written.
async fn one_account_s_due_deliveries_do_not_hold_back_another_account_s(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    create_store_account(store, "acct_busy", Micros::ZERO).await;
    create_store_account(store, "acct_quiet", Micros::ZERO).await;
    for index in 0..20 {
        canceled_with_webhook(store, "acct_busy", &format!("gen_busy_{index}"), HOOK).await;
    }
    canceled_with_webhook(store, "acct_quiet", "gen_quiet", HOOK).await;

    let mut claimed_for = Vec::new();
    for sender in ["test-1", "test-2"] {
        let claimed = claim(store, sender).await.expect("deliveries are due");
        claimed_for.push(claimed.subject.generation_id().unwrap().to_owned());
        delivered(store, &claimed, sender).await;
    }
    assert!(
        claimed_for.iter().any(|id| id == "gen_quiet"),
        "the quiet account waited behind the busy one: {claimed_for:?}"
    );
    // The busy account's deliveries are all still sent.
    let mut rest = 0;
    while let Some(claimed) = claim(store, "test-3").await {
        delivered(store, &claimed, "test-3").await;
        rest += 1;
    }
    assert_eq!(rest, 19);
}

async fn a_threshold_above_the_balance_raises_the_alert_at_once(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    create_store_account(store, "acct_quiet", Micros(1_000_000)).await;
    create_store_account(store, "acct_loud", Micros(1_000_000)).await;

    // Without a URL the alert is raised (the dashboard warns) and nothing
    // is sent.
    let quiet = store
        .accounts()
        .set_low_balance_alert("acct_quiet", &alert(500, None))
        .await
        .unwrap()
        .unwrap();
    assert!(quiet.is_below_low_balance_threshold());
    assert!(quiet.low_balance_alert.unwrap().raised);
    assert_eq!(balance_low_events(store, "acct_quiet").await, 0);

    let loud = store
        .accounts()
        .set_low_balance_alert("acct_loud", &alert(500, Some(HOOK)))
        .await
        .unwrap()
        .unwrap();
    assert!(loud.is_below_low_balance_threshold());
    assert_eq!(balance_low_events(store, "acct_loud").await, 1);
    // Setting it again while below sends nothing more; removing it re-arms.
    store
        .accounts()
        .set_low_balance_alert("acct_loud", &alert(400, Some(HOOK)))
        .await
        .unwrap();
    assert_eq!(balance_low_events(store, "acct_loud").await, 1);
    let removed = store
        .accounts()
        .set_low_balance_alert(
            "acct_loud",
            &LowBalanceSetting {
                threshold: None,
                webhook_url: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(removed.low_balance_alert, None);
    assert!(!removed.is_below_low_balance_threshold());
    assert_eq!(
        store
            .accounts()
            .set_low_balance_alert("acct_missing", &alert(500, None))
            .await
            .unwrap(),
        None
    );
}
