//! Binding a job to the exact bytes of its request media.
//!
//! Submit fetches every media item of a request, checks and prices it
//! ([`vidgate_media::MediaInspector::inspect_and_keep`]); the bytes it
//! checked are then kept in storage, each under its own unguessable path
//! (`media/<token>/<sha256>.<ext>`), and the generation records the binding
//! (field, item, SHA-256, path, URL) in the same transaction that holds its
//! price. When the job runs, backends get [`MediaBinding::bind_input`]: the
//! input with every media URL replaced by the URL of the kept copy, served
//! by vidgate itself under `/files/`. So:
//!
//! - what the model gets is what was checked and billed: a file swapped at
//!   the customer's URL after submit changes nothing;
//! - model servers (Cog, hosted providers) fetch only vidgate's own URLs,
//!   never a customer's URL from inside the operator's network;
//! - a direct upload overwritten after its first use cannot change a job
//!   that already used it.
//!
//! The kept copies live as long as the job: they are removed when the
//! generation reaches a final state ([`MediaBinding::release`]), or at once
//! when the submit is refused. Their URLs are only ever served with a
//! signature ([`MediaUrlSigner`]): a model server or provider is handed
//! each URL signed to expire shortly after it can still need it
//! ([`JobMedia::signed_input`]), so a URL that leaks from a provider's logs
//! stops working long before the job ends. The local engine reads the
//! copies from storage and needs no URL.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;
use vidgate_core::ValidatedInput;
use vidgate_media::Inspection;

use crate::ids::{random_secret, random_token};
use crate::storage::{Storage, StoredFile, media_type_of_extension};
use crate::store::{Store, StoreError};

/// The storage directory of kept media; every stored name in it is served
/// only with a valid signature.
const KEPT_MEDIA_DIRECTORY: &str = "media/";

/// The purpose under which the store keeps the key that signs kept media
/// URLs (`server_keys`).
const MEDIA_URL_KEY_PURPOSE: &str = "media_urls";

/// How long past a model's own deadline to start (or to finish) a URL
/// handed to it stays valid: a job that starts just before its deadline
/// still has this long to fetch its media.
pub const MEDIA_URL_MARGIN: Duration = Duration::from_secs(600);

/// Whether a stored name is kept media, whose URLs need a signature.
pub fn is_kept_media(relative_path: &str) -> bool {
    relative_path.starts_with(KEPT_MEDIA_DIRECTORY)
}

/// One media item of a request, kept for its job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundItem {
    /// The request parameter, e.g. `reference_video_urls`.
    pub parameter: String,
    /// The item's place in a list parameter; 0 for a single URL.
    pub index: usize,
    /// SHA-256 of the bytes that were checked and priced, in hex.
    pub sha256: String,
    /// Where the copy is stored, relative to the storage root.
    pub relative_path: String,
    /// The copy's URL, `{api_base}/files/{relative_path}`.
    pub url: String,
    pub size_bytes: u64,
}

/// The media a generation is bound to; stored with it as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaBinding {
    pub items: Vec<BoundItem>,
}

impl MediaBinding {
    /// Keeps every item of `inspection` in storage and returns the binding.
    /// On failure the items already kept are removed again.
    pub async fn keep(
        storage: &Storage,
        api_base: &str,
        inspection: &Inspection,
    ) -> std::io::Result<MediaBinding> {
        let mut binding = MediaBinding::default();
        for item in &inspection.media {
            let extension = item.info.format.catalog_name();
            let sha256 = item.file.sha256_hex();
            let relative_path = format!(
                "{KEPT_MEDIA_DIRECTORY}{}/{sha256}.{extension}",
                random_token(24)
            );
            let stored = storage
                .put_file_once(
                    item.file.path(),
                    &relative_path,
                    media_type_of_extension(extension),
                )
                .await;
            if let Err(error) = stored {
                binding.release(storage).await;
                return Err(error);
            }
            binding.items.push(BoundItem {
                parameter: item.parameter.clone(),
                index: item.index,
                sha256,
                url: format!("{}/files/{relative_path}", api_base.trim_end_matches('/')),
                relative_path,
                size_bytes: item.file.size_bytes(),
            });
        }
        Ok(binding)
    }

