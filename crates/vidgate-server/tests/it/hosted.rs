//! Models run at hosted providers (fal, Replicate) end to end, against the
//! fake providers of `fake_providers/`, on both stores: the example
//! backends files of `examples/hosted/` with their URLs pointed at the
//! fake, real submits through the API, and the video in our storage.

use crate::common;
use crate::fake_providers;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vidgate_core::{Catalog, ValidatedInput};
use vidgate_server::backend::{BackendsConfig, Job};
use vidgate_server::store::ProviderHealth;

use common::{StoreKind, TestApp, TestSettings, free_port, on_both_stores, spawn_app_with};
use fake_providers::{
    FAL_KEY, FakeJob, FakeProviders, FakeStatus, JobDeadline, Provider, REPLICATE_TOKEN,
    example_backends,
};

/// The example backends file of `provider`, pointed at the fake, with
/// timeouts short enough for tests.
fn backends_for(
    fake: &FakeProviders,
    provider: Provider,
    request_seconds: f64,
    retry_seconds: f64,
) -> BackendsConfig {
    backends_with(
        fake,
        provider,
        json!({
            "request_seconds": request_seconds,
            "start_seconds": 30,
            "job_seconds": 60,
            "poll_seconds": 0.1,
            "retry_seconds": retry_seconds,
        }),
        json!([]),
    )
}

/// The example backends file of `provider`, pointed at the fake, with
/// `timeouts` and the price list `costs` for every model.
fn backends_with(
    fake: &FakeProviders,
    provider: Provider,
    timeouts: Value,
    costs: Value,
) -> BackendsConfig {
    example_backends(fake, provider, |model| {
        model["timeouts"] = timeouts.clone();
        model["costs"] = costs.clone();
    })
}

async fn app_at(store: StoreKind, backends: BackendsConfig, workers: usize) -> TestApp {
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

/// Submits an M1 text-to-video request with `prompt` and waits until its
/// generation is final; the generation.
async fn run_m1(app: &TestApp, prompt: &str) -> Value {
    let generation = submit(
        app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", prompt),
    )
    .await;
    app.wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await
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
            let stored = app.download(video_url).await;
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
        assert_eq!(
            incoming_files(app.data_dir.path()),
            Vec::<std::path::PathBuf>::new(),
            "{provider:?}: each downloaded clip was moved into storage"
        );
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

/// The files that a copy in progress keeps in the storage's incoming
/// directory, anywhere under `directory`.
fn incoming_files(directory: &Path) -> Vec<std::path::PathBuf> {
    walk(directory)
        .into_iter()
        .filter(|path| {
            path.components()
                .any(|component| component.as_os_str() == ".incoming")
                || path.to_string_lossy().ends_with(".partial")
        })
        .collect()
}

async fn an_output_far_larger_than_the_cap_fails_promptly_refunded_leaving_no_file(
    store: StoreKind,
) {
    const CAP: u64 = 1_000_000;
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let backends = example_backends(&fake, provider, |model| {
            model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 30,
                "job_seconds": 60, "poll_seconds": 0.1, "retry_seconds": 20 });
            model["max_output_bytes"] = json!(CAP);
        });
        let app = app_at(store.clone(), backends, 2).await;
        let before = app.account_state(&app.account.account.id).await;
        let model = "vendor_4/model_4";
        let generation = submit(
            &app,
            model,
            text_to_video(model, "a kite [fake:huge-output]"),
        )
        .await;
        let started = Instant::now();
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "failed", "{provider:?}: {done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{done}");
        assert!(
            done["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("larger than {CAP} bytes")),
            "{done}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        // The copy stopped reading just past the cap: what the fake handed
        // its connection is the cap plus what sockets buffer, nowhere near
        // the whole body.
        let sent = fake
            .state
            .huge_output_bytes_sent
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(sent > CAP, "the body was read: {sent}");
        assert!(
            sent < CAP + 64 * 1024 * 1024,
            "{provider:?}: the copy went on past the cap: {sent} bytes sent"
        );
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "{provider:?}: refunded");
        assert_eq!(after.captured, before.captured);
        app.assert_ledger_invariant(&app.account.account.id).await;
        assert_eq!(
            incoming_files(app.data_dir.path()),
            Vec::<std::path::PathBuf>::new(),
            "{provider:?}: the partial copy is removed"
        );
    }
}

async fn a_submit_whose_answer_is_lost_is_reconciled_without_a_second_provider_job(
    store: StoreKind,
) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.lose_submit_answers = 1);
        let app = app_at(store.clone(), backends_for(&fake, provider, 1.0, 20.0), 2).await;
        let done = run_m1(&app, "a kite whose submit is lost").await;
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
        // No workers nor hosted pool: the test plays the claimer that dies.
        let mut settings = TestSettings::new(store.clone());
        settings.backends = backends_for(&fake, provider, 5.0, 20.0);
        settings.workers = 0;
        settings.hosted_jobs = 0;
        settings.lease = Duration::from_secs(2);
        let app = spawn_app_with(settings).await;
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
        // The server's own backend of the model, built with its store.
        let backend = app.server.backends.for_model(&model).unwrap();
        let job = Job {
            generation_id: claimed.id.clone(),
            model: claimed.model.clone(),
            mode: claimed.mode.parse().unwrap(),
            input: ValidatedInput::from_stored_json(claimed.input.clone()),
            // A text-to-video job has no media, so its media input is its input.
            media_input: ValidatedInput::from_stored_json(claimed.input.clone()),
            media: Default::default(),
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
        app.settings.hosted_jobs = TestSettings::new(store.clone()).hosted_jobs;
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

/// Replicate's 429 is run both ways (GUESS replicate-429-headers): with
/// `ratelimit-reset`, and with the documented body alone, whose "resets in
/// ~1s" sets the pause.
async fn a_rate_limit_storm_delays_jobs_but_does_not_fail_them(store: StoreKind) {
    for (provider, with_headers) in [
        (Provider::Fal, true),
        (Provider::Replicate, true),
        (Provider::Replicate, false),
    ] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| {
            switches.rate_limit_next = 6;
            switches.replicate_429_headers = with_headers;
        });
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
        // fal lists finished requests only: a submit with an unknown
        // outcome stays open until the job could have ended (`job_seconds`),
        // so the job's deadline is short here.
        let timeouts = json!({ "request_seconds": 1, "start_seconds": 2, "job_seconds": 4,
            "poll_seconds": 0.1, "retry_seconds": 2 });
        let app = app_at(
            store.clone(),
            backends_with(&fake, provider, timeouts, json!([])),
            2,
        )
        .await;
        let before = app.account_state(&app.account.account.id).await;
        let done = run_m1(&app, "a kite in an outage").await;
        assert_eq!(done["status"], "failed", "{provider:?}: {done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{done}");
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "{provider:?}: refunded");
        assert!(fake.jobs_at(provider).is_empty());
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Timeouts whose polling is too slow to finish a job within a test's
/// patience: a job that ends promptly was ended by its webhook.
fn slow_polling() -> Value {
    json!({
        "request_seconds": 5,
        "start_seconds": 30,
        "job_seconds": 120,
        "poll_seconds": 45,
        "retry_seconds": 20,
    })
}

/// An app with a configured public URL (its own address), so that hosted
/// jobs register their provider webhooks.
async fn app_with_webhooks(store: StoreKind, backends: BackendsConfig) -> TestApp {
    let port = free_port();
    let mut settings = TestSettings::new(store);
    settings.backends = backends;
    settings.lease = Duration::from_secs(2);
    settings.listen = format!("127.0.0.1:{port}").parse().unwrap();
    settings.public_url = Some(format!("http://127.0.0.1:{port}"));
    spawn_app_with(settings).await
}

