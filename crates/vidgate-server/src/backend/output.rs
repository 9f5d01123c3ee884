//! The output copy shared by the backends that get a finished clip back as
//! a URL (a hosted provider's CDN or delivery link, a Cog server's upload
//! target): the clip is streamed chunk by chunk into a file in the
//! storage's incoming directory, refused as soon as it passes the size cap,
//! and probed from that file, so a clip of tens of megabytes is never whole
//! in memory. The worker then moves the file into storage (a rename on
//! local disk, a multipart upload to a bucket). An output that arrives
//! inline (a Cog data URI) is already in memory and is probed there.

use tokio::io::AsyncWriteExt;
use vidgate_media::{MediaDetails, MediaInfo, ProbeError};

use super::contract::{ClipBytes, JobFailure, RenderedClip};
use crate::storage::Storage;

/// The write buffer between the network and the incoming file: large enough
/// that a download makes few trips to the blocking pool, small enough to
/// keep a copy's memory flat.
const WRITE_BUFFER_BYTES: usize = 256 * 1024;

/// Why an output could not be copied into the incoming directory.
#[derive(Debug, thiserror::Error)]
pub(super) enum DownloadError {
    #[error("the output is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// The connection failed or timed out while the body was read.
    #[error("reading the output failed")]
    Network(#[source] reqwest::Error),
    /// The incoming file could not be created or written (a full disk).
    #[error("writing the output to the incoming directory failed")]
    Scratch(#[source] std::io::Error),
}

/// Streams the body of `response` into a new file of the storage's incoming
/// directory, refusing more than `limit` bytes: at once when the declared
/// Content-Length is over it, otherwise at the first chunk past it, so an
/// endless body costs at most `limit` bytes of disk. The response's own
/// timeout bounds the whole copy. The file is removed on every failure,
/// and when the returned path (or the future, mid-copy) is dropped.
pub(super) async fn download_to_incoming(
    storage: &Storage,
    mut response: reqwest::Response,
    limit: u64,
) -> Result<tempfile::TempPath, DownloadError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(DownloadError::TooLarge { limit });
    }
    let (path, file) = storage
        .incoming_file()
        .await
        .map_err(DownloadError::Scratch)?;
    let path = tempfile::TempPath::try_from_path(path).map_err(DownloadError::Scratch)?;
    let mut writer = tokio::io::BufWriter::with_capacity(WRITE_BUFFER_BYTES, file);
    let mut written: u64 = 0;
    while let Some(chunk) = response.chunk().await.map_err(DownloadError::Network)? {
        written += chunk.len() as u64;
        if written > limit {
            return Err(DownloadError::TooLarge { limit });
        }
        writer
            .write_all(&chunk)
            .await
            .map_err(DownloadError::Scratch)?;
    }
    // Flushing waits for the last write to reach the file, so the probe and
    // the store read all of it.
    writer.flush().await.map_err(DownloadError::Scratch)?;
    Ok(path)
}

/// The failure of a job whose incoming file could not be written: the
/// same as a clip that could not be stored, with the cause in the log.
pub(super) fn scratch_failure(error: &std::io::Error) -> JobFailure {
    tracing::error!(%error, "writing a downloaded output to the incoming directory failed");
    JobFailure::Failed {
        code: "storage_failed".into(),
        message: "the finished clip could not be stored".into(),
    }
}

/// Reads the clip's size, frame rate, duration and whether it has sound,
/// from memory or from its incoming file (reading only the file's header
/// boxes), on a blocking thread. A clip that is not a readable video fails
/// the job, and its incoming file is removed.
pub(super) async fn probe_clip(mp4: ClipBytes) -> Result<RenderedClip, JobFailure> {
    tokio::task::spawn_blocking(move || match mp4 {
        ClipBytes::InMemory(bytes) => {
            let facts = clip_facts(vidgate_media::probe(&bytes), || {
                vidgate_media::video_has_audio(&bytes)
            })?;
            Ok(facts.into_clip(ClipBytes::InMemory(bytes)))
        }
        ClipBytes::File(path) => {
            let facts = clip_facts(vidgate_media::probe_file(&path), || {
                vidgate_media::video_file_has_audio(&path)
            })?;
            Ok(facts.into_clip(ClipBytes::File(path)))
        }
    })
    .await
    .map_err(|error| upstream_failure(format!("probing the output failed: {error}")))?
}

