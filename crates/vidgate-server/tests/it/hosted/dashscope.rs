//! DashScope's Wan end to end against its fake (`fake_providers/
//! dashscope.rs`), on both stores: the example backends file
//! `examples/hosted/dashscope.json` pointed at the fake, real submits
//! through the API. A task that succeeds, one that fails and one the
//! content checks refuse (refunded), a cancel while the task is PENDING
//! and one refused once it runs, a create whose answer is lost (one task,
//! never two, under either reading of the list; never a stranger's task;
//! nothing proved by a list not read whole), an outage, DashScope's query
//! limit, polling from the start with a public URL, and lost answers whose
//! tasks were found leaving the circuit closed (issue 51).

use super::*;

use fake_providers::dashscope::{
    DASHSCOPE_KEY, FakeDashScope, ListShape, QUERIES_PER_SECOND, TaskStatus,
};

/// The example file of DashScope pointed at `fake`, with `timeouts`,
/// applied with the fake's key as `DASHSCOPE_API_KEY`: what a newcomer
/// runs with the key alone.
fn dashscope_backends(fake: &FakeDashScope, timeouts: Value) -> BackendsConfig {
    dashscope_backends_with(fake, timeouts, None)
}

/// `dashscope_backends`, with the price list `costs` where given.
fn dashscope_backends_with(
    fake: &FakeDashScope,
    timeouts: Value,
    costs: Option<Value>,
) -> BackendsConfig {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hosted/dashscope.json");
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    for model in file["models"].as_object_mut().unwrap().values_mut() {
        model["api_url"] = json!(fake.api_url());
        model["timeouts"] = timeouts.clone();
        if let Some(costs) = &costs {
            model["costs"] = costs.clone();
        }
    }
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("dashscope.json");
    std::fs::write(&path, file.to_string()).unwrap();
    let mut backends = BackendsConfig::builtin(true);
    let credentials = |name: &str| (name == "DASHSCOPE_API_KEY").then(|| DASHSCOPE_KEY.to_owned());
    vidgate_server::backend::apply_backends_file_with_credentials(
        &mut backends,
        &path,
        &Catalog::embedded(),
        &credentials,
    )
    .expect("the example backends file applies");
    backends
}

fn short_timeouts() -> Value {
    json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 3 })
}

async fn dashscope_app(store: StoreKind, fake: &FakeDashScope, timeouts: Value) -> TestApp {
    app_at(store, dashscope_backends(fake, timeouts), 2).await
}

/// An M1 text-to-video request of 5 s (DashScope's Wan 2.6 takes 5, 10 or
/// 15) with `prompt`.
fn wan_request(prompt: &str) -> Value {
    json!({ "prompt": prompt, "duration": 5 })
}

async fn run(app: &TestApp, prompt: &str) -> Value {
    let generation = submit(app, "vendor_1/model_1", wan_request(prompt)).await;
    app.wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await
}

