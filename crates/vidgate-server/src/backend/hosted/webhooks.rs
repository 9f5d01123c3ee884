//! A provider's webhook about a generation's job: verified by the
//! provider's signature, matched to the job the store records (or adopted
//! for an intent whose submit answer was lost, once our own credential
//! reads it), and turned into a wake-up of the job's follower, on this
//! node or, through the store, on another.

use std::sync::Arc;

use reqwest::header::HeaderMap;

use super::HostedBackend;
use super::protocol::{self, ProviderError, ProviderProtocol, ProviderTarget, WebhookError};
use crate::backend::contract::{WebhookReceipt, WebhookRefusal};
use crate::store::{ProviderJob, Store};

impl HostedBackend {
    #[tracing::instrument(name = "provider.webhook", skip_all, fields(generation_id = %generation_id, provider = self.protocol.name(), model = %self.model_id))]
    pub(super) async fn receive_webhook(
        &self,
        generation_id: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<WebhookReceipt, WebhookRefusal> {
        let verified = self
            .protocol
            .verify_webhook(headers, body)
            .await
            .map_err(|error| match error {
                WebhookError::Rejected(rejection) => WebhookRefusal::Rejected(rejection),
                WebhookError::KeysUnavailable(error) => {
                    WebhookRefusal::Unavailable(error.to_string())
                }
            })?;
        let store = &self.store;
        let Some(recorded) = store
            .provider_jobs()
            .get(generation_id)
            .await?
            .filter(|recorded| recorded.provider == self.protocol.name())
        else {
            return Err(WebhookRefusal::UnknownJob);
        };
        match recorded.job_id.as_deref() {
            Some(job_id) if job_id == verified.job_id => {}
            // A webhook signed for another of our jobs, replayed to this
            // generation's URL, is refused like a forged one.
            Some(_) => return Err(WebhookRefusal::UnknownJob),
            // The submit's answer was lost (or has not arrived yet): the
            // provider's signed word that the job exists is proof of it,
            // and the job is adopted, unless the webhook is about a job
            // another generation has or lists an input vidgate did not send.
            None => self.adopt_webhook_job(store, &recorded, &verified).await?,
        }
        if !store
            .provider_jobs()
            .record_webhook(generation_id, &verified.delivery_id)
            .await?
        {
            return Ok(WebhookReceipt::Duplicate);
        }
        if !self.wake_local_follower(generation_id) {
            // The follower is on another node (a load balancer chose this
            // one), or nowhere yet. Should telling the others fail, the
            // follower's polling still finds the job's end, so the webhook
            // is taken either way.
            if let Err(error) = store.provider_jobs().announce_webhook(generation_id).await {
                tracing::warn!(generation = %generation_id, error = %error,
                    "could not tell the other nodes of a provider webhook");
            }
        }
        Ok(WebhookReceipt::Taken)
    }

    /// Records the job a verified webhook names as the generation's, for an
    /// intent whose submit answer is missing.
    async fn adopt_webhook_job(
        &self,
        store: &Arc<Store>,
        recorded: &ProviderJob,
        verified: &protocol::VerifiedWebhook,
    ) -> Result<(), WebhookRefusal> {
        let input_differs = verified
            .input
            .as_ref()
            .is_some_and(|listed| !protocol::sent_fields_match(&recorded.input, listed));
        let taken_elsewhere = store
            .provider_jobs()
            .generation_of(&recorded.provider, &verified.job_id)
            .await?
            .is_some_and(|owner| owner != recorded.generation_id);
        if input_differs || taken_elsewhere {
            return Err(WebhookRefusal::UnknownJob);
        }
        self.confirm_with_our_credential(recorded, &verified.job_id)
            .await?;
        if !store
            .provider_jobs()
            .record_job_id(&recorded.generation_id, &verified.job_id)
            .await?
        {
            // The submit's answer (or a reconcile) recorded an id in the
            // meantime: the webhook is taken only if it is that job.
            let now_recorded = store.provider_jobs().get(&recorded.generation_id).await?;
            if now_recorded.and_then(|job| job.job_id).as_deref() != Some(verified.job_id.as_str())
            {
                return Err(WebhookRefusal::UnknownJob);
            }
        } else {
            tracing::warn!(generation = %recorded.generation_id, provider = self.protocol.name(), provider_job = %verified.job_id, "a provider webhook proved the job of a submit whose answer was lost");
        }
        Ok(())
    }

    /// Refuses to adopt a job that a webhook names unless our own
    /// credential reads it under the intent's target: a webhook alone is
    /// never proof. fal signs every customer's webhooks with the same keys,
    /// so a request in another fal account is signed as well as ours, but
    /// our key cannot read it.
    async fn confirm_with_our_credential(
        &self,
        recorded: &ProviderJob,
        job_id: &str,
    ) -> Result<(), WebhookRefusal> {
        let target = ProviderTarget(recorded.target.clone());
        match self.protocol.state(&target, job_id).await {
            Ok(_) => Ok(()),
            Err(
                ProviderError::NotFound { .. }
                | ProviderError::Unauthorized { .. }
                | ProviderError::Refused { .. },
            ) => Err(WebhookRefusal::UnknownJob),
            // The provider retries the webhook, and the reconcile goes on
            // meanwhile.
            Err(error) => Err(WebhookRefusal::Unavailable(error.to_string())),
        }
    }
}