    /// The binding as stored with the generation; `None` when nothing is
    /// bound.
    pub fn to_json(&self) -> Option<Value> {
        (!self.items.is_empty()).then(|| serde_json::to_value(self).expect("serialisable"))
    }

    /// The binding stored with a generation (none for a request without
    /// media, or one submitted before bindings existed).
    pub fn from_json(value: Option<&Value>) -> MediaBinding {
        value
            .and_then(|value| serde_json::from_value(value.clone()).ok())
            .unwrap_or_default()
    }

    /// The input a backend runs with: every bound media URL replaced by the
    /// URL of its kept copy; everything else as the customer sent it.
    pub fn bind_input(&self, input: &ValidatedInput) -> ValidatedInput {
        self.replace_urls(input, |item| item.url.clone())
    }

    /// `input` with the URL of each bound item replaced by `url_of(item)`.
    fn replace_urls(
        &self,
        input: &ValidatedInput,
        url_of: impl Fn(&BoundItem) -> String,
    ) -> ValidatedInput {
        let mut value = input.to_json();
        for item in &self.items {
            let Some(slot) = value.get_mut(&item.parameter) else {
                continue;
            };
            let target = match slot {
                Value::Array(items) => items.get_mut(item.index),
                single => Some(single),
            };
            if let Some(target) = target {
                *target = Value::String(url_of(item));
            }
        }
        ValidatedInput::from_stored_json(value)
    }

    /// Removes the kept copies; a copy that cannot be removed is logged and
    /// left behind (it is unreachable without its URL).
    pub async fn release(&self, storage: &Storage) {
        for item in &self.items {
            let file = StoredFile {
                relative_path: item.relative_path.clone(),
                size_bytes: item.size_bytes,
            };
            if let Err(error) = storage.delete(&file).await {
                tracing::warn!(path = %item.relative_path, error = %error, "could not remove a job's kept media");
            }
        }
    }
}

/// Signs the URLs of kept media with an expiry, and checks them when they
/// are fetched: HMAC-SHA256 over the stored name and the expiry, with a
/// key the store keeps for every node, so a URL signed on one node is
/// honoured on all and after restarts. The signature names the file, so
/// it opens no other generation's media.
#[derive(Clone)]
pub struct MediaUrlSigner {
    key: Arc<[u8]>,
}

impl std::fmt::Debug for MediaUrlSigner {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("MediaUrlSigner([redacted])")
    }
}

/// Why a request for kept media was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MediaUrlRefusal {
    #[error("This media URL is not signed.")]
    Unsigned,
    #[error("This media URL's signature is not valid.")]
    BadSignature,
    #[error("This media URL has expired.")]
    Expired,
}

impl MediaUrlSigner {
    /// The signer with the key every node shares: the store's, or a new
    /// random one that this call stores when there is none yet.
    pub async fn shared(store: &Store) -> Result<MediaUrlSigner, StoreError> {
        let stored = store
            .server_keys()
            .get(MEDIA_URL_KEY_PURPOSE, &random_secret())
            .await?;
        let key = URL_SAFE_NO_PAD
            .decode(stored)
            .map_err(|_| StoreError::Corrupt("the media URL key is not base64url".into()))?;
        Ok(MediaUrlSigner::new(&key))
    }

    pub fn new(key: &[u8]) -> MediaUrlSigner {
        MediaUrlSigner { key: key.into() }
    }

