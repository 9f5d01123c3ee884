//! `vidgate`: one binary for the service (`serve`), its operators (`admin`)
//! and people at a terminal (the client commands).

mod admin;
mod client;
mod logging;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use vidgate_server::backend::BackendsConfig;
use vidgate_server::checks::{self, CheckFailure, CheckOutcome, Setting};
use vidgate_server::secrets;
use vidgate_server::storage::StorageConfig;
use vidgate_server::store::Migrations;
use vidgate_server::{RunningServer, ServerOptions};

#[derive(Parser)]
#[command(
    name = "vidgate",
    version,
    about = "Asynchronous video generation service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API and the workers.
    // Boxed: the serve options are far larger than the other commands'.
    Serve(Box<ServeArgs>),
    /// Manage accounts, keys and models in the database (works while the server runs).
    Admin(admin::AdminArgs),
    #[command(flatten)]
    Client(client::ClientCommand),
}

/// Where the data lives; shared by `serve` and `admin`.
#[derive(Args, Clone)]
pub struct StorageArgs {
    /// Directory for the SQLite database and generated files.
    #[arg(long, env = "VIDGATE_DATA_DIR", default_value = "./vidgate-data")]
    pub data_dir: PathBuf,
    /// Database URL (sqlite://… or postgres://…, with sslmode and sslrootcert for TLS);
    /// defaults to a SQLite file in the data directory. VIDGATE_DATABASE_URL_FILE names a
    /// file holding it instead.
    #[arg(long, env = "VIDGATE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

impl StorageArgs {
    pub fn database_url(&self) -> anyhow::Result<String> {
        if let Some(url) =
            secrets::secret_setting(self.database_url.clone(), "VIDGATE_DATABASE_URL")?
        {
            return Ok(url);
        }
        vidgate_server::create_private_directory(&self.data_dir)
            .with_context(|| format!("creating the data directory {}", self.data_dir.display()))?;
        Ok(vidgate_server::default_database_url(&self.data_dir))
    }
}

#[derive(Args)]
struct ServeArgs {
    /// What this process does: api (HTTP only), worker (jobs only, no HTTP listener) or all.
    #[arg(long, env = "VIDGATE_ROLE", default_value = "all")]
    role: vidgate_server::Role,
    /// Address to listen on.
    #[arg(long, env = "VIDGATE_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve Prometheus metrics at /metrics on this address (its own listener, never the public one, on any role); off by default.
    #[arg(long, env = "VIDGATE_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Seconds a client has to send a request's whole head, counted from the connection being ready for it (also how long a kept-alive connection may stay unused).
    #[arg(
        long,
        env = "VIDGATE_HTTP_HEADER_TIMEOUT_SECONDS",
        default_value_t = 10
    )]
    http_header_timeout_seconds: u64,
    /// Seconds a client has to send a request's whole body.
    #[arg(long, env = "VIDGATE_HTTP_BODY_TIMEOUT_SECONDS", default_value_t = 300)]
    http_body_timeout_seconds: u64,
    /// Seconds a connection may move no bytes before it is closed (a request in progress still gets its answer).
    #[arg(long, env = "VIDGATE_HTTP_IDLE_TIMEOUT_SECONDS", default_value_t = 60)]
    http_idle_timeout_seconds: u64,
    /// HTTP connections open at once; more wait to be accepted. From three quarters of it open,
    /// connections silent for 2 s are asked to close.
    #[arg(long, env = "VIDGATE_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// HTTP connections one client address (an IPv6 /64) may hold open at once while other
    /// addresses hold none; as they fill the node its share shrinks in proportion (half of it
    /// when they hold half the connections). More are closed when accepted. The --trusted-proxy
    /// addresses are exempt. Default: an eighth of --max-connections.
    #[arg(long, env = "VIDGATE_MAX_CONNECTIONS_PER_ADDRESS", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections_per_address: Option<u64>,
    #[command(flatten)]
    storage: StorageArgs,
    /// How the SQLite database syncs its commits: full (every commit survives a power cut) or
    /// normal (faster; an OS crash or power cut can lose the last accepted submits and captures).
    #[arg(long, env = "VIDGATE_SQLITE_SYNCHRONOUS", default_value = "full")]
    sqlite_synchronous: vidgate_server::store::SqliteDurability,
    /// Base of absolute URLs in responses; defaults to http://<listen>.
    #[arg(long, env = "VIDGATE_PUBLIC_URL")]
    public_url: Option<String>,
    /// Redis for request-rate buckets shared by all nodes (redis://… or rediss://… for TLS,
    /// with a password as redis://:password@host); without it each node limits on its own.
    /// VIDGATE_REDIS_URL_FILE names a file holding it instead.
    #[arg(long, env = "VIDGATE_REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// How many jobs of models on the local engine or Cog servers run at once on this node (at
    /// least 1; a node that runs no jobs is started with --role api).
    #[arg(long, env = "VIDGATE_WORKERS", default_value_t = 2,
          value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
    /// How many jobs of models at hosted providers (fal, Replicate) this node follows at once,
    /// apart from --workers: following one costs a few requests and no CPU.
    #[arg(long, env = "VIDGATE_HOSTED_JOBS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    hosted_jobs: u32,
    /// Seconds a job's lease lasts without a heartbeat before another worker may take it over.
    #[arg(long, env = "VIDGATE_LEASE_SECONDS", default_value_t = 30)]
    lease_seconds: u64,
    /// Let the local engine honour the test markers [sim:fail] and [sim:sleep=MS] in prompts.
    #[arg(long, env = "VIDGATE_SIMULATION", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    simulation: bool,
    /// Let request media (and other outgoing requests) reach loopback and private addresses; for local development only.
    #[arg(long, env = "VIDGATE_ALLOW_PRIVATE_NETWORK", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    allow_private_network: bool,
    /// Let anyone create an account (with no credit) from the dashboard's sign-in page.
    #[arg(long, env = "VIDGATE_ALLOW_SIGN_UP", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    allow_sign_up: bool,
    /// Largest file POST /uploads accepts, in bytes.
    #[arg(long, env = "VIDGATE_MAX_UPLOAD_BYTES", default_value_t = 104_857_600)]
    max_upload_bytes: u64,
    /// Where clips and uploads are stored: local (disk under the data dir) or s3://bucket/prefix (credentials, region and endpoint from the AWS_* variables).
    #[arg(long = "storage", env = "VIDGATE_STORAGE", default_value = "local", value_parser = StorageConfig::from_flag)]
    file_storage: StorageConfig,
    /// Private addresses request media may still come from (an internal media server), comma-separated; others stay refused.
    #[arg(
        long = "trusted-media-address",
        env = "VIDGATE_TRUSTED_MEDIA_ADDRESSES",
        value_delimiter = ','
    )]
    trusted_media_addresses: Vec<std::net::IpAddr>,
    /// JSON file that runs models on Cog-compatible model servers (see docs/cog.md).
    #[arg(long, env = "VIDGATE_BACKENDS_FILE")]
    backends_file: Option<PathBuf>,
    /// Base URL at which Cog servers reach this node itself for completion webhooks
    /// (behind a load balancer, each node's own address); defaults to the public URL.
    #[arg(long, env = "VIDGATE_COG_CALLBACK_URL", value_parser = http_base_url)]
    cog_callback_url: Option<String>,
    /// Media fetches (download and probe) this node runs at once; over it a request waits 2 s, then gets 503 with Retry-After.
    #[arg(long, env = "VIDGATE_MAX_MEDIA_FETCHES", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_media_fetches: u64,
    /// Requests per second one client address may make to the public endpoints (/models, /quote, /openapi.json).
    #[arg(long, env = "VIDGATE_PUBLIC_RATE_LIMIT", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    public_rate_limit: u32,
    /// The burst one client address may make to the public endpoints.
    #[arg(long, env = "VIDGATE_PUBLIC_BURST", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    public_burst: u32,
    /// Do not apply database migrations at start; refuse to start until `vidgate admin migrate`
    /// has applied this version's.
    #[arg(long, env = "VIDGATE_SKIP_MIGRATIONS", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    skip_migrations: bool,
    /// Run the start-up checks (database, Redis, storage, backends file, and each hosted target
    /// against its provider's current input schema) with these settings, print one line each
    /// and exit: 0 when all pass, 1 otherwise. Changes nothing.
    #[arg(long)]
    check_config: bool,
    /// A proxy or load balancer (CIDR, e.g. 10.244.0.0/16 or 192.0.2.7/32; repeatable or
    /// comma-separated) whose --client-address-header names the client; other peers' headers are
    /// ignored. List only your proxies, never a whole private network.
    #[arg(
        long = "trusted-proxy",
        env = "VIDGATE_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header the trusted proxies write the client's address into (X-Forwarded-For,
    /// Forwarded, X-Real-IP, ...); every other forwarding header is ignored.
    #[arg(
        long,
        env = "VIDGATE_CLIENT_ADDRESS_HEADER",
        default_value = "x-forwarded-for"
    )]
    client_address_header: vidgate_server::application::client_address::ClientAddressHeader,
    /// How many trusted proxies in a row append to that header: the client is that many entries
    /// from its right.
    #[arg(long, env = "VIDGATE_PROXY_HOPS", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    proxy_hops: u32,
    /// Seconds a stopping node answers /readyz with 503 while still serving, before it stops
    /// accepting requests: at least the load balancer's probe interval times its failure threshold.
    #[arg(long, env = "VIDGATE_DRAIN_SECONDS", default_value_t = 0)]
    drain_seconds: u64,
    /// File holding the operator API's token (/admin/v1), at least 32 characters; or the token
    /// itself in VIDGATE_ADMIN_TOKEN (setting both is refused). Without one the operator API
    /// refuses every request.
    #[arg(long, env = "VIDGATE_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Days finished clips (from completion) and uploads (from upload, used or not) are kept;
    /// then the sweep deletes the file, the record stays and the file's URL answers 410.
    #[arg(long, env = "VIDGATE_RETAIN_DAYS", default_value_t = vidgate_server::retention::DEFAULT_RETAIN_DAYS, value_parser = clap::value_parser!(u64).range(1..=36_500))]
    retain_days: u64,
    /// Waits (Prefer: wait) and event streams (/generations/{id}/events) one API key or
    /// dashboard session may hold open at once on this node; more are answered 429.
    #[arg(long, env = "VIDGATE_MAX_WAITS_PER_KEY", default_value_t = vidgate_server::live_status::LiveStatusLimits::default().per_key,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_waits_per_key: u32,
    /// Waits and event streams one account (all its keys and sessions) may hold open at once on
    /// this node; more are answered 429. Must be below --max-waits-per-node, so that the rest
    /// stay for other accounts. Default: an eighth of --max-waits-per-node.
    #[arg(long, env = "VIDGATE_MAX_WAITS_PER_ACCOUNT", value_parser = clap::value_parser!(u32).range(1..))]
    max_waits_per_account: Option<u32>,
    /// Waits and event streams this node holds open at once for everyone; keep it below
    /// --max-connections so that other requests still find connections. At least 2, so that
    /// one account cannot hold them all.
    #[arg(long, env = "VIDGATE_MAX_WAITS_PER_NODE", default_value_t = vidgate_server::live_status::LiveStatusLimits::default().per_node,
          value_parser = clap::value_parser!(u32).range(2..))]
    max_waits_per_node: u32,
    #[command(flatten)]
    stripe: StripeArgs,
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, env = "VIDGATE_LOG_JSON")]
    log_json: bool,
}

