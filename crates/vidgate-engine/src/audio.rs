//! The soundtrack: a short piece synthesised from the prompt's mood and the seed, with any
//! reference audio mixed in, encoded as AAC-LC.
//!
//! The synthesis uses integer phase arithmetic and the engine's own sine, so the samples (and
//! the AAC bytes) are the same on every run and platform.

use std::sync::atomic::{AtomicBool, Ordering};

use fdk_aac_rs::encoder::{Aot, Bitrate, ChannelMode, Encoder, EncoderError, Transport};

use crate::RenderError;
use crate::mood::Mood;
use crate::mux::EncodedAudio;
use crate::numbers::{SplitMix64, sin_turns};

pub(crate) const SAMPLE_RATE: u32 = 48_000;
const CHANNELS: usize = 2;
const AAC_BITRATE: u32 = 128_000;
/// Samples between cancel checks while synthesising (about 85 ms of sound).
const CANCEL_CHECK_INTERVAL: usize = 4096;

/// Equal-tempered ratios of the twelve semitones above a note, as literals so that note
/// frequencies do not depend on the platform's `powf`.
const SEMITONE_RATIOS: [f64; 12] = [
    1.0,
    1.059_463_094_359_295_3,
    1.122_462_048_309_373,
    1.189_207_115_002_721,
    1.259_921_049_894_873_2,
    1.334_839_854_170_034_4,
    std::f64::consts::SQRT_2,
    1.498_307_076_876_681_5,
    1.587_401_051_968_199_4,
    1.681_792_830_507_429,
    1.781_797_436_280_678_5,
    1.887_748_625_363_386_8,
];
const MAJOR_SCALE: [i32; 7] = [0, 2, 4, 5, 7, 9, 11];
const MINOR_SCALE: [i32; 7] = [0, 2, 3, 5, 7, 8, 10];
/// Chord progressions as scale degrees (0 is the tonic), one chord per bar.
const PROGRESSIONS: [[usize; 4]; 4] = [[0, 4, 5, 3], [0, 5, 3, 4], [0, 3, 0, 4], [5, 3, 0, 4]];
/// Orders in which the arpeggio walks the chord's notes (indices into root, third, fifth, octave).
const ARPEGGIO_PATTERNS: [[usize; 4]; 4] = [[0, 1, 2, 3], [0, 2, 1, 3], [3, 2, 1, 0], [0, 2, 3, 2]];

/// Renders and encodes `duration_s` seconds of stereo sound. Reference audio that cannot be
/// decoded is skipped.
pub(crate) fn render_soundtrack(
    mood: &Mood,
    duration_s: u32,
    reference_audio: &[Vec<u8>],
    cancel: &AtomicBool,
) -> Result<EncodedAudio, RenderError> {
    let frames = (duration_s * SAMPLE_RATE) as usize;
    let mut mix = synthesize(mood, frames, cancel)?;
    let references: Vec<Vec<f32>> = reference_audio
        .iter()
        .filter_map(|bytes| decode_wav(bytes, frames))
        .collect();
    if !references.is_empty() {
        // The reference audio leads; the music steps back under it.
        for sample in &mut mix {
            *sample *= 0.5;
        }
        for reference in &references {
            for (sample, incoming) in mix.iter_mut().zip(reference) {
                *sample += 0.8 * incoming;
            }
        }
    }
    let pcm: Vec<i16> = mix
        .iter()
        .map(|&sample| (soft_limit(sample) * 32_000.0).round() as i16)
        .collect();
    encode_aac(&pcm, frames, cancel)
}

/// Keeps peaks under full scale without touching anything below 0.8.
fn soft_limit(sample: f32) -> f32 {
    let magnitude = sample.abs();
    if magnitude <= 0.8 {
        return sample;
    }
    let over = (magnitude - 0.8) / 0.2;
    (0.8 + 0.2 * over / (1.0 + over)).copysign(sample)
}

fn note_frequency(midi_note: i32) -> f64 {
    let offset = midi_note - 69;
    440.0 * SEMITONE_RATIOS[offset.rem_euclid(12) as usize] * 2f64.powi(offset.div_euclid(12))
}

