//! The backends file (`--backends-file`, JSON): which catalog models run on
//! which remote model server, and how. This module owns the file's format,
//! its parsing and its checks; each protocol (today Cog, in `cog.rs`) owns
//! only how a job is run. A model's entry names its protocol in the
//! `backend` field, so a new protocol adds one variant to
//! `ModelBackendConfig`, its own settings struct, and its own file beside
//! `cog.rs`, without changing existing files.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value};
use vidgate_core::Catalog;

use std::sync::Arc;

use super::Backends;
use super::cog::CogBackend;
use super::failover::FailoverBackend;
use super::hosted::{ProviderKind, hosted_backend};
use super::hosted_config::HostedModelConfig;

/// The backends file: which models run on which model server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendsFile {
    pub models: BTreeMap<String, ModelBackendConfig>,
}

/// How one model is run: on a Cog-compatible server, or at a hosted
/// provider (fal, Replicate; see docs/upstreams.md).
#[derive(Debug, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case")]
pub enum ModelBackendConfig {
    Cog(CogModelConfig),
    Fal(HostedModelConfig),
    Replicate(HostedModelConfig),
    /// Several hosted providers in order (see `failover.rs`).
    Failover(FailoverConfig),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverConfig {
    /// The providers, first choice first, each a different one.
    pub providers: Vec<HostedProviderConfig>,
}

/// One provider of a failover model: an entry as for a model at that
/// provider alone.
#[derive(Debug, Deserialize)]
#[serde(tag = "backend", rename_all = "snake_case")]
pub enum HostedProviderConfig {
    Fal(HostedModelConfig),
    Replicate(HostedModelConfig),
}

impl HostedProviderConfig {
    fn into_parts(self) -> (HostedModelConfig, ProviderKind) {
        match self {
            HostedProviderConfig::Fal(config) => (config, ProviderKind::Fal),
            HostedProviderConfig::Replicate(config) => (config, ProviderKind::Replicate),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CogModelConfig {
    /// Where the Cog server listens, e.g. `http://10.0.0.5:5000`.
    pub base_url: String,
    /// How many predictions vidgate sends this server at once; more would
    /// only be refused with 409 while its slots are busy.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Our parameter name → the predictor's input name. Besides the
    /// request's parameters, `seed`, `width`, `height` and `mode` name the
    /// values the job was given.
    #[serde(default = "default_inputs")]
    pub inputs: BTreeMap<String, String>,
    /// Predictor inputs sent with every prediction, e.g. `{"fps": 24}`.
    #[serde(default)]
    pub constants: Map<String, Value>,
    #[serde(default)]
    pub timeouts: CogTimeouts,
    /// Largest output accepted, in bytes, from a data URI or a download.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
}

/// Timeouts and intervals, in seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CogTimeouts {
    /// One HTTP request to the server (dispatch, state read, cancel, health).
    pub request_seconds: f64,
    /// A whole prediction, from dispatch to result; then it is canceled and
    /// the generation fails.
    pub prediction_seconds: f64,
    /// How often the state of a dispatched prediction is read while its
    /// webhook has not arrived.
    pub poll_seconds: f64,
    /// How often `GET /health-check` is called.
    pub health_seconds: f64,
    /// How long the server may stay unreachable during a job before the
    /// generation fails.
    pub unreachable_seconds: f64,
}

impl Default for CogTimeouts {
    fn default() -> CogTimeouts {
        CogTimeouts {
            request_seconds: 30.0,
            prediction_seconds: 1800.0,
            poll_seconds: 5.0,
            health_seconds: 5.0,
            unreachable_seconds: 60.0,
        }
    }
}

fn default_concurrency() -> usize {
    1
}

fn default_inputs() -> BTreeMap<String, String> {
    ["prompt", "duration", "seed"]
        .into_iter()
        .map(|name| (name.to_owned(), name.to_owned()))
        .collect()
}

fn default_max_output_bytes() -> u64 {
    256 * 1024 * 1024
}

#[derive(Debug, thiserror::Error)]
pub enum BackendsFileError {
    #[error("could not read the backends file {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the backends file {path} is not valid: {reason}")]
    Invalid { path: String, reason: String },
}

/// Reads a backends file (JSON) and runs the models it names on the servers
/// it describes. Must be called inside a tokio runtime: each Cog backend
/// starts its health checks at once. Provider credentials come from the
/// process environment: the variable itself or the file its `_FILE`
/// variant names (a file that cannot be read counts as no credential).
pub fn apply_backends_file(
    backends: &mut Backends,
    path: &Path,
    catalog: &Catalog,
) -> Result<(), BackendsFileError> {
    apply_backends_file_with_credentials(backends, path, catalog, &|name| {
        crate::secrets::secret_from_environment(name).ok().flatten()
    })
}

/// `apply_backends_file`, with provider credentials looked up by
/// `credentials` (the name of an environment variable → its value).
pub fn apply_backends_file_with_credentials(
    backends: &mut Backends,
    path: &Path,
    catalog: &Catalog,
    credentials: &dyn Fn(&str) -> Option<String>,
) -> Result<(), BackendsFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| BackendsFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let invalid = |reason: String| BackendsFileError::Invalid {
        path: shown.clone(),
        reason,
    };
    let file: BackendsFile =
        serde_json::from_str(&text).map_err(|error| invalid(error.to_string()))?;
    for (model_id, config) in file.models {
        let Some(model) = catalog.model(&model_id) else {
            return Err(invalid(format!(
                "{model_id:?} is not a model in the catalog"
            )));
        };
        match config {
            ModelBackendConfig::Cog(config) => {
                if url::Url::parse(&config.base_url)
                    .ok()
                    .is_none_or(|url| !matches!(url.scheme(), "http" | "https"))
                {
                    return Err(invalid(format!(
                        "{model_id}: base_url must be an http(s) URL"
                    )));
                }
                if config.concurrency == 0 {
                    return Err(invalid(format!(
                        "{model_id}: concurrency must be at least 1"
                    )));
                }
                let backend = CogBackend::new(&model_id, config, backends.cog_callbacks().clone())
                    .map_err(|error| invalid(format!("{model_id}: {error}")))?;
                backends.set_for_model(&model_id, backend);
            }
            ModelBackendConfig::Fal(config) => {
                let backend = hosted_backend(
                    model,
                    config,
                    ProviderKind::Fal,
                    credentials,
                    backends.provider_circuits(),
                    backends.provider_budgets(),
                )
                .map_err(|error| invalid(format!("{model_id}: {error}")))?;
                backends.set_for_model(&model_id, backend);
            }
            ModelBackendConfig::Replicate(config) => {
                let backend = hosted_backend(
                    model,
                    config,
                    ProviderKind::Replicate,
                    credentials,
                    backends.provider_circuits(),
                    backends.provider_budgets(),
                )
                .map_err(|error| invalid(format!("{model_id}: {error}")))?;
                backends.set_for_model(&model_id, backend);
            }
            ModelBackendConfig::Failover(config) => {
                let mut providers = Vec::new();
                for provider in config.providers {
                    let (config, kind) = provider.into_parts();
                    providers.push(
                        hosted_backend(
                            model,
                            config,
                            kind,
                            credentials,
                            backends.provider_circuits(),
                            backends.provider_budgets(),
                        )
                        .map_err(|error| invalid(format!("{model_id}: {error}")))?,
                    );
                }
                let backend = FailoverBackend::new(&model_id, providers)
                    .map_err(|error| invalid(format!("{model_id}: {error}")))?;
                backends.set_for_model(&model_id, Arc::new(backend));
            }
        }
    }
    Ok(())
}

/// A provider credential's request budget as a backends file sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredBudget {
    /// `fal` or `replicate`.
    pub provider: &'static str,
    /// The environment variable that holds the credential.
    pub credential_env: String,
    pub limits: super::BudgetLimits,
}

/// The request budget of each provider credential that a backends file
/// names, resolved as a server resolves them (defaults and overrides,
/// checked), without reading the credentials: for `vidgate admin
/// providers`, which runs beside the database rather than in a server.
/// Models of one provider and credential variable share one entry.
pub fn budgets_in_backends_file(path: &Path) -> Result<Vec<ConfiguredBudget>, BackendsFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| BackendsFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let invalid = |reason: String| BackendsFileError::Invalid {
        path: shown.clone(),
        reason,
    };
    let file: BackendsFile =
        serde_json::from_str(&text).map_err(|error| invalid(error.to_string()))?;
    let mut budgets: Vec<ConfiguredBudget> = Vec::new();
    for (model_id, config) in file.models {
        let hosted: Vec<(HostedModelConfig, ProviderKind)> = match config {
            ModelBackendConfig::Cog(_) => Vec::new(),
            ModelBackendConfig::Fal(config) => vec![(config, ProviderKind::Fal)],
            ModelBackendConfig::Replicate(config) => vec![(config, ProviderKind::Replicate)],
            ModelBackendConfig::Failover(config) => config
                .providers
                .into_iter()
                .map(HostedProviderConfig::into_parts)
                .collect(),
        };
        for (config, kind) in hosted {
            let limits = super::BudgetLimits::resolve(&config.budget.clone().unwrap_or_default())
                .map_err(|error| invalid(format!("{model_id}: {error}")))?;
            let credential_env = config
                .credential_env
                .clone()
                .unwrap_or_else(|| kind.default_credential_env().to_owned());
            let provider = kind.name();
            match budgets.iter_mut().find(|budget| {
                budget.provider == provider && budget.credential_env == credential_env
            }) {
                // A model that gives the budget wins over one that leaves
                // the defaults, as in a server.
                Some(known) if config.budget.is_some() => known.limits = limits,
                Some(_) => {}
                None => budgets.push(ConfiguredBudget {
                    provider,
                    credential_env,
                    limits,
                }),
            }
        }
    }
    Ok(budgets)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(file: &Value) -> Result<Backends, BackendsFileError> {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("backends.json");
        std::fs::write(&path, file.to_string()).unwrap();
        let mut backends = Backends::builtin(false);
        apply_backends_file(&mut backends, &path, &Catalog::embedded()).map(|()| backends)
    }

