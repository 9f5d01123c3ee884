//! Decoding the request's images and fitting them to the frame.

use image::imageops::FilterType;
use image::{ImageFormat, ImageReader, Limits, RgbImage};
use std::io::Cursor;

use crate::RenderError;
use crate::picture::Picture;

/// Images larger than this on a side are refused: the engine never needs them, and the limit
/// keeps a hostile upload from making the decoder allocate gigabytes.
const MAX_IMAGE_SIDE: u32 = 12_000;
const MAX_DECODER_ALLOCATION_BYTES: u64 = 512 * 1024 * 1024;

/// Decodes JPEG, PNG or WebP bytes; `which` names the request field in the error.
pub(crate) fn decode(bytes: &[u8], which: &str) -> Result<RgbImage, RenderError> {
    let invalid = |reason: String| RenderError::InvalidImage {
        which: which.to_string(),
        reason,
    };
    let format = image::guess_format(bytes)
        .map_err(|error| invalid(format!("unrecognised image data: {error}")))?;
    if !matches!(
        format,
        ImageFormat::Jpeg | ImageFormat::Png | ImageFormat::WebP
    ) {
        return Err(invalid(format!(
            "unsupported format {format:?}; use JPEG, PNG or WebP"
        )));
    }
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE);
    limits.max_image_height = Some(MAX_IMAGE_SIDE);
    limits.max_alloc = Some(MAX_DECODER_ALLOCATION_BYTES);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    let decoded = reader
        .decode()
        .map_err(|error| invalid(error.to_string()))?;
    if decoded.width() < 2 || decoded.height() < 2 {
        return Err(invalid("image is smaller than 2×2 pixels".to_string()));
    }
    Ok(decoded.to_rgb8())
}

/// Scales `image` so that it covers `target_width`×`target_height` (cropping the overhang
/// rather than letterboxing), enlarged further by `extra_zoom` so that pan and zoom have room.
/// The result is even-sized, as 4:2:0 needs.
pub(crate) fn prepare_cover(
    image: &RgbImage,
    target_width: u32,
    target_height: u32,
    extra_zoom: f32,
) -> Picture {
    let cover_scale = (target_width as f32 / image.width() as f32)
        .max(target_height as f32 / image.height() as f32)
        * extra_zoom;
    let width = even_at_least(image.width() as f32 * cover_scale, target_width);
    let height = even_at_least(image.height() as f32 * cover_scale, target_height);
    to_picture(image, width, height)
}

/// Scales `image` to fit inside a `box_side`-sided square, keeping its aspect ratio.
pub(crate) fn prepare_contain(image: &RgbImage, box_side: u32) -> Picture {
    let scale =
        (box_side as f32 / image.width() as f32).min(box_side as f32 / image.height() as f32);
    let width = even_at_least(image.width() as f32 * scale, 2);
    let height = even_at_least(image.height() as f32 * scale, 2);
    to_picture(image, width, height)
}

fn even_at_least(size: f32, minimum: u32) -> u32 {
    let rounded = (size.ceil() as u32).max(minimum);
    rounded + (rounded & 1)
}

fn to_picture(image: &RgbImage, width: u32, height: u32) -> Picture {
    let resized = if (image.width(), image.height()) == (width, height) {
        image.clone()
    } else {
        image::imageops::resize(image, width, height, FilterType::Triangle)
    };
    Picture::from_rgb8(resized.as_raw(), width as usize, height as usize)
}