/// A phase increment per sample in 32-bit turns.
fn phase_step(frequency: f64) -> u64 {
    (frequency * 4_294_967_296.0 / f64::from(SAMPLE_RATE)) as u64
}

/// The oscillator phase at sample `index`, in turns; computed from the index rather than
/// accumulated, so it is exact however long the clip.
fn phase_at(step: u64, index: usize) -> f32 {
    (step.wrapping_mul(index as u64) as u32) as f32 / 4_294_967_296.0
}

fn triangle(phase: f32) -> f32 {
    4.0 * (phase - 0.5).abs() - 1.0
}

/// A small band of music: a pad of triangle-wave chords, a plucked sine bass on the beat, a
/// sine arpeggio in eighth notes and a soft noise hi-hat on the off-beats.
fn synthesize(mood: &Mood, frames: usize, cancel: &AtomicBool) -> Result<Vec<f32>, RenderError> {
    let mut random = SplitMix64::new(mood.variation_seed ^ 0xA0D1_0000);
    let tempo = (random.range_f32(72.0, 104.0) * mood.speed.sqrt()).clamp(56.0, 150.0);
    let beat = (60.0 * SAMPLE_RATE as f32 / tempo) as usize;
    let bar = beat * 4;
    let eighth = beat / 2;
    let root = 45 + random.below(12) as i32;
    let scale = if mood.minor { MINOR_SCALE } else { MAJOR_SCALE };
    let progression = PROGRESSIONS[random.below(PROGRESSIONS.len())];
    let pattern = ARPEGGIO_PATTERNS[random.below(ARPEGGIO_PATTERNS.len())];
    let hat_level = if mood.speed > 1.5 {
        0.05
    } else {
        random.range_f32(0.0, 0.035)
    };
    // MIDI notes of a chord on scale degree `degree`: root, third, fifth and octave.
    let chord_notes = |degree: usize| -> [i32; 4] {
        let note =
            |step: usize| root + scale[(degree + step) % 7] + 12 * ((degree + step) / 7) as i32;
        [note(0), note(2), note(4), note(0) + 12]
    };
    let chords: Vec<[i32; 4]> = progression
        .iter()
        .map(|&degree| chord_notes(degree))
        .collect();
    let steps = |notes: [i32; 4], transpose: i32| {
        notes.map(|note| phase_step(note_frequency(note + transpose)))
    };
    let pad_steps: Vec<[u64; 4]> = chords.iter().map(|&notes| steps(notes, 12)).collect();
    let bass_steps: Vec<u64> = chords
        .iter()
        .map(|notes| phase_step(note_frequency(notes[0] - 12)))
        .collect();
    let arpeggio_steps: Vec<[u64; 4]> = chords.iter().map(|&notes| steps(notes, 24)).collect();

    let fade_in = (SAMPLE_RATE as usize / 5).min(frames / 4).max(1);
    let fade_out = (SAMPLE_RATE as usize * 6 / 10).min(frames / 4).max(1);
    let attack = SAMPLE_RATE as f32 * 0.15;
    let release = SAMPLE_RATE as f32 * 0.1;
    let mut noise = SplitMix64::new(random.next_u64());
    let mut out = vec![0.0f32; frames * CHANNELS];
    for (index, frame) in out.chunks_exact_mut(CHANNELS).enumerate() {
        if index.is_multiple_of(CANCEL_CHECK_INTERVAL) && cancel.load(Ordering::Relaxed) {
            return Err(RenderError::Canceled);
        }
        let chord = (index / bar) % chords.len();
        let in_bar = (index % bar) as f32;
        let in_beat = (index % beat) as f32 / beat as f32;
        let in_eighth = (index % eighth) as f32 / SAMPLE_RATE as f32;
        let eighth_index = index / eighth;

        let pad_envelope = (in_bar / attack).min(1.0) * ((bar as f32 - in_bar) / release).min(1.0);
        let mut left = 0.0;
        let mut right = 0.0;
        for (voice, &step) in pad_steps[chord][..3].iter().enumerate() {
            let value = triangle(phase_at(step, index)) * 0.07 * pad_envelope;
            let pan = 0.3 + 0.2 * voice as f32;
            left += value * (1.0 - pan);
            right += value * pan;
        }

        let pluck = (1.0 - in_beat).powi(2);
        let bass = sin_turns(phase_at(bass_steps[chord], index))
            * 0.22
            * pluck
            * (in_beat * 200.0).min(1.0);
        left += bass * 0.5;
        right += bass * 0.5;

        let arpeggio_note = pattern[eighth_index % 4];
        let decay = (1.0 - in_eighth / 0.3).max(0.0).powi(3) * (in_eighth * 400.0).min(1.0);
        let phase = phase_at(arpeggio_steps[chord][arpeggio_note], index);
        let arpeggio = (sin_turns(phase) + 0.25 * sin_turns(2.0 * phase)) * 0.08 * decay;
        let arpeggio_pan = if eighth_index.is_multiple_of(2) {
            0.35
        } else {
            0.65
        };
        left += arpeggio * (1.0 - arpeggio_pan);
        right += arpeggio * arpeggio_pan;

        // The noise is drawn for every sample, used or not, so the sequence never depends on
        // which samples are audible.
        let white = noise.unit() * 2.0 - 1.0;
        if eighth_index % 2 == 1 {
            let hat = white * hat_level * (1.0 - in_eighth / 0.04).max(0.0);
            left += hat;
            right += hat;
        }

        let master = (index as f32 / fade_in as f32).min(1.0)
            * ((frames - index) as f32 / fade_out as f32).min(1.0);
        frame[0] = left * master;
        frame[1] = right * master;
    }
    Ok(out)
}