    #[tokio::test]
    async fn a_providers_budget_is_read_from_the_file_and_bad_values_are_refused() {
        let replicate = |budget: Value| {
            json!({ "models": { "vendor_1/model_1": {
                "backend": "replicate",
                "modes": { "text-to-video": { "target": "alibaba/wan-3" } },
                "budget": budget,
            } } })
        };
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("backends.json");
        std::fs::write(
            &path,
            replicate(json!({ "creates_per_minute": 60, "nodes": 3 })).to_string(),
        )
        .unwrap();
        let budgets = budgets_in_backends_file(&path).unwrap();
        assert_eq!(budgets.len(), 1);
        assert_eq!(budgets[0].provider, "replicate");
        assert_eq!(budgets[0].credential_env, "REPLICATE_API_TOKEN");
        assert_eq!(budgets[0].limits.creates.per_minute, 60);
        assert_eq!(budgets[0].limits.creates.burst, 3);
        assert_eq!(budgets[0].limits.others.per_minute, 3000);
        assert_eq!(budgets[0].limits.nodes, 3);
        for (budget, expected) in [
            (
                json!({ "creates_per_minute": 0 }),
                "creates_per_minute must be at least 2",
            ),
            (
                json!({ "others_burst": 5000 }),
                "others_burst must be at least 1 and less than",
            ),
            (json!({ "nodes": 0 }), "nodes must be at least 1"),
            (
                json!({ "max_in_flight": 0 }),
                "max_in_flight must be at least 1",
            ),
            (json!({ "creates_per_minute": -5 }), "invalid value"),
            (json!({ "creates_per_hour": 5 }), "unknown field"),
        ] {
            let error = apply(&replicate(budget.clone()))
                .err()
                .expect("the file is refused")
                .to_string();
            assert!(error.contains(expected), "{budget}: {error}");
        }
    }

