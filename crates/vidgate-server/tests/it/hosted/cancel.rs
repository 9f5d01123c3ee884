//! Canceling a job at its provider, and the start deadline and lifetime a
//! provider job is sent.

use super::*;

async fn cancel_while_queued_at_the_provider_cancels_there_and_refunds(store: StoreKind) {
    // fal does not say which answer a cancel of a queued request gets
    // (GUESS fal-cancel-answer): both readings are run. Replicate answers as
    // its recorded cancel did: `canceled`, with the prediction started a
    // moment before and billed for it (GUESS
    // replicate-cancel-answer-while-queued), which the operator bears.
    let cases = [
        (Provider::FAL, "OK"),
        (Provider::FAL, "CANCELLATION_REQUESTED"),
        (Provider::REPLICATE, "OK"),
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
        let usage = app.server.store.ledger().model_usage(0).await.unwrap();
        match provider.name {
            "replicate" => {
                let ran = job.completed_at.unwrap() - job.started_at.unwrap();
                assert_eq!(usage.len(), 1, "{usage:?}");
                assert_eq!(usage[0].generations, 0);
                assert_eq!(usage[0].provider_cost.0, (500_000.0 * ran).round() as i64);
            }
            "fal" => assert!(usage.is_empty(), "{usage:?}"),
            other => unreachable!("{other}'s cancel is tested in its own file"),
        }
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

async fn cancel_once_the_provider_started_the_job_is_refused(store: StoreKind) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
        backends_with(&fake, Provider::REPLICATE, timeouts, json!([])),
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
    let job = fake.jobs_at(Provider::REPLICATE).remove(0);
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
        backends_with(&fake, Provider::REPLICATE, timeouts, json!([])),
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
    let job = fake.jobs_at(Provider::REPLICATE).remove(0);
    assert_eq!(job.status, FakeStatus::Canceled);
    assert!(!job.canceled_while_running);
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

on_both_stores!(
    cancel_while_queued_at_the_provider_cancels_there_and_refunds,
    cancel_once_the_provider_started_the_job_is_refused,
    replicate_cancel_after_is_the_whole_jobs_lifetime,
    a_replicate_prediction_still_starting_at_the_start_deadline_is_canceled_and_refunded,
);
