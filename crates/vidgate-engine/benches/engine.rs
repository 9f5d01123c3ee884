//! Renders 10-second clips with sound at 480p, 720p and 1080p and prints the speed.
//!
//! Run with `cargo bench -p vidgate-engine`. The real-time factor is clip length divided by
//! wall-clock render time: 4× means a 10 s clip takes 2.5 s.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use vidgate_engine::{RenderRequest, render};

fn main() {
    let threads = std::thread::available_parallelism().map_or(1, |count| count.get());
    println!("vidgate-engine benchmark: 10 s clips at 24 fps with audio, {threads} threads");
    for (label, width, height) in [
        ("480p", 854, 480),
        ("720p", 1280, 720),
        ("1080p", 1920, 1080),
    ] {
        let request = RenderRequest {
            width,
            height,
            duration_s: 10,
            fps: 24,
            seed: 1,
            prompt: "a calm blue ocean at night with drifting lanterns, cinematic".to_string(),
            generate_audio: true,
            ..Default::default()
        };
        let started = Instant::now();
        let video = render(&request, &|_| {}, &AtomicBool::new(false)).expect("benchmark render");
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{label:>5} {width}x{height}: {:.2} s, {:.1} frames/s, {:.2}x real time, {} KiB",
            seconds,
            f64::from(video.frame_count) / seconds,
            video.duration_s / seconds,
            video.mp4.len() / 1024
        );
    }
}