/// The provider job of a generation once its id is recorded.
async fn recorded_job(app: &TestApp, fake: &FakeProviders, generation_id: &str) -> FakeJob {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let recorded = app.server.store.provider_job(generation_id).await.unwrap();
        if let Some(job_id) = recorded.and_then(|recorded| recorded.job_id) {
            return fake.state.job(&job_id).expect("the fake has the job");
        }
        assert!(Instant::now() < deadline, "no provider job recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An M1 generation at `provider` whose provider webhooks are lost (only
/// the test's own arrive), followed until its provider job is final: the
/// fake, the app, the generation's id and the finished job. The job waits a
/// second in the provider's queue, so the follower's first state read finds
/// it unfinished.
async fn a_finished_job_whose_webhooks_are_lost(
    store: &StoreKind,
    provider: Provider,
    prompt: &str,
) -> (FakeProviders, TestApp, String, FakeJob) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.drop_webhooks = true;
        switches.queue_for = Duration::from_secs(1);
    });
    let app = app_with_webhooks(
        store.clone(),
        backends_with(&fake, provider, slow_polling(), json!([])),
    )
    .await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", prompt),
    )
    .await;
    let id = generation["id"].as_str().unwrap().to_owned();
    let mut job = recorded_job(&app, &fake, &id).await;
    while !job.status.is_final() {
        tokio::time::sleep(Duration::from_millis(50)).await;
        job = fake.state.job(&job.id).unwrap();
    }
    (fake, app, id, job)
}

/// A webhook about `job` as its provider signs it, with the signature's
/// time `sent_at` (Unix seconds), and the body sent swapped for
/// `tampered_body` when given.
fn provider_webhook(
    fake: &FakeProviders,
    job: &FakeJob,
    url: &str,
    sent_at: i64,
    tampered_body: Option<&str>,
) -> reqwest::RequestBuilder {
    let timestamp = sent_at.to_string();
    let client = reqwest::Client::new();
    match job.provider {
        Provider::Fal => {
            let body = json!({ "request_id": job.id, "gateway_request_id": job.id,
                "status": "OK", "payload": { "video": { "url": "https://fal.example/v.mp4" } } })
            .to_string();
            let signature =
                fake_providers::fal::sign(&fake.state, &job.id, &timestamp, body.as_bytes());
            client
                .post(url)
                .header("x-fal-webhook-request-id", &job.id)
                .header("x-fal-webhook-user-id", fake_providers::fal::USER_ID)
                .header("x-fal-webhook-timestamp", &timestamp)
                .header("x-fal-webhook-signature", signature)
                .body(tampered_body.map_or(body, str::to_owned))
        }
        Provider::Replicate => {
            let body = fake_providers::replicate::prediction(&fake.state, job).to_string();
            let message_id = format!("msg_test_{}_{sent_at}", job.id);
            let signature = fake_providers::replicate::sign(
                &fake.state.replicate_webhook_secret,
                &message_id,
                &timestamp,
                &body,
            );
            client
                .post(url)
                .header("webhook-id", message_id)
                .header("webhook-timestamp", &timestamp)
                .header("webhook-signature", signature)
                .body(tampered_body.map_or(body, str::to_owned))
        }
    }
}

/// The webhook route of a generation's job without its secret: the URL as
/// it was before the secret was added, which anyone could build.
fn bare_webhook_url(app: &TestApp, model: &str, generation_id: &str) -> String {
    let base = app.api_base.trim_end_matches("/api/v1");
    format!("{base}/internal/providers/{model}/{generation_id}")
}

/// The webhook URL vidgate registered with the provider for `job`.
fn registered_webhook_url(job: &FakeJob) -> String {
    job.webhook_url
        .clone()
        .expect("a webhook URL was registered")
}

async fn a_signed_provider_webhook_finishes_the_job_without_waiting_for_polling(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let app = app_with_webhooks(
            store.clone(),
            backends_with(&fake, provider, slow_polling(), json!([])),
        )
        .await;
        let job = finishes_by_its_webhook(&app, &fake, provider, "a kite with a webhook").await;
        assert!(
            job.webhook_url.is_some(),
            "{provider:?}: a webhook was registered"
        );
    }
}

/// Submits an M1 job under `slow_polling` and checks that it succeeded
/// before a second poll could have seen it end (the first state read finds
/// the job queued; the next would be 45 s later), and that the provider's
/// webhook was taken; returns the provider job.
async fn finishes_by_its_webhook(
    app: &TestApp,
    fake: &FakeProviders,
    provider: Provider,
    prompt: &str,
) -> FakeJob {
    let started = Instant::now();
    let generation = submit(
        app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", prompt),
    )
    .await;
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{provider:?}: finished after {:?}",
        started.elapsed()
    );
    let job = fake.jobs_at(provider).remove(0);
    let sent = fake.state.webhooks_sent.lock().unwrap().clone();
    assert!(
        sent.iter()
            .any(|(id, status)| id == &job.id && *status == 200),
        "{provider:?}: the webhook was taken: {sent:?}"
    );
    job
}

async fn a_forged_stale_or_duplicate_provider_webhook_changes_nothing(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let (fake, app, id, job) =
            a_finished_job_whose_webhooks_are_lost(&store, provider, "a kite with forged webhooks")
                .await;
        let id = id.as_str();
        let url = registered_webhook_url(&job);
        let now = fake_providers::now_seconds() as i64;
        let forged = provider_webhook(&fake, &job, &url, now, Some(r#"{"status":"ERROR"}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status(), 401, "{provider:?}: a forged body");
        let stale = provider_webhook(&fake, &job, &url, now - 600, None)
            .send()
            .await
            .unwrap();
        assert_eq!(stale.status(), 401, "{provider:?}: a stale signature");
        let unsigned = reqwest::Client::new()
            .post(&url)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(unsigned.status(), 400, "{provider:?}: no signature");
        let elsewhere = provider_webhook(
            &fake,
            &job,
            &bare_webhook_url(&app, "vendor_1/model_1", "gen_someone_else"),
            now,
            None,
        )
        .send()
        .await
        .unwrap();
        assert_eq!(elsewhere.status(), 404, "{provider:?}: another generation");
        // None of them woke the job: it is still waiting for its next poll.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            app.generation(id).await["status"],
            "running",
            "{provider:?}"
        );

        let genuine = provider_webhook(&fake, &job, &url, now, None);
        let replay = genuine.try_clone().unwrap();
        let taken = genuine.send().await.unwrap();
        assert_eq!(taken.status(), 200);
        assert_eq!(taken.json::<Value>().await.unwrap()["duplicate"], false);
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        let duplicate = replay.send().await.unwrap();
        assert_eq!(duplicate.status(), 200, "{provider:?}: acknowledged");
        assert_eq!(duplicate.json::<Value>().await.unwrap()["duplicate"], true);
        assert_eq!(app.generation(id).await, done, "{provider:?}: unchanged");
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

async fn a_lost_provider_webhook_is_covered_by_polling(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.drop_webhooks = true);
        let mut timeouts = slow_polling();
        timeouts["poll_seconds"] = json!(0.3);
        // The backstop's first read comes after the model's usual run time.
        timeouts["usual_run_seconds"] = json!(0.5);
        let app = app_with_webhooks(
            store.clone(),
            backends_with(&fake, provider, timeouts, json!([])),
        )
        .await;
        let done = run_m1(&app, "a kite whose webhook is lost").await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        assert!(fake.jobs_at(provider)[0].webhook_url.is_some());
        assert!(fake.state.webhooks_sent.lock().unwrap().is_empty());
    }
}

