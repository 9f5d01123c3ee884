//! The providers' request budgets: rate limits delay jobs and never fail
//! them, calls stay within the limits, and jobs beyond the create budget wait
//! queued.

use super::*;

/// Replicate's 429 is run both ways (GUESS replicate-429-headers): with
/// `ratelimit-reset`, and with the documented body alone, whose "resets in
/// ~1s" sets the pause.
async fn a_rate_limit_storm_delays_jobs_but_does_not_fail_them(store: StoreKind) {
    for (provider, with_headers) in [
        (Provider::FAL, true),
        (Provider::REPLICATE, true),
        (Provider::REPLICATE, false),
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

/// Many jobs at once against a fake Replicate that enforces its limits
/// (scaled down): every job succeeds, no minute window sees more calls of
/// a class than its limit, and the budget keeps the provider from
/// answering 429 at all, though the jobs' polling alone (every 0.1 s)
/// would ask for ten times the read limit.
async fn many_jobs_stay_within_the_providers_limits_and_all_succeed(store: StoreKind) {
    const JOBS: usize = 12;
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.replicate_limits = Some(SCALED_LIMITS));
    let backends = example_backends(&fake, Provider::REPLICATE, |model| {
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
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), JOBS);
    let windows = fake.calls_by_window(Provider::REPLICATE);
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
    let backends = example_backends(&fake, Provider::REPLICATE, |model| {
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
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 1);
    // A 429 counts toward no circuit.
    let health = app.server.store.provider_health().read().await.unwrap();
    assert!(
        health.iter().all(|view| view.consecutive_failures == 0),
        "{health:?}"
    );
}

/// Jobs beyond what the provider's create budget takes now wait in
/// vidgate's queue as `queued`, where their order is fair and a cancel is
/// free, rather than claimed and waiting at the provider's door as
/// `running`; none is refused.
async fn jobs_beyond_the_create_budget_wait_queued(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.queue_for = Duration::from_secs(30));
    let backends = example_backends(&fake, Provider::REPLICATE, |model| {
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
    while fake.jobs_at(Provider::REPLICATE).is_empty() {
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
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 1);
    app.assert_ledger_invariant(&app.account.account.id).await;
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

on_both_stores!(
    a_rate_limit_storm_delays_jobs_but_does_not_fail_them,
    many_jobs_stay_within_the_providers_limits_and_all_succeed,
    a_rate_limit_on_create_and_on_read_never_fails_the_job,
    jobs_beyond_the_create_budget_wait_queued,
);
