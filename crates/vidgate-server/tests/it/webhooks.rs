//! Webhooks over real HTTP: a receiver on loopback checks every delivery
//! with the independent `standardwebhooks` verifier, fails on purpose to see
//! retries, and outlives server restarts. The retry schedule is shortened to
//! tenths of a second (`fast_webhook_settings`).

use crate::common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode as AxumStatus};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::*;
use serde_json::{Value, json};
use standardwebhooks::Webhook;
use tokio::sync::Notify;
use vidgate_core::Micros;
use vidgate_server::operator_actions::accounts as account_actions;
use vidgate_server::store::{ListFilter, NewGeneration, Source, StoredJson};

/// One request the receiver got.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
    at: Instant,
}

impl Received {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers[name].to_str().unwrap()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// Checks the signature as a customer would, with the reference library.
    pub(crate) fn verify_with(&self, secret: &str) -> Result<(), standardwebhooks::WebhookError> {
        Webhook::new(secret)
            .unwrap()
            .verify(&self.body, &self.headers)
    }
}

/// A scripted answer: status and extra headers.
pub(crate) type Answer = (u16, Vec<(&'static str, String)>);

#[derive(Clone, Default)]
struct ReceiverState {
    received: Arc<Mutex<Vec<Received>>>,
    /// Answers for the next requests, in order; 204 once it is empty.
    script: Arc<Mutex<VecDeque<Answer>>>,
    arrived: Arc<Notify>,
}

/// A webhook receiver on 127.0.0.1 with an ephemeral port.
pub(crate) struct Receiver {
    state: ReceiverState,
    base: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.received.lock().unwrap().push(Received {
        path: uri.path().to_owned(),
        headers,
        body,
        at: Instant::now(),
    });
    state.arrived.notify_waiters();
    let (status, extra_headers) = state
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or((204, Vec::new()));
    let mut response = AxumStatus::from_u16(status).unwrap().into_response();
    for (name, value) in extra_headers {
        response.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(&value).unwrap(),
        );
    }
    response
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        let state = ReceiverState::default();
        let router = Router::new()
            .route("/hook", post(receive))
            .route("/elsewhere", post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Receiver {
            state,
            base: format!("http://{address}"),
            server,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("{}/hook", self.base)
    }

    pub(crate) fn answer_next(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state.script.lock().unwrap().extend(answers);
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// Waits until at least `count` requests arrived.
    pub(crate) async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let arrived = self.state.arrived.notified();
            let received = self.received();
            if received.len() >= count {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {count} webhook requests arrived",
                received.len()
            );
            let _ = tokio::time::timeout(Duration::from_millis(200), arrived).await;
        }
    }
}

fn body_with_webhook(prompt: &str, webhook_url: &str) -> Value {
    let mut body = quick_body(prompt);
    body["webhook_url"] = json!(webhook_url);
    body
}

/// Submits a quick job whose webhook goes to `receiver`; its id.
async fn submit_with_webhook_to(app: &TestApp, receiver: &Receiver, prompt: &str) -> String {
    let submitted = app
        .submit_ok(M1_T2V, body_with_webhook(prompt, &receiver.url()))
        .await;
    submitted["id"].as_str().unwrap().to_owned()
}

/// Polls the store's delivery log until the generation's only delivery
/// reaches `status`, and returns it.
async fn wait_for_delivery_status(
    app: &TestApp,
    generation_id: &str,
    status: &str,
) -> vidgate_server::store::WebhookDelivery {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let deliveries = app
            .server
            .store
            .webhook_log()
            .deliveries(&app.account.account.id, generation_id)
            .await
            .unwrap();
        if let [delivery] = deliveries.as_slice()
            && delivery.status.as_str() == status
        {
            return delivery.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {status} delivery: {deliveries:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_succeeded_generation_is_delivered_signed_with_its_record(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "a kite").await;

    let delivery = &receiver.wait_for(1).await[0];
    delivery
        .verify_with(&app.account.account.webhook_secret)
        .expect("the signature verifies with the account's secret");
    assert_eq!(delivery.path, "/hook");
    assert_eq!(delivery.header("content-type"), "application/json");
    assert!(delivery.header("webhook-id").starts_with("msg_"));
    let sent_at: i64 = delivery.header("webhook-timestamp").parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((now - sent_at).abs() <= 5, "{sent_at} vs {now}");
    // Another account's secret does not verify it.
    let stranger = app.new_account(1).await;
    assert!(
        delivery
            .verify_with(&stranger.account.webhook_secret)
            .is_err()
    );

    let event = delivery.json();
    assert_eq!(event["type"], "generation.succeeded");
    let record = app.generation(&id).await;
    assert_eq!(event["data"], record, "the event carries GET's record");
    assert_eq!(event["timestamp"], record["completed_at"]);
    assert_eq!(event["data"]["status"], "succeeded");

    let logged = wait_for_delivery_status(&app, &id, "delivered").await;
    assert_eq!(logged.attempts, 1);
    assert_eq!(logged.id, delivery.header("webhook-id"));
    assert_eq!(logged.attempt_log[0].record.status_code, Some(204));
    // Delivered once: nothing more arrives.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(receiver.received().len(), 1);
}

/// Submits a quick job for `key` and answers the hold it took.
async fn hold_of_a_quick_job(app: &TestApp, key: &str, account_id: &str, prompt: &str) -> Micros {
    let response = app
        .post_json(&format!("/run/{M1_T2V}"), key, &quick_body(prompt))
        .await;
    assert_eq!(response.status(), reqwest::StatusCode::ACCEPTED);
    let generation: Value = response.json().await.unwrap();
    let entries = app.server.store.ledger().entries(account_id).await.unwrap();
    entries
        .iter()
        .find(|entry| {
            entry.kind == "hold" && entry.generation_id.as_deref() == generation["id"].as_str()
        })
        .map(|entry| entry.amount)
        .expect("the submit took a hold")
}

/// Waits until none of the account's generations is queued or running.
async fn wait_until_no_job_is_active(app: &TestApp, account_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = app
            .server
            .store
            .generations()
            .list(
                account_id,
                &ListFilter {
                    status: None,
                    model: None,
                    before: None,
                    limit: 10,
                },
            )
            .await
            .unwrap();
        if page.iter().all(|generation| generation.status.is_final()) {
            return;
        }
        assert!(Instant::now() < deadline, "the account's jobs never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `account.balance_low` goes out like a generation's event (the outbox,
/// the senders, the account's signature), once when a hold takes the
/// balance below the threshold, not again while it stays below, and again
/// after a credit took it back to the threshold.
async fn the_low_balance_event_is_delivered_signed_once_per_crossing(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app(store).await;
    let customer = app.new_account(5).await;
    let account_id = customer.account.id.as_str();
    let key = customer.api_key.as_str();
    let store = app.server.store.as_ref();
    // The threshold is the whole balance: the first hold crosses it.
    let account = account_actions::set_low_balance_alert(
        store,
        "test",
        account_id,
        Some("5.00"),
        Some(&receiver.url()),
    )
    .await
    .unwrap();
    assert!(!account.is_below_low_balance_threshold());
    let deliveries = || async move {
        store
            .webhook_log()
            .recent_deliveries(account_id, 10)
            .await
            .unwrap()
    };
    assert!(deliveries().await.is_empty());

    let first = hold_of_a_quick_job(&app, key, account_id, "crosses the threshold").await;
    hold_of_a_quick_job(&app, key, account_id, "stays below it").await;
    let delivery = &receiver.wait_for(1).await[0];
    delivery
        .verify_with(&customer.account.webhook_secret)
        .expect("the signature verifies with the account's secret");
    assert!(delivery.header("webhook-id").starts_with("msg_"));
    let event = delivery.json();
    assert_eq!(event["type"], "account.balance_low");
    assert_eq!(
        event["data"],
        json!({
            "object": "balance_alert",
            "account_id": account_id,
            "balance_usd": (Micros(5_000_000) - first).to_usd(),
            "threshold_usd": 5.0,
        }),
        "the balance the first hold left"
    );
    let logged = deliveries().await;
    assert_eq!(logged.len(), 1, "the second hold sends nothing: {logged:?}");
    assert_eq!(logged[0].generation_id, None);
    assert_eq!(logged[0].delivery.event_type, "account.balance_low");
    assert_eq!(logged[0].delivery.id, delivery.header("webhook-id"));
    assert!(
        app.account_state(account_id)
            .await
            .is_below_low_balance_threshold()
    );

    // Back to the threshold exactly re-arms it; the next hold crosses again.
    // The first two jobs end first: one refunded (a machine under load may
    // fail a quick job) would otherwise raise the balance after the credit
    // and leave the third hold at the threshold, not below it.
    wait_until_no_job_is_active(&app, account_id).await;
    let balance = app.account_state(account_id).await.balance;
    store
        .ledger()
        .credit(account_id, Micros(5_000_000) - balance)
        .await
        .unwrap();
    assert!(
        !app.account_state(account_id)
            .await
            .is_below_low_balance_threshold()
    );
    hold_of_a_quick_job(&app, key, account_id, "crosses again").await;
    let events = receiver.wait_for(2).await;
    assert_eq!(events[1].json()["type"], "account.balance_low");
    assert_eq!(deliveries().await.len(), 2);
}

async fn failed_attempts_are_retried_with_the_same_message(store: StoreKind) {
    let receiver = Receiver::start().await;
    receiver.answer_next([(500, vec![]), (502, vec![])]);
    let app = spawn_app(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "retried").await;

    let attempts = receiver.wait_for(3).await;
    for attempt in &attempts {
        attempt
            .verify_with(&app.account.account.webhook_secret)
            .unwrap();
        assert_eq!(
            attempt.header("webhook-id"),
            attempts[0].header("webhook-id")
        );
        assert_eq!(
            attempt.body, attempts[0].body,
            "every attempt sends the same event"
        );
    }
    // The waits follow the (shortened) schedule: about 100 ms, then 200 ms.
    let first_gap = attempts[1].at - attempts[0].at;
    let second_gap = attempts[2].at - attempts[1].at;
    assert!(first_gap >= Duration::from_millis(90), "{first_gap:?}");
    assert!(second_gap >= Duration::from_millis(180), "{second_gap:?}");

    let logged = wait_for_delivery_status(&app, &id, "delivered").await;
    assert_eq!(logged.attempts, 3);
    let codes: Vec<_> = logged
        .attempt_log
        .iter()
        .map(|attempt| (attempt.attempt, attempt.record.status_code))
        .collect();
    assert_eq!(codes, [(1, Some(500)), (2, Some(502)), (3, Some(204))]);
    assert!(
        logged.attempt_log[0]
            .record
            .error
            .as_deref()
            .unwrap()
            .contains("500")
    );
    assert!(logged.attempt_log[0].next_attempt_at.is_some());
    assert!(logged.attempt_log[2].next_attempt_at.is_none());
}

async fn a_delivery_fails_after_its_last_attempt(store: StoreKind) {
    let receiver = Receiver::start().await;
    receiver.answer_next((0..10).map(|_| (500, vec![])));
    let app = spawn_app(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "never accepted").await;

    // One attempt, then one per entry of the four-step test schedule.
    let logged = wait_for_delivery_status(&app, &id, "failed").await;
    assert_eq!(logged.attempts, 5);
    assert_eq!(logged.next_attempt_at, None);
    assert!(logged.completed_at.is_some());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(receiver.received().len(), 5);
}

async fn retry_after_is_honoured_within_bounds(store: StoreKind) {
    let receiver = Receiver::start().await;
    // Asks for more than the test bound of 1 s: the wait is cut to 1 s.
    receiver.answer_next([(503, vec![("retry-after", "30".to_owned())])]);
    let app = spawn_app(store).await;
    app.submit_ok(M1_T2V, body_with_webhook("busy receiver", &receiver.url()))
        .await;
    let attempts = receiver.wait_for(2).await;
    let gap = attempts[1].at - attempts[0].at;
    assert!(
        gap >= Duration::from_millis(950) && gap < Duration::from_secs(5),
        "{gap:?}"
    );
}

async fn redirects_are_not_followed_and_count_as_failures(store: StoreKind) {
    let receiver = Receiver::start().await;
    let elsewhere = format!("{}/elsewhere", receiver.base);
    receiver.answer_next([(307, vec![("location", elsewhere)])]);
    let app = spawn_app(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "moved").await;

    let logged = wait_for_delivery_status(&app, &id, "delivered").await;
    assert_eq!(logged.attempts, 2);
    assert_eq!(logged.attempt_log[0].record.status_code, Some(307));
    assert!(
        logged.attempt_log[0]
            .record
            .error
            .as_deref()
            .unwrap()
            .contains("redirect")
    );
    let paths: Vec<String> = receiver
        .received()
        .into_iter()
        .map(|received| received.path)
        .collect();
    assert_eq!(paths, ["/hook", "/hook"]);
}

async fn a_delivery_written_before_a_restart_is_sent_after_it(store: StoreKind) {
    let receiver = Receiver::start().await;
    let mut settings = TestSettings::new(store);
    // No senders: the delivery can only wait in the outbox.
    settings.webhooks.senders = 0;
    let mut app = spawn_app_with(settings).await;
    let id = submit_with_webhook_to(&app, &receiver, "outboxed").await;
    app.wait_for_status(&id, &["succeeded"]).await;
    let waiting = wait_for_delivery_status(&app, &id, "pending").await;
    assert_eq!(waiting.attempts, 0);
    assert!(receiver.received().is_empty());

    app.settings.webhooks.senders = 2;
    let app = app.restart().await;
    let delivery = &receiver.wait_for(1).await[0];
    delivery
        .verify_with(&app.account.account.webhook_secret)
        .unwrap();
    assert_eq!(delivery.header("webhook-id"), waiting.id);
    assert_eq!(delivery.json()["data"]["id"], id.as_str());
    wait_for_delivery_status(&app, &id, "delivered").await;
}

async fn retries_continue_after_a_restart(store: StoreKind) {
    let receiver = Receiver::start().await;
    receiver.answer_next((0..3).map(|_| (500, vec![])));
    let mut settings = TestSettings::new(store);
    settings.webhooks.retry_schedule = vec![Duration::from_millis(300); 6];
    let app = spawn_app_with(settings).await;
    let id = submit_with_webhook_to(&app, &receiver, "flaky receiver").await;
    receiver.wait_for(2).await;

    let restarted_at = Instant::now();
    let app = app.restart().await;
    let attempts = receiver.wait_for(4).await;
    assert!(
        attempts[3].at > restarted_at,
        "the delivering attempt came from the new server"
    );
    for attempt in &attempts {
        attempt
            .verify_with(&app.account.account.webhook_secret)
            .unwrap();
        assert_eq!(
            attempt.header("webhook-id"),
            attempts[0].header("webhook-id")
        );
    }
    let logged = wait_for_delivery_status(&app, &id, "delivered").await;
    assert_eq!(logged.attempts, 4);
}

async fn a_canceled_generation_is_delivered(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app_without_workers(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "never mind").await;
    let canceled = app
        .post_json(&format!("/generations/{id}/cancel"), app.key(), &json!({}))
        .await;
    assert_eq!(canceled.status(), reqwest::StatusCode::OK);

    let event = receiver.wait_for(1).await[0].json();
    assert_eq!(event["type"], "generation.canceled");
    assert_eq!(event["data"], app.generation(&id).await);
    assert_eq!(event["data"]["status"], "canceled");
    assert_eq!(event["data"]["cost"]["amount_usd"], 0.0);
}

async fn a_failed_generation_is_delivered(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app(store).await;
    let submitted = app
        .submit_ok(
            M1_T2V,
            body_with_webhook("breaks [sim:fail]", &receiver.url()),
        )
        .await;
    let id = submitted["id"].as_str().unwrap();

    let event = receiver.wait_for(1).await[0].json();
    assert_eq!(event["type"], "generation.failed");
    assert_eq!(event["data"], app.generation(id).await);
    assert!(event["data"]["error"]["code"].is_string(), "{event}");
}

/// The lease rescuer fails a job after its last attempt without any HTTP
/// request or worker involved; its delivery is written all the same.
async fn the_rescuer_s_failures_write_deliveries(store: StoreKind) {
    let test_store = open_test_store(&store).await;
    let store = test_store.store.as_ref();
    let created = vidgate_server::application::accounts::create_account(
        store,
        "rescued",
        vidgate_core::Micros(1_000_000),
    )
    .await
    .unwrap();
    store
        .generations()
        .submit(NewGeneration {
            id: "gen_lost".into(),
            account_id: created.account.id.clone(),
            api_key_id: created.key_id.clone(),
            model: "vendor_1/model_1".into(),
            endpoint: M1_T2V.into(),
            mode: "text-to-video".into(),
            input: StoredJson::from_value(&quick_body("lost")),
            price: vidgate_core::Micros(100_000),
            official_price: vidgate_core::Micros(120_000),
            webhook_url: Some("https://hooks.example.com/vidgate".into()),
            idempotency: None,
            max_attempts: 1,
            media_binding: None,
            source: Source::Api,
            traceparent: None,
        })
        .await
        .unwrap();
    store
        .queue()
        .claim_next("dead-worker", Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let report = store.queue().rescue_expired_leases().await.unwrap();
    assert_eq!(report.failed, ["gen_lost"]);

    let deliveries = store
        .webhook_log()
        .deliveries(&created.account.id, "gen_lost")
        .await
        .unwrap();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_eq!(deliveries[0].event_type, "generation.failed");
    assert_eq!(deliveries[0].url, "https://hooks.example.com/vidgate");
    assert_eq!(deliveries[0].status.as_str(), "pending");
}

async fn private_receivers_are_refused_without_the_flag(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app_with(TestSettings {
        allow_private_network: false,
        ..TestSettings::new(store)
    })
    .await;
    let port = receiver.base.rsplit(':').next().unwrap().to_owned();
    // An IP literal (checked before sending) and a name that resolves to
    // loopback (checked by the resolver).
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://localhost:{port}/hook"),
    ] {
        let submitted = app
            .submit_ok(M1_T2V, body_with_webhook("internal", &url))
            .await;
        let id = submitted["id"].as_str().unwrap();
        let logged = wait_for_delivery_status(&app, id, "failed").await;
        assert_eq!(logged.attempts, 1, "refused at once, not retried");
        let attempt = &logged.attempt_log[0].record;
        assert_eq!(attempt.status_code, None);
        let error = attempt.error.as_deref().unwrap();
        assert!(error.contains("loopback"), "{url}: {error}");
    }
    assert!(
        receiver.received().is_empty(),
        "nothing reached the receiver"
    );
}

async fn a_rotated_secret_signs_beside_the_previous_one_for_a_day(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app(store).await;
    let previous = app.account.account.webhook_secret.clone();
    let unauthenticated = app.post_without_key("/account/webhook-secret/rotate").await;
    assert_eq!(unauthenticated.status(), reqwest::StatusCode::UNAUTHORIZED);

    let rotated = app
        .post_json("/account/webhook-secret/rotate", app.key(), &json!({}))
        .await;
    assert_eq!(rotated.status(), reqwest::StatusCode::OK);
    let rotated: Value = rotated.json().await.unwrap();
    let current = rotated["webhook_secret"].as_str().unwrap().to_owned();
    assert!(current.starts_with("whsec_") && current != previous);
    let account = app.account_state(&app.account.account.id).await;
    assert_eq!(account.webhook_secret, current);
    assert_eq!(account.previous_webhook_secret.as_deref(), Some(&*previous));
    let expires_at = account.previous_webhook_secret_expires_at.unwrap();
    let day_from_now = vidgate_server::store::now_millis() + 24 * 3600 * 1000;
    assert!((day_from_now - expires_at).abs() < 60_000);
    assert_eq!(
        rotated["previous_secret_expires_at"],
        vidgate_server::http::rfc3339(expires_at)
    );
    // The rotation is the operator's and the dashboard's audited change,
    // naming the key that made it.
    let log = app
        .server
        .store
        .operator()
        .audit_log(None, 10)
        .await
        .unwrap();
    let rotation = log
        .iter()
        .find(|entry| entry.action == "account.rotate_webhook_secret")
        .expect("an audit row for the rotation");
    assert_eq!(rotation.actor, format!("api_key:{}", app.account.key_id));
    assert_eq!(rotation.target, app.account.account.id);

    app.submit_ok(M1_T2V, body_with_webhook("rotated", &receiver.url()))
        .await;
    let delivery = &receiver.wait_for(1).await[0];
    let signatures: Vec<&str> = delivery.header("webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2, "{signatures:?}");
    // Receivers on either secret accept it, each with the reference library
    // checking only its own secret.
    delivery.verify_with(&current).unwrap();
    delivery.verify_with(&previous).unwrap();
    let stranger = vidgate_server::ids::new_webhook_secret();
    assert!(delivery.verify_with(&stranger).is_err());
    // After the grace period only the current secret signs.
    assert_eq!(account.signing_secrets(expires_at - 1).len(), 2);
    assert_eq!(account.signing_secrets(expires_at), [current]);
}

async fn the_delivery_log_shows_every_attempt_and_a_retry_resends_now(store: StoreKind) {
    let receiver = Receiver::start().await;
    receiver.answer_next((0..5).map(|_| (500, vec![])));
    let app = spawn_app(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "logged").await;
    let path = format!("/generations/{id}/webhook-deliveries");
    wait_for_delivery_status(&app, &id, "failed").await;

    let log = app.get_json(&path, app.key()).await;
    assert_eq!(log["object"], "list");
    let delivery = &log["data"][0];
    let delivery_id = delivery["id"].as_str().unwrap().to_owned();
    assert_eq!(log["data"].as_array().unwrap().len(), 1);
    assert_eq!(delivery["object"], "webhook_delivery");
    assert_eq!(delivery["generation_id"], id);
    assert_eq!(delivery["event_type"], "generation.succeeded");
    assert_eq!(delivery["url"], receiver.url());
    assert_eq!(delivery["status"], "failed");
    assert_eq!(delivery["attempt_count"], 5);
    assert!(delivery["next_attempt_at"].is_null());
    let attempts = delivery["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 5);
    for (number, attempt) in (1..).zip(attempts) {
        assert_eq!(attempt["attempt"], number);
        assert_eq!(attempt["status_code"], 500);
        assert!(attempt["error"].as_str().unwrap().contains("HTTP 500"));
        assert!(attempt["started_at"].as_str().unwrap().ends_with('Z'));
        assert!(attempt["duration_ms"].is_u64());
        // Every attempt but the last scheduled another.
        assert_eq!(attempt["next_attempt_at"].is_string(), number < 5);
    }

    // Re-sent now: the receiver, answering 204 again, gets the same message.
    let retry_path = format!("{path}/{delivery_id}/retry");
    let retried = app.post_json(&retry_path, app.key(), &json!({})).await;
    assert_eq!(retried.status(), reqwest::StatusCode::ACCEPTED);
    let retried: Value = retried.json().await.unwrap();
    assert_eq!(retried["status"], "pending");
    assert!(retried["next_attempt_at"].is_string());
    let received = receiver.wait_for(6).await;
    assert_eq!(received[5].header("webhook-id"), delivery_id);
    received[5]
        .verify_with(&app.account.account.webhook_secret)
        .unwrap();
    let logged = wait_for_delivery_status(&app, &id, "delivered").await;
    assert_eq!(logged.attempts, 6);

    // Nothing about other accounts' generations or unknown deliveries.
    let other = app.new_account(1).await;
    let response = app.get(&path, &other.api_key).await;
    assert_error(response, reqwest::StatusCode::NOT_FOUND, "not_found", None).await;
    let response = app.post_json(&retry_path, &other.api_key, &json!({})).await;
    assert_error(response, reqwest::StatusCode::NOT_FOUND, "not_found", None).await;
    let response = app
        .post_json(&format!("{path}/msg_missing/retry"), app.key(), &json!({}))
        .await;
    assert_error(response, reqwest::StatusCode::NOT_FOUND, "not_found", None).await;

    // A generation without a webhook URL has an empty log.
    let quiet = app.submit_ok(M1_T2V, quick_body("quiet")).await;
    let quiet_log: Value = app
        .get(
            &format!(
                "/generations/{}/webhook-deliveries",
                quiet["id"].as_str().unwrap()
            ),
            app.key(),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(quiet_log["data"], json!([]));
}

async fn manual_re_sends_are_bounded_per_delivery_and_per_account(store: StoreKind) {
    let receiver = Receiver::start().await;
    let app = spawn_app(store).await;
    let id = submit_with_webhook_to(&app, &receiver, "bounded").await;
    let path = format!("/generations/{id}/webhook-deliveries");
    wait_for_delivery_status(&app, &id, "delivered").await;
    let log = app.get_json(&path, app.key()).await;
    let retry_path = format!("{path}/{}/retry", log["data"][0]["id"].as_str().unwrap());

    // Five re-sends on request are sent, each once it is delivered again.
    for resend in 1..=5 {
        let retried = app.post_json(&retry_path, app.key(), &json!({})).await;
        assert_eq!(
            retried.status(),
            reqwest::StatusCode::ACCEPTED,
            "re-send {resend}"
        );
        let logged = wait_for_delivery_status(&app, &id, "delivered").await;
        assert_eq!(logged.attempts, 1 + resend);
    }
    // The sixth is refused, and sends nothing.
    let refused = app.post_json(&retry_path, app.key(), &json!({})).await;
    assert_error(refused, reqwest::StatusCode::CONFLICT, "conflict", None).await;
    // Ten requests in all drained the account's re-send bucket; the
    // eleventh is told to wait.
    for _ in 7..=10 {
        let refused = app.post_json(&retry_path, app.key(), &json!({})).await;
        assert_eq!(refused.status(), reqwest::StatusCode::CONFLICT);
    }
    let limited = app.post_json(&retry_path, app.key(), &json!({})).await;
    assert!(limited.headers().contains_key("retry-after"));
    assert_error(
        limited,
        reqwest::StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        None,
    )
    .await;
    assert_eq!(receiver.wait_for(6).await.len(), 6);
    let logged = wait_for_delivery_status(&app, &id, "delivered").await;
    assert_eq!(logged.attempts, 6);
}

/// A receiver that accepts connections and never answers, counting them.
struct Tarpit {
    url: String,
    connections: Arc<Mutex<Vec<tokio::net::TcpStream>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Tarpit {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Tarpit {
    async fn start() -> Tarpit {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let held = connections.clone();
        let server = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                held.lock().unwrap().push(connection);
            }
        });
        Tarpit {
            url: format!("http://{address}/hook"),
            connections,
            server,
        }
    }

    fn connections(&self) -> usize {
        self.connections.lock().unwrap().len()
    }
}

async fn one_account_s_tarpit_does_not_delay_another_account_s_deliveries(store: StoreKind) {
    let tarpit = Tarpit::start().await;
    let receiver = Receiver::start().await;
    let mut settings = TestSettings::new(store);
    // An attempt at the tarpit outlasts the whole test: none of A's first
    // attempts can end, so whatever B receives went out beside them.
    settings.webhooks.attempt_timeout = Duration::from_secs(120);
    settings.webhooks.lease = Duration::from_secs(240);
    settings.webhooks.senders = 4;
    settings.webhooks.max_in_flight_per_account = 2;
    let app = spawn_app_with(settings).await;
    let account_b = app.new_account(100).await;

    // A's deliveries are written first (failing jobs finish at once), more
    // of them than the node has senders.
    let mut a_ids = Vec::new();
    for index in 0..8 {
        let submitted = app
            .submit_ok(
                M1_T2V,
                body_with_webhook(&format!("A {index} [sim:fail]"), &tarpit.url),
            )
            .await;
        a_ids.push(submitted["id"].as_str().unwrap().to_owned());
    }
    for id in &a_ids {
        app.wait_for_status(id, &["failed"]).await;
    }
    for index in 0..4 {
        let submitted = app
            .post_json(
                &format!("/run/{M1_T2V}"),
                &account_b.api_key,
                &body_with_webhook(&format!("B {index} [sim:fail]"), &receiver.url()),
            )
            .await;
        assert_eq!(submitted.status(), reqwest::StatusCode::ACCEPTED);
    }

    // Within `wait_for`'s 30 s, a quarter of one attempt at the tarpit.
    let received = receiver.wait_for(4).await;
    for delivery in &received {
        delivery
            .verify_with(&account_b.account.webhook_secret)
            .unwrap();
        assert_eq!(delivery.json()["type"], "generation.failed");
    }
    // A holds at most its share of the senders, and none of its attempts
    // has ended: B's deliveries did not wait for A's timeouts.
    assert!(
        tarpit.connections() <= 2,
        "{} connections",
        tarpit.connections()
    );
    for id in &a_ids {
        let deliveries = app
            .server
            .store
            .webhook_log()
            .deliveries(&app.account.account.id, id)
            .await
            .unwrap();
        assert_eq!(deliveries.len(), 1);
        assert_eq!(deliveries[0].status.as_str(), "pending");
        assert_eq!(deliveries[0].attempts, 0);
    }
    let in_flight = app
        .server
        .store
        .webhook_log()
        .recent_deliveries(&app.account.account.id, 20)
        .await
        .unwrap()
        .iter()
        .filter(|listed| listed.delivery.in_flight)
        .count();
    assert_eq!(in_flight, 2, "A's share of the senders is in use");
}

on_both_stores!(
    one_account_s_tarpit_does_not_delay_another_account_s_deliveries,
    manual_re_sends_are_bounded_per_delivery_and_per_account,
    a_succeeded_generation_is_delivered_signed_with_its_record,
    the_low_balance_event_is_delivered_signed_once_per_crossing,
    failed_attempts_are_retried_with_the_same_message,
    a_delivery_fails_after_its_last_attempt,
    retry_after_is_honoured_within_bounds,
    redirects_are_not_followed_and_count_as_failures,
    a_delivery_written_before_a_restart_is_sent_after_it,
    retries_continue_after_a_restart,
    a_canceled_generation_is_delivered,
    a_failed_generation_is_delivered,
    the_rescuer_s_failures_write_deliveries,
    private_receivers_are_refused_without_the_flag,
    a_rotated_secret_signs_beside_the_previous_one_for_a_day,
    the_delivery_log_shows_every_attempt_and_a_retry_resends_now,
);