/// A provider webhook that reaches another node than the one following the
/// job (a load balancer chose it) wakes the follower through the database,
/// instead of leaving the job to its next poll 45 s later. PostgreSQL only:
/// one node serves a SQLite database.
#[tokio::test]
async fn a_provider_webhook_taken_by_another_node_wakes_the_follower() {
    let Some(store) =
        StoreKind::postgres("a_provider_webhook_taken_by_another_node_wakes_the_follower")
    else {
        return;
    };
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let webhook_node_url = format!("http://127.0.0.1:{}", free_port());
        // The follower registers the other node's address with the provider.
        let mut follower = TestSettings::new(store.clone());
        follower.backends = backends_with(&fake, provider, slow_polling(), json!([]));
        follower.lease = Duration::from_secs(2);
        follower.public_url = Some(webhook_node_url.clone());
        let app = spawn_app_with(follower).await;
        // The other node: no workers nor hosted pool, and backends of its
        // own, as another process has.
        let mut webhook_node = TestSettings::new(store.clone());
        webhook_node.backends = backends_with(&fake, provider, slow_polling(), json!([]));
        webhook_node.workers = 0;
        webhook_node.hosted_jobs = 0;
        webhook_node.listen = webhook_node_url
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        webhook_node.public_url = Some(webhook_node_url.clone());
        let webhook_node = app.start_another_node(webhook_node).await;

        let job = finishes_by_its_webhook(&app, &fake, provider, "a kite over two nodes").await;
        assert!(
            job.webhook_url
                .as_deref()
                .is_some_and(|url| url.starts_with(&webhook_node_url)),
            "{provider:?}: the webhook goes to the other node: {:?}",
            job.webhook_url
        );
        webhook_node.shutdown().await;
    }
}

async fn cancel_while_queued_at_the_provider_cancels_there_and_refunds(store: StoreKind) {
    // fal does not say which answer a cancel of a queued request gets
    // (GUESS fal-cancel-answer): both readings are run. Replicate answers as
    // its recorded cancel did: `canceled`, with the prediction started a
    // moment before and billed for it (GUESS
    // replicate-cancel-answer-while-queued), which the operator bears.
    let cases = [
        (Provider::Fal, "OK"),
        (Provider::Fal, "CANCELLATION_REQUESTED"),
        (Provider::Replicate, "OK"),
    ];
    for (provider, fal_answer) in cases {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| {
            switches.queue_for = Duration::from_secs(30);
            switches.fal_cancel_queued_answer = fal_answer;
        });
        let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
            "poll_seconds": 0.1, "retry_seconds": 20 });
        let costs = json!([{ "from": "2020-01-01", "usd_per_second": "0.50" }]);
        let app = app_at(
            store.clone(),
            backends_with(&fake, provider, timeouts, costs),
            2,
        )
        .await;
        let before = app.account_state(&app.account.account.id).await;
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", "a kite canceled in the queue"),
        )
        .await;
        let id = generation["id"].as_str().unwrap();
        let job = recorded_job(&app, &fake, id).await;
        assert_eq!(app.generation(id).await["status"], "running");
        let canceled = app.cancel(&generation, app.key()).await;
        assert_eq!(canceled.status(), 200, "{provider:?} {fal_answer}");
        let canceled: Value = canceled.json().await.unwrap();
        assert_eq!(canceled["status"], "canceled", "{provider:?}: {canceled}");
        let job = fake.state.job(&job.id).unwrap();
        assert_eq!(job.status, FakeStatus::Canceled, "{provider:?}");
        assert!(!job.canceled_while_running);
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "{provider:?}: refunded");
        assert_eq!(after.captured, before.captured);
        // The worker that followed the job stops without changing it.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(app.generation(id).await["status"], "canceled");
        // The seconds a prediction ran before the cancel are the
        // operator's cost; a fal request removed from its queue cost
        // nothing.
        let usage = app.server.store.model_usage(0).await.unwrap();
        match provider {
            Provider::Replicate => {
                let ran = job.completed_at.unwrap() - job.started_at.unwrap();
                assert_eq!(usage.len(), 1, "{usage:?}");
                assert_eq!(usage[0].generations, 0);
                assert_eq!(usage[0].provider_cost.0, (500_000.0 * ran).round() as i64);
            }
            Provider::Fal => assert!(usage.is_empty(), "{usage:?}"),
        }
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

async fn cancel_once_the_provider_started_the_job_is_refused(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.run_for = Duration::from_secs(2));
        let app = app_at(store.clone(), backends_for(&fake, provider, 5.0, 20.0), 2).await;
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", "a kite already in flight"),
        )
        .await;
        let id = generation["id"].as_str().unwrap();
        let mut job = recorded_job(&app, &fake, id).await;
        while job.status == FakeStatus::Queued {
            tokio::time::sleep(Duration::from_millis(20)).await;
            job = fake.state.job(&job.id).unwrap();
        }
        assert_eq!(job.status, FakeStatus::Running);
        let refused = app.cancel(&generation, app.key()).await;
        assert_eq!(refused.status(), 409, "{provider:?}");
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        assert!(!fake.state.job(&job.id).unwrap().canceled_while_running);
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// A backends file running M1 at fal, then at Replicate, each with the
/// credential `fal_key` and `replicate_token`.
fn failover_backends(fake: &FakeProviders, fal_key: &str, replicate_token: &str) -> BackendsConfig {
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 5 });
    failover_backends_with(fake, fal_key, replicate_token, timeouts)
}

/// `failover_backends` with the providers' `timeouts`.
fn failover_backends_with(
    fake: &FakeProviders,
    fal_key: &str,
    replicate_token: &str,
    timeouts: Value,
) -> BackendsConfig {
    fake_providers::failover_backends(
        fake,
        "vendor_1/model_1",
        fal_key,
        replicate_token,
        &timeouts,
    )
}

/// The providers' circuits as the store knows them, once `ready` holds
/// (circuits save in the background).
async fn provider_health_when(
    app: &TestApp,
    ready: impl Fn(&[ProviderHealth]) -> bool,
) -> Vec<ProviderHealth> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let health = app.server.store.provider_health().await.unwrap();
        if ready(health.as_slice()) {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "the providers' health: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn health_of<'a>(health: &'a [ProviderHealth], provider: &str) -> Option<&'a ProviderHealth> {
    health.iter().find(|health| health.provider == provider)
}

