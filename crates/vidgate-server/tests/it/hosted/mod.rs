//! Models run at hosted providers (fal, Replicate) end to end, against the
//! fake providers of `fake_providers/`, on both stores: the example
//! backends files of `examples/hosted/` with their URLs pointed at the
//! fake, real submits through the API, and the video in our storage. This
//! file holds the helpers the tests share; each file beside it tests one
//! concern of the hosted machinery.

mod budget;
mod cancel;
mod dashscope;
mod failover;
mod media;
mod modelark;
mod pool;
mod reconcile;
mod routing;
mod runs;
mod webhooks;

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
        let recorded = app
            .server
            .store
            .provider_jobs()
            .get(generation_id)
            .await
            .unwrap();
        if let Some(job_id) = recorded.and_then(|recorded| recorded.job_id) {
            return fake.state.job(&job_id).expect("the fake has the job");
        }
        assert!(Instant::now() < deadline, "no provider job recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// The Unix time now, in seconds.
fn unix_now() -> i64 {
    fake_providers::now_seconds() as i64
}