/// The task of a generation once its id is recorded.
async fn recorded_task(
    app: &TestApp,
    fake: &FakeDashScope,
    generation_id: &str,
) -> fake_providers::dashscope::FakeTask {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let recorded = app
            .server
            .store
            .provider_jobs()
            .get(generation_id)
            .await
            .unwrap();
        if let Some(task_id) = recorded.and_then(|recorded| recorded.job_id) {
            return fake.task(&task_id).expect("the fake has the task");
        }
        assert!(Instant::now() < deadline, "no task recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_wan_task_succeeds_with_the_video_in_our_storage(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let app = dashscope_app(store, &fake, short_timeouts()).await;
    let done = run(&app, "a kite over the sea").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let video_url = done["output"]["video_url"].as_str().unwrap();
    assert!(video_url.starts_with(&app.api_base), "{video_url}");
    let stored = app.download(video_url).await;
    assert_eq!(done["output"]["size_bytes"], json!(stored.len()));
    let tasks = fake.tasks();
    assert_eq!(tasks.len(), 1);
    let task = &tasks[0];
    assert_eq!(task.model, "wan2.6-t2v");
    assert_eq!(task.create_headers["x-dashscope-async"], "enable");
    // The flat input split as DashScope takes it.
    assert_eq!(task.input["prompt"], "a kite over the sea");
    assert_eq!(task.parameters["duration"], 5);
    assert_eq!(task.parameters["resolution"], "720P");
    assert_eq!(task.parameters["ratio"], "16:9");
    assert_eq!(task.parameters["prompt_extend"], false);
    assert!(task.input.get("duration").is_none(), "{:?}", task.input);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn failed_and_refused_tasks_fail_and_are_refunded(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let app = dashscope_app(store, &fake, short_timeouts()).await;
    let before = app.account_state(&app.account.account.id).await;
    for (marker, code) in [
        ("[fake:fail]", "generation_failed"),
        // DataInspectionFailed on the output, and at the create.
        ("[fake:moderate]", "content_moderated"),
        ("[fake:moderate-input]", "content_moderated"),
    ] {
        let done = run(&app, &format!("a kite {marker}")).await;
        assert_eq!(done["status"], "failed", "{marker}: {done}");
        assert_eq!(done["error"]["code"], code, "{marker}: {done}");
    }
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    assert_eq!(after.captured, before.captured);
    // The refused create made no task.
    assert_eq!(fake.tasks().len(), 2);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_pending_task_is_canceled_there_and_refunded(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let app = dashscope_app(store, &fake, short_timeouts()).await;
    let before = app.account_state(&app.account.account.id).await;
    let generation = submit(
        &app,
        "vendor_1/model_1",
        wan_request("a kite in the queue [fake:never-start]"),
    )
    .await;
    let id = generation["id"].as_str().unwrap();
    let task = recorded_task(&app, &fake, id).await;
    assert_eq!(task.status, TaskStatus::Pending);
    let canceled = app.cancel(&generation, app.key()).await;
    assert_eq!(canceled.status(), 200);
    let canceled: Value = canceled.json().await.unwrap();
    assert_eq!(canceled["status"], "canceled", "{canceled}");
    assert_eq!(
        fake.task(&task.task_id).unwrap().status,
        TaskStatus::Canceled
    );
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.generation(id).await["status"], "canceled");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn a_running_task_is_not_canceled(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    fake.switches(|switches| switches.run_for = Duration::from_secs(2));
    let app = dashscope_app(store, &fake, short_timeouts()).await;
    let generation = submit(&app, "vendor_1/model_1", wan_request("a kite in flight")).await;
    let id = generation["id"].as_str().unwrap();
    let mut task = recorded_task(&app, &fake, id).await;
    while task.status == TaskStatus::Pending {
        tokio::time::sleep(Duration::from_millis(20)).await;
        task = fake.task(&task.task_id).unwrap();
    }
    assert_eq!(task.status, TaskStatus::Running);
    let refused = app.cancel(&generation, app.key()).await;
    assert_eq!(refused.status(), 409);
    let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // vidgate read the task first and sent no cancel DashScope refuses.
    assert_eq!(*fake.state.cancels_of_running_tasks.lock().unwrap(), 0);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// DashScope takes no deadline with a task, so the start deadline is
/// vidgate's: a task still PENDING then is canceled (free, as it never
/// ran) and its generation fails as timed out, refunded.
async fn a_task_still_pending_at_the_start_deadline_is_canceled_and_refunded(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 1, "job_seconds": 60,
        "poll_seconds": 0.2, "retry_seconds": 3 });
    let app = dashscope_app(store, &fake, timeouts).await;
    let before = app.account_state(&app.account.account.id).await;
    let done = run(&app, "a kite that never starts [fake:never-start]").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_timeout", "{done}");
    assert_eq!(fake.tasks()[0].status, TaskStatus::Canceled);
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// A create whose answer is lost made its task: reconcile finds it in the
/// task list (by the prompt its read shows) and follows it; no second task
/// is created.
async fn a_lost_create_answer_is_reconciled_to_its_one_task(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    fake.switches(|switches| switches.lose_create_answers = 1);
    let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 3 });
    let app = dashscope_app(store, &fake, timeouts).await;
    let done = run(&app, "a kite whose create answer is lost").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(fake.tasks().len(), 1, "one task, never two");
    let recorded = app
        .server
        .store
        .provider_jobs()
        .get(done["id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        recorded.job_id.as_deref(),
        Some(fake.tasks()[0].task_id.as_str())
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Where a task's read does not show its prompt, a listed task of the
/// model cannot be told apart from another's: the job is never submitted
/// again, and the generation fails at its deadline, refunded.
async fn a_lost_create_that_cannot_be_recognised_fails_at_its_deadline_without_a_second_task(
    store: StoreKind,
) {
    let fake = FakeDashScope::start().await;
    fake.switches(|switches| {
        switches.lose_create_answers = 1;
        switches.shows_orig_prompt = false;
    });
    let timeouts = json!({ "request_seconds": 1, "start_seconds": 3, "job_seconds": 4,
        "poll_seconds": 0.1, "retry_seconds": 2 });
    let app = dashscope_app(store, &fake, timeouts).await;
    let before = app.account_state(&app.account.account.id).await;
    let done = run(&app, "a kite nobody can recognise").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(fake.tasks().len(), 1, "never a second task");
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn an_outage_fails_the_job_refunded_without_a_task(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    fake.switches(|switches| switches.down = true);
    let app = dashscope_app(store, &fake, short_timeouts()).await;
    let before = app.account_state(&app.account.account.id).await;
    let done = run(&app, "a kite in a storm").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "upstream_error", "{done}");
    assert!(fake.tasks().is_empty());
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// DashScope's 429s pause the job, never fail it; and the example file's
/// budget keeps vidgate's task queries within DashScope's documented 20
/// a second, even with many jobs polled every 0.1 s.
async fn the_query_limit_is_kept_and_throttling_never_fails_a_job(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    fake.switches(|switches| {
        switches.throttle_next = 3;
        switches.enforce_query_limit = true;
        switches.run_for = Duration::from_secs(2);
    });
    let app = dashscope_app(store, &fake, short_timeouts()).await;
    let mut submitted = Vec::new();
    for index in 0..8 {
        submitted.push(
            submit(
                &app,
                "vendor_1/model_1",
                wan_request(&format!("kite number {index}")),
            )
            .await,
        );
    }
    for generation in &submitted {
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    assert_eq!(fake.tasks().len(), 8);
    assert!(
        fake.most_queries_in_a_second() <= QUERIES_PER_SECOND,
        "{} queries in one second",
        fake.most_queries_in_a_second()
    );
    assert_eq!(fake.refused_queries(), 0);
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// A price of $0.10 a second for every Wan task, so that a possible cost
/// shows in the usage report: 500 000 micro-dollars for a 5 s clip.
fn test_costs() -> Value {
    json!([{ "from": "2026-01-01", "usd_per_second": "0.10", "source": "a test price" }])
}

/// Timeouts under which a submit whose outcome cannot be told fails
/// within seconds.
fn undecided_timeouts() -> Value {
    json!({ "request_seconds": 1, "start_seconds": 3, "job_seconds": 4,
        "poll_seconds": 0.1, "retry_seconds": 2 })
}

/// Waits until the fake's task `task_id` has ended as it would.
async fn wait_until_succeeded(fake: &FakeDashScope, task_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.task(task_id).unwrap().status != TaskStatus::Succeeded {
        assert!(Instant::now() < deadline, "the task never succeeded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The request vidgate sends for `wan_request(prompt)`, as another client
/// of the account would send it too.
fn same_request_as_vidgate(prompt: &str) -> Value {
    json!({ "model": "wan2.6-t2v", "input": { "prompt": prompt },
        "parameters": { "duration": 5, "resolution": "720P", "ratio": "16:9",
            "prompt_extend": false, "watermark": false } })
}

/// Issue 51, item 1: the list is read as the v2 SDK's `JobList` reads it
/// (a flat `tasks` list, the fake's default) and as the 1.x SDK keeps it
/// (`data`): under either, a create whose answer was lost is found, and
/// never sent twice.
async fn a_lost_create_is_found_under_either_reading_of_the_list(store: StoreKind) {
    for shape in [ListShape::Tasks, ListShape::Data] {
        let fake = FakeDashScope::start().await;
        fake.switches(|switches| {
            switches.lose_create_answers = 1;
            switches.list_shape = shape;
        });
        let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 60,
            "poll_seconds": 0.1, "retry_seconds": 3 });
        let app = dashscope_app(store.clone(), &fake, timeouts).await;
        let done = run(&app, "a kite whose answer is lost in a list").await;
        assert_eq!(done["status"], "succeeded", "{shape:?}: {done}");
        assert_eq!(fake.tasks().len(), 1, "{shape:?}: one task, never two");
        let recorded = recorded_task(&app, &fake, done["id"].as_str().unwrap()).await;
        assert_eq!(recorded.task_id, fake.tasks()[0].task_id, "{shape:?}");
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Issue 51, item 1: a list page that is not a list of tasks, or whose
/// `total` is above the tasks it shows, never proves that nothing was
/// created: the create is not sent again, and the generation fails at its
/// deadline, refunded, with the task's possible cost in the usage report.
async fn a_list_that_cannot_be_read_whole_never_proves_a_lost_create_absent(store: StoreKind) {
    for shape in [ListShape::NotAList, ListShape::TotalAboveTasks] {
        let fake = FakeDashScope::start().await;
        fake.switches(|switches| {
            switches.lose_create_answers = 1;
            switches.list_shape = shape;
        });
        let backends = dashscope_backends_with(&fake, undecided_timeouts(), Some(test_costs()));
        let app = app_at(store.clone(), backends, 2).await;
        let before = app.account_state(&app.account.account.id).await;
        let done = run(&app, "a kite in a list that proves nothing").await;
        assert_eq!(done["status"], "failed", "{shape:?}: {done}");
        assert_eq!(done["error"]["code"], "upstream_error", "{shape:?}: {done}");
        assert_eq!(fake.tasks().len(), 1, "{shape:?}: never a second task");
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "{shape:?}: refunded");
        let usage = app.server.store.ledger().model_usage(0).await.unwrap();
        assert_eq!(usage.len(), 1, "{shape:?}: {usage:?}");
        assert_eq!(usage[0].generations, 0);
        assert_eq!(
            usage[0].provider_cost.0, 500_000,
            "{shape:?}: the possible cost"
        );
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// Issue 51, item 2: another client of the account (a staging deployment
/// sharing the key) sent the same prompt as a 15 s 1080p task. A lost
/// create of a 5 s 720p generation follows its own task, found by all its
/// read shows of the request, never the stranger's.
async fn a_lost_create_never_adopts_another_clients_task_of_the_same_prompt(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let prompt = "a kite two clients asked for";
    let mut stranger = same_request_as_vidgate(prompt);
    stranger["parameters"]["duration"] = json!(15);
    stranger["parameters"]["resolution"] = json!("1080P");
    let strangers_task = fake.create_as_another_client(stranger).await;
    wait_until_succeeded(&fake, &strangers_task).await;
    fake.switches(|switches| switches.lose_create_answers = 1);
    let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 3 });
    let app = dashscope_app(store, &fake, timeouts).await;
    let done = run(&app, prompt).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        fake.tasks().len(),
        2,
        "the stranger's and ours, never a third"
    );
    let ours = recorded_task(&app, &fake, done["id"].as_str().unwrap()).await;
    assert_ne!(ours.task_id, strangers_task, "never the stranger's task");
    assert_eq!(ours.parameters["duration"], 5);
    assert_eq!(ours.parameters["resolution"], "720P");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 51, item 2: when two tasks show the same request (another client
/// sent exactly what vidgate sent), which is ours cannot be told: neither
/// is adopted, nothing is sent again, and the generation fails at its
/// deadline, refunded, with its possible cost recorded.
async fn two_tasks_that_show_the_same_request_are_never_adopted(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let prompt = "a kite two clients asked for alike";
    let strangers_task = fake
        .create_as_another_client(same_request_as_vidgate(prompt))
        .await;
    wait_until_succeeded(&fake, &strangers_task).await;
    fake.switches(|switches| switches.lose_create_answers = 1);
    let backends = dashscope_backends_with(&fake, undecided_timeouts(), Some(test_costs()));
    let app = app_at(store, backends, 2).await;
    let before = app.account_state(&app.account.account.id).await;
    let done = run(&app, prompt).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(fake.tasks().len(), 2, "never a third task");
    let recorded = app
        .server
        .store
        .provider_jobs()
        .get(done["id"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(recorded.job_id, None, "neither task is adopted");
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(after.balance, before.balance, "refunded");
    let usage = app.server.store.ledger().model_usage(0).await.unwrap();
    assert_eq!(usage[0].provider_cost.0, 500_000, "the possible cost");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// Issue 51, item 3: DashScope sends no callbacks, so with a public URL
/// set (every real deployment) a task is polled from the start, not first
/// read after the model's usual run time.
async fn a_dashscope_task_is_polled_from_the_start_with_a_public_url(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    let timeouts = json!({ "request_seconds": 5, "start_seconds": 30, "job_seconds": 120,
        "poll_seconds": 0.1, "usual_run_seconds": 60, "retry_seconds": 3 });
    let app = app_with_webhooks(store, dashscope_backends(&fake, timeouts)).await;
    let started = Instant::now();
    let done = run(&app, "a quick kite with a public URL").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    // Waiting for a callback, the first read would come after 60 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 51, item 5: five creates whose answers were lost, each then found
/// in the list, are not five failures of DashScope: its circuit stays
/// closed, and the next submit is taken.
async fn lost_answers_whose_tasks_were_found_do_not_open_the_circuit(store: StoreKind) {
    let fake = FakeDashScope::start().await;
    fake.switches(|switches| switches.lose_create_answers = 5);
    let timeouts = json!({ "request_seconds": 1, "start_seconds": 30, "job_seconds": 60,
        "poll_seconds": 0.1, "retry_seconds": 3 });
    let app = dashscope_app(store, &fake, timeouts).await;
    let mut submitted = Vec::new();
    for index in 0..5 {
        submitted.push(
            submit(
                &app,
                "vendor_1/model_1",
                wan_request(&format!("a kite lost and found, number {index}")),
            )
            .await,
        );
    }
    for generation in &submitted {
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    assert_eq!(fake.tasks().len(), 5, "one task each");
    let next = app
        .submit(
            "vendor_1/model_1/text-to-video",
            wan_request("a kite after the lost answers"),
        )
        .await;
    assert_eq!(next.status(), 202, "the circuit is closed");
}

on_both_stores!(
    a_wan_task_succeeds_with_the_video_in_our_storage,
    failed_and_refused_tasks_fail_and_are_refunded,
    a_pending_task_is_canceled_there_and_refunded,
    a_running_task_is_not_canceled,
    a_task_still_pending_at_the_start_deadline_is_canceled_and_refunded,
    a_lost_create_answer_is_reconciled_to_its_one_task,
    a_lost_create_that_cannot_be_recognised_fails_at_its_deadline_without_a_second_task,
    an_outage_fails_the_job_refunded_without_a_task,
    the_query_limit_is_kept_and_throttling_never_fails_a_job,
    a_lost_create_is_found_under_either_reading_of_the_list,
    a_list_that_cannot_be_read_whole_never_proves_a_lost_create_absent,
    a_lost_create_never_adopts_another_clients_task_of_the_same_prompt,
    two_tasks_that_show_the_same_request_are_never_adopted,
    a_dashscope_task_is_polled_from_the_start_with_a_public_url,
    lost_answers_whose_tasks_were_found_do_not_open_the_circuit,
);