/// Credit sold through Stripe Checkout (docs/stripe.md). It is on when both
/// VIDGATE_STRIPE_SECRET_KEY and VIDGATE_STRIPE_WEBHOOK_SECRET are set (each
/// also as a file named by the same variable with _FILE); without them
/// nothing of Stripe is served.
#[derive(Args)]
struct StripeArgs {
    /// Stripe's API; tests point it at a fake.
    #[arg(long, env = "VIDGATE_STRIPE_API_URL", default_value = vidgate_server::stripe::DEFAULT_STRIPE_API_URL, value_parser = http_base_url)]
    stripe_api_url: String,
    /// The smallest amount one Checkout may buy, in dollars.
    #[arg(long, env = "VIDGATE_STRIPE_MIN_USD", default_value = "5.00", value_parser = dollars)]
    stripe_min_usd: vidgate_core::Micros,
    /// The largest amount one Checkout may buy, in dollars.
    #[arg(long, env = "VIDGATE_STRIPE_MAX_USD", default_value = "1000.00", value_parser = dollars)]
    stripe_max_usd: vidgate_core::Micros,
    /// The amounts the dashboard offers, in dollars, comma-separated.
    #[arg(long, env = "VIDGATE_STRIPE_AMOUNTS_USD", default_value = "10,20,50,100", value_delimiter = ',', value_parser = dollars)]
    stripe_amounts_usd: Vec<vidgate_core::Micros>,
}

