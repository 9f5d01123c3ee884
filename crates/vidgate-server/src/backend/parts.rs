//! The live parts of a node that its backends are built with
//! (`Backends::build`), apart from the backends file's plain
//! configuration that names them.

use std::sync::Arc;

use super::hosted::webhook_urls::ProviderWebhookUrls;

/// The live parts of a node that backends are built with: they exist only
/// once start-up has opened the store and the storage and made the
/// metrics, so every backend is built after them, whole.
pub struct BackendParts {
    /// Where hosted backends record their provider jobs and circuits save
    /// their views.
    pub store: Arc<crate::store::Store>,
    /// Whose incoming directory takes the outputs that backends download.
    pub storage: Arc<crate::storage::Storage>,
    /// Fetches the media the local engine renders with, with the node's
    /// settings (such as whether private networks may be reached).
    pub media_fetcher: vidgate_media::Fetcher,
    /// The node's rate limiter, whose buckets (in Redis when configured,
    /// so that every node shares each budget) hold the providers' request
    /// budgets, as they hold the API rate limit.
    pub rate_limiter: Arc<crate::rate_limit::CallerRateLimiter>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The webhook URLs of provider jobs, under the public base URL at
    /// which providers reach this node's webhook route; without one, hosted
    /// jobs are followed by polling alone.
    pub provider_webhooks: ProviderWebhookUrls,
    /// The base URL at which Cog servers send their completion webhooks;
    /// without one (a node with no listener) Cog predictions are dispatched
    /// synchronously.
    pub cog_callback_base: Option<String>,
}
