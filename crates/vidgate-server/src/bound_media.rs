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
//! The kept copies are capability URLs that live as long as the job: they
//! are removed when the generation reaches a final state
//! ([`MediaBinding::release`]), or at once when the submit is refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use vidgate_core::ValidatedInput;
use vidgate_media::Inspection;

use crate::ids::random_token;
use crate::storage::{Storage, StoredFile, media_type_of_extension};
use crate::store::Store;

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
            let relative_path = format!("media/{}/{sha256}.{extension}", random_token(24));
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
                *target = Value::String(item.url.clone());
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

/// Removes the kept media of a generation that has reached a final state
/// outside a worker (a cancel, or the rescuer failing it after its last
/// attempt); a failure is logged and leaves the copies.
pub async fn release_generation_media(store: &dyn Store, storage: &Storage, generation_id: &str) {
    match store.generation_media(generation_id).await {
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
}
