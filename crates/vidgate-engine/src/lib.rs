//! The embedded local engine of vidgate: a procedural renderer that turns a generation request
//! into a real, browser-playable MP4 (H.264 video, optional AAC audio).
//!
//! It is not an AI model. It draws an animated scene derived from the prompt and the seed (moving
//! shapes over a gradient, the prompt as a caption), opens on and pans over given images, makes a
//! moving collage of reference images and synthesises a short soundtrack. The output is
//! deterministic: the same request gives the same bytes.
//!
//! This crate is a plain library (no async runtime, no I/O): call [`render`] on a blocking thread.

mod audio;
mod encode;
mod images;
mod mood;
mod mux;
mod numbers;
mod picture;
mod scene;
mod text;

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::encode::ProgressTracker;
use crate::mood::Mood;
use crate::scene::{DecodedImages, Scene};

/// The smallest and largest accepted frame side.
pub const MIN_SIDE: u32 = 240;
pub const MAX_SIDE: u32 = 3840;
/// H.264 level 5.2, the highest OpenH264 supports, limits the shorter side to this.
pub const MAX_SHORTER_SIDE: u32 = 2160;
pub const MAX_DURATION_S: u32 = 30;
pub const MAX_FPS: u32 = 60;

/// A generation request, as the engine sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderRequest {
    /// Frame width in pixels: even, from 240 to 3840.
    pub width: u32,
    /// Frame height in pixels: even, from 240 to 3840 (the shorter side at most 2160).
    pub height: u32,
    /// Clip length in whole seconds, 1 to 30.
    pub duration_s: u32,
    /// Frames per second, 1 to 60 (24 in practice).
    pub fps: u32,
    pub seed: u64,
    pub prompt: String,
    /// Whether the clip gets an AAC soundtrack.
    pub generate_audio: bool,
    /// Encoded JPEG, PNG or WebP bytes the clip opens on (image-to-video).
    pub opening_image: Option<Vec<u8>>,
    /// Encoded JPEG, PNG or WebP bytes the clip cross-fades to at the end.
    pub closing_image: Option<Vec<u8>>,
    /// Encoded images composed into a moving collage (reference-to-video); at most six are shown.
    pub reference_images: Vec<Vec<u8>>,
    /// WAV bytes mixed into the soundtrack when `generate_audio` is set; undecodable ones are
    /// skipped.
    pub reference_audio: Vec<Vec<u8>>,
}

/// A finished clip.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedVideo {
    /// The whole MP4 file (moov before mdat).
    pub mp4: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub fps: u32,
    pub frame_count: u32,
    /// `frame_count / fps`.
    pub duration_s: f64,
    pub has_audio: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("rendering was canceled")]
    Canceled,
    #[error("invalid {which}: {reason}")]
    InvalidImage { which: String, reason: String },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("encoder failure: {0}")]
    Encoder(String),
}

/// The share of progress that drawing and encoding frames stands for; muxing takes the rest.
const FRAME_PROGRESS_SHARE: f32 = 0.97;

/// How a render may use the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Threads to encode with, the calling one included; `None` uses every core
    /// (`available_parallelism`). The output bytes do not depend on it.
    pub threads: Option<NonZeroUsize>,
}

/// Renders on the calling thread (plus scoped worker threads for parallel encoding). `progress`
/// gets 0.0..=1.0, never decreasing, once per frame and at the start and end; it is called from
/// the worker threads under a lock (which is what keeps it ordered), so it should be quick, e.g.
/// store the value and let another task publish it. `cancel` is checked at least once per frame;
/// on cancel this returns `Err(Canceled)` promptly. No partial output is ever returned.
pub fn render(
    request: &RenderRequest,
    progress: &(dyn Fn(f32) + Sync),
    cancel: &AtomicBool,
) -> Result<RenderedVideo, RenderError> {
    render_with_options(request, &RenderOptions::default(), progress, cancel)
}

/// [`render`] with explicit [`RenderOptions`], e.g. to leave cores free for other jobs.
pub fn render_with_options(
    request: &RenderRequest,
    options: &RenderOptions,
    progress: &(dyn Fn(f32) + Sync),
    cancel: &AtomicBool,
) -> Result<RenderedVideo, RenderError> {
    validate(request)?;
    if cancel.load(Ordering::Relaxed) {
        return Err(RenderError::Canceled);
    }
    progress(0.0);
    let decoded = decode_images(request)?;
    let mood = Mood::from_prompt(&request.prompt, request.seed);
    let scene = Scene::new(request, mood.clone(), decoded);
    let frame_count = scene.frame_count();
    let tracker = ProgressTracker::new(progress, frame_count, FRAME_PROGRESS_SHARE);
    let threads = options.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |count| count.get()),
        |count| count.get(),
    );
    // The soundtrack is made on its own scoped thread while the frames are encoded; it takes a
    // few percent of the video's time.
    let (frames, audio) = std::thread::scope(|scope| {
        let audio = request.generate_audio.then(|| {
            scope.spawn(|| {
                audio::render_soundtrack(
                    &mood,
                    request.duration_s,
                    &request.reference_audio,
                    cancel,
                )
            })
        });
        let frames = encode::encode_video(&scene, request.fps, threads, &tracker, cancel);
        let audio = audio.map(|handle| {
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        (frames, audio)
    });
    if cancel.load(Ordering::Relaxed) {
        return Err(RenderError::Canceled);
    }
    let frames = frames?;
    let audio = audio.transpose()?;
    let mp4 = mux::mux(
        request.width,
        request.height,
        request.fps,
        &frames,
        audio.as_ref(),
    )?;
    progress(1.0);
    Ok(RenderedVideo {
        mp4,
        width: request.width,
        height: request.height,
        fps: request.fps,
        frame_count,
        duration_s: f64::from(frame_count) / f64::from(request.fps),
        has_audio: audio.is_some(),
    })
}

fn validate(request: &RenderRequest) -> Result<(), RenderError> {
    let invalid = |message: String| Err(RenderError::InvalidRequest(message));
    for (name, side) in [("width", request.width), ("height", request.height)] {
        if !(MIN_SIDE..=MAX_SIDE).contains(&side) || side % 2 != 0 {
            return invalid(format!(
                "{name} must be an even number from {MIN_SIDE} to {MAX_SIDE}, got {side}"
            ));
        }
    }
    if request.width.min(request.height) > MAX_SHORTER_SIDE {
        return invalid(format!(
            "the shorter side may be at most {MAX_SHORTER_SIDE} pixels (H.264 level 5.2)"
        ));
    }
    if !(1..=MAX_DURATION_S).contains(&request.duration_s) {
        return invalid(format!(
            "duration_s must be from 1 to {MAX_DURATION_S}, got {}",
            request.duration_s
        ));
    }
    if !(1..=MAX_FPS).contains(&request.fps) {
        return invalid(format!(
            "fps must be from 1 to {MAX_FPS}, got {}",
            request.fps
        ));
    }
    Ok(())
}

fn decode_images(request: &RenderRequest) -> Result<DecodedImages, RenderError> {
    Ok(DecodedImages {
        opening: request
            .opening_image
            .as_deref()
            .map(|bytes| images::decode(bytes, "opening_image"))
            .transpose()?,
        closing: request
            .closing_image
            .as_deref()
            .map(|bytes| images::decode(bytes, "closing_image"))
            .transpose()?,
        references: request
            .reference_images
            .iter()
            .enumerate()
            .map(|(index, bytes)| images::decode(bytes, &format!("reference_images[{index}]")))
            .collect::<Result<_, _>>()?,
    })
}
