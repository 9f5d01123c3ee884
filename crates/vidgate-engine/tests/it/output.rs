//! The container and streams: codec, size, duration, audio track, layout.

use crate::common;

use common::{probe, render_ok, request, top_level_boxes};

#[test]
fn silent_clip_is_h264_with_exact_duration_and_fast_start() {
    let video = render_ok(&request(854, 480, 2));
    assert!(!video.has_audio);
    assert_eq!(
        (video.width, video.height, video.fps, video.frame_count),
        (854, 480, 24, 48)
    );
    assert_eq!(video.duration_s, 2.0);

    let boxes = top_level_boxes(&video.mp4);
    let moov = boxes
        .iter()
        .position(|name| name == "moov")
        .expect("moov present");
    let mdat = boxes
        .iter()
        .position(|name| name == "mdat")
        .expect("mdat present");
    assert_eq!(boxes[0], "ftyp");
    assert!(
        moov < mdat,
        "moov must come before mdat for progressive playback: {boxes:?}"
    );

    let probe = probe(&video.mp4);
    assert!(
        probe.video_codec.starts_with("avc1"),
        "codec {}",
        probe.video_codec
    );
    assert_eq!((probe.width, probe.height), (854, 480));
    assert_eq!(probe.video_samples, 48);
    assert!(
        (probe.video_seconds - 2.0).abs() <= 1.0 / 24.0,
        "video lasts {}",
        probe.video_seconds
    );
    assert!(probe.first_video_sample_is_sync);
    assert_eq!(
        probe.audio_seconds, None,
        "no audio track without generate_audio"
    );
}

#[test]
fn audio_track_matches_video_duration() {
    let mut with_audio = request(854, 480, 2);
    with_audio.generate_audio = true;
    let video = render_ok(&with_audio);
    assert!(video.has_audio);
    let probe = probe(&video.mp4);
    let audio_seconds = probe.audio_seconds.expect("audio track present");
    // AAC comes in 1024-sample units (21.3 ms at 48 kHz): the track may end up to one unit late.
    assert!(
        audio_seconds >= probe.video_seconds - 1e-6,
        "audio {audio_seconds} s, video {} s",
        probe.video_seconds
    );
    assert!(
        audio_seconds - probe.video_seconds < 1024.0 / 48_000.0 + 1e-6,
        "audio {audio_seconds} s"
    );
}

#[test]
fn frame_sizes_follow_the_request() {
    for (width, height) in [
        (1280, 720),
        (720, 1280),
        (960, 960),
        (1920, 1080),
        (240, 426),
    ] {
        let video = render_ok(&request(width, height, 1));
        let probe = probe(&video.mp4);
        assert_eq!(
            (u32::from(probe.width), u32::from(probe.height)),
            (width, height)
        );
        assert_eq!(probe.video_samples, 24, "{width}x{height}");
        assert!((probe.video_seconds - 1.0).abs() <= 1.0 / 24.0);
    }
}

#[test]
fn long_clip_keeps_exact_frame_count() {
    let video = render_ok(&request(320, 240, 5));
    assert_eq!(video.frame_count, 120);
    assert_eq!(probe(&video.mp4).video_samples, 120);
}
