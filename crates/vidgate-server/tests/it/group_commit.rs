//! Group commit of submits: the submits a node has waiting go to the
//! database together, in one transaction, and each is still decided as if
//! it were alone, in arrival order. Every test runs on SQLite and on
//! PostgreSQL.
//!
//! To put submits in one batch for certain, a test holds back the store's
//! submits at the database (SQLite's write lock, or on PostgreSQL the row of
//! a pilot account), makes a pilot submit that the batch task then waits
//! on, makes the submits under test, which queue behind it, and lets go: the
//! task's next batch is exactly those submits. The tests run on tokio's
//! single-threaded test runtime, which polls spawned tasks in the order they
//! were spawned, so the submits arrive in the order they are made.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use sqlx::{Connection, PgConnection, SqliteConnection};
use vidgate_core::Micros;
use vidgate_server::store::{
    self, AccountLimits, IdempotencyKey, NewGeneration, Store, StoreError, SubmitOutcome,
    SubmitRefusal,
};

/// The price of every generation here.
const PRICE: Micros = Micros(100_000);

/// The account whose submit the held-back batch task waits on.
const PILOT_ACCOUNT: &str = "acct_pilot";

type Answer = Result<SubmitOutcome, SubmitRefusal>;

/// The account `id` with `credit` and at most `max_concurrent` generations
/// in progress.
async fn create_account(store: &Store, id: &str, credit: Micros, max_concurrent: u32) {
    create_store_account(store, id, credit).await;
    let limits = AccountLimits {
        max_concurrent,
        ..AccountLimits::default()
    };
    set_account_limits(store, id, limits).await;
}

fn new_generation(id: &str, account_id: &str) -> NewGeneration {
    new_test_generation(id, account_id, "vendor_1/model_1", PRICE)
}

/// A connection that keeps every submit of the store waiting until it is
/// dropped with its transaction.
enum HeldSubmits {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

async fn hold_submits(database: &TestDatabase) -> HeldSubmits {
    match database {
        TestDatabase::Sqlite(_) => {
            let mut connection = SqliteConnection::connect(&database.url()).await.unwrap();
            // The write lock: the store's next write transaction waits for it.
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut connection)
                .await
                .unwrap();
            HeldSubmits::Sqlite(connection)
        }
        TestDatabase::Postgres(postgres) => {
            let mut connection = PgConnection::connect(&postgres.url).await.unwrap();
            sqlx::query("BEGIN").execute(&mut connection).await.unwrap();
            // The pilot's account row: its submit waits for this lock.
            sqlx::query("SELECT id FROM accounts WHERE id = $1 FOR UPDATE")
                .bind(PILOT_ACCOUNT)
                .fetch_one(&mut connection)
                .await
                .unwrap();
            HeldSubmits::Postgres(connection)
        }
    }
}

async fn release(held: HeldSubmits) {
    match held {
        HeldSubmits::Sqlite(mut connection) => {
            sqlx::query("ROLLBACK")
                .execute(&mut connection)
                .await
                .unwrap();
            connection.close().await.unwrap();
        }
        HeldSubmits::Postgres(mut connection) => {
            sqlx::query("ROLLBACK")
                .execute(&mut connection)
                .await
                .unwrap();
            connection.close().await.unwrap();
        }
    }
}

/// A store with the pilot account, which has credit for every pilot submit.
async fn batch_test_store(store_kind: &StoreKind) -> TestStore {
    let test_store = open_test_store(store_kind).await;
    create_account(
        test_store.store.as_ref(),
        PILOT_ACCOUNT,
        Micros(100 * PRICE.0),
        100,
    )
    .await;
    test_store
}