    fn mac(&self, relative_path: &str, expires_at: i64) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(relative_path.as_bytes());
        mac.update(b"\n");
        mac.update(expires_at.to_string().as_bytes());
        mac
    }

    /// `url`, the URL of the kept copy at `relative_path`, valid until
    /// `expires_at` (Unix seconds).
    pub fn signed_url(&self, url: &str, relative_path: &str, expires_at: i64) -> String {
        let signature = self.mac(relative_path, expires_at).finalize().into_bytes();
        format!(
            "{url}?expires={expires_at}&signature={}",
            URL_SAFE_NO_PAD.encode(signature)
        )
    }

    /// Whether a request for the kept copy at `relative_path` with the URL
    /// query `query` may be served at `now` (Unix seconds). The signature is
    /// checked before the expiry, in constant time, so an expired URL says
    /// so only when it was genuine.
    pub fn check(
        &self,
        relative_path: &str,
        query: Option<&str>,
        now: i64,
    ) -> Result<(), MediaUrlRefusal> {
        let mut expires = None;
        let mut signature = None;
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match name.as_ref() {
                "expires" => expires = Some(value.into_owned()),
                "signature" => signature = Some(value.into_owned()),
                _ => {}
            }
        }
        let (Some(expires), Some(signature)) = (expires, signature) else {
            return Err(MediaUrlRefusal::Unsigned);
        };
        let expires_at: i64 = expires.parse().map_err(|_| MediaUrlRefusal::BadSignature)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| MediaUrlRefusal::BadSignature)?;
        self.mac(relative_path, expires_at)
            .verify_slice(&signature)
            .map_err(|_| MediaUrlRefusal::BadSignature)?;
        if now >= expires_at {
            return Err(MediaUrlRefusal::Expired);
        }
        Ok(())
    }
}

/// A job's kept media as a backend hands it to a model server: the
/// binding, and the signer of its URLs.
#[derive(Debug, Clone, Default)]
pub struct JobMedia {
    binding: MediaBinding,
    signer: Option<MediaUrlSigner>,
}

impl JobMedia {
    pub fn new(binding: MediaBinding, signer: MediaUrlSigner) -> JobMedia {
        JobMedia {
            binding,
            signer: Some(signer),
        }
    }

    /// `media_input` (the job's input with its media bound, see
    /// [`MediaBinding::bind_input`]) with each kept copy's URL signed to
    /// stay valid for `lifetime` from now. A job without media (or without
    /// a signer) has nothing to sign.
    pub fn signed_input(&self, media_input: &ValidatedInput, lifetime: Duration) -> ValidatedInput {
        let Some(signer) = &self.signer else {
            return media_input.clone();
        };
        // Rounded up to whole seconds, so a URL lasts at least `lifetime`.
        let lifetime_ms = i64::try_from(lifetime.as_millis())
            .unwrap_or(i64::MAX)
            .min(i64::MAX / 2);
        let expires_at = (crate::store::now_millis() + lifetime_ms + 999) / 1000;
        self.binding.replace_urls(media_input, |item| {
            signer.signed_url(&item.url, &item.relative_path, expires_at)
        })
    }
}

