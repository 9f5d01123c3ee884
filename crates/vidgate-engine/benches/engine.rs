//! Renders 10-second clips with sound at 480p, 720p and 1080p (text-to-video), and at 720p and
//! 1080p from an opening image, and prints the speed.
//!
//! Run with `cargo bench -p vidgate-engine`. The real-time factor is clip length divided by
//! wall-clock render time: 4× means a 10 s clip takes 2.5 s.

use std::io::Cursor;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use image::{ImageFormat, Rgb, RgbImage};
use vidgate_engine::{RenderRequest, render};

/// A photo-like test image (smooth gradients with fine ripples), so that pan and zoom give the
/// encoder real texture to work on.
fn photo_like_jpeg() -> Vec<u8> {
    let picture = RgbImage::from_fn(1600, 1200, |x, y| {
        let ripple = ((x * 7 + y * 3) % 23) as u8 * 3;
        Rgb([
            (x / 7) as u8 ^ ripple,
            (y / 5) as u8,
            ((x + y) / 11) as u8 ^ (ripple / 2),
        ])
    });
    let mut bytes = Cursor::new(Vec::new());
    picture
        .write_to(&mut bytes, ImageFormat::Jpeg)
        .expect("encoding the benchmark image");
    bytes.into_inner()
}

fn main() {
    let threads = std::thread::available_parallelism().map_or(1, |count| count.get());
    println!("vidgate-engine benchmark: 10 s clips at 24 fps with audio, {threads} threads");
    let cases = [
        ("480p", 854, 480, None),
        ("720p", 1280, 720, None),
        ("1080p", 1920, 1080, None),
        ("720p image", 1280, 720, Some(photo_like_jpeg())),
        ("1080p image", 1920, 1080, Some(photo_like_jpeg())),
    ];
    for (label, width, height, opening_image) in cases {
        let request = RenderRequest {
            width,
            height,
            duration_s: 10,
            fps: 24,
            seed: 1,
            prompt: "a calm blue ocean at night with drifting lanterns, cinematic".to_string(),
            generate_audio: true,
            opening_image,
            ..Default::default()
        };
        let started = Instant::now();
        let video = render(&request, &|_| {}, &AtomicBool::new(false)).expect("benchmark render");
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{label:>11} {width}x{height}: {:.2} s, {:.1} frames/s, {:.2}x real time, {} KiB",
            seconds,
            f64::from(video.frame_count) / seconds,
            video.duration_s / seconds,
            video.mp4.len() / 1024
        );
    }
}
