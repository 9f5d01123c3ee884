//! The vidgate service: HTTP API, store, ledger, queue, workers, backends.
//! See ARCHITECTURE.md at the repository root for the map and invariants.

pub mod accounts;
pub mod backend;
pub mod dashboard;
pub mod http;
pub mod ids;
pub mod media;
pub mod queue;
pub mod rate_limit;
pub mod storage;
pub mod store;
pub mod webhooks;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vidgate_core::Catalog;
use vidgate_media::FetchSettings;

use crate::backend::Backends;
use crate::queue::{QueueSettings, WorkerContext};
use crate::rate_limit::CallerRateLimiter;
use crate::storage::{Storage, StorageConfig};
use crate::store::{Store, StoreError};
use crate::webhooks::{WebhookClient, WebhookContext, WebhookSettings};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("could not open the store")]
    Store(#[from] StoreError),
    #[error("could not listen on {address}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("could not reach Redis for the shared rate limit")]
    Redis(#[from] redis::RedisError),
    #[error("could not build the HTTP client for request media")]
    MediaClient(#[source] vidgate_media::FetchError),
    #[error("could not build the HTTP client for webhooks")]
    WebhookClient(#[from] reqwest::Error),
    #[error("could not configure the object store")]
    Storage(#[from] object_store::Error),
    #[error("could not create the development account's dashboard user")]
    DevelopmentUser(#[from] dashboard::users::UserError),
    #[error("could not prepare the data directory {path}")]
    DataDirectory {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What one `vidgate serve` process does, so that API nodes and worker
/// nodes can be scaled apart on one PostgreSQL database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The HTTP API only: submitted jobs are left to worker nodes.
    Api,
    /// Workers and the lease rescuer only, with no HTTP listener.
    Worker,
    /// Both, as a single node runs.
    All,
}

impl Role {
    pub fn serves_http(self) -> bool {
        matches!(self, Role::Api | Role::All)
    }

    pub fn runs_jobs(self) -> bool {
        matches!(self, Role::Worker | Role::All)
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Role, String> {
        match text {
            "api" => Ok(Role::Api),
            "worker" => Ok(Role::Worker),
            "all" => Ok(Role::All),
            other => Err(format!("unknown role {other:?}: use api, worker or all")),
        }
    }
}

/// Everything `vidgate serve` can be told.
pub struct ServerOptions {
    pub role: Role,
    /// Address to listen on; port 0 picks a free port. Not bound by a worker.
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// Defaults to a SQLite file in the data directory.
    pub database_url: Option<String>,
    /// Base of the absolute URLs in responses and clip URLs; defaults to
    /// `http://<listen>`.
    pub public_url: Option<String>,
    /// Keep the per-key request-rate buckets in this Redis, shared by every
    /// node; without it each node limits on its own.
    pub redis_url: Option<String>,
    pub queue: QueueSettings,
    /// Attempts a job gets before a lost worker makes it fail for good.
    pub max_attempts: i64,
    pub catalog: Catalog,
    pub backends: Backends,
    /// Create a development account with credit when the database has none.
    pub bootstrap_development_account: bool,
    /// Lets media fetches and webhook deliveries reach loopback and private
    /// addresses (local development and tests). Off in production.
    pub allow_private_network: bool,
    /// How webhook deliveries are sent and retried.
    pub webhooks: WebhookSettings,
    /// Largest file `POST /uploads` accepts: at least the largest reference
    /// media limit of the catalog (M1's 104857600-byte videos).
    pub max_upload_bytes: u64,
    /// Lets anyone create an account (with no credit) and its first user
    /// from the dashboard's sign-in page. Off by default.
    pub allow_sign_up: bool,
    /// Where clips and uploads are stored: local disk under the data
    /// directory, or an S3-compatible bucket.
    pub storage: StorageConfig,
    /// Private addresses request media may still be fetched from (an
    /// operator's internal media server); every other private address stays
    /// refused, on redirects too.
    pub trusted_media_addresses: Vec<std::net::IpAddr>,
    /// Base URL at which Cog model servers reach this node itself, for their
    /// completion webhooks; defaults to `public_url`. Behind a load balancer
    /// each node sets its own, because only the node that dispatched a
    /// prediction waits for its webhook: one landing elsewhere is refused,
    /// and the dispatcher's fallback state read would run the prediction
    /// again.
    pub cog_callback_url: Option<String>,
}

impl ServerOptions {
    /// The defaults of `vidgate serve`, with the embedded catalog and the
    /// built-in backends.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> ServerOptions {
        ServerOptions {
            role: Role::All,
            listen,
            data_dir,
            database_url: None,
            public_url: None,
            redis_url: None,
            queue: QueueSettings {
                workers: 2,
                lease: Duration::from_secs(30),
                idle_poll: Duration::from_secs(1),
                rescue_interval: Duration::from_secs(5),
            },
            max_attempts: 3,
            catalog: Catalog::embedded(),
            backends: Backends::builtin(false),
            bootstrap_development_account: false,
            allow_private_network: false,
            webhooks: WebhookSettings::default(),
            max_upload_bytes: 104_857_600,
            allow_sign_up: false,
            storage: StorageConfig::Local,
            trusted_media_addresses: Vec::new(),
            cog_callback_url: None,
        }
    }
}

pub fn default_database_url(data_dir: &std::path::Path) -> String {
    format!("sqlite://{}", data_dir.join("vidgate.sqlite").display())
}

/// A server that is accepting requests, running jobs, or both.
pub struct RunningServer {
    /// Where the HTTP API listens; `None` on a worker node.
    pub local_addr: Option<SocketAddr>,
    /// Absolute base of the API, ending in `/api/v1`.
    pub api_base: String,
    pub store: Arc<dyn Store>,
    /// The development account created at this start, if any.
    pub development_account: Option<accounts::CreatedAccount>,
    /// The development account's dashboard user, with its one-time password.
    pub development_user: Option<dashboard::users::CreatedUser>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// Stops accepting requests, interrupts running jobs (they go back to the
    /// queue) and waits for every task to end.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            if let Err(error) = task.await {
                tracing::error!(error = %error, "a server task ended abnormally");
            }
        }
    }
}

pub async fn start(options: ServerOptions) -> Result<RunningServer, ServerError> {
    let data_dir = options.data_dir.clone();
    let files_dir = data_dir.join("files");
    std::fs::create_dir_all(&files_dir).map_err(|source| ServerError::DataDirectory {
        path: files_dir.clone(),
        source,
    })?;
    let database_url = options
        .database_url
        .clone()
        .unwrap_or_else(|| default_database_url(&data_dir));
    let store = store::open(&database_url).await?;

    let development_account =
        if options.bootstrap_development_account && store.count_accounts().await? == 0 {
            Some(accounts::create_development_account(store.as_ref()).await?)
        } else {
            None
        };
    // So that a newcomer can sign in to the dashboard straight away too.
    let development_user = match &development_account {
        Some(created) => Some(
            dashboard::users::create_user(
                store.as_ref(),
                &created.account.id,
                dashboard::users::DEVELOPMENT_EMAIL,
                None,
            )
            .await?,
        ),
        None => None,
    };

    let listener = if options.role.serves_http() {
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServerError::Listen {
                    address: options.listen,
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ServerError::Listen {
                address: options.listen,
                source,
            })?;
        Some((listener, local_addr))
    } else {
        None
    };
    let local_addr = listener.as_ref().map(|(_, local_addr)| *local_addr);
    let public_url = options
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", local_addr.unwrap_or(options.listen)));
    let api_base = format!("{}/api/v1", public_url.trim_end_matches('/'));

    let rate_limiter = match &options.redis_url {
        Some(redis_url) => CallerRateLimiter::shared(redis_url).await?,
        None => CallerRateLimiter::local(),
    };
    let catalog = Arc::new(options.catalog);
    let storage = Arc::new(Storage::open(&options.storage, &data_dir)?);
    let wakeup = Arc::new(Notify::new());
    let media_fetcher = media::fetcher(
        FetchSettings {
            allow_private_network: options.allow_private_network,
            trusted_addresses: options.trusted_media_addresses.clone(),
            ..FetchSettings::default()
        },
        &api_base,
        storage.clone(),
    )
    .map_err(ServerError::MediaClient)?;
    options.backends.attach_media_fetcher(&media_fetcher);
    // Cog webhooks can only come back to a node that listens; a worker-only
    // node leaves the base unset and its Cog backends dispatch synchronously.
    if local_addr.is_some() {
        options
            .backends
            .cog_callbacks()
            .set_base_url(options.cog_callback_url.as_deref().unwrap_or(&public_url));
    }
    let state = http::AppState {
        store: store.clone(),
        catalog: catalog.clone(),
        backends: options.backends.clone(),
        storage: storage.clone(),
        rate_limiter: Arc::new(rate_limiter),
        api_base: api_base.clone(),
        queue_wakeup: wakeup.clone(),
        max_attempts: options.max_attempts,
        media: media::inspector(media_fetcher),
        max_upload_bytes: options.max_upload_bytes,
        dashboard: Arc::new(dashboard::Dashboard::new(
            options.allow_sign_up,
            &public_url,
        )),
    };

    let shutdown = CancellationToken::new();
    let mut tasks = Vec::new();
    if options.role.runs_jobs() {
        let node_id = format!("node_{}", ids::random_token(10));
        // Webhook senders run beside the workers, so an API-only node never
        // makes outgoing requests to customers' receivers.
        tasks.extend(webhooks::spawn(
            Arc::new(WebhookContext {
                store: store.clone(),
                client: WebhookClient::new(
                    options.allow_private_network,
                    options.webhooks.attempt_timeout,
                )?,
                api_base: api_base.clone(),
                settings: options.webhooks,
                node_id: node_id.clone(),
            }),
            shutdown.clone(),
        ));
        tasks.extend(queue::spawn(
            Arc::new(WorkerContext {
                store: store.clone(),
                catalog,
                backends: options.backends,
                storage,
                api_base: api_base.clone(),
                wakeup,
                settings: options.queue,
                node_id,
            }),
            shutdown.clone(),
        ));
    }
    if let Some((listener, local_addr)) = listener {
        let router = http::router(state);
        let http_shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            // The peer address limits sign-in attempts per client.
            let service = router.into_make_service_with_connect_info::<SocketAddr>();
            let served = axum::serve(listener, service)
                .with_graceful_shutdown(async move { http_shutdown.cancelled().await })
                .await;
            if let Err(error) = served {
                tracing::error!(error = %error, "the HTTP server stopped with an error");
            }
        }));
        tracing::info!(%local_addr, %api_base, "vidgate is serving");
    }
    tracing::info!(role = ?options.role, "vidgate started");
    Ok(RunningServer {
        local_addr,
        api_base,
        store,
        development_account,
        development_user,
        shutdown,
        tasks,
    })
}