async fn a_provider_that_refuses_the_job_hands_it_to_the_next_and_its_circuit_opens(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    let app = app_at(
        store,
        failover_backends(&fake, "not-our-fal-key", REPLICATE_TOKEN),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    for index in 0..6 {
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video(
                "vendor_1/model_1",
                &format!("a kite that fails over {index}"),
            ),
        )
        .await;
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    // fal refused every submit it saw (our key is wrong), so it has no job;
    // Replicate ran each generation exactly once.
    assert!(fake.jobs_at(Provider::Fal).is_empty());
    assert_eq!(fake.jobs_at(Provider::Replicate).len(), 6);
    let health = provider_health_when(&app, |health| {
        health_of(health, "fal").is_some_and(|fal| fal.open)
            && health_of(health, "replicate")
                .is_some_and(|replicate| replicate.latency_ms.is_some())
    })
    .await;
    let fal = health_of(&health, "fal").unwrap();
    assert!(fal.consecutive_failures >= 5, "{fal:?}");
    assert!(
        fal.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("credential"),
        "{fal:?}"
    );
    let replicate = health_of(&health, "replicate").unwrap();
    assert!(!replicate.open, "{replicate:?}");
    assert_eq!(replicate.consecutive_failures, 0);
    let after = app.account_state(&app.account.account.id).await;
    assert!(
        after.balance < before.balance,
        "the six clips were paid for"
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_model_with_no_healthy_provider_answers_503_and_holds_nothing(store: StoreKind) {
    let fake = FakeProviders::start().await;
    let app = app_at(
        store,
        failover_backends(&fake, "not-our-fal-key", "not-our-replicate-token"),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    for index in 0..5 {
        let done = run_m1(&app, &format!("a kite nobody takes {index}")).await;
        assert_eq!(done["status"], "failed", "{done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    }
    assert!(fake.jobs().is_empty());
    // Both circuits are open now: the next submit is refused before any
    // hold.
    let refused = app
        .submit(
            "vendor_1/model_1/text-to-video",
            text_to_video("vendor_1/model_1", "a kite refused at the door"),
        )
        .await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_unavailable", "{body}");
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded, and nothing held");
    assert_eq!(after.held, before.held);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_succeeded_generation_records_its_provider_cost_for_the_usage_report(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
            "poll_seconds": 0.1, "retry_seconds": 20 });
        // The line from 2099 is not in force yet; the older general one is.
        let costs = json!([
            { "from": "2020-01-01", "usd_per_second": "0.10" },
            { "from": "2099-01-01", "usd_per_second": "9" },
        ]);
        let app = app_at(
            store.clone(),
            backends_with(&fake, provider, timeouts, costs),
            2,
        )
        .await;
        let done = run_m1(&app, "a kite with a cost").await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        let duration_s = done["output"]["duration_s"].as_f64().unwrap();
        let usage = app.server.store.model_usage(0).await.unwrap();
        assert_eq!(usage.len(), 1, "{provider:?}: {usage:?}");
        let row = &usage[0];
        assert_eq!(row.model, "vendor_1/model_1");
        assert_eq!(row.generations, 1);
        assert_eq!(row.provider_cost.0, (100_000.0 * duration_s).round() as i64);
        assert_eq!(row.uncosted, 0);
        let account = app.account_state(&app.account.account.id).await;
        assert_eq!(row.revenue, account.captured, "{provider:?}");
    }
}

/// Issue 17: a failed read of the provider's webhook keys (fal's JWKS,
/// Replicate's webhook secret) is remembered for a while, so a flood of
/// webhooks during an outage, forged ones included, costs the provider one
/// read rather than one each. Issue 38, item 7: an unsigned request is
/// refused (400) before the keys are read, and a signed one that cannot be
/// verified is answered without the provider's own error text.
async fn a_failed_key_fetch_is_remembered_so_a_webhook_flood_reads_the_keys_once(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.drop_webhooks = true);
        let app = app_with_webhooks(
            store.clone(),
            backends_with(&fake, provider, slow_polling(), json!([])),
        )
        .await;
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", "a kite [fake:never-start]"),
        )
        .await;
        let job = recorded_job(&app, &fake, generation["id"].as_str().unwrap()).await;
        let url = registered_webhook_url(&job);
        fake.switches(|switches| switches.down = true);
        let client = reqwest::Client::new();
        for _ in 0..5 {
            let answer = client.post(&url).body("{}").send().await.unwrap();
            assert_eq!(answer.status(), 400, "{provider:?}: unsigned");
        }
        assert_eq!(
            fake.key_fetches_at(provider),
            0,
            "{provider:?}: an unsigned request reads no keys"
        );
        let now = fake_providers::now_seconds() as i64;
        for _ in 0..20 {
            let answer = provider_webhook(&fake, &job, &url, now, Some("{}"))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 502, "{provider:?}: keys unavailable");
            let body: Value = answer.json().await.unwrap();
            assert_eq!(
                body["error"]["message"],
                "The webhook could not be verified now; nothing was taken. Retry later.",
                "{provider:?}: no text of the provider's"
            );
        }
        assert_eq!(fake.key_fetches_at(provider), 1, "{provider:?}");
        // Once the provider is back, the remembered failure still holds
        // for its 30 s: nothing is read again.
        fake.switches(|switches| switches.down = false);
        let answer = provider_webhook(&fake, &job, &url, now, Some("{}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 502, "{provider:?}");
        assert_eq!(fake.key_fetches_at(provider), 1, "{provider:?}");
    }
}

/// Issue 38, item 1: a webhook reaches a generation only through the URL
/// vidgate registered, whose last segment is a secret of the generation. A
/// genuine, signed webhook sent to the route without it, or with another
/// secret, is refused and wakes nothing.
async fn a_provider_webhook_without_the_generations_url_secret_is_refused(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let (fake, app, id, job) =
            a_finished_job_whose_webhooks_are_lost(&store, provider, "a kite behind a secret")
                .await;
        let id = id.as_str();
        let registered = registered_webhook_url(&job);
        let bare = bare_webhook_url(&app, "vendor_1/model_1", id);
        assert!(
            registered.starts_with(&format!("{bare}/")) && registered.len() > bare.len() + 40,
            "{provider:?}: the registered URL carries a secret: {registered}"
        );
        let now = fake_providers::now_seconds() as i64;
        let wrong_secret = format!("{bare}/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
        for url in [&bare, &wrong_secret] {
            let refused = provider_webhook(&fake, &job, url, now, None)
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), 404, "{provider:?}: {url}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            app.generation(id).await["status"],
            "running",
            "{provider:?}: nothing woke the job"
        );
        let taken = provider_webhook(&fake, &job, &registered, now, None)
            .send()
            .await
            .unwrap();
        assert_eq!(taken.status(), 200, "{provider:?}");
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
    }
}

/// Issue 38, item 1: fal signs every customer's webhooks with the same
/// keys. A stranger's fal request that registered the generation's
/// webhook URL, while the generation's submit answer was lost, is never
/// adopted: our key cannot read it (and, with `webhook_user_id` set, its
/// user id is refused first). The generation follows its own request, and
/// ends with exactly one.
async fn a_fal_webhook_for_a_request_in_another_account_adopts_nothing(store: StoreKind) {
    for (webhook_user_id, refused_with) in [(None, 404), (Some(fake_providers::fal::USER_ID), 401)]
    {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| switches.lose_submit_answers = 1);
        let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 120,
            "poll_seconds": 0.1, "retry_seconds": 60 });
        let backends = example_backends(&fake, Provider::Fal, |model| {
            model["timeouts"] = timeouts.clone();
            if let Some(user_id) = webhook_user_id {
                model["webhook_user_id"] = json!(user_id);
            }
        });
        let app = app_with_webhooks(store.clone(), backends).await;
        // Our own request starts late, so the stranger's webhook comes
        // first, while the submit's outcome is unknown.
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", "a kite of ours [fake:slow-start]"),
        )
        .await;
        let id = generation["id"].as_str().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let ours = loop {
            if let Some(job) = fake.jobs_at(Provider::Fal).pop() {
                break job;
            }
            assert!(Instant::now() < deadline, "our request was never sent");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The stranger registers our URL, secret and all, as the webhook of
        // a request of their own account.
        let mut strangers_input = ours.input.clone();
        strangers_input["prompt"] = json!("a kite of the stranger's");
        let mut submit_url =
            url::Url::parse(&format!("{}/{}", fake.fal_queue_url(), ours.target)).unwrap();
        submit_url
            .query_pairs_mut()
            .append_pair("fal_webhook", &registered_webhook_url(&ours));
        let strangers: Value = reqwest::Client::new()
            .post(submit_url)
            .header(
                "authorization",
                format!("Key {}", fake_providers::fal::OTHER_KEY),
            )
            .json(&strangers_input)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let strangers_id = strangers["request_id"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !fake
            .state
            .webhooks_sent
            .lock()
            .unwrap()
            .iter()
            .any(|(job_id, _)| job_id == &strangers_id)
        {
            assert!(
                Instant::now() < deadline,
                "the stranger's webhook was not sent"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            app.server
                .store
                .provider_job(id)
                .await
                .unwrap()
                .and_then(|recorded| recorded.job_id)
                .is_none_or(|job_id| job_id == ours.id),
            "{webhook_user_id:?}: the stranger's request was not adopted"
        );

        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{webhook_user_id:?}: {done}");
        let recorded = app.server.store.provider_job(id).await.unwrap().unwrap();
        assert_eq!(recorded.job_id.as_deref(), Some(ours.id.as_str()));
        let answers: Vec<u16> = fake
            .state
            .webhooks_sent
            .lock()
            .unwrap()
            .iter()
            .filter(|(job_id, _)| job_id == &strangers_id)
            .map(|(_, status)| *status)
            .collect();
        assert!(
            !answers.is_empty() && answers.iter().all(|status| *status == refused_with),
            "{webhook_user_id:?}: the stranger's webhook was refused: {answers:?}"
        );
        let ours_at_fal: Vec<FakeJob> = fake
            .jobs_at(Provider::Fal)
            .into_iter()
            .filter(|job| job.account == FAL_KEY)
            .collect();
        assert_eq!(
            ours_at_fal.len(),
            1,
            "{webhook_user_id:?}: one request of ours"
        );
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Issue 38, item 1: one provider job belongs to one generation. Two
/// generations whose submits have unknown outcomes, each adopting the same
/// job at once (two webhooks, or a webhook and a reconcile), end with one
/// owner: the other adoption is refused cleanly, without an error.
async fn two_adoptions_of_one_provider_job_at_once_give_it_to_one_generation(store: StoreKind) {
    let app = common::spawn_app_without_workers(store).await;
    let store = app.server.store.clone();
    for round in 0..10 {
        let mut generation_ids = Vec::new();
        for _ in 0..2 {
            let generation = submit(
                &app,
                "vendor_1/model_1",
                text_to_video("vendor_1/model_1", "two kites, one job"),
            )
            .await;
            let claimed = store
                .claim_next("a-node/hosted/0", Duration::from_secs(600))
                .await
                .unwrap()
                .expect("the job is claimed");
            assert_eq!(claimed.id, generation["id"]);
            let intent = vidgate_server::store::NewProviderJob {
                generation_id: claimed.id.clone(),
                provider: "fal".into(),
                target: "fal-ai/kite/text-to-video".into(),
                input: json!({ "prompt": "two kites, one job" }),
                intent_at: unix_now() * 1000,
            };
            assert!(store.record_provider_intent(&intent).await.unwrap());
            generation_ids.push(claimed.id);
        }
        let job_id = format!("00000000-0000-4000-8000-{round:012}");
        let (first, second) = tokio::join!(
            store.record_provider_job_id(&generation_ids[0], &job_id),
            store.record_provider_job_id(&generation_ids[1], &job_id),
        );
        let (first, second) = (first.unwrap(), second.unwrap());
        assert!(
            first != second,
            "round {round}: exactly one adopts: {first} {second}"
        );
        let owner = store
            .generation_of_provider_job("fal", &job_id)
            .await
            .unwrap()
            .expect("the job has an owner");
        let winner = if first {
            &generation_ids[0]
        } else {
            &generation_ids[1]
        };
        assert_eq!(&owner, winner, "round {round}");
        let loser = if first {
            &generation_ids[1]
        } else {
            &generation_ids[0]
        };
        let lost = store.provider_job(loser).await.unwrap().unwrap();
        assert_eq!(
            lost.job_id, None,
            "round {round}: the other keeps its intent open"
        );
    }
}

const M1_IMAGE_TO_VIDEO: &str = "vendor_1/model_1/image-to-video";

/// The Unix time now, in seconds.
fn unix_now() -> i64 {
    fake_providers::now_seconds() as i64
}

/// The `expires` of a signed media URL.
fn expiry_of(url: &str) -> i64 {
    let (_, query) = url.split_once('?').expect("the URL is signed");
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "expires")
        .and_then(|(_, value)| value.parse().ok())
        .expect("the URL has an expiry")
}

/// Issue 17, item 6: a provider fetches a job's media from vidgate, within
/// its URL's lifetime, through a signed URL of the exact bytes submit
/// checked; the URL lasts the model's start deadline and ten minutes more.
async fn a_provider_fetches_the_kept_media_through_a_signed_url(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        let app = app_at(store.clone(), backends_for(&fake, provider, 5.0, 20.0), 2).await;
        let upload = app.upload_png().await;
        let upload_url = upload["url"].as_str().unwrap();
        let uploaded = app.download(upload_url).await;
        let generation = app
            .submit_ok(
                M1_IMAGE_TO_VIDEO,
                json!({ "prompt": "the card comes alive", "image_url": upload_url,
                        "duration": 2, "resolution": "480p" }),
            )
            .await;
        let submitted_at = unix_now();
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        let job = &fake.jobs_at(provider)[0];
        let fetches = fake.state.media_fetches.lock().unwrap().clone();
        assert_eq!(fetches.len(), 1, "{provider:?}: {fetches:?}");
        let fetch = &fetches[0];
        assert_eq!(fetch.job_id, job.id);
        assert_eq!(fetch.status, 200, "{provider:?}: {fetch:?}");
        assert_eq!(
            fetch.sha256.as_deref(),
            Some(fake_providers::hex_digest(&uploaded).as_str()),
            "{provider:?}: the bytes submit checked"
        );
        // vidgate's signed URL of its kept copy, never the customer's.
        assert!(
            fetch
                .url
                .starts_with(&format!("{}/files/media/", app.api_base))
                && fetch.url.contains("&signature="),
            "{provider:?}: {}",
            fetch.url
        );
        // The test's start deadline is 30 s; the margin is ten minutes.
        let lifetime = expiry_of(&fetch.url) - submitted_at;
        assert!(
            (600..=632).contains(&lifetime),
            "{provider:?}: a lifetime of {lifetime} s"
        );
    }
}

/// Asserts that `url` answers 403 `forbidden` with a message naming `why`.
async fn assert_media_refused(app: &TestApp, url: &str, why: &str) {
    let response = app.client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 403, "{url}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(why), "{url}: {message}");
}

/// Issue 17, item 6: a media URL handed to a provider is refused with 403
/// once it has expired, and at once when its signature or expiry was
/// changed, when its signature is used for another generation's file, or
/// without its signature. A provider that starts the job after the URL
/// expired cannot fetch the media, and the generation fails and is
/// refunded.
async fn a_media_url_is_refused_after_it_expires_or_when_tampered_with(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // The jobs wait in the provider's queue past their URLs' lifetime.
    fake.switches(|switches| switches.queue_for = Duration::from_secs(9));
    let timeouts = json!({
        "request_seconds": 5,
        "start_seconds": 30,
        "job_seconds": 60,
        "poll_seconds": 0.1,
        "retry_seconds": 20,
        "media_url_seconds": 5,
    });
    let app = app_at(
        store,
        backends_with(&fake, Provider::Replicate, timeouts, json!([])),
        2,
    )
    .await;
    let mut handed = Vec::new();
    for prompt in ["the first card", "the second card"] {
        let upload = app.upload_png().await;
        let generation = app
            .submit_ok(
                M1_IMAGE_TO_VIDEO,
                json!({ "prompt": prompt, "image_url": upload["url"],
                        "duration": 2, "resolution": "480p" }),
            )
            .await;
        let id = generation["id"].as_str().unwrap().to_owned();
        let job = recorded_job(&app, &fake, &id).await;
        // Replicate's field for M1's image.
        handed.push((id, job.input["image"].as_str().unwrap().to_owned()));
    }
    let (first_id, first_url) = &handed[0];
    let (_, second_url) = &handed[1];
    let (first_file, first_query) = first_url.split_once('?').unwrap();
    let (second_file, _) = second_url.split_once('?').unwrap();

    let fetched = app.client.get(first_url).send().await.unwrap();
    assert_eq!(fetched.status(), 200, "within its lifetime");
    let (before, signature) = first_url.split_once("signature=").unwrap();
    let flipped = if signature.starts_with('A') { "B" } else { "A" };
    assert_media_refused(
        &app,
        &format!("{before}signature={flipped}{}", &signature[1..]),
        "signature",
    )
    .await;
    let expires = expiry_of(first_url);
    assert_media_refused(
        &app,
        &first_url.replace(
            &format!("expires={expires}"),
            &format!("expires={}", expires + 3600),
        ),
        "signature",
    )
    .await;
    assert_media_refused(&app, &format!("{second_file}?{first_query}"), "signature").await;
    assert_media_refused(&app, first_file, "not signed").await;
    // An escaped spelling, which the file server would decode to the same
    // copy, is no way round the signature.
    let escaped = app
        .client
        .get(first_file.replace("/files/media/", "/files/%6dedia/"))
        .send()
        .await
        .unwrap();
    assert_eq!(escaped.status(), 404, "an escaped spelling");
    // Nor can a customer's request reach the copy by naming it as its own
    // media, signed or not, where submit would read it from storage.
    let held_before = app.account_state(&app.account.account.id).await.held;
    for url in [first_url.as_str(), first_file] {
        let refused = app
            .submit(
                M1_IMAGE_TO_VIDEO,
                json!({ "prompt": "a borrowed card", "image_url": url,
                        "duration": 2, "resolution": "480p" }),
            )
            .await;
        common::assert_invalid_request(refused, "image_url").await;
    }
    assert_eq!(
        app.account_state(&app.account.account.id).await.held,
        held_before
    );

    while unix_now() < expires {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_media_refused(&app, first_url, "expired").await;

    let done = app
        .wait_for_status(first_id, &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    let first_job = recorded_job(&app, &fake, first_id).await;
    let fetches = fake.state.media_fetches.lock().unwrap().clone();
    let refused: Vec<u16> = fetches
        .iter()
        .filter(|fetch| fetch.job_id == first_job.id)
        .map(|fetch| fetch.status)
        .collect();
    assert_eq!(refused, vec![403], "{fetches:?}");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 28: fal lists finished requests only, so a request whose submit
/// answer was lost is not in the list while it is queued or running. It
/// must not be submitted again then: it is found once it ends. Issue 37:
/// that the list shows finished requests only is a guess (GUESS
/// fal-list-finished-only), so the other reading runs too: a list that
/// shows the running request gives it at once, and still one job.
async fn a_lost_fal_submit_of_a_long_job_is_found_when_it_ends_never_submitted_twice(
    store: StoreKind,
) {
    for shows_unfinished in [false, true] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| {
            switches.lose_submit_answers = 1;
            switches.run_for = Duration::from_secs(4);
            switches.fal_list_shows_unfinished = shows_unfinished;
        });
        let app = app_at(
            store.clone(),
            backends_for(&fake, Provider::Fal, 1.0, 20.0),
            2,
        )
        .await;
        let done = run_m1(&app, "a long kite whose submit is lost").await;
        assert_eq!(done["status"], "succeeded", "{shows_unfinished}: {done}");
        assert_eq!(
            fake.jobs_at(Provider::Fal).len(),
            1,
            "{shows_unfinished}: one fal request"
        );
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Issue 28: a verified provider webhook for the generation proves the job
/// of a submit whose answer was lost, even where the provider's list
/// cannot be read.
async fn a_webhook_proves_the_job_of_a_submit_whose_answer_was_lost(store: StoreKind) {
    for provider in [Provider::Fal, Provider::Replicate] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| {
            switches.lose_submit_answers = 1;
            switches.lists_down = true;
        });
        let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 120,
            "poll_seconds": 0.1, "retry_seconds": 60 });
        let app = app_with_webhooks(
            store.clone(),
            backends_with(&fake, provider, timeouts, json!([])),
        )
        .await;
        let done = run_m1(&app, "a kite proved by its webhook").await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        assert_eq!(fake.jobs_at(provider).len(), 1, "{provider:?}: one job");
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Issue 37: Replicate removes a prediction's input and output an hour
/// after it ran (`data_removed`), so a list read that late cannot tell
/// whether it is the job of a submit whose answer was lost. It is never
/// taken for absence: nothing is submitted again, the generation fails at
/// its job's deadline, refunded, and the cost of the job it may have made
/// is recorded for the usage report.
async fn a_listed_prediction_whose_data_was_removed_is_never_submitted_again(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.lose_submit_answers = 1;
        // The list is read (2 s after the intent) after the prediction
        // ended: its data is gone by then, as an hour later at Replicate.
        switches.replicate_removes_data_after = Some(Duration::ZERO);
    });
    let timeouts = json!({ "request_seconds": 1, "start_seconds": 2, "job_seconds": 4,
        "poll_seconds": 0.1, "retry_seconds": 20 });
    let costs = json!([{ "from": "2020-01-01", "usd_per_second": "0.10" }]);
    let app = app_at(
        store,
        backends_with(&fake, Provider::Replicate, timeouts, costs),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let submitted_at = Instant::now();
    let done = run_m1(&app, "a kite whose prediction's data was removed").await;
    let predictions = fake.jobs_at(Provider::Replicate);
    assert_eq!(
        predictions.len(),
        1,
        "never submitted again: {predictions:?}"
    );
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert!(
        submitted_at.elapsed() >= Duration::from_secs(3),
        "it waited for the job's deadline (4 s from the intent) for a webhook"
    );
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
    // M1's 2 s at $0.10 a second: what the operator may have paid.
    let usage = app.server.store.model_usage(0).await.unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].generations, 0);
    assert_eq!(usage[0].provider_cost.0, 200_000);
}

