//! The service under faults and abuse: a database that stops answering, a
//! Redis that goes away, forged client addresses, strangers' media fetches,
//! deleted accounts' files, and logs that must not fill up or leak.

use crate::common;

mod deleted_accounts;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Every line the server logs while the guard lives, from the tasks of the
/// test's own runtime (a `#[tokio::test]` runs them all on its thread).
#[derive(Clone, Default)]
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    fn start() -> (CapturedLogs, tracing::subscriber::DefaultGuard) {
        CapturedLogs::start_at(tracing::Level::INFO)
    }

    fn start_at(level: tracing::Level) -> (CapturedLogs, tracing::subscriber::DefaultGuard) {
        let logs = CapturedLogs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .with_max_level(level)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn lines_containing(&self, text: &str) -> usize {
        let bytes = self.0.lock().unwrap();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains(text))
            .count()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Asserts that exactly `count` lines contain `text`.
    fn assert_lines_containing(&self, text: &str, count: usize) {
        assert_eq!(self.lines_containing(text), count, "{}", self.text());
    }

    /// Waits up to `within` for a line that contains `text`.
    async fn wait_for_line_containing(&self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while self.lines_containing(text) == 0 {
            assert!(Instant::now() < deadline, "{}", self.text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'writer> tracing_subscriber::fmt::MakeWriter<'writer> for CapturedLogs {
    type Writer = CapturedLogs;

    fn make_writer(&'writer self) -> CapturedLogs {
        self.clone()
    }
}

/// A TCP relay in front of PostgreSQL or Redis that a test can cut: it
/// then drops every connection it relays and stops listening, so new ones
/// are refused, as with a stopped server; restored, it listens on the same
/// address again. It counts the connections it accepted.
struct Relay {
    address: SocketAddr,
    target: SocketAddr,
    cuts: watch::Sender<u64>,
    connections: Arc<AtomicUsize>,
    listening: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Relay {
    async fn start(server_url: &str, default_port: u16) -> Relay {
        let url = url::Url::parse(server_url).unwrap();
        let target = tokio::net::lookup_host((
            url.host_str().unwrap().to_owned(),
            url.port().unwrap_or(default_port),
        ))
        .await
        .unwrap()
        .next()
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            address: listener.local_addr().unwrap(),
            target,
            cuts: watch::channel(0).0,
            connections: Arc::new(AtomicUsize::new(0)),
            listening: Mutex::new(None),
        };
        relay.listen(listener);
        relay
    }

    fn listen(&self, listener: TcpListener) {
        let target = self.target;
        let cuts = self.cuts.clone();
        let connections = self.connections.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let mut cut_seen = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_seen.changed() => {}
                    }
                });
            }
        });
        *self.listening.lock().unwrap() = Some(task);
    }

    fn cut(&self) {
        if let Some(task) = self.listening.lock().unwrap().take() {
            task.abort();
        }
        self.cuts.send_modify(|cuts| *cuts += 1);
    }

    async fn restore(&self) {
        // The aborted task lets go of its socket when it is dropped.
        let listener = loop {
            match TcpListener::bind(self.address).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        self.listen(listener);
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// How a test takes the database away: PostgreSQL cut off behind its
/// relay, or SQLite's write lock held by another process (an admin command
/// that does not let go).
enum Outage {
    Postgres(Relay),
    Sqlite(Option<sqlx::SqliteConnection>),
}

impl Outage {
    async fn prepare(store: &StoreKind) -> Outage {
        match store {
            StoreKind::Postgres { server_url } => {
                Outage::Postgres(Relay::start(server_url, 5432).await)
            }
            StoreKind::Sqlite => Outage::Sqlite(None),
        }
    }

    fn proxy(&self) -> Option<SocketAddr> {
        match self {
            Outage::Postgres(relay) => Some(relay.address),
            Outage::Sqlite(_) => None,
        }
    }

    async fn begin(&mut self, app: &TestApp) {
        use sqlx::Connection;
        match self {
            Outage::Postgres(relay) => relay.cut(),
            Outage::Sqlite(holder) => {
                let mut connection = sqlx::SqliteConnection::connect(&app.database.url())
                    .await
                    .unwrap();
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut connection)
                    .await
                    .unwrap();
                *holder = Some(connection);
            }
        }
    }

    async fn end(&mut self) {
        match self {
            Outage::Postgres(relay) => relay.restore().await,
            Outage::Sqlite(holder) => {
                let mut connection = holder.take().unwrap();
                sqlx::query("ROLLBACK")
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        }
    }
}

fn root_url(app: &TestApp, path: &str) -> String {
    format!("{}{path}", app.api_base.trim_end_matches("/api/v1"))
}

/// Submits and times the answer.
async fn timed_submit(app: &TestApp, prompt: &str) -> (reqwest::Response, Duration) {
    let started = Instant::now();
    let response = app.submit(M1_T2V, quick_body(prompt)).await;
    (response, started.elapsed())
}

/// Asserts the answer of a request refused for the database: 503 in the
/// spec's shape, with `Retry-After`, well before sqlx's own 30 s.
async fn assert_refused_for_the_database(response: reqwest::Response, took: Duration) {
    assert!(took < Duration::from_secs(7), "answered after {took:?}");
    let retry_after = response.headers().get("retry-after").cloned();
    let body = assert_model_unavailable(response).await;
    assert_eq!(
        retry_after.as_ref().map(|value| value.to_str().unwrap()),
        Some("2"),
        "{body}"
    );
}

async fn a_database_outage_is_refused_at_once_and_logged_once(store: StoreKind) {
    let (logs, _guard) = CapturedLogs::start();
    let mut outage = Outage::prepare(&store).await;
    let app = spawn_app_with(TestSettings {
        workers: 0,
        database_proxy: outage.proxy(),
        ..TestSettings::new(store.clone())
    })
    .await;
    let before = app.submit_ok(M1_T2V, quick_body("before")).await;
    let generation_path = format!("/generations/{}", before["id"].as_str().unwrap());

    outage.begin(&app).await;
    // Three at once: one waits for the database, the others queue behind
    // it; none waits longer than two connection waits.
    let (first, second, third) = tokio::join!(
        timed_submit(&app, "one"),
        timed_submit(&app, "two"),
        timed_submit(&app, "three"),
    );
    for (response, took) in [first, second, third] {
        assert_refused_for_the_database(response, took).await;
    }
    let started = Instant::now();
    let ready = app
        .client
        .get(root_url(&app, "/readyz"))
        .send()
        .await
        .unwrap();
    let readiness_took = started.elapsed();
    let status = ready.status();
    let readiness: Value = ready.json().await.unwrap();
    match outage {
        Outage::Postgres(_) => {
            // Nothing can be read: reads are refused as fast, those that
            // waited together too (`store/gathered_reads.rs`), and the node
            // tells its load balancer within about a second.
            let timed_read = || async {
                let started = Instant::now();
                let read = app.get(&generation_path, app.key()).await;
                (read, started.elapsed())
            };
            let (first, second, third) = tokio::join!(timed_read(), timed_read(), timed_read());
            for (read, took) in [first, second, third] {
                assert_refused_for_the_database(read, took).await;
            }
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{readiness}");
            assert_eq!(readiness["checks"]["database"], "unreachable");
            assert!(
                readiness_took < Duration::from_millis(1500),
                "{readiness_took:?}"
            );
        }
        Outage::Sqlite(_) => {
            // Another process's write lock leaves reads answering: the
            // node stays ready and serves them.
            let read = app.get(&generation_path, app.key()).await;
            assert_eq!(read.status(), StatusCode::OK);
            assert_eq!(status, StatusCode::OK, "{readiness}");
        }
    }

    outage.end().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let response = app.submit(M1_T2V, quick_body("after")).await;
        if response.status() == StatusCode::ACCEPTED {
            break;
        }
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(Instant::now() < deadline, "the database never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    logs.wait_for_line_containing("the database is reachable again", Duration::from_secs(5))
        .await;
    // One error for the outage and one line for its end, however many
    // requests it refused.
    logs.assert_lines_containing("the database is unreachable", 1);
    logs.assert_lines_containing("response failed", 0);
    logs.assert_lines_containing("the database is reachable again", 1);
    app.server.shutdown().await;
}

/// Behind a trusted proxy that writes `X-Forwarded-For`, a client that adds
/// a `Forwarded` header of its own, different on every request, is still
/// one client: its requests count against the address the proxy wrote.
#[tokio::test]
async fn a_forged_forwarded_header_changes_no_client_address() {
    let app = spawn_app_with(TestSettings {
        public_rate_limit: vidgate_server::limits::PublicRateLimit {
            per_second: 1,
            burst: 5,
        },
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    let mut statuses = Vec::new();
    for request in 0..10 {
        let response = app
            .client
            .get(app.url("/models"))
            .header("x-forwarded-for", "198.51.100.250, 203.0.113.7")
            .header("forwarded", format!("for=198.51.100.{request}"))
            .send()
            .await
            .unwrap();
        statuses.push(response.status());
    }
    let admitted = statuses
        .iter()
        .filter(|status| **status == StatusCode::OK)
        .count();
    assert_eq!(admitted, 5, "{statuses:?}");
    // Another address the proxy writes is another client.
    let other = app
        .client
        .get(app.url("/models"))
        .header("x-forwarded-for", "203.0.113.8")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    app.server.shutdown().await;
}

/// With Redis gone, the node limits on its own buckets without asking
/// Redis on every request (each would wait for a dead server), asks it
/// again in the background, and says when it is back.
#[tokio::test]
async fn a_redis_outage_is_retried_in_the_background_not_on_every_request() {
    let Ok(redis_url) = std::env::var("VIDGATE_TEST_REDIS_URL") else {
        eprintln!(
            "skipping a_redis_outage_is_retried_in_the_background: set VIDGATE_TEST_REDIS_URL"
        );
        return;
    };
    let (logs, _guard) = CapturedLogs::start();
    let relay = Relay::start(&redis_url, 6379).await;
    let app = spawn_app_with(TestSettings {
        redis_url: Some(format!("redis://{}", relay.address)),
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    assert_eq!(
        app.get("/account", app.key()).await.status(),
        StatusCode::OK
    );

    relay.cut();
    let connections_before = relay.connections();
    for _ in 0..15 {
        let response = app.get("/account", app.key()).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-ratelimit-limit"], "20");
    }
    // The first failure, its reconnect, and at most a background check
    // or two; not one attempt per request.
    let attempts = relay.connections() - connections_before;
    assert!(
        attempts <= 5,
        "{attempts} connection attempts for 15 requests"
    );

    relay.restore().await;
    logs.wait_for_line_containing("Redis answers again", Duration::from_secs(10))
        .await;
    logs.assert_lines_containing("Redis is unreachable", 1);
    assert_eq!(
        app.get("/account", app.key()).await.status(),
        StatusCode::OK
    );
    app.server.shutdown().await;
}

/// Anonymous quotes from many addresses, each naming a server that sends a
/// byte a second, take every fetch slot anyone may take; a paying
/// customer's submit with an image still gets one of the slots kept for
/// accounts, and is accepted at once.
async fn a_flood_of_anonymous_quotes_leaves_keyed_submits_unaffected(store: StoreKind) {
    let trickle = trickling_server().await;
    let (pictures, _) = picture_server().await;
    let app = spawn_app_with(TestSettings {
        workers: 0,
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        ..TestSettings::new(store)
    })
    .await;
    let flood: Vec<_> = (0..16)
        .map(|stranger| {
            let request = app
                .client
                .post(app.url("/quote/vendor_1/model_1/reference-to-video"))
                .header("x-forwarded-for", format!("198.51.100.{stranger}"))
                .json(&serde_json::json!({
                    "prompt": "p",
                    "reference_video_urls": [format!("{trickle}/clip-{stranger}.mp4")],
                }));
            tokio::spawn(async move { request.send().await.map(|response| response.status()) })
        })
        .collect();
    // Until the flood holds its slots.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for customer in 0..3 {
        let response = app
            .submit(
                "vendor_1/model_1/image-to-video",
                serde_json::json!({
                    "prompt": "the picture comes alive",
                    "image_url": format!("{pictures}/card-{customer}.png"),
                    "duration": 2,
                    "resolution": "480p",
                    "generate_audio": false,
                }),
            )
            .await;
        let status = response.status();
        let body = response.text().await.unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    for quote in flood {
        quote.abort();
    }
    app.server.shutdown().await;
}

/// A provider webhook that declares a body over the limit is refused at
/// once, without waiting for a byte of it.
#[tokio::test]
async fn a_provider_webhook_declared_too_large_is_refused_before_its_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app(StoreKind::Sqlite).await;
    let address = app
        .api_base
        .trim_start_matches("http://")
        .trim_end_matches("/api/v1");
    let mut connection = TcpStream::connect(address).await.unwrap();
    connection
        .write_all(
            b"POST /internal/providers/vendor_1/model_1/gen_0192f3b4c5d6e7f8a9b0c1d2e3f4a5b6/t HTTP/1.1\r\n\
              host: vidgate\r\ncontent-type: application/json\r\n\
              content-length: 100000000000\r\n\r\n{",
        )
        .await
        .unwrap();
    let mut answer = vec![0_u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), connection.read(&mut answer))
        .await
        .expect("answered without the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    app.server.shutdown().await;
}

/// Forged provider webhooks are refused, and the log says so once per
/// interval, not once each: a stranger cannot fill the log.
#[tokio::test]
async fn forged_provider_webhooks_cannot_fill_the_log() {
    let (logs, _guard) = CapturedLogs::start();
    let app = spawn_app(StoreKind::Sqlite).await;
    for attempt in 0..30 {
        let response = app
            .client
            .post(root_url(
                &app,
                &format!("/internal/providers/vendor_1/model_1/gen_{attempt:032x}/not-the-secret"),
            ))
            .json(&serde_json::json!({ "status": "succeeded" }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
    let lines = logs.lines_containing("a provider webhook was refused");
    assert!((1..=2).contains(&lines), "{lines} lines: {}", logs.text());
    app.server.shutdown().await;
}

/// Issue 38, item 7: while a provider's webhook keys cannot be read, every
/// signed webhook is answered 502 with a message of vidgate's (not the
/// provider's error text), and the log gets at most a line per interval,
/// not an ERROR for each: anyone can send them.
#[tokio::test]
async fn webhooks_refused_while_the_providers_keys_are_unreadable_cannot_fill_the_log() {
    use crate::fake_providers::{FakeProviders, Provider, example_backends};
    let (logs, _guard) = CapturedLogs::start();
    let fake = FakeProviders::start().await;
    fake.switches(|switches| switches.drop_webhooks = true);
    let port = free_port();
    let app = spawn_app_with(TestSettings {
        backends: example_backends(&fake, Provider::FAL, |_| {}),
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        public_url: Some(format!("http://127.0.0.1:{port}")),
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    app.submit_ok(M1_T2V, quick_body("a kite [fake:never-start]"))
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let url = loop {
        if let Some(url) = fake
            .jobs_at(Provider::FAL)
            .pop()
            .and_then(|job| job.webhook_url)
        {
            break url;
        }
        assert!(Instant::now() < deadline, "no fal request was sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    fake.switches(|switches| switches.down = true);
    for _ in 0..20 {
        let answer = app
            .client
            .post(&url)
            .header(
                "x-fal-webhook-request-id",
                "00000000-0000-4000-8000-000000000001",
            )
            .header("x-fal-webhook-user-id", "someone")
            .header("x-fal-webhook-timestamp", "1800000000")
            .header("x-fal-webhook-signature", "00")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_GATEWAY);
        let body: Value = answer.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(!message.contains("503"), "{message}");
    }
    logs.assert_lines_containing("response failed", 0);
    assert!(
        logs.lines_containing("a provider webhook was refused") <= 2,
        "{}",
        logs.text()
    );
    app.server.shutdown().await;
}

/// Issue 38, item 7: a provider webhook's path cannot write a line of its
/// own into the log. A generation id that decodes to a line break and a
/// forged log line is refused without being looked up, and whatever is
/// logged about it stays on one line.
#[tokio::test]
async fn a_provider_webhook_path_cannot_forge_a_log_line() {
    let (logs, _guard) = CapturedLogs::start_at(tracing::Level::DEBUG);
    let app = spawn_app(StoreKind::Sqlite).await;
    let forged = "gen_0192f3b4c5d6e7f8a9b0c1d2e3f4a5b6%0A2026-11-28T00:00:00Z%20ERROR%20vidgate:%20FORGED-BY-A-STRANGER";
    for path in [
        format!("/internal/providers/vendor_1/model_1/{forged}"),
        format!("/internal/providers/vendor_1/model_1/{forged}/a-token"),
    ] {
        let response = app
            .client
            .post(root_url(&app, &path))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let text = logs.text();
    for line in text
        .lines()
        .filter(|line| line.contains("FORGED-BY-A-STRANGER"))
    {
        assert!(
            !line.trim_start().starts_with("2026-11-28T00:00:00Z"),
            "a forged line: {text}"
        );
    }
    app.server.shutdown().await;
}

/// Request logs show a file's kind, never its name, which is the
/// capability that lets anyone holding the URL fetch it.
#[tokio::test]
async fn request_logs_never_show_a_files_capability() {
    let (logs, _guard) = CapturedLogs::start_at(tracing::Level::DEBUG);
    let app = spawn_app(StoreKind::Sqlite).await;
    let upload_url = app.upload_png().await["url"].as_str().unwrap().to_owned();
    let response = app.client.get(&upload_url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (_, name) = upload_url.split_once("/files/").unwrap();
    let secret = name.split('/').nth(1).unwrap();
    assert!(
        logs.lines_containing("/api/v1/files/uploads/[redacted]") >= 1,
        "{}",
        logs.text()
    );
    logs.assert_lines_containing(secret, 0);
    app.server.shutdown().await;
}

/// Behind https the sign-in form's CSRF cookie is `__Host-vg_csrf`, which a
/// browser takes only from this host over https: a `vg_csrf` cookie planted
/// by a sibling subdomain or a plain-HTTP answer, with a form token to
/// match, is refused.
#[tokio::test]
async fn behind_https_a_planted_sign_in_csrf_cookie_is_refused() {
    let app = spawn_app_with(TestSettings {
        public_url: Some("https://vidgate.example".into()),
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    let base = format!("http://{}", app.server.local_addr.unwrap());
    let page = app
        .client
        .get(format!("{base}/dashboard/sign-in"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let set_cookie = page.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(set_cookie.starts_with("__Host-vg_csrf="), "{set_cookie}");
    assert!(
        set_cookie.contains("; Secure") && set_cookie.contains("Path=/"),
        "{set_cookie}"
    );
    assert!(!set_cookie.contains("Domain"), "{set_cookie}");
    let issued = set_cookie
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("__Host-vg_csrf=")
        .to_owned();
    let planted = sign_in_with_a_wrong_password(&app, "vg_csrf=planted", "planted").await;
    assert_eq!(planted.status(), StatusCode::FORBIDDEN);
    // The cookie this host set passes the check (and the wrong password is
    // then refused as such).
    let genuine =
        sign_in_with_a_wrong_password(&app, &format!("__Host-vg_csrf={issued}"), &issued).await;
    assert_ne!(genuine.status(), StatusCode::FORBIDDEN);
    app.server.shutdown().await;
}

/// The sign-in form's CSRF cookie must be one this service issued: a
/// cookie planted with a value of the planter's choosing, and a form token
/// to match it, is refused, even over plain HTTP.
#[tokio::test]
async fn a_sign_in_csrf_token_the_service_did_not_issue_is_refused() {
    let app = spawn_app(StoreKind::Sqlite).await;
    let base = format!("http://{}", app.server.local_addr.unwrap());
    for planted in ["planted", "a.4102444800000.signature"] {
        let response =
            sign_in_with_a_wrong_password(&app, &format!("vg_csrf={planted}"), planted).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{planted}");
    }
    let page = app
        .client
        .get(format!("{base}/dashboard/sign-in"))
        .send()
        .await
        .unwrap();
    let issued = page.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("vg_csrf=")
        .to_owned();
    let genuine = sign_in_with_a_wrong_password(&app, &format!("vg_csrf={issued}"), &issued).await;
    assert_ne!(genuine.status(), StatusCode::FORBIDDEN);
    app.server.shutdown().await;
}

/// Posts the dashboard's sign-in form for an unknown user with the CSRF
/// `cookie` and form `token` given; the answer.
async fn sign_in_with_a_wrong_password(
    app: &TestApp,
    cookie: &str,
    token: &str,
) -> reqwest::Response {
    let base = format!("http://{}", app.server.local_addr.unwrap());
    app.client
        .post(format!("{base}/dashboard/sign-in"))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        // Tokens are base64url, which needs no escaping in a form.
        .body(format!(
            "email=nobody%40example.com&password=wrong&csrf_token={token}"
        ))
        .send()
        .await
        .unwrap()
}

on_both_stores!(
    a_database_outage_is_refused_at_once_and_logged_once,
    a_flood_of_anonymous_quotes_leaves_keyed_submits_unaffected,
);
