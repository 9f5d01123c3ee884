//! `vidgate admin key limit` and `vidgate admin account low-balance` on a
//! real database, SQLite and PostgreSQL: what each prints, what the store
//! keeps, the audit row, and the refusals.

use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::store::{self, Store};

use crate::support::{admin, admin_output};
use crate::test_database::{PostgresTestDatabase, postgres_server_url};

/// The commands' variables for the database at `database_url`.
fn environment<'a>(database_url: &'a str, data_dir: &'a str) -> [(&'a str, &'a str); 2] {
    [
        ("VIDGATE_DATABASE_URL", database_url),
        ("VIDGATE_DATA_DIR", data_dir),
    ]
}

async fn key_limit_and_low_balance_alert_are_set_and_audited(database_url: &str) {
    let data_dir = tempfile::tempdir().unwrap();
    let data_dir = data_dir.path().to_str().unwrap().to_owned();
    let environment = environment(database_url, &data_dir);
    let run = |arguments: &[&str]| admin(&environment, arguments);
    let created = run(&["account", "create", "--name", "limits", "--credit-usd", "3"]);
    let account_id = created["account_id"].as_str().unwrap();
    let key_id = created["key_id"].as_str().unwrap();

    let limited = run(&[
        "key", "limit", key_id, "--usd", "1.005", "--period", "month",
    ]);
    assert_eq!(
        limited,
        json!({ "key_id": key_id, "spend_limit_usd": "1.005", "spend_limit_period": "month" })
    );
    let removed = run(&["key", "limit", key_id, "--remove"]);
    assert_eq!(removed["spend_limit_usd"], Value::Null);

    // A threshold above the $3 balance: the alert is raised at once, and its
    // event is written for the URL.
    let alerted = run(&[
        "account",
        "low-balance",
        account_id,
        "--threshold-usd",
        "5.00",
        "--webhook-url",
        "https://hooks.example/low",
    ]);
    assert_eq!(
        alerted["low_balance_alert"],
        json!({ "threshold_usd": "5.00", "webhook_url": "https://hooks.example/low", "below": true })
    );
    let cleared = run(&["account", "low-balance", account_id, "--remove"]);
    assert_eq!(cleared["low_balance_alert"], Value::Null);

    let store: std::sync::Arc<Store> = store::open(database_url).await.unwrap();
    let keys = store.accounts().api_keys(account_id).await.unwrap();
    assert_eq!(keys[0].spend_limit, None);
    assert_eq!(
        store
            .accounts()
            .get(account_id)
            .await
            .unwrap()
            .unwrap()
            .low_balance_alert,
        None
    );
    let events = store
        .webhook_log()
        .recent_deliveries(account_id, 10)
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].delivery.event_type, "account.balance_low");
    let actions: Vec<String> = store
        .operator()
        .audit_log(None, 20)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.action)
        .collect();
    for action in ["key.limit", "account.low_balance"] {
        assert_eq!(
            actions.iter().filter(|found| *found == action).count(),
            2,
            "{action} in {actions:?}"
        );
    }

    // Refusals: a malformed amount, an unknown key, a URL that is not http.
    for (arguments, says) in [
        (
            vec!["key", "limit", key_id, "--usd", "one"],
            "spend_limit_usd",
        ),
        (
            vec!["key", "limit", "key_missing", "--usd", "1.00"],
            "no active key",
        ),
        (
            vec![
                "account",
                "low-balance",
                account_id,
                "--threshold-usd",
                "1",
                "--webhook-url",
                "ftp://x",
            ],
            "low_balance_webhook_url",
        ),
    ] {
        let output = admin_output(&environment, &arguments);
        assert!(!output.status.success(), "{arguments:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{arguments:?}: {stderr}");
    }
    assert_eq!(
        store
            .accounts()
            .get(account_id)
            .await
            .unwrap()
            .unwrap()
            .balance,
        Micros(3_000_000)
    );
}

#[tokio::test]
async fn key_limit_and_low_balance_alert_on_sqlite() {
    let data_dir = tempfile::tempdir().unwrap();
    let database_url = vidgate_server::default_database_url(data_dir.path());
    key_limit_and_low_balance_alert_are_set_and_audited(&database_url).await;
}

#[tokio::test]
async fn key_limit_and_low_balance_alert_on_postgres() {
    let Some(server_url) = postgres_server_url("key_limit_and_low_balance_alert_on_postgres")
    else {
        return;
    };
    let database = PostgresTestDatabase::create(&server_url).await;
    key_limit_and_low_balance_alert_are_set_and_audited(&database.url).await;
}
