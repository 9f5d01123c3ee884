//! The backends file (`--backends-file`, JSON): which catalog models run on
//! which remote model server, and how. This module owns the file's format,
//! its parsing and its checks, which turn it into a `BackendsConfig`: plain
//! configuration, with no live part, that start-up builds the backends from
//! once the node's parts exist (`Backends::build`, in `mod.rs`). Each
//! protocol (Cog in `cog.rs`, the hosted providers in `hosted/`) owns only
//! how a job is run. A model's entry names its backend in the `backend`
//! field: `cog`, `failover`, or a hosted provider's name, which the
//! provider registers itself (`hosted/providers/`), so a new provider
//! changes nothing here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use vidgate_core::Catalog;

use super::cog_config::CogModelConfig;
use super::contract::Backend;
use super::hosted::budget::BudgetLimits;
use super::hosted::budget::BudgetsInFile;
use super::hosted::entry::{self, HostedEntry};
use super::hosted::failover::{self, Routing};
use super::hosted::plan::HostedPlan;
use super::hosted::providers::{self, PROVIDERS};
use super::hosted::route::{Route, Unpriced};
use super::hosted::schema_check::{TargetCheck, check_hosted_entries};
use super::parts::BackendParts;

/// Which backend runs which model, as the options say: the built-in local
/// engine (with its test hooks or not) and the models of a backends file,
/// each checked. Start-up builds the `Backends` from it and the node's
/// `BackendParts`.
#[derive(Clone)]
pub struct BackendsConfig {
    simulation: bool,
    models: BTreeMap<String, ModelPlan>,
}

/// How one model's backend is built (`ModelPlan::build`, in `mod.rs`).
#[derive(Clone)]
pub(super) enum ModelPlan {
    Cog(CogModelConfig),
    Hosted(Box<HostedPlan>),
    /// Several hosted providers, checked by `failover::check_providers`,
    /// and how a job is routed among them.
    Failover(Vec<HostedPlan>, Routing),
    /// A backend the caller builds from the node's parts (a test's).
    Custom(BuildBackend),
}

/// Builds a caller's own backend from the node's parts.
pub type BuildBackend = Arc<dyn Fn(&BackendParts) -> Arc<dyn Backend> + Send + Sync>;

impl BackendsConfig {
    /// The backends built into the binary: the local engine, whose
    /// `[sim:…]` prompt markers steer jobs when `simulation` is on.
    pub fn builtin(simulation: bool) -> BackendsConfig {
        BackendsConfig {
            simulation,
            models: BTreeMap::new(),
        }
    }

    /// Runs `model_id` on the backend `build` makes from the node's parts
    /// instead of the backend the catalog names.
    pub fn set_for_model(
        &mut self,
        model_id: &str,
        build: impl Fn(&BackendParts) -> Arc<dyn Backend> + Send + Sync + 'static,
    ) {
        self.models
            .insert(model_id.to_owned(), ModelPlan::Custom(Arc::new(build)));
    }

    pub(super) fn simulation(&self) -> bool {
        self.simulation
    }

    pub(super) fn models(&self) -> impl Iterator<Item = (&str, &ModelPlan)> {
        self.models
            .iter()
            .map(|(model_id, plan)| (model_id.as_str(), plan))
    }
}

/// The backends file: which models run on which model server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendsFile {
    pub models: BTreeMap<String, ModelBackendConfig>,
}

