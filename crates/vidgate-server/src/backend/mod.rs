//! Backends run jobs. The worker hands a backend a claimed job outside any
//! database transaction; the backend returns a finished clip or a failure
//! (`contract.rs`). The embedded local engine is the reference
//! implementation; adapters for real model servers implement the same
//! trait: Cog servers (`cog.rs`) and hosted providers (`hosted/`). This
//! file builds them: the one place where the backends file's plain
//! configuration (`backends_file.rs`) meets the node's live parts
//! (`parts.rs`).

mod backends_file;
mod cog;
mod cog_config;
mod contract;
pub mod hosted;
mod local;
mod output;
mod parts;

pub use hosted::webhook_urls::{
    ProviderWebhookUrls, loggable_path as loggable_provider_webhook_path,
};

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use backends_file::ModelPlan;
pub use backends_file::{
    BackendsConfig, BackendsFile, BackendsFileError, ConfiguredBudget, FailoverConfig,
    ModelBackendConfig, apply_backends_file, apply_backends_file_with_credentials,
    budgets_in_backends_file, check_provider_schemas,
};
pub use cog::{CogBackend, CogCallbacks};
pub use cog_config::{CogModelConfig, CogTimeouts};
pub use contract::{
    Admission, Backend, ClipBytes, Job, JobFailure, Rejection, RenderedClip, StartedJobCancel,
    WebhookReceipt, WebhookRefusal, WebhookRejection,
};
pub use hosted::HostedBackend;
use hosted::budget::ProviderBudgets;
pub use hosted::budget::{BudgetConfig, BudgetLimits, ClassLimit};
use hosted::circuit::ProviderCircuits;
use hosted::failover::FailoverBackend;
pub use hosted::model_config::{
    FieldMapping, HostedModeConfig, HostedModelConfig, HostedTimeouts, PlannedInput, PlannedInputs,
    RefusedInput, Unserved,
};
use hosted::plan::{HostedParts, HostedPlan};
pub use hosted::providers::SchemaUnread;
pub use hosted::schema_check::TargetCheck;
pub use local::LocalEngineBackend;
pub use parts::BackendParts;

/// Why the backends of a checked configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the backend of {model_id} could not be built: {reason}")]
pub struct BackendBuildError {
    pub model_id: String,
    pub reason: String,
}

/// Which backend runs which model. The catalog names a backend per model; an
/// operator (or a test) can override it for single models.
#[derive(Clone)]
pub struct Backends {
    by_name: HashMap<String, Arc<dyn Backend>>,
    by_model: HashMap<String, Arc<dyn Backend>>,
    /// Predictions of Cog backends waiting for their completion webhooks,
    /// shared with the HTTP route that receives them.
    cog_callbacks: Arc<CogCallbacks>,
    /// The provider webhook URLs, whose tokens the HTTP route checks.
    provider_webhooks: ProviderWebhookUrls,
}

impl Backends {
    /// Builds every backend that `config` describes, each with the parts it
    /// needs, so that no job can find one missing.
    pub fn build(
        config: &BackendsConfig,
        parts: &BackendParts,
    ) -> Result<Backends, BackendBuildError> {
        let mut by_name: HashMap<String, Arc<dyn Backend>> = HashMap::new();
        by_name.insert(
            "local".into(),
            Arc::new(LocalEngineBackend::new(
                config.simulation(),
                parts.media_fetcher.clone(),
            )),
        );
        let shared = SharedByBackends {
            cog_callbacks: Arc::new(CogCallbacks::new(parts.cog_callback_base.as_deref())),
            provider_circuits: ProviderCircuits::new(parts.store.clone()),
            provider_budgets: Arc::new(ProviderBudgets::new(
                parts.rate_limiter.clone(),
                parts.metrics.clone(),
            )),
        };
        let mut by_model = HashMap::new();
        for (model_id, plan) in config.models() {
            let backend =
                plan.build(model_id, parts, &shared)
                    .map_err(|reason| BackendBuildError {
                        model_id: model_id.to_owned(),
                        reason,
                    })?;
            by_model.insert(model_id.to_owned(), backend);
        }
        Ok(Backends {
            by_name,
            by_model,
            cog_callbacks: shared.cog_callbacks,
            provider_webhooks: parts.provider_webhooks.clone(),
        })
    }

