//! The catalog's media rules (SPEC.md section 4: formats, per-item and total
//! seconds, bytes, side lengths, frame rate, reference plus output seconds),
//! checked against probed facts. Pure functions: the inspector fetches and
//! probes, this decides.

use serde_json::Value;
use vidgate_core::catalog::{MediaLimits, ParameterType};
use vidgate_core::{Endpoint, InvalidRequest, MediaKind, ValidatedInput};

use crate::probe::{MediaFormat, MediaInfo};

/// Which media a check covers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every media parameter of the request (submit).
    Everything,
    /// Only media whose facts change the price (quote): reference videos.
    PriceAffecting,
}

/// One media parameter of a request and the URLs it holds.
#[derive(Clone, Debug)]
pub struct MediaField<'a> {
    pub parameter: &'a str,
    /// A list parameter (`reference_*_urls`) rather than a single URL.
    pub is_list: bool,
    pub limits: &'a MediaLimits,
    /// The URLs in their normal form ([`crate::normalize_url`]), or as
    /// given when they do not parse (fetching them then says why).
    pub urls: Vec<String>,
}

impl MediaField<'_> {
    /// How an item is named in messages: `image_url` or
    /// `reference_video_urls[1]`.
    pub fn item_label(&self, index: usize) -> String {
        if self.is_list {
            format!("{}[{index}]", self.parameter)
        } else {
            self.parameter.to_owned()
        }
    }

    /// The most bytes worth downloading for item `index`, given the bytes of
    /// the items before it: the per-item limit, what is left of the total,
    /// or a default per kind when the catalog sets neither.
    pub fn download_limit(&self, bytes_before: u64) -> u64 {
        let default = match self.limits.kind {
            MediaKind::Image => DEFAULT_MAX_IMAGE_BYTES,
            MediaKind::Video => DEFAULT_MAX_VIDEO_BYTES,
            MediaKind::Audio => DEFAULT_MAX_AUDIO_BYTES,
        };
        let each = self.limits.max_bytes_each.unwrap_or(default);
        match self.limits.max_total_bytes {
            Some(total) => each.min(total.saturating_sub(bytes_before)),
            None => each,
        }
    }

    fn error(&self, message: String) -> InvalidRequest {
        InvalidRequest::new(Some(self.parameter), message)
    }

    /// "each reference video" or "image_url", the subject of a rule.
    fn subject(&self) -> String {
        if self.is_list {
            format!("each reference {}", kind_noun(self.limits.kind))
        } else {
            self.parameter.to_owned()
        }
    }
}

/// Images the catalog sets no byte limit for are still not downloaded past
/// this: no opening frame needs more.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 25 * 1024 * 1024;
pub const DEFAULT_MAX_VIDEO_BYTES: u64 = 100 * 1024 * 1024;
pub const DEFAULT_MAX_AUDIO_BYTES: u64 = 15 * 1024 * 1024;

fn kind_noun(kind: MediaKind) -> &'static str {
    match kind {
        MediaKind::Image => "image",
        MediaKind::Video => "video",
        MediaKind::Audio => "audio file",
    }
}

/// The media parameters of a request that the scope covers, in catalog
/// order, with their URLs in list order and normal form. Parameters without
/// URLs are left out.
pub fn media_fields<'a>(
    endpoint: Endpoint<'a>,
    input: &'a ValidatedInput,
    scope: Scope,
) -> Vec<MediaField<'a>> {
    endpoint
        .parameters()
        .filter(|parameter| scope == Scope::Everything || parameter.price_affecting)
        .filter_map(|parameter| {
            let limits = parameter.media.as_ref()?;
            let urls: Vec<String> = match input.get(&parameter.name)? {
                Value::String(url) => vec![url.as_str()],
                Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            }
            .into_iter()
            .map(|url| crate::normalize_url(url).unwrap_or_else(|| url.to_owned()))
            .collect();
            (!urls.is_empty()).then_some(MediaField {
                parameter: &parameter.name,
                is_list: parameter.parameter_type == ParameterType::UriArray,
                limits,
                urls,
            })
        })
        .collect()
}

