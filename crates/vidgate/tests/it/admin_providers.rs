//! `vidgate admin providers` and `vidgate admin usage` on a real database:
//! what the server nodes recorded (a provider's circuit, the provider and
//! cost of succeeded generations), as the operator reads it.

use std::process::Output;
use std::time::Duration;

use crate::support::sqlite_admin_json;
use serde_json::{Value, json};
use vidgate_core::Micros;
use vidgate_server::store::{
    self, NewGeneration, NewProviderJob, ProviderHealth, ProviderRun, Source, StoredJson,
    SubmitOutcome,
};

/// Submits, claims and finishes a generation of M1 as a worker would; one
/// run at a provider has its provider job recorded first, as a failover
/// model's routing records it.
async fn succeed(
    store: &store::Store,
    account_id: &str,
    key_id: &str,
    id: &str,
    price: Micros,
    provider_run: Option<ProviderRun>,
) {
    let submitted = store
        .generations()
        .submit(NewGeneration {
            id: id.into(),
            account_id: account_id.into(),
            api_key_id: key_id.into(),
            model: "vendor_1/model_1".into(),
            endpoint: "vendor_1/model_1/text-to-video".into(),
            mode: "text-to-video".into(),
            input: StoredJson::from_value(&json!({ "prompt": "a kite", "duration": 2 })),
            price,
            official_price: price,
            webhook_url: None,
            idempotency: None,
            max_attempts: 3,
            media_binding: None,
            source: Source::Api,
            traceparent: None,
        })
        .await
        .unwrap();
    assert!(matches!(submitted, SubmitOutcome::Created(_)));
    let claimed = store
        .queue()
        .claim_next("node/w0", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, id);
    if let Some(run) = &provider_run {
        let intent = NewProviderJob {
            generation_id: id.into(),
            provider: run.provider.clone(),
            target: "alibaba/wan-3.0/text-to-video".into(),
            input: json!({ "prompt": "a kite" }),
            intent_at: store::now_millis(),
            route_reason: Some("cheapest".into()),
        };
        assert!(store.provider_jobs().record_intent(&intent).await.unwrap());
    }
    assert!(
        store
            .queue()
            .finish_succeeded(id, "node/w0", json!({}), provider_run.as_ref())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_operator_sees_provider_health_and_margin_per_model_and_day() {
    let data_dir = tempfile::tempdir().unwrap();
    let created = sqlite_admin_json(
        data_dir.path(),
        &["account", "create", "--name", "acme", "--credit-usd", "10"],
    );
    let account_id = created["account_id"].as_str().unwrap();
    let key_id = created["key_id"].as_str().unwrap();
    assert_eq!(
        sqlite_admin_json(data_dir.path(), &["providers"]),
        json!({ "providers": [], "routing": [] })
    );

    let database_url = vidgate_server::default_database_url(data_dir.path());
    let store = store::open(&database_url).await.unwrap();
    let fal = ProviderRun {
        provider: "fal".into(),
        cost: Some(Micros(200_000)),
        cost_is_possible: false,
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
        .provider_health()
        .save(&ProviderHealth {
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

    let usage = sqlite_admin_json(data_dir.path(), &["usage", "--days", "1"]);
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
    // Per provider and model: fal's margin, and the engine's revenue with
    // its cost unknown.
    assert_eq!(
        usage["by_provider"],
        json!([
            { "model": "vendor_1/model_1", "provider": null, "generations": 1,
              "revenue_usd": 0.3, "provider_cost_usd": 0.0, "margin_usd": 0.3,
              "revenue_micros": 300_000, "provider_cost_micros": 0, "margin_micros": 300_000,
              "uncosted_generations": 1, "possible_provider_cost_usd": 0.0,
              "possible_provider_cost_micros": 0, "possible_cost_generations": 0 },
            { "model": "vendor_1/model_1", "provider": "fal", "generations": 1,
              "revenue_usd": 0.5, "provider_cost_usd": 0.2, "margin_usd": 0.3,
              "revenue_micros": 500_000, "provider_cost_micros": 200_000, "margin_micros": 300_000,
              "uncosted_generations": 0, "possible_provider_cost_usd": 0.0,
              "possible_provider_cost_micros": 0, "possible_cost_generations": 0 },
        ]),
        "{usage}"
    );

    assert_eq!(
        usage["below_cost"],
        json!([]),
        "no provider cost a job more than it was sold for"
    );

    let providers = sqlite_admin_json(data_dir.path(), &["providers"]);
    let fal = &providers["providers"][0];
    assert_eq!(fal["provider"], "fal");
    assert_eq!(fal["circuit"], "open");
    assert_eq!(fal["consecutive_failures"], 5);
    assert_eq!(fal["last_error"], "the provider refused our credential");
    assert_eq!(fal["latency_ms"], 120);
    // The last day's jobs per provider, model and mode: their share and
    // why routing sent them there.
    let routing = &providers["routing"];
    assert_eq!(routing.as_array().unwrap().len(), 1, "{providers}");
    assert_eq!(routing[0]["provider"], "fal");
    assert_eq!(routing[0]["model"], "vendor_1/model_1");
    assert_eq!(routing[0]["mode"], "text-to-video");
    assert_eq!(routing[0]["jobs"], 1);
    assert_eq!(routing[0]["share_of_jobs"], 1.0);
    assert_eq!(routing[0]["succeeded"], 1);
    assert!(
        routing[0]["mean_submit_to_finish_seconds"]
            .as_f64()
            .unwrap()
            >= 0.0
    );
    assert_eq!(routing[0]["decisions"], json!({ "cheapest": 1 }));

    // With the servers' backends file: each provider credential's request
    // budget, its defaults and the file's overrides.
    let backends_file = data_dir.path().join("backends.json");
    let backends = json!({ "models": { "vendor_1/model_1": {
        "backend": "replicate",
        "modes": { "text-to-video": { "target": "alibaba/wan-3" } },
        "budget": { "creates_per_minute": 120, "nodes": 2 },
    } } });
    std::fs::write(&backends_file, backends.to_string()).unwrap();
    let providers = sqlite_admin_json(
        data_dir.path(),
        &["providers", "--budgets-of", backends_file.to_str().unwrap()],
    );
    assert_eq!(
        providers["budgets"],
        json!([{ "provider": "replicate", "credential_env": "REPLICATE_API_TOKEN",
            "creates_per_minute": 120, "creates_burst": 6,
            "others_per_minute": 3000, "others_burst": 150,
            "max_in_flight": null, "nodes_without_redis": 2 }])
    );
    assert_eq!(providers["providers"][0]["provider"], "fal");

    // A job that cost the operator more than the customer was charged: the
    // catalog sells below that provider's cost, and usage says so.
    let replicate = ProviderRun {
        provider: "replicate".into(),
        cost: Some(Micros(900_000)),
        cost_is_possible: false,
    };
    succeed(
        store.as_ref(),
        account_id,
        key_id,
        "gen_at_a_loss",
        Micros(400_000),
        Some(replicate),
    )
    .await;
    let usage = sqlite_admin_json(data_dir.path(), &["usage", "--days", "1"]);
    let warnings = usage["below_cost"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{usage}");
    let warning = warnings[0].as_str().unwrap();
    assert!(
        warning.starts_with("vendor_1/model_1 at replicate: charged $0.40")
            && warning.contains("cost $0.90"),
        "{warning}"
    );
}

use crate::schema_fake;

/// `vidgate` with `arguments`, while this runtime keeps serving the fake.
async fn vidgate_async(arguments: &[&str], environment: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_vidgate"))
        .args(arguments)
        .envs(environment.iter().copied())
        .env("VIDGATE_LOG", "warn")
        .env_remove("VIDGATE_DATABASE_URL")
        .env_remove("VIDGATE_BACKENDS_FILE")
        .output()
        .await
        .expect("the vidgate binary runs")
}

#[tokio::test]
async fn providers_check_and_check_config_report_a_providers_schema_drift_and_fail() {
    let as_published = schema_fake::SchemaFake::start().await;
    // fal renamed Seedance's audio switch.
    let drifted = schema_fake::SchemaFake::drifted(|provider, target, schema| {
        if (provider, target) == ("fal", "bytedance/seedance-2.0/text-to-video") {
            let properties = schema["properties"].as_object_mut().unwrap();
            let audio = properties.remove("generate_audio").unwrap();
            properties.insert("with_audio".into(), audio);
        }
    })
    .await;
    let directory = tempfile::tempdir().unwrap();
    let data_dir = directory.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let data_dir = data_dir.to_str().unwrap();
    let environment = [
        ("VIDGATE_DATA_DIR", data_dir),
        ("FAL_KEY", "fal-test-key"),
        ("REPLICATE_API_TOKEN", schema_fake::REPLICATE_TOKEN),
    ];
    for (fake, sound) in [(&as_published, true), (&drifted, false)] {
        let subdirectory = tempfile::tempdir_in(directory.path()).unwrap();
        let file = fake.example_backends_file("fal.json", subdirectory.path());
        let file = file.to_str().unwrap();

        let checked = vidgate_async(
            &["admin", "providers", "check", "--backends-file", file],
            &environment,
        )
        .await;
        assert_eq!(
            checked.status.success(),
            sound,
            "{}",
            String::from_utf8_lossy(&checked.stderr)
        );
        let report: Value = serde_json::from_slice(&checked.stdout).expect("admin prints JSON");
        assert_eq!(report["sound"], sound, "{report}");
        let targets = report["targets"].as_array().unwrap();
        assert_eq!(targets.len(), 21, "every fal target of the example file");
        let seedance = targets
            .iter()
            .find(|target| target["target"] == "bytedance/seedance-2.0/text-to-video")
            .unwrap();
        let differences = seedance["differences"].as_array().unwrap();
        if sound {
            assert!(differences.is_empty(), "{seedance}");
        } else {
            assert!(
                differences.iter().any(|difference| difference
                    .as_str()
                    .unwrap()
                    .starts_with("`generate_audio` is sent but the schema has no such field")),
                "{seedance}"
            );
        }

        let config = vidgate_async(
            &["serve", "--check-config", "--backends-file", file],
            &environment,
        )
        .await;
        let printed = String::from_utf8_lossy(&config.stdout);
        assert_eq!(config.status.success(), sound, "{printed}");
        let line = printed
            .lines()
            .find(|line| {
                line.contains("fal bytedance/seedance-2.0/text-to-video at vendor_4/model_4")
            })
            .unwrap_or_else(|| panic!("no line for Seedance: {printed}"));
        if sound {
            assert!(line.starts_with("ok      --backends-file"), "{line}");
            assert!(line.contains("the provider's schema takes all"), "{line}");
        } else {
            assert!(line.starts_with("FAILED  --backends-file"), "{line}");
            assert!(line.contains("`generate_audio`"), "{line}");
        }
    }
}
