//! What a provider serves (`accepts` in the backends file), end to end on
//! both stores against the fake providers: a value no configured provider of
//! the model serves (Seedance 2.0 at 4k on fal) is refused at submit with
//! 400 `invalid_request` naming the parameter and the value, nothing held
//! and nothing sent; a failover model sends it to the provider that serves
//! it, and never downgrades it.

use crate::common;
use crate::fake_providers;

use serde_json::{Value, json};
use vidgate_server::backend::BackendsConfig;

use common::{StoreKind, TestApp, TestSettings, on_both_stores, spawn_app_with};
use fake_providers::{FAL_KEY, FakeProviders, Provider, REPLICATE_TOKEN, example_backends};

pub(crate) fn fast_timeouts() -> Value {
    json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
            "poll_seconds": 0.1, "retry_seconds": 5 })
}

pub(crate) async fn app_with(store: StoreKind, backends: BackendsConfig) -> TestApp {
    let mut settings = TestSettings::new(store);
    settings.backends = backends;
    settings.workers = 2;
    spawn_app_with(settings).await
}

/// A 400 `invalid_request` naming `param`, with `words` in the message.
pub(crate) async fn assert_refused(
    app: &TestApp,
    endpoint: &str,
    body: Value,
    param: &str,
    words: &str,
) {
    let response = app.submit(endpoint, body).await;
    assert_eq!(response.status(), 400, "{endpoint}");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    assert_eq!(answer["error"]["param"], param, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(words), "{message}");
}

async fn a_value_no_provider_of_the_model_serves_is_refused_naming_it_with_nothing_held(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    let backends = example_backends(&fake, Provider::FAL, |model| {
        model["timeouts"] = fast_timeouts();
    });
    let app = app_with(store, backends).await;
    let before = app.account_state(&app.account.account.id).await;
    // fal's Seedance 2.0 is not sent 4k (its generated types list it, its
    // model pages do not: the reading that cannot cost the customer).
    assert_refused(
        &app,
        "vendor_4/model_4/text-to-video",
        json!({ "prompt": "a kite", "duration": 4, "resolution": "4k" }),
        "resolution",
        "4k",
    )
    .await;
    let upload = app.upload_png().await;
    assert_refused(
        &app,
        "vendor_4/model_4/image-to-video",
        json!({ "prompt": "a kite", "duration": 4, "resolution": "4k",
                "image_url": upload["url"] }),
        "resolution",
        "4k",
    )
    .await;
    // fal's Wan 3.0 has no negative prompt: refused rather than dropped.
    assert_refused(
        &app,
        "vendor_1/model_1/text-to-video",
        json!({ "prompt": "a kite", "duration": 2, "negative_prompt": "rain" }),
        "negative_prompt",
        "rain",
    )
    .await;
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "nothing charged");
    assert_eq!(after.held, before.held, "nothing held");
    assert!(fake.jobs().is_empty(), "nothing sent: {:?}", fake.jobs());
    // What fal serves still runs there, at the value asked for.
    let generation = app
        .submit_ok(
            "vendor_4/model_4/text-to-video",
            json!({ "prompt": "a kite", "duration": 4, "resolution": "1080p" }),
        )
        .await;
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let jobs = fake.jobs_at(Provider::FAL);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].input["resolution"], "1080p");
    assert_eq!(
        jobs[0].input["duration"], "4",
        "fal's Seedance takes a string"
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// A backends file running M4 at fal, then at Replicate.
fn seedance_failover(fake: &FakeProviders) -> BackendsConfig {
    fake_providers::failover_backends(
        fake,
        "vendor_4/model_4",
        FAL_KEY,
        REPLICATE_TOKEN,
        &fast_timeouts(),
    )
}

async fn a_failover_model_sends_a_value_its_first_provider_cannot_serve_to_one_that_can(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    let app = app_with(store, seedance_failover(&fake)).await;
    let mut ids = Vec::new();
    for resolution in ["4k", "720p"] {
        let generation = app
            .submit_ok(
                "vendor_4/model_4/text-to-video",
                json!({ "prompt": format!("a kite at {resolution}"), "duration": 4,
                        "resolution": resolution }),
            )
            .await;
        ids.push(generation["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    // 4k went to Replicate, at 4k; 720p to fal, the first choice.
    let at_replicate = fake.jobs_at(Provider::REPLICATE);
    assert_eq!(at_replicate.len(), 1, "{at_replicate:?}");
    assert_eq!(at_replicate[0].input["resolution"], "4k");
    let at_fal = fake.jobs_at(Provider::FAL);
    assert_eq!(at_fal.len(), 1, "{at_fal:?}");
    assert_eq!(at_fal[0].input["resolution"], "720p");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

on_both_stores!(
    a_value_no_provider_of_the_model_serves_is_refused_naming_it_with_nothing_held,
    a_failover_model_sends_a_value_its_first_provider_cannot_serve_to_one_that_can,
);
