//! Live status: `Prefer: wait=N` on a submit and on a read, the event
//! stream of a generation, the store's change announcements under them
//! (across nodes on PostgreSQL), their caps and their end at shutdown.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use vidgate_server::live_status::LiveStatusLimits;
use vidgate_server::store::{FailureDetail, Generation, Store};

/// Longest any test here waits for something that should come at once:
/// far above the announcement path and the one-second re-read, far below
/// the waits the tests ask for, so that a wait answered at its deadline
/// instead of on the change fails.
const PROMPTLY: Duration = Duration::from_secs(10);

/// A job that takes a second and a half to render.
fn slow_body() -> Value {
    quick_body("slow [sim:sleep=1500]")
}

/// A `GET /generations/{id}` with `Prefer: wait=60` by `key`, sent from a
/// task of its own: how long it waited, and its answer.
fn spawn_waited_get(
    app: &TestApp,
    id: &str,
    key: &str,
) -> tokio::task::JoinHandle<(Duration, reqwest::Response)> {
    let client = app.client.clone();
    let url = app.url(&format!("/generations/{id}"));
    let key = key.to_owned();
    tokio::spawn(async move {
        let started = Instant::now();
        let response = client
            .get(url)
            .bearer_auth(key)
            .header("prefer", "wait=60")
            .timeout(Duration::from_secs(90))
            .send()
            .await
            .unwrap();
        (started.elapsed(), response)
    })
}
async fn get_waiting(app: &TestApp, id: &str, prefer: &str) -> reqwest::Response {
    app.client
        .get(app.url(&format!("/generations/{id}")))
        .bearer_auth(app.key())
        .header("prefer", prefer)
        .timeout(Duration::from_secs(90))
        .send()
        .await
        .unwrap()
}

async fn submit_waiting(
    app: &TestApp,
    body: &Value,
    prefer: &str,
    idempotency_key: Option<&str>,
) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/run/{M1_T2V}")))
        .bearer_auth(app.key())
        .header("prefer", prefer)
        .timeout(Duration::from_secs(90))
        .json(body);
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.unwrap()
}

fn preference_applied(response: &reqwest::Response) -> Option<&str> {
    response
        .headers()
        .get("preference-applied")
        .map(|value| value.to_str().unwrap())
}

async fn a_read_with_a_wait_answers_when_the_generation_is_final(store: StoreKind) {
    let app = spawn_app(store).await;
    let submitted = app.submit_ok(M1_T2V, slow_body()).await;
    let id = submitted["id"].as_str().unwrap();
    let started = Instant::now();
    let response = get_waiting(&app, id, "wait=60").await;
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(preference_applied(&response), Some("wait=60"));
    // A final generation needs no polling hint.
    assert!(response.headers().get("retry-after").is_none());
    let record: Value = response.json().await.unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    // The same record as a plain read gives.
    assert_eq!(record, app.generation(id).await);
}

async fn a_wait_that_runs_out_answers_with_the_state_then(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("stays queued")).await;
    let id = submitted["id"].as_str().unwrap();
    let started = Instant::now();
    let response = get_waiting(&app, id, "respond-async, wait=2").await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    assert!(waited < PROMPTLY, "{waited:?}");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(preference_applied(&response), Some("wait=2"));
    assert_eq!(response.headers()["retry-after"], "5");
    let record: Value = response.json().await.unwrap();
    assert_eq!(record["status"], "queued");
}

async fn a_wait_is_answered_at_a_cancel(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("to cancel")).await;
    let id = submitted["id"].as_str().unwrap().to_owned();
    let waiting = {
        let waited_get = spawn_waited_get(&app, &id, app.key());
        tokio::spawn(async move {
            let (waited, response) = waited_get.await.unwrap();
            (waited, response.json::<Value>().await.unwrap())
        })
    };
    // Let the wait start first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.cancel(&submitted, app.key()).await.status(),
        StatusCode::OK
    );
    let (waited, record) = waiting.await.unwrap();
    assert_eq!(record["status"], "canceled", "{record}");
    assert!(waited < PROMPTLY, "{waited:?}");
}