/// Makes `generations`' submits as one batch (see the module comment) and
/// answers each, in the order given.
async fn submit_in_one_batch(
    test_store: &TestStore,
    generations: Vec<NewGeneration>,
) -> Vec<Answer> {
    let store = test_store.store.clone();
    let held = hold_submits(&test_store.database).await;
    let pilot = {
        let store = store.clone();
        let id = format!("gen_pilot_{}", generations[0].id);
        tokio::spawn(async move {
            store
                .generations()
                .submit(new_generation(&id, PILOT_ACCOUNT))
                .await
        })
    };
    // The batch task takes the pilot alone and waits on the database.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let submits: Vec<_> = generations
        .into_iter()
        .map(|generation| {
            let store = store.clone();
            tokio::spawn(async move { store.generations().submit(generation).await })
        })
        .collect();
    // Every submit is queued behind the pilot.
    tokio::time::sleep(Duration::from_millis(300)).await;
    release(held).await;
    assert!(
        matches!(pilot.await.unwrap(), Ok(SubmitOutcome::Created(_))),
        "the pilot submit is made"
    );
    let mut answers = Vec::new();
    for submit in submits {
        answers.push(submit.await.unwrap());
    }
    answers
}

/// Checks that the created answers went to the database in one batch: a
/// batch's generations are created at one instant.
fn assert_created_together(answers: &[Answer]) {
    let mut times: Vec<i64> = answers
        .iter()
        .filter_map(|answer| match answer {
            Ok(SubmitOutcome::Created(generation)) => Some(generation.created_at),
            _ => None,
        })
        .collect();
    times.dedup();
    assert_eq!(times.len(), 1, "the submits went in one batch: {times:?}");
}

