//! BytePlus ModelArk end to end, against its fake
//! (`fake_providers/modelark.rs`) with the example backends file
//! `examples/hosted/modelark.json`, on both stores: Seedance 2.0 (M4) runs
//! and its video is copied into our storage; a failed or moderated task is
//! refunded; a queued task is canceled at ModelArk and a running one is
//! not; a create whose answer was lost is found again by its
//! `safety_identifier`, never sent twice; an outage and a 429 (a rate
//! limit, or the account's 120 queued tasks) leave one task per
//! generation; and ModelArk's unsigned callbacks only hasten a job.

use super::*;

use fake_providers::modelark::created_body;

const SEEDANCE: &str = "vendor_4/model_4";

/// The example file, pointed at the fake, with timeouts for tests.
fn modelark_backends(
    fake: &FakeProviders,
    request_seconds: f64,
    retry_seconds: f64,
) -> BackendsConfig {
    backends_for(fake, Provider::MODELARK, request_seconds, retry_seconds)
}

async fn run_seedance(app: &TestApp, prompt: &str) -> Value {
    let generation = submit(app, SEEDANCE, text_to_video(SEEDANCE, prompt)).await;
    app.wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await
}

async fn seedance_runs_at_modelark_with_its_video_in_our_storage(store: StoreKind) {
    let fake = FakeProviders::start().await;
    let app = app_at(store, modelark_backends(&fake, 5.0, 20.0), 2).await;
    let done = run_seedance(&app, "a kite over the sea").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let video_url = done["output"]["video_url"].as_str().unwrap();
    assert!(video_url.starts_with(&app.api_base), "{video_url}");
    let stored = app.download(video_url).await;
    assert_eq!(done["output"]["size_bytes"], json!(stored.len()));
    let jobs = fake.jobs_at(Provider::MODELARK);
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        fake.state.output(&jobs[0].id).unwrap().len(),
        stored.len(),
        "the clip is a copy of ModelArk's video"
    );
    // The body as ModelArk's API takes it: the prompt as the content's text
    // item, every price-affecting value sent explicitly, the task's expiry
    // at least an hour, and the identifier that finds it again.
    let body = created_body(&fake.state, &jobs[0].id);
    assert_eq!(body["model"], "dreamina-seedance-2-0-260128");
    assert_eq!(
        body["content"],
        json!([{ "type": "text", "text": "a kite over the sea" }])
    );
    assert_eq!(body["ratio"], "16:9");
    assert_eq!(body["resolution"], "720p");
    assert_eq!(body["duration"], 4);
    assert_eq!(body["generate_audio"], true);
    assert_eq!(body["execution_expires_after"], 3600);
    assert!(
        body["safety_identifier"]
            .as_str()
            .is_some_and(|identifier| identifier.starts_with("vg-")),
        "{body}"
    );
    assert!(
        body.get("callback_url").is_none(),
        "no public URL, no callback"
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn failed_and_moderated_modelark_tasks_fail_and_are_refunded(store: StoreKind) {
    let fake = FakeProviders::start().await;
    let app = app_at(store, modelark_backends(&fake, 5.0, 20.0), 2).await;
    let before = app.account_state(&app.account.account.id).await;
    for (marker, code) in [
        ("[fake:fail]", "generation_failed"),
        ("[fake:moderate]", "content_moderated"),
    ] {
        let done = run_seedance(&app, &format!("a kite {marker}")).await;
        assert_eq!(done["status"], "failed", "{done}");
        assert_eq!(done["error"]["code"], code, "{done}");
    }
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    assert_eq!(after.captured, before.captured);
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 2);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_queued_modelark_task_is_canceled_there_and_a_running_one_is_not(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.queue_for = Duration::from_secs(30));
    let app = app_at(store, modelark_backends(&fake, 5.0, 20.0), 2).await;
    let before = app.account_state(&app.account.account.id).await;
    let generation = submit(
        &app,
        SEEDANCE,
        text_to_video(SEEDANCE, "a kite canceled in the queue"),
    )
    .await;
    let id = generation["id"].as_str().unwrap();
    let job = recorded_job(&app, &fake, id).await;
    let canceled = app.cancel(&generation, app.key()).await;
    assert_eq!(canceled.status(), 200);
    let canceled: Value = canceled.json().await.unwrap();
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    let job = fake.state.job(&job.id).unwrap();
    assert_eq!(job.status, FakeStatus::Canceled);
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.generation(id).await["status"], "canceled");

    // Once ModelArk runs the task, it can no longer be canceled: vidgate
    // refuses the cancel without asking, and the task finishes.
    fake.switches(|switches| {
        switches.queue_for = Duration::from_millis(100);
        switches.run_for = Duration::from_secs(2);
    });
    let generation = submit(
        &app,
        SEEDANCE,
        text_to_video(SEEDANCE, "a kite already in flight"),
    )
    .await;
    let id = generation["id"].as_str().unwrap();
    let mut job = recorded_job(&app, &fake, id).await;
    while job.status == FakeStatus::Queued {
        tokio::time::sleep(Duration::from_millis(20)).await;
        job = fake.state.job(&job.id).unwrap();
    }
    let refused = app.cancel(&generation, app.key()).await;
    assert_eq!(refused.status(), 409);
    let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(!fake.state.job(&job.id).unwrap().canceled_while_running);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_lost_modelark_create_is_found_by_its_identifier_never_sent_twice(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.lose_submit_answers = 1);
    let app = app_at(store.clone(), modelark_backends(&fake, 1.0, 20.0), 2).await;
    let done = run_seedance(&app, "a kite whose create is lost").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 1, "one task");
    // Another generation's task of the same target, already in the list,
    // is not taken for this one: its identifier differs.
    fake.switches(|switches| switches.lose_submit_answers = 1);
    let again = run_seedance(&app, "another kite whose create is lost").await;
    assert_eq!(again["status"], "succeeded", "{again}");
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 2);
    app.assert_ledger_invariant(&app.account.account.id).await;

    // When the list cannot be read, nothing proves the task absent: the
    // generation fails, refunded, and the create is not sent again.
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.lose_submit_answers = 1;
        switches.lists_down = true;
    });
    let app = app_at(store, modelark_backends(&fake, 1.0, 2.0), 2).await;
    let before = app.account_state(&app.account.account.id).await;
    let done = run_seedance(&app, "a kite whose create is lost for good").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert_eq!(
        fake.jobs_at(Provider::MODELARK).len(),
        1,
        "never sent twice"
    );
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_modelark_outage_then_recovery_leaves_one_task(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.down = true);
    let app = app_at(store, modelark_backends(&fake, 1.0, 30.0), 2).await;
    let generation = submit(
        &app,
        SEEDANCE,
        text_to_video(SEEDANCE, "a kite in an outage"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(fake.jobs_at(Provider::MODELARK).is_empty());
    fake.switches(|switches| switches.down = false);
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 1);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn modelark_429s_and_its_queued_task_limit_are_waited_out_by_the_budget(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.rate_limit_next = 3;
        // The account takes one queued task at a time: a second create
        // while the first waits is refused with a 429, until it starts.
        switches.modelark_queued_limit = 1;
        switches.queue_for = Duration::from_secs(1);
    });
    let app = app_at(store, modelark_backends(&fake, 5.0, 20.0), 2).await;
    let first = submit(&app, SEEDANCE, text_to_video(SEEDANCE, "a first kite")).await;
    let second = submit(&app, SEEDANCE, text_to_video(SEEDANCE, "a second kite")).await;
    for generation in [first, second] {
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    assert_eq!(
        fake.state.switches.lock().unwrap().rate_limit_next,
        0,
        "the 429s were answered"
    );
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 2, "one task each");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn modelark_callbacks_are_taken_as_hints_and_the_job_ends_as_read(store: StoreKind) {
    let fake = FakeProviders::start().await;
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 30, "usual_run_seconds": 30, "retry_seconds": 20 });
    let app = app_with_webhooks(
        store,
        backends_with(&fake, Provider::MODELARK, timeouts, json!([])),
    )
    .await;
    let started = Instant::now();
    let done = run_seedance(&app, "a kite told by callback").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // Without the callback the first read would come after 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let job = &fake.jobs_at(Provider::MODELARK)[0];
    let body = created_body(&fake.state, &job.id);
    assert!(
        body["callback_url"]
            .as_str()
            .is_some_and(|url| url.starts_with(&format!(
                "{}/internal/providers/{SEEDANCE}/",
                app.api_base.trim_end_matches("/api/v1")
            ))),
        "{body}"
    );
    let sent = fake.state.webhooks_sent.lock().unwrap().clone();
    assert!(
        sent.iter()
            .any(|(id, status)| id == &job.id && *status == 200),
        "{sent:?}"
    );

    // A callback naming a task the generation does not have is refused;
    // an unsigned body proves nothing.
    let forged = fake_providers::modelark::task(&fake.state, job);
    let mut forged = forged;
    forged["id"] = json!("cgt-someone-else");
    let url = body["callback_url"].as_str().unwrap();
    let answer = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(forged.to_string())
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_client_error(), "{}", answer.status());
}