async fn a_submit_with_a_wait_answers_202_once_final_and_its_replay_waits_too(store: StoreKind) {
    let app = spawn_app(store).await;
    let started = Instant::now();
    let response = submit_waiting(&app, &slow_body(), "wait=60", None).await;
    assert!(started.elapsed() < PROMPTLY);
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(preference_applied(&response), Some("wait=60"));
    assert!(response.headers().get("location").is_some());
    let record: Value = response.json().await.unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");

    // Submitted without a wait, then replayed with one: the replay waits
    // for the generation the first submit created.
    let first = submit_waiting(&app, &slow_body(), "respond-async", Some("replay-1")).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    assert!(preference_applied(&first).is_none());
    let first: Value = first.json().await.unwrap();
    assert_ne!(first["status"], "succeeded");
    let replay = submit_waiting(&app, &slow_body(), "wait=60", Some("replay-1")).await;
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(preference_applied(&replay), Some("wait=60"));
    let replayed: Value = replay.json().await.unwrap();
    assert_eq!(replayed["id"], first["id"]);
    assert_eq!(replayed["status"], "succeeded", "{replayed}");
}

async fn a_malformed_wait_is_refused_naming_the_header_and_charges_nothing(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("queued")).await;
    let id = submitted["id"].as_str().unwrap();
    for malformed in ["wait=abc", "wait=0", "wait=61", "wait"] {
        let response = get_waiting(&app, id, malformed).await;
        assert_invalid_request(response, "Prefer").await;
    }
    let before = app.account_state(&app.account.account.id).await;
    let response = submit_waiting(&app, &quick_body("refused"), "wait=1000", None).await;
    assert_invalid_request(response, "Prefer").await;
    let after = app.account_state(&app.account.account.id).await;
    assert_eq!(before.held, after.held);
    assert_eq!(before.balance, after.balance);
}

async fn another_accounts_generation_cannot_be_waited_on_or_streamed(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("mine")).await;
    let id = submitted["id"].as_str().unwrap();
    let other = app.new_account(10).await;
    let response = app
        .client
        .get(app.url(&format!("/generations/{id}")))
        .bearer_auth(&other.api_key)
        .header("prefer", "wait=5")
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::NOT_FOUND, "not_found", None).await;
    let response = app
        .get(&format!("/generations/{id}/events"), &other.api_key)
        .await;
    assert_error(response, StatusCode::NOT_FOUND, "not_found", None).await;
    let response = app
        .get_without_key(&format!("/generations/{id}/events"))
        .await;
    assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
}

/// One server-sent event as the tests read it.
#[derive(Debug)]
struct Event {
    id: String,
    record: Value,
}

/// Reads a `text/event-stream` body as it arrives.
struct EventReader {
    response: reqwest::Response,
    buffer: String,
    /// Comment lines seen so far.
    comments: usize,
}

impl EventReader {
    async fn open(app: &TestApp, id: &str, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = app
            .client
            .get(app.url(&format!("/generations/{id}/events")))
            .bearer_auth(app.key())
            // The client's whole-request timeout would cut the stream.
            .timeout(Duration::from_secs(600));
        if let Some(last_event_id) = last_event_id {
            request = request.header("last-event-id", last_event_id);
        }
        request.send().await.unwrap()
    }

    fn new(response: reqwest::Response) -> EventReader {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        assert_eq!(response.headers()["cache-control"], "no-cache");
        EventReader {
            response,
            buffer: String::new(),
            comments: 0,
        }
    }

