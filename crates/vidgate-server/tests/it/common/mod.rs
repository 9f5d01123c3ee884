//! The test harness: `spawn_app(store)` starts the real server on port 0
//! with a fresh data directory and a fresh database of the given kind, and
//! helpers drive it over real HTTP. `on_both_stores!` runs each test against
//! SQLite and against PostgreSQL.

mod media_servers;

use std::sync::Arc;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::{Client, Response, StatusCode};
use serde_json::{Value, json};
use tempfile::TempDir;
use vidgate_core::Micros;
use vidgate_server::application::accounts::{self, CreatedAccount};
use vidgate_server::backend::BackendsConfig;
use vidgate_server::operator_actions;
use vidgate_server::storage::StorageConfig;
use vidgate_server::store::{
    self, Account, AccountLimits, NewAccount, NewGeneration, Source, Store, StoredJson,
};
use vidgate_server::webhook_senders::WebhookSettings;
use vidgate_server::{RunningServer, ServerOptions};
use vidgate_test_support::test_database;

pub use media_servers::{picture_server, trickling_server};
pub use test_database::PostgresTestDatabase;

/// Which database a test runs against.
#[derive(Debug, Clone)]
pub enum StoreKind {
    Sqlite,
    /// A fresh database is created per test on this server.
    Postgres {
        server_url: String,
    },
}

impl StoreKind {
    /// PostgreSQL when `VIDGATE_TEST_POSTGRES_URL` is set; otherwise `None`,
    /// after a notice that the test's PostgreSQL variant is skipped.
    pub fn postgres(test_name: &str) -> Option<StoreKind> {
        test_database::postgres_server_url(test_name)
            .map(|server_url| StoreKind::Postgres { server_url })
    }
}

