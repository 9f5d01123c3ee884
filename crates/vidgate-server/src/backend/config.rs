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
