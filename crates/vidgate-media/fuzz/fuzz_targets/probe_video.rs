//! Any bytes through the video prober, as each video format, so the fuzzer
//! need not find the magic bytes first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vidgate_media::MediaFormat;
use vidgate_media::probe::probe_video;

fuzz_target!(|bytes: &[u8]| {
    for format in [MediaFormat::Mp4, MediaFormat::Mov] {
        let _ = probe_video(bytes, format);
    }
});
