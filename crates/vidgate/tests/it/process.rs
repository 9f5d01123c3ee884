//! The `vidgate` binary as operators use it: `admin` commands on the same
//! database as a running `serve`, and a server killed with SIGKILL in the
//! middle of work that loses nothing when it comes back.

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::Node;

fn data_dir_environment(data_dir: &Path) -> [(&'static str, &str); 1] {
    [(
        "VIDGATE_DATA_DIR",
        data_dir.to_str().expect("a UTF-8 temporary path"),
    )]
}

fn start_server(data_dir: &Path) -> Node {
    support::start_node(&data_dir_environment(data_dir), &[])
}

fn admin(data_dir: &Path, arguments: &[&str]) -> Value {
    support::admin(&data_dir_environment(data_dir), arguments)
}

fn admin_fails(data_dir: &Path, arguments: &[&str]) -> String {
    let output = support::admin_output(&data_dir_environment(data_dir), arguments);
    assert!(!output.status.success(), "admin {arguments:?} should fail");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_ledger_balanced(account: &Value) {
    let micros = |field: &str| (account[field].as_f64().unwrap() * 1e6).round() as i64;
    assert_eq!(
        micros("credited_usd"),
        micros("balance_usd") + micros("held_usd") + micros("spent_usd"),
        "{account}"
    );
}

#[tokio::test]
async fn admin_commands_work_beside_a_running_server() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = start_server(data_dir.path());
    let client = reqwest::Client::new();

    let created = admin(
        data_dir.path(),
        &[
            "account",
            "create",
            "--name",
            "acme",
            "--credit-usd",
            "12.50",
        ],
    );
    let account_id = created["account_id"].as_str().unwrap();
    let api_key = created["api_key"].as_str().unwrap();
    assert!(api_key.starts_with("vg_live_"));
    assert!(
        created["webhook_secret"]
            .as_str()
            .unwrap()
            .starts_with("whsec_")
    );

    let credited = admin(
        data_dir.path(),
        &["account", "credit", account_id, "--usd", "7.5"],
    );
    assert_eq!(credited["balance_usd"], 20.0);
    let shown = admin(data_dir.path(), &["account", "show", account_id]);
    assert_eq!(shown["account_id"], account_id);
    assert_eq!(shown["held_usd"], 0.0);
    let limited = admin(
        data_dir.path(),
        &["account", "limits", account_id, "--concurrency", "5"],
    );
    assert_eq!(limited["limits"]["max_concurrent_generations"], 5);
    assert_eq!(limited["limits"]["burst"], 20);

    // The API sees the same account, and the figures agree with `admin account show`.
    let from_api: Value = client
        .get(format!("{}/account", server.api_base()))
        .bearer_auth(api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(from_api["balance_usd"], 20.0);
    assert_eq!(from_api["limits"]["max_concurrent_generations"], 5);

    let key = admin(data_dir.path(), &["key", "create", "--account", account_id]);
    let second_key = key["api_key"].as_str().unwrap();
    let ok = client
        .get(format!("{}/account", server.api_base()))
        .bearer_auth(second_key)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    admin(
        data_dir.path(),
        &["key", "revoke", key["key_id"].as_str().unwrap()],
    );
    // The server remembers a key it accepted for a moment, so a revocation
    // made by another process applies once that moment has passed.
    tokio::time::sleep(vidgate_server::store::CALLER_CACHE_TTL).await;
    let refused = client
        .get(format!("{}/account", server.api_base()))
        .bearer_auth(second_key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    admin(data_dir.path(), &["model", "pause", "vendor_2/model_2"]);
    let paused = client
        .post(format!(
            "{}/run/vendor_2/model_2/text-to-video",
            server.api_base()
        ))
        .bearer_auth(api_key)
        .json(&json!({ "prompt": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(paused.status(), 503);
    admin(data_dir.path(), &["model", "resume", "vendor_2/model_2"]);

    assert!(
        admin_fails(data_dir.path(), &["account", "show", "acct_missing"]).contains("no account")
    );
    assert!(
        admin_fails(
            data_dir.path(),
            &["account", "credit", account_id, "--usd=-3"]
        )
        .contains("amount")
    );
    assert!(
        admin_fails(data_dir.path(), &["model", "pause", "vendor_9/model_9"]).contains("no model")
    );

    // A debit takes money back, once per key, and never below zero.
    let before = admin(data_dir.path(), &["account", "show", account_id]);
    let debit = [
        "account",
        "debit",
        account_id,
        "--usd",
        "1.25",
        "--reason",
        "chargeback",
        "--idempotency-key",
        "chargeback-1",
    ];
    let debited = admin(data_dir.path(), &debit);
    let expected = before["balance_usd"].as_f64().unwrap() - 1.25;
    assert_eq!(debited["balance_usd"].as_f64().unwrap(), expected);
    let again = admin(data_dir.path(), &debit);
    assert_eq!(again["balance_usd"].as_f64().unwrap(), expected);
    assert!(
        admin_fails(
            data_dir.path(),
            &["account", "debit", account_id, "--usd", "100000"]
        )
        .contains("below zero")
    );
    // Every change made with `vidgate admin` is in the operator's audit log.
    let store = vidgate_server::store::open(&format!(
        "sqlite://{}",
        data_dir.path().join("vidgate.sqlite").display()
    ))
    .await
    .unwrap();
    let log = store.operator().audit_log(None, 100).await.unwrap();
    for action in [
        "account.create",
        "account.credit",
        "account.limits",
        "account.debit",
        "key.create",
        "model.pause",
    ] {
        let entry = log
            .iter()
            .find(|entry| entry.action == action)
            .unwrap_or_else(|| panic!("no {action} in {log:?}"));
        assert!(entry.actor.starts_with("cli:"), "{entry:?}");
    }
    // The replayed debit was recorded once.
    assert_eq!(
        log.iter()
            .filter(|entry| entry.action == "account.debit")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_killed_server_loses_no_job_and_no_cent() {
    let data_dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut first = start_server(data_dir.path());
    let created = admin(
        data_dir.path(),
        &["account", "create", "--name", "crash", "--credit-usd", "10"],
    );
    let account_id = created["account_id"].as_str().unwrap().to_owned();
    let api_key = created["api_key"].as_str().unwrap().to_owned();

    let mut ids = Vec::new();
    for index in 0..4 {
        let body = json!({ "prompt": format!("crash test {index} [sim:sleep=2500]"), "duration": 2, "resolution": "480p", "generate_audio": false });
        let response = client
            .post(format!(
                "{}/run/vendor_1/model_1/text-to-video",
                first.api_base()
            ))
            .bearer_auth(&api_key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        ids.push(
            response.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // Wait until both workers hold a job, then kill the process outright.
    support::wait_until_running(
        &client,
        first.api_base(),
        &api_key,
        2,
        Duration::from_secs(20),
        "jobs never started",
    )
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mid_crash = admin(data_dir.path(), &["account", "show", &account_id]);
    assert_ledger_balanced(&mid_crash);
    assert_eq!(
        mid_crash["held_usd"], 0.4,
        "all four holds survive the crash"
    );

    let second = start_server(data_dir.path());
    support::wait_until_all_succeeded(
        &client,
        second.api_base(),
        &api_key,
        &ids,
        Duration::from_secs(90),
        Duration::from_millis(200),
        "the restart",
    )
    .await;
    let settled = admin(data_dir.path(), &["account", "show", &account_id]);
    assert_ledger_balanced(&settled);
    assert_eq!(settled["held_usd"], 0.0);
    assert_eq!(
        settled["spent_usd"], 0.4,
        "each generation was charged exactly once"
    );
}
