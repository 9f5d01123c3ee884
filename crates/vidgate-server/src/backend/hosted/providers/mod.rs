//! The hosted providers, each the one owner of its own facts: its name in
//! the backends file, the environment variable of its credential, which
//! settings of a model's entry it takes, the client of its protocol, where
//! its input schemas are read and its pages of targets are, and its example
//! backends file. The remote-job machinery (`hosted/`) and the backends
//! file (`backends_file.rs`) ask a provider through `HostedProvider`, never
//! by matching on which one it is, so a new provider is one new folder
//! here and one line of `PROVIDERS` (ARCHITECTURE.md, "Adding a provider").

pub mod dashscope;
pub mod fal;
pub mod modelark;
pub mod replicate;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::budget::BudgetConfig;
use super::model_config::HostedModelConfig;
use super::protocol::ProviderProtocol;
use super::schemas::InputSchema;

/// Every hosted provider vidgate speaks to, in the order the backends
/// file's error messages list them.
pub const PROVIDERS: &[Provider] = &[
    &fal::Fal,
    &replicate::Replicate,
    &modelark::ModelArk,
    &dashscope::DashScope,
];

/// A registered hosted provider.
pub type Provider = &'static dyn HostedProvider;

/// The provider the backends file names `name` (`"backend": "fal"`), if it
/// is one.
pub fn provider_named(name: &str) -> Option<Provider> {
    PROVIDERS
        .iter()
        .copied()
        .find(|provider| provider.name() == name)
}

/// What vidgate knows of one hosted provider.
#[async_trait(?Send)]
pub trait HostedProvider: Send + Sync + 'static {
    /// Its name: the `backend` of its models in the backends file, the
    /// `provider` of the generations it ran, and the label of its metrics.
    fn name(&self) -> &'static str;

    /// The environment variable that holds its credential when a model's
    /// entry names none (`credential_env`).
    fn default_credential_env(&self) -> &'static str;

    /// Its example backends file, from the repository's root: every
    /// catalog model it serves mapped to its targets (all six at an
    /// aggregator, the maker's own models at a maker's API).
    fn example_file(&self) -> &'static str;

    /// Its documented request limits, the budget of its credentials where
    /// the backends file gives none (each value the file gives wins over
    /// the provider's). A provider without documented limits per minute
    /// keeps vidgate's own (Replicate's figures, `budget/limits.rs`).
    fn default_budget(&self) -> BudgetConfig {
        BudgetConfig::default()
    }

    /// The settings of a model's entry that this provider alone takes,
    /// beside the shared ones of `HostedModelConfig` (fal's `platform_url`,
    /// …): the entry hands them over in `provider_settings`. None by
    /// default.
    fn own_settings(&self) -> &'static [&'static str] {
        &[]
    }

    /// Refuses its own settings of a model's entry (`own_settings`) that
    /// cannot work. Another provider's settings never reach it
    /// (`check_settings` below refuses them first).
    fn check_settings(&self, _config: &HostedModelConfig) -> Result<(), String> {
        Ok(())
    }

    /// The client of its protocol for one model's entry, sending
    /// `credential`, each call given up after `request_timeout`.
    fn client(
        &self,
        config: &HostedModelConfig,
        credential: String,
        request_timeout: Duration,
    ) -> Result<Arc<dyn ProviderProtocol>, String>;

    /// Its page of `target`, where an operator reads the target's inputs.
    fn page_of(&self, target: &str) -> String;

    /// The current input schema of `target`, read from the provider with
    /// `http` (which follows no redirect). `credentials` looks an
    /// environment variable up, for a provider whose schemas need the
    /// credential.
    async fn read_schema(
        &self,
        config: &HostedModelConfig,
        target: &str,
        http: &reqwest::Client,
        credentials: &dyn for<'name> Fn(&'name str) -> Option<String>,
    ) -> Result<InputSchema, SchemaUnread>;

    /// The guesses the entry makes at `target` for the flat inputs it
    /// sends there (`sent`), which `--check-config` and `vidgate admin
    /// providers check` report; none by default.
    fn open_guesses(
        &self,
        _config: &HostedModelConfig,
        _target: &str,
        _sent: &[&serde_json::Value],
    ) -> Vec<OpenGuess> {
        Vec::new()
    }
}

/// A question about a target that no fake and no page in vidgate's sources
/// can settle, which the entry answers by a guess: named as in
/// docs/upstreams.md and the target's transcribed schema
/// (`tests/fixtures/provider_schemas/`), for the operator to confirm with
/// the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenGuess {
    pub name: &'static str,
    /// The question, and what vidgate does meanwhile.
    pub question: &'static str,
}

/// Why a target's current input schema was not read.
#[derive(Debug)]
pub enum SchemaUnread {
    /// The provider publishes no machine-readable schema (its API
    /// references are prose pages). The transcribed schemas of vidgate's
    /// tests are the file's only check, and the operator compares the
    /// target's page by hand; this is not a failure of the check.
    NotPublished,
    /// Reading it failed: why, for the operator.
    Failed(String),
}

impl From<String> for SchemaUnread {
    fn from(reason: String) -> Self {
        SchemaUnread::Failed(reason)
    }
}

impl std::fmt::Debug for dyn HostedProvider {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.name())
    }
}

/// Checks the settings a model's entry at `provider` hands it: one that
/// only another provider takes is refused, naming that provider, and the
/// provider checks its own.
pub fn check_settings(provider: Provider, config: &HostedModelConfig) -> Result<(), String> {
    for name in config.provider_settings.keys() {
        if provider.own_settings().contains(&name.as_str()) {
            continue;
        }
        let takers: Vec<&str> = PROVIDERS
            .iter()
            .filter(|taker| taker.own_settings().contains(&name.as_str()))
            .map(|taker| taker.name())
            .collect();
        return Err(format!("{name} is for {} only", takers.join(" and ")));
    }
    provider.check_settings(config)
}

/// The names of every setting that a provider alone takes, which an
/// entry hands to its provider (`HostedModelConfig::provider_settings`).
pub fn own_setting_names() -> impl Iterator<Item = &'static str> {
    PROVIDERS
        .iter()
        .flat_map(|provider| provider.own_settings().iter().copied())
}

/// The request budget of a model's credential at `provider`: each value
/// its entry's `budget` gives, the provider's documented default for the
/// rest.
pub fn budget_of(provider: Provider, config: &HostedModelConfig) -> BudgetConfig {
    config
        .budget
        .clone()
        .unwrap_or_default()
        .over(&provider.default_budget())
}

/// The environment variable of a model's credential at `provider`: the
/// one its entry names, or the provider's own.
pub fn credential_env(provider: Provider, config: &HostedModelConfig) -> String {
    config
        .credential_env
        .clone()
        .unwrap_or_else(|| provider.default_credential_env().to_owned())
}
