//! Provider webhooks: a verified one ends a job early, forged, stale,
//! duplicate and misdirected ones change nothing, and polling covers lost ones.

use super::*;

async fn a_signed_provider_webhook_finishes_the_job_without_waiting_for_polling(store: StoreKind) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
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

async fn a_forged_stale_or_duplicate_provider_webhook_changes_nothing(store: StoreKind) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
    for provider in [Provider::FAL, Provider::REPLICATE] {
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

/// Issue 17: a failed read of the provider's webhook keys (fal's JWKS,
/// Replicate's webhook secret) is remembered for a while, so a flood of
/// webhooks during an outage, forged ones included, costs the provider one
/// read rather than one each. Issue 38, item 7: an unsigned request is
/// refused (400) before the keys are read, and a signed one that cannot be
/// verified is answered without the provider's own error text.
async fn a_failed_key_fetch_is_remembered_so_a_webhook_flood_reads_the_keys_once(store: StoreKind) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
    for provider in [Provider::FAL, Provider::REPLICATE] {
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
        let backends = example_backends(&fake, Provider::FAL, |model| {
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
            if let Some(job) = fake.jobs_at(Provider::FAL).pop() {
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
                .provider_jobs()
                .get(id)
                .await
                .unwrap()
                .and_then(|recorded| recorded.job_id)
                .is_none_or(|job_id| job_id == ours.id),
            "{webhook_user_id:?}: the stranger's request was not adopted"
        );

        let done = app.wait_for_status(id, &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{webhook_user_id:?}: {done}");
        let recorded = app
            .server
            .store
            .provider_jobs()
            .get(id)
            .await
            .unwrap()
            .unwrap();
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
            .jobs_at(Provider::FAL)
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
                .queue()
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
                route_reason: None,
            };
            assert!(store.provider_jobs().record_intent(&intent).await.unwrap());
            generation_ids.push(claimed.id);
        }
        let job_id = format!("00000000-0000-4000-8000-{round:012}");
        let (first, second) = tokio::join!(
            store
                .provider_jobs()
                .record_job_id(&generation_ids[0], &job_id),
            store
                .provider_jobs()
                .record_job_id(&generation_ids[1], &job_id),
        );
        let (first, second) = (first.unwrap(), second.unwrap());
        assert!(
            first != second,
            "round {round}: exactly one adopts: {first} {second}"
        );
        let owner = store
            .provider_jobs()
            .generation_of("fal", &job_id)
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
        let lost = store.provider_jobs().get(loser).await.unwrap().unwrap();
        assert_eq!(
            lost.job_id, None,
            "round {round}: the other keeps its intent open"
        );
    }
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
    let backends = example_backends(&fake, Provider::REPLICATE, |model| {
        model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 60,
            "job_seconds": 120, "poll_seconds": 0.1, "retry_seconds": 20,
            "usual_run_seconds": 30 });
    });
    let app = app_with_webhooks(store, backends).await;
    let done = run_m1(&app, "a kite told by webhook").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let job = fake.jobs_at(Provider::REPLICATE).remove(0);
    assert!(job.webhook_url.is_some());
    let reads = fake.state_reads_of(&job.id);
    assert!(reads.len() <= 2, "{reads:?}");
    // The completion webhook was taken, and it is what ended the job: the
    // read after the provider's completion, then the output's download.
    let job = fake.jobs_at(Provider::REPLICATE).remove(0);
    let completed = job.completed_at.unwrap();
    assert!(fake.completion_webhook_taken_at(&job.id).is_some());
    let read_after_completion = *reads.last().unwrap();
    assert!(read_after_completion >= completed, "{reads:?} {completed}");
    assert!(fake.output_fetched_at(&job.id).unwrap() >= read_after_completion);
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
    match job.provider.name {
        "fal" => {
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
        "replicate" => {
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
        // ModelArk's callbacks are unsigned: the task object alone.
        "modelark" => client
            .post(url)
            .header("content-type", "application/json")
            .body(tampered_body.map_or_else(
                || fake_providers::modelark::task(&fake.state, job).to_string(),
                str::to_owned,
            )),
        other => unreachable!("the fake has no webhook of {other}"),
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

on_both_stores!(
    a_signed_provider_webhook_finishes_the_job_without_waiting_for_polling,
    a_forged_stale_or_duplicate_provider_webhook_changes_nothing,
    a_lost_provider_webhook_is_covered_by_polling,
    a_failed_key_fetch_is_remembered_so_a_webhook_flood_reads_the_keys_once,
    a_provider_webhook_without_the_generations_url_secret_is_refused,
    a_fal_webhook_for_a_request_in_another_account_adopts_nothing,
    two_adoptions_of_one_provider_job_at_once_give_it_to_one_generation,
    a_job_with_a_registered_webhook_is_read_rarely,
);