/// Issue 51, item 3: a task found in the list after its create's answer
/// was lost (its callbacks came before it was adopted, and were refused)
/// is read at once, since the list already shows its state: not first
/// after the model's usual run time.
async fn a_modelark_task_found_after_a_lost_create_is_read_at_once(store: StoreKind) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.lose_submit_answers = 1);
    let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 120,
        "poll_seconds": 30, "usual_run_seconds": 40, "retry_seconds": 20 });
    let app = app_with_webhooks(
        store,
        backends_with(&fake, Provider::MODELARK, timeouts, json!([])),
    )
    .await;
    let started = Instant::now();
    let done = run_seedance(&app, "a kite found in the list").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 1, "one task");
    // Waiting for a callback that already came, the first read would come
    // after 40 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// A price of $0.10 a second for every ModelArk task: 400 000
/// micro-dollars for the 4 s clips these tests ask for.
fn modelark_test_costs() -> Value {
    json!([{ "from": "2026-01-01", "usd_per_second": "0.10", "source": "a test price" }])
}

/// Issue 51, item 4: a task that finishes between the cancel's read
/// (`queued`) and its `DELETE` is deleted with its output, and vidgate
/// cannot tell it from one canceled: the generation is canceled and
/// refunded, and the task's whole cost is recorded as possible, which the
/// usage report names apart.
async fn a_modelark_task_gone_after_a_cancel_may_have_run_and_its_cost_is_recorded(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.queue_for = Duration::from_secs(30);
        switches.modelark_finishes_before_delete = true;
    });
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 20 });
    let app = app_at(
        store,
        backends_with(&fake, Provider::MODELARK, timeouts, modelark_test_costs()),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let generation = submit(
        &app,
        SEEDANCE,
        text_to_video(SEEDANCE, "a kite that finishes as it is canceled"),
    )
    .await;
    let id = generation["id"].as_str().unwrap();
    let job = recorded_job(&app, &fake, id).await;
    let canceled = app.cancel(&generation, app.key()).await;
    assert_eq!(canceled.status(), 200);
    let canceled: Value = canceled.json().await.unwrap();
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    assert_eq!(
        *fake.state.modelark_deleted_finished.lock().unwrap(),
        std::slice::from_ref(&job.id)
    );
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    let usage = app.server.store.ledger().model_usage(0).await.unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].generations, 0);
    assert_eq!(usage[0].provider_cost.0, 400_000, "{usage:?}");
    assert_eq!(usage[0].possible_cost.0, 400_000, "{usage:?}");
    assert_eq!(usage[0].possible_cost_generations, 1);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 51, item 4: the same window at the start deadline: a task gone