    /// The next event, or `None` once the server closed the stream.
    async fn next(&mut self) -> Option<Event> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = None;
                for line in block.lines().filter(|line| !line.is_empty()) {
                    if line.starts_with(':') {
                        self.comments += 1;
                    } else if let Some(value) = line.strip_prefix("id: ") {
                        id = Some(value.to_owned());
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        assert!(data.is_none(), "one data line per event: {block}");
                        data = Some(serde_json::from_str(value).unwrap());
                    } else {
                        assert!(line.starts_with("retry: "), "unexpected line {line:?}");
                    }
                }
                if let (Some(id), Some(record)) = (id, data) {
                    return Some(Event { id, record });
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(60), self.response.chunk())
                .await
                .expect("the stream says something within a minute")
                .unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

async fn the_event_stream_sends_each_change_and_closes_after_the_final_one(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("followed")).await;
    let id = submitted["id"].as_str().unwrap();
    let mut events = EventReader::new(EventReader::open(&app, id, None).await);
    let first = events.next().await.unwrap();
    assert_eq!(first.id, "queued-0");
    assert_eq!(first.record, app.generation(id).await);

    // The store's own steps, as a worker takes them: each change is an
    // event with the whole record, as GET returns it.
    let store = app.server.store.clone();
    claim_as_the_test_worker(&store).await;
    let running = events.next().await.unwrap();
    assert_eq!(running.id, "running-1");
    assert_eq!(running.record, app.generation(id).await);
    fail_as_the_test_worker(&store, id).await;
    let failed = events.next().await.unwrap();
    assert_eq!(failed.id, "failed-1");
    assert_eq!(failed.record["status"], "failed");
    assert_eq!(failed.record, app.generation(id).await);
    assert!(
        events.next().await.is_none(),
        "the stream closes after the final state"
    );
}

async fn the_event_stream_resumes_after_the_last_event_id(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("resumed")).await;
    let id = submitted["id"].as_str().unwrap();
    let mut first = EventReader::new(EventReader::open(&app, id, None).await);
    let seen = first.next().await.unwrap();
    assert_eq!(seen.id, "queued-0");
    drop(first);

    // Resumed at the state it still is in: nothing is sent again until
    // it changes.
    let mut resumed = EventReader::new(EventReader::open(&app, id, Some(&seen.id)).await);
    let canceling = {
        let app_client = app.client.clone();
        let cancel_url = submitted["urls"]["cancel"].as_str().unwrap().to_owned();
        let key = app.key().to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            app_client
                .post(cancel_url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    let next = resumed.next().await.unwrap();
    assert_eq!(next.id, "canceled-0");
    assert_eq!(next.record["status"], "canceled");
    assert!(resumed.next().await.is_none());
    assert_eq!(canceling.await.unwrap(), StatusCode::OK);

    // Resumed after the final state: 204, which stops an EventSource from
    // reconnecting; resumed from an older state: the final one at once.
    let done = EventReader::open(&app, id, Some("canceled-0")).await;
    assert_eq!(done.status(), StatusCode::NO_CONTENT);
    let mut behind = EventReader::new(EventReader::open(&app, id, Some("queued-0")).await);
    assert_eq!(behind.next().await.unwrap().id, "canceled-0");
    assert!(behind.next().await.is_none());
}

async fn waits_and_streams_past_a_cap_are_refused_with_429(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        workers: 0,
        live_status: LiveStatusLimits {
            per_key: 2,
            per_account: 2,
            per_node: 3,
        },
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..TestSettings::new(store)
    })
    .await;
    let submitted = app.submit_ok(M1_T2V, quick_body("queued")).await;
    let id = submitted["id"].as_str().unwrap();
    let first = EventReader::new(EventReader::open(&app, id, None).await);
    let second = EventReader::new(EventReader::open(&app, id, None).await);
    // The key's third: a wait and a stream are both refused, with the
    // rate limiter's answer.
    let refused = get_waiting(&app, id, "wait=5").await;
    assert_eq!(refused.headers()["retry-after"], "2");
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    let refused = EventReader::open(&app, id, None).await;
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    // A submit with a wait is refused before it is submitted.
    let before = app.account_state(&app.account.account.id).await;
    let refused = submit_waiting(&app, &quick_body("refused"), "wait=5", None).await;
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    assert_eq!(
        app.account_state(&app.account.account.id).await.held,
        before.held
    );
    // A read that does not wait is untouched by the cap.
    assert_eq!(app.generation(id).await["status"], "queued");

    // Another key has room, until the node's cap.
    let other = app.new_account(10).await;
    let theirs = app
        .submit_quick_with_key(&other.api_key, "theirs")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let theirs_id = theirs["id"].as_str().unwrap();
    let events_of = |key: &str, id: &str| {
        app.client
            .get(app.url(&format!("/generations/{id}/events")))
            .bearer_auth(key.to_owned())
            .timeout(Duration::from_secs(600))
            .send()
    };
    let third = events_of(&other.api_key, theirs_id).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);
    let refused = events_of(&other.api_key, theirs_id).await.unwrap();
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;

    // Closed streams give their slots back.
    drop((first, second));
    let deadline = Instant::now() + PROMPTLY;
    loop {
        let response = get_waiting(&app, id, "wait=1").await;
        if response.status() == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "the slots never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(third);

    let scraped = app.metrics_text().await;
    let refusals = scraped
        .lines()
        .find(|line| line.contains("limit=\"live_status\""))
        .unwrap_or_else(|| panic!("no live_status refusals in {scraped}"));
    let count: f64 = refusals.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 4.0, "{refusals}");
}