/// Runs each named `async fn(StoreKind)` as two tests, `sqlite::NAME` and
/// `postgres::NAME` (the latter skipped without a PostgreSQL server).
macro_rules! on_both_stores {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test($crate::common::StoreKind::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $test() {
                    if let Some(store) = $crate::common::StoreKind::postgres(stringify!($test)) {
                        super::$test(store).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use on_both_stores;

/// A database that exists for one test and is removed after it.
pub enum TestDatabase {
    Sqlite(TempDir),
    Postgres(PostgresTestDatabase),
}

impl TestDatabase {
    pub async fn create(kind: &StoreKind) -> TestDatabase {
        match kind {
            StoreKind::Sqlite => {
                TestDatabase::Sqlite(tempfile::tempdir().expect("temporary directory"))
            }
            StoreKind::Postgres { server_url } => {
                TestDatabase::Postgres(PostgresTestDatabase::create(server_url).await)
            }
        }
    }

    pub fn url(&self) -> String {
        match self {
            TestDatabase::Sqlite(directory) => format!(
                "sqlite://{}",
                directory.path().join("test.sqlite").display()
            ),
            TestDatabase::Postgres(database) => database.url.clone(),
        }
    }
}

/// A store on a fresh database, for tests below the HTTP layer; the
/// database lives as long as the store.
pub struct TestStore {
    pub store: Arc<Store>,
    pub database: TestDatabase,
}

pub async fn open_test_store(kind: &StoreKind) -> TestStore {
    let database = TestDatabase::create(kind).await;
    let store = store::open(&database.url()).await.expect("the store opens");
    TestStore { store, database }
}

/// Creates the account `id` (named after itself) straight in the store,
/// with `credit` and the default limits: for tests below the HTTP layer.
pub async fn create_store_account(store: &Store, id: &str, credit: Micros) {
    store
        .accounts()
        .create(NewAccount {
            id: id.into(),
            name: id.into(),
            initial_credit: credit,
            webhook_secret: "whsec_test".into(),
        })
        .await
        .unwrap();
}

/// A text-to-video generation of `account_id` on `model` at `price`, with
/// three attempts, as a test below the HTTP layer submits it.
pub fn new_test_generation(
    id: &str,
    account_id: &str,
    model: &str,
    price: Micros,
) -> NewGeneration {
    NewGeneration {
        id: id.into(),
        account_id: account_id.into(),
        api_key_id: "key".into(),
        model: model.into(),
        endpoint: format!("{model}/text-to-video"),
        mode: "text-to-video".into(),
        input: StoredJson::from_value(&json!({ "prompt": id })),
        price,
        official_price: price,
        webhook_url: None,
        idempotency: None,
        max_attempts: 3,
        media_binding: None,
        source: Source::Api,
        traceparent: None,
    }
}

pub struct TestApp {
    pub server: RunningServer,
    pub api_base: String,
    pub client: Client,
    /// An account with $100 of credit and its first key.
    pub account: CreatedAccount,
    pub data_dir: TempDir,
    pub database: TestDatabase,
    /// What the server was started with, so `restart` can start it again.
    pub settings: TestSettings,
}

#[derive(Clone)]
pub struct TestSettings {
    pub store: StoreKind,
    pub workers: usize,
    /// The hosted pool's bound (`--hosted-jobs`); 0 runs no pool.
    pub hosted_jobs: usize,
    pub lease: Duration,
    pub backends: BackendsConfig,
    /// On by default: test media and webhook receivers listen on 127.0.0.1.
    pub allow_private_network: bool,
    pub webhooks: WebhookSettings,
    /// Local disk by default; the S3 tests point it at a moto bucket.
    pub storage: StorageConfig,
    /// Private addresses media may come from without `allow_private_network`.
    pub trusted_media_addresses: Vec<std::net::IpAddr>,
    /// Port 0 by default; a test that must know its address first picks one.
    pub listen: SocketAddr,
    /// The address in clip URLs and Cog webhook URLs, if not the listener's.
    pub public_url: Option<String>,
    pub cog_callback_url: Option<String>,
    /// Generous by default, so suites that call the public endpoints often
    /// are not limited; the fair-use tests set their own.
    pub public_rate_limit: vidgate_server::limits::PublicRateLimit,
    /// The listener's timeouts and connection cap (the defaults of `serve`).
    pub http: vidgate_server::limits::HttpLimits,
    /// Peers whose forwarded client addresses are believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The operator API's token; off by default, as in `vidgate serve`.
    pub operator_token: Option<String>,
    /// The metrics listener; off by default, as in `vidgate serve`.
    pub metrics_listen: Option<SocketAddr>,
    /// How long files are kept (30 days by default, as in `vidgate serve`).
    pub retention: vidgate_server::retention::RetentionSettings,
    /// Rate-limit buckets shared in this Redis; this node's own by default.
    pub redis_url: Option<String>,
    /// PostgreSQL reached through this address (a test's proxy, which can
    /// cut it off) instead of directly.
    pub database_proxy: Option<SocketAddr>,
    /// Caps on open waits and event streams (the defaults of `serve`).
    pub live_status: vidgate_server::live_status::LiveStatusLimits,
    /// The embedded catalog by default; a test of what another catalog
    /// sells sets its own.
    pub catalog: vidgate_core::Catalog,
    /// Credit sold through Stripe; off by default, as in `vidgate serve`.
    pub stripe: Option<vidgate_server::stripe::StripeSettings>,
}

impl TestSettings {
    pub fn new(store: StoreKind) -> TestSettings {
        TestSettings {
            store,
            workers: 2,
            hosted_jobs: 5_000,
            lease: Duration::from_secs(30),
            backends: BackendsConfig::builtin(true),
            allow_private_network: true,
            webhooks: fast_webhook_settings(),
            storage: StorageConfig::Local,
            trusted_media_addresses: Vec::new(),
            listen: "127.0.0.1:0".parse().unwrap(),
            public_url: None,
            cog_callback_url: None,
            public_rate_limit: vidgate_server::limits::PublicRateLimit {
                per_second: 10_000,
                burst: 10_000,
            },
            http: vidgate_server::limits::HttpLimits::default(),
            trusted_proxies: Vec::new(),
            operator_token: None,
            metrics_listen: None,
            retention: vidgate_server::retention::RetentionSettings::default(),
            redis_url: None,
            database_proxy: None,
            live_status: vidgate_server::live_status::LiveStatusLimits::default(),
            catalog: vidgate_core::Catalog::embedded(),
            stripe: None,
        }
    }
}

/// Webhook retries in tenths of a second instead of hours, so a test sees a
/// delivery through all its attempts.
pub fn fast_webhook_settings() -> WebhookSettings {
    WebhookSettings {
        retry_schedule: [100, 200, 300, 400].map(Duration::from_millis).to_vec(),
        attempt_timeout: Duration::from_secs(2),
        max_retry_after: Duration::from_secs(1),
        lease: Duration::from_secs(5),
        poll_interval: Duration::from_millis(50),
        senders: 2,
        max_in_flight_per_account: 2,
    }
}

pub async fn spawn_app(store: StoreKind) -> TestApp {
    spawn_app_with(TestSettings::new(store)).await
}

/// A server whose jobs stay queued: no workers or hosted pool claim them.
pub async fn spawn_app_without_workers(store: StoreKind) -> TestApp {
    spawn_app_with(TestSettings {
        workers: 0,
        hosted_jobs: 0,
        ..TestSettings::new(store)
    })
    .await
}

pub async fn spawn_app_with(settings: TestSettings) -> TestApp {
    let data_dir = tempfile::tempdir().expect("temporary data directory");
    let database = TestDatabase::create(&settings.store).await;
    let server = start_server(&settings, &data_dir, &database).await;
    let account = accounts::create_account(server.store.as_ref(), "test", Micros(100_000_000))
        .await
        .expect("account");
    TestApp {
        api_base: server.api_base.clone(),
        server,
        client: Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        account,
        data_dir,
        database,
        settings,
    }
}

async fn start_server(
    settings: &TestSettings,
    data_dir: &TempDir,
    database: &TestDatabase,
) -> RunningServer {
    let mut options = ServerOptions::new(settings.listen, data_dir.path().to_path_buf());
    options.public_url = settings.public_url.clone();
    options.cog_callback_url = settings.cog_callback_url.clone();
    options.database_url = Some(match settings.database_proxy {
        Some(proxy) => {
            let mut url = url::Url::parse(&database.url()).expect("a database URL");
            url.set_ip_host(proxy.ip()).expect("a host");
            url.set_port(Some(proxy.port())).expect("a port");
            url.to_string()
        }
        None => database.url(),
    });
    options.queue.workers = settings.workers;
    options.queue.hosted_jobs = settings.hosted_jobs;
    options.http = settings.http;
    options.trusted_proxies = settings.trusted_proxies.clone();
    options.queue.lease = settings.lease;
    options.queue.idle_poll = Duration::from_millis(100);
    options.queue.rescue_interval = Duration::from_millis(200);
    options.backends = settings.backends.clone();
    options.catalog = settings.catalog.clone();
    options.allow_private_network = settings.allow_private_network;
    options.webhooks = settings.webhooks.clone();
    options.storage = settings.storage.clone();
    options.trusted_media_addresses = settings.trusted_media_addresses.clone();
    options.public_rate_limit = settings.public_rate_limit;
    options.operator_token = settings.operator_token.clone();
    options.metrics_listen = settings.metrics_listen;
    options.retention = settings.retention;
    options.redis_url = settings.redis_url.clone();
    options.live_status = settings.live_status;
    options.stripe = settings.stripe.clone();
    vidgate_server::start(options).await.expect("server starts")
}

/// A port nobody listens on now, for a server that must be told its port
/// before it starts (or whose address another must know first).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A second node on a `TestApp`'s database.
pub struct AnotherNode {
    pub server: RunningServer,
    _data_dir: TempDir,
}

impl AnotherNode {
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

impl TestApp {
    /// Stops the server as `vidgate serve` does on SIGTERM and starts a new
    /// one on the same database and data directory (on a new port).
    pub async fn restart(self) -> TestApp {
        self.server.shutdown().await;
        let server = start_server(&self.settings, &self.data_dir, &self.database).await;
        TestApp {
            api_base: server.api_base.clone(),
            server,
            ..self
        }
    }

    /// Starts another node on this app's database (with a data directory
    /// of its own), as a second `vidgate serve` process would run.
    pub async fn start_another_node(&self, settings: TestSettings) -> AnotherNode {
        let data_dir = tempfile::tempdir().expect("temporary data directory");
        let server = start_server(&settings, &data_dir, &self.database).await;
        AnotherNode {
            server,
            _data_dir: data_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api_base)
    }

    pub fn key(&self) -> &str {
        &self.account.api_key
    }

    pub async fn new_account(&self, credit_usd: i64) -> CreatedAccount {
        accounts::create_account(
            self.server.store.as_ref(),
            "other",
            Micros(credit_usd * 1_000_000),
        )
        .await
        .unwrap()
    }

    pub async fn account_state(&self, account_id: &str) -> Account {
        self.server
            .store
            .accounts()
            .get(account_id)
            .await
            .unwrap()
            .unwrap()
    }

    pub async fn get(&self, path: &str, key: &str) -> Response {
        self.client
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    /// What the node's metrics listener serves (the app must have one).
    pub async fn metrics_text(&self) -> String {
        let metrics_addr = self.server.metrics_addr.expect("a metrics listener");
        let url = format!("http://{metrics_addr}/metrics");
        let response = self.client.get(url).send().await.unwrap();
        response.text().await.unwrap()
    }

    /// GETs `path` with no key, as anyone on the internet may.
    pub async fn get_without_key(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    /// POSTs to `path` with no key and no body.
    pub async fn post_without_key(&self, path: &str) -> Response {
        self.client.post(self.url(path)).send().await.unwrap()
    }

    /// GETs `url` (one of our `/files/` URLs) with a `Range` header.
    pub async fn get_range(&self, url: &str, range: &str) -> Response {
        self.client
            .get(url)
            .header(reqwest::header::RANGE, range)
            .send()
            .await
            .unwrap()
    }

    /// GETs `path` with `key` and reads the answer as JSON, whatever its
    /// status.
    pub async fn get_json(&self, path: &str, key: &str) -> Value {
        self.get(path, key).await.json().await.unwrap()
    }

    pub async fn post_json(&self, path: &str, key: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Posts to a generation record's own `urls.cancel`, as a client would.
    pub async fn cancel(&self, generation: &Value, key: &str) -> Response {
        let cancel_url = generation["urls"]["cancel"].as_str().expect("urls.cancel");
        self.client
            .post(cancel_url)
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    pub async fn submit(&self, endpoint: &str, body: Value) -> Response {
        self.post_json(&format!("/run/{endpoint}"), self.key(), &body)
            .await
    }

    /// Submits a quick M1 text-to-video request with `key` (another
    /// account's), whatever the answer.
    pub async fn submit_quick_with_key(&self, key: &str, prompt: &str) -> Response {
        self.post_json(&format!("/run/{M1_T2V}"), key, &quick_body(prompt))
            .await
    }

    /// Submits and asserts acceptance, returning the generation record.
    pub async fn submit_ok(&self, endpoint: &str, body: Value) -> Value {
        let response = self.submit(endpoint, body).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        response.json().await.unwrap()
    }

    pub async fn generation(&self, id: &str) -> Value {
        let response = self.get(&format!("/generations/{id}"), self.key()).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Polls until the generation reaches one of `statuses`.
    pub async fn wait_for_status(&self, id: &str, statuses: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let generation = self.generation(id).await;
            if statuses.contains(&generation["status"].as_str().unwrap()) {
                return generation;
            }
            assert!(
                Instant::now() < deadline,
                "{id} stuck in {}",
                generation["status"]
            );
            // Under the key's refill rate of 10 per second, so polling never
            // trips the rate limit the tests also exercise.
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Submits with the test account's key, waits until the generation is
    /// final and asserts that it succeeded; the final record.
    pub async fn run_to_success(&self, endpoint: &str, body: Value) -> Value {
        let submitted = self.submit_ok(endpoint, body).await;
        let done = self
            .wait_for_status(submitted["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{done}");
        done
    }

    /// The bytes that `url` serves, fetched without a key (our `/files/`
    /// URLs are signed, and media hosts are public).
    pub async fn download(&self, url: &str) -> Vec<u8> {
        let response = self.client.get(url).send().await.unwrap();
        response.bytes().await.unwrap().to_vec()
    }

    /// Uploads a small PNG with the test account's key; its upload record.
    pub async fn upload_png(&self) -> Value {
        self.upload_png_of([10, 200, 40]).await
    }

    /// Uploads `png_of(color)`; its upload record.
    pub async fn upload_png_of(&self, color: [u8; 3]) -> Value {
        self.upload(png_of(color), "card.png", "image/png").await
    }

    /// Uploads a silent MP4 of `seconds` from the local engine; its upload
    /// record.
    pub async fn upload_mp4(&self, seconds: u32) -> Value {
        let request = vidgate_engine::RenderRequest {
            width: 320,
            height: 240,
            duration_s: seconds,
            fps: 24,
            seed: 3,
            prompt: "reference".to_owned(),
            ..vidgate_engine::RenderRequest::default()
        };
        let mp4 = vidgate_engine::render(
            &request,
            &|_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap()
        .mp4;
        self.upload(mp4, "reference.mp4", "video/mp4").await
    }

    /// Uploads a WAV tone of `seconds`; its upload record.
    pub async fn upload_wav(&self, seconds: u32) -> Value {
        self.upload(wav_tone(seconds), "reference.wav", "audio/wav")
            .await
    }

    /// Uploads `bytes` with the test account's key; its upload record.
    pub async fn upload(&self, bytes: Vec<u8>, name: &str, mime: &str) -> Value {
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.to_owned())
            .mime_str(mime)
            .unwrap();
        let response = self
            .client
            .post(self.url("/uploads"))
            .bearer_auth(self.key())
            .multipart(reqwest::multipart::Form::new().part("file", part))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    /// Revokes the app's own key through the node's store and asserts that
    /// the node refuses it on the very next request.
    pub async fn revoke_own_key_and_see_it_refused(&self) {
        revoke_key(&self.server.store, &self.account.key_id).await;
        let revoked = self.get("/account", self.key()).await;
        assert_error(revoked, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
    }

    /// Asserts that one of our `/files/` URLs answers 410 Gone with the
    /// standard error body.
    pub async fn assert_gone(&self, url: &str) {
        let response = self.client.get(url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::GONE, "{url}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "gone", "{body}");
        assert_error_message_contains(&body, "expired");
    }

    /// The file on local disk behind one of our `/files/` URLs.
    pub fn local_file(&self, url: &str) -> std::path::PathBuf {
        let (_, relative_path) = url.split_once("/files/").unwrap();
        self.data_dir.path().join("files").join(relative_path)
    }

    /// The price the quote answers for `body` at `endpoint`.
    pub async fn quoted_price(&self, endpoint: &str, body: &Value) -> Micros {
        let quoted: Value = self
            .client
            .post(self.url(&format!("/quote/{endpoint}")))
            .json(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // Prices are whole cents, so the dollars convert exactly.
        Micros((quoted["cost"]["amount_usd"].as_f64().unwrap() * 1_000_000.0).round() as i64)
    }

    /// Asserts the ledger invariant for an account: every credited dollar is
    /// exactly spendable, held or captured, and nothing is negative.
    pub async fn assert_ledger_invariant(&self, account_id: &str) {
        let account = self.account_state(account_id).await;
        assert!(account.balance.0 >= 0 && account.held.0 >= 0 && account.captured.0 >= 0);
        assert_eq!(
            account.credited,
            account.balance + account.held + account.captured,
            "{account:?}"
        );
        let entries = self
            .server
            .store
            .ledger()
            .entries(account_id)
            .await
            .unwrap();
        let sum = |kind: &str| -> i64 {
            entries
                .iter()
                .filter(|entry| entry.kind == kind)
                .map(|entry| entry.amount.0)
                .sum()
        };
        // `credited` is the net credit: what operators took back is out.
        // What Stripe took back beyond the balance is owed as debt, which
        // the next money in pays before it reaches `credited`.
        assert!(account.debt.0 >= 0);
        assert_eq!(
            sum("credit") - sum("debit"),
            account.credited.0 - account.debt.0
        );
        assert_eq!(sum("capture"), account.captured.0);
        assert_eq!(
            sum("hold") - sum("capture") - sum("release"),
            account.held.0
        );
    }
}

/// Asserts an error response's status, code and param.
pub async fn assert_error(
    response: Response,
    status: StatusCode,
    code: &str,
    param: Option<&str>,
) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| !message.is_empty())
    );
    match param {
        Some(param) => assert_eq!(body["error"]["param"], param, "{body}"),
        None => assert!(body["error"].get("param").is_none(), "{body}"),
    }
    body
}

/// Asserts that a request was refused with 400 `invalid_request` naming
/// `param`, and returns the error body.
pub async fn assert_invalid_request(response: Response, param: &str) -> Value {
    assert_error(
        response,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        Some(param),
    )
    .await
}

/// Asserts that a submit was refused with 503 `model_unavailable`, and
/// returns the error body.
pub async fn assert_model_unavailable(response: Response) -> Value {
    assert_error(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "model_unavailable",
        None,
    )
    .await
}

/// Asserts that a request was refused with 402 `insufficient_balance`, and
/// returns the error body.
pub async fn assert_insufficient_balance(response: Response) -> Value {
    assert_error(
        response,
        StatusCode::PAYMENT_REQUIRED,
        "insufficient_balance",
        None,
    )
    .await
}

/// Asserts that an error body's message says `fragment`.
pub fn assert_error_message_contains(body: &Value, fragment: &str) {
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(fragment),
        "{body}"
    );
}

/// A quick, valid text-to-video body for M1.
pub fn quick_body(prompt: &str) -> Value {
    json!({ "prompt": prompt, "duration": 2, "resolution": "480p", "generate_audio": false })
}

pub const M1_T2V: &str = "vendor_1/model_1/text-to-video";

/// A 320×240 PNG of one colour.
pub fn png(colour: [u8; 3]) -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(320, 240, image::Rgb(colour))
        .write_to(&mut bytes, image::ImageFormat::Png)
        .unwrap();
    bytes.into_inner()
}

/// A small PNG of one color.
pub fn png_of(color: [u8; 3]) -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(64, 48, image::Rgb(color))
        .write_to(&mut bytes, image::ImageFormat::Png)
        .unwrap();
    bytes.into_inner()
}

/// A 16-bit mono PCM WAV of a 330 Hz tone lasting `seconds`.
pub fn wav_tone(seconds: u32) -> Vec<u8> {
    const RATE: u32 = 48_000;
    let samples = seconds * RATE;
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"RIFF");
    bytes.extend_from_slice(&(36 + samples * 2).to_le_bytes());
    bytes.extend_from_slice(b"WAVEfmt ");
    bytes.extend_from_slice(&16u32.to_le_bytes());
    for value in [1u16, 1] {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    bytes.extend_from_slice(&RATE.to_le_bytes());
    bytes.extend_from_slice(&(RATE * 2).to_le_bytes());
    for value in [2u16, 16] {
        bytes.extend_from_slice(&value.to_le_bytes());
    }
    bytes.extend_from_slice(b"data");
    bytes.extend_from_slice(&(samples * 2).to_le_bytes());
    for index in 0..samples {
        let phase = index as f32 * 330.0 * std::f32::consts::TAU / RATE as f32;
        bytes.extend_from_slice(&((phase.sin() * 8000.0) as i16).to_le_bytes());
    }
    bytes
}

/// Who the audit log names for a change a test makes as the operator.
pub const TEST_OPERATOR: &str = "test";

/// Sets an account's limits as the operator does (`vidgate admin account
/// limits`), through the same audited action, so tests reach a state only
/// the way production does.
pub async fn set_account_limits(store: &Store, account_id: &str, limits: AccountLimits) -> Account {
    let changes = operator_actions::accounts::LimitChanges {
        requests_per_second: Some(limits.requests_per_second),
        burst: Some(limits.burst),
        max_concurrent: Some(limits.max_concurrent),
    };
    operator_actions::accounts::set_limits(store, TEST_OPERATOR, account_id, changes)
        .await
        .expect("the operator may set these limits")
}

/// Revokes an active API key as the operator does; panics if there is none.
pub async fn revoke_key(store: &Store, key_id: &str) {
    operator_actions::keys::revoke(store, TEST_OPERATOR, key_id)
        .await
        .expect("an active key to revoke");
}

/// Pauses or resumes a model of the embedded catalog as the operator does.
pub async fn set_model_paused(store: &Store, model_id: &str, paused: bool) {
    operator_actions::models::set_paused(
        store,
        &vidgate_core::Catalog::embedded(),
        TEST_OPERATOR,
        model_id,
        paused,
    )
    .await
    .expect("a model of the catalog");
}