/// The ledger invariant of an account, and its totals: the holds it holds
/// are `held_generations` generations' prices, taken from `credit`.
async fn check_ledger(store: &Store, account_id: &str, credit: Micros, held_generations: i64) {
    let account = store.accounts().get(account_id).await.unwrap().unwrap();
    let held = Micros(held_generations * PRICE.0);
    assert_eq!(account.held, held, "{account_id} holds");
    assert_eq!(account.balance, credit - held, "{account_id}'s balance");
    assert_eq!(
        account.credited,
        account.balance + account.held + account.captured
    );
    let entries = store.ledger().entries(account_id).await.unwrap();
    let holds: Vec<_> = entries
        .iter()
        .filter(|entry| entry.kind == "hold")
        .collect();
    assert_eq!(
        holds.len() as i64,
        held_generations,
        "{account_id}'s hold entries"
    );
    assert_eq!(
        holds.iter().map(|entry| entry.amount.0).sum::<i64>(),
        held.0
    );
    let generations = store
        .generations()
        .list(
            account_id,
            &store::ListFilter {
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(generations.len() as i64, held_generations);
    // Every hold entry names one of the account's generations, once.
    let mut held_ids: Vec<&str> = holds
        .iter()
        .map(|entry| entry.generation_id.as_deref().unwrap())
        .collect();
    held_ids.sort_unstable();
    let mut generation_ids: Vec<&str> = generations.iter().map(|g| g.id.as_str()).collect();
    generation_ids.sort_unstable();
    assert_eq!(held_ids, generation_ids);
}

/// Three accounts, each with a concurrency cap of N and credit for M holds
/// (and a remainder short of one more), 20 submits each, interleaved in one
/// batch: each admits exactly its first min(N, M) submits and refuses the
/// rest for the cap or the balance, whichever binds first.
async fn one_batch_admits_exactly_what_each_cap_and_balance_allow(store_kind: StoreKind) {
    let test_store = batch_test_store(&store_kind).await;
    let store = test_store.store.clone();
    // (account, cap N, holds M)
    let cases = [
        ("acct_cap", 5, 8),
        ("acct_balance", 8, 5),
        ("acct_even", 6, 6),
    ];
    let credit = |holds: i64| Micros(holds * PRICE.0 + PRICE.0 - 1);
    for (account, cap, holds) in cases {
        create_account(store.as_ref(), account, credit(holds), cap).await;
    }
    let mut generations = Vec::new();
    for index in 0..20 {
        for (account, _, _) in cases {
            let mut generation = new_generation(&format!("gen_{account}_{index:02}"), account);
            // Some bound request media, whose record is written with the
            // generation.
            if index % 3 == 0 {
                generation.media_binding = Some(json!({ "item": index }));
            }
            generations.push(generation);
        }
    }
    let submitted: Vec<(String, String)> = generations
        .iter()
        .map(|generation| (generation.id.clone(), generation.account_id.clone()))
        .collect();
    let answers = submit_in_one_batch(&test_store, generations).await;
    assert_created_together(&answers);

    for (account, cap, holds) in cases {
        let admitted = (cap as i64).min(holds);
        let mine = submitted
            .iter()
            .zip(&answers)
            .filter(|((_, account_id), _)| account_id == account);
        for (position, ((id, _), answer)) in mine.enumerate() {
            let position = position as i64;
            match answer {
                Ok(SubmitOutcome::Created(generation)) if position < admitted => {
                    // Each caller gets its own generation.
                    assert_eq!(&generation.id, id);
                    assert_eq!(generation.account_id, account);
                    let binding = store.generations().media(id).await.unwrap();
                    let expected = (position % 3 == 0).then(|| json!({ "item": position }));
                    assert_eq!(binding, expected, "{id}'s media binding");
                }
                Err(SubmitRefusal::ConcurrencyLimit { limit })
                    if position >= admitted && (cap as i64) <= holds =>
                {
                    assert_eq!(*limit, cap as i64);
                }
                Err(SubmitRefusal::InsufficientBalance { balance, price })
                    if position >= admitted && holds < cap as i64 =>
                {
                    assert_eq!((*balance, *price), (Micros(PRICE.0 - 1), PRICE));
                }
                other => panic!("{account}'s submit {position} ({id}): {other:?}"),
            }
        }
        check_ledger(store.as_ref(), account, credit(holds), admitted).await;
    }
}

/// The same idempotency key sent many times at once, as a client retrying
/// impatiently would: one generation and one hold, every same request
/// answered with it as a replay, a different request with the key refused.
async fn replays_of_one_key_in_one_batch_make_one_generation(store_kind: StoreKind) {
    let test_store = batch_test_store(&store_kind).await;
    let store = test_store.store.clone();
    let credit = Micros(50 * PRICE.0);
    create_account(store.as_ref(), "acct", credit, 50).await;
    create_account(store.as_ref(), "acct_other", credit, 50).await;
    let keyed = |id: &str, account: &str, digest: &str| NewGeneration {
        idempotency: Some(IdempotencyKey {
            key: "retry-me".into(),
            request_sha256: digest.into(),
        }),
        ..new_generation(id, account)
    };
    let mut generations = Vec::new();
    for index in 0..12 {
        // Another account's use of the same key is its own.
        let account = if index % 4 == 3 { "acct_other" } else { "acct" };
        let digest = if index == 5 {
            "another request"
        } else {
            "the request"
        };
        generations.push(keyed(&format!("gen_{index:02}"), account, digest));
    }
    let answers = submit_in_one_batch(&test_store, generations).await;
    assert_created_together(&answers);

    for (index, answer) in answers.iter().enumerate() {
        let (account, first) = if index % 4 == 3 {
            ("acct_other", "gen_03")
        } else {
            ("acct", "gen_00")
        };
        match answer {
            Ok(SubmitOutcome::Created(generation)) if generation.id == first => {}
            Ok(SubmitOutcome::Replayed(generation)) if generation.id == first && index != 5 => {
                assert_eq!(generation.account_id, account);
                assert_eq!(generation.input, json!({ "prompt": first }));
            }
            Err(SubmitRefusal::IdempotencyMismatch) if index == 5 => {}
            other => panic!("submit {index}: {other:?}"),
        }
    }
    check_ledger(store.as_ref(), "acct", credit, 1).await;
    check_ledger(store.as_ref(), "acct_other", credit, 1).await;
}

/// A batch in which one submit breaks a constraint of the database (its id
/// is taken): that submit fails, and every other submit of the batch is
/// made, refusals answered as refusals, the money exact.
async fn a_database_error_fails_only_its_own_submit(store_kind: StoreKind) {
    let test_store = batch_test_store(&store_kind).await;
    let store = test_store.store.clone();
    let credit = Micros(5 * PRICE.0);
    create_account(store.as_ref(), "acct", credit, 50).await;
    create_account(store.as_ref(), "acct_broke", Micros::ZERO, 50).await;
    let taken = store
        .generations()
        .submit(new_generation("gen_taken", "acct"))
        .await;
    assert!(matches!(taken, Ok(SubmitOutcome::Created(_))), "{taken:?}");

    let generations = vec![
        new_generation("gen_a", "acct"),
        new_generation("gen_refused", "acct_broke"),
        new_generation("gen_b", "acct"),
        // The generations' primary key refuses this one.
        new_generation("gen_taken", "acct"),
        new_generation("gen_c", "acct"),
        new_generation("gen_unknown_account", "acct_nobody"),
    ];
    let answers = submit_in_one_batch(&test_store, generations).await;
    for (index, answer) in answers.iter().enumerate() {
        match (index, answer) {
            (0 | 2 | 4, Ok(SubmitOutcome::Created(_))) => {}
            (1, Err(SubmitRefusal::InsufficientBalance { .. })) => {}
            (3, Err(SubmitRefusal::Store(StoreError::Database(_)))) => {}
            (5, Err(SubmitRefusal::AccountNotFound)) => {}
            other => panic!("{other:?}"),
        }
    }
    check_ledger(store.as_ref(), "acct", credit, 4).await;
    check_ledger(store.as_ref(), "acct_broke", Micros::ZERO, 0).await;
    // The taken generation is the first submit's, untouched.
    let first = store
        .generations()
        .get("acct", "gen_taken")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.input, json!({ "prompt": "gen_taken" }));

    // The next submit goes on as usual.
    let next = store
        .generations()
        .submit(new_generation("gen_d", "acct"))
        .await;
    assert!(matches!(next, Ok(SubmitOutcome::Created(_))), "{next:?}");
    check_ledger(store.as_ref(), "acct", credit, 5).await;
}

/// A traced submit keeps its `traceparent` with its generation, in a batch
/// beside untraced ones and alone, where the worker and the webhook
/// senders read it; an untraced one keeps none.
async fn each_submit_keeps_its_own_trace(store_kind: StoreKind) {
    let test_store = batch_test_store(&store_kind).await;
    let store = test_store.store.clone();
    create_account(store.as_ref(), "acct", Micros(50 * PRICE.0), 50).await;
    let traceparent = |index: usize| format!("00-{index:032x}-{index:016x}-01");
    let generations = (0..6)
        .map(|index| NewGeneration {
            traceparent: (index % 2 == 0).then(|| traceparent(index + 1)),
            ..new_generation(&format!("gen_{index:02}"), "acct")
        })
        .collect();
    let answers = submit_in_one_batch(&test_store, generations).await;
    assert_created_together(&answers);
    for index in 0..6 {
        let kept = store
            .generations()
            .traceparent(&format!("gen_{index:02}"))
            .await
            .unwrap();
        assert_eq!(
            kept,
            (index % 2 == 0).then(|| traceparent(index + 1)),
            "gen_{index:02}"
        );
    }
    store
        .generations()
        .submit(NewGeneration {
            traceparent: Some(traceparent(99)),
            ..new_generation("gen_alone", "acct")
        })
        .await
        .unwrap();
    assert_eq!(
        store.generations().traceparent("gen_alone").await.unwrap(),
        Some(traceparent(99))
    );
    assert_eq!(
        store.generations().traceparent("gen_none").await.unwrap(),
        None
    );
}

on_both_stores!(
    one_batch_admits_exactly_what_each_cap_and_balance_allow,
    replays_of_one_key_in_one_batch_make_one_generation,
    a_database_error_fails_only_its_own_submit,
    each_submit_keeps_its_own_trace,
);

/// A PostgreSQL transaction that holds the rows of `accounts` locked until
/// it is rolled back, as a submit of theirs would.
async fn lock_accounts(database_url: &str, accounts: &[&str]) -> PgConnection {
    let mut connection = PgConnection::connect(database_url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut connection).await.unwrap();
    for account in accounts {
        sqlx::query("SELECT id FROM accounts WHERE id = $1 FOR UPDATE")
            .bind(*account)
            .fetch_one(&mut connection)
            .await
            .unwrap();
    }
    connection
}

async fn unlock(mut connection: PgConnection) {
    sqlx::query("ROLLBACK")
        .execute(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
}

/// Two nodes on one PostgreSQL database start a batch at the same moment
/// for the same two accounts, each node's submits arriving in the opposite
/// account order to the other's. The batches lock the accounts in one
/// order, so one waits for the other and neither deadlocks. (Locked in
/// arrival order, each would take its first account and wait for the
/// other's: PostgreSQL would fail one batch, whose submits would then be
/// made one at a time, at different instants.)
#[tokio::test]
async fn two_nodes_batches_lock_accounts_in_one_order() {
    let Some(store_kind) = StoreKind::postgres("two_nodes_batches_lock_accounts_in_one_order")
    else {
        return;
    };
    let test_store = open_test_store(&store_kind).await;
    let TestDatabase::Postgres(database) = &test_store.database else {
        unreachable!("a PostgreSQL test store");
    };
    let nodes: [Arc<Store>; 2] = [
        test_store.store.clone(),
        store::open(&database.url).await.unwrap(),
    ];
    let pilots = ["acct_pilot_0", "acct_pilot_1"];
    let accounts = ["acct_1", "acct_2"];
    let credit = Micros(1_000 * PRICE.0);
    for account in pilots.iter().chain(&accounts) {
        create_account(nodes[0].as_ref(), account, credit, 100).await;
    }

    // Each node's batch task waits on its pilot's submit, while its 60
    // submits queue behind it.
    let pilots_held = lock_accounts(&database.url, &pilots).await;
    let pilot_submits: Vec<_> = nodes
        .iter()
        .zip(pilots)
        .map(|(node, pilot)| {
            let node = node.clone();
            tokio::spawn(async move {
                node.generations()
                    .submit(new_generation(&format!("gen_{pilot}"), pilot))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut submits = Vec::new();
    for (node_index, node) in nodes.iter().enumerate() {
        let mut order = accounts.to_vec();
        if node_index == 1 {
            order.reverse();
        }
        for account in order {
            for index in 0..30 {
                let node = node.clone();
                let id = format!("gen_{node_index}_{account}_{index:02}");
                submits.push((
                    node_index,
                    tokio::spawn(async move {
                        node.generations()
                            .submit(new_generation(&id, account))
                            .await
                    }),
                ));
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Both batches start and wait for the first account they lock; then
    // both go at once.
    let accounts_held = lock_accounts(&database.url, &accounts).await;
    unlock(pilots_held).await;
    for pilot in pilot_submits {
        assert!(matches!(
            pilot.await.unwrap(),
            Ok(SubmitOutcome::Created(_))
        ));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    unlock(accounts_held).await;

    let mut answers_by_node: [Vec<Answer>; 2] = [Vec::new(), Vec::new()];
    for (node_index, submit) in submits {
        answers_by_node[node_index].push(submit.await.unwrap());
    }
    for answers in &answers_by_node {
        assert!(
            answers
                .iter()
                .all(|answer| matches!(answer, Ok(SubmitOutcome::Created(_)))),
            "every submit is made: {answers:?}"
        );
        assert_created_together(answers);
    }
    for account in accounts {
        check_ledger(nodes[0].as_ref(), account, credit, 60).await;
    }
}
