//! Copying a finished job's video from the provider's link into our
//! storage before the link expires: streamed to a file within the size cap
//! (`backend/output.rs`), the download taking its token of the provider's
//! budget as any call does.

use super::budget::{CallClass, CallPriority};
use super::model_config::seconds;
use super::protocol::{self, ProviderProtocol};
use super::{HostedBackend, failure};
use crate::backend::contract::{ClipBytes, JobFailure, RenderedClip};
use crate::backend::output::{self, DownloadError};

impl HostedBackend {
    /// Streams the video into a file of the storage's incoming directory
    /// within the size cap, and probes it there.
    pub(super) async fn copy_output(&self, video_url: &str) -> Result<RenderedClip, JobFailure> {
        let url = url::Url::parse(video_url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| failure("upstream_error", "the output is not an http(s) URL".into()))?;
        let storage = &self.storage;
        let fetch_failed = |error: reqwest::Error| {
            failure(
                "upstream_error",
                format!("copying the output failed: {}", error.without_url()),
            )
        };
        // The download is a call to the provider too: it takes a token of
        // the budget, and a 429 pauses the class and is asked again. It
        // finishes a job, so it goes ahead of the backstop reads that are
        // merely due, as a webhook's read does: behind them, a saturated
        // budget held finished jobs for 20 s (BENCHMARKS.md, provider load).
        let response = loop {
            self.budget()
                .acquire(CallClass::Others, CallPriority::Urgent)
                .await;
            let response = self
                .output_client
                .get(url.clone())
                .headers(self.protocol.output_headers(video_url))
                .timeout(seconds(self.timeouts().job_seconds))
                .send()
                .await
                .map_err(fetch_failed)?;
            if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
                self.budget().rate_limited(
                    CallClass::Others,
                    protocol::requested_wait(response.headers(), std::time::SystemTime::now()),
                );
                continue;
            }
            break response.error_for_status().map_err(fetch_failed)?;
        };
        let downloaded =
            output::download_to_incoming(storage, response, self.config.max_output_bytes)
                .await
                .map_err(|error| match error {
                    DownloadError::TooLarge { .. } => failure("upstream_error", error.to_string()),
                    DownloadError::Network(error) => fetch_failed(error),
                    DownloadError::Scratch(error) => output::scratch_failure(&error),
                })?;
        output::probe_clip(ClipBytes::File(downloaded)).await
    }
}
