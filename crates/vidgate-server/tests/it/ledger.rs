//! The ledger invariant under random sequences of store operations:
//! credited = balance + held + captured, nothing negative, and the ledger's
//! entries add up to the account's running totals. Also the queue's and the
//! limits' guarantees under concurrency. Every test runs on SQLite and on
//! PostgreSQL.

use crate::common;

use std::time::Duration;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::json;
use vidgate_core::Micros;
use vidgate_server::store::{
    self, ClaimableModels, FailureDetail, Generation, NewGeneration, Source, Store, StoredJson,
    SubmitOutcome,
};

#[derive(Debug, Clone)]
enum Operation {
    Credit(i64),
    Submit(i64),
    Claim,
    Succeed(usize),
    Fail(usize),
    Cancel(usize),
    HandBack(usize),
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        (1i64..5_000_000).prop_map(Operation::Credit),
        (1i64..3_000_000).prop_map(Operation::Submit),
        Just(Operation::Claim),
        (0usize..8).prop_map(Operation::Succeed),
        (0usize..8).prop_map(Operation::Fail),
        (0usize..8).prop_map(Operation::Cancel),
        (0usize..8).prop_map(Operation::HandBack),
    ]
}

async fn check_invariant(store: &Store, account_id: &str) {
    let account = store.accounts().get(account_id).await.unwrap().unwrap();
    assert!(
        !account.balance.is_negative()
            && !account.held.is_negative()
            && !account.captured.is_negative()
    );
    assert_eq!(
        account.credited,
        account.balance + account.held + account.captured
    );
    let entries = store.ledger().entries(account_id).await.unwrap();
    let sum = |kind: &str| {
        entries
            .iter()
            .filter(|entry| entry.kind == kind)
            .map(|entry| entry.amount.0)
            .sum::<i64>()
    };
    assert_eq!(sum("credit"), account.credited.0);
    assert_eq!(sum("capture"), account.captured.0);
    assert_eq!(
        sum("hold") - sum("capture") - sum("release"),
        account.held.0
    );
    // Every active generation is backed by exactly its hold.
    let all = store
        .generations()
        .list(
            account_id,
            &store::ListFilter {
                limit: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let held_by_active: i64 = all
        .iter()
        .filter(|g| g.status.is_active())
        .map(|g| g.price.0)
        .sum();
    assert_eq!(held_by_active, account.held.0);
}

async fn run_sequence(store_kind: &StoreKind, operations: Vec<Operation>) {
    let test_store = open_test_store(store_kind).await;
    let store = test_store.store.clone();
    let account_id = "acct_property".to_owned();
    create_store_account(&store, &account_id, Micros(2_000_000)).await;
    let mut generations: Vec<String> = Vec::new();
    let mut claimed: Vec<String> = Vec::new();
    let worker = "worker";
    for (step, operation) in operations.into_iter().enumerate() {
        match operation {
            Operation::Credit(amount) => {
                store
                    .ledger()
                    .credit(&account_id, Micros(amount))
                    .await
                    .unwrap();
            }
            Operation::Submit(price) => {
                let id = format!("gen_{step}");
                let submitted = store
                    .generations()
                    .submit(NewGeneration {
                        id: id.clone(),
                        account_id: account_id.clone(),
                        api_key_id: "key".into(),
                        model: "vendor_1/model_1".into(),
                        endpoint: "vendor_1/model_1/text-to-video".into(),
                        mode: "text-to-video".into(),
                        input: StoredJson::from_value(&json!({ "prompt": "x" })),
                        price: Micros(price),
                        official_price: Micros(price * 2),
                        webhook_url: None,
                        idempotency: None,
                        max_attempts: 3,
                        media_binding: None,
                        source: Source::Api,
                        traceparent: None,
                    })
                    .await;
                if let Ok(SubmitOutcome::Created(_)) = submitted {
                    generations.push(id);
                }
            }
            Operation::Claim => {
                if let Some(generation) = store
                    .queue()
                    .claim_next(worker, Duration::from_secs(60))
                    .await
                    .unwrap()
                {
                    claimed.push(generation.id);
                }
            }
            Operation::Succeed(index) => {
                if let Some(id) = claimed.get(index) {
                    store
                        .queue()
                        .finish_succeeded(id, worker, json!({}), None)
                        .await
                        .unwrap();
                }
            }
            Operation::Fail(index) => {
                if let Some(id) = claimed.get(index) {
                    let failure = FailureDetail {
                        code: "x".into(),
                        message: "x".into(),
                    };
                    store
                        .queue()
                        .finish_failed(id, worker, failure)
                        .await
                        .unwrap();
                }
            }
            Operation::Cancel(index) => {
                if let Some(id) = generations.get(index) {
                    store.generations().cancel(&account_id, id).await.unwrap();
                }
            }
            Operation::HandBack(index) => {
                if let Some(id) = claimed.get(index) {
                    store.queue().release_to_queue(id, worker).await.unwrap();
                }
            }
        }
        check_invariant(store.as_ref(), &account_id).await;
    }
}

/// Runs random operation sequences against fresh stores of one kind; a
/// failure is shrunk to the shortest sequence that breaks the invariant.
fn check_random_sequences(store_kind: StoreKind) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    let sequences = proptest::collection::vec(operation(), 1..40);
    let outcome = runner.run(&sequences, |operations| {
        runtime.block_on(run_sequence(&store_kind, operations));
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[test]
fn the_ledger_balances_after_every_operation_on_sqlite() {
    check_random_sequences(StoreKind::Sqlite);
}

#[test]
fn the_ledger_balances_after_every_operation_on_postgres() {
    if let Some(store_kind) = StoreKind::postgres("the_ledger_balances_after_every_operation") {
        check_random_sequences(store_kind);
    }
}

async fn an_expired_lease_is_requeued_then_failed_and_refunded_after_the_last_attempt(
    store_kind: StoreKind,
) {
    let test_store = open_test_store(&store_kind).await;
    let store = test_store.store.clone();
    create_account(store.as_ref(), Micros(1_000_000)).await;
    store
        .generations()
        .submit(NewGeneration {
            official_price: Micros(400_000),
            max_attempts: 2,
            media_binding: None,
            source: Source::Api,
            traceparent: None,
            ..new_generation("gen_lost", Micros(300_000))
        })
        .await
        .unwrap();
    for attempt in 1..=2 {
        let claimed = store
            .queue()
            .claim_next("dead-worker", Duration::from_millis(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claimed.attempts, attempt);
        tokio::time::sleep(Duration::from_millis(5)).await;
        // The dead worker's late result is refused once its lease expired and was rescued.
        let report = store.queue().rescue_expired_leases().await.unwrap();
        assert!(
            !store
                .queue()
                .finish_succeeded("gen_lost", "dead-worker", json!({}), None)
                .await
                .unwrap()
        );
        if attempt == 1 {
            assert_eq!(report.requeued, vec!["gen_lost".to_owned()]);
        } else {
            assert_eq!(report.failed, vec!["gen_lost".to_owned()]);
        }
    }
    let failed = store
        .generations()
        .get("acct", "gen_lost")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(failed.status, vidgate_core::GenerationStatus::Failed);
    assert_eq!(
        failed.error.unwrap().value().unwrap()["code"],
        "worker_lost"
    );
    let account = store.accounts().get("acct").await.unwrap().unwrap();
    assert_eq!((account.balance.0, account.held.0), (1_000_000, 0));
}

async fn two_workers_never_claim_the_same_job(store_kind: StoreKind) {
    let test_store = open_test_store(&store_kind).await;
    let store = test_store.store.clone();
    create_account(store.as_ref(), Micros(100_000_000)).await;
    for index in 0..30 {
        store
            .generations()
            .submit(new_generation(&format!("gen_{index:02}"), Micros(10_000)))
            .await
            .ok();
    }
    let mut claimers = tokio::task::JoinSet::new();
    for worker in 0..6 {
        let store = store.clone();
        claimers.spawn(async move {
            let mut mine = Vec::new();
            while let Some(generation) = store
                .queue()
                .claim_next(&format!("w{worker}"), Duration::from_secs(60))
                .await
                .unwrap()
            {
                mine.push(generation.id);
            }
            mine
        });
    }
    let mut all: Vec<String> = claimers.join_all().await.into_iter().flatten().collect();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "a job was claimed twice");
    assert_eq!(
        all.len(),
        20,
        "the concurrency limit admitted 20 of the 30 submits"
    );
}

/// The account every test below uses, "acct".
async fn create_account(store: &Store, credit: Micros) {
    create_store_account(store, "acct", credit).await;
}

/// A generation of "acct" on the model "m", with three attempts.
fn new_generation(id: &str, price: Micros) -> NewGeneration {
    new_test_generation(id, "acct", "m", price)
}

/// Submits `count` generations at once and returns how many were created.
async fn submit_concurrently(store: &std::sync::Arc<Store>, prefix: &str, count: usize) -> usize {
    let mut submits = tokio::task::JoinSet::new();
    for index in 0..count {
        let store = store.clone();
        let id = format!("gen_{prefix}_{index:02}");
        submits.spawn(async move {
            store
                .generations()
                .submit(new_generation(&id, Micros(100_000)))
                .await
        });
    }
    let outcomes = submits.join_all().await;
    for outcome in &outcomes {
        assert!(
            matches!(
                outcome,
                Ok(SubmitOutcome::Created(_))
                    | Err(store::SubmitRefusal::ConcurrencyLimit { .. })
                    | Err(store::SubmitRefusal::InsufficientBalance { .. })
            ),
            "{outcome:?}"
        );
    }
    outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Ok(SubmitOutcome::Created(_))))
        .count()
}

/// A generation of `model` for `account_id`, submitted.
async fn submit_of(store: &Store, account_id: &str, id: &str, model: &str) {
    let submitted = store
        .generations()
        .submit(NewGeneration {
            account_id: account_id.into(),
            model: model.into(),
            endpoint: format!("{model}/text-to-video"),
            ..new_generation(id, Micros(10_000))
        })
        .await
        .unwrap();
    assert!(matches!(submitted, SubmitOutcome::Created(_)));
}

/// The id of the job the next claim of any model takes.
async fn next_claimed(store: &Store) -> Option<String> {
    store
        .queue()
        .claim_next("worker", Duration::from_secs(60))
        .await
        .unwrap()
        .map(|generation: Generation| generation.id)
}

async fn accounts_take_turns_so_a_backlog_does_not_hold_back_another_account(
    store_kind: StoreKind,
) {
    let test_store = open_test_store(&store_kind).await;
    let store = test_store.store.as_ref();
    create_store_account(store, "big", Micros(100_000_000)).await;
    create_store_account(store, "small", Micros(100_000_000)).await;
    let raised = store::AccountLimits {
        max_concurrent: 100,
        ..store::AccountLimits::default()
    };
    set_account_limits(store, "big", raised).await;
    for index in 0..40 {
        submit_of(store, "big", &format!("big_{index:02}"), "m").await;
    }
    assert_eq!(next_claimed(store).await.as_deref(), Some("big_00"));
    // The turn is remembered when the job is done, so a worker that
    // finishes each job before the next claim is fair too.
    assert!(
        store
            .queue()
            .finish_succeeded("big_00", "worker", json!({}), None)
            .await
            .unwrap()
    );

    // The small account's one job is next, ahead of 39 older ones.
    submit_of(store, "small", "small_0", "m").await;
    assert_eq!(next_claimed(store).await.as_deref(), Some("small_0"));
    assert_eq!(next_claimed(store).await.as_deref(), Some("big_01"));

    // With both waiting, they take turns, each oldest first, however many
    // claims fall in one millisecond.
    for index in 1..=3 {
        submit_of(store, "small", &format!("small_{index}"), "m").await;
    }
    let mut claimed = Vec::new();
    for _ in 0..6 {
        claimed.push(next_claimed(store).await.unwrap());
    }
    assert_eq!(
        claimed,
        [
            "small_1", "big_02", "small_2", "big_03", "small_3", "big_04"
        ]
    );
    // Then the backlog drains.
    assert_eq!(next_claimed(store).await.as_deref(), Some("big_05"));
}

async fn a_claim_takes_only_the_models_it_is_given(store_kind: StoreKind) {
    let test_store = open_test_store(&store_kind).await;
    let store = test_store.store.as_ref();
    create_account(store, Micros(100_000_000)).await;
    submit_of(store, "acct", "hosted_0", "vendor/hosted").await;
    submit_of(store, "acct", "local_0", "vendor/local").await;
    submit_of(store, "acct", "hosted_1", "vendor/hosted").await;
    let hosted = ["vendor/hosted".to_owned()];
    let elsewhere = ["vendor/other".to_owned()];
    // Nothing to take: no model, or only other models' jobs.
    assert_eq!(claimed_among(store, ClaimableModels::Only(&[])).await, None);
    assert_eq!(
        claimed_among(store, ClaimableModels::Only(&elsewhere)).await,
        None
    );
    // The CPU workers' claim passes over the hosted jobs, older or not.
    assert_eq!(
        claimed_among(store, ClaimableModels::AllBut(&hosted))
            .await
            .as_deref(),
        Some("local_0")
    );
    assert_eq!(
        claimed_among(store, ClaimableModels::AllBut(&hosted)).await,
        None
    );
    // The hosted pool's claim takes them.
    assert_eq!(
        claimed_among(store, ClaimableModels::Only(&hosted))
            .await
            .as_deref(),
        Some("hosted_0")
    );
    assert_eq!(
        claimed_among(store, ClaimableModels::Only(&hosted))
            .await
            .as_deref(),
        Some("hosted_1")
    );
}

/// The id of the job a claim of `models` takes.
async fn claimed_among(store: &Store, models: ClaimableModels<'_>) -> Option<String> {
    store
        .queue()
        .claim_next_among("worker", Duration::from_secs(60), models)
        .await
        .unwrap()
        .map(|generation| generation.id)
}

async fn a_pools_heartbeat_extends_only_the_claims_in_flight(store_kind: StoreKind) {
    let test_store = open_test_store(&store_kind).await;
    let store = test_store.store.as_ref();
    create_account(store, Micros(100_000_000)).await;
    // `node_a/hosted/2` is a claim of the pool whose task ended without
    // recording its outcome, and `node_a/w0` a CPU worker's: neither is in
    // flight in the pool, so neither lease is kept.
    let owners = [
        "node_a/hosted/0",
        "node_a/hosted/1",
        "node_a/hosted/2",
        "node_a/w0",
    ];
    for (index, owner) in owners.iter().enumerate() {
        submit_of(store, "acct", &format!("gen_{index}"), "m").await;
        store
            .queue()
            .claim_next(owner, Duration::from_millis(1))
            .await
            .unwrap()
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Many claims in flight, more than one statement takes; one of them
    // (`node_a/hosted/9`) lost its job to the rescuer already.
    let mut in_flight: Vec<String> = (10..1200)
        .map(|claim| format!("node_a/hosted/{claim}"))
        .collect();
    in_flight.extend(["node_a/hosted/0", "node_a/hosted/9", "node_a/hosted/1"].map(String::from));
    let mut extended = store
        .queue()
        .extend_leases(&in_flight, Duration::from_secs(60))
        .await
        .unwrap();
    extended.sort();
    assert_eq!(extended, ["node_a/hosted/0", "node_a/hosted/1"]);
    let mut rescued = store
        .queue()
        .rescue_expired_leases()
        .await
        .unwrap()
        .requeued;
    rescued.sort();
    assert_eq!(rescued, ["gen_2", "gen_3"]);
}

async fn concurrent_submits_respect_the_cap_and_the_balance(store_kind: StoreKind) {
    let test_store = open_test_store(&store_kind).await;
    let store = test_store.store.clone();
    // Enough for 25 generations, so the cap of 20 is what refuses the rest.
    create_account(store.as_ref(), Micros(25 * 100_000)).await;
    assert_eq!(submit_concurrently(&store, "capped", 40).await, 20);
    check_invariant(store.as_ref(), "acct").await;

    // With the cap raised, the balance (five more generations) refuses the rest.
    let limits = store::AccountLimits {
        max_concurrent: 100,
        ..store::AccountLimits::default()
    };
    set_account_limits(&store, "acct", limits).await;
    assert_eq!(submit_concurrently(&store, "funded", 40).await, 5);
    let account = store.accounts().get("acct").await.unwrap().unwrap();
    assert_eq!((account.balance.0, account.held.0), (0, 25 * 100_000));
    check_invariant(store.as_ref(), "acct").await;
}

on_both_stores!(
    an_expired_lease_is_requeued_then_failed_and_refunded_after_the_last_attempt,
    two_workers_never_claim_the_same_job,
    concurrent_submits_respect_the_cap_and_the_balance,
    accounts_take_turns_so_a_backlog_does_not_hold_back_another_account,
    a_claim_takes_only_the_models_it_is_given,
    a_pools_heartbeat_extends_only_the_claims_in_flight,
);

/// A job submitted through one node's store wakes a worker waiting on
/// another node's store at once, instead of at its next poll.
#[tokio::test]
async fn postgres_announces_a_queued_job_to_every_node() {
    let Some(store_kind) = StoreKind::postgres("postgres_announces_a_queued_job_to_every_node")
    else {
        return;
    };
    let test_store = open_test_store(&store_kind).await;
    let submitting_node = test_store.store.clone();
    let TestDatabase::Postgres(database) = &test_store.database else {
        unreachable!("a PostgreSQL test store");
    };
    let waiting_node = store::open(&database.url).await.unwrap();
    create_account(submitting_node.as_ref(), Micros(1_000_000)).await;
    // The first wait starts listening; with nothing announced it times out.
    let started = std::time::Instant::now();
    waiting_node
        .queue()
        .wait_for_work(Duration::from_millis(300))
        .await;
    assert!(started.elapsed() >= Duration::from_millis(300));

    let waiter = tokio::spawn(async move {
        let started = std::time::Instant::now();
        waiting_node
            .queue()
            .wait_for_work(Duration::from_secs(20))
            .await;
        started.elapsed()
    });
    submitting_node
        .generations()
        .submit(new_generation("gen_announced", Micros(100_000)))
        .await
        .unwrap();
    let waited = waiter.await.unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "the wait ended only after {waited:?}"
    );
}
