//! A model at a hosted provider as a plan, and the factory of its backend:
//! the model's entry of the backends file checked against its catalog
//! model, its credential read and its request budget resolved when the file
//! is read, and the live backend built from the plan once the node's parts
//! exist.

use std::sync::Arc;

use super::HostedBackend;
use super::budget::{
    BudgetLimits, BudgetedProtocol, BudgetsInFile, ProviderBudget, ProviderBudgets,
};
use super::circuit::{ObservedProtocol, ProviderCircuit, ProviderCircuits};
use super::model_config::{HostedModelConfig, check_provider_url, seconds};
use super::protocol::ProviderProtocol;
use super::providers::{self, Provider};
use super::webhook_urls::ProviderWebhookUrls;
use crate::storage::Storage;
use crate::store::Store;

/// The node's live parts a hosted backend is built with, which
/// `Backends::build` hands over: its store and storage, the webhook URLs,
/// and the circuits and budgets every hosted backend of the node shares.
pub(in crate::backend) struct HostedParts<'a> {
    pub store: &'a Arc<Store>,
    pub storage: &'a Arc<Storage>,
    pub webhook_urls: &'a ProviderWebhookUrls,
    pub circuits: &'a ProviderCircuits,
    pub budgets: &'a ProviderBudgets,
    pub metrics: &'a Arc<crate::metrics::Metrics>,
}

/// A model at a hosted provider as the backends file describes it, checked
/// against its catalog model, with its credential and request budget
/// resolved: everything but the node's live parts.
#[derive(Clone)]
pub(in crate::backend) struct HostedPlan {
    pub(super) model_id: String,
    pub(super) config: HostedModelConfig,
    provider: Provider,
    /// The environment variable that held the credential, which names the
    /// budget in logs and metrics.
    credential_env: String,
    credential: String,
    limits: BudgetLimits,
}

impl HostedPlan {
    /// Checks one model's entry of the backends file against the catalog
    /// model. `credentials` looks an environment variable up (the process
    /// environment, or a test's map).
    pub(in crate::backend) fn new(
        model: &vidgate_core::Model,
        config: HostedModelConfig,
        provider: Provider,
        credentials: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HostedPlan, String> {
        config.check(model)?;
        let credential_env = providers::credential_env(provider, &config);
        check_credential_env(&credential_env)?;
        let credential = credentials(&credential_env)
            .filter(|value| !value.trim().is_empty())
            .ok_or_else(|| format!("the credential variable {credential_env} is not set"))?;
        if let Some(url) = &config.api_url {
            check_provider_url(url)?;
        }
        providers::check_settings(provider, &config)?;
        let limits = BudgetLimits::resolve(&providers::budget_of(provider, &config))?;
        Ok(HostedPlan {
            model_id: model.id.clone(),
            config,
            provider,
            credential_env,
            credential,
            limits,
        })
    }

    pub(in crate::backend) fn provider(&self) -> Provider {
        self.provider
    }

    /// Adds this model's request budget to those of the file, refusing one
    /// that another model of the same credential contradicts.
    pub(in crate::backend) fn add_budget(&self, budgets: &mut BudgetsInFile) -> Result<(), String> {
        budgets.add(
            self.provider.name(),
            &self.credential,
            self.limits,
            self.config.budget.is_some(),
        )
    }

    /// Builds the backend with the node's parts; its calls feed its
    /// provider's circuit and take their tokens from its credential's
    /// budget.
    pub(in crate::backend) fn build(
        &self,
        parts: &HostedParts<'_>,
    ) -> Result<Arc<HostedBackend>, String> {
        let config = &self.config;
        let protocol = self.provider.client(
            config,
            self.credential.clone(),
            seconds(config.timeouts.request_seconds),
        )?;
        let circuit = parts.circuits.circuit(protocol.name());
        let budget = parts.budgets.budget(
            protocol.name(),
            &self.credential_env,
            &self.credential,
            self.limits,
            config.budget.is_some(),
        )?;
        Ok(Arc::new(HostedBackend::new(
            self, protocol, circuit, budget, parts,
        )?))
    }
}

impl HostedBackend {
    fn new(
        plan: &HostedPlan,
        protocol: Arc<dyn ProviderProtocol>,
        circuit: Arc<ProviderCircuit>,
        budget: Arc<ProviderBudget>,
        parts: &HostedParts<'_>,
    ) -> Result<HostedBackend, String> {
        let output_client = reqwest::Client::builder()
            // An output link that redirects elsewhere is not followed with
            // any credential; plain redirects of a CDN are.
            .redirect(reqwest::redirect::Policy::limited(3))
            .no_proxy()
            .build()
            .map_err(|error| format!("the HTTP client could not start: {error}"))?;
        Ok(HostedBackend {
            model_id: plan.model_id.clone(),
            config: plan.config.clone(),
            protocol: Arc::new(BudgetedProtocol::new(
                Arc::new(ObservedProtocol::new(protocol, circuit.clone())),
                budget,
            )),
            circuit,
            store: parts.store.clone(),
            storage: parts.storage.clone(),
            output_client,
            webhook_urls: parts.webhook_urls.clone(),
            following: Arc::default(),
            latencies: Arc::default(),
            metrics: parts.metrics.clone(),
        })
    }
}

/// Refuses a `credential_env` that could name anything but a provider
/// credential: the variable's value is sent to the file's `api_url`, so a
/// file that named `VIDGATE_DATABASE_URL` or a bucket's secret would send
/// it there. A provider credential is a variable of capitals, digits and
/// underscores that ends in `_KEY` or `_TOKEN` (`FAL_KEY`,
/// `REPLICATE_API_TOKEN`, `TEAM_FAL_KEY`), and none of vidgate's own
/// (`VIDGATE_…`) or the object store's (`AWS_…`).
fn check_credential_env(name: &str) -> Result<(), String> {
    let shaped = !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b'_')
        && (name.ends_with("_KEY") || name.ends_with("_TOKEN"));
    let reserved = ["VIDGATE_", "AWS_"]
        .iter()
        .any(|prefix| name.starts_with(prefix));
    if !shaped || reserved {
        return Err(format!(
            "credential_env {name:?} is not a provider credential variable: it must end in _KEY \
             or _TOKEN (FAL_KEY, REPLICATE_API_TOKEN, …) and not start with VIDGATE_ or AWS_"
        ));
    }
    Ok(())
}