async fn one_account_with_many_keys_leaves_the_node_slots_for_others(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        workers: 0,
        hosted_jobs: 0,
        live_status: LiveStatusLimits {
            per_key: 2,
            per_account: 4,
            per_node: 6,
        },
        ..TestSettings::new(store)
    })
    .await;
    let submitted = app.submit_ok(M1_T2V, quick_body("queued")).await;
    let id = submitted["id"].as_str().unwrap();
    let events_of = |key: String, id: String| {
        app.client
            .get(app.url(&format!("/generations/{id}/events")))
            .bearer_auth(key)
            .timeout(Duration::from_secs(600))
            .send()
    };
    // Three keys of one account, two streams each: the account's cap
    // stops it at four, before the node's six.
    let mut held = Vec::new();
    let mut refused = 0;
    for name in ["one", "two", "three"] {
        let key = vidgate_server::application::accounts::create_api_key(
            &app.server.store,
            &app.account.account.id,
            name,
        )
        .await
        .unwrap();
        for _ in 0..2 {
            let response = events_of(key.api_key.clone(), id.to_owned()).await.unwrap();
            if response.status() == StatusCode::OK {
                held.push(response);
            } else {
                assert_error(
                    response,
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    None,
                )
                .await;
                refused += 1;
            }
        }
    }
    assert_eq!((held.len(), refused), (4, 2));

    // Another account still gets a stream and a wait.
    let other = app.new_account(10).await;
    let theirs = app
        .submit_quick_with_key(&other.api_key, "theirs")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let theirs_id = theirs["id"].as_str().unwrap();
    let stream = events_of(other.api_key.clone(), theirs_id.to_owned())
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let waited = app
        .client
        .get(app.url(&format!("/generations/{theirs_id}")))
        .bearer_auth(&other.api_key)
        .header("prefer", "wait=1")
        .send()
        .await
        .unwrap();
    assert_eq!(waited.status(), StatusCode::OK);
    assert_eq!(preference_applied(&waited), Some("wait=1"));
}

