//! `vidgate`: one binary for the service (`serve`), its operators (`admin`)
//! and people at a terminal (the client commands).

mod admin;
mod client;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use vidgate_server::ServerOptions;
use vidgate_server::backend::Backends;
use vidgate_server::storage::StorageConfig;

#[derive(Parser)]
#[command(
    name = "vidgate",
    version,
    about = "Asynchronous video generation service"
)]
struct Cli {
    #[command(flatten)]
    client: client::ClientArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API and the workers.
    Serve(ServeArgs),
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
    /// Database URL (sqlite://… or postgres://…); defaults to a SQLite file in the data directory.
    #[arg(long, env = "VIDGATE_DATABASE_URL")]
    pub database_url: Option<String>,
}

impl StorageArgs {
    pub fn database_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.database_url {
            return Ok(url.clone());
        }
        std::fs::create_dir_all(&self.data_dir)
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
    #[command(flatten)]
    storage: StorageArgs,
    /// Base of absolute URLs in responses; defaults to http://<listen>.
    #[arg(long, env = "VIDGATE_PUBLIC_URL")]
    public_url: Option<String>,
    /// Redis for request-rate buckets shared by all nodes (redis://…); without it each node limits on its own.
    #[arg(long, env = "VIDGATE_REDIS_URL")]
    redis_url: Option<String>,
    /// How many jobs run at once on this node.
    #[arg(long, env = "VIDGATE_WORKERS", default_value_t = 2)]
    workers: usize,
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
    /// Log as JSON lines instead of human-readable text.
    #[arg(long, env = "VIDGATE_LOG_JSON")]
    log_json: bool,
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

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VIDGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
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

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(args.log_json);
    let mut options = ServerOptions::new(args.listen, args.storage.data_dir.clone());
    options.role = args.role;
    let database_url = args.storage.database_url()?;
    // Only the embedded single-node database gets a development account:
    // nodes starting together on a shared database would each create one.
    options.bootstrap_development_account = database_url.starts_with("sqlite:");
    options.database_url = Some(database_url);
    options.public_url = args.public_url;
    options.redis_url = args.redis_url;
    options.queue.workers = args.workers.max(1);
    options.queue.lease = Duration::from_secs(args.lease_seconds.max(1));
    options.backends = Backends::builtin(args.simulation);
    if let Some(path) = &args.backends_file {
        vidgate_server::backend::apply_backends_file(
            &mut options.backends,
            path,
            &options.catalog,
        )?;
    }
    options.allow_private_network = args.allow_private_network;
    options.max_upload_bytes = args.max_upload_bytes;
    options.allow_sign_up = args.allow_sign_up;
    options.storage = args.file_storage;
    options.trusted_media_addresses = args.trusted_media_addresses;
    options.cog_callback_url = args.cog_callback_url;
    let server = vidgate_server::start(options)
        .await
        .map_err(anyhow::Error::from)?;

    if server.local_addr.is_some() {
        println!("vidgate is listening on {}", server.api_base);
    } else {
        println!("vidgate is running jobs (worker role, no HTTP listener)");
    }
    if let Some(created) = &server.development_account {
        println!(
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
        );
    }
    if let Some(user) = &server.development_user
        && let Some(password) = &user.one_time_password
    {
        println!(
            "Sign in to the dashboard at {}/dashboard as {} with the password {}
",
            server.api_base.trim_end_matches("/api/v1"),
            user.user.email,
            password,
        );
    }
    shutdown_signal().await;
    tracing::info!("shutting down: finishing requests and handing running jobs back to the queue");
    server.shutdown().await;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Admin(args) => admin::run(args).await,
            Command::Client(command) => client::run_command(cli.client, command).await,
        }
    })
}
