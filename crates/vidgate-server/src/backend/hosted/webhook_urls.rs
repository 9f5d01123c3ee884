//! The URLs hosted providers send a job's webhooks to, each carrying a
//! secret of its generation: `{public_url}/internal/providers/{model}/
//! {generation_id}/{token}`, the token an HMAC-SHA256 of the generation id
//! under a key the store keeps for every node.
//!
//! fal signs every customer's webhooks with the same published keys, and
//! its signature does not cover the destination URL, so a valid signature
//! alone does not say that the request is ours: anyone with a fal account
//! could register our route as the webhook of a request of their own. The
//! token is known only to vidgate and to the provider it was sent to with
//! our own submit, so a webhook that carries it was registered by us for
//! that generation. It is derived rather than stored so that every node,
//! and a worker resuming the job after a restart, builds and checks the
//! same URL without a lookup; request logs show it as `[redacted]`.

use std::borrow::Cow;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::ids::random_secret;
use crate::store::{Store, StoreError};

/// The purpose under which the store keeps the key of the tokens.
const PROVIDER_WEBHOOK_KEY_PURPOSE: &str = "provider_webhook_urls";

/// The prefix of the provider webhook route; what follows is the model, the
/// generation id and the token.
const WEBHOOK_PATH_PREFIX: &str = "/internal/providers/";

/// What replaces a token in logged paths.
const REDACTED: &str = "[redacted]";

/// Builds and checks the webhook URLs of provider jobs.
#[derive(Clone)]
pub struct ProviderWebhookUrls {
    /// The public base URL at which providers reach the webhook route;
    /// without one, no webhook is registered and jobs are followed by
    /// polling alone.
    base_url: Option<String>,
    key: Arc<[u8]>,
}

impl std::fmt::Debug for ProviderWebhookUrls {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ProviderWebhookUrls")
            .field("base_url", &self.base_url)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl ProviderWebhookUrls {
    /// The URLs under `base_url` with the key every node shares: the
    /// store's, or a new random one that this call stores when there is
    /// none yet.
    pub async fn shared(
        store: &Store,
        base_url: Option<&str>,
    ) -> Result<ProviderWebhookUrls, StoreError> {
        let stored = store
            .server_keys()
            .get(PROVIDER_WEBHOOK_KEY_PURPOSE, &random_secret())
            .await?;
        let key = URL_SAFE_NO_PAD.decode(stored).map_err(|_| {
            StoreError::Corrupt("the provider webhook URL key is not base64url".into())
        })?;
        Ok(ProviderWebhookUrls::new(base_url, &key))
    }

    pub fn new(base_url: Option<&str>, key: &[u8]) -> ProviderWebhookUrls {
        ProviderWebhookUrls {
            base_url: base_url.map(|base_url| base_url.trim_end_matches('/').to_owned()),
            key: key.into(),
        }
    }

    fn mac(&self, generation_id: &str) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(generation_id.as_bytes());
        mac
    }

    /// Where the provider sends the webhooks of `generation_id`'s job of
    /// `model_id`, if anywhere.
    pub fn url(&self, model_id: &str, generation_id: &str) -> Option<String> {
        let token = URL_SAFE_NO_PAD.encode(self.mac(generation_id).finalize().into_bytes());
        self.base_url
            .as_ref()
            .map(|base| format!("{base}{WEBHOOK_PATH_PREFIX}{model_id}/{generation_id}/{token}"))
    }

    /// Whether `token` is the one of `generation_id`'s webhook URL, compared
    /// in constant time.
    pub fn expects(&self, generation_id: &str, token: &str) -> bool {
        URL_SAFE_NO_PAD
            .decode(token)
            .is_ok_and(|token| self.mac(generation_id).verify_slice(&token).is_ok())
    }
}

/// `path` as request logs may show it: a provider webhook's token segment
/// replaced, every other path unchanged.
pub fn loggable_path(path: &str) -> Cow<'_, str> {
    let Some(rest) = path.strip_prefix(WEBHOOK_PATH_PREFIX) else {
        return Cow::Borrowed(path);
    };
    // `{vendor}/{model}/{generation_id}/{token}`: everything from the
    // fourth segment on is hidden.
    let mut segments = rest.splitn(4, '/');
    match (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) {
        (Some(vendor), Some(model), Some(generation_id), Some(_token)) => Cow::Owned(format!(
            "{WEBHOOK_PATH_PREFIX}{vendor}/{model}/{generation_id}/{REDACTED}"
        )),
        _ => Cow::Borrowed(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_only_its_generations_url_and_only_under_its_key() {
        let urls = ProviderWebhookUrls::new(Some("https://vidgate.example/"), b"key one");
        let url = urls.url("vendor_1/model_1", "gen_a").unwrap();
        let token = url.rsplit('/').next().unwrap();
        assert!(
            url.starts_with("https://vidgate.example/internal/providers/vendor_1/model_1/gen_a/"),
            "{url}"
        );
        assert!(urls.expects("gen_a", token));
        assert!(!urls.expects("gen_b", token), "another generation's URL");
        assert!(!urls.expects("gen_a", "AAAA"));
        assert!(!urls.expects("gen_a", "not base64 !"));
        let other_key = ProviderWebhookUrls::new(Some("https://vidgate.example"), b"key two");
        assert!(
            !other_key.expects("gen_a", token),
            "another deployment's key"
        );
        assert_eq!(
            ProviderWebhookUrls::new(None, b"k").url("m/m", "gen_a"),
            None
        );
    }

    #[test]
    fn logged_paths_never_show_a_webhook_token() {
        let token = "Zq8vT1sYb2xW9kLmN3pR5tU7wX0aC4eG";
        assert_eq!(
            loggable_path(&format!(
                "/internal/providers/vendor_1/model_1/gen_01abc/{token}"
            )),
            "/internal/providers/vendor_1/model_1/gen_01abc/[redacted]"
        );
        let longer = format!("/internal/providers/vendor_1/model_1/gen_01abc/{token}/more");
        assert!(!loggable_path(&longer).contains(token));
        assert_eq!(
            loggable_path("/internal/providers/vendor_1/model_1/gen_01abc"),
            "/internal/providers/vendor_1/model_1/gen_01abc"
        );
        assert_eq!(loggable_path("/api/v1/models"), "/api/v1/models");
    }
}