/// Issue 28: Replicate's `Cancel-After` bounds the whole prediction from
/// its creation, so it carries the job's deadline, not the start deadline:
/// a prediction that starts in time and runs longer than the start
/// deadline finishes.
async fn replicate_cancel_after_is_the_whole_jobs_lifetime(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.queue_for = Duration::from_secs(1);
        switches.run_for = Duration::from_secs(6);
    });
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 5, "job_seconds": 60,
        "poll_seconds": 0.2, "retry_seconds": 20 });
    let app = app_at(
        store,
        backends_with(&fake, Provider::Replicate, timeouts, json!([])),
        2,
    )
    .await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        text_to_video(
            "vendor_1/model_1",
            "a kite that runs past the start deadline",
        ),
    )
    .await;
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let job = fake.jobs_at(Provider::Replicate).remove(0);
    assert_eq!(job.deadline, Some(JobDeadline::Lifetime(60.0)));
}

/// Issue 28: the start deadline at Replicate is vidgate's to keep: a
/// prediction still starting at it is canceled (for free, as it never ran)
/// and its generation fails as timed out, refunded.
async fn a_replicate_prediction_still_starting_at_the_start_deadline_is_canceled_and_refunded(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 1, "job_seconds": 60,
        "poll_seconds": 0.2, "retry_seconds": 20 });
    let app = app_at(
        store,
        backends_with(&fake, Provider::Replicate, timeouts, json!([])),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        text_to_video(
            "vendor_1/model_1",
            "a kite that never starts [fake:never-start]",
        ),
    )
    .await;
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_timeout", "{done}");
    let job = fake.jobs_at(Provider::Replicate).remove(0);
    assert_eq!(job.status, FakeStatus::Canceled);
    assert!(!job.canceled_while_running);
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 28: while fal's submits fail and its reads work, the reads do not
/// close the circuit of fal's creates, and once it opens new jobs go
/// straight to Replicate. A submit answered by fal's ingress (which fal's
/// own client knows never reached the queue) moves to Replicate at once;
/// one answered 503 by fal's servers has an unknown outcome and moves once
/// fal is proved not to have the job. No job runs at fal.
async fn a_submit_outage_at_the_first_provider_moves_new_jobs_to_the_next(store: StoreKind) {
    for at_ingress in [true, false] {
        let fake = FakeProviders::start().await;
        fake.switches(|switches| {
            switches.submits_down_at = Some(Provider::Fal);
            switches.fal_submit_outage_at_ingress = at_ingress;
        });
        let timeouts = json!({ "request_seconds": 1, "start_seconds": 2, "job_seconds": 4,
            "poll_seconds": 0.1, "retry_seconds": 4 });
        let app = app_at(
            store.clone(),
            failover_backends_with(&fake, FAL_KEY, REPLICATE_TOKEN, timeouts),
            4,
        )
        .await;
        let mut ids = Vec::new();
        for index in 0..8 {
            let generation = submit(
                &app,
                "vendor_1/model_1",
                text_to_video(
                    "vendor_1/model_1",
                    &format!("a kite in a fal submit outage {index}"),
                ),
            )
            .await;
            ids.push(generation["id"].as_str().unwrap().to_owned());
        }
        for id in &ids {
            let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
            assert_eq!(done["status"], "succeeded", "ingress {at_ingress}: {done}");
        }
        assert!(fake.jobs_at(Provider::Fal).is_empty());
        assert_eq!(fake.jobs_at(Provider::Replicate).len(), 8);
        let health = provider_health_when(&app, |health| {
            health_of(health, "fal").is_some_and(|fal| fal.open)
                && (at_ingress || health_of(health, "fal reads").is_some())
        })
        .await;
        if !at_ingress {
            // The reconciles' list reads worked, and closed nothing.
            let reads = health_of(&health, "fal reads").unwrap();
            assert!(!reads.open, "fal's reads work: {reads:?}");
        }
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Replicate's documented limits scaled down for a test: 60 creates and
/// 120 other calls a minute, enforced by the fake and given to vidgate as
/// the budget.
const SCALED_LIMITS: fake_providers::RateLimits = fake_providers::RateLimits {
    creates_per_minute: 60,
    others_per_minute: 120,
};

fn scaled_budget() -> Value {
    json!({
        "creates_per_minute": SCALED_LIMITS.creates_per_minute,
        "creates_burst": 6,
        "others_per_minute": SCALED_LIMITS.others_per_minute,
        "others_burst": 10,
    })
}

/// Many jobs at once against a fake Replicate that enforces its limits
/// (scaled down): every job succeeds, no minute window sees more calls of
/// a class than its limit, and the budget keeps the provider from
/// answering 429 at all, though the jobs' polling alone (every 0.1 s)
/// would ask for ten times the read limit.
async fn many_jobs_stay_within_the_providers_limits_and_all_succeed(store: StoreKind) {
    const JOBS: usize = 12;
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.replicate_limits = Some(SCALED_LIMITS));
    let backends = example_backends(&fake, Provider::Replicate, |model| {
        model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 60,
            "job_seconds": 120, "poll_seconds": 0.1, "retry_seconds": 5 });
        model["budget"] = scaled_budget();
    });
    let app = app_at(store, backends, JOBS).await;
    let mut ids = Vec::new();
    for index in 0..JOBS {
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", &format!("kite number {index}")),
        )
        .await;
        ids.push(generation["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    assert_eq!(fake.jobs_at(Provider::Replicate).len(), JOBS);
    let windows = fake.calls_by_window(Provider::Replicate);
    for (class, window, calls) in &windows {
        let limit = match class {
            fake_providers::CallClass::Creates => SCALED_LIMITS.creates_per_minute,
            fake_providers::CallClass::Others => SCALED_LIMITS.others_per_minute,
        };
        assert!(
            calls.made() <= limit,
            "{class:?} in minute {window}: {calls:?}"
        );
        assert_eq!(calls.refused, 0, "{class:?} in minute {window}: {calls:?}");
    }
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// A 429 says "slower", never "fail": with a retry deadline far shorter
/// than the provider's pauses, a job whose create and then whose reads
/// are refused with 429 still succeeds, with one provider job.
async fn a_rate_limit_on_create_and_on_read_never_fails_the_job(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.rate_limit_next = 2;
        switches.queue_for = Duration::from_millis(1500);
    });
    let backends = example_backends(&fake, Provider::Replicate, |model| {
        model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 60,
            "job_seconds": 120, "poll_seconds": 0.1, "retry_seconds": 0.2 });
    });
    let app = app_at(store, backends, 2).await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", "a kite slowed down"),
    )
    .await;
    let id = generation["id"].as_str().unwrap().to_owned();
    // Both 429s went to creates; once the job exists, its reads get two.
    recorded_job(&app, &fake, &id).await;
    assert_eq!(fake.state.switches.lock().unwrap().rate_limit_next, 0);
    fake.switches(|switches| switches.rate_limit_next = 2);
    let done = app.wait_for_status(&id, &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(fake.state.switches.lock().unwrap().rate_limit_next, 0);
    assert_eq!(fake.jobs_at(Provider::Replicate).len(), 1);
    // A 429 counts toward no circuit.
    let health = app.server.store.provider_health().await.unwrap();
    assert!(
        health.iter().all(|view| view.consecutive_failures == 0),
        "{health:?}"
    );
}

