//! Decoding reference audio to the 16-bit PCM WAV that the local engine
//! mixes (it reads WAV only), so MP3 references are heard too.

use std::panic::{AssertUnwindSafe, catch_unwind};

use symphonia::core::codecs::CodecParameters;
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::TrackType;

use crate::probe::{MediaFormat, ProbeError, open_audio, sniff};

/// Returns WAV bytes for MP3 or WAV input: WAV unchanged, MP3 decoded to
/// 16-bit PCM, keeping at most `max_seconds` (the engine never uses more
/// than the clip's length, and this bounds the output's size).
pub fn to_wav(bytes: Vec<u8>, max_seconds: u32) -> Result<Vec<u8>, ProbeError> {
    match sniff(&bytes) {
        Some(MediaFormat::Wav) => Ok(bytes),
        Some(MediaFormat::Mp3) => {
            let unreadable = |reason: String| ProbeError::Unreadable {
                format: MediaFormat::Mp3.display_name(),
                reason,
            };
            catch_unwind(AssertUnwindSafe(|| decode_mp3(bytes, max_seconds)))
                .map_err(|_| unreadable("the audio decoder failed".to_owned()))?
                .map_err(unreadable)
        }
        _ => Err(ProbeError::UnknownFormat),
    }
}

fn decode_mp3(bytes: Vec<u8>, max_seconds: u32) -> Result<Vec<u8>, String> {
    let mut reader = open_audio(Box::new(std::io::Cursor::new(bytes)), MediaFormat::Mp3)?;
    let track = reader
        .default_track(TrackType::Audio)
        .ok_or_else(|| "it has no audio track".to_owned())?;
    let track_id = track.id;
    let Some(CodecParameters::Audio(parameters)) = track.codec_params.clone() else {
        return Err("it does not describe its audio".to_owned());
    };
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(&parameters, &AudioDecoderOptions::default())
        .map_err(|error| error.to_string())?;
    let mut samples: Vec<i16> = Vec::new();
    let mut decoded: Vec<i16> = Vec::new();
    let mut layout: Option<(u32, u16)> = None;
    while let Some(packet) = reader.next_packet().map_err(|error| error.to_string())? {
        if packet.track_id != track_id {
            continue;
        }
        let buffer = match decoder.decode(&packet) {
            Ok(buffer) => buffer,
            // A damaged frame is skipped, as players do.
            Err(SymphoniaError::DecodeError(_)) => continue,
            Err(error) => return Err(error.to_string()),
        };
        let spec = buffer.spec();
        let channels = u16::try_from(spec.channels().count()).unwrap_or(0);
        let (rate, channels) = *layout.get_or_insert((spec.rate(), channels));
        if rate == 0 || channels == 0 {
            return Err("it has no sample rate or channels".to_owned());
        }
        buffer.copy_to_vec_interleaved(&mut decoded);
        samples.extend_from_slice(&decoded);
        let limit = u64::from(max_seconds) * u64::from(rate) * u64::from(channels);
        if samples.len() as u64 >= limit {
            samples.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
            break;
        }
    }
    let (rate, channels) = layout.ok_or_else(|| "it holds no audio".to_owned())?;
    Ok(wav_bytes(rate, channels, &samples))
}

fn wav_bytes(rate: u32, channels: u16, samples: &[i16]) -> Vec<u8> {
    let data_bytes = u32::try_from(samples.len() * 2).unwrap_or(u32::MAX);
    let block_align = channels * 2;
    let mut bytes = Vec::with_capacity(44 + samples.len() * 2);
    bytes.extend_from_slice(b"RIFF");
    bytes.extend_from_slice(&data_bytes.saturating_add(36).to_le_bytes());
    bytes.extend_from_slice(b"WAVEfmt ");
    bytes.extend_from_slice(&16u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes());
    bytes.extend_from_slice(&channels.to_le_bytes());
    bytes.extend_from_slice(&rate.to_le_bytes());
    bytes.extend_from_slice(&(rate * u32::from(block_align)).to_le_bytes());
    bytes.extend_from_slice(&block_align.to_le_bytes());
    bytes.extend_from_slice(&16u16.to_le_bytes());
    bytes.extend_from_slice(b"data");
    bytes.extend_from_slice(&data_bytes.to_le_bytes());
    for sample in samples {
        bytes.extend_from_slice(&sample.to_le_bytes());
    }
    bytes
}
