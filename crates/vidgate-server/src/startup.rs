//! Start-up in named parts, each finished before the next begins:
//!
//! 1. `Configuration::resolve`: the options resolved and checked (the data
//!    directory prepared, the database URL chosen) before anything is opened,
//!    then `Configuration::check`: the start-up checks of `checks.rs`
//!    (database reachable and migrated, Redis answering, storage taking a
//!    probe object), refusing the start with the first failure.
//! 2. `Addresses::bind`: the HTTP listener, whose address completes the
//!    public URL and the API base every later part needs, and the metrics
//!    listener when one is asked for.
//! 3. `Components::build`: what the tasks share, built once: the store (and
//!    a first start's development account), storage, the rate limiter, the
//!    media fetcher, the metrics, then the backends built with all of them
//!    (`BackendParts`), and the `AppState`.
//! 4. `Components::spawn`: the tasks, by role: webhook senders, workers and
//!    the rescuer on a node that runs jobs, the HTTP server on one that
//!    serves, the retention sweep on every node, the metrics server on any
//!    node that has a metrics listener. `RunningServer::shutdown` stops them
//!    in one written order.
//!
//! A new listener binds in `Addresses` and is served in `spawn`; a new
//! router (an operator API) is merged in `serve_http`; a component that
//! needs the public URL or another live part (a provider backend) gets it in
//! `BackendParts` in `Components::build`; a check of the options alone belongs in
//! `Configuration::resolve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use vidgate_media::FetchSettings;