/// What the probe found out about a clip.
#[derive(Debug, Clone, PartialEq)]
struct ClipFacts {
    width: u32,
    height: u32,
    fps: u32,
    duration_s: f64,
    has_audio: bool,
}

impl ClipFacts {
    fn into_clip(self, mp4: ClipBytes) -> RenderedClip {
        RenderedClip {
            mp4,
            width: self.width,
            height: self.height,
            fps: self.fps,
            duration_s: self.duration_s,
            has_audio: self.has_audio,
            provider_run: None,
            // Set by the backend, which knows what it sent.
            seed: None,
        }
    }
}

/// The facts of a probed clip; `has_audio` is asked only of a readable
/// video.
fn clip_facts(
    probed: Result<MediaInfo, ProbeError>,
    has_audio: impl FnOnce() -> bool,
) -> Result<ClipFacts, JobFailure> {
    let info = probed.map_err(|error| {
        upstream_failure(format!("the output is not a readable video: {error}"))
    })?;
    let MediaDetails::Video {
        width,
        height,
        duration_ms,
        frame_rate,
    } = info.details
    else {
        return Err(upstream_failure("the output is not a video".into()));
    };
    Ok(ClipFacts {
        width,
        height,
        fps: frame_rate.per_second().round() as u32,
        duration_s: duration_ms as f64 / 1000.0,
        has_audio: has_audio(),
    })
}

/// A job failed by what a model server or provider sent.
pub(super) fn upstream_failure(message: String) -> JobFailure {
    JobFailure::Failed {
        code: "upstream_error".into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn engine_clip(generate_audio: bool) -> Vec<u8> {
        let request = vidgate_engine::RenderRequest {
            width: 320,
            height: 240,
            duration_s: 2,
            fps: 12,
            seed: 11,
            prompt: "a kite over the sea".to_owned(),
            generate_audio,
            ..vidgate_engine::RenderRequest::default()
        };
        vidgate_engine::render(&request, &|_| {}, &AtomicBool::new(false))
            .expect("the engine renders")
            .mp4
    }

    fn facts_of(clip: &RenderedClip) -> ClipFacts {
        ClipFacts {
            width: clip.width,
            height: clip.height,
            fps: clip.fps,
            duration_s: clip.duration_s,
            has_audio: clip.has_audio,
        }
    }

    #[tokio::test]
    async fn a_clip_probed_from_its_file_has_the_facts_of_the_clip_probed_in_memory() {
        let directory = tempfile::tempdir().unwrap();
        for generate_audio in [true, false] {
            let bytes = engine_clip(generate_audio);
            let in_memory = probe_clip(ClipBytes::InMemory(bytes.clone()))
                .await
                .unwrap();
            let path = directory.path().join(format!("clip-{generate_audio}.mp4"));
            std::fs::write(&path, &bytes).unwrap();
            let from_file = probe_clip(ClipBytes::File(
                tempfile::TempPath::try_from_path(&path).unwrap(),
            ))
            .await
            .unwrap();
            assert_eq!(facts_of(&from_file), facts_of(&in_memory));
            assert_eq!(
                facts_of(&in_memory),
                ClipFacts {
                    width: 320,
                    height: 240,
                    fps: 12,
                    duration_s: 2.0,
                    has_audio: generate_audio,
                }
            );
            let ClipBytes::File(kept) = from_file.mp4 else {
                panic!("the probed file is handed on");
            };
            assert_eq!(std::fs::read(&kept).unwrap(), bytes);
            drop(kept);
            assert!(!path.exists(), "dropping the clip removes its file");
        }
    }

    #[tokio::test]
    async fn an_unreadable_output_fails_with_the_same_message_from_memory_or_file() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("not-a-video.mp4");
        let bytes = b"\0\0\0\x10ftypisom\0\0\0\0truncated".to_vec();
        std::fs::write(&path, &bytes).unwrap();
        let from_memory = probe_clip(ClipBytes::InMemory(bytes)).await.unwrap_err();
        let from_file = probe_clip(ClipBytes::File(
            tempfile::TempPath::try_from_path(&path).unwrap(),
        ))
        .await
        .unwrap_err();
        assert_eq!(from_file.to_string(), from_memory.to_string());
        assert!(
            from_file
                .to_string()
                .starts_with("the output is not a readable video:"),
            "{from_file}"
        );
        assert!(!path.exists(), "a refused output's file is removed");
    }
}