/// Seconds for messages: `16.2`, `15`, `15.04`.
pub fn format_seconds(milliseconds: u64) -> String {
    let whole = milliseconds / 1000;
    let fraction = milliseconds % 1000;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:03}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

fn formats_text(formats: &[String]) -> String {
    let names: Vec<&str> = formats
        .iter()
        .map(|name| {
            MediaFormat::from_catalog_name(name)
                .map_or(name.as_str(), |format| format.display_name())
        })
        .collect();
    match names.as_slice() {
        [] => "nothing".to_owned(),
        [only] => (*only).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

fn range_text(minimum: Option<u64>, maximum: Option<u64>, unit: &str) -> String {
    match (minimum, maximum) {
        (Some(minimum), Some(maximum)) => format!("{minimum} to {maximum} {unit}"),
        (Some(minimum), None) => format!("at least {minimum} {unit}"),
        (None, Some(maximum)) => format!("at most {maximum} {unit}"),
        (None, None) => format!("any number of {unit}"),
    }
}

/// Checks one field's probed items (in list order) against its limits.
/// `output_seconds` is the requested output duration, for the reference
/// plus output cap.
pub fn check_field(
    field: &MediaField<'_>,
    items: &[MediaInfo],
    output_seconds: u32,
) -> Result<(), InvalidRequest> {
    let limits = field.limits;
    for (index, item) in items.iter().enumerate() {
        check_item(field, &field.item_label(index), item)?;
    }
    let total_ms: u64 = items.iter().filter_map(MediaInfo::duration_ms).sum();
    let total_bytes: u64 = items.iter().map(|item| item.size_bytes).sum();
    let plural = format!("reference {}s", kind_noun(limits.kind));
    if let Some(max_total) = limits.max_total_seconds
        && total_ms > u64::from(max_total) * 1000
    {
        return Err(field.error(format!(
            "{} add up to {} s; {plural} may last at most {max_total} s in total",
            field.parameter,
            format_seconds(total_ms)
        )));
    }
    if let Some(max_total) = limits.max_total_bytes
        && total_bytes > max_total
    {
        return Err(field.error(format!(
            "{} add up to {total_bytes} bytes; {plural} may hold at most {max_total} bytes in total",
            field.parameter
        )));
    }
    if let Some(cap) = limits.max_reference_plus_output_seconds {
        let output_ms = u64::from(output_seconds) * 1000;
        if total_ms + output_ms > u64::from(cap) * 1000 {
            return Err(field.error(format!(
                "{} add up to {} s and the output is {output_seconds} s, {} s in all; reference plus output seconds may be at most {cap}",
                field.parameter,
                format_seconds(total_ms),
                format_seconds(total_ms + output_ms)
            )));
        }
    }
    Ok(())
}

fn check_item(field: &MediaField<'_>, label: &str, item: &MediaInfo) -> Result<(), InvalidRequest> {
    let limits = field.limits;
    let subject = field.subject();
    if !limits
        .formats
        .iter()
        .any(|name| name == item.format.catalog_name())
    {
        return Err(field.error(format!(
            "{label} is {} {} file; {subject} must be {}",
            item.format.article(),
            item.format.display_name(),
            formats_text(&limits.formats)
        )));
    }
    if let Some(max_bytes) = limits.max_bytes_each
        && item.size_bytes > max_bytes
    {
        return Err(field.error(format!(
            "{label} is {} bytes; {subject} may be at most {max_bytes} bytes",
            item.size_bytes
        )));
    }
    if let Some(duration_ms) = item.duration_ms() {
        let too_short = limits
            .min_seconds
            .is_some_and(|minimum| duration_ms < u64::from(minimum) * 1000);
        let too_long = limits
            .max_seconds
            .is_some_and(|maximum| duration_ms > u64::from(maximum) * 1000);
        if too_short || too_long {
            return Err(field.error(format!(
                "{label} is {} s long; {subject} must be {}",
                format_seconds(duration_ms),
                range_text(
                    limits.min_seconds.map(u64::from),
                    limits.max_seconds.map(u64::from),
                    "s"
                )
            )));
        }
    }
    if let Some((width, height)) = item.dimensions() {
        let outside = |side: u32| {
            limits.min_side_px.is_some_and(|minimum| side < minimum)
                || limits.max_side_px.is_some_and(|maximum| side > maximum)
        };
        if outside(width) || outside(height) {
            return Err(field.error(format!(
                "{label} is {width}×{height} px; each side must be {}",
                range_text(
                    limits.min_side_px.map(u64::from),
                    limits.max_side_px.map(u64::from),
                    "px"
                )
            )));
        }
    }
    if let (Some(minimum), crate::probe::MediaDetails::Video { frame_rate, .. }) =
        (limits.min_fps, &item.details)
        && !frame_rate.at_least(minimum)
    {
        return Err(field.error(format!(
            "{label} runs at {:.2} fps; {subject} must have at least {minimum} fps",
            frame_rate.per_second()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{FrameRate, MediaDetails};

    fn video_limits() -> MediaLimits {
        MediaLimits {
            kind: MediaKind::Video,
            formats: vec!["mp4".into(), "mov".into()],
            min_seconds: Some(1),
            max_seconds: Some(15),
            max_total_seconds: Some(15),
            max_bytes_each: Some(1000),
            max_total_bytes: Some(1500),
            min_side_px: Some(240),
            max_side_px: Some(4096),
            min_fps: Some(16),
            max_reference_plus_output_seconds: Some(30),
        }
    }

    fn field(limits: &MediaLimits, count: usize) -> MediaField<'_> {
        MediaField {
            parameter: "reference_video_urls",
            is_list: true,
            limits,
            urls: vec!["https://example.com/v.mp4".to_owned(); count],
        }
    }

    fn video(duration_ms: u64, size_bytes: u64) -> MediaInfo {
        MediaInfo {
            format: MediaFormat::Mp4,
            size_bytes,
            details: MediaDetails::Video {
                width: 854,
                height: 480,
                duration_ms,
                frame_rate: FrameRate {
                    frames: 24,
                    ticks: 1000,
                    timescale: 1000,
                },
            },
        }
    }

    fn with_details(mut info: MediaInfo, details: MediaDetails) -> MediaInfo {
        info.details = details;
        info
    }

    fn message(result: Result<(), InvalidRequest>) -> String {
        let error = result.expect_err("the check should fail");
        assert_eq!(error.param.as_deref(), Some("reference_video_urls"));
        error.message
    }

    #[test]
    fn accepts_items_at_every_bound() {
        let limits = video_limits();
        let items = [video(1000, 500), video(14_000, 1000)];
        assert_eq!(check_field(&field(&limits, 2), &items, 15), Ok(()));
    }

    #[test]
    fn per_item_seconds_just_past_each_bound() {
        let limits = video_limits();
        let too_long = [video(2000, 10), video(15_001, 10)];
        assert_eq!(
            message(check_field(&field(&limits, 2), &too_long, 5)),
            "reference_video_urls[1] is 15.001 s long; each reference video must be 1 to 15 s"
        );
        let too_short = [video(999, 10)];
        assert_eq!(
            message(check_field(&field(&limits, 1), &too_short, 5)),
            "reference_video_urls[0] is 0.999 s long; each reference video must be 1 to 15 s"
        );
    }

    #[test]
    fn totals_of_seconds_and_bytes() {
        let limits = video_limits();
        let at_total = [video(7500, 750), video(7500, 750)];
        assert_eq!(check_field(&field(&limits, 2), &at_total, 15), Ok(()));
        let over_seconds = [video(7500, 10), video(7501, 10)];
        assert_eq!(
            message(check_field(&field(&limits, 2), &over_seconds, 5)),
            "reference_video_urls add up to 15.001 s; reference videos may last at most 15 s in total"
        );
        let over_bytes = [video(2000, 750), video(2000, 751)];
        assert!(message(check_field(&field(&limits, 2), &over_bytes, 5)).contains("1501 bytes"));
    }

    #[test]
    fn bytes_per_item() {
        let limits = video_limits();
        assert_eq!(
            check_field(&field(&limits, 1), &[video(2000, 1000)], 5),
            Ok(())
        );
        assert_eq!(
            message(check_field(&field(&limits, 1), &[video(2000, 1001)], 5)),
            "reference_video_urls[0] is 1001 bytes; each reference video may be at most 1000 bytes"
        );
    }

    #[test]
    fn reference_plus_output_cap() {
        let limits = video_limits();
        assert_eq!(
            check_field(&field(&limits, 1), &[video(15_000, 10)], 15),
            Ok(())
        );
        assert_eq!(
            message(check_field(&field(&limits, 1), &[video(15_000, 10)], 16)),
            "reference_video_urls add up to 15 s and the output is 16 s, 31 s in all; reference plus output seconds may be at most 30"
        );
    }

    #[test]
    fn sides_and_frame_rate() {
        let limits = video_limits();
        let sized = |width, height| {
            with_details(
                video(2000, 10),
                MediaDetails::Video {
                    width,
                    height,
                    duration_ms: 2000,
                    frame_rate: FrameRate {
                        frames: 16,
                        ticks: 1,
                        timescale: 1,
                    },
                },
            )
        };
        assert_eq!(
            check_field(&field(&limits, 1), &[sized(240, 4096)], 5),
            Ok(())
        );
        assert_eq!(
            message(check_field(&field(&limits, 1), &[sized(239, 480)], 5)),
            "reference_video_urls[0] is 239×480 px; each side must be 240 to 4096 px"
        );
        assert!(check_field(&field(&limits, 1), &[sized(854, 4097)], 5).is_err());
        let slow = with_details(
            video(2000, 10),
            MediaDetails::Video {
                width: 854,
                height: 480,
                duration_ms: 2000,
                frame_rate: FrameRate {
                    frames: 15,
                    ticks: 1,
                    timescale: 1,
                },
            },
        );
        assert_eq!(
            message(check_field(&field(&limits, 1), &[slow], 5)),
            "reference_video_urls[0] runs at 15.00 fps; each reference video must have at least 16 fps"
        );
    }

    #[test]
    fn formats_are_named() {
        let limits = video_limits();
        let png = MediaInfo {
            format: MediaFormat::Png,
            size_bytes: 10,
            details: MediaDetails::Image {
                width: 300,
                height: 300,
            },
        };
        assert_eq!(
            message(check_field(&field(&limits, 1), &[png], 5)),
            "reference_video_urls[0] is a PNG file; each reference video must be MP4 or MOV"
        );
        let image_limits = MediaLimits {
            kind: MediaKind::Image,
            formats: vec!["jpg".into(), "png".into(), "webp".into()],
            min_seconds: None,
            max_seconds: None,
            max_total_seconds: None,
            max_bytes_each: None,
            max_total_bytes: None,
            min_side_px: None,
            max_side_px: None,
            min_fps: None,
            max_reference_plus_output_seconds: None,
        };
        let opening = MediaField {
            parameter: "image_url",
            is_list: false,
            limits: &image_limits,
            urls: vec!["https://example.com/a.mp4".to_owned()],
        };
        let error = check_field(&opening, &[video(2000, 10)], 5).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("image_url"));
        assert_eq!(
            error.message,
            "image_url is an MP4 file; image_url must be JPG, PNG or WebP"
        );
    }

    #[test]
    fn download_limit_respects_the_remaining_total() {
        let limits = video_limits();
        let field = field(&limits, 2);
        assert_eq!(field.download_limit(0), 1000);
        assert_eq!(field.download_limit(1000), 500);
        assert_eq!(field.download_limit(2000), 0);
    }

    #[test]
    fn seconds_are_written_without_trailing_zeros() {
        assert_eq!(format_seconds(15_000), "15");
        assert_eq!(format_seconds(16_200), "16.2");
        assert_eq!(format_seconds(15_040), "15.04");
        assert_eq!(format_seconds(999), "0.999");
    }
}
