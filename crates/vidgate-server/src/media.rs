//! The server's side of request media (the work is in `vidgate-media`):
//! building the fetcher and inspector from the server's options, reading the
//! server's own files without HTTP, and fetching the images and audio a job
//! renders with, and what a probe found as uploads record it.
//!
//! Submit keeps the bytes it checked and binds the job to them (see
//! `bound_media.rs`); the local engine reads those kept copies through the
//! fetcher's own-file shortcut when the job runs.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use url::Url;
use utoipa::ToSchema;
use vidgate_core::ValidatedInput;
use vidgate_media::audio::to_wav;
use vidgate_media::rules::{DEFAULT_MAX_AUDIO_BYTES, DEFAULT_MAX_IMAGE_BYTES};
use vidgate_media::{
    FetchError, FetchLimit, FetchSettings, Fetcher, LocalOpen, LocalSource, MediaDetails,
    MediaFormat, MediaInfo, MediaInspector, ProbeCache, ProbeError, normalize_url,
};

use crate::representation::one_of_strings;
use crate::storage::{self, ReadError, Storage, is_stored_name};

/// The fetcher for request media, reading the server's own files from its
/// storage.
pub fn fetcher(
    settings: FetchSettings,
    api_base: &str,
    storage: Arc<Storage>,
) -> Result<Fetcher, FetchError> {
    let fetcher = Fetcher::new(settings)?;
    Ok(fetcher.with_local_source(Arc::new(OwnFiles {
        prefix: own_files_prefix(api_base),
        storage,
    })))
}

/// `{api_base}/files/` in normal form, the start of every URL of a file
/// this server stored.
fn own_files_prefix(api_base: &str) -> String {
    let prefix = format!("{}/files/", api_base.trim_end_matches('/'));
    normalize_url(&prefix).unwrap_or(prefix)
}

/// The stored path a request URL names under this server's `/files/`, in
/// whatever spelling it came (scheme or host case, dot segments, escapes,
/// default port, a query or fragment that the file server ignores), or
/// `None` for another URL. Ownership checks use it, so every spelling
/// that could reach one of our files is checked.
pub fn own_file_path(api_base: &str, url: &str) -> Option<String> {
    let mut normal = Url::parse(&normalize_url(url)?).ok()?;
    normal.set_query(None);
    normal
        .as_str()
        .strip_prefix(&own_files_prefix(api_base))
        .map(str::to_owned)
}

/// The inspector for submit and quote, running at most `limit` fetches at
/// once on this node.
pub fn inspector(fetcher: Fetcher, limit: FetchLimit) -> Arc<MediaInspector> {
    Arc::new(MediaInspector::with_fetch_limit(
        fetcher,
        ProbeCache::new(
            vidgate_media::inspect::DEFAULT_CACHE_CAPACITY,
            vidgate_media::inspect::DEFAULT_CACHE_TIME_TO_LIVE,
        ),
        limit,
    ))
}

/// What the probe accepts, for messages.
pub const ACCEPTED_FORMATS: &str = "JPG, PNG, WebP, MP4, MOV, MP3 or WAV";

/// The media type of probed content, from what it is, never from a name.
pub fn content_type(info: &MediaInfo) -> &'static str {
    storage::media_type_of_extension(info.format.catalog_name())
}

// It is stored with the upload as JSON.
/// What the prober found in an upload. Fields that do not apply to the kind
/// of media are absent.
#[derive(Serialize, ToSchema)]
pub struct UploadMedia {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    duration_s: Option<f64>,
    #[schema(schema_with = media_format_schema)]
    format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    fps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    height: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    width: Option<u32>,
}

/// The schema of `format`: one of the formats the probe understands.
fn media_format_schema() -> utoipa::openapi::Object {
    one_of_strings(MediaFormat::ALL.map(MediaFormat::catalog_name))
}

