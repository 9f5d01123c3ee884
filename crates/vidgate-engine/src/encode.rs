//! H.264 encoding of the scene in keyframe-aligned segments, in parallel.
//!
//! OpenH264 uses one core per encoder, so the clip is cut into segments of a fixed number of
//! frames; each segment gets a fresh encoder (so it starts with an IDR frame and no state from
//! another segment) and the segments are shared out to scoped worker threads. The segment
//! boundaries depend only on the frame index, and each segment's bytes only on its frames, so
//! the output is the same for any thread count and any scheduling.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use openh264::OpenH264API;
use openh264::Timestamp;
use openh264::encoder::{
    BitRate, Complexity, Encoder, EncoderConfig, FrameRate, FrameType, RateControlMode, UsageType,
    VuiConfig,
};

use crate::RenderError;
use crate::picture::Picture;
use crate::scene::Scene;

/// Frames per segment, and so the keyframe interval: one second at 24 fps. Short segments keep
/// both cores busy on short clips and make seeking precise; the price is one IDR frame a second.
pub(crate) const SEGMENT_FRAMES: u32 = 24;

/// Average bits per pixel per frame the rate control aims for. The scenes are flat colour and
/// smooth images, which look clean at this rate (about 2.2 Mbit/s at 720p24).
const BITS_PER_PIXEL: f64 = 0.1;

/// One encoded access unit in Annex B form.
pub(crate) struct EncodedFrame {
    pub(crate) annex_b: Vec<u8>,
    pub(crate) is_keyframe: bool,
}

/// Reports progress as frames complete, always increasing even though frames finish on
/// several threads: the callback is invoked under the lock that counts them.
pub(crate) struct ProgressTracker<'a> {
    callback: &'a (dyn Fn(f32) + Sync),
    completed_frames: Mutex<u32>,
    total_frames: u32,
    /// The share of the whole job that frame encoding stands for.
    share: f32,
}

impl<'a> ProgressTracker<'a> {
    pub(crate) fn new(callback: &'a (dyn Fn(f32) + Sync), total_frames: u32, share: f32) -> Self {
        Self {
            callback,
            completed_frames: Mutex::new(0),
            total_frames: total_frames.max(1),
            share,
        }
    }

    fn frame_done(&self) {
        let mut completed = self
            .completed_frames
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *completed += 1;
        (self.callback)(self.share * *completed as f32 / self.total_frames as f32);
    }
}

/// Draws and encodes every frame of `scene`, using up to `threads` threads (the calling one
/// included). Returns the access units in presentation order, or the error of the earliest
/// failed segment.
pub(crate) fn encode_video(
    scene: &Scene,
    fps: u32,
    threads: usize,
    progress: &ProgressTracker,
    cancel: &AtomicBool,
) -> Result<Vec<EncodedFrame>, RenderError> {
    let frame_count = scene.frame_count();
    let segment_count = frame_count.div_ceil(SEGMENT_FRAMES) as usize;
    let next_segment = AtomicUsize::new(0);
    // Set when any worker fails, so that the others stop instead of finishing a doomed job.
    let abort = AtomicBool::new(false);
    let worker = || -> Vec<(usize, Result<Vec<EncodedFrame>, RenderError>)> {
        let mut finished = Vec::new();
        let mut picture = scene.new_picture();
        let mut scratch = scene.new_picture();
        loop {
            let segment = next_segment.fetch_add(1, Ordering::Relaxed);
            if segment >= segment_count || abort.load(Ordering::Relaxed) {
                return finished;
            }
            let first = segment as u32 * SEGMENT_FRAMES;
            let end = (first + SEGMENT_FRAMES).min(frame_count);
            match encode_segment(
                scene,
                fps,
                first..end,
                &mut picture,
                &mut scratch,
                progress,
                cancel,
                &abort,
            ) {
                Ok(Some(frames)) => finished.push((segment, Ok(frames))),
                // Stopped by a cancel or by another worker's failure, which decide the result.
                Ok(None) => return finished,
                Err(error) => {
                    abort.store(true, Ordering::Relaxed);
                    finished.push((segment, Err(error)));
                }
            }
        }
    };
    let threads = threads.clamp(1, segment_count.max(1));
    let mut results: Vec<(usize, Result<Vec<EncodedFrame>, RenderError>)> =
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(worker)).collect();
            let mut results = worker();
            for helper in helpers {
                results.extend(
                    helper
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                );
            }
            results
        });
    if cancel.load(Ordering::Relaxed) {
        return Err(RenderError::Canceled);
    }
    results.sort_by_key(|(segment, _)| *segment);
    let mut frames = Vec::with_capacity(frame_count as usize);
    for (_, result) in results {
        frames.extend(result?);
    }
    if frames.len() != frame_count as usize {
        return Err(RenderError::Encoder(format!(
            "encoded {} frames instead of {frame_count}",
            frames.len()
        )));
    }
    Ok(frames)
}

#[allow(clippy::too_many_arguments)]
fn encode_segment(
    scene: &Scene,
    fps: u32,
    frames: std::ops::Range<u32>,
    picture: &mut Picture,
    scratch: &mut Picture,
    progress: &ProgressTracker,
    cancel: &AtomicBool,
    abort: &AtomicBool,
) -> Result<Option<Vec<EncodedFrame>>, RenderError> {
    let encoder_error = |error: openh264::Error| RenderError::Encoder(error.to_string());
    let pixels = picture.width() as f64 * picture.height() as f64;
    let bitrate = (pixels * f64::from(fps) * BITS_PER_PIXEL).min(f64::from(u32::MAX / 2)) as u32;
    let config = EncoderConfig::new()
        // Dropped frames would shorten the clip; every frame must come out.
        .skip_frames(false)
        .bitrate(BitRate::from_bps(bitrate))
        .max_frame_rate(FrameRate::from_hz(fps as f32))
        .rate_control_mode(RateControlMode::Off)
        .complexity(Complexity::Low)
        // Keyframes come from the segments; scene-change detection would only add work.
        .scene_change_detect(false)
        .usage_type(UsageType::CameraVideoRealTime)
        // One thread per encoder: parallelism comes from the segments, and OpenH264's own
        // threading would make the bytes depend on the machine.
        .num_threads(1)
        .vui(VuiConfig::bt709());
    let mut encoder =
        Encoder::with_api_config(OpenH264API::from_source(), config).map_err(encoder_error)?;
    let mut encoded = Vec::with_capacity(frames.len());
    for index in frames {
        if cancel.load(Ordering::Relaxed) || abort.load(Ordering::Relaxed) {
            return Ok(None);
        }
        scene.draw_frame(index, picture, scratch);
        let timestamp = Timestamp::from_millis(u64::from(index) * 1000 / u64::from(fps));
        let bitstream = encoder
            .encode_at(picture, timestamp)
            .map_err(encoder_error)?;
        let frame_type = bitstream.frame_type();
        if matches!(frame_type, FrameType::Skip | FrameType::Invalid) {
            return Err(RenderError::Encoder(format!(
                "the encoder dropped frame {index}"
            )));
        }
        encoded.push(EncodedFrame {
            annex_b: bitstream.to_vec(),
            is_keyframe: matches!(frame_type, FrameType::IDR),
        });
        progress.frame_done();
    }
    Ok(Some(encoded))
}
