//! Same request, same bytes; a different request, different bytes.

use crate::common;

use std::num::NonZeroUsize;
use std::sync::atomic::AtomicBool;

use common::{render_ok, request};
use vidgate_engine::{RenderOptions, render_with_options};

#[test]
fn equal_requests_give_identical_files() {
    let mut clip = request(640, 360, 2);
    clip.generate_audio = true;
    assert_eq!(render_ok(&clip).mp4, render_ok(&clip).mp4);
}

#[test]
fn thread_count_does_not_change_the_bytes() {
    let mut clip = request(640, 360, 3);
    clip.generate_audio = true;
    let with_threads = |threads: usize| {
        let options = RenderOptions {
            threads: NonZeroUsize::new(threads),
        };
        render_with_options(&clip, &options, &|_| {}, &AtomicBool::new(false))
            .unwrap()
            .mp4
    };
    let single = with_threads(1);
    assert_eq!(single, with_threads(2));
    assert_eq!(single, with_threads(3));
}

#[test]
fn seed_and_prompt_change_the_output() {
    let base = request(640, 360, 1);
    let mut other_seed = base.clone();
    other_seed.seed += 1;
    let mut other_prompt = base.clone();
    other_prompt.prompt = "a fast red race car in the desert".to_string();
    let base_bytes = render_ok(&base).mp4;
    assert_ne!(base_bytes, render_ok(&other_seed).mp4);
    assert_ne!(base_bytes, render_ok(&other_prompt).mp4);
}

#[test]
fn seed_changes_the_soundtrack() {
    let mut base = request(320, 240, 1);
    base.generate_audio = true;
    let mut other = base.clone();
    other.seed = 7;
    assert_ne!(render_ok(&base).mp4, render_ok(&other).mp4);
}