/// A job whose provider webhook is registered is polled as a backstop
/// only: not before the model's usual run time. Its webhooks end it long
/// before, so the fake sees only the state reads the webhooks asked for
/// (Replicate's `start` and `completed`), where polling every 0.1 s for
/// the job's 1.5 s would have made about fifteen.
async fn a_job_with_a_registered_webhook_is_read_rarely(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.queue_for = Duration::from_millis(500);
        switches.run_for = Duration::from_millis(1000);
    });
    let backends = example_backends(&fake, Provider::Replicate, |model| {
        model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 60,
            "job_seconds": 120, "poll_seconds": 0.1, "retry_seconds": 20,
            "usual_run_seconds": 30 });
    });
    let app = app_with_webhooks(store, backends).await;
    let done = run_m1(&app, "a kite told by webhook").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let job = fake.jobs_at(Provider::Replicate).remove(0);
    assert!(job.webhook_url.is_some());
    let reads = fake.state_reads_of(&job.id);
    assert!(reads.len() <= 2, "{reads:?}");
    // The completion webhook was taken, and it is what ended the job: the
    // read after the provider's completion, then the output's download.
    let job = fake.jobs_at(Provider::Replicate).remove(0);
    let completed = job.completed_at.unwrap();
    assert!(fake.completion_webhook_taken_at(&job.id).is_some());
    let read_after_completion = *reads.last().unwrap();
    assert!(read_after_completion >= completed, "{reads:?} {completed}");
    assert!(fake.output_fetched_at(&job.id).unwrap() >= read_after_completion);
}

