//! Probing media bytes: what a file is (decided from its magic bytes, never
//! from the URL or a Content-Type) and the facts the catalog's limits need.
//!
//! The bytes come from strangers, so probing must never panic or allocate
//! without bound. Images are read from their headers only. Videos are read
//! with `re_mp4`, after a pre-scan that refuses sample tables too large to
//! be real (a tiny file can claim four billion samples), and inside
//! `catch_unwind`, because the parser indexes its tables without checks.
//! Audio is read with `symphonia`, counting packets when the container does
//! not state its length, up to a bound.
//!
//! [`probe_file`] reads a file on disk without holding it in memory: an
//! image's header through a buffered reader, a video's header boxes only
//! (`ftyp`, `moov`, `moof`; the media data is skipped by seeking), audio
//! through symphonia's buffered stream. [`probe`] does the same over bytes
//! already in memory.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read, Seek, SeekFrom};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use image::{ImageFormat, ImageReader, Limits};
use vidgate_core::MediaKind;

/// The formats the service understands, named as the catalog names them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MediaFormat {
    Jpg,
    Png,
    Webp,
    Mp4,
    Mov,
    Mp3,
    Wav,
}

impl MediaFormat {
    /// The catalog's lower-case name (`MediaLimits::formats`).
    pub fn catalog_name(self) -> &'static str {
        match self {
            MediaFormat::Jpg => "jpg",
            MediaFormat::Png => "png",
            MediaFormat::Webp => "webp",
            MediaFormat::Mp4 => "mp4",
            MediaFormat::Mov => "mov",
            MediaFormat::Mp3 => "mp3",
            MediaFormat::Wav => "wav",
        }
    }

    /// The name people know it by, for messages.
    pub fn display_name(self) -> &'static str {
        match self {
            MediaFormat::Jpg => "JPG",
            MediaFormat::Png => "PNG",
            MediaFormat::Webp => "WebP",
            MediaFormat::Mp4 => "MP4",
            MediaFormat::Mov => "MOV",
            MediaFormat::Mp3 => "MP3",
            MediaFormat::Wav => "WAV",
        }
    }

    /// "a" or "an", as the display name is spoken ("an MP4", "a PNG").
    pub fn article(self) -> &'static str {
        match self {
            MediaFormat::Mp4 | MediaFormat::Mov | MediaFormat::Mp3 => "an",
            MediaFormat::Jpg | MediaFormat::Png | MediaFormat::Webp | MediaFormat::Wav => "a",
        }
    }

    pub fn kind(self) -> MediaKind {
        match self {
            MediaFormat::Jpg | MediaFormat::Png | MediaFormat::Webp => MediaKind::Image,
            MediaFormat::Mp4 | MediaFormat::Mov => MediaKind::Video,
            MediaFormat::Mp3 | MediaFormat::Wav => MediaKind::Audio,
        }
    }

    /// Every format, for messages that list what is accepted.
    pub const ALL: [MediaFormat; 7] = [
        MediaFormat::Jpg,
        MediaFormat::Png,
        MediaFormat::Webp,
        MediaFormat::Mp4,
        MediaFormat::Mov,
        MediaFormat::Mp3,
        MediaFormat::Wav,
    ];

    /// The format with this catalog name.
    pub fn from_catalog_name(name: &str) -> Option<MediaFormat> {
        MediaFormat::ALL
            .into_iter()
            .find(|format| format.catalog_name() == name)
    }
}

/// A video's frame rate as an exact fraction: `frames` frames in `ticks`
/// ticks of `timescale` per second.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FrameRate {
    pub frames: u64,
    pub ticks: u64,
    pub timescale: u64,
}

impl FrameRate {
    /// Frames per second, for messages.
    pub fn per_second(self) -> f64 {
        if self.ticks == 0 {
            return 0.0;
        }
        self.frames as f64 * self.timescale as f64 / self.ticks as f64
    }