    #[tokio::test]
    async fn a_backends_file_must_name_catalog_models_and_known_fields() {
        let cog = |extra: Value| {
            let mut model = json!({ "backend": "cog", "base_url": "http://127.0.0.1:9" });
            model
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            model
        };
        let backends = apply(&json!({ "models": { "vendor_1/model_1": cog(json!({})) } })).unwrap();
        let model = Catalog::embedded()
            .model("vendor_1/model_1")
            .unwrap()
            .clone();
        assert!(backends.for_model(&model).is_some());

        for (file, expected) in [
            (
                json!({ "models": { "vendor_9/nope": cog(json!({})) } }),
                "not a model in the catalog",
            ),
            (
                json!({ "models": { "vendor_1/model_1": cog(json!({ "concurency": 2 })) } }),
                "unknown field",
            ),
            (
                json!({ "models": { "vendor_1/model_1": cog(json!({ "concurrency": 0 })) } }),
                "at least 1",
            ),
            (
                json!({ "models": { "vendor_1/model_1": cog(json!({ "base_url": "file:///tmp" })) } }),
                "http(s) URL",
            ),
            (
                json!({ "models": { "vendor_1/model_1": { "backend": "triton" } } }),
                "unknown variant",
            ),
        ] {
            let error = apply(&file).err().expect("the file is refused").to_string();
            assert!(error.contains(expected), "{error}");
        }
    }
}