async fn hosted_jobs_are_at_the_provider_together_beyond_the_cpu_workers(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.run_for = Duration::from_millis(1500));
    // One CPU worker: it bounded hosted jobs too, one at the provider at a time.
    let app = app_at(store, backends_for(&fake, Provider::Fal, 5.0, 20.0), 1).await;
    const JOBS: usize = 6;
    let mut ids = Vec::new();
    for index in 0..JOBS {
        let body = text_to_video("vendor_1/model_1", &format!("kite number {index}"));
        let generation = submit(&app, "vendor_1/model_1", body).await;
        ids.push(generation["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    // Every job was at the provider before the first one ended: the pool
    // ran them together, not one after another.
    let jobs = fake.jobs_at(Provider::Fal);
    assert_eq!(jobs.len(), JOBS);
    let last_created = jobs
        .iter()
        .map(|job| job.created_at)
        .fold(f64::MIN, f64::max);
    let first_completed = jobs
        .iter()
        .filter_map(|job| job.completed_at)
        .fold(f64::MAX, f64::min);
    assert!(
        last_created < first_completed,
        "the last job was created {:.2} s after the first one ended",
        last_created - first_completed
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn cpu_workers_leave_hosted_jobs_to_the_hosted_pool(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // M1 runs at the providers; M2 on the local engine.
    let mut settings = TestSettings::new(store);
    settings.backends = failover_backends(&fake, FAL_KEY, REPLICATE_TOKEN);
    settings.workers = 1;
    settings.hosted_jobs = 0;
    let app = spawn_app_with(settings).await;
    let hosted = submit(
        &app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", "a kite for the pool"),
    )
    .await;
    let local = submit(
        &app,
        "vendor_2/model_2",
        text_to_video("vendor_2/model_2", "a kite for the engine"),
    )
    .await;
    // The worker took the younger local job and ran it, and passed over
    // the older hosted one, which this node has no pool to run.
    let done = app
        .wait_for_status(local["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let waiting = app.generation(hosted["id"].as_str().unwrap()).await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    assert!(fake.jobs().is_empty());
}

/// The value of the sample of `series` (with its labels, as a scrape
/// writes them), or `None` when the scrape has none.
async fn scraped(app: &TestApp, series: &str) -> Option<f64> {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Gives the lease of a running generation to another claimer, as the
/// rescuer and another node's claim do once the lease has run out.
async fn take_lease(app: &TestApp, generation_id: &str, owner: &str) {
    use sqlx::Connection;
    // The other claimer keeps its lease for the rest of the test.
    let statement = "UPDATE generations SET lease_owner = $1, \
                     lease_expires_at = lease_expires_at + 3600000 \
                     WHERE id = $2 AND status = 'running'";
    let taken = match &app.database {
        common::TestDatabase::Sqlite(_) => {
            let mut connection = sqlx::SqliteConnection::connect(&app.database.url())
                .await
                .unwrap();
            sqlx::query(statement)
                .bind(owner)
                .bind(generation_id)
                .execute(&mut connection)
                .await
                .unwrap()
                .rows_affected()
        }
        common::TestDatabase::Postgres(database) => {
            let mut connection = sqlx::PgConnection::connect(&database.url).await.unwrap();
            sqlx::query(statement)
                .bind(owner)
                .bind(generation_id)
                .execute(&mut connection)
                .await
                .unwrap()
                .rows_affected()
        }
    };
    assert_eq!(taken, 1, "the generation was running");
}

async fn the_pool_heartbeat_stops_a_job_whose_lease_was_taken(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // The job waits at the provider for the whole test.
    fake.switches(|switches| switches.queue_for = Duration::from_secs(60));
    let mut settings = TestSettings::new(store);
    settings.backends = backends_for(&fake, Provider::Fal, 5.0, 20.0);
    settings.lease = Duration::from_millis(1500);
    settings.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app_with(settings).await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        text_to_video("vendor_1/model_1", "a kite whose lease is taken"),
    )
    .await;
    let generation_id = generation["id"].as_str().unwrap();
    let in_flight = "vidgate_hosted_jobs_in_flight{backend=\"fal\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.jobs_at(Provider::Fal).is_empty() || scraped(&app, in_flight).await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "the job never reached the provider"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    take_lease(&app, generation_id, "another-node/hosted/0").await;
    // Within a heartbeat the pool finds the lease gone and stops following
    // the job, which it neither hands back nor finishes: it is the other
    // claimer's now.
    let lease_lost = "vidgate_job_outcomes_total{model=\"vendor_1/model_1\",backend=\"fal\",outcome=\"lease_lost\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while scraped(&app, lease_lost).await != Some(1.0) {
        assert!(Instant::now() < deadline, "the pool kept following the job");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(scraped(&app, in_flight).await, Some(0.0));
    assert_eq!(app.generation(generation_id).await["status"], "running");
}

/// Jobs beyond what the provider's create budget takes now wait in
/// vidgate's queue as `queued`, where their order is fair and a cancel is
/// free, rather than claimed and waiting at the provider's door as
/// `running`; none is refused.
async fn jobs_beyond_the_create_budget_wait_queued(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.queue_for = Duration::from_secs(30));
    let backends = example_backends(&fake, Provider::Replicate, |model| {
        model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 60,
            "job_seconds": 120, "poll_seconds": 0.5, "retry_seconds": 5 });
        // One create now, the next a minute later.
        model["budget"] = json!({ "creates_per_minute": 2, "creates_burst": 1 });
    });
    let app = app_at(store, backends, 1).await;
    let mut ids = Vec::new();
    for index in 0..4 {
        let generation = submit(
            &app,
            "vendor_1/model_1",
            text_to_video("vendor_1/model_1", &format!("kite in line {index}")),
        )
        .await;
        ids.push(generation["id"].as_str().unwrap().to_owned());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.jobs_at(Provider::Replicate).is_empty() {
        assert!(Instant::now() < deadline, "no job reached the provider");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Long enough for the pool to have claimed the others, had it claimed
    // beyond the budget.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(
            app.generation(id).await["status"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // One job is at the provider and one, claimed, waits there for the
    // next create; the rest wait in the queue.
    statuses.sort();
    assert_eq!(statuses, ["queued", "queued", "running", "running"]);
    assert_eq!(fake.jobs_at(Provider::Replicate).len(), 1);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

on_both_stores!(
    a_listed_prediction_whose_data_was_removed_is_never_submitted_again,
    jobs_beyond_the_create_budget_wait_queued,
    hosted_jobs_are_at_the_provider_together_beyond_the_cpu_workers,
    cpu_workers_leave_hosted_jobs_to_the_hosted_pool,
    the_pool_heartbeat_stops_a_job_whose_lease_was_taken,
    many_jobs_stay_within_the_providers_limits_and_all_succeed,
    a_rate_limit_on_create_and_on_read_never_fails_the_job,
    a_job_with_a_registered_webhook_is_read_rarely,
    a_lost_fal_submit_of_a_long_job_is_found_when_it_ends_never_submitted_twice,
    a_webhook_proves_the_job_of_a_submit_whose_answer_was_lost,
    replicate_cancel_after_is_the_whole_jobs_lifetime,
    a_replicate_prediction_still_starting_at_the_start_deadline_is_canceled_and_refunded,
    a_submit_outage_at_the_first_provider_moves_new_jobs_to_the_next,
    a_failed_key_fetch_is_remembered_so_a_webhook_flood_reads_the_keys_once,
    a_provider_webhook_without_the_generations_url_secret_is_refused,
    a_fal_webhook_for_a_request_in_another_account_adopts_nothing,
    two_adoptions_of_one_provider_job_at_once_give_it_to_one_generation,
    a_provider_fetches_the_kept_media_through_a_signed_url,
    a_media_url_is_refused_after_it_expires_or_when_tampered_with,
    every_model_succeeds_through_each_provider_with_the_video_in_our_storage,
    failed_and_moderated_provider_jobs_fail_and_are_refunded,
    a_submit_whose_answer_is_lost_is_reconciled_without_a_second_provider_job,
    a_worker_killed_after_the_provider_accepted_the_job_is_resumed_not_resubmitted,
    a_rate_limit_storm_delays_jobs_but_does_not_fail_them,
    an_outage_fails_the_generation_after_the_retry_deadline_with_no_provider_job,
    a_signed_provider_webhook_finishes_the_job_without_waiting_for_polling,
    a_forged_stale_or_duplicate_provider_webhook_changes_nothing,
    a_lost_provider_webhook_is_covered_by_polling,
    cancel_while_queued_at_the_provider_cancels_there_and_refunds,
    cancel_once_the_provider_started_the_job_is_refused,
    a_provider_that_refuses_the_job_hands_it_to_the_next_and_its_circuit_opens,
    a_model_with_no_healthy_provider_answers_503_and_holds_nothing,
    a_succeeded_generation_records_its_provider_cost_for_the_usage_report,
    an_output_far_larger_than_the_cap_fails_promptly_refunded_leaving_no_file,
);
