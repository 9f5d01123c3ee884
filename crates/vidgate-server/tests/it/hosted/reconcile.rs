//! Submits whose outcome is unknown: reconciled against the provider's list
//! or a verified webhook, resumed after a worker dies, never submitted twice.

use super::*;

async fn a_submit_whose_answer_is_lost_is_reconciled_without_a_second_provider_job(
    store: StoreKind,
) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
            .queue()
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
            input: ValidatedInput::from_stored_json(claimed.input.value().unwrap()),
            // A text-to-video job has no media, so its media input is its input.
            media_input: ValidatedInput::from_stored_json(claimed.input.value().unwrap()),
            media: Default::default(),
            width: 1920,
            height: 1080,
            seed: 7,
            price: claimed.price,
        };
        let dying = tokio::spawn(async move { backend.run(job, CancellationToken::new()).await });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let recorded = store_handle
                .provider_jobs()
                .get(&generation_id)
                .await
                .unwrap();
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

async fn an_outage_fails_the_generation_after_the_retry_deadline_with_no_provider_job(
    store: StoreKind,
) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
            backends_for(&fake, Provider::FAL, 1.0, 20.0),
            2,
        )
        .await;
        let done = run_m1(&app, "a long kite whose submit is lost").await;
        assert_eq!(done["status"], "succeeded", "{shows_unfinished}: {done}");
        assert_eq!(
            fake.jobs_at(Provider::FAL).len(),
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
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
        backends_with(&fake, Provider::REPLICATE, timeouts, costs),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let submitted_at = Instant::now();
    let done = run_m1(&app, "a kite whose prediction's data was removed").await;
    let predictions = fake.jobs_at(Provider::REPLICATE);
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
    let usage = app.server.store.ledger().model_usage(0).await.unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].generations, 0);
    assert_eq!(usage[0].provider_cost.0, 200_000);
}

on_both_stores!(
    a_submit_whose_answer_is_lost_is_reconciled_without_a_second_provider_job,
    a_worker_killed_after_the_provider_accepted_the_job_is_resumed_not_resubmitted,
    a_lost_fal_submit_of_a_long_job_is_found_when_it_ends_never_submitted_twice,
    a_webhook_proves_the_job_of_a_submit_whose_answer_was_lost,
    a_listed_prediction_whose_data_was_removed_is_never_submitted_again,
    an_outage_fails_the_generation_after_the_retry_deadline_with_no_provider_job,
);
