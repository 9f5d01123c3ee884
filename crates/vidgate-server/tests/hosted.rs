//! Models run at hosted providers (fal, Replicate) end to end, against the
//! fake providers of `fake_providers/`, on both stores: the example
//! backends files of `examples/hosted/` with their URLs pointed at the
//! fake, real submits through the API, and the video in our storage.

mod common;
mod fake_providers;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vidgate_core::{Catalog, ValidatedInput};
use vidgate_server::backend::{Backends, Job, apply_backends_file_with_credentials};

use common::{StoreKind, TestApp, TestSettings, on_both_stores, spawn_app_with};
use fake_providers::{FAL_KEY, FakeProviders, Provider, REPLICATE_TOKEN};

/// The example backends file of `provider`, pointed at the fake, with
/// timeouts short enough for tests.
fn backends_for(
    fake: &FakeProviders,
    provider: Provider,
    request_seconds: f64,
    retry_seconds: f64,
) -> Backends {
    let name = match provider {
        Provider::Fal => "fal.json",
        Provider::Replicate => "replicate.json",
    };
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hosted")
        .join(name);
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        match provider {
            Provider::Fal => {
                model["api_url"] = json!(fake.fal_queue_url());
                model["platform_url"] = json!(fake.fal_api_url());
            }
            Provider::Replicate => model["api_url"] = json!(fake.replicate_api_url()),
        }
        model["timeouts"] = json!({
            "request_seconds": request_seconds,
            "start_seconds": 30,
            "job_seconds": 60,
            "poll_seconds": 0.1,
            "retry_seconds": retry_seconds,
        });
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join(name);
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = Backends::builtin(true);
    let credentials = |name: &str| match name {
        "FAL_KEY" => Some(FAL_KEY.to_owned()),
        "REPLICATE_API_TOKEN" => Some(REPLICATE_TOKEN.to_owned()),
        _ => None,
    };
    apply_backends_file_with_credentials(&mut backends, &path, &Catalog::embedded(), &credentials)
        .expect("the example backends file applies");
    backends
}

async fn app_at(store: StoreKind, backends: Backends, workers: usize) -> TestApp {
    let mut settings = TestSettings::new(store);
    settings.backends = backends;
    settings.workers = workers;
    settings.lease = Duration::from_secs(2);
    spawn_app_with(settings).await
}

const MODELS: [&str; 6] = [
    "vendor_1/model_1",
    "vendor_2/model_2",
    "vendor_3/model_3",
    "vendor_4/model_4",
    "vendor_5/model_5",
    "vendor_6/model_6",
];

/// The smallest valid text-to-video request of each model.
fn text_to_video(model: &str, prompt: &str) -> Value {
    match model {
        // M2 sells 720p clips of 4, 6 or 8 s.
        "vendor_2/model_2" => json!({ "prompt": prompt, "duration": 4 }),
        // M3 takes 5 s or more, M4 4 s or more, M6 3 s or more.
        "vendor_3/model_3" => json!({ "prompt": prompt, "duration": 5 }),
        "vendor_4/model_4" => json!({ "prompt": prompt, "duration": 4 }),
        "vendor_6/model_6" => json!({ "prompt": prompt, "duration": 3, "resolution": "1080p" }),
        _ => json!({ "prompt": prompt, "duration": 2 }),
    }
}

async fn submit(app: &TestApp, model: &str, body: Value) -> Value {
    app.submit_ok(&format!("{model}/text-to-video"), body).await
}

async fn every_model_succeeds_through_each_provider_with_the_video_in_our_storage(
    store: StoreKind,
) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let app = app_at(store.clone(), backends_for(&fake, provider, 5.0, 20.0), 2).await;
        let mut submitted = Vec::new();
        for model in MODELS {
            submitted.push(submit(&app, model, text_to_video(model, "a kite over the sea")).await);
        }
        for generation in &submitted {
            let id = generation["id"].as_str().unwrap();
            let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
            assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
            let video_url = done["output"]["video_url"].as_str().unwrap();
            assert!(video_url.starts_with(&app.api_base), "{video_url}");
            let stored = app
                .client
                .get(video_url)
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert_eq!(done["output"]["size_bytes"], json!(stored.len()));
            assert_eq!(done["output"]["width"], 320);
        }
        // One provider job per generation, each at the configured target,
        // with every price-affecting value sent explicitly.
        let jobs = fake.jobs_at(provider);
        assert_eq!(jobs.len(), MODELS.len(), "{provider:?}");
        for job in &jobs {
            assert!(job.input.get("duration").is_some(), "{job:?}");
            assert!(
                app_storage_has(&app, &fake, &job.id).await,
                "the clip of {} is a copy of the provider's output",
                job.id
            );
        }
        let kling = jobs
            .iter()
            .find(|job| job.target.contains("kling"))
            .unwrap();
        match provider {
            Provider::Fal => {
                assert_eq!(kling.target, "fal-ai/kling-video/v3/pro/text-to-video");
                assert_eq!(kling.input["duration"], "3");
            }
            Provider::Replicate => assert_eq!(kling.input["mode"], "pro"),
        }
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Whether one of the app's stored clips has exactly the bytes the fake
/// produced for provider job `job_id`.
async fn app_storage_has(app: &TestApp, fake: &FakeProviders, job_id: &str) -> bool {
    let produced = fake
        .state
        .output(job_id)
        .expect("the fake produced an output");
    let files = app.data_dir.path();
    walk(files)
        .into_iter()
        .filter(|path| path.extension().is_some_and(|extension| extension == "mp4"))
        .any(|path| std::fs::read(path).unwrap() == produced.as_ref())
}

