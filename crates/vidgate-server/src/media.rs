//! The server's side of request media (the work is in `vidgate-media`):
//! building the fetcher and inspector from the server's options, reading the
//! server's own files without HTTP, and fetching the images and audio a job
//! renders with.
//!
//! Media is fetched twice for a job that uses it: at submit, to probe and
//! check it (only facts are kept, in the inspector's probe cache), and again
//! by the worker when the job runs. Keeping the bytes from submit would need
//! storage shared by API and worker nodes and a clean-up policy; fetching
//! again costs a download per job and works on every topology. A file that
//! changed or vanished in between makes the job fail (and be refunded).

use std::sync::Arc;

use url::Url;
use vidgate_core::ValidatedInput;
use vidgate_media::audio::to_wav;
use vidgate_media::rules::{DEFAULT_MAX_AUDIO_BYTES, DEFAULT_MAX_IMAGE_BYTES};
use vidgate_media::{FetchError, FetchSettings, Fetcher, LocalRead, LocalSource, MediaInspector};

use crate::storage::{ReadError, Storage, is_stored_name};

/// The fetcher for request media, reading the server's own files from its
/// storage.
pub fn fetcher(
    settings: FetchSettings,
    api_base: &str,
    storage: Arc<Storage>,
) -> Result<Fetcher, FetchError> {
    let fetcher = Fetcher::new(settings)?;
    Ok(fetcher.with_local_source(Arc::new(OwnFiles {
        prefix: format!("{}/files/", api_base.trim_end_matches('/')),
        storage,
    })))
}

pub fn inspector(fetcher: Fetcher) -> Arc<MediaInspector> {
    Arc::new(MediaInspector::with_default_cache(fetcher))
}

/// URLs under `{api_base}/files/` are files this server stored (uploads, and
/// finished clips used again as reference videos), read from its storage,
/// local disk or bucket. They need no network, and with the private network
/// refused, a server whose public URL is on loopback could not fetch them.
struct OwnFiles {
    prefix: String,
    storage: Arc<Storage>,
}

impl OwnFiles {
    /// The stored path behind `url`, if it is one of ours.
    fn relative_path<'a>(&self, url: &'a Url) -> Option<&'a str> {
        if url.query().is_some() || url.fragment().is_some() {
            return None;
        }
        url.as_str()
            .strip_prefix(&self.prefix)
            .filter(|relative| is_stored_name(relative))
    }
}

impl LocalSource for OwnFiles {
    fn read<'a>(&'a self, url: &'a Url, max_bytes: u64) -> Option<LocalRead<'a>> {
        let relative_path = self.relative_path(url)?;
        Some(Box::pin(async move {
            self.storage
                .read(relative_path, max_bytes)
                .await
                .map_err(|error| match error {
                    ReadError::NotFound => FetchError::Status(404),
                    ReadError::TooLarge { limit } => FetchError::TooLarge { limit },
                    ReadError::Store(error) => {
                        tracing::error!(error = %error, "could not read a stored file");
                        FetchError::Status(500)
                    }
                })
        }))
    }
}

/// The encoded media a job renders with.
#[derive(Debug, Default)]
pub struct RenderMedia {
    pub opening_image: Option<Vec<u8>>,
    pub closing_image: Option<Vec<u8>>,
    pub reference_images: Vec<Vec<u8>>,
    pub reference_audio: Vec<Vec<u8>>,
}

/// Why a job's media could not be fetched or decoded, naming the field.
#[derive(Debug, thiserror::Error)]
#[error("{field} {reason}")]
pub struct RenderMediaError {
    pub field: String,
    pub reason: String,
}

/// Fetches the images and reference audio of a job's input, one after
/// another to bound memory. Reference audio in MP3 is decoded to WAV, the
/// only form the local engine mixes, and cut at the clip's length.
pub async fn fetch_render_media(
    fetcher: &Fetcher,
    input: &ValidatedInput,
) -> Result<RenderMedia, RenderMediaError> {
    let fetch = |field: String, url: String, limit: u64| async move {
        fetcher
            .fetch(&url, limit)
            .await
            .map_err(|error| RenderMediaError {
                field,
                reason: error.to_string(),
            })
    };
    let mut media = RenderMedia::default();
    if let Some(url) = input.image_url() {
        let bytes = fetch("image_url".into(), url.into(), DEFAULT_MAX_IMAGE_BYTES).await?;
        media.opening_image = Some(bytes);
    }
    if let Some(url) = input.end_image_url() {
        let bytes = fetch("end_image_url".into(), url.into(), DEFAULT_MAX_IMAGE_BYTES).await?;
        media.closing_image = Some(bytes);
    }
    for (index, url) in input.reference_image_urls().into_iter().enumerate() {
        let field = format!("reference_image_urls[{index}]");
        media
            .reference_images
            .push(fetch(field, url.into(), DEFAULT_MAX_IMAGE_BYTES).await?);
    }
    let clip_seconds = input.duration_s();
    for (index, url) in input.reference_audio_urls().into_iter().enumerate() {
        let field = format!("reference_audio_urls[{index}]");
        let bytes = fetch(field.clone(), url.into(), DEFAULT_MAX_AUDIO_BYTES).await?;
        let decoded = tokio::task::spawn_blocking(move || to_wav(bytes, clip_seconds))
            .await
            .map_err(|error| error.to_string())
            .and_then(|result| result.map_err(|error| error.to_string()))
            .map_err(|reason| RenderMediaError { field, reason })?;
        media.reference_audio.push(decoded);
    }
    Ok(media)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_files() -> OwnFiles {
        OwnFiles {
            prefix: "http://127.0.0.1:8080/api/v1/files/".into(),
            storage: Arc::new(Storage::local("/data/files".into())),
        }
    }

    fn stored_path(url: &str) -> Option<String> {
        let url = Url::parse(url).unwrap();
        own_files().relative_path(&url).map(str::to_owned)
    }

    #[test]
    fn own_file_urls_name_stored_paths() {
        assert_eq!(
            stored_path("http://127.0.0.1:8080/api/v1/files/outputs/abc/gen_1.mp4").as_deref(),
            Some("outputs/abc/gen_1.mp4")
        );
    }

    #[test]
    fn other_urls_and_escapes_are_not_own_files() {
        for url in [
            "http://127.0.0.1:8080/api/v1/generations/gen_1",
            "http://127.0.0.1:9090/api/v1/files/outputs/abc/gen_1.mp4",
            "http://127.0.0.1:8080/api/v1/files/outputs/..%2f..%2fetc/passwd",
            "http://127.0.0.1:8080/api/v1/files/outputs/abc/.gen_1.partial",
            "http://127.0.0.1:8080/api/v1/files/outputs//gen_1.mp4",
            "http://127.0.0.1:8080/api/v1/files/outputs/abc/gen_1.mp4?x=1",
            "http://127.0.0.1:8080/api/v1/files/",
        ] {
            assert_eq!(stored_path(url), None, "{url}");
        }
        // The URL parser resolves `..` (escaped or not) before we see it, so
        // a path either stays inside the root or leaves `/files/` entirely.
        assert_eq!(
            stored_path("http://127.0.0.1:8080/api/v1/files/../../etc/passwd"),
            None
        );
        assert_eq!(
            stored_path("http://127.0.0.1:8080/api/v1/files/outputs/%2e%2e/secret").as_deref(),
            Some("secret")
        );
    }
}
