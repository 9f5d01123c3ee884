//! Replicate (`"backend": "replicate"`): its facts, and its predictions API
//! (`client.rs`).

mod client;
mod schema;

#[cfg(test)]
pub(in crate::backend::hosted) use client::classify_error;
pub use client::{DEFAULT_API_URL, ReplicateClient, prediction_state, verify_webhook};
pub use schema::input_schema;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{HostedProvider, SchemaUnread};
use crate::backend::hosted::model_config::HostedModelConfig;
use crate::backend::hosted::protocol::ProviderProtocol;
use crate::backend::hosted::schemas::InputSchema;
use crate::backend::hosted::schemas::get_json;

/// Replicate, registered in `PROVIDERS`.
pub struct Replicate;

#[async_trait(?Send)]
impl HostedProvider for Replicate {
    fn name(&self) -> &'static str {
        "replicate"
    }

    fn default_credential_env(&self) -> &'static str {
        "REPLICATE_API_TOKEN"
    }

    fn example_file(&self) -> &'static str {
        "examples/hosted/replicate.json"
    }

    fn client(
        &self,
        config: &HostedModelConfig,
        credential: String,
        request_timeout: Duration,
    ) -> Result<Arc<dyn ProviderProtocol>, String> {
        Ok(Arc::new(ReplicateClient::new(
            config.api_url.as_deref().unwrap_or(DEFAULT_API_URL),
            credential,
            request_timeout,
        )?))
    }

    fn page_of(&self, target: &str) -> String {
        match target.split_once(':') {
            Some((model, version)) => {
                format!("https://replicate.com/{model}/versions/{version}/api")
            }
            None => format!("https://replicate.com/{target}/api"),
        }
    }

    /// Replicate answers `GET {api_url}/models/{owner}/{name}` with the
    /// latest version's schema (`…/versions/{id}` for a pinned
    /// `owner/name:version`), to the model's own credential only.
    async fn read_schema(
        &self,
        config: &HostedModelConfig,
        target: &str,
        http: &reqwest::Client,
        credentials: &dyn for<'name> Fn(&'name str) -> Option<String>,
    ) -> Result<InputSchema, SchemaUnread> {
        let variable = super::credential_env(&Replicate, config);
        let token = credentials(&variable)
            .filter(|token| !token.trim().is_empty())
            .ok_or_else(|| format!("the credential variable {variable} is not set"))?;
        let api = config
            .api_url
            .as_deref()
            .unwrap_or(DEFAULT_API_URL)
            .trim_end_matches('/');
        let (model, version) = match target.split_once(':') {
            Some((model, version)) => (model, Some(version)),
            None => (target, None),
        };
        let url = match version {
            Some(version) => format!("{api}/models/{model}/versions/{version}"),
            None => format!("{api}/models/{model}"),
        };
        let answer = get_json(http.get(url).bearer_auth(token)).await?;
        // A version answers its schema at the top; a model under its
        // latest version.
        let model_answer = match version {
            Some(_) => serde_json::json!({ "latest_version": answer }),
            None => answer,
        };
        input_schema(&model_answer).map_err(SchemaUnread::Failed)
    }
}