use crate::application::accounts::{self, CreatedAccount};
use crate::application::client_address::TrustedProxies;
use crate::application::state::{AppState, AppStateFields, DashboardSettings, OperatorToken};
use crate::application::users::{self, CreatedUser};
use crate::backend::{BackendBuildError, BackendParts, Backends, ProviderWebhookUrls};
use crate::bound_media::MediaUrlSigner;
use crate::checks::{self, CheckFailure};
use crate::health::{Health, QueueLiveness};
use crate::limits::HttpLimits;
use crate::live_status::LiveStatus;
use crate::metrics::Metrics;
use crate::options::{
    MIN_OPERATOR_TOKEN_LENGTH, Role, ServerOptions, create_private_directory, default_database_url,
};
use crate::rate_limit::CallerRateLimiter;
use crate::retention::{self, RetentionSettings};
use crate::storage::Storage;
use crate::store::{self, Store, StoreError};
use crate::stripe::StripeCheckout;
use crate::webhook_senders::{self, WebhookClient, WebhookContext, WebhookSettings};
use crate::workers::{self, QueueSettings, WorkerContext};
use crate::{http, ids, media};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A start-up check failed; it names the setting at fault.
    #[error(transparent)]
    Check(#[from] CheckFailure),
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
    DevelopmentUser(#[from] users::UserError),
    #[error("the operator token is shorter than {MIN_OPERATOR_TOKEN_LENGTH} characters")]
    WeakOperatorToken,
    #[error(
        "the metrics listener {0} is the public listener: metrics are served on their own address only"
    )]
    MetricsOnPublicListener(SocketAddr),
    #[error(
        "--max-waits-per-account ({per_account}) must be below --max-waits-per-node ({per_node}), so that one account cannot take every wait and event stream of the node"
    )]
    LiveStatusLimits { per_account: u32, per_node: u32 },
    #[error(transparent)]
    Backends(#[from] BackendBuildError),
    #[error("the Stripe settings cannot be used")]
    Stripe(#[from] crate::stripe::StripeSetupError),
    #[error("could not prepare the data directory {path}")]
    DataDirectory {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Starts a node: resolves its options, binds its listener, builds its
/// components and spawns its tasks.
pub async fn start(options: ServerOptions) -> Result<RunningServer, ServerError> {
    let configuration = Configuration::resolve(options)?;
    configuration.check().await?;
    let addresses = Addresses::bind(&configuration.options).await?;
    let components = Components::build(configuration, &addresses).await?;
    Ok(components.spawn(addresses))
}

/// The options, resolved and checked before anything is opened.
struct Configuration {
    options: ServerOptions,
    database_url: String,
}

impl Configuration {
    fn resolve(options: ServerOptions) -> Result<Configuration, ServerError> {
        if options
            .operator_token
            .as_ref()
            .is_some_and(|token| token.chars().count() < MIN_OPERATOR_TOKEN_LENGTH)
        {
            return Err(ServerError::WeakOperatorToken);
        }
        // Port 0 picks two different free ports; any other equal pair would
        // put the metrics on the public port.
        if let Some(metrics_listen) = options.metrics_listen
            && options.role.serves_http()
            && metrics_listen == options.listen
            && metrics_listen.port() != 0
        {
            return Err(ServerError::MetricsOnPublicListener(metrics_listen));
        }
        let live_status = options.live_status;
        if live_status.per_account >= live_status.per_node {
            return Err(ServerError::LiveStatusLimits {
                per_account: live_status.per_account,
                per_node: live_status.per_node,
            });
        }
        let files_dir = options.data_dir.join("files");
        create_private_directory(&files_dir).map_err(|source| ServerError::DataDirectory {
            path: files_dir.clone(),
            source,
        })?;
        let database_url = options
            .database_url
            .clone()
            .unwrap_or_else(|| default_database_url(&options.data_dir));
        Ok(Configuration {
            options,
            database_url,
        })
    }

    /// Refuses the start with the first failed start-up check, so that a
    /// missing bucket or a wrong password is found now, not by a customer.
    async fn check(&self) -> Result<(), CheckFailure> {
        for outcome in checks::check_configuration(&self.options).await {
            outcome.result?;
        }
        Ok(())
    }
}

/// Where this node is reached: its HTTP listener (none on a worker node),
/// the URLs that follow from the address it was bound to, and its metrics
/// listener (when asked for, on any role).
struct Addresses {
    listener: Option<TcpListener>,
    local_addr: Option<SocketAddr>,
    metrics_listener: Option<TcpListener>,
    metrics_addr: Option<SocketAddr>,
    public_url: String,
    /// Absolute base of the API, ending in `/api/v1`.
    api_base: String,
}

impl Addresses {
    async fn bind(options: &ServerOptions) -> Result<Addresses, ServerError> {
        let (listener, local_addr) = if options.role.serves_http() {
            let (listener, local_addr) = bind_listener(options.listen).await?;
            (Some(listener), Some(local_addr))
        } else {
            (None, None)
        };
        let (metrics_listener, metrics_addr) = match options.metrics_listen {
            Some(address) => {
                let (listener, local_addr) = bind_listener(address).await?;
                (Some(listener), Some(local_addr))
            }
            None => (None, None),
        };
        let public_url = options
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", local_addr.unwrap_or(options.listen)));
        let api_base = format!("{}/api/v1", public_url.trim_end_matches('/'));
        Ok(Addresses {
            listener,
            local_addr,
            metrics_listener,
            metrics_addr,
            public_url,
            api_base,
        })
    }
}

async fn bind_listener(address: SocketAddr) -> Result<(TcpListener, SocketAddr), ServerError> {
    let listen_error = |source| ServerError::Listen { address, source };
    let listener = TcpListener::bind(address).await.map_err(listen_error)?;
    let local_addr = listener.local_addr().map_err(listen_error)?;
    Ok((listener, local_addr))
}

/// What the tasks share, built once.
struct Components {
    role: Role,
    queue: QueueSettings,
    http_limits: HttpLimits,
    webhooks: WebhookSettings,
    retention: RetentionSettings,
    store: Arc<Store>,
    state: AppState,
    /// What the workers and the rescuer report to readiness; only a node
    /// that runs jobs has it.
    queue_liveness: Option<Arc<QueueLiveness>>,
    drain_delay: Duration,
    /// Sends webhooks to customers' receivers; only a node that runs jobs
    /// has one.
    webhook_client: Option<WebhookClient>,
    development_account: Option<CreatedAccount>,
    development_user: Option<CreatedUser>,
}

impl Components {
    async fn build(
        configuration: Configuration,
        addresses: &Addresses,
    ) -> Result<Components, ServerError> {
        let Configuration {
            options,
            database_url,
        } = configuration;
        let store =
            store::open_with(&database_url, options.migrations, options.sqlite_durability).await?;
        let (development_account, development_user) =
            development_account(&options, store.as_ref()).await?;
        let media_signer = MediaUrlSigner::shared(store.as_ref()).await?;
        let pre_session_csrf =
            crate::application::sessions::PreSessionCsrf::shared(store.as_ref()).await?;
        let device_cookies =
            crate::application::sessions::DeviceCookies::shared(store.as_ref()).await?;

        let rate_limiter = match &options.redis_url {
            Some(redis_url) => CallerRateLimiter::shared(redis_url).await?,
            None => CallerRateLimiter::local(),
        };
        let rate_limiter = Arc::new(rate_limiter);
        let storage = Arc::new(Storage::open(&options.storage, &options.data_dir)?);
        let media_fetcher = build_media_fetcher(&options, addresses, storage.clone())?;
        let metrics = Arc::new(Metrics::new());
        let backends = build_backends(
            &options,
            addresses,
            &store,
            &storage,
            &media_fetcher,
            &rate_limiter,
            &metrics,
        )
        .await?;
        // So that the first sign-in for an unknown email is no slower than
        // one for a known email.
        tokio::task::spawn_blocking(crate::application::passwords::prepare_dummy_hash);
        let queue_liveness = options.role.runs_jobs().then(|| {
            Arc::new(QueueLiveness::new(
                options.queue.claiming_loops(),
                options.queue.rescue_interval,
            ))
        });
        let health = Arc::new(Health::new(
            store.clone(),
            storage.clone(),
            queue_liveness.clone(),
        ));
        let stripe_checkout = options
            .stripe
            .as_ref()
            .map(|settings| StripeCheckout::new(settings, &addresses.public_url))
            .transpose()?
            .map(Arc::new);
        let state = AppState::new(AppStateFields {
            store: store.clone(),
            catalog: Arc::new(options.catalog),
            backends,
            storage,
            rate_limiter: rate_limiter.clone(),
            api_base: addresses.api_base.clone(),
            queue_wakeup: Arc::default(),
            max_attempts: options.max_attempts,
            media: media::inspector(
                media_fetcher,
                vidgate_media::FetchLimit {
                    max_concurrent: options.max_media_fetches,
                    ..vidgate_media::FetchLimit::default()
                },
            ),
            max_upload_bytes: options.max_upload_bytes,
            public_rate_limit: options.public_rate_limit,
            trusted_proxies: Arc::new(
                TrustedProxies::new(options.trusted_proxies.clone())
                    .reading(options.client_address_header.clone(), options.proxy_hops),
            ),
            dashboard: Arc::new(DashboardSettings::new(
                options.allow_sign_up,
                &addresses.public_url,
                rate_limiter,
                pre_session_csrf,
                device_cookies,
            )),
            health,
            operator_token: options
                .operator_token
                .as_deref()
                .map(|token| Arc::new(OperatorToken::new(token))),
            metrics,
            media_signer,
            live_status: Arc::new(LiveStatus::new(
                options.live_status,
                options.http.idle_timeout,
            )),
            stripe: stripe_checkout,
        });
        let webhook_client = if options.role.runs_jobs() {
            Some(WebhookClient::new(
                options.allow_private_network,
                options.webhooks.attempt_timeout,
            )?)
        } else {
            None
        };
        Ok(Components {
            role: options.role,
            queue: options.queue,
            http_limits: options.http,
            webhooks: options.webhooks,
            retention: options.retention,
            store,
            state,
            queue_liveness,
            drain_delay: options.drain_delay,
            webhook_client,
            development_account,
            development_user,
        })
    }

    /// Spawns the tasks of this node's role.
    fn spawn(mut self, addresses: Addresses) -> RunningServer {
        let background_shutdown = CancellationToken::new();
        let mut background = Vec::new();
        // Only a node that runs jobs has a webhook client and queue
        // liveness (see `build`).
        if let (Some(webhook_client), Some(liveness)) =
            (self.webhook_client.take(), self.queue_liveness.take())
        {
            background.extend(self.spawn_job_tasks(
                webhook_client,
                liveness,
                &addresses.api_base,
                &background_shutdown,
            ));
        }
        // Every node sweeps: the sweep's steps skip what another node holds.
        background.push(retention::spawn(
            self.store.clone(),
            self.state.storage.clone(),
            self.retention,
            background_shutdown.clone(),
        ));
        let health = self.state.health.clone();
        let backends = self.state.backends.clone();
        let metrics_http = addresses.metrics_listener.map(|listener| {
            let router = http::metrics_router(self.store.clone(), self.state.metrics.clone());
            let shutdown = CancellationToken::new();
            let task = tokio::spawn(http::serve(
                listener,
                router,
                self.http_limits,
                TrustedProxies::default(),
                shutdown.clone(),
            ));
            HttpServer { shutdown, task }
        });
        if let Some(metrics_addr) = addresses.metrics_addr {
            tracing::info!(%metrics_addr, "vidgate is serving metrics");
        }
        let api_state = addresses.listener.is_some().then(|| self.state.clone());
        // The waits and streams of a revoked key end on the node that holds
        // them, whichever node or process revoked it.
        if api_state.is_some() {
            background.push(tokio::spawn(
                self.state
                    .live_status
                    .clone()
                    .end_revoked_callers(self.store.clone(), background_shutdown.clone()),
            ));
        }
        let http = addresses
            .listener
            .map(|listener| serve_http(listener, self.state, self.http_limits));
        if let Some(local_addr) = addresses.local_addr {
            tracing::info!(%local_addr, api_base = %addresses.api_base, "vidgate is serving");
        }
        tracing::info!(role = ?self.role, "vidgate started");
        RunningServer {
            local_addr: addresses.local_addr,
            metrics_addr: addresses.metrics_addr,
            api_base: addresses.api_base,
            store: self.store,
            backends,
            development_account: self.development_account,
            development_user: self.development_user,
            health,
            drain_delay: self.drain_delay,
            api_state,
            http,
            metrics_http,
            background_shutdown,
            background,
        }
    }

    /// The tasks of a node that runs jobs: the workers, the webhook
    /// senders beside them, and the wakeups of provider webhooks another
    /// node took.
    fn spawn_job_tasks(
        &self,
        webhook_client: WebhookClient,
        liveness: Arc<QueueLiveness>,
        api_base: &str,
        shutdown: &CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let node_id = format!("node_{}", ids::random_token(10));
        // Webhook senders run beside the workers, so an API-only node
        // never makes outgoing requests to customers' receivers.
        let mut tasks = webhook_senders::spawn(
            Arc::new(WebhookContext::new(
                self.store.clone(),
                webhook_client,
                api_base.to_owned(),
                self.webhooks.clone(),
                node_id.clone(),
                self.state.metrics.clone(),
            )),
            shutdown.clone(),
        );
        // A provider webhook taken by another node wakes this node's
        // follower of the job.
        tasks.push(
            self.state
                .backends
                .spawn_announced_webhook_wakeups(self.store.clone(), shutdown.clone()),
        );
        tasks.extend(workers::spawn(
            Arc::new(WorkerContext {
                store: self.store.clone(),
                catalog: self.state.catalog.clone(),
                backends: self.state.backends.clone(),
                storage: self.state.storage.clone(),
                api_base: api_base.to_owned(),
                media_signer: self.state.media_signer.clone(),
                wakeup: self.state.queue_wakeup.clone(),
                settings: self.queue.clone(),
                node_id,
                liveness,
                metrics: self.state.metrics.clone(),
            }),
            shutdown.clone(),
        ));
        tasks
    }
}

/// The fetcher of request media, which also reads this node's own files.
fn build_media_fetcher(
    options: &ServerOptions,
    addresses: &Addresses,
    storage: Arc<Storage>,
) -> Result<vidgate_media::Fetcher, ServerError> {
    media::fetcher(
        FetchSettings {
            allow_private_network: options.allow_private_network,
            trusted_addresses: options.trusted_media_addresses.clone(),
            // Downloads are checked on the data directory's disk, never
            // in memory.
            scratch_directory: Some(options.data_dir.join("scratch")),
            ..FetchSettings::default()
        },
        &addresses.api_base,
        storage,
    )
    .map_err(ServerError::MediaClient)
}

/// The catalog's backends, with the parts they share with the API.
async fn build_backends(
    options: &ServerOptions,
    addresses: &Addresses,
    store: &Arc<Store>,
    storage: &Arc<Storage>,
    media_fetcher: &vidgate_media::Fetcher,
    rate_limiter: &Arc<CallerRateLimiter>,
    metrics: &Arc<Metrics>,
) -> Result<Backends, ServerError> {
    // Provider webhooks need an address the provider can reach: only an
    // operator-configured public URL is one.
    let provider_webhooks =
        ProviderWebhookUrls::shared(store.as_ref(), options.public_url.as_deref()).await?;
    let parts = BackendParts {
        store: store.clone(),
        storage: storage.clone(),
        media_fetcher: media_fetcher.clone(),
        // The providers' request budgets take their tokens from the same
        // buckets as the API rate limit: in Redis, shared by every node,
        // when it is configured.
        rate_limiter: rate_limiter.clone(),
        metrics: metrics.clone(),
        provider_webhooks,
        // Cog webhooks can only come back to a node that listens.
        cog_callback_base: addresses.local_addr.map(|_| {
            options
                .cog_callback_url
                .clone()
                .unwrap_or_else(|| addresses.public_url.clone())
        }),
    };
    Ok(Backends::build(&options.backends, &parts)?)
}

/// Creates a development account with credit, and its dashboard user, when
/// the options ask for one and the database has no account yet.
async fn development_account(
    options: &ServerOptions,
    store: &Store,
) -> Result<(Option<CreatedAccount>, Option<CreatedUser>), ServerError> {
    if !options.bootstrap_development_account || store.accounts().count().await? != 0 {
        return Ok((None, None));
    }
    let account = accounts::create_development_account(store).await?;
    // So that a newcomer can sign in to the dashboard straight away too.
    let user =
        users::create_user(store, &account.account.id, users::DEVELOPMENT_EMAIL, None).await?;
    Ok((Some(account), Some(user)))
}

/// The HTTP server: its task and the token that stops it accepting.
struct HttpServer {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

fn serve_http(listener: TcpListener, state: AppState, limits: HttpLimits) -> HttpServer {
    let proxies = TrustedProxies::clone(&state.trusted_proxies);
    let router = http::router(state);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(http::serve(
        listener,
        router,
        limits,
        proxies,
        shutdown.clone(),
    ));
    HttpServer { shutdown, task }
}

/// A server that is accepting requests, running jobs, or both.
pub struct RunningServer {
    /// Where the HTTP API listens; `None` on a worker node.
    pub local_addr: Option<SocketAddr>,
    /// Where `/metrics` is served; `None` without `metrics_listen`.
    pub metrics_addr: Option<SocketAddr>,
    /// Absolute base of the API, ending in `/api/v1`.
    pub api_base: String,
    pub store: Arc<Store>,
    /// The backends this node built, which its workers run jobs on.
    pub backends: Backends,
    /// The development account created at this start, if any.
    pub development_account: Option<CreatedAccount>,
    /// The development account's dashboard user, with its one-time password.
    pub development_user: Option<CreatedUser>,
    health: Arc<Health>,
    drain_delay: Duration,
    /// What the API listener's service is built from; `None` on a worker
    /// node.
    api_state: Option<AppState>,
    http: Option<HttpServer>,
    /// Last to stop, so that scrapes see the whole shutdown.
    metrics_http: Option<HttpServer>,
    /// Stops the workers, the rescuer and the webhook senders.
    background_shutdown: CancellationToken,
    background: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// A service like the one the API listener answers with, the same
    /// routes and layers on the same state, for requests sent in process
    /// without a socket (`benches/router.rs` times the layers around every
    /// request this way); `None` on a worker node.
    pub fn http_service(&self) -> Option<impl http::HttpService> {
        self.api_state.clone().map(http::router)
    }

    /// From now on `/readyz` answers 503, so load balancers stop sending
    /// this node new requests; `shutdown` begins with it.
    pub fn begin_draining(&self) {
        self.health.begin_draining();
    }

    /// Stops the server in this order: report not ready and keep serving
    /// for the drain delay, stop accepting HTTP requests and let those in
    /// flight finish, then interrupt running jobs (they go back to the
    /// queue) and the webhook senders, wait for every task to end, and stop
    /// serving metrics.
    pub async fn shutdown(self) {
        self.begin_draining();
        if let Some(http) = self.http {
            tokio::time::sleep(self.drain_delay).await;
            http.shutdown.cancel();
            // Waits answer and event streams end now, instead of holding
            // their connections open until their generations finish; a
            // stream's client reconnects (to another node) and resumes.
            if let Some(state) = &self.api_state {
                state.live_status.close_all();
            }
            report_abnormal_end(http.task.await);
        }
        self.background_shutdown.cancel();
        for task in self.background {
            report_abnormal_end(task.await);
        }
        if let Some(metrics_http) = self.metrics_http {
            metrics_http.shutdown.cancel();
            report_abnormal_end(metrics_http.task.await);
        }
    }
}

fn report_abnormal_end(ended: Result<(), tokio::task::JoinError>) {
    if let Err(error) = ended {
        tracing::error!(error = %error, "a server task ended abnormally");
    }
}
