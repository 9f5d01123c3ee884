//! Renders one clip to a file, for looking at the engine's output by eye.
//!
//! `cargo run --release -p vidgate-engine --example render -- OUT.mp4 WIDTHxHEIGHT SECONDS SEED "PROMPT" [OPENING_IMAGE] [CLOSING_IMAGE]`

use std::sync::atomic::AtomicBool;

use vidgate_engine::{RenderRequest, render};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.len() < 5 {
        return Err("usage: render OUT.mp4 WIDTHxHEIGHT SECONDS SEED PROMPT [OPENING_IMAGE] [CLOSING_IMAGE]".into());
    }
    let (width, height) = arguments[1]
        .split_once('x')
        .ok_or("size must look like 1280x720")?;
    let read_image = |index: usize| arguments.get(index).map(std::fs::read).transpose();
    let request = RenderRequest {
        width: width.parse()?,
        height: height.parse()?,
        duration_s: arguments[2].parse()?,
        fps: 24,
        seed: arguments[3].parse()?,
        prompt: arguments[4].clone(),
        generate_audio: true,
        opening_image: read_image(5)?,
        closing_image: read_image(6)?,
        ..Default::default()
    };
    let video = render(&request, &|_| {}, &AtomicBool::new(false))?;
    std::fs::write(&arguments[0], &video.mp4)?;
    println!(
        "{} frames, {:.2} s, {} bytes",
        video.frame_count,
        video.duration_s,
        video.mp4.len()
    );
    Ok(())
}
