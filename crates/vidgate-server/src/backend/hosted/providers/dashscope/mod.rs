//! Alibaba Cloud Model Studio through DashScope (`"backend": "dashscope"`):
//! its facts, and its asynchronous video synthesis (`client.rs`).

mod client;

pub use client::{DEFAULT_API_URL, DashScopeClient, PARAMETER_FIELDS, create_body, task_state};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{HostedProvider, OpenGuess, SchemaUnread};
use crate::backend::hosted::budget::BudgetConfig;
use crate::backend::hosted::model_config::HostedModelConfig;
use crate::backend::hosted::protocol::ProviderProtocol;
use crate::backend::hosted::schemas::InputSchema;

/// DashScope, registered in `PROVIDERS`.
pub struct DashScope;

#[async_trait(?Send)]
impl HostedProvider for DashScope {
    fn name(&self) -> &'static str {
        "dashscope"
    }

    /// The variable the official SDK reads (`dashscope` 2.0.2,
    /// `common/constants.py`: `DASHSCOPE_API_KEY`).
    fn default_credential_env(&self) -> &'static str {
        "DASHSCOPE_API_KEY"
    }

    fn example_file(&self) -> &'static str {
        "examples/hosted/dashscope.json"
    }

    /// Task queries are limited to "20 QPS per Alibaba Cloud account
    /// (includes all RAM users)" (the asynchronous task management API,
    /// https://www.alibabacloud.com/help/en/model-studio/manage-asynchronous-tasks):
    /// at most 10 reads, lists or cancels at once, then 10 a second, keeps
    /// every second within 20. Submits are limited per model ("RPS limit
    /// for task submission API" and concurrent tasks on each model's page),
    /// but no page read states Wan 2.6's figures, so creates keep vidgate's
    /// own ceiling (docs/upstreams.md says to set them from the console).
    fn default_budget(&self) -> BudgetConfig {
        BudgetConfig {
            others_per_minute: Some(600),
            others_burst: Some(10),
            ..BudgetConfig::default()
        }
    }

    fn client(
        &self,
        config: &HostedModelConfig,
        credential: String,
        request_timeout: Duration,
    ) -> Result<Arc<dyn ProviderProtocol>, String> {
        Ok(Arc::new(DashScopeClient::new(
            config.api_url.as_deref().unwrap_or(DEFAULT_API_URL),
            credential,
            request_timeout,
        )?))
    }

    /// Model Studio's model list, where each model links its API reference.
    fn page_of(&self, target: &str) -> String {
        format!("https://www.alibabacloud.com/help/en/model-studio/models (model {target})")
    }

    /// DashScope publishes no machine-readable input schema (its API
    /// references are prose pages), so the live check cannot read one; the
    /// transcribed schemas in the repository's tests are the check.
    async fn read_schema(
        &self,
        _config: &HostedModelConfig,
        _target: &str,
        _http: &reqwest::Client,
        _credentials: &dyn for<'name> Fn(&'name str) -> Option<String>,
    ) -> Result<InputSchema, SchemaUnread> {
        Err(SchemaUnread::NotPublished)
    }

    /// The SDK's `VideoSynthesis.call` takes both `ratio` ("16:9") and
    /// `size` ("1280*720"), and no page in our sources says which Wan 2.6
    /// honours.
    fn open_guesses(
        &self,
        _config: &HostedModelConfig,
        _target: &str,
        sent: &[&serde_json::Value],
    ) -> Vec<OpenGuess> {
        let sends_ratio = sent.iter().any(|input| input.get("ratio").is_some());
        if sends_ratio {
            vec![WAN_RATIO_OR_SIZE]
        } else {
            Vec::new()
        }
    }
}

/// Whether Wan 2.6 honours `parameters.ratio`, which the example file sends.
pub const WAN_RATIO_OR_SIZE: OpenGuess = OpenGuess {
    name: "dashscope-wan-ratio-or-size",
    question: "whether Wan 2.6 honours parameters.ratio or only size (width*height); the file sends ratio, and if Wan ignores it a 9:16 order comes back 16:9 with no error: confirm with a 9:16 clip, or map the aspect ratio to size",
};