impl UploadMedia {
    pub fn of(info: &MediaInfo) -> UploadMedia {
        let mut media = UploadMedia {
            duration_s: None,
            format: info.format.catalog_name(),
            fps: None,
            height: None,
            width: None,
        };
        match &info.details {
            MediaDetails::Image { width, height } => {
                media.width = Some(*width);
                media.height = Some(*height);
            }
            MediaDetails::Video {
                width,
                height,
                duration_ms,
                frame_rate,
            } => {
                media.width = Some(*width);
                media.height = Some(*height);
                media.duration_s = Some(*duration_ms as f64 / 1000.0);
                media.fps = Some(frame_rate.per_second());
            }
            MediaDetails::Audio { duration_ms } => {
                media.duration_s = Some(*duration_ms as f64 / 1000.0);
            }
        }
        media
    }

    /// The record as the store keeps it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an upload's media record is plain JSON")
    }
}

/// Probes a file on local disk on a blocking thread, reading only what the
/// prober needs (headers, a video's header boxes), never the whole file.
pub async fn probe_stored_file(path: std::path::PathBuf) -> Result<MediaInfo, ProbeError> {
    tokio::task::spawn_blocking(move || vidgate_media::probe_file(&path))
        .await
        .unwrap_or_else(|_| {
            Err(ProbeError::Unreadable {
                format: "media",
                reason: "probing it failed".to_owned(),
            })
        })
}

/// Why a stored file could not be copied to a scratch file.
#[derive(Debug, thiserror::Error)]
pub enum ScratchCopyError {
    #[error("larger than the limit")]
    TooLarge,
    #[error("the copy failed")]
    Io(#[source] std::io::Error),
}

/// Copies `reader` to a new scratch file in the storage's incoming
/// directory in pieces, refusing more than `max_bytes`; the file is removed
/// when the returned path is dropped (so on every early return too).
pub async fn copy_to_scratch(
    storage: &Storage,
    mut reader: vidgate_media::LocalBody,
    max_bytes: u64,
) -> Result<(tempfile::TempPath, u64), ScratchCopyError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (path, mut file) = storage
        .incoming_file()
        .await
        .map_err(ScratchCopyError::Io)?;
    let path = tempfile::TempPath::try_from_path(path).map_err(ScratchCopyError::Io)?;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut size_bytes = 0u64;
    loop {
        let read = reader
            .read(&mut buffer)
            .await
            .map_err(ScratchCopyError::Io)?;
        if read == 0 {
            break;
        }
        size_bytes += read as u64;
        if size_bytes > max_bytes {
            return Err(ScratchCopyError::TooLarge);
        }
        file.write_all(&buffer[..read])
            .await
            .map_err(ScratchCopyError::Io)?;
    }
    file.flush().await.map_err(ScratchCopyError::Io)?;
    Ok((path, size_bytes))
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
    fn open<'a>(&'a self, url: &'a Url, max_bytes: u64) -> Option<LocalOpen<'a>> {
        let relative_path = self.relative_path(url)?;
        Some(Box::pin(async move {
            self.storage
                .open_reader(relative_path, max_bytes)
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
        let url = Url::parse(&normalize_url(url).unwrap()).unwrap();
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

    #[test]
    fn every_spelling_of_an_upload_url_names_the_same_stored_path() {
        let api_base = "http://127.0.0.1:8080/api/v1";
        let stored = Some("uploads/abc/upl_1.png".to_owned());
        for spelling in [
            "http://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png",
            "HTTP://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/./uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/outputs/../uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/%75ploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png?v=2",
            "http://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png#t=1",
            "http://0x7f000001:8080/api/v1/files/uploads/abc/upl_1.png",
        ] {
            assert_eq!(own_file_path(api_base, spelling), stored, "{spelling}");
        }
        assert_eq!(
            own_file_path(
                "http://Vidgate.Example.com:80/api/v1",
                "http://vidgate.example.com/api/v1/files/uploads/abc/upl_1.png"
            ),
            stored
        );
        assert_eq!(
            own_file_path(
                api_base,
                "http://127.0.0.1:9090/api/v1/files/uploads/a/b.png"
            ),
            None
        );
    }
}
