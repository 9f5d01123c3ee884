use std::sync::atomic::AtomicBool;
use vidgate_engine::{RenderRequest, render};

#[test]
fn smoke() {
    let request = RenderRequest {
        width: 854,
        height: 480,
        duration_s: 2,
        fps: 24,
        seed: 7,
        prompt: "a calm blue ocean at night with drifting lanterns".into(),
        generate_audio: true,
        ..Default::default()
    };
    let start = std::time::Instant::now();
    let video = render(&request, &|_| {}, &AtomicBool::new(false)).unwrap();
    eprintln!("took {:?}, {} bytes", start.elapsed(), video.mp4.len());
    std::fs::write("/tmp/engine-smoke.mp4", &video.mp4).unwrap();
    let mp4 = re_mp4::Mp4::read_bytes(&video.mp4).unwrap();
    for (id, track) in mp4.tracks() {
        eprintln!(
            "{id:?} {:?} {}x{} {} {} {:?} {}",
            track.kind,
            track.width,
            track.height,
            track.timescale,
            track.duration,
            track.codec_string(&mp4),
            track.samples.len()
        );
    }
}
