//! Any bytes through the audio prober, as each audio format, so the fuzzer
//! need not find the magic bytes first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vidgate_media::MediaFormat;
use vidgate_media::probe::probe_audio;

fuzz_target!(|bytes: &[u8]| {
    for format in [MediaFormat::Mp3, MediaFormat::Wav] {
        let _ = probe_audio(bytes, format);
    }
});