    /// Whether the rate is at least `minimum` frames per second, compared
    /// exactly.
    pub fn at_least(self, minimum: u32) -> bool {
        u128::from(self.frames) * u128::from(self.timescale)
            >= u128::from(minimum) * u128::from(self.ticks)
    }
}

/// What probing found out about one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaInfo {
    pub format: MediaFormat,
    pub size_bytes: u64,
    pub details: MediaDetails,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediaDetails {
    Image {
        width: u32,
        height: u32,
    },
    Video {
        width: u32,
        height: u32,
        duration_ms: u64,
        frame_rate: FrameRate,
    },
    Audio {
        duration_ms: u64,
    },
}

impl MediaInfo {
    pub fn kind(&self) -> MediaKind {
        self.format.kind()
    }

    /// The playing time of a video or audio file.
    pub fn duration_ms(&self) -> Option<u64> {
        match self.details {
            MediaDetails::Video { duration_ms, .. } | MediaDetails::Audio { duration_ms } => {
                Some(duration_ms)
            }
            MediaDetails::Image { .. } => None,
        }
    }

    /// Width and height of an image or video.
    pub fn dimensions(&self) -> Option<(u32, u32)> {
        match self.details {
            MediaDetails::Image { width, height } | MediaDetails::Video { width, height, .. } => {
                Some((width, height))
            }
            MediaDetails::Audio { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("is not a JPG, PNG, WebP, MP4, MOV, MP3 or WAV file")]
    UnknownFormat,
    #[error("is not a readable {format} file: {reason}")]
    Unreadable {
        format: &'static str,
        reason: String,
    },
}

impl ProbeError {
    fn unreadable(format: MediaFormat, reason: impl Into<String>) -> ProbeError {
        ProbeError::Unreadable {
            format: format.display_name(),
            reason: reason.into(),
        }
    }
}

/// Sample-table entries a video may declare across its tracks. A 15 s clip
/// at 60 fps with AAC audio has under 2,000; this leaves room for PCM audio
/// stored one sample per entry, and bounds the parser's sample list to tens
/// of megabytes.
pub const MAX_VIDEO_SAMPLES: u64 = 1_000_000;
/// Audio packets read when a file does not state its length; an MP3 frame
/// lasts about 26 ms, so this covers more than an hour.
const MAX_AUDIO_PACKETS: u64 = 200_000;
/// Images wider or taller than this are refused without decoding.
const MAX_IMAGE_SIDE: u32 = 16_384;

/// Decides the format from the leading bytes.
pub fn sniff(bytes: &[u8]) -> Option<MediaFormat> {
    let starts = |prefix: &[u8]| bytes.starts_with(prefix);
    if starts(&[0xFF, 0xD8, 0xFF]) {
        return Some(MediaFormat::Jpg);
    }
    if starts(b"\x89PNG\r\n\x1a\n") {
        return Some(MediaFormat::Png);
    }
    if bytes.len() >= 12 && starts(b"RIFF") {
        match &bytes[8..12] {
            b"WEBP" => return Some(MediaFormat::Webp),
            b"WAVE" => return Some(MediaFormat::Wav),
            _ => return None,
        }
    }
    if bytes.len() >= 12 && &bytes[4..8] == b"ftyp" {
        // QuickTime files declare the brand `qt  `; everything else in the
        // ISO family is served as MP4.
        return Some(if &bytes[8..12] == b"qt  " {
            MediaFormat::Mov
        } else {
            MediaFormat::Mp4
        });
    }
    if starts(b"ID3") || is_mpeg_audio_frame(bytes) {
        return Some(MediaFormat::Mp3);
    }
    None
}

/// An MPEG-1/2/2.5 Layer III frame header: an 11-bit sync word, a valid
/// version, layer III, and a bitrate and sample-rate index that are not
/// reserved.
fn is_mpeg_audio_frame(bytes: &[u8]) -> bool {
    let [first, second, third, ..] = bytes else {
        return false;
    };
    let sync = *first == 0xFF && second & 0xE0 == 0xE0;
    let version_valid = (second >> 3) & 0b11 != 0b01;
    let layer_three = (second >> 1) & 0b11 == 0b01;
    let bitrate_valid = third >> 4 != 0b1111;
    let sample_rate_valid = (third >> 2) & 0b11 != 0b11;
    sync && version_valid && layer_three && bitrate_valid && sample_rate_valid
}

/// Probes a whole file held in memory. CPU-bound: call it on a blocking
/// thread for large files.
pub fn probe(bytes: &[u8]) -> Result<MediaInfo, ProbeError> {
    let format = sniff(bytes).ok_or(ProbeError::UnknownFormat)?;
    let size_bytes = bytes.len() as u64;
    let details = match format.kind() {
        MediaKind::Image => probe_image(bytes, format)?,
        MediaKind::Video => {
            let header = video_header_boxes(&mut Cursor::new(bytes), size_bytes)
                .map_err(|reason| ProbeError::unreadable(format, reason))?;
            probe_video(&header, format)?
        }
        MediaKind::Audio => probe_audio(bytes, format)?,
    };
    Ok(MediaInfo {
        format,
        size_bytes,
        details,
    })
}

/// Probes a file on disk with bounded memory: at most
/// [`MAX_VIDEO_HEADER_BYTES`] of a video's header boxes and a few buffers
/// are read into memory, whatever the file's size. Blocking file I/O and
/// CPU work: call it on a blocking thread.
pub fn probe_file(path: &Path) -> Result<MediaInfo, ProbeError> {
    let cannot_read = |_| ProbeError::Unreadable {
        format: "media",
        reason: "the server could not read its copy back".to_owned(),
    };
    let mut file = File::open(path).map_err(cannot_read)?;
    let size_bytes = file.metadata().map_err(cannot_read)?.len();
    let mut head = Vec::with_capacity(16);
    (&mut file)
        .take(16)
        .read_to_end(&mut head)
        .map_err(cannot_read)?;
    let format = sniff(&head).ok_or(ProbeError::UnknownFormat)?;
    file.rewind().map_err(cannot_read)?;
    let details = match format.kind() {
        MediaKind::Image => probe_image_reader(BufReader::new(file), format)?,
        MediaKind::Video => {
            let header = video_header_boxes(&mut BufReader::new(file), size_bytes)
                .map_err(|reason| ProbeError::unreadable(format, reason))?;
            probe_video(&header, format)?
        }
        MediaKind::Audio => probe_audio_source(Box::new(file), format)?,
    };
    Ok(MediaInfo {
        format,
        size_bytes,
        details,
    })
}

/// Whether the video held in `bytes` has a sound track, read from its
/// header boxes as [`probe`] reads its picture. A file that is not a
/// readable video has none. CPU-bound: call it on a blocking thread.
pub fn video_has_audio(bytes: &[u8]) -> bool {
    video_header_boxes(&mut Cursor::new(bytes), bytes.len() as u64)
        .is_ok_and(|header| header_has_audio_track(&header))
}

/// Whether the video file at `path` has a sound track, reading only its
/// header boxes (at most [`MAX_VIDEO_HEADER_BYTES`]), never its media
/// data. A file that cannot be read, or is not a readable video, has none.
/// Blocking file I/O: call it on a blocking thread.
pub fn video_file_has_audio(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let Ok(metadata) = file.metadata() else {
        return false;
    };
    video_header_boxes(&mut BufReader::new(file), metadata.len())
        .is_ok_and(|header| header_has_audio_track(&header))
}

/// Whether the header boxes of a video declare an audio track, with the
/// same guards as [`probe_video`]: the sample limit before the parser, and
/// the parser inside `catch_unwind`.
fn header_has_audio_track(header: &[u8]) -> bool {
    if declared_sample_count(header).is_ok_and(|declared| declared <= MAX_VIDEO_SAMPLES) {
        catch_unwind(AssertUnwindSafe(|| {
            re_mp4::Mp4::read_bytes(header).is_ok_and(|mp4| {
                mp4.tracks()
                    .values()
                    .any(|track| track.kind == Some(re_mp4::TrackKind::Audio))
            })
        }))
        .unwrap_or(false)
    } else {
        false
    }
}

/// Reads an image's size from its header.
pub fn probe_image(bytes: &[u8], format: MediaFormat) -> Result<MediaDetails, ProbeError> {
    probe_image_reader(Cursor::new(bytes), format)
}

/// Reads an image's size from the header at the start of `reader`; the
/// decoder reads only as far as the header.
fn probe_image_reader<R: BufRead + Seek>(
    reader: R,
    format: MediaFormat,
) -> Result<MediaDetails, ProbeError> {
    let image_format = match format {
        MediaFormat::Jpg => ImageFormat::Jpeg,
        MediaFormat::Png => ImageFormat::Png,
        MediaFormat::Webp => ImageFormat::WebP,
        _ => return Err(ProbeError::unreadable(format, "not an image format")),
    };
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_IMAGE_SIDE);
    limits.max_image_height = Some(MAX_IMAGE_SIDE);
    let mut reader = ImageReader::with_format(reader, image_format);
    reader.limits(limits);
    let read = catch_unwind(AssertUnwindSafe(|| reader.into_dimensions()))
        .map_err(|_| ProbeError::unreadable(format, "the image decoder failed"))?;
    let (width, height) =
        read.map_err(|error| ProbeError::unreadable(format, error.to_string()))?;
    if width == 0 || height == 0 {
        return Err(ProbeError::unreadable(format, "the image has no pixels"));
    }
    Ok(MediaDetails::Image { width, height })
}

/// Reads a video's first video track: size, duration and frame rate. The
/// frame rate is the sample count divided by the summed sample durations,
/// which stays exact for variable-rate files where the first sample's
/// duration would mislead.
pub fn probe_video(bytes: &[u8], format: MediaFormat) -> Result<MediaDetails, ProbeError> {
    let declared =
        declared_sample_count(bytes).map_err(|reason| ProbeError::unreadable(format, reason))?;
    if declared > MAX_VIDEO_SAMPLES {
        return Err(ProbeError::unreadable(
            format,
            format!(
                "it declares {declared} samples, more than the {MAX_VIDEO_SAMPLES} the service reads"
            ),
        ));
    }
    let parsed = catch_unwind(AssertUnwindSafe(|| {
        let mp4 = re_mp4::Mp4::read_bytes(bytes).map_err(|error| error.to_string())?;
        let track = mp4
            .tracks()
            .values()
            .find(|track| track.kind == Some(re_mp4::TrackKind::Video))
            .ok_or_else(|| "it has no video track".to_owned())?;
        let ticks: u128 = track
            .samples
            .iter()
            .map(|sample| u128::from(sample.duration))
            .sum();
        Ok::<_, String>((
            u32::from(track.width),
            u32::from(track.height),
            track.samples.len() as u64,
            ticks,
            track.timescale,
        ))
    }))
    .map_err(|_| ProbeError::unreadable(format, "the container is malformed"))?;
    let (width, height, frames, ticks, timescale) =
        parsed.map_err(|reason| ProbeError::unreadable(format, reason))?;
    if frames == 0 || ticks == 0 || timescale == 0 {
        return Err(ProbeError::unreadable(format, "its video track is empty"));
    }
    if width == 0 || height == 0 {
        return Err(ProbeError::unreadable(
            format,
            "its video track has no frame size",
        ));
    }
    let duration_ms = u64::try_from(ticks * 1000 / u128::from(timescale)).unwrap_or(u64::MAX);
    Ok(MediaDetails::Video {
        width,
        height,
        duration_ms,
        frame_rate: FrameRate {
            frames,
            ticks: u64::try_from(ticks).unwrap_or(u64::MAX),
            timescale,
        },
    })
}

/// How many bytes of a video's header boxes (`ftyp`, `moov`, every `moof`)
/// are read to probe it. A `moov` takes well under a megabyte per minute of
/// video, and the sample limit above caps what a parser would build from
/// more; this bounds what a hostile file can make us read into memory.
pub const MAX_VIDEO_HEADER_BYTES: u64 = 32 * 1024 * 1024;

/// The top-level boxes a video's facts come from, copied out of `reader`
/// one after another into a small MP4 of their own; everything else (the
/// media data, which is most of the file) is skipped by seeking, never
/// read. A box of size 0 ("to the end of the file") is given its real size.
fn video_header_boxes<R: Read + Seek>(reader: &mut R, file_size: u64) -> Result<Vec<u8>, String> {
    let cut_off = |_| "the file is cut off inside a box".to_owned();
    let mut header = Vec::new();
    let mut position = 0u64;
    while position + 8 <= file_size {
        reader.seek(SeekFrom::Start(position)).map_err(cut_off)?;
        let mut head = [0u8; 16];
        reader.read_exact(&mut head[..8]).map_err(cut_off)?;
        let size32 = u64::from(read_u32(&head, 0));
        let name = [head[4], head[5], head[6], head[7]];
        let (header_length, size) = match size32 {
            0 => (8, file_size - position),
            1 => {
                if position + 16 > file_size {
                    return Err("a box header is cut off".to_owned());
                }
                reader.read_exact(&mut head[8..16]).map_err(cut_off)?;
                (16, read_u64(&head, 8))
            }
            size => (8, size),
        };
        if size < header_length || size > file_size - position {
            return Err("a box is larger than its container".to_owned());
        }
        if matches!(&name, b"ftyp" | b"moov" | b"moof") {
            if header.len() as u64 + size > MAX_VIDEO_HEADER_BYTES {
                return Err(format!(
                    "its header boxes are larger than the {MAX_VIDEO_HEADER_BYTES} bytes the service reads"
                ));
            }
            let body_length = (size - header_length) as usize;
            // Written back with an explicit size: 32 bits suffice under the
            // header limit.
            header.extend_from_slice(&((body_length + 8) as u32).to_be_bytes());
            header.extend_from_slice(&name);
            let start = header.len();
            header.resize(start + body_length, 0);
            reader.read_exact(&mut header[start..]).map_err(cut_off)?;
        }
        position += size;
    }
    Ok(header)
}

/// Sums the sample counts that the `stsz`/`stz2` and `trun` boxes declare,
/// walking the box tree without trusting any size beyond the file.
fn declared_sample_count(bytes: &[u8]) -> Result<u64, String> {
    const CONTAINERS: [&[u8; 4]; 11] = [
        b"moov", b"trak", b"mdia", b"minf", b"stbl", b"moof", b"traf", b"edts", b"mvex", b"dinf",
        b"udta",
    ];
    let mut total: u64 = 0;
    // Each entry is a byte range holding a sequence of boxes; nesting is
    // bounded by the file because every child is strictly inside its parent.
    let mut pending = vec![(0usize, bytes.len(), true)];
    while let Some((mut position, end, top_level)) = pending.pop() {
        while position + 8 <= end {
            let size32 = read_u32(bytes, position) as u64;
            let name = &bytes[position + 4..position + 8];
            let (header, size) = match size32 {
                // "To the end of the file" is only meaningful for a top-level
                // box; inside a container the MP4 parser would read a box of
                // size 0 over and over (found by fuzzing: a hang).
                0 if top_level => (8, (end - position) as u64),
                0 => return Err("a box inside a container declares size 0".to_owned()),
                1 => {
                    if position + 16 > end {
                        return Err("a box header is cut off".to_owned());
                    }
                    (16, read_u64(bytes, position + 8))
                }
                size => (8, size),
            };
            if size < header as u64 || size > (end - position) as u64 {
                return Err("a box is larger than its container".to_owned());
            }
            let box_end = position + size as usize;
            let body = position + header;
            if CONTAINERS.iter().any(|container| container[..] == *name) {
                pending.push((body, box_end, false));
            } else if (name == b"stsz" || name == b"stz2") && body + 12 <= box_end {
                // Version and flags, then (stsz) sample size or (stz2)
                // reserved and field size, then the sample count.
                total = total.saturating_add(u64::from(read_u32(bytes, body + 8)));
            } else if name == b"trun" && body + 8 <= box_end {
                total = total.saturating_add(u64::from(read_u32(bytes, body + 4)));
            }
            position = box_end;
        }
        // Leftover bytes too short for a box header inside a container: the
        // MP4 parser would read a header past the container's end, and can
        // loop forever on what it finds there (found by fuzzing: a hang).
        if position < end && !top_level {
            return Err("a box header is cut off".to_owned());
        }
    }
    Ok(total)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    (u64::from(read_u32(bytes, at)) << 32) | u64::from(read_u32(bytes, at + 4))
}

/// Reads an audio file's duration.
pub fn probe_audio(bytes: &[u8], format: MediaFormat) -> Result<MediaDetails, ProbeError> {
    probe_audio_source(Box::new(Cursor::new(bytes.to_vec())), format)
}

/// Reads the duration of the audio `source` holds, through symphonia's
/// buffered stream (a file is read in pieces, never whole).
fn probe_audio_source(
    source: Box<dyn symphonia::core::io::MediaSource>,
    format: MediaFormat,
) -> Result<MediaDetails, ProbeError> {
    let duration = catch_unwind(AssertUnwindSafe(|| audio_duration_ms(source, format)))
        .map_err(|_| ProbeError::unreadable(format, "the audio decoder failed"))?;
    let duration_ms = duration.map_err(|reason| ProbeError::unreadable(format, reason))?;
    Ok(MediaDetails::Audio { duration_ms })
}

/// Opens an audio container with symphonia; `format` is a hint only.
pub(crate) fn open_audio(
    source: Box<dyn symphonia::core::io::MediaSource>,
    format: MediaFormat,
) -> Result<Box<dyn symphonia::core::formats::FormatReader>, String> {
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::formats::probe::Hint;
    use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};
    use symphonia::core::meta::MetadataOptions;

