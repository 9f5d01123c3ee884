//! Any bytes through the image prober, as each image format, so the fuzzer
//! need not find the magic bytes first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vidgate_media::MediaFormat;
use vidgate_media::probe::probe_image;

fuzz_target!(|bytes: &[u8]| {
    for format in [MediaFormat::Jpg, MediaFormat::Png, MediaFormat::Webp] {
        let _ = probe_image(bytes, format);
    }
});
