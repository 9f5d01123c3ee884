//! A model at several hosted providers (`"backend": "failover"` in the
//! backends file), chosen per job by the entry's `route` (`route.rs`: the
//! operator's order, the cheapest, or the fastest). Admission takes a job
//! while any of the model's providers for its mode that serves its values
//! (`accepts`; 400 `invalid_request` when none does) would not sell it at
//! a loss (unless the entry allows it, `allow_loss`) and has a closed
//! circuit (503 `model_unavailable`, nothing held, when none has); a
//! worker gives the job to the first provider of the route's ranking, and
//! to the next one only when the first is known not to have it (it
//! refused the submit, or a reconcile found no job), so a generation never
//! has two paid provider jobs. A job already recorded at a provider stays
//! with that provider. Why each job went where it went is recorded with
//! its provider job and counted in the metrics.

use std::sync::Arc;

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::route::{Candidate, LossGuard, Route, RouteReason, Unpriced, rank};
use super::{HostedBackend, no_healthy_provider};
use crate::backend::contract::{
    Admission, Backend, Job, JobFailure, Rejection, RenderedClip, StartedJobCancel, WebhookReceipt,
    WebhookRefusal,
};
use crate::metrics::Metrics;
use crate::store::Store;

pub struct FailoverBackend {
    model_id: String,
    /// In the order the operator listed them; each a different provider.
    providers: Vec<Arc<HostedBackend>>,
    routing: Routing,
    /// Where each generation's provider job is recorded.
    store: Arc<Store>,
    metrics: Arc<Metrics>,
}

/// How a failover model chooses among its providers, as its entry says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routing {
    pub route: Route,
    /// Whether a provider whose cost for a request is above its price may
    /// still take it.
    pub allow_loss: bool,
    /// What becomes of a provider with no price for a request.
    pub unpriced: Unpriced,
}

impl Routing {
    /// The loss guard of the entry.
    pub fn guard(&self) -> LossGuard {
        LossGuard {
            allow_loss: self.allow_loss,
            unpriced: self.unpriced,
        }
    }
}