/// Decodes a PCM (8, 16, 24 or 32 bit) or float WAV file to 48 kHz stereo, at most `frames`
/// long; `None` if it is not such a file.
pub(crate) fn decode_wav(bytes: &[u8], frames: usize) -> Option<Vec<f32>> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return None;
    }
    let mut format: Option<(u16, usize, u32, u16)> = None;
    let mut data: Option<&[u8]> = None;
    let mut position = 12;
    while position + 8 <= bytes.len() {
        let id = &bytes[position..position + 4];
        let size = u32::from_le_bytes(bytes[position + 4..position + 8].try_into().ok()?) as usize;
        let body = &bytes[position + 8..(position + 8).saturating_add(size).min(bytes.len())];
        match id {
            b"fmt " if body.len() >= 16 => {
                let mut tag = u16::from_le_bytes([body[0], body[1]]);
                // WAVE_FORMAT_EXTENSIBLE keeps the real format in its sub-format GUID.
                if tag == 0xFFFE && body.len() >= 26 {
                    tag = u16::from_le_bytes([body[24], body[25]]);
                }
                let channels = usize::from(u16::from_le_bytes([body[2], body[3]]));
                let rate = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
                let bits = u16::from_le_bytes([body[14], body[15]]);
                format = Some((tag, channels, rate, bits));
            }
            b"data" => data = Some(body),
            _ => {}
        }
        position = position
            .saturating_add(8)
            .saturating_add(size)
            .saturating_add(size & 1);
    }
    let (tag, channels, rate, bits) = format?;
    let data = data?;
    if channels == 0 || !(1_000..=384_000).contains(&rate) {
        return None;
    }
    let bytes_per_sample = usize::from(bits).div_ceil(8);
    let decode_sample: fn(&[u8]) -> f32 = match (tag, bits) {
        (1, 8) => |b| (f32::from(b[0]) - 128.0) / 128.0,
        (1, 16) => |b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32_768.0,
        (1, 24) => |b| (i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8) as f32 / 8_388_608.0,
        (1, 32) => |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32 / 2_147_483_648.0,
        (3, 32) => |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).clamp(-1.0, 1.0),
        _ => return None,
    };
    let frame_bytes = bytes_per_sample * channels;
    let source: Vec<[f32; 2]> = data
        .chunks_exact(frame_bytes)
        .map(|frame| {
            let left = decode_sample(&frame[..bytes_per_sample]);
            let right = if channels > 1 {
                decode_sample(&frame[bytes_per_sample..2 * bytes_per_sample])
            } else {
                left
            };
            [left, right]
        })
        .collect();
    if source.is_empty() {
        return None;
    }
    // Linear-interpolation resampling: plenty for mixing reference sound under music.
    let ratio = f64::from(rate) / f64::from(SAMPLE_RATE);
    let output_frames = ((source.len() as f64 / ratio) as usize).min(frames);
    let mut out = Vec::with_capacity(output_frames * CHANNELS);
    for index in 0..output_frames {
        let position = index as f64 * ratio;
        let before = (position as usize).min(source.len() - 1);
        let after = (before + 1).min(source.len() - 1);
        let weight = (position - before as f64) as f32;
        for (&from, &to) in source[before].iter().zip(&source[after]) {
            out.push(from * (1.0 - weight) + to * weight);
        }
    }
    Some(out)
}

