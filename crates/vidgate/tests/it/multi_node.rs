//! Several `vidgate serve` processes on one PostgreSQL database keep every
//! guarantee of a single node: the concurrency cap is exact across nodes,
//! every accepted job runs and is charged exactly once, a node killed with
//! SIGKILL loses nothing, and with Redis the request rate is limited per key
//! across nodes. Skipped without `VIDGATE_TEST_POSTGRES_URL` (and, for the
//! rate limit, `VIDGATE_TEST_REDIS_URL`).

use crate::test_database;

use crate::support;

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use support::Node;
use test_database::{PostgresTestDatabase, postgres_server_url};

/// Starts a node with the given role on `database_url`.
fn start_node(database_url: &str, data_dir: &Path, role: &str, extra_arguments: &[&str]) -> Node {
    let data_dir = data_dir.to_str().expect("a UTF-8 temporary path");
    let environment = [
        ("VIDGATE_DATABASE_URL", database_url),
        ("VIDGATE_DATA_DIR", data_dir),
    ];
    let mut arguments = vec!["--role", role];
    arguments.extend_from_slice(extra_arguments);
    support::start_node(&environment, &arguments)
}

fn admin(database_url: &str, arguments: &[&str]) -> Value {
    support::admin(&[("VIDGATE_DATABASE_URL", database_url)], arguments)
}

fn micros(account: &Value, field: &str) -> i64 {
    (account[field].as_f64().unwrap() * 1e6).round() as i64
}

/// Creates an account whose key may make `rps` requests a second in bursts
/// of `burst`; returns its id and key.
fn create_account(database_url: &str, rps: &str, burst: &str) -> (String, String) {
    let created = admin(
        database_url,
        &["account", "create", "--name", "nodes", "--credit-usd", "10"],
    );
    let account_id = created["account_id"].as_str().unwrap().to_owned();
    admin(
        database_url,
        &[
            "account",
            "limits",
            &account_id,
            "--rps",
            rps,
            "--burst",
            burst,
        ],
    );
    (account_id, created["api_key"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn nodes_on_one_postgres_database_cap_charge_and_rescue_exactly() {
    let Some(server_url) =
        postgres_server_url("nodes_on_one_postgres_database_cap_charge_and_rescue_exactly")
    else {
        return;
    };
    let database = PostgresTestDatabase::create(&server_url).await;
    let data_dir = tempfile::tempdir().unwrap();
    // Two nodes take requests (one also runs jobs); a worker node runs jobs only.
    let full_node = start_node(&database.url, data_dir.path(), "all", &[]);
    let api_node = start_node(&database.url, data_dir.path(), "api", &[]);
    let mut worker_node = start_node(&database.url, data_dir.path(), "worker", &[]);
    // A rate limit this high leaves the concurrency cap of 20 as the only limit.
    let (account_id, api_key) = create_account(&database.url, "1000", "1000");

    let client = reqwest::Client::new();
    let mut submits = tokio::task::JoinSet::new();
    for index in 0..60 {
        let api_base = if index % 2 == 0 {
            full_node.api_base()
        } else {
            api_node.api_base()
        };
        let request = client
            .post(format!("{api_base}/run/vendor_1/model_1/text-to-video"))
            .bearer_auth(&api_key)
            .json(&json!({
                "prompt": format!("node test {index} [sim:sleep=1500]"),
                "duration": 2, "resolution": "480p", "generate_audio": false
            }));
        submits.spawn(async move {
            let response = request.send().await.unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        });
    }
    let responses = submits.join_all().await;
    let accepted: Vec<String> = responses
        .iter()
        .filter(|(status, _)| *status == StatusCode::ACCEPTED)
        .map(|(_, body)| body["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        accepted.len(),
        20,
        "exactly the cap is accepted across nodes"
    );
    for (status, body) in responses
        .iter()
        .filter(|(status, _)| *status != StatusCode::ACCEPTED)
    {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    }

    // Kill the worker node while it runs jobs: with more jobs running than
    // the full node's two workers, some are the worker node's.
    support::wait_until_running(
        &client,
        full_node.api_base(),
        &api_key,
        3,
        Duration::from_secs(30),
        "the worker node never took a job",
    )
    .await;
    worker_node.child.kill().unwrap();
    worker_node.child.wait().unwrap();

    support::wait_until_all_succeeded(
        &client,
        api_node.api_base(),
        &api_key,
        &accepted,
        Duration::from_secs(120),
        Duration::from_millis(250),
        "the worker node died",
    )
    .await;

    let account = admin(&database.url, &["account", "show", &account_id]);
    assert_eq!(
        micros(&account, "credited_usd"),
        micros(&account, "balance_usd")
            + micros(&account, "held_usd")
            + micros(&account, "spent_usd"),
        "{account}"
    );
    assert_eq!(micros(&account, "held_usd"), 0, "{account}");
    assert_eq!(
        micros(&account, "spent_usd"),
        20 * 100_000,
        "each job was charged once: {account}"
    );
    // The ledger agrees: one hold and one capture per generation, no refund.
    let mut connection = PgConnection::connect(&database.url).await.unwrap();
    let ledger: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT kind, COUNT(*), COUNT(DISTINCT generation_id) FROM ledger_entries \
         WHERE account_id = $1 AND generation_id IS NOT NULL GROUP BY kind ORDER BY kind",
    )
    .bind(&account_id)
    .fetch_all(&mut connection)
    .await
    .unwrap();
    assert_eq!(
        ledger,
        vec![("capture".to_owned(), 20, 20), ("hold".to_owned(), 20, 20)]
    );
    connection.close().await.unwrap();
}

#[tokio::test]
async fn nodes_sharing_redis_limit_a_key_together() {
    let test_name = "nodes_sharing_redis_limit_a_key_together";
    let Some(server_url) = postgres_server_url(test_name) else {
        return;
    };
    let Some(redis_url) = std::env::var("VIDGATE_TEST_REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        eprintln!(
            "skipping {test_name}: set VIDGATE_TEST_REDIS_URL (e.g. redis://127.0.0.1:6379) to run it"
        );
        return;
    };
    let database = PostgresTestDatabase::create(&server_url).await;
    let data_dir = tempfile::tempdir().unwrap();
    let redis = ["--redis-url", redis_url.as_str()];
    let nodes = [
        start_node(&database.url, data_dir.path(), "api", &redis),
        start_node(&database.url, data_dir.path(), "api", &redis),
    ];
    // One token a second keeps the count exact however slowly the burst goes out.
    let (_, api_key) = create_account(&database.url, "1", "20");

    let client = reqwest::Client::new();
    let mut burst = tokio::task::JoinSet::new();
    for index in 0..25 {
        let request = client
            .get(format!("{}/account", nodes[index % 2].api_base()))
            .bearer_auth(&api_key);
        burst.spawn(async move { request.send().await.unwrap().status() });
    }
    let statuses = burst.join_all().await;
    let passed = statuses
        .iter()
        .filter(|status| **status == StatusCode::OK)
        .count();
    let limited = statuses
        .iter()
        .filter(|status| **status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(
        (passed, limited),
        (20, 5),
        "one bucket for the key across both nodes"
    );
}
