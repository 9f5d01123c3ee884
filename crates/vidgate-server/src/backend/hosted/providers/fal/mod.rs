//! fal (`"backend": "fal"`): its facts, and its queue API (`client.rs`).

mod client;
mod schema;
mod settings;

pub use client::{
    DEFAULT_API_URL, DEFAULT_JWKS_URL, DEFAULT_QUEUE_URL, DISABLE_FALLBACK_HEADERS, FalClient,
    app_id, parse_jwks, signed_message, verify_webhook,
};
pub use schema::input_schema;
pub use settings::{FalSettings, SETTING_NAMES};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{HostedProvider, SchemaUnread};
use crate::backend::hosted::model_config::HostedModelConfig;
use crate::backend::hosted::protocol::ProviderProtocol;
use crate::backend::hosted::schemas::InputSchema;
use crate::backend::hosted::schemas::get_json;

/// Where fal publishes each endpoint's queue OpenAPI document.
pub const DEFAULT_SCHEMA_URL: &str = "https://fal.ai/api/openapi/queue/openapi.json";

/// fal, registered in `PROVIDERS`.
pub struct Fal;

#[async_trait(?Send)]
impl HostedProvider for Fal {
    fn name(&self) -> &'static str {
        "fal"
    }

    fn default_credential_env(&self) -> &'static str {
        "FAL_KEY"
    }

    fn example_file(&self) -> &'static str {
        "examples/hosted/fal.json"
    }

    fn own_settings(&self) -> &'static [&'static str] {
        SETTING_NAMES
    }

    fn check_settings(&self, config: &HostedModelConfig) -> Result<(), String> {
        FalSettings::of(config)?.check(config)
    }

    fn client(
        &self,
        config: &HostedModelConfig,
        credential: String,
        request_timeout: Duration,
    ) -> Result<Arc<dyn ProviderProtocol>, String> {
        let settings = FalSettings::of(config)?;
        Ok(Arc::new(
            FalClient::new(
                config.api_url.as_deref().unwrap_or(DEFAULT_QUEUE_URL),
                settings.platform_url(),
                settings.jwks_url(),
                credential,
                request_timeout,
            )?
            .with_webhook_user_id(settings.webhook_user_id),
        ))
    }

    fn page_of(&self, target: &str) -> String {
        format!("https://fal.ai/models/{target}/api")
    }

    /// fal publishes an OpenAPI document per endpoint (`schema_url`, with
    /// `?endpoint_id=` added), public: no credential is sent.
    async fn read_schema(
        &self,
        config: &HostedModelConfig,
        target: &str,
        http: &reqwest::Client,
        _credentials: &dyn for<'name> Fn(&'name str) -> Option<String>,
    ) -> Result<InputSchema, SchemaUnread> {
        let settings = FalSettings::of(config)?;
        let base = settings.schema_url();
        let mut url = url::Url::parse(base).map_err(|error| format!("{base:?}: {error}"))?;
        url.query_pairs_mut().append_pair("endpoint_id", target);
        let document = get_json(http.get(url)).await?;
        input_schema(document, target).map_err(|reason| {
            SchemaUnread::Failed(format!(
                "the target does not exist at fal (its OpenAPI document: {reason})"
            ))
        })
    }
}