    /// Whether a queued job of `model` could be sent on now (see
    /// `Backend::create_ready`): the claim loop leaves a model's jobs
    /// queued while this is false. A create still waits for its own token,
    /// as another node may have taken it.
    pub fn create_ready(&self, model: &vidgate_core::Model) -> bool {
        self.for_model(model)
            .is_none_or(|backend| backend.create_ready())
    }

    /// Counts the create of a job of `model` just claimed as taken (see
    /// `Backend::promise_create`).
    pub fn promise_create(&self, model: &vidgate_core::Model) {
        if let Some(backend) = self.for_model(model) {
            backend.promise_create();
        }
    }

    pub fn cog_callbacks(&self) -> &Arc<CogCallbacks> {
        &self.cog_callbacks
    }

    pub fn provider_webhooks(&self) -> &ProviderWebhookUrls {
        &self.provider_webhooks
    }

    /// Wakes this process's follower of `generation_id`'s provider job,
    /// whichever model's backend has it (another node took its webhook).
    pub fn wake_follower(&self, generation_id: &str) -> bool {
        self.by_model
            .values()
            .chain(self.by_name.values())
            .any(|backend| backend.wake_follower(generation_id))
    }

    /// Wakes this process's followers of the jobs whose webhooks other nodes
    /// took, until `shutdown`; a job-running node's task. Where the store
    /// carries no announcements (SQLite) it ends at once.
    pub fn spawn_announced_webhook_wakeups(
        &self,
        store: Arc<crate::store::Store>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let backends = self.clone();
        tokio::spawn(async move {
            let Some(mut announcements) = store.provider_jobs().webhook_announcements().await
            else {
                return;
            };
            loop {
                let announced = tokio::select! {
                    () = shutdown.cancelled() => return,
                    announced = announcements.recv() => announced,
                };
                match announced {
                    Ok(generation_id) => {
                        backends.wake_follower(&generation_id);
                    }
                    // Wake-ups missed by falling behind are covered by the
                    // followers' polling.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        })
    }

    pub fn for_model(&self, model: &vidgate_core::Model) -> Option<Arc<dyn Backend>> {
        self.by_model
            .get(&model.id)
            .or_else(|| self.by_name.get(&model.backend))
            .cloned()
    }
}

/// What the backends of one node share while they are built: the Cog
/// callbacks, each provider's circuit and each credential's budget.
struct SharedByBackends {
    cog_callbacks: Arc<CogCallbacks>,
    provider_circuits: ProviderCircuits,
    provider_budgets: Arc<ProviderBudgets>,
}

impl ModelPlan {
    /// Builds the model's backend with the node's parts. Only what the
    /// file could not show fails here (an HTTP client that cannot start).
    fn build(
        &self,
        model_id: &str,
        parts: &BackendParts,
        shared: &SharedByBackends,
    ) -> Result<Arc<dyn Backend>, String> {
        let hosted_parts = HostedParts {
            store: &parts.store,
            storage: &parts.storage,
            webhook_urls: &parts.provider_webhooks,
            circuits: &shared.provider_circuits,
            budgets: &shared.provider_budgets,
            metrics: &parts.metrics,
        };
        let hosted = |plan: &HostedPlan| plan.build(&hosted_parts);
        let backend: Arc<dyn Backend> = match self {
            ModelPlan::Cog(config) => CogBackend::new(
                model_id,
                config.clone(),
                shared.cog_callbacks.clone(),
                parts.storage.clone(),
            )
            .map_err(|error| error.to_string())?,
            ModelPlan::Hosted(plan) => hosted(plan.as_ref())?,
            ModelPlan::Failover(plans, routing) => Arc::new(FailoverBackend::new(
                model_id,
                plans.iter().map(hosted).collect::<Result<_, _>>()?,
                *routing,
                parts.store.clone(),
                parts.metrics.clone(),
            )),
            ModelPlan::Custom(build) => build(parts),
        };
        Ok(backend)
    }
}