/// A dollar amount such as `20` or `20.00`.
fn dollars(text: &str) -> Result<vidgate_core::Micros, String> {
    vidgate_core::Micros::parse_usd(text).map_err(|_| format!("{text:?} is not a dollar amount"))
}

impl StripeArgs {
    /// The Stripe settings, when both secrets are given; one without the
    /// other is refused rather than silently leaving Stripe off.
    fn settings(self) -> anyhow::Result<Option<vidgate_server::stripe::StripeSettings>> {
        let secret_key = secrets::secret_from_environment("VIDGATE_STRIPE_SECRET_KEY")?;
        let webhook_secret = secrets::secret_from_environment("VIDGATE_STRIPE_WEBHOOK_SECRET")?;
        match (secret_key, webhook_secret) {
            (None, None) => Ok(None),
            (Some(secret_key), Some(webhook_secret)) => {
                Ok(Some(vidgate_server::stripe::StripeSettings {
                    secret_key,
                    webhook_secret,
                    api_url: self.stripe_api_url,
                    amounts: vidgate_server::stripe::CheckoutAmounts {
                        minimum: self.stripe_min_usd,
                        maximum: self.stripe_max_usd,
                        choices: self.stripe_amounts_usd,
                    },
                }))
            }
            _ => anyhow::bail!(
                "set both VIDGATE_STRIPE_SECRET_KEY and VIDGATE_STRIPE_WEBHOOK_SECRET \
                 (or their _FILE forms) to sell credit through Stripe, or neither"
            ),
        }
    }
}

