//! The embedded local engine as a backend: a procedural renderer (see the
//! `vidgate-engine` crate) that needs no GPU and no outside service.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use vidgate_engine::{RenderError, RenderRequest};
use vidgate_media::Fetcher;

use super::contract::{Admission, Backend, ClipBytes, Job, JobFailure, Rejection, RenderedClip};
use crate::media::{RenderMedia, fetch_render_media};

pub struct LocalEngineBackend {
    /// When true, prompt markers `[sim:fail]` and `[sim:sleep=MS]` steer the
    /// job so tests can exercise failures and long runs. Off in production,
    /// where the markers are plain prompt text.
    simulation: bool,
    /// Fetches the images and audio a job renders with, with the node's
    /// settings (whether private networks may be reached).
    media_fetcher: Fetcher,
}

impl LocalEngineBackend {
    pub fn new(simulation: bool, media_fetcher: Fetcher) -> LocalEngineBackend {
        LocalEngineBackend {
            simulation,
            media_fetcher,
        }
    }

    /// Fetches the job's media, giving up when the job is interrupted.
    async fn fetch_media(
        &self,
        job: &Job,
        cancel: &CancellationToken,
    ) -> Result<RenderMedia, JobFailure> {
        tokio::select! {
            fetched = fetch_render_media(&self.media_fetcher, &job.media_input) => fetched.map_err(|error| JobFailure::Failed {
                code: "media_unavailable".into(),
                message: format!("the request's media could not be fetched when the job ran: {error}"),
            }),
            _ = cancel.cancelled() => Err(JobFailure::Interrupted),
        }
    }
}

/// The test hooks a prompt asks for, when simulation is on.
#[derive(Debug, Default, PartialEq, Eq)]
struct SimulationMarkers {
    fail: bool,
    sleep: Option<Duration>,
}

fn simulation_markers(prompt: &str) -> SimulationMarkers {
    let sleep = prompt.split("[sim:sleep=").nth(1).and_then(|rest| {
        let digits = rest.split(']').next()?;
        digits.parse::<u64>().ok().map(Duration::from_millis)
    });
    SimulationMarkers {
        fail: prompt.contains("[sim:fail]"),
        sleep,
    }
}

#[async_trait]
impl Backend for LocalEngineBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn admit(&self, _admission: &Admission<'_>) -> Result<(), Rejection> {
        // The local engine renders every frame size the catalog offers.
        Ok(())
    }

    async fn run(&self, job: Job, cancel: CancellationToken) -> Result<RenderedClip, JobFailure> {
        let markers = if self.simulation {
            simulation_markers(job.input.prompt())
        } else {
            SimulationMarkers::default()
        };
        if let Some(sleep) = markers.sleep {
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = cancel.cancelled() => return Err(JobFailure::Interrupted),
            }
        }
        if markers.fail {
            return Err(JobFailure::Failed {
                code: "generation_failed".into(),
                message: "the simulated job failed as its prompt asked".into(),
            });
        }

        let media = self.fetch_media(&job, &cancel).await?;
        let job_seed = job.seed;
        let request = RenderRequest {
            width: job.width,
            height: job.height,
            duration_s: job.input.duration_s(),
            fps: 24,
            seed: job.seed,
            prompt: job.input.prompt().to_owned(),
            generate_audio: job.input.generate_audio(),
            opening_image: media.opening_image,
            closing_image: media.closing_image,
            reference_images: media.reference_images,
            reference_audio: media.reference_audio,
        };
        // Rendering is CPU-bound: it runs on the blocking pool, and the
        // cancellation token is bridged to the flag the renderer polls.
        let stop = Arc::new(AtomicBool::new(false));
        let stop_for_render = stop.clone();
        let render = tokio::task::spawn_blocking(move || {
            let rendered = vidgate_engine::render(&request, &|_progress| {}, &stop_for_render);
            crate::allocator::return_freed_memory();
            rendered
        });
        let watcher = {
            let cancel = cancel.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                cancel.cancelled().await;
                stop.store(true, Ordering::Relaxed);
            })
        };
        let rendered = render.await;
        watcher.abort();
        match rendered {
            Ok(Ok(video)) => Ok(RenderedClip {
                mp4: ClipBytes::InMemory(video.mp4),
                width: video.width,
                height: video.height,
                fps: video.fps,
                duration_s: video.duration_s,
                provider_run: None,
                has_audio: video.has_audio,
                // The engine renders by the seed: it is applied.
                seed: Some(job_seed),
            }),
            Ok(Err(RenderError::Canceled)) => Err(JobFailure::Interrupted),
            Ok(Err(error)) => Err(JobFailure::Failed {
                code: "render_failed".into(),
                message: format!("the local engine could not render the clip: {error}"),
            }),
            Err(join_error) => Err(JobFailure::Failed {
                code: "render_failed".into(),
                message: format!("the local engine crashed: {join_error}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_simulation_markers() {
        assert_eq!(simulation_markers("a cat"), SimulationMarkers::default());
        assert_eq!(
            simulation_markers("a cat [sim:fail]"),
            SimulationMarkers {
                fail: true,
                sleep: None
            }
        );
        assert_eq!(
            simulation_markers("[sim:sleep=250] a cat"),
            SimulationMarkers {
                fail: false,
                sleep: Some(Duration::from_millis(250))
            }
        );
        assert_eq!(simulation_markers("[sim:sleep=x]").sleep, None);
    }
}
