//! `vidgate admin providers` and `vidgate admin usage` on a real database:
//! what the server nodes recorded (a provider's circuit, the provider and
//! cost of succeeded generations), as the operator reads it.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::store::{self, NewGeneration, ProviderHealth, ProviderRun, SubmitOutcome};

fn admin(data_dir: &std::path::Path, arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .arg("admin")
        .args(arguments)
        .env("VIDGATE_DATA_DIR", data_dir)
        .env_remove("VIDGATE_DATABASE_URL")
        .output()
        .expect("the vidgate binary runs")
}

fn admin_json(data_dir: &std::path::Path, arguments: &[&str]) -> Value {
    let output = admin(data_dir, arguments);
    assert!(
        output.status.success(),
        "admin {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("admin prints JSON")
}

/// Submits, claims and finishes a generation of M1 as a worker would.
async fn succeed(
    store: &dyn store::Store,
    account_id: &str,
    key_id: &str,
    id: &str,
    price: Micros,
    provider_run: Option<ProviderRun>,
) {
    let submitted = store
        .submit_generation(NewGeneration {
            id: id.into(),
            account_id: account_id.into(),
            api_key_id: key_id.into(),
            model: "vendor_1/model_1".into(),
            endpoint: "vendor_1/model_1/text-to-video".into(),
            mode: "text-to-video".into(),
            input: json!({ "prompt": "a kite", "duration": 2 }),
            price,
            official_price: price,
            webhook_url: None,
            idempotency: None,
            max_attempts: 3,
            media_binding: None,
        })
        .await
        .unwrap();
    assert!(matches!(submitted, SubmitOutcome::Created(_)));
    let claimed = store
        .claim_next("node/w0", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, id);
    assert!(
        store
            .finish_succeeded(id, "node/w0", json!({}), provider_run.as_ref())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_operator_sees_provider_health_and_margin_per_model_and_day() {
    let data_dir = tempfile::tempdir().unwrap();
    let created = admin_json(
        data_dir.path(),
        &["account", "create", "--name", "acme", "--credit-usd", "10"],
    );
    let account_id = created["account_id"].as_str().unwrap();
    let key_id = created["key_id"].as_str().unwrap();
    assert_eq!(
        admin_json(data_dir.path(), &["providers"]),
        json!({ "providers": [] })
    );

    let database_url = vidgate_server::default_database_url(data_dir.path());
    let store = store::open(&database_url).await.unwrap();
    let fal = ProviderRun {
        provider: "fal".into(),
        cost: Some(Micros(200_000)),
    };
    succeed(
        store.as_ref(),
        account_id,
        key_id,
        "gen_at_fal",
        Micros(500_000),
        Some(fal),
    )
    .await;
    // Made by the operator's own engine: no provider cost is known.
    succeed(
        store.as_ref(),
        account_id,
        key_id,
        "gen_local",
        Micros(300_000),
        None,
    )
    .await;
    let now = store::now_millis();
    store
        .save_provider_health(&ProviderHealth {
            provider: "fal".into(),
            open: true,
            consecutive_failures: 5,
            last_error: Some("the provider refused our credential".into()),
            last_error_at: Some(now),
            latency_ms: Some(120),
            node_id: "process_test".into(),
            updated_at: now,
        })
        .await
        .unwrap();

    let usage = admin_json(data_dir.path(), &["usage", "--days", "1"]);
    let rows = usage["usage"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{usage}");
    let row = &rows[0];
    assert_eq!(row["model"], "vendor_1/model_1");
    assert_eq!(row["generations"], 2);
    assert_eq!(row["revenue_micros"], 800_000);
    assert_eq!(row["provider_cost_micros"], 200_000);
    assert_eq!(row["margin_micros"], 600_000);
    assert_eq!(row["margin_usd"], 0.6);
    assert_eq!(row["uncosted_generations"], 1);
    let today = vidgate_server::representation::rfc3339(now);
    assert_eq!(row["date"].as_str(), Some(&today[..10]));

    let providers = admin_json(data_dir.path(), &["providers"]);
    let fal = &providers["providers"][0];
    assert_eq!(fal["provider"], "fal");
    assert_eq!(fal["circuit"], "open");
    assert_eq!(fal["consecutive_failures"], 5);
    assert_eq!(fal["last_error"], "the provider refused our credential");
    assert_eq!(fal["latency_ms"], 120);
}
