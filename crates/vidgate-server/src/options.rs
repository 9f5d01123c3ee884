//! Everything `vidgate serve` can be told, with its defaults. Start-up
//! (`startup.rs`) resolves and checks these before it opens anything.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use vidgate_core::Catalog;

use crate::backend::BackendsConfig;
use crate::limits::{HttpLimits, PublicRateLimit};
use crate::retention::RetentionSettings;
use crate::storage::StorageConfig;
use crate::store::{Migrations, SqliteDurability};
use crate::webhook_senders::WebhookSettings;
use crate::workers::QueueSettings;

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
    /// Timeouts and the connection cap of the HTTP listener (and of the
    /// metrics listener).
    pub http: HttpLimits,
    /// Where Prometheus scrapes `/metrics` (the text format); off when
    /// `None`. Its own listener, never the public one, on every role.
    pub metrics_listen: Option<SocketAddr>,
    pub data_dir: PathBuf,
    /// Defaults to a SQLite file in the data directory.
    pub database_url: Option<String>,
    /// Whether start-up applies this version's pending migrations or only
    /// requires them (`--skip-migrations`).
    pub migrations: Migrations,
    /// How a SQLite database syncs its commits: `Full` (the default) keeps
    /// every accepted submit and capture through a power cut; `Normal` is
    /// faster and can lose the last commits to an operating-system crash.
    pub sqlite_durability: SqliteDurability,
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
    pub backends: BackendsConfig,
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
    /// Media fetches (download and probe, for quotes, submits and
    /// direct-upload first uses) this node runs at once; a request that
    /// finds none free within 2 s is answered 503 with `Retry-After`.
    pub max_media_fetches: usize,
    /// The fair-use limit of the public endpoints, per client address.
    pub public_rate_limit: PublicRateLimit,
    /// Proxies (load balancers) whose `client_address_header` names the
    /// client; from any other peer the header is ignored and the peer is
    /// the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header the trusted proxies write the client's address into
    /// (`X-Forwarded-For` by default); every other is the client's own.
    pub client_address_header: crate::application::client_address::ClientAddressHeader,
    /// How many trusted proxies in a row append to that header (1 by
    /// default): the client is that many entries from its right.
    pub proxy_hops: usize,
    /// How long shutdown reports not ready before it stops accepting
    /// requests, so load balancers take the node out of rotation first.
    pub drain_delay: Duration,
    /// The operator API's token (`/admin/v1`); without one it is refused.
    /// At least `MIN_OPERATOR_TOKEN_LENGTH` characters.
    pub operator_token: Option<String>,
    /// How long finished clips and uploads are kept (`--retain-days`).
    pub retention: RetentionSettings,
    /// Caps on open waits (`Prefer: wait`) and event streams.
    pub live_status: crate::live_status::LiveStatusLimits,
    /// Credit sold through Stripe Checkout; off without the settings.
    pub stripe: Option<crate::stripe::StripeSettings>,
}

/// The shortest operator token accepted: the token guards every account's
/// money, so a guessable one is refused at start-up.
pub const MIN_OPERATOR_TOKEN_LENGTH: usize = 32;

impl ServerOptions {
    /// The defaults of `vidgate serve`, with the embedded catalog and the
    /// built-in backends.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> ServerOptions {
        ServerOptions {
            role: Role::All,
            listen,
            http: HttpLimits::default(),
            metrics_listen: None,
            data_dir,
            database_url: None,
            migrations: Migrations::Apply,
            sqlite_durability: SqliteDurability::Full,
            public_url: None,
            redis_url: None,
            queue: QueueSettings {
                workers: 2,
                hosted_jobs: 5_000,
                lease: Duration::from_secs(30),
                idle_poll: Duration::from_secs(1),
                rescue_interval: Duration::from_secs(5),
            },
            max_attempts: 3,
            catalog: Catalog::embedded(),
            backends: BackendsConfig::builtin(false),
            bootstrap_development_account: false,
            allow_private_network: false,
            webhooks: WebhookSettings::default(),
            max_upload_bytes: 104_857_600,
            allow_sign_up: false,
            storage: StorageConfig::Local,
            trusted_media_addresses: Vec::new(),
            cog_callback_url: None,
            max_media_fetches: vidgate_media::FetchLimit::default().max_concurrent,
            public_rate_limit: PublicRateLimit::default(),
            trusted_proxies: Vec::new(),
            client_address_header: Default::default(),
            proxy_hops: 1,
            drain_delay: Duration::ZERO,
            operator_token: None,
            retention: RetentionSettings::default(),
            live_status: crate::live_status::LiveStatusLimits::default(),
            stripe: None,
        }
    }
}

pub fn default_database_url(data_dir: &std::path::Path) -> String {
    format!("sqlite://{}", data_dir.join("vidgate.sqlite").display())
}

/// Creates a directory and its missing parents readable by their owner only
/// (0700), because the data directory holds the SQLite database with its
/// secrets. A directory that exists keeps the permissions it has.
pub fn create_private_directory(path: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(path)
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_data_directory_is_private_to_its_owner() {
        let parent = tempfile::tempdir().unwrap();
        let data_dir = parent.path().join("data");
        super::create_private_directory(&data_dir.join("files")).unwrap();
        for directory in [data_dir.clone(), data_dir.join("files")] {
            let mode = std::fs::metadata(&directory).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", directory.display());
        }
    }
}
