//! What the prompt suggests: colour, brightness, pace and key.
//!
//! A procedural renderer cannot understand a prompt, but a handful of common words steer the
//! palette, the motion and the music so that "a calm blue ocean at night" and "a fast red race
//! car" look and sound clearly different. Unknown prompts still get a stable palette from their
//! hash, so any two prompts differ.

use crate::numbers::{SplitMix64, fnv1a_64};

#[derive(Clone, Debug)]
pub(crate) struct Mood {
    /// Base hue in turns.
    pub(crate) hue: f32,
    /// How far the palette's second colour sits from the base hue, in turns.
    pub(crate) hue_spread: f32,
    /// Overall brightness, `0..=1`.
    pub(crate) brightness: f32,
    /// Motion and tempo multiplier.
    pub(crate) speed: f32,
    /// Whether the soundtrack uses a minor key.
    pub(crate) minor: bool,
    /// Seed for every other random choice: mixes the request seed with the prompt.
    pub(crate) variation_seed: u64,
}

/// Words that pick a hue (in turns). The first match in the prompt wins.
const HUE_WORDS: &[(&str, f32)] = &[
    ("red", 0.0),
    ("fire", 0.03),
    ("lava", 0.02),
    ("sunset", 0.05),
    ("orange", 0.08),
    ("autumn", 0.07),
    ("desert", 0.1),
    ("gold", 0.13),
    ("golden", 0.13),
    ("yellow", 0.15),
    ("sun", 0.14),
    ("sunny", 0.14),
    ("green", 0.33),
    ("forest", 0.31),
    ("grass", 0.28),
    ("jungle", 0.35),
    ("cyan", 0.5),
    ("ice", 0.52),
    ("snow", 0.55),
    ("water", 0.56),
    ("sea", 0.57),
    ("ocean", 0.58),
    ("river", 0.56),
    ("rain", 0.6),
    ("sky", 0.58),
    ("blue", 0.62),
    ("city", 0.65),
    ("night", 0.68),
    ("space", 0.72),
    ("galaxy", 0.75),
    ("purple", 0.77),
    ("violet", 0.79),
    ("pink", 0.92),
    ("flower", 0.9),
    ("flowers", 0.9),
    ("love", 0.95),
];
const DARK_WORDS: &[&str] = &[
    "night", "dark", "space", "storm", "noir", "shadow", "midnight", "cave", "horror", "galaxy",
];
const BRIGHT_WORDS: &[&str] = &[
    "day", "sunny", "bright", "morning", "summer", "beach", "snow", "light",
];
const FAST_WORDS: &[&str] = &[
    "fast",
    "race",
    "racing",
    "chase",
    "action",
    "running",
    "run",
    "explosion",
    "dance",
    "rush",
    "speed",
];
const SLOW_WORDS: &[&str] = &[
    "slow", "calm", "gentle", "peaceful", "quiet", "drifting", "floating", "relaxing", "serene",
];
const MINOR_WORDS: &[&str] = &[
    "dark", "sad", "night", "storm", "rain", "mystery", "horror", "lonely", "noir", "cold",
    "shadow",
];

impl Mood {
    pub(crate) fn from_prompt(prompt: &str, seed: u64) -> Self {
        let lowercase = prompt.to_lowercase();
        let words: Vec<&str> = lowercase
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| !word.is_empty())
            .collect();
        let has_any = |list: &[&str]| words.iter().any(|word| list.contains(word));
        let prompt_hash = fnv1a_64(prompt.trim().as_bytes());
        let variation_seed = seed ^ prompt_hash.rotate_left(17);
        let mut random = SplitMix64::new(variation_seed);

        let keyword_hue = words.iter().find_map(|word| {
            HUE_WORDS
                .iter()
                .find(|(name, _)| name == word)
                .map(|&(_, hue)| hue)
        });
        // Keywords fix the hue up to a small seed-dependent jitter; otherwise the prompt's hash
        // chooses it, so different prompts get different palettes.
        let hue = match keyword_hue {
            Some(hue) => hue + random.range_f32(-0.03, 0.03),
            None => {
                (prompt_hash >> 40) as f32 / (1u64 << 24) as f32 + random.range_f32(-0.05, 0.05)
            }
        };
        let mut brightness = random.range_f32(0.7, 0.9);
        if has_any(DARK_WORDS) {
            brightness -= 0.3;
        }
        if has_any(BRIGHT_WORDS) {
            brightness += 0.1;
        }
        let mut speed = random.range_f32(0.8, 1.25);
        if has_any(FAST_WORDS) {
            speed *= 2.0;
        }
        if has_any(SLOW_WORDS) {
            speed *= 0.5;
        }
        let minor = if has_any(MINOR_WORDS) {
            true
        } else {
            random.below(3) == 0
        };
        Self {
            hue: hue.rem_euclid(1.0),
            hue_spread: random.range_f32(0.08, 0.2) * if random.below(2) == 0 { 1.0 } else { -1.0 },
            brightness: brightness.clamp(0.25, 1.0),
            speed,
            minor,
            variation_seed,
        }
    }
}
