//! The operator's actions (`operator_actions`), which the CLI and the
//! operator API both call, make each change in one transaction with its
//! audit row: when the audit row cannot be written, the change is not kept
//! either. The test makes the database itself refuse audit rows (a trigger
//! on the test's own database), so the failure is a real one between the
//! change and its audit line.

use std::time::Duration;

use sqlx::{Connection, PgConnection, SqliteConnection};
use vidgate_core::{Catalog, Micros};
use vidgate_server::application::accounts;
use vidgate_server::application::users as dashboard_users;
use vidgate_server::operator_actions::{
    OperatorActionError, accounts as account_actions, keys, models, users,
};
use vidgate_server::store::{AdjustmentKind, NewSession, Store, now_millis};

use crate::common::{StoreKind, TestDatabase, on_both_stores, open_test_store};

const ACTOR: &str = "ada@ops";
/// What a test session's token digest is.
const SESSION_TOKEN_SHA256: &str = "session-token-digest";
const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Makes every insert into the audit log fail, as a full disk or a broken
/// connection between the change and its audit row would.
async fn refuse_audit_rows(database: &TestDatabase) {
    match database {
        TestDatabase::Sqlite(_) => {
            let mut connection = SqliteConnection::connect(&database.url()).await.unwrap();
            sqlx::query(
                "CREATE TRIGGER refuse_audit_rows BEFORE INSERT ON audit_log \
                 BEGIN SELECT RAISE(ABORT, 'the test refuses audit rows'); END",
            )
            .execute(&mut connection)
            .await
            .unwrap();
        }
        TestDatabase::Postgres(postgres) => {
            let mut connection = PgConnection::connect(&postgres.url).await.unwrap();
            for statement in [
                "CREATE FUNCTION refuse_audit_rows() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'the test refuses audit rows'; END $$",
                "CREATE TRIGGER refuse_audit_rows BEFORE INSERT ON audit_log \
                 FOR EACH ROW EXECUTE FUNCTION refuse_audit_rows()",
            ] {
                sqlx::query(statement)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        }
    }
}

/// Lets audit rows be written again.
async fn accept_audit_rows(database: &TestDatabase) {
    match database {
        TestDatabase::Sqlite(_) => {
            let mut connection = SqliteConnection::connect(&database.url()).await.unwrap();
            sqlx::query("DROP TRIGGER refuse_audit_rows")
                .execute(&mut connection)
                .await
                .unwrap();
        }
        TestDatabase::Postgres(postgres) => {
            let mut connection = PgConnection::connect(&postgres.url).await.unwrap();
            sqlx::query("DROP TRIGGER refuse_audit_rows ON audit_log")
                .execute(&mut connection)
                .await
                .unwrap();
        }
    }
}

/// The action failed on the store (the refused audit row), not on a check
/// of its own.
fn assert_refused_by_the_store<T>(result: Result<T, OperatorActionError>, action: &str) {
    match result {
        Err(OperatorActionError::Store(_)) => {}
        Err(other) => panic!("{action} was refused before the audit row: {other}"),
        Ok(_) => panic!("{action} succeeded although its audit row was refused"),
    }
}

async fn sign_in(store: &Store, user_id: &str, account_id: &str) {
    store
        .users()
        .create_session(&NewSession {
            id: "session_1".into(),
            token_sha256: SESSION_TOKEN_SHA256.into(),
            user_id: user_id.into(),
            account_id: account_id.into(),
            csrf_token: "csrf".into(),
            expires_at: now_millis() + 3_600_000,
        })
        .await
        .unwrap();
}

async fn a_change_whose_audit_row_fails_is_not_kept(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    let catalog = Catalog::embedded();
    let account = accounts::create_account(store, "acme", Micros(5_000_000))
        .await
        .unwrap();
    let account_id = account.account.id.clone();
    let kept_user = dashboard_users::create_user(store, &account_id, "kept@example.com", None)
        .await
        .unwrap();
    sign_in(store, &kept_user.user.id, &account_id).await;
    let accounts_before = store.accounts().count().await.unwrap();
    refuse_audit_rows(&test_store.database).await;

    assert_refused_by_the_store(
        account_actions::create(store, ACTOR, "refused", Micros(1_000_000)).await,
        "account create",
    );
    assert_eq!(store.accounts().count().await.unwrap(), accounts_before);

    for kind in [AdjustmentKind::Credit, AdjustmentKind::Debit] {
        let request = account_actions::AdjustmentRequest {
            account_id: &account_id,
            kind,
            amount: Micros(1_000_000),
            reason: "refused",
            idempotency_key: kind.as_str(),
        };
        assert_refused_by_the_store(
            account_actions::adjust_credit(store, ACTOR, request).await,
            kind.as_str(),
        );
    }
    let limits = account_actions::LimitChanges {
        requests_per_second: Some(1),
        burst: Some(1),
        max_concurrent: Some(1),
    };
    assert_refused_by_the_store(
        account_actions::set_limits(store, ACTOR, &account_id, limits).await,
        "account limits",
    );
    assert_refused_by_the_store(
        account_actions::rotate_webhook_secret(store, ACTOR, &account_id).await,
        "account rotate-webhook-secret",
    );
    // A threshold above the balance would also write the event's delivery:
    // neither it nor the alert is kept.
    assert_refused_by_the_store(
        account_actions::set_low_balance_alert(
            store,
            ACTOR,
            &account_id,
            Some("50.00"),
            Some("https://hooks.example/low"),
        )
        .await,
        "account low-balance",
    );
    assert!(
        store
            .webhook_log()
            .recent_deliveries(&account_id, 10)
            .await
            .unwrap()
            .is_empty(),
        "the low-balance event outlives its refused change"
    );
    assert_refused_by_the_store(
        account_actions::delete(store, ACTOR, &account_id).await,
        "account delete",
    );
    assert_eq!(
        store.accounts().get(&account_id).await.unwrap().unwrap(),
        account.account
    );

    assert_refused_by_the_store(
        keys::create(store, ACTOR, &account_id, Some("refused")).await,
        "key create",
    );
    assert_refused_by_the_store(
        keys::revoke(store, ACTOR, &account.key_id).await,
        "key revoke",
    );
    assert_refused_by_the_store(
        keys::set_spend_limit(store, ACTOR, &account.key_id, Some("1.00"), Some("day")).await,
        "key limit",
    );
    let keys_left = store.accounts().api_keys(&account_id).await.unwrap();
    assert_eq!(keys_left.len(), 1);
    assert_eq!(keys_left[0].id, account.key_id);
    assert_eq!(keys_left[0].revoked_at, None);
    assert_eq!(keys_left[0].spend_limit, None);

    assert_refused_by_the_store(
        models::set_paused(store, &catalog, ACTOR, "vendor_1/model_1", true).await,
        "model pause",
    );
    assert!(
        !store
            .accounts()
            .is_model_paused("vendor_1/model_1")
            .await
            .unwrap()
    );

    assert_refused_by_the_store(
        users::create(store, ACTOR, &account_id, "refused@example.com", None).await,
        "user create",
    );
    assert_eq!(
        store.users().by_email("refused@example.com").await.unwrap(),
        None
    );
    assert_refused_by_the_store(
        users::revoke_sessions(store, ACTOR, "kept@example.com").await,
        "user revoke-sessions",
    );
    assert_refused_by_the_store(
        users::remove(store, ACTOR, "kept@example.com").await,
        "user remove",
    );
    assert_eq!(
        store.users().by_email("kept@example.com").await.unwrap(),
        Some(kept_user.user)
    );
    assert!(
        store
            .users()
            .session(SESSION_TOKEN_SHA256, IDLE_TIMEOUT)
            .await
            .unwrap()
            .is_some(),
        "the session outlives a revocation whose audit row failed"
    );
    assert!(
        store
            .operator()
            .audit_log(None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // With audit rows accepted again, the same action is kept with its row:
    // the refusal above was the audit row's, not the action's own.
    accept_audit_rows(&test_store.database).await;
    models::set_paused(store, &catalog, ACTOR, "vendor_1/model_1", true)
        .await
        .unwrap();
    assert!(
        store
            .accounts()
            .is_model_paused("vendor_1/model_1")
            .await
            .unwrap()
    );
    let log = store.operator().audit_log(None, 10).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].action, "model.pause");
    assert_eq!(log[0].actor, ACTOR);
}

/// An action refused by its own checks writes no audit row either, and the
/// CLI's and the operator API's refusals are one set of errors.
async fn a_refused_action_writes_no_audit_row(kind: StoreKind) {
    let test_store = open_test_store(&kind).await;
    let store = test_store.store.as_ref();
    let refusal = keys::revoke(store, ACTOR, "key_missing").await;
    assert!(
        matches!(refusal, Err(OperatorActionError::KeyNotFound(ref key_id)) if key_id == "key_missing"),
        "{refusal:?}"
    );
    let refusal = users::remove(store, ACTOR, "Nobody@Example.com").await;
    assert!(
        matches!(refusal, Err(OperatorActionError::UserNotFound(ref email)) if email == "nobody@example.com"),
        "{refusal:?}"
    );
    let refusal = account_actions::show(store, "acct_missing").await;
    assert!(
        matches!(refusal, Err(OperatorActionError::AccountNotFound(_))),
        "{refusal:?}"
    );
    assert!(
        store
            .operator()
            .audit_log(None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

on_both_stores!(
    a_change_whose_audit_row_fails_is_not_kept,
    a_refused_action_writes_no_audit_row
);
