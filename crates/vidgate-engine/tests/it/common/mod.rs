//! Helpers shared by the engine's integration tests.

// Each test binary uses only some of these helpers.

use std::sync::atomic::AtomicBool;

use vidgate_engine::{RenderError, RenderRequest, RenderedVideo, render};

/// A short text-to-video request; tests change what they need.
pub fn request(width: u32, height: u32, duration_s: u32) -> RenderRequest {
    RenderRequest {
        width,
        height,
        duration_s,
        fps: 24,
        seed: 42,
        prompt: "a calm blue ocean at night with drifting lanterns".to_string(),
        ..Default::default()
    }
}

pub fn render_ok(request: &RenderRequest) -> RenderedVideo {
    render(request, &|_| {}, &AtomicBool::new(false)).expect("render succeeds")
}

pub fn render_err(request: &RenderRequest) -> RenderError {
    render(request, &|_| {}, &AtomicBool::new(false)).expect_err("render fails")
}

/// The types of the top-level boxes of an MP4 file, in order.
pub fn top_level_boxes(bytes: &[u8]) -> Vec<String> {
    let mut boxes = Vec::new();
    let mut position = 0usize;
    while position + 8 <= bytes.len() {
        let size = u32::from_be_bytes(bytes[position..position + 4].try_into().unwrap()) as usize;
        boxes.push(String::from_utf8_lossy(&bytes[position + 4..position + 8]).into_owned());
        assert!(size >= 8, "box sizes of this muxer are always explicit");
        position += size;
    }
    assert_eq!(position, bytes.len(), "boxes tile the file exactly");
    boxes
}

pub struct Probe {
    pub video_codec: String,
    pub width: u16,
    pub height: u16,
    pub video_seconds: f64,
    pub video_samples: usize,
    pub first_video_sample_is_sync: bool,
    pub audio_seconds: Option<f64>,
}

pub fn probe(bytes: &[u8]) -> Probe {
    let mp4 = re_mp4::Mp4::read_bytes(bytes).expect("re_mp4 parses the file");
    let mut probe = Probe {
        video_codec: String::new(),
        width: 0,
        height: 0,
        video_seconds: 0.0,
        video_samples: 0,
        first_video_sample_is_sync: false,
        audio_seconds: None,
    };
    for track in mp4.tracks().values() {
        match track.kind {
            Some(re_mp4::TrackKind::Video) => {
                probe.video_codec = track.codec_string(&mp4).unwrap_or_default();
                probe.width = track.width;
                probe.height = track.height;
                probe.video_seconds = track.duration as f64 / track.timescale as f64;
                probe.video_samples = track.samples.len();
                probe.first_video_sample_is_sync =
                    track.samples.first().is_some_and(|sample| sample.is_sync);
            }
            Some(re_mp4::TrackKind::Audio) => {
                probe.audio_seconds = Some(track.duration as f64 / track.timescale as f64)
            }
            _ => {}
        }
    }
    probe
}
