//! The application state every request handler reaches, API and dashboard
//! alike. It sits below the HTTP layer (`http/` and `dashboard/`) so that
//! neither has to import the other to get it; start-up (`startup.rs`)
//! builds it from its components.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use vidgate_core::Catalog;

use crate::application::client_address::{KnowsTrustedProxies, TrustedProxies};
use crate::backend::Backends;
use crate::bound_media::MediaUrlSigner;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::rate_limit::{CallerRateLimiter, SignInLimits};
use crate::storage::Storage;
use crate::store::Store;

/// What every handler can reach: `AppStateFields`, behind one `Arc`.
///
/// axum clones the state for every request, once for each middleware and
/// handler that takes it. Cloning the fields one by one (a table of
/// backends, strings, a dozen reference counts shared by every thread) was
/// a sixth of the CPU of a public endpoint's request; one reference count
/// is what a clone costs now.
#[derive(Clone)]
pub struct AppState(Arc<AppStateFields>);

impl AppState {
    pub fn new(fields: AppStateFields) -> AppState {
        AppState(Arc::new(fields))
    }
}

impl KnowsTrustedProxies for AppState {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.0.trusted_proxies
    }
}

impl std::ops::Deref for AppState {
    type Target = AppStateFields;

    fn deref(&self) -> &AppStateFields {
        &self.0
    }
}

pub struct AppStateFields {
    pub store: Arc<Store>,
    pub catalog: Arc<Catalog>,
    pub backends: Backends,
    pub storage: Arc<Storage>,
    pub rate_limiter: Arc<CallerRateLimiter>,
    /// Absolute base of the API, e.g. `http://127.0.0.1:8080/api/v1`.
    pub api_base: String,
    /// Wakes an idle worker or the hosted pool when a job is queued.
    pub queue_wakeup: Arc<crate::workers::QueueWakeup>,
    pub max_attempts: i64,
    /// Fetches, probes and checks request media on submit and quote.
    pub media: Arc<vidgate_media::MediaInspector>,
    pub max_upload_bytes: u64,
    /// Requests per second and burst one client address may make to the
    /// public endpoints.
    pub public_rate_limit: crate::limits::PublicRateLimit,
    /// The proxies whose forwarded client addresses are believed.
    pub trusted_proxies: Arc<TrustedProxies>,
    /// The account dashboard's settings and sign-in limits.
    pub dashboard: Arc<DashboardSettings>,
    /// This node's readiness, for `/readyz`.
    pub health: Arc<Health>,
    /// The operator API's token; without one the API refuses every request.
    pub operator_token: Option<Arc<OperatorToken>>,
    /// This node's Prometheus series, served on the metrics listener.
    pub metrics: Arc<Metrics>,
    /// Checks the signed URLs of kept media that model servers fetch
    /// (`bound_media.rs`); the workers sign with the same key.
    pub media_signer: MediaUrlSigner,
    /// The open waits and event streams, their caps, and their closing at
    /// shutdown.
    pub live_status: Arc<crate::live_status::LiveStatus>,
    /// Credit sold through Stripe Checkout; without the Stripe settings
    /// `None`, and nothing of Stripe is served.
    pub stripe: Option<Arc<crate::stripe::StripeCheckout>>,
}

/// The operator API's token, kept as its SHA-256 digest so that comparing
/// a presented token takes the same time whatever its length or content.
pub struct OperatorToken {
    digest: [u8; 32],
}

impl OperatorToken {
    pub fn new(token: &str) -> OperatorToken {
        OperatorToken {
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Constant-time: the time taken says nothing of how much matched.
    pub fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.digest.ct_eq(&presented).into()
    }
}

/// What the dashboard is configured with and the state it keeps in memory.
pub struct DashboardSettings {
    /// Anyone may create an account (with no credit) from the sign-in page.
    pub allow_sign_up: bool,
    /// Session cookies are marked `Secure`: the public URL is https.
    pub secure_cookies: bool,
    pub sign_in_limits: SignInLimits,
    /// Issues and checks the sign-in and sign-up forms' CSRF tokens.
    pub pre_session_csrf: crate::application::sessions::PreSessionCsrf,
    /// Issues and checks the cookies of browsers that signed in to an email.
    pub device_cookies: crate::application::sessions::DeviceCookies,
}

impl DashboardSettings {
    /// Sign-in attempts are counted in `rate_limiter`'s buckets: in Redis
    /// when the node has one, so every node sees every attempt.
    pub fn new(
        allow_sign_up: bool,
        public_url: &str,
        rate_limiter: Arc<CallerRateLimiter>,
        pre_session_csrf: crate::application::sessions::PreSessionCsrf,
        device_cookies: crate::application::sessions::DeviceCookies,
    ) -> DashboardSettings {
        DashboardSettings {
            allow_sign_up,
            secure_cookies: public_url.starts_with("https://"),
            sign_in_limits: SignInLimits::new(rate_limiter),
            pre_session_csrf,
            device_cookies,
        }
    }
}
