//! Image-to-video and reference-to-video.

use crate::common;

use std::io::Cursor;

use common::{probe, render_err, render_ok, request};
use image::{ImageFormat, Rgb, RgbImage};
use vidgate_engine::RenderError;

/// A test picture: a diagonal colour gradient with a bright square, encoded as `format`.
fn encoded_image(width: u32, height: u32, format: ImageFormat) -> Vec<u8> {
    let picture = RgbImage::from_fn(width, height, |x, y| {
        if (width / 3..width / 2).contains(&x) && (height / 3..height / 2).contains(&y) {
            Rgb([250, 250, 40])
        } else {
            Rgb([(x * 255 / width) as u8, (y * 255 / height) as u8, 160])
        }
    });
    let mut bytes = Cursor::new(Vec::new());
    picture
        .write_to(&mut bytes, format)
        .expect("encoding the test image");
    bytes.into_inner()
}

#[test]
fn opening_image_changes_the_clip() {
    let text_only = request(640, 360, 1);
    let mut from_png = text_only.clone();
    from_png.opening_image = Some(encoded_image(400, 300, ImageFormat::Png));
    let mut from_jpeg = text_only.clone();
    from_jpeg.opening_image = Some(encoded_image(300, 500, ImageFormat::Jpeg));
    let text_bytes = render_ok(&text_only).mp4;
    let png_video = render_ok(&from_png);
    let jpeg_video = render_ok(&from_jpeg);
    assert_ne!(text_bytes, png_video.mp4);
    assert_ne!(png_video.mp4, jpeg_video.mp4);
    assert_eq!(probe(&png_video.mp4).video_samples, 24);
    // Image clips are deterministic too.
    assert_eq!(png_video.mp4, render_ok(&from_png).mp4);
}

#[test]
fn closing_image_cross_fade_renders() {
    let mut clip = request(640, 360, 2);
    clip.opening_image = Some(encoded_image(800, 600, ImageFormat::Png));
    let without_closing = render_ok(&clip).mp4;
    clip.closing_image = Some(encoded_image(200, 200, ImageFormat::Jpeg));
    let with_closing = render_ok(&clip);
    assert_eq!(with_closing.frame_count, 48);
    assert_ne!(without_closing, with_closing.mp4);
}

#[test]
fn reference_images_make_a_collage() {
    let base = request(640, 360, 1);
    let mut collage = base.clone();
    collage.reference_images = vec![
        encoded_image(320, 240, ImageFormat::Png),
        encoded_image(240, 320, ImageFormat::Jpeg),
        encoded_image(256, 256, ImageFormat::WebP),
    ];
    let video = render_ok(&collage);
    assert_ne!(render_ok(&base).mp4, video.mp4);
    assert_eq!(probe(&video.mp4).video_samples, 24);
}

#[test]
fn invalid_images_are_reported_by_field() {
    let mut clip = request(640, 360, 1);
    clip.opening_image = Some(b"definitely not an image".to_vec());
    match render_err(&clip) {
        RenderError::InvalidImage { which, .. } => assert_eq!(which, "opening_image"),
        other => panic!("expected InvalidImage, got {other:?}"),
    }

    let mut truncated = request(640, 360, 1);
    let mut png = encoded_image(64, 64, ImageFormat::Png);
    png.truncate(png.len() / 2);
    truncated.reference_images = vec![encoded_image(64, 64, ImageFormat::Png), png];
    match render_err(&truncated) {
        RenderError::InvalidImage { which, .. } => assert_eq!(which, "reference_images[1]"),
        other => panic!("expected InvalidImage, got {other:?}"),
    }
}