/// Removes the kept media of a generation that has reached a final state
/// outside a worker (a cancel, or the rescuer failing it after its last
/// attempt); a failure is logged and leaves the copies.
pub async fn release_generation_media(store: &Store, storage: &Storage, generation_id: &str) {
    match store.generations().media(generation_id).await {
        Ok(binding) => {
            MediaBinding::from_json(binding.as_ref())
                .release(storage)
                .await
        }
        Err(error) => {
            tracing::warn!(generation = %generation_id, error = %error, "could not read a final job's media to remove it")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(parameter: &str, index: usize, url: &str) -> BoundItem {
        BoundItem {
            parameter: parameter.to_owned(),
            index,
            sha256: "00".repeat(32),
            relative_path: "media/t/x.png".to_owned(),
            url: url.to_owned(),
            size_bytes: 1,
        }
    }

    #[test]
    fn bound_urls_replace_the_customers_urls_and_nothing_else() {
        let input = ValidatedInput::from_stored_json(json!({
            "prompt": "p",
            "image_url": "https://customer.example/a.png",
            "reference_image_urls": ["https://customer.example/b.png", "https://customer.example/c.png"],
        }));
        let binding = MediaBinding {
            items: vec![
                item("image_url", 0, "https://vidgate/files/media/1/a.png"),
                item(
                    "reference_image_urls",
                    1,
                    "https://vidgate/files/media/3/c.png",
                ),
                item(
                    "reference_image_urls",
                    0,
                    "https://vidgate/files/media/2/b.png",
                ),
            ],
        };
        assert_eq!(
            binding.bind_input(&input).to_json(),
            json!({
                "prompt": "p",
                "image_url": "https://vidgate/files/media/1/a.png",
                "reference_image_urls": ["https://vidgate/files/media/2/b.png", "https://vidgate/files/media/3/c.png"],
            })
        );
        assert_eq!(MediaBinding::from_json(binding.to_json().as_ref()), binding);
        assert_eq!(MediaBinding::default().to_json(), None);
        assert_eq!(MediaBinding::from_json(None), MediaBinding::default());
    }

    #[test]
    fn a_signed_url_is_honoured_until_it_expires_and_for_its_own_file_only() {
        let signer = MediaUrlSigner::new(b"a test key");
        let path = "media/abc/00.png";
        let url = signer.signed_url("https://vidgate/api/v1/files/media/abc/00.png", path, 1000);
        let (base, query) = url.split_once('?').unwrap();
        assert_eq!(base, "https://vidgate/api/v1/files/media/abc/00.png");
        assert_eq!(signer.check(path, Some(query), 999), Ok(()));
        assert_eq!(
            signer.check(path, Some(query), 1000),
            Err(MediaUrlRefusal::Expired)
        );
        // Another file, a later expiry, another signature or another key.
        assert_eq!(
            signer.check("media/xyz/00.png", Some(query), 999),
            Err(MediaUrlRefusal::BadSignature)
        );
        let stretched = query.replace("expires=1000", "expires=5000");
        assert_eq!(
            signer.check(path, Some(&stretched), 999),
            Err(MediaUrlRefusal::BadSignature)
        );
        let other_signature = signer.signed_url(base, "media/xyz/00.png", 1000);
        let (_, other_query) = other_signature.split_once('?').unwrap();
        assert_eq!(
            signer.check(path, Some(other_query), 999),
            Err(MediaUrlRefusal::BadSignature)
        );
        assert_eq!(
            MediaUrlSigner::new(b"another key").check(path, Some(query), 999),
            Err(MediaUrlRefusal::BadSignature)
        );
        assert_eq!(
            signer.check(path, None, 999),
            Err(MediaUrlRefusal::Unsigned)
        );
        assert_eq!(
            signer.check(path, Some("expires=1000"), 999),
            Err(MediaUrlRefusal::Unsigned)
        );
    }

    #[test]
    fn job_media_signs_each_bound_url_for_its_lifetime() {
        let signer = MediaUrlSigner::new(b"a test key");
        let binding = MediaBinding {
            items: vec![item("image_url", 0, "https://vidgate/files/media/t/x.png")],
        };
        let input = ValidatedInput::from_stored_json(json!({
            "prompt": "p",
            "image_url": "https://customer.example/a.png",
        }));
        let bound = binding.bind_input(&input);
        let signed =
            JobMedia::new(binding, signer.clone()).signed_input(&bound, Duration::from_secs(60));
        let url = signed.get("image_url").and_then(Value::as_str).unwrap();
        let (base, query) = url.split_once('?').unwrap();
        assert_eq!(base, "https://vidgate/files/media/t/x.png");
        assert_eq!(signed.get("prompt"), Some(&json!("p")));
        let now = crate::store::now_millis() / 1000;
        assert_eq!(signer.check("media/t/x.png", Some(query), now), Ok(()));
        assert_eq!(signer.check("media/t/x.png", Some(query), now + 59), Ok(()));
        assert_eq!(
            signer.check("media/t/x.png", Some(query), now + 62),
            Err(MediaUrlRefusal::Expired)
        );
        assert_eq!(
            JobMedia::default()
                .signed_input(&input, Duration::from_secs(60))
                .to_json(),
            input.to_json()
        );
    }
}