async fn a_revoked_keys_streams_and_waits_end_within_seconds(store: StoreKind) {
    let app = spawn_app_without_workers(store.clone()).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("followed")).await;
    let id = submitted["id"].as_str().unwrap().to_owned();
    let mut events = EventReader::new(EventReader::open(&app, &id, None).await);
    assert_eq!(events.next().await.unwrap().id, "queued-0");

    // Revoked by another process on the database (as `vidgate admin`
    // does), which this node hears of only by asking the database.
    let elsewhere = vidgate_server::store::open(&app.database.url())
        .await
        .unwrap();
    revoke_key(&elsewhere, &app.account.key_id).await;
    let revoked_at = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(3), events.next())
        .await
        .expect("the stream ends within the caller cache's second");
    assert!(
        ended.is_none(),
        "nothing is sent after the revocation: {ended:?}"
    );
    assert!(revoked_at.elapsed() < Duration::from_secs(3));

    // A wait of another account's key, revoked through this node: the
    // wait answers 401 at once instead of the generation's state.
    let other = app.new_account(10).await;
    let theirs = app
        .submit_quick_with_key(&other.api_key, "theirs")
        .await
        .json::<Value>()
        .await
        .unwrap();
    let theirs_id = theirs["id"].as_str().unwrap().to_owned();
    let waiting = spawn_waited_get(&app, &theirs_id, &other.api_key);
    tokio::time::sleep(Duration::from_millis(300)).await;
    revoke_key(&app.server.store, &other.key_id).await;
    let (waited, response) = waiting.await.unwrap();
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert_error(response, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
}

async fn shutdown_answers_open_waits_and_closes_open_streams(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("never runs")).await;
    let id = submitted["id"].as_str().unwrap().to_owned();
    let mut stream = EventReader::new(EventReader::open(&app, &id, None).await);
    assert_eq!(stream.next().await.unwrap().id, "queued-0");
    let waiting = {
        let waited_get = spawn_waited_get(&app, &id, app.key());
        tokio::spawn(async move { waited_get.await.unwrap().1 })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let TestApp { server, .. } = app;
    let started = Instant::now();
    tokio::time::timeout(PROMPTLY, server.shutdown())
        .await
        .expect("shutdown does not wait for open waits and streams");
    assert!(started.elapsed() < PROMPTLY);
    let answered = waiting.await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    assert_eq!(answered.json::<Value>().await.unwrap()["status"], "queued");
    // The stream ended without a final state: its client reconnects.
    assert!(stream.next().await.is_none());
}

/// Claims the next queued job as the worker "test-worker" would.
async fn claim_as_the_test_worker(store: &Store) -> Generation {
    store
        .queue()
        .claim_next("test-worker", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("a queued job to claim")
}

/// Fails the generation "test-worker" runs, as that worker would.
async fn fail_as_the_test_worker(store: &Store, id: &str) {
    let failure = FailureDetail {
        code: "test".into(),
        message: "failed on purpose".into(),
    };
    assert!(
        store
            .queue()
            .finish_failed(id, "test-worker", failure)
            .await
            .unwrap()
    );
}

/// Issue 42, item 5: the streams and waits of one generation share one
/// reader on the node; each of them still gets every state, with the whole
/// record as GET returns it, and the final event, and then closes.
async fn many_streams_of_one_generation_all_get_every_change_and_the_final_event(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("watched by many")).await;
    let id = submitted["id"].as_str().unwrap();
    // Few enough that the key's request rate (a burst of 20) lets every
    // request of the test through.
    let mut streams = Vec::new();
    for _ in 0..8 {
        streams.push(EventReader::new(EventReader::open(&app, id, None).await));
    }
    let waiting = spawn_waited_get(&app, id, app.key());
    let queued = app.generation(id).await;
    for stream in &mut streams {
        let first = stream.next().await.unwrap();
        assert_eq!(first.id, "queued-0");
        assert_eq!(first.record, queued);
    }

    let store = app.server.store.clone();
    claim_as_the_test_worker(&store).await;
    let running = app.generation(id).await;
    for stream in &mut streams {
        let event = stream.next().await.unwrap();
        assert_eq!(event.id, "running-1");
        assert_eq!(event.record, running);
    }
    fail_as_the_test_worker(&store, id).await;
    let failed = app.generation(id).await;
    for stream in &mut streams {
        let event = stream.next().await.unwrap();
        assert_eq!(event.id, "failed-1");
        assert_eq!(event.record, failed);
        assert!(
            stream.next().await.is_none(),
            "the stream closes after the final state"
        );
    }
    let (_, answered) = waiting.await.unwrap();
    assert_eq!(answered.json::<Value>().await.unwrap(), failed);
    // A stream opened after the end hears the final state at once.
    let mut late = EventReader::new(EventReader::open(&app, id, None).await);
    assert_eq!(late.next().await.unwrap().id, "failed-1");
    assert!(late.next().await.is_none());
}