/// Encodes interleaved stereo `pcm` as AAC-LC ADTS access units, compensating the encoder's
/// delay so that the first decoded sample is the first input sample.
///
/// AAC decoders output `delay` samples of priming before the signal. muxide writes no edit list
/// that could hide them, so instead the input gets just enough leading silence to make the
/// priming a whole number of access units, and those units are dropped. The remaining units
/// decode to the signal from its first sample (the first unit lacks the overlap from its dropped
/// predecessor, which only affects the silent start of the fade-in), and exactly
/// `ceil(frames / 1024)` units are kept, so the audio track ends within one unit (21 ms) of the
/// video.
fn encode_aac(
    pcm: &[i16],
    frames: usize,
    cancel: &AtomicBool,
) -> Result<EncodedAudio, RenderError> {
    let aac_error = |error: EncoderError| RenderError::Encoder(format!("AAC encoder: {error}"));
    let mut encoder = Encoder::builder()
        .aot(Aot::AacLc)
        .sample_rate(SAMPLE_RATE)
        .channel_mode(ChannelMode::Stereo)
        .bitrate(Bitrate::Cbr(AAC_BITRATE))
        .transport(Transport::Adts)
        .afterburner(true)
        .build()
        .map_err(|error| RenderError::Encoder(format!("AAC encoder setup: {error}")))?;
    let info = encoder.info().map_err(aac_error)?;
    let unit_frames = info.frame_length() as usize;
    let delay = info.delay() as usize;
    let dropped_units = delay.div_ceil(unit_frames);
    let lead_in = dropped_units * unit_frames - delay;
    let wanted_units = frames.div_ceil(unit_frames);

    let mut input = vec![0i16; lead_in * CHANNELS];
    input.extend_from_slice(pcm);
    let mut out = vec![0u8; info.max_out_buf_bytes() as usize];
    let mut units: Vec<Vec<u8>> = Vec::with_capacity(dropped_units + wanted_units + 2);
    let mut remaining = &input[..];
    while !remaining.is_empty() {
        if cancel.load(Ordering::Relaxed) {
            return Err(RenderError::Canceled);
        }
        let result = encoder.encode(remaining, &mut out).map_err(aac_error)?;
        if result.out_bytes() > 0 {
            units.push(out[..result.out_bytes()].to_vec());
        }
        remaining = &remaining[result.in_samples()..];
    }
    while units.len() < dropped_units + wanted_units {
        match encoder.flush(&mut out) {
            Ok(result) if result.out_bytes() > 0 => units.push(out[..result.out_bytes()].to_vec()),
            Ok(_) => {}
            Err(EncoderError::EncodeEof) => break,
            Err(error) => return Err(aac_error(error)),
        }
    }
    let access_units: Vec<Vec<u8>> = units
        .into_iter()
        .skip(dropped_units)
        .take(wanted_units)
        .collect();
    if access_units.len() != wanted_units {
        return Err(RenderError::Encoder(format!(
            "AAC encoder produced {} access units instead of {wanted_units}",
            access_units.len()
        )));
    }
    Ok(EncodedAudio {
        access_units,
        sample_rate: SAMPLE_RATE,
        channels: CHANNELS as u16,
        samples_per_unit: unit_frames as u32,
    })
}
