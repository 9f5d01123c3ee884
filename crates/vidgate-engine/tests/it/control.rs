//! Validation, progress, cancellation and reference audio.

use crate::common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{probe, render_err, render_ok, request};
use vidgate_engine::{RenderError, render};

#[test]
fn invalid_requests_are_rejected() {
    for (width, height, duration_s, fps) in [
        (853, 480, 1, 24),
        (200, 480, 1, 24),
        (3842, 2160, 1, 24),
        (3840, 3840, 1, 24),
        (640, 360, 0, 24),
        (640, 360, 31, 24),
        (640, 360, 1, 0),
    ] {
        let mut clip = request(width, height, duration_s);
        clip.fps = fps;
        assert!(
            matches!(render_err(&clip), RenderError::InvalidRequest(_)),
            "{width}x{height} {duration_s}s {fps}fps"
        );
    }
}

#[test]
fn progress_rises_to_one() {
    let reports = Mutex::new(Vec::new());
    let clip = request(640, 360, 2);
    render(
        &clip,
        &|value| reports.lock().unwrap().push(value),
        &AtomicBool::new(false),
    )
    .unwrap();
    let reports = reports.into_inner().unwrap();
    assert_eq!(reports.first(), Some(&0.0));
    assert_eq!(reports.last(), Some(&1.0));
    assert!(
        reports.windows(2).all(|pair| pair[0] <= pair[1]),
        "progress never goes back"
    );
    assert!(reports.len() > 48, "at least one report per frame");
}

#[test]
fn cancel_stops_promptly() {
    let cancel = AtomicBool::new(false);
    let canceled_at = Mutex::new(None);
    // A long 1080p clip with sound, canceled as soon as the first frame is done.
    let mut clip = request(1920, 1080, 30);
    clip.generate_audio = true;
    let on_progress = |value: f32| {
        if value > 0.0 && !cancel.swap(true, Ordering::SeqCst) {
            *canceled_at.lock().unwrap() = Some(Instant::now());
        }
    };
    let result = render(&clip, &on_progress, &cancel);
    let returned_at = Instant::now();
    assert!(
        matches!(result, Err(RenderError::Canceled)),
        "got {result:?}"
    );
    let waited = returned_at
        - canceled_at
            .into_inner()
            .unwrap()
            .expect("canceled during the render");
    assert!(waited < Duration::from_secs(2), "took {waited:?} to stop");
}

#[test]
fn cancel_before_start_returns_canceled() {
    let result = render(&request(640, 360, 1), &|_| {}, &AtomicBool::new(true));
    assert!(matches!(result, Err(RenderError::Canceled)));
}

/// A mono 16-bit WAV file of a 440 Hz tone at `rate`.
fn tone_wav(rate: u32, seconds: f32) -> Vec<u8> {
    let samples: Vec<i16> = (0..(rate as f32 * seconds) as u32)
        .map(|index| {
            ((index as f32 * 440.0 * std::f32::consts::TAU / rate as f32).sin() * 12_000.0) as i16
        })
        .collect();
    let data_bytes = samples.len() as u32 * 2;
    let mut wav = Vec::new();
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_bytes).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes());
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&(rate * 2).to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_bytes.to_le_bytes());
    for sample in samples {
        wav.extend_from_slice(&sample.to_le_bytes());
    }
    wav
}

#[test]
fn reference_audio_is_mixed_and_garbage_is_skipped() {
    let mut clip = request(320, 240, 1);
    clip.generate_audio = true;
    let plain = render_ok(&clip).mp4;
    clip.reference_audio = vec![tone_wav(22_050, 0.5)];
    let mixed = render_ok(&clip);
    assert_ne!(plain, mixed.mp4);
    assert!(probe(&mixed.mp4).audio_seconds.is_some());
    clip.reference_audio = vec![b"not audio at all".to_vec()];
    assert_eq!(plain, render_ok(&clip).mp4, "undecodable audio is ignored");
}

#[test]
fn reference_audio_without_generate_audio_gives_no_track() {
    let mut clip = request(320, 240, 1);
    clip.reference_audio = vec![tone_wav(48_000, 0.5)];
    let video = render_ok(&clip);
    assert!(!video.has_audio);
    assert_eq!(probe(&video.mp4).audio_seconds, None);
}
