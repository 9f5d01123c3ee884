//! Writing the MP4 container with muxide: fast start (moov before mdat), no wall-clock times.

use muxide::api::{AacProfile, AudioCodec, MuxerBuilder, VideoCodec};

use crate::RenderError;
use crate::encode::EncodedFrame;

/// AAC audio ready to mux: ADTS access units of `samples_per_unit` samples each.
pub(crate) struct EncodedAudio {
    pub(crate) access_units: Vec<Vec<u8>>,
    pub(crate) sample_rate: u32,
    pub(crate) channels: u16,
    pub(crate) samples_per_unit: u32,
}

pub(crate) fn mux(
    width: u32,
    height: u32,
    fps: u32,
    frames: &[EncodedFrame],
    audio: Option<&EncodedAudio>,
) -> Result<Vec<u8>, RenderError> {
    let muxer_error =
        |error: muxide::api::MuxerError| RenderError::Encoder(format!("muxing failed: {error}"));
    let mut builder = MuxerBuilder::new(Vec::new())
        .video(VideoCodec::H264, width, height, f64::from(fps))
        .with_fast_start(true);
    if let Some(audio) = audio {
        builder = builder.audio(
            AudioCodec::Aac(AacProfile::Lc),
            audio.sample_rate,
            audio.channels,
        );
    }
    let mut muxer = builder.build().map_err(muxer_error)?;
    for (index, frame) in frames.iter().enumerate() {
        // Timestamps are whole ticks of muxide's 90 kHz clock for the usual frame rates.
        let seconds = index as f64 / f64::from(fps);
        muxer
            .write_video(seconds, &frame.annex_b, frame.is_keyframe)
            .map_err(muxer_error)?;
    }
    if let Some(audio) = audio {
        for (index, unit) in audio.access_units.iter().enumerate() {
            let seconds =
                index as f64 * f64::from(audio.samples_per_unit) / f64::from(audio.sample_rate);
            muxer.write_audio(seconds, unit).map_err(muxer_error)?;
        }
    }
    muxer.finish_in_place().map_err(muxer_error)?;
    Ok(muxer.into_writer())
}
