//! A model at several providers: a refused or failing provider hands new
//! jobs to the next, and a model with none healthy answers 503.

use super::*;

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
    assert!(fake.jobs_at(Provider::FAL).is_empty());
    assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 6);
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
            switches.submits_down_at = Some(Provider::FAL);
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
        assert!(fake.jobs_at(Provider::FAL).is_empty());
        assert_eq!(fake.jobs_at(Provider::REPLICATE).len(), 8);
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

/// The providers' circuits as the store knows them, once `ready` holds
/// (circuits save in the background).
async fn provider_health_when(
    app: &TestApp,
    ready: impl Fn(&[ProviderHealth]) -> bool,
) -> Vec<ProviderHealth> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let health = app.server.store.provider_health().read().await.unwrap();
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

on_both_stores!(
    a_provider_that_refuses_the_job_hands_it_to_the_next_and_its_circuit_opens,
    a_model_with_no_healthy_provider_answers_503_and_holds_nothing,
    a_submit_outage_at_the_first_provider_moves_new_jobs_to_the_next,
);