/// How one model is run: on a Cog-compatible server, at one hosted
/// provider (fal, Replicate; see docs/upstreams.md), or at several in
/// order.
#[derive(Debug)]
pub enum ModelBackendConfig {
    Cog(CogModelConfig),
    Hosted(Box<HostedEntry>),
    /// Several hosted providers in order (see `hosted/failover.rs`).
    Failover(FailoverConfig),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverConfig {
    /// The providers, first choice first, each a different one.
    pub providers: Vec<HostedEntry>,
    /// How a job is routed among them: `order` (the default: the first
    /// healthy one), `price` (the cheapest by its `costs` lines) or
    /// `latency` (the fastest lately).
    #[serde(default)]
    pub route: Route,
    /// Whether a provider whose cost for a request is above its price may
    /// take it; by default it is skipped, so routing never sells at a loss
    /// by accident.
    #[serde(default)]
    pub allow_loss: bool,
    /// What a provider with no `costs` line for a request gets: `leave_out`
    /// (the loss guard cannot rule a loss out, so it is left out: the
    /// default with `route: price`) or `after_priced` (tried after every
    /// priced provider, in the file's order: the default with `order` and
    /// `latency`).
    #[serde(default)]
    pub unpriced: Option<Unpriced>,
}

impl ModelBackendConfig {
    /// The model's entries at hosted providers, in the file's order: none
    /// for a Cog model.
    pub fn into_hosted_entries(self) -> Vec<HostedEntry> {
        match self {
            ModelBackendConfig::Cog(_) => Vec::new(),
            ModelBackendConfig::Hosted(entry) => vec![*entry],
            ModelBackendConfig::Failover(failover) => failover.providers,
        }
    }
}

/// Every `backend` a model's entry may name, as serde's message for an
/// unknown one lists them.
static BACKEND_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    std::iter::once("cog")
        .chain(PROVIDERS.iter().map(|provider| provider.name()))
        .chain(std::iter::once("failover"))
        .collect()
});

impl<'de> Deserialize<'de> for ModelBackendConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (backend, fields) = entry::tagged(deserializer)?;
        match backend.as_str() {
            "cog" => entry::settings::<_, D>(fields).map(ModelBackendConfig::Cog),
            "failover" => entry::settings::<_, D>(fields).map(ModelBackendConfig::Failover),
            name => match HostedEntry::at::<D>(name, fields)? {
                Some(entry) => Ok(ModelBackendConfig::Hosted(Box::new(entry))),
                None => Err(D::Error::unknown_variant(name, BACKEND_NAMES.as_slice())),
            },
        }
    }
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
/// it describes, checking every entry now: a file that `vidgate serve
/// --check-config` accepts builds. Provider credentials come from the
/// process environment: the variable itself or the file its `_FILE`
/// variant names (a file that cannot be read counts as no credential).
pub fn apply_backends_file(
    backends: &mut BackendsConfig,
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
    backends: &mut BackendsConfig,
    path: &Path,
    catalog: &Catalog,
    credentials: &dyn Fn(&str) -> Option<String>,
) -> Result<(), BackendsFileError> {
    let file = read_backends_file(path)?;
    let invalid = |reason: String| BackendsFileError::Invalid {
        path: path.display().to_string(),
        reason,
    };
    let mut budgets = BudgetsInFile::default();
    for (model_id, config) in file.models {
        let Some(model) = catalog.model(&model_id) else {
            return Err(invalid(format!(
                "{model_id:?} is not a model in the catalog"
            )));
        };
        let in_model = |error: String| invalid(format!("{model_id}: {error}"));
        let mut hosted = |HostedEntry { provider, config }: HostedEntry| {
            let plan = HostedPlan::new(model, config, provider, credentials).map_err(in_model)?;
            plan.add_budget(&mut budgets).map_err(in_model)?;
            Ok::<HostedPlan, BackendsFileError>(plan)
        };
        let plan = match config {
            ModelBackendConfig::Cog(config) => {
                if url::Url::parse(&config.base_url)
                    .ok()
                    .is_none_or(|url| !matches!(url.scheme(), "http" | "https"))
                {
                    return Err(in_model("base_url must be an http(s) URL".into()));
                }
                if config.concurrency == 0 {
                    return Err(in_model("concurrency must be at least 1".into()));
                }
                ModelPlan::Cog(config)
            }
            ModelBackendConfig::Hosted(entry) => ModelPlan::Hosted(Box::new(hosted(*entry)?)),
            ModelBackendConfig::Failover(config) => {
                let plans = config
                    .providers
                    .into_iter()
                    .map(hosted)
                    .collect::<Result<Vec<HostedPlan>, _>>()?;
                let names: Vec<&'static str> =
                    plans.iter().map(|plan| plan.provider().name()).collect();
                failover::check_providers(&names).map_err(in_model)?;
                ModelPlan::Failover(
                    plans,
                    Routing {
                        route: config.route,
                        allow_loss: config.allow_loss,
                        unpriced: config
                            .unpriced
                            .unwrap_or(Unpriced::default_for(config.route)),
                    },
                )
            }
        };
        backends.models.insert(model_id, plan);
    }
    Ok(())
}