async fn every_committed_status_change_wakes_a_watcher(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let store = app.server.store.clone();
    let woken = |mut watch: vidgate_server::store::GenerationWatch| async move {
        tokio::time::timeout(PROMPTLY, watch.changed())
            .await
            .is_ok()
    };

    // Claim, then finish.
    let first = app.submit_ok(M1_T2V, quick_body("first")).await;
    let first_id = first["id"].as_str().unwrap();
    let watch = store.generations().watch(first_id).await;
    let claimed = claim_as_the_test_worker(&store).await;
    assert_eq!(claimed.id, first_id);
    assert!(woken(watch).await, "the claim");
    let watch = store.generations().watch(first_id).await;
    fail_as_the_test_worker(&store, first_id).await;
    assert!(woken(watch).await, "the finish");

    // A cancel.
    let second = app.submit_ok(M1_T2V, quick_body("second")).await;
    let watch = store
        .generations()
        .watch(second["id"].as_str().unwrap())
        .await;
    assert_eq!(
        app.cancel(&second, app.key()).await.status(),
        StatusCode::OK
    );
    assert!(woken(watch).await, "the cancel");

    // A rescue of a lost lease puts the job back in the queue.
    let third = app.submit_ok(M1_T2V, quick_body("third")).await;
    let third_id = third["id"].as_str().unwrap();
    store
        .queue()
        .claim_next("lost-worker", Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();
    let watch = store.generations().watch(third_id).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let report = store.queue().rescue_expired_leases().await.unwrap();
    assert_eq!(report.requeued, vec![third_id.to_owned()]);
    assert!(woken(watch).await, "the rescue");
}

on_both_stores!(
    a_read_with_a_wait_answers_when_the_generation_is_final,
    a_wait_that_runs_out_answers_with_the_state_then,
    a_wait_is_answered_at_a_cancel,
    a_submit_with_a_wait_answers_202_once_final_and_its_replay_waits_too,
    a_malformed_wait_is_refused_naming_the_header_and_charges_nothing,
    another_accounts_generation_cannot_be_waited_on_or_streamed,
    the_event_stream_sends_each_change_and_closes_after_the_final_one,
    the_event_stream_resumes_after_the_last_event_id,
    waits_and_streams_past_a_cap_are_refused_with_429,
    one_account_with_many_keys_leaves_the_node_slots_for_others,
    a_revoked_keys_streams_and_waits_end_within_seconds,
    shutdown_answers_open_waits_and_closes_open_streams,
    every_committed_status_change_wakes_a_watcher,
    many_streams_of_one_generation_all_get_every_change_and_the_final_event,
);

/// PostgreSQL only: SQLite's announcements are in-process calls after each
/// commit, which cannot be missed. A change that was never announced (made
/// here by a bare statement) is found once the node's listener loses its
/// connection: from then until it listens again, the store no longer
/// vouches for its announcements, and the generation's reader reads again
/// (at once, and every second until the listener is back).
#[tokio::test]
async fn a_change_whose_announcement_was_missed_reaches_the_stream_once_the_listener_is_lost() {
    let Some(store) = StoreKind::postgres(
        "a_change_whose_announcement_was_missed_reaches_the_stream_once_the_listener_is_lost",
    ) else {
        return;
    };
    use sqlx::Connection;
    let app = spawn_app_without_workers(store).await;
    let submitted = app.submit_ok(M1_T2V, quick_body("unannounced")).await;
    let id = submitted["id"].as_str().unwrap();
    let mut events = EventReader::new(EventReader::open(&app, id, None).await);
    assert_eq!(events.next().await.unwrap().id, "queued-0");
    let TestDatabase::Postgres(database) = &app.database else {
        unreachable!("a PostgreSQL test");
    };
    let mut connection = sqlx::PgConnection::connect(&database.url).await.unwrap();
    // The claim's change of state, without its announcement.
    let changed = sqlx::query(
        "UPDATE generations SET status = 'running', attempts = attempts + 1, \
         started_at = created_at, lease_owner = 'test-worker', \
         lease_expires_at = created_at + 3600000 WHERE id = $1 AND status = 'queued'",
    )
    .bind(id)
    .execute(&mut connection)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(changed, 1);
    // The node's listener is the only session of this database that last
    // ran LISTEN.
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND query LIKE 'LISTEN%'",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    assert_eq!(ended, [true]);
    let running = tokio::time::timeout(PROMPTLY, events.next())
        .await
        .expect("the unannounced change is read once the listener is lost")
        .unwrap();
    assert_eq!(running.id, "running-1");
    assert_eq!(running.record["status"], "running");
}

/// PostgreSQL only: SQLite runs one node. An API node without workers
/// follows a job that a worker node runs, by a stream and by a wait.
#[tokio::test]
async fn a_stream_and_a_wait_on_one_node_follow_a_job_run_on_another() {
    let Some(store) =
        StoreKind::postgres("a_stream_and_a_wait_on_one_node_follow_a_job_run_on_another")
    else {
        return;
    };
    let app = spawn_app_without_workers(store.clone()).await;
    let submitted = app.submit_ok(M1_T2V, slow_body()).await;
    let id = submitted["id"].as_str().unwrap();
    let mut events = EventReader::new(EventReader::open(&app, id, None).await);
    assert_eq!(events.next().await.unwrap().id, "queued-0");
    let worker_node = app.start_another_node(TestSettings::new(store)).await;
    let started = Instant::now();
    let response = get_waiting(&app, id, "wait=60").await;
    assert!(started.elapsed() < PROMPTLY);
    assert_eq!(
        response.json::<Value>().await.unwrap()["status"],
        "succeeded"
    );
    assert_eq!(events.next().await.unwrap().id, "running-1");
    let succeeded = events.next().await.unwrap();
    assert_eq!(succeeded.id, "succeeded-1");
    assert!(succeeded.record["output"]["video_url"].is_string());
    assert!(events.next().await.is_none());
    worker_node.shutdown().await;
}

/// PostgreSQL only: SQLite runs one node. A change committed by another
/// node's store wakes a watcher here through `NOTIFY`, not by a re-read
/// (a watch is woken by announcements only).
#[tokio::test]
async fn a_change_committed_on_another_node_wakes_a_watcher_here() {
    let Some(store) =
        StoreKind::postgres("a_change_committed_on_another_node_wakes_a_watcher_here")
    else {
        return;
    };
    let app = spawn_app_without_workers(store.clone()).await;
    let other_node = app
        .start_another_node(TestSettings {
            workers: 0,
            ..TestSettings::new(store)
        })
        .await;
    let submitted = app.submit_ok(M1_T2V, quick_body("elsewhere")).await;
    let id = submitted["id"].as_str().unwrap();
    let mut watch = app.server.store.generations().watch(id).await;
    let claimed = other_node
        .server
        .store
        .queue()
        .claim_next("other-node-worker", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.id, id);
    tokio::time::timeout(PROMPTLY, watch.changed())
        .await
        .expect("the other node's claim is heard here");
    other_node.shutdown().await;
}