/// Checks a failover model's providers, named in the operator's order:
/// at least two, each a different one.
pub(in crate::backend) fn check_providers(providers: &[&'static str]) -> Result<(), String> {
    if providers.len() < 2 {
        return Err("failover needs at least two providers".into());
    }
    for (index, provider) in providers.iter().enumerate() {
        if providers[..index].contains(provider) {
            return Err(format!(
                "{provider} is listed twice: each provider has one circuit"
            ));
        }
    }
    Ok(())
}

impl FailoverBackend {
    /// The backend of `model_id` over `providers`, which `check_providers`
    /// accepted.
    pub fn new(
        model_id: &str,
        providers: Vec<Arc<HostedBackend>>,
        routing: Routing,
        store: Arc<Store>,
        metrics: Arc<Metrics>,
    ) -> FailoverBackend {
        FailoverBackend {
            model_id: model_id.to_owned(),
            providers,
            routing,
            store,
            metrics,
        }
    }

    /// What routing knows of each of `providers` for a job of `mode` with
    /// `input`.
    fn candidates(
        &self,
        providers: &[&Arc<HostedBackend>],
        mode: vidgate_core::Mode,
        input: &vidgate_core::ValidatedInput,
    ) -> Vec<Candidate> {
        providers
            .iter()
            .map(|provider| Candidate {
                healthy: provider.is_healthy(),
                cost: provider.request_cost(mode, input),
                latency: provider.latencies.recent(mode),
                probing: provider.latencies.probing(mode),
            })
            .collect()
    }

    /// The refusal of a request that every provider serving it would sell
    /// at a loss: the customer is told the model cannot take it here, the
    /// log says why.
    fn refuse_at_a_loss(
        &self,
        mode: vidgate_core::Mode,
        price: vidgate_core::Micros,
        costs: &[Option<vidgate_core::Micros>],
    ) -> String {
        let costs: Vec<Option<i64>> = costs.iter().map(|cost| cost.map(|cost| cost.0)).collect();
        tracing::warn!(model = %self.model_id, mode = mode.as_str(), price_micros = price.0, ?costs, unpriced = ?self.routing.unpriced, "every provider that serves the request would cost more than its price, or has no price for it that the loss guard could judge; refused (allow_loss is off)");
        format!(
            "The model {} cannot take this request on this deployment right now; nothing was charged.",
            self.model_id
        )
    }

    /// The provider that has (or may have) the generation's job, if one
    /// recorded it.
    async fn provider_with_job(
        &self,
        generation_id: &str,
    ) -> Result<Option<&Arc<HostedBackend>>, crate::store::StoreError> {
        let recorded = self.store.provider_jobs().get(generation_id).await?;
        Ok(recorded.and_then(|recorded| {
            self.providers
                .iter()
                .find(|provider| provider.provider_name() == recorded.provider)
        }))
    }
}

#[async_trait]
impl Backend for FailoverBackend {
    /// One label for the chain: which provider ran a job is known only after
    /// it ran, and the generation records it (`provider`).
    fn kind(&self) -> &'static str {
        "failover"
    }

    fn runs_at_provider(&self) -> bool {
        true
    }

    async fn admit(&self, admission: &Admission<'_>) -> Result<(), Rejection> {
        let taking: Vec<&Arc<HostedBackend>> = self
            .providers
            .iter()
            .filter(|provider| provider.takes_mode(admission.mode))
            .collect();
        let Some(first) = taking.first() else {
            return Err(Rejection::Unavailable(format!(
                "The model {} does not run {} on this deployment.",
                self.model_id,
                admission.mode.as_str()
            )));
        };
        // Only the providers that serve the request's values count; a value
        // none of them serves is refused, never sent.
        let serving: Vec<&Arc<HostedBackend>> = taking
            .iter()
            .filter(|provider| provider.serves(admission.mode, admission.input).is_ok())
            .copied()
            .collect();
        if serving.is_empty()
            && let Err(unserved) = first.serves(admission.mode, admission.input)
        {
            return Err(unserved.rejection(&self.model_id, admission.mode));
        }
        let costs: Vec<Option<vidgate_core::Micros>> = serving
            .iter()
            .map(|provider| provider.request_cost(admission.mode, admission.input))
            .collect();
        let affordable: Vec<&Arc<HostedBackend>> = serving
            .iter()
            .zip(&costs)
            .filter(|(_, cost)| self.routing.guard().admits(**cost, admission.price))
            .map(|(provider, _)| *provider)
            .collect();
        if affordable.is_empty() {
            return Err(Rejection::Unavailable(self.refuse_at_a_loss(
                admission.mode,
                admission.price,
                &costs,
            )));
        }
        if !affordable.iter().any(|provider| provider.is_healthy()) {
            return Err(no_healthy_provider(&self.model_id));
        }
        Ok(())
    }

    async fn run(&self, job: Job, cancel: CancellationToken) -> Result<RenderedClip, JobFailure> {
        match self.provider_with_job(&job.generation_id).await {
            // An earlier attempt's provider: its job is resumed or
            // reconciled there, never moved.
            Ok(Some(provider)) => {
                return provider
                    .run_job(job, cancel, false, None)
                    .await
                    .map_err(|failed| failed.failure);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::error!(%error, "reading the provider job failed");
                return Err(JobFailure::Interrupted);
            }
        }
        let providers: Vec<&Arc<HostedBackend>> = self
            .providers
            .iter()
            .filter(|provider| {
                provider.takes_mode(job.mode) && provider.serves(job.mode, &job.input).is_ok()
            })
            .collect();
        let candidates = self.candidates(&providers, job.mode, &job.input);
        let ranked = rank(
            self.routing.route,
            &candidates,
            job.price,
            self.routing.guard(),
        );
        if ranked.is_empty() && !providers.is_empty() {
            let costs: Vec<Option<vidgate_core::Micros>> =
                candidates.iter().map(|candidate| candidate.cost).collect();
            return Err(JobFailure::Failed {
                code: "model_unavailable".into(),
                message: self.refuse_at_a_loss(job.mode, job.price, &costs),
            });
        }
        let mut last_failure = None;
        let count = ranked.len();
        for (position, ranked) in ranked.iter().enumerate() {
            let provider = providers[ranked.index];
            let is_last = position + 1 == count;
            // The last provider is tried even with its circuit open: the
            // job was admitted, and failing it without a try helps no one.
            if !is_last && !provider.is_healthy() {
                continue;
            }
            // A job sent to measure a provider holds the measuring until
            // it ends, so that only one job at a time is sent to learn it.
            let _measuring = (ranked.reason == RouteReason::Unmeasured)
                .then(|| provider.latencies.start_probe(job.mode))
                .flatten();
            self.metrics.record_routing_decision(
                &self.model_id,
                provider.provider_name(),
                self.routing.route.as_str(),
                ranked.reason.as_str(),
            );
            tracing::info!(generation = %job.generation_id, provider = provider.provider_name(), route = self.routing.route.as_str(), reason = ranked.reason.as_str(), "routing the job");
            match provider
                .run_job(job.clone(), cancel.clone(), !is_last, Some(ranked.reason))
                .await
            {
                Err(failed) if failed.provider_has_no_job && !is_last => {
                    tracing::warn!(generation = %job.generation_id, provider = provider.provider_name(), failure = %failed.failure, "the provider does not have the job; trying the next provider");
                    last_failure = Some(failed.failure);
                }
                result => return result.map_err(|failed| failed.failure),
            }
        }
        Err(last_failure.unwrap_or_else(|| JobFailure::Failed {
            code: "model_unavailable".into(),
            message: format!("the model {} has no provider for this mode", self.model_id),
        }))
    }

    async fn receive_provider_webhook(
        &self,
        generation_id: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<WebhookReceipt, WebhookRefusal> {
        match self.provider_with_job(generation_id).await? {
            Some(provider) => {
                provider
                    .receive_provider_webhook(generation_id, headers, body)
                    .await
            }
            None => Err(WebhookRefusal::UnknownJob),
        }
    }

    fn wake_follower(&self, generation_id: &str) -> bool {
        self.providers
            .iter()
            .any(|provider| provider.wake_follower(generation_id))
    }

    /// Ready while any provider has a create to spare.
    fn create_ready(&self) -> bool {
        self.providers
            .iter()
            .any(|provider| provider.create_ready())
    }

    /// The promise goes to the first provider that is ready: the one a
    /// new job's submit goes to while the providers before it wait.
    fn promise_create(&self) {
        if let Some(provider) = self
            .providers
            .iter()
            .find(|provider| provider.create_ready())
        {
            provider.promise_create();
        }
    }

    async fn cancel_before_start(
        &self,
        generation_id: &str,
        input: &serde_json::Value,
    ) -> StartedJobCancel {
        match self.provider_with_job(generation_id).await {
            Ok(Some(provider)) => provider.cancel_before_start(generation_id, input).await,
            Ok(None) => StartedJobCancel::Started,
            Err(error) => StartedJobCancel::Unreachable(format!("the store: {error}")),
        }
    }
}