/// Reads and parses a backends file; what is in it is checked by its users.
fn read_backends_file(path: &Path) -> Result<BackendsFile, BackendsFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| BackendsFileError::Read {
        path: shown.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|error| BackendsFileError::Invalid {
        path: shown,
        reason: error.to_string(),
    })
}

/// Checks every hosted target of the backends file at `path` against its
/// provider's current schema (`hosted/schema_check.rs`). `credentials`
/// looks an environment variable up (Replicate's model API needs the token;
/// fal's documents are public).
pub async fn check_provider_schemas(
    path: &Path,
    catalog: &Catalog,
    credentials: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<TargetCheck>, BackendsFileError> {
    let file = read_backends_file(path)?;
    let hosted = file.models.into_iter().flat_map(|(model_id, entry)| {
        entry
            .into_hosted_entries()
            .into_iter()
            .map(move |hosted| (model_id.clone(), hosted))
    });
    Ok(check_hosted_entries(hosted, catalog, credentials).await)
}

/// A provider credential's request budget as a backends file sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredBudget {
    /// The provider's name.
    pub provider: &'static str,
    /// The environment variable that holds the credential.
    pub credential_env: String,
    pub limits: BudgetLimits,
}

/// The request budget of each provider credential that a backends file
/// names, resolved as a server resolves them (defaults and overrides,
/// checked), without reading the credentials: for `vidgate admin
/// providers`, which runs beside the database rather than in a server.
/// Models of one provider and credential variable share one entry.
pub fn budgets_in_backends_file(path: &Path) -> Result<Vec<ConfiguredBudget>, BackendsFileError> {
    let file = read_backends_file(path)?;
    let invalid = |reason: String| BackendsFileError::Invalid {
        path: path.display().to_string(),
        reason,
    };
    let mut budgets: Vec<ConfiguredBudget> = Vec::new();
    for (model_id, config) in file.models {
        for HostedEntry { provider, config } in config.into_hosted_entries() {
            let limits = BudgetLimits::resolve(&providers::budget_of(provider, &config))
                .map_err(|error| invalid(format!("{model_id}: {error}")))?;
            let credential_env = providers::credential_env(provider, &config);
            let provider = provider.name();
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
    use serde_json::{Value, json};

    use super::*;
    use crate::backend::hosted::budget::ClassLimit;

    fn apply(file: &Value) -> Result<BackendsConfig, BackendsFileError> {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("backends.json");
        std::fs::write(&path, file.to_string()).unwrap();
        let mut backends = BackendsConfig::builtin(false);
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

    /// Issue 40: a maker's documented limits are its provider's default
    /// budget, not only a setting of its example file. ModelArk's 120
    /// queued tasks per account bound the tasks in flight; DashScope's 20
    /// task queries a second bound the other calls. A value the file gives
    /// replaces only that value.
    #[test]
    fn a_makers_documented_limits_are_its_default_budget() {
        let budgets_of = |file: Value| {
            let directory = tempfile::tempdir().unwrap();
            let path = directory.path().join("backends.json");
            std::fs::write(&path, file.to_string()).unwrap();
            budgets_in_backends_file(&path).unwrap()
        };
        let example = |name: &str| -> Value {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples/hosted")
                .join(name);
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };

        let modelark = example("modelark.json");
        assert!(
            modelark["models"]["vendor_4/model_4"]
                .get("budget")
                .is_none(),
            "the example file relies on the default"
        );
        let budgets = budgets_of(modelark.clone());
        assert_eq!(budgets.len(), 1);
        assert_eq!(budgets[0].provider, "modelark");
        assert_eq!(budgets[0].limits.max_in_flight, Some(120));
        assert_eq!(budgets[0].limits.creates.per_minute, 600);
        assert_eq!(budgets[0].limits.others.per_minute, 3000);

        let dashscope = example("dashscope.json");
        assert!(
            dashscope["models"]["vendor_1/model_1"]
                .get("budget")
                .is_none()
        );
        let budgets = budgets_of(dashscope);
        assert_eq!(budgets[0].provider, "dashscope");
        assert_eq!(
            budgets[0].limits.others,
            ClassLimit {
                per_minute: 600,
                burst: 10
            }
        );
        assert_eq!(budgets[0].limits.creates.per_minute, 600);
        assert_eq!(budgets[0].limits.max_in_flight, None);

        // The file's own values win one by one: a smaller ceiling of tasks
        // in flight (an account shared with other software), the rest kept.
        let mut shared = modelark.clone();
        shared["models"]["vendor_4/model_4"]["budget"] =
            json!({ "max_in_flight": 40, "creates_per_minute": 60 });
        let budgets = budgets_of(shared);
        assert_eq!(budgets[0].limits.max_in_flight, Some(40));
        assert_eq!(budgets[0].limits.creates.per_minute, 60);
        assert_eq!(budgets[0].limits.others.per_minute, 3000);
        let mut slower = modelark;
        slower["models"]["vendor_4/model_4"]["budget"] = json!({ "nodes": 2 });
        let budgets = budgets_of(slower);
        assert_eq!(budgets[0].limits.max_in_flight, Some(120));
        assert_eq!(budgets[0].limits.nodes, 2);

        // A figure per minute of the file's own takes its own burst, not
        // the one sized for DashScope's documented figure.
        let mut dashscope = example("dashscope.json");
        dashscope["models"]["vendor_1/model_1"]["budget"] = json!({ "others_per_minute": 100 });
        let budgets = budgets_of(dashscope);
        assert_eq!(
            budgets[0].limits.others,
            ClassLimit {
                per_minute: 100,
                burst: 5
            }
        );

        // Providers without documented limits per minute keep vidgate's own.
        let fal = budgets_of(example("fal.json"));
        assert_eq!(fal[0].limits.max_in_flight, None);
        assert_eq!(fal[0].limits.others.per_minute, 3000);
    }

    /// Issue 38, item 7: a backends file can send only a provider
    /// credential, and only over https (plain http to loopback aside).
    #[tokio::test]
    async fn a_provider_credential_goes_only_to_a_provider_over_https() {
        let example: Value =
            serde_json::from_str(include_str!("../../../../examples/hosted/fal.json")).unwrap();
        let fal = |extra: Value| {
            let mut model = example["models"]["vendor_1/model_1"].clone();
            model
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json!({ "models": { "vendor_1/model_1": model } })
        };
        let apply_with_every_variable = |file: &Value| {
            let directory = tempfile::tempdir().unwrap();
            let path = directory.path().join("backends.json");
            std::fs::write(&path, file.to_string()).unwrap();
            let mut backends = BackendsConfig::builtin(false);
            let credentials = |_: &str| Some("a-set-value".to_owned());
            apply_backends_file_with_credentials(
                &mut backends,
                &path,
                &Catalog::embedded(),
                &credentials,
            )
        };
        for (extra, expected) in [
            (
                json!({ "credential_env": "VIDGATE_DATABASE_URL" }),
                "not a provider credential variable",
            ),
            (
                json!({ "credential_env": "AWS_SECRET_ACCESS_KEY" }),
                "not a provider credential variable",
            ),
            (
                json!({ "credential_env": "HOME" }),
                "must end in _KEY or _TOKEN",
            ),
            (
                json!({ "credential_env": "fal_key" }),
                "not a provider credential variable",
            ),
            (
                json!({ "api_url": "http://fal.example/queue" }),
                "plain http to another machine",
            ),
            (
                json!({ "api_url": "https://fal.example/queue",
                        "platform_url": "http://10.0.0.7/api" }),
                "plain http to another machine",
            ),
            (
                json!({ "jwks_url": "ftp://fal.example/jwks.json" }),
                "not an http(s) URL",
            ),
        ] {
            let Err(error) = apply_with_every_variable(&fal(extra.clone())) else {
                panic!("{extra}: the file is refused");
            };
            let error = error.to_string();
            assert!(error.contains(expected), "{extra}: {error}");
        }
        for accepted in [
            json!({}),
            json!({ "credential_env": "TEAM_FAL_KEY" }),
            json!({ "credential_env": "FAL_API_TOKEN",
                    "api_url": "http://127.0.0.1:9/queue", "platform_url": "http://[::1]:9",
                    "jwks_url": "http://localhost:9/jwks.json" }),
            json!({ "api_url": "https://fal.example/queue" }),
        ] {
            apply_with_every_variable(&fal(accepted.clone()))
                .unwrap_or_else(|error| panic!("{accepted}: {error}"));
        }
    }

    /// Issue 52, item 6: a setting that one provider alone takes (fal's
    /// `platform_url`, …) is written in the entry like the shared ones, and
    /// refused by name at any other provider, alone or in a failover.
    #[tokio::test]
    async fn a_setting_of_one_provider_is_refused_by_name_at_another() {
        let apply_with_every_variable = |file: &Value| {
            let directory = tempfile::tempdir().unwrap();
            let path = directory.path().join("backends.json");
            std::fs::write(&path, file.to_string()).unwrap();
            let mut backends = BackendsConfig::builtin(false);
            let credentials = |_: &str| Some("a-set-value".to_owned());
            apply_backends_file_with_credentials(
                &mut backends,
                &path,
                &Catalog::embedded(),
                &credentials,
            )
        };
        let fal_example: Value =
            serde_json::from_str(include_str!("../../../../examples/hosted/fal.json")).unwrap();
        for provider in crate::backend::hosted::providers::PROVIDERS {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(provider.example_file());
            let example: Value =
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            let (model_id, entry) = example["models"]
                .as_object()
                .unwrap()
                .iter()
                .next()
                .unwrap();
            for (setting, value) in [
                ("platform_url", json!("https://api.fal.example")),
                ("jwks_url", json!("https://fal.example/jwks.json")),
                ("schema_url", json!("https://fal.example/openapi.json")),
                ("webhook_user_id", json!("a-user")),
            ] {
                let mut entry = entry.clone();
                entry[setting] = value;
                if provider.name() == "fal" {
                    entry["api_url"] = json!("https://queue.fal.example");
                }
                let alone = json!({ "models": { model_id: entry.clone() } });
                if provider.name() == "fal" {
                    apply_with_every_variable(&alone)
                        .unwrap_or_else(|error| panic!("{setting} at fal: {error}"));
                    continue;
                }
                let in_failover = json!({ "models": { model_id: {
                    "backend": "failover",
                    "providers": [fal_example["models"][model_id].clone(), entry] } } });
                for file in [alone, in_failover] {
                    let applied = apply_with_every_variable(&file);
                    let error = applied.expect_err("the file is refused").to_string();
                    assert!(
                        error.contains(&format!("{setting} is for fal only")),
                        "{setting} at {}: {error}",
                        provider.name()
                    );
                }
            }
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
        assert!(matches!(
            backends.models.get("vendor_1/model_1"),
            Some(ModelPlan::Cog(_))
        ));

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
