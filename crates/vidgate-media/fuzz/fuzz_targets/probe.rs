//! Any bytes through the sniffer and whichever prober it picks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = vidgate_media::probe(bytes);
});