    let stream = MediaSourceStream::new(source, MediaSourceStreamOptions::default());
    let mut hint = Hint::new();
    hint.with_extension(format.catalog_name());
    symphonia::default::get_probe()
        .probe(
            &hint,
            stream,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|error| error.to_string())
}

fn audio_duration_ms(
    source: Box<dyn symphonia::core::io::MediaSource>,
    format: MediaFormat,
) -> Result<u64, String> {
    use symphonia::core::formats::TrackType;

    let mut reader = open_audio(source, format)?;
    let track = reader
        .default_track(TrackType::Audio)
        .ok_or_else(|| "it has no audio track".to_owned())?;
    let track_id = track.id;
    let time_base = track
        .time_base
        .ok_or_else(|| "it does not state its time base".to_owned())?;
    let ticks = match track.duration {
        Some(duration) => duration.get(),
        None => {
            let mut ticks: u64 = 0;
            let mut packets: u64 = 0;
            while let Some(packet) = reader.next_packet().map_err(|error| error.to_string())? {
                if packet.track_id == track_id {
                    ticks = ticks.saturating_add(packet.dur.get());
                }
                packets += 1;
                if packets > MAX_AUDIO_PACKETS {
                    return Err("it is too long to measure".to_owned());
                }
            }
            ticks
        }
    };
    if ticks == 0 {
        return Err("it holds no audio".to_owned());
    }
    let milliseconds = u128::from(ticks) * u128::from(time_base.numer.get()) * 1000
        / u128::from(time_base.denom.get());
    Ok(u64::try_from(milliseconds).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_formats_from_magic_bytes() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(MediaFormat::Jpg));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n...."), Some(MediaFormat::Png));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(MediaFormat::Webp));
        assert_eq!(sniff(b"RIFF\0\0\0\0WAVEfmt "), Some(MediaFormat::Wav));
        assert_eq!(sniff(b"RIFF\0\0\0\0AVI LIST"), None);
        assert_eq!(sniff(b"\0\0\0\x20ftypisom\0\0\0\0"), Some(MediaFormat::Mp4));
        assert_eq!(sniff(b"\0\0\0\x14ftypqt  \0\0\0\0"), Some(MediaFormat::Mov));
        assert_eq!(sniff(b"ID3\x04\0\0\0\0\0\0"), Some(MediaFormat::Mp3));
        // MPEG-1 Layer III, 128 kbit/s, 44.1 kHz.
        assert_eq!(sniff(&[0xFF, 0xFB, 0x90, 0x64]), Some(MediaFormat::Mp3));
        // Layer II is not MP3.
        assert_eq!(sniff(&[0xFF, 0xFD, 0x90, 0x64]), None);
        assert_eq!(sniff(b"GIF89a"), None);
        assert_eq!(sniff(b""), None);
    }

    #[test]
    fn unknown_and_truncated_bytes_are_errors_not_panics() {
        assert_eq!(probe(b"hello"), Err(ProbeError::UnknownFormat));
        for bytes in [
            &b"\x89PNG\r\n\x1a\n"[..],
            &[0xFF, 0xD8, 0xFF, 0xE0, 0, 0],
            b"RIFF\0\0\0\0WEBP",
            b"RIFF\xff\xff\xff\xffWAVEfmt ",
            b"\0\0\0\x10ftypisom\0\0\0\0",
            b"ID3\x04\0\0\0\0\0\0",
        ] {
            assert!(
                matches!(probe(bytes), Err(ProbeError::Unreadable { .. })),
                "{bytes:?}"
            );
        }
    }

    /// A box: 32-bit size, name, body.
    fn mp4_box(name: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut bytes = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(body);
        bytes
    }

    /// A file of `prefix`, then `zeros` zero bytes that are never stored,
    /// then `suffix`, which counts the bytes read from it.
    struct VirtualFile {
        prefix: Vec<u8>,
        zeros: u64,
        suffix: Vec<u8>,
        position: u64,
        bytes_read: u64,
    }

    impl VirtualFile {
        fn len(&self) -> u64 {
            self.prefix.len() as u64 + self.zeros + self.suffix.len() as u64
        }
    }

    impl Read for VirtualFile {
        fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
            let mut written = 0;
            while written < buffer.len() && self.position < self.len() {
                let at = self.position;
                let prefix_length = self.prefix.len() as u64;
                buffer[written] = if at < prefix_length {
                    self.prefix[at as usize]
                } else if at < prefix_length + self.zeros {
                    0
                } else {
                    self.suffix[(at - prefix_length - self.zeros) as usize]
                };
                written += 1;
                self.position += 1;
            }
            self.bytes_read += written as u64;
            Ok(written)
        }
    }

    impl Seek for VirtualFile {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.position = match to {
                SeekFrom::Start(offset) => offset,
                SeekFrom::End(offset) => self.len().saturating_add_signed(offset),
                SeekFrom::Current(offset) => self.position.saturating_add_signed(offset),
            };
            Ok(self.position)
        }
    }

    #[test]
    fn a_video_is_probed_from_its_header_boxes_without_reading_its_media_data() {
        let ftyp = mp4_box(b"ftyp", b"isom\0\0\0\0");
        let moov = mp4_box(b"moov", &mp4_box(b"udta", b""));
        let media_bytes: u64 = 100 * 1024 * 1024;
        let mut prefix = ftyp.clone();
        prefix.extend_from_slice(&((media_bytes + 8) as u32).to_be_bytes());
        prefix.extend_from_slice(b"mdat");
        let mut file = VirtualFile {
            prefix,
            zeros: media_bytes,
            suffix: moov.clone(),
            position: 0,
            bytes_read: 0,
        };
        let size = file.len();
        let header = video_header_boxes(&mut file, size).unwrap();
        assert_eq!(header, [ftyp, moov].concat());
        assert!(file.bytes_read < 100, "read {} bytes", file.bytes_read);
    }

    #[test]
    fn header_boxes_past_the_limit_are_refused_before_they_are_read() {
        let ftyp = mp4_box(b"ftyp", b"isom\0\0\0\0");
        let mut prefix = ftyp;
        prefix.extend_from_slice(&((MAX_VIDEO_HEADER_BYTES + 8) as u32).to_be_bytes());
        prefix.extend_from_slice(b"moov");
        let mut file = VirtualFile {
            prefix,
            zeros: MAX_VIDEO_HEADER_BYTES,
            suffix: Vec::new(),
            position: 0,
            bytes_read: 0,
        };
        let size = file.len();
        let refusal = video_header_boxes(&mut file, size).unwrap_err();
        assert!(refusal.contains("header boxes are larger"), "{refusal}");
        assert!(file.bytes_read < 100);
    }

    #[test]
    fn refuses_a_tiny_file_that_claims_billions_of_samples() {
        // stsz: version/flags, a constant sample size of 1, 4e9 samples.
        let mut stsz_body = vec![0; 4];
        stsz_body.extend_from_slice(&1u32.to_be_bytes());
        stsz_body.extend_from_slice(&4_000_000_000u32.to_be_bytes());
        let stbl = mp4_box(b"stbl", &mp4_box(b"stsz", &stsz_body));
        let trak = mp4_box(b"trak", &mp4_box(b"mdia", &mp4_box(b"minf", &stbl)));
        let mut file = mp4_box(b"ftyp", b"isom\0\0\0\0");
        file.extend(mp4_box(b"moov", &trak));
        assert_eq!(declared_sample_count(&file), Ok(4_000_000_000));
        let error = probe(&file).unwrap_err();
        assert!(
            error.to_string().contains("declares 4000000000 samples"),
            "{error}"
        );
    }

    #[test]
    fn box_sizes_beyond_the_file_are_refused() {
        let mut file = mp4_box(b"ftyp", b"isom\0\0\0\0");
        file.extend_from_slice(&1000u32.to_be_bytes());
        file.extend_from_slice(b"moov");
        assert!(declared_sample_count(&file).is_err());
        assert!(probe(&file).is_err());
    }

    #[test]
    fn a_size_zero_box_inside_a_container_is_refused_not_looped_on() {
        // The fuzzer's input that hung re_mp4: an 11-byte moof, whose
        // parser reads a child header past its end and finds size 0 there.
        let mut hung = vec![0, 0, 0, 0x0b];
        hung.extend_from_slice(b"moof");
        hung.extend_from_slice(&[0; 27]);
        hung.extend_from_slice(&[0xfe, 0xff, 0, 0, 0, 0, 0x0a, 0, 0x0a, 0xff]);
        assert_eq!(hung.len(), 45);
        assert!(declared_sample_count(&hung).is_err());
        assert!(probe_video(&hung, MediaFormat::Mp4).is_err());
        // A box of size 0 inside a container is refused as well.
        let inner = mp4_box(b"moof", b"\0\0\0\0free");
        assert!(declared_sample_count(&inner).is_err());
        assert!(probe_video(&inner, MediaFormat::Mp4).is_err());
        // At the top level, size 0 means "to the end of the file".
        let mut to_the_end = mp4_box(b"ftyp", b"isom\0\0\0\0");
        to_the_end.extend_from_slice(b"\0\0\0\0mdat\x01\x02");
        assert_eq!(declared_sample_count(&to_the_end), Ok(0));
    }

    #[test]
    fn frame_rate_compares_exactly() {
        let rate = FrameRate {
            frames: 48,
            ticks: 2 * 12_288,
            timescale: 12_288,
        };
        assert!(rate.at_least(24));
        assert!(!rate.at_least(25));
        assert_eq!(rate.per_second(), 24.0);
        let just_under = FrameRate {
            frames: 15_999,
            ticks: 1_000_000,
            timescale: 1000,
        };
        assert!(!just_under.at_least(16));
        assert!(just_under.at_least(15));
    }
}