fn walk(directory: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

async fn failed_and_moderated_provider_jobs_fail_and_are_refunded(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let app = app_at(store.clone(), backends_for(&fake, provider, 5.0, 20.0), 2).await;
        let before = app.account_state(&app.account.account.id).await;
        for (marker, code) in [
            ("[fake:fail]", "generation_failed"),
            ("[fake:moderate]", "content_moderated"),
        ] {
            let generation = submit(
                &app,
                "vendor_4/model_4",
                text_to_video("vendor_4/model_4", &format!("a kite {marker}")),
            )
            .await;
            let done = app
                .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
                .await;
            assert_eq!(done["status"], "failed", "{done}");
            assert_eq!(done["error"]["code"], code, "{provider:?}: {done}");
        }
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "{provider:?}: refunded");
        assert_eq!(after.captured, before.captured);
        app.assert_ledger_invariant(&app.account.account.id).await;
        assert_eq!(fake.jobs_at(provider).len(), 2);
    }
}

async fn a_submit_whose_answer_is_lost_is_reconciled_without_a_second_provider_job(
    store: StoreKind,
) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.lose_submit_answers = 1);
        let app = app_at(store.clone(), backends_for(&fake, provider, 1.0, 20.0), 2).await;
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", "a kite whose submit is lost"),
        )
        .await;
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        assert_eq!(
            fake.jobs_at(provider).len(),
            1,
            "{provider:?}: one provider job"
        );
    }
}

async fn a_worker_killed_after_the_provider_accepted_the_job_is_resumed_not_resubmitted(
    store: StoreKind,
) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.queue_for = Duration::from_secs(2));
        let backends = backends_for(&fake, provider, 5.0, 20.0);
        // No workers: the test plays the worker that dies.
        let app = app_at(store.clone(), backends.clone(), 0).await;
        let generation = submit(
            &app,
            "vendor_6/model_6",
            text_to_video("vendor_6/model_6", "a kite whose worker dies"),
        )
        .await;
        let generation_id = generation["id"].as_str().unwrap().to_owned();
        let store_handle = app.server.store.clone();
        let claimed = store_handle
            .claim_next("dead-node/w0", Duration::from_secs(1))
            .await
            .unwrap()
            .expect("the job is claimed");
        let model = Catalog::embedded()
            .model("vendor_6/model_6")
            .unwrap()
            .clone();
        let backend = backends.for_model(&model).unwrap();
        let job = Job {
            generation_id: claimed.id.clone(),
            model: claimed.model.clone(),
            mode: claimed.mode.parse().unwrap(),
            input: ValidatedInput::from_stored_json(claimed.input.clone()),
            // A text-to-video job has no media, so its media input is its input.
            media_input: ValidatedInput::from_stored_json(claimed.input.clone()),
            width: 1920,
            height: 1080,
            seed: 7,
        };
        let dying = tokio::spawn(async move { backend.run(job, CancellationToken::new()).await });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let recorded = store_handle.provider_job(&generation_id).await.unwrap();
            if recorded.is_some_and(|recorded| recorded.job_id.is_some()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the provider job was never recorded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The worker dies: nothing it would have done afterwards happens.
        dying.abort();
        assert_eq!(fake.jobs_at(provider).len(), 1);

        let mut app = app;
        app.settings.workers = 2;
        let app = app.restart().await;
        let done = app
            .wait_for_status(&generation_id, &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        assert_eq!(
            fake.jobs_at(provider).len(),
            1,
            "{provider:?}: the same provider job finished the generation"
        );
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

async fn a_rate_limit_storm_delays_jobs_but_does_not_fail_them(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.rate_limit_next = 6);
        let app = app_at(store.clone(), backends_for(&fake, provider, 5.0, 20.0), 2).await;
        let mut ids = Vec::new();
        for prompt in ["a throttled kite", "another throttled kite"] {
            let generation = submit(
                &app,
                "vendor_1/model_1",
                text_to_video("vendor_1/model_1", prompt),
            )
            .await;
            ids.push(generation["id"].as_str().unwrap().to_owned());
        }
        for id in &ids {
            let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
            assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        }
        assert_eq!(fake.state.switches.lock().unwrap().rate_limit_next, 0);
        assert_eq!(fake.jobs_at(provider).len(), 2);
    }
}

async fn an_outage_fails_the_generation_after_the_retry_deadline_with_no_provider_job(
    store: StoreKind,
) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.down = true);
        let app = app_at(store.clone(), backends_for(&fake, provider, 1.0, 2.0), 2).await;
        let before = app.account_state(&app.account.account.id).await;
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", "a kite in an outage"),
        )
        .await;
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "failed", "{provider:?}: {done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{done}");
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "{provider:?}: refunded");
        assert!(fake.jobs_at(provider).is_empty());
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

on_both_stores!(
    every_model_succeeds_through_each_provider_with_the_video_in_our_storage,
    failed_and_moderated_provider_jobs_fail_and_are_refunded,
    a_submit_whose_answer_is_lost_is_reconciled_without_a_second_provider_job,
    a_worker_killed_after_the_provider_accepted_the_job_is_resumed_not_resubmitted,
    a_rate_limit_storm_delays_jobs_but_does_not_fail_them,
    an_outage_fails_the_generation_after_the_retry_deadline_with_no_provider_job,
);