/// An absolute http(s) URL without a query, as a base other paths are added to.
fn http_base_url(text: &str) -> Result<String, String> {
    let url =
        reqwest::Url::parse(text).map_err(|error| format!("{text:?} is not a URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.query().is_some() {
        return Err(format!("{text:?} must be an http(s) URL without a query"));
    }
    Ok(text.trim_end_matches('/').to_string())
}

/// Prints one of a node's start-up announcements. They are for whoever
/// started it; a closed standard output (the reader of a pipe went away)
/// must not stop a node that is already serving, so a failed write is
/// ignored.
fn announce(text: std::fmt::Arguments) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    interrupt.await.ok();
}

/// An error as one line: its message and its causes, joined.
fn one_line(error: impl Into<anyhow::Error>) -> String {
    format!("{:#}", error.into())
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let tracing = match logging::init(args.log_json) {
        Ok(tracing) => tracing,
        Err(error) => {
            eprintln!("vidgate: refusing to start: {error}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let exit = serve_with_logging(args).await;
    if let Some(tracing) = tracing {
        // Sends the spans still buffered; the exporter's client blocks.
        let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
    }
    exit
}

async fn serve_with_logging(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let check_config = args.check_config;
    let backends_path = args.backends_file.clone();
    let (options, backends_file) = server_options(args)?;
    let warnings = checks::configuration_warnings(&options);
    if check_config {
        let outcome =
            check_configuration(&options, backends_file, backends_path.as_ref(), &warnings).await;
        return Ok(outcome);
    }
    if let Some(CheckOutcome {
        result: Err(failure),
        ..
    }) = backends_file
    {
        eprintln!("vidgate: refusing to start: {failure}");
        return Ok(ExitCode::FAILURE);
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let server = match vidgate_server::start(options).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!("vidgate: refusing to start: {}", one_line(error));
            return Ok(ExitCode::FAILURE);
        }
    };
    announce_server(&server);
    shutdown_signal().await;
    tracing::info!("shutting down: finishing requests and handing running jobs back to the queue");
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// The server's options from the command line and the environment, and
/// the outcome of applying the backends file when one is given.
fn server_options(args: ServeArgs) -> anyhow::Result<(ServerOptions, Option<CheckOutcome>)> {
    let mut options = ServerOptions::new(args.listen, args.storage.data_dir.clone());
    options.http = http_limits(&args);
    options.live_status = live_status_limits(&args);
    options.role = args.role;
    options.metrics_listen = args.metrics_listen;
    let database_url = args.storage.database_url()?;
    // Only the embedded single-node database gets a development account:
    // nodes starting together on a shared database would each create one.
    options.bootstrap_development_account = database_url.starts_with("sqlite:");
    options.database_url = Some(database_url);
    options.sqlite_durability = args.sqlite_synchronous;
    options.public_url = args.public_url;
    options.redis_url = secrets::secret_setting(args.redis_url, "VIDGATE_REDIS_URL")?;
    options.queue.workers = usize::from(args.workers);
    options.queue.hosted_jobs = args.hosted_jobs as usize;
    options.queue.lease = Duration::from_secs(args.lease_seconds.max(1));
    options.migrations = if args.skip_migrations {
        Migrations::Require
    } else {
        Migrations::Apply
    };
    options.backends = BackendsConfig::builtin(args.simulation);
    let backends_file = args.backends_file.as_ref().map(|path| CheckOutcome {
        setting: Setting::BackendsFile,
        result: vidgate_server::backend::apply_backends_file(
            &mut options.backends,
            path,
            &options.catalog,
        )
        .map(|()| format!("{} is valid", path.display()))
        .map_err(|error| CheckFailure::new(Setting::BackendsFile, &error)),
    });
    options.allow_private_network = args.allow_private_network;
    options.max_upload_bytes = args.max_upload_bytes;
    options.allow_sign_up = args.allow_sign_up;
    options.storage = args.file_storage;
    options.trusted_media_addresses = args.trusted_media_addresses;
    options.cog_callback_url = args.cog_callback_url;
    options.max_media_fetches = args.max_media_fetches as usize;
    options.public_rate_limit = vidgate_server::limits::PublicRateLimit {
        per_second: args.public_rate_limit,
        burst: args.public_burst,
    };
    options.trusted_proxies = args.trusted_proxies;
    options.client_address_header = args.client_address_header;
    options.proxy_hops = args.proxy_hops as usize;
    options.drain_delay = Duration::from_secs(args.drain_seconds);
    options.retention.keep_for = Duration::from_secs(args.retain_days * 24 * 60 * 60);
    options.stripe = args.stripe.settings()?;
    // Like every secret: the variable or the file, and both is refused.
    options.operator_token = secrets::secret_setting_with_file(
        std::env::var("VIDGATE_ADMIN_TOKEN")
            .ok()
            .filter(|token| !token.is_empty()),
        args.admin_token_file.clone(),
        "VIDGATE_ADMIN_TOKEN",
    )?
    .map(|token| token.trim().to_owned());
    Ok((options, backends_file))
}

/// The HTTP listener's timeouts and connection caps.
fn http_limits(args: &ServeArgs) -> vidgate_server::limits::HttpLimits {
    vidgate_server::limits::HttpLimits {
        header_read_timeout: Duration::from_secs(args.http_header_timeout_seconds.max(1)),
        body_timeout: Duration::from_secs(args.http_body_timeout_seconds.max(1)),
        idle_timeout: Duration::from_secs(args.http_idle_timeout_seconds.max(1)),
        max_connections: args.max_connections.max(1),
        max_connections_per_address: args.max_connections_per_address.map_or_else(
            || {
                vidgate_server::limits::HttpLimits::default_connections_per_address(
                    args.max_connections.max(1),
                )
            },
            |per_address| per_address as usize,
        ),
    }
}

/// The caps on open waits and event streams.
fn live_status_limits(args: &ServeArgs) -> vidgate_server::live_status::LiveStatusLimits {
    vidgate_server::live_status::LiveStatusLimits {
        per_key: args.max_waits_per_key,
        per_account: args.max_waits_per_account.unwrap_or(
            vidgate_server::live_status::LiveStatusLimits::default_per_account(
                args.max_waits_per_node,
            ),
        ),
        per_node: args.max_waits_per_node,
    }
}

/// `serve --check-config`: every setting checked (the backends file also
/// against its providers' current schemas), each outcome and warning
/// printed; fails when a check failed.
async fn check_configuration(
    options: &ServerOptions,
    backends_file: Option<CheckOutcome>,
    backends_path: Option<&PathBuf>,
    warnings: &[String],
) -> ExitCode {
    let file_applies = backends_file
        .as_ref()
        .is_some_and(|outcome| outcome.result.is_ok());
    let mut outcomes: Vec<CheckOutcome> = backends_file.into_iter().collect();
    // The hosted targets against their providers' current schemas.
    if let (true, Some(path)) = (file_applies, backends_path) {
        outcomes.extend(checks::check_provider_schemas(path, &options.catalog).await);
    }
    outcomes.extend(checks::check_configuration(options).await);
    for outcome in &outcomes {
        println!("{outcome}");
    }
    // Warnings do not fail the check: the setting may be deliberate.
    for warning in warnings {
        println!("WARNING {warning}");
    }
    let sound = outcomes.iter().all(|outcome| outcome.result.is_ok());
    if sound {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Says where the node listens and the development account it created.
fn announce_server(server: &RunningServer) {
    // The bound address and the public URL differ behind a load balancer,
    // so both are printed, each labelled. Scripts and tests read the last
    // line, `vidgate API base: …`, which also says the node is ready.
    let public_url = server.api_base.trim_end_matches("/api/v1");
    if let Some(metrics_addr) = server.metrics_addr {
        announce(format_args!(
            "vidgate metrics: http://{metrics_addr}/metrics"
        ));
    }
    match server.local_addr {
        Some(local_addr) => {
            announce(format_args!(
                "vidgate is listening on {local_addr} (public URL {public_url})"
            ));
            announce(format_args!("vidgate API base: {}", server.api_base));
        }
        None => announce(format_args!(
            "vidgate is running jobs (worker role, no HTTP listener; public URL {public_url})"
        )),
    }
    if let Some(created) = &server.development_account {
        announce(format_args!(
            "\nCreated a development account {} with ${:.2} of credit.\n\
             Its API key (shown once, keep it secret):\n\n    {}\n\n\
             Try it:\n\n    curl -s -X POST {}/run/vendor_1/model_1/text-to-video \\\n      \
             -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\\n      \
             -d '{{\"prompt\": \"a red kite over the sea at dawn\", \"duration\": 3}}'\n",
            created.account.id,
            created.account.balance.to_usd(),
            created.api_key,
            server.api_base,
            created.api_key,
        ));
    }
    if let Some(user) = &server.development_user
        && let Some(password) = &user.one_time_password
    {
        announce(format_args!(
            "Sign in to the dashboard at {}/dashboard as {} with the password {}
",
            public_url, user.user.email, password,
        ));
    }
}

fn main() -> ExitCode {
    // Before the runtime starts any thread.
    vidgate_server::allocator::limit_arenas();
    let cli = Cli::parse();
    let outcome = tokio::runtime::Runtime::new()
        .context("starting the async runtime")
        .and_then(|runtime| {
            runtime.block_on(async {
                match cli.command {
                    Command::Serve(args) => serve(*args).await,
                    Command::Admin(args) => admin::run(args).await.map(|()| ExitCode::SUCCESS),
                    Command::Client(command) => client::run_command(command)
                        .await
                        .map(|()| ExitCode::SUCCESS),
                }
            })
        });
    // One line, the causes joined: no backtrace, nothing else to scroll past.
    outcome.unwrap_or_else(|error| {
        eprintln!("vidgate: {}", one_line(error));
        ExitCode::FAILURE
    })
}
