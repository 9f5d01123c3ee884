//! BytePlus ModelArk (`"backend": "modelark"`), the maker's own source of
//! Seedance: its facts, and its content-generation tasks API
//! (`client.rs`).

mod client;

pub use client::{DEFAULT_API_URL, ModelArkClient, create_body, submit_identifier, task_state};

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{HostedProvider, OpenGuess, SchemaUnread};
use crate::backend::hosted::budget::BudgetConfig;
use crate::backend::hosted::model_config::HostedModelConfig;
use crate::backend::hosted::protocol::ProviderProtocol;
use crate::backend::hosted::schemas::InputSchema;

/// The queued tasks ModelArk takes per account (see `default_budget`).
const MAX_QUEUED_TASKS_PER_ACCOUNT: u32 = 120;

/// BytePlus ModelArk, registered in `PROVIDERS`.
pub struct ModelArk;

#[async_trait(?Send)]
impl HostedProvider for ModelArk {
    fn name(&self) -> &'static str {
        "modelark"
    }

    /// The variable the official SDK reads its API key from (`Ark()` takes
    /// `ARK_API_KEY`, `byteplussdkarkruntime/_client.py`).
    fn default_credential_env(&self) -> &'static str {
        "ARK_API_KEY"
    }

    fn example_file(&self) -> &'static str {
        "examples/hosted/modelark.json"
    }

    /// ModelArk takes at most 120 queued tasks per account (BytePlus's
    /// Video Generation API page, https://docs.byteplus.com/en/docs/ModelArk/1520757,
    /// read through a stored copy): a node never has more tasks in flight
    /// (queued or running) than that, so one node cannot pass the limit.
    /// The page states no calls per minute, so the rest is vidgate's own
    /// ceiling.
    fn default_budget(&self) -> BudgetConfig {
        BudgetConfig {
            max_in_flight: Some(MAX_QUEUED_TASKS_PER_ACCOUNT),
            ..BudgetConfig::default()
        }
    }

    fn client(
        &self,
        config: &HostedModelConfig,
        credential: String,
        request_timeout: Duration,
    ) -> Result<Arc<dyn ProviderProtocol>, String> {
        Ok(Arc::new(ModelArkClient::new(
            config.api_url.as_deref().unwrap_or(DEFAULT_API_URL),
            credential,
            request_timeout,
        )?))
    }

    /// ModelArk documents every model's inputs on one page, the Video
    /// Generation API's.
    fn page_of(&self, _target: &str) -> String {
        "https://docs.byteplus.com/en/docs/ModelArk/1520757".to_owned()
    }

    /// ModelArk publishes no machine-readable input schema (neither its API
    /// nor its SDK has one): its inputs are checked against the transcribed
    /// schema in the tests (`tests/fixtures/provider_schemas/modelark/`),
    /// and the live check says so instead of guessing.
    async fn read_schema(
        &self,
        _config: &HostedModelConfig,
        _target: &str,
        _http: &reqwest::Client,
        _credentials: &dyn for<'name> Fn(&'name str) -> Option<String>,
    ) -> Result<InputSchema, SchemaUnread> {
        Err(SchemaUnread::NotPublished)
    }

    /// No page in our sources shows how Seedance 2.0 at ModelArk names the
    /// references of a prompt, nor how it numbers them.
    fn open_guesses(
        &self,
        config: &HostedModelConfig,
        target: &str,
        sent: &[&serde_json::Value],
    ) -> Vec<OpenGuess> {
        let sends_references = sent.iter().any(|input| {
            ["reference_images", "reference_videos", "reference_audios"]
                .iter()
                .any(|field| input.get(*field).is_some())
        });
        if !sends_references {
            return Vec::new();
        }
        let mut guesses = Vec::new();
        if config.target_settings(target).references.is_none() {
            guesses.push(SEEDANCE_REFERENCE_NAMES);
        }
        guesses.push(REFERENCE_NUMBERING);
        guesses
    }
}

/// How Seedance 2.0 at ModelArk names a reference in the prompt.
pub const SEEDANCE_REFERENCE_NAMES: OpenGuess = OpenGuess {
    name: "modelark-seedance-reference-names",
    question: "how Seedance 2.0 at ModelArk names references in the prompt: the customer's @Image1, @Video1 and @Audio1 are sent verbatim (the file sets no references syntax); confirm with the page, or set references",
};

/// Whether ModelArk numbers references per kind or across the content
/// list.
pub const REFERENCE_NUMBERING: OpenGuess = OpenGuess {
    name: "modelark-reference-numbering",
    question: "whether ModelArk numbers references per kind (@Image1 is the first image) or across the content list, which vidgate sends as audio, then images, then videos: confirm with a request of one image and one video",
};