/// after the deadline's cancel may have finished first. The generation
/// fails as timed out, refunded, with the task's possible cost recorded.
async fn a_modelark_task_gone_after_its_start_deadline_cancel_records_its_possible_cost(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    fake.switches(|switches| {
        switches.queue_for = Duration::from_secs(30);
        switches.modelark_finishes_before_delete = true;
    });
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 1, "job_seconds": 60,
        "poll_seconds": 0.2, "retry_seconds": 20 });
    let app = app_at(
        store,
        backends_with(&fake, Provider::MODELARK, timeouts, modelark_test_costs()),
        2,
    )
    .await;
    let before = app.account_state(&app.account.account.id).await;
    let done = run_seedance(&app, "a kite that finishes at its start deadline").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_timeout", "{done}");
    assert_eq!(
        fake.state.modelark_deleted_finished.lock().unwrap().len(),
        1
    );
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    let usage = app.server.store.ledger().model_usage(0).await.unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].possible_cost.0, 400_000, "{usage:?}");
    assert_eq!(usage[0].possible_cost_generations, 1);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 40: a newcomer starts with the vendor key alone. The example
/// file as shipped (only its API root pointed at the fake, which a test
/// must do, and nothing else changed: its timeouts are the defaults),
/// applied as `vidgate serve --backends-file examples/hosted/modelark.json`
/// applies it with `ARK_API_KEY` the only variable set, on a server with
/// no other setting (no public URL, so no callbacks; local storage); M4
/// runs to succeeded. The file asks for no variable but the key.
async fn a_newcomer_runs_seedance_with_the_modelark_key_alone(store: StoreKind) {
    let fake = FakeProviders::start().await;
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hosted/modelark.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    file["models"][SEEDANCE]["api_url"] = json!(fake.modelark_api_url());
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("modelark.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let asked = std::sync::Mutex::new(Vec::new());
    let environment = |name: &str| {
        asked.lock().unwrap().push(name.to_owned());
        (name == "ARK_API_KEY").then(|| fake_providers::ARK_API_KEY.to_owned())
    };
    let mut backends = BackendsConfig::builtin(true);
    vidgate_server::backend::apply_backends_file_with_credentials(
        &mut backends,
        &path,
        &Catalog::embedded(),
        &environment,
    )
    .expect("the example file applies with the key alone");
    let asked = asked.into_inner().unwrap();
    assert!(
        !asked.is_empty() && asked.iter().all(|name| name == "ARK_API_KEY"),
        "{asked:?}"
    );
    let mut settings = TestSettings::new(store);
    settings.backends = backends;
    let app = spawn_app_with(settings).await;

    let done = run_seedance(&app, "a newcomer's first kite").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(
        done["output"]["video_url"]
            .as_str()
            .unwrap()
            .starts_with(&app.api_base)
    );
    assert_eq!(fake.jobs_at(Provider::MODELARK).len(), 1);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

on_both_stores!(
    seedance_runs_at_modelark_with_its_video_in_our_storage,
    failed_and_moderated_modelark_tasks_fail_and_are_refunded,
    a_queued_modelark_task_is_canceled_there_and_a_running_one_is_not,
    a_lost_modelark_create_is_found_by_its_identifier_never_sent_twice,
    a_modelark_outage_then_recovery_leaves_one_task,
    modelark_429s_and_its_queued_task_limit_are_waited_out_by_the_budget,
    modelark_callbacks_are_taken_as_hints_and_the_job_ends_as_read,
    a_newcomer_runs_seedance_with_the_modelark_key_alone,
    a_modelark_task_found_after_a_lost_create_is_read_at_once,
    a_modelark_task_gone_after_a_cancel_may_have_run_and_its_cost_is_recorded,
    a_modelark_task_gone_after_its_start_deadline_cancel_records_its_possible_cost,
);
