//! Pricing (SPEC.md section 2, billing rules) in exact integer micro-dollars.
//!
//! Each amount is computed as an exact fraction, floored to a whole
//! micro-dollar and then rounded to the cent with `Micros::round_to_cent`.
//! Flooring first cannot change the cent: the cent's rounding boundaries are
//! whole micro-dollars, so a floored value crosses one exactly when the exact
//! value does. Our price and the official list price are computed the same
//! way from their own rates.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::catalog::{Endpoint, Frame, Model, ParameterType};
use crate::money::{MICROS_PER_CENT, Micros};
use crate::validation::ValidatedInput;

/// Facts about the request's media that only probing reveals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaFacts {
    /// The duration of each reference video, in list order, in milliseconds.
    pub reference_video_durations_ms: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Price {
    /// Our price, rounded to the cent: the amount the ledger moves.
    pub amount: Micros,
    /// The official list price, rounded to the cent.
    pub official: Micros,
    pub breakdown: Breakdown,
}

impl Price {
    /// How much the customer saves against the official list price.
    pub fn saved(&self) -> Micros {
        self.official - self.amount
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriceUnit {
    Second,
    Clip,
    Token,
}

/// How a price came about, for the quote response. Money in it is integer
/// micro-dollars (fields ending in `_micros`), so nothing is lost to floats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    pub unit: PriceUnit,
    pub resolution: String,
    pub aspect_ratio: String,
    pub width: u32,
    pub height: u32,
    pub generate_audio: bool,
    pub output_seconds: u32,
    /// Reference-video time that is billed, in milliseconds; zero when the
    /// model does not bill reference videos or none were given.
    pub reference_video_milliseconds: u64,
    /// Unit `second`: output plus billed reference time, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub billed_milliseconds: Option<u64>,
    /// Unit `token`: video tokens of output and reference seconds together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Unit `second`: the frame the rate is quoted for (the 16:9 frame of the
    /// resolution); the price scales with width × height relative to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_frame_width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_frame_height: Option<u32>,
    /// Our rate: per second, per clip, or per million tokens.
    pub rate_micros: Micros,
    pub official_rate_micros: Micros,
    /// The amounts before rounding to the cent (floored to the micro-dollar).
    pub unrounded_amount_micros: Micros,
    pub unrounded_official_micros: Micros,
}

/// A pair of rates: ours and the official list rate. Written in the catalog
/// as decimal strings (`"0.10"`) so they parse exactly.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rates {
    #[serde(rename = "ours_usd", deserialize_with = "usd_string")]
    pub ours: Micros,
    #[serde(rename = "official_usd", deserialize_with = "usd_string")]
    pub official: Micros,
}

fn usd_string<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Micros, D::Error> {
    let text = String::deserialize(deserializer)?;
    Micros::parse_usd(&text).map_err(|error| serde::de::Error::custom(format!("{text:?}: {error}")))
}

/// A per-second rate for one resolution, and for models whose rate depends
/// on audio (M6), for audio on or off.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecondRate {
    pub resolution: String,
    #[serde(default)]
    pub generate_audio: Option<bool>,
    #[serde(flatten)]
    pub rates: Rates,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReferenceVideoBilling {
    /// Reference videos are free.
    #[default]
    None,
    /// Reference-video seconds cost the same as output seconds (M1, M5).
    OutputRate,
}

/// How a model is priced; the `unit` field of the catalog selects the form.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "unit", rename_all = "lowercase", deny_unknown_fields)]
pub enum PricingRule {
    /// Per second of output at the 16:9 frame of each resolution; other
    /// aspect ratios scale with the frame's pixel area.
    Second {
        rates: Vec<SecondRate>,
        #[serde(default)]
        reference_video_seconds: ReferenceVideoBilling,
    },
    /// One price per clip, whatever its length (M2).
    Clip { rate: Rates },
    /// By video tokens, width × height × frames per second × seconds ÷
    /// pixels per token, at a rate per million tokens; given reference
    /// videos, their seconds count too, at the lower with-video rate (M4).
    Token {
        frames_per_second: u32,
        pixels_per_token: u32,
        rate: Rates,
        with_reference_video_rate: Rates,
    },
}

impl PricingRule {
    pub fn unit(&self) -> PriceUnit {
        match self {
            PricingRule::Second { .. } => PriceUnit::Second,
            PricingRule::Clip { .. } => PriceUnit::Clip,
            PricingRule::Token { .. } => PriceUnit::Token,
        }
    }

    /// The pricing section of the public model record; rates are USD
    /// numbers there, as elsewhere in the public API.
    pub(crate) fn public_json(&self) -> Value {
        let usd = |micros: Micros| micros.to_usd();
        match self {
            PricingRule::Second {
                rates,
                reference_video_seconds,
            } => {
                let listed: Vec<Value> = rates
                    .iter()
                    .map(|rate| {
                        let mut entry = json!({
                            "resolution": rate.resolution,
                            "usd_per_second": usd(rate.rates.ours),
                            "official_usd_per_second": usd(rate.rates.official),
                        });
                        if let (Some(audio), Some(object)) =
                            (rate.generate_audio, entry.as_object_mut())
                        {
                            object.insert("generate_audio".to_owned(), json!(audio));
                        }
                        entry
                    })
                    .collect();
                let audio_priced = rates.iter().any(|rate| rate.generate_audio.is_some());
                let mut notes = vec![
                    "Billed per second of output video.".to_owned(),
                    "Rates are for the 16:9 frame of each resolution; other aspect ratios scale with the frame's pixel area.".to_owned(),
                ];
                notes.push(if audio_priced {
                    "Clips with audio are billed at a higher per-second rate than silent clips."
                        .to_owned()
                } else {
                    "Audio costs nothing extra.".to_owned()
                });
                if *reference_video_seconds == ReferenceVideoBilling::OutputRate {
                    notes.push("Reference-video seconds are billed at the same per-second rate as output seconds.".to_owned());
                }
                json!({"unit": "second", "currency": "usd", "rates": listed, "notes": notes})
            }
            PricingRule::Clip { rate } => json!({
                "unit": "clip",
                "currency": "usd",
                "rates": [{"usd_per_clip": usd(rate.ours), "official_usd_per_clip": usd(rate.official)}],
                "notes": ["Billed per clip: every allowed duration costs the same.", "Audio costs nothing extra."],
            }),
            PricingRule::Token {
                frames_per_second,
                pixels_per_token,
                rate,
                with_reference_video_rate,
            } => json!({
                "unit": "token",
                "currency": "usd",
                "rates": [
                    {"usd_per_million_tokens": usd(rate.ours), "official_usd_per_million_tokens": usd(rate.official), "with_reference_video": false},
                    {"usd_per_million_tokens": usd(with_reference_video_rate.ours), "official_usd_per_million_tokens": usd(with_reference_video_rate.official), "with_reference_video": true},
                ],
                "notes": [
                    format!("Billed by video tokens: width x height x {frames_per_second} x seconds / {pixels_per_token}."),
                    "With reference videos, reference seconds and output seconds are billed together at the lower with-video rate.",
                    "A change of aspect ratio changes the price by less than 3 percent.",
                    "Audio costs nothing extra.",
                ],
            }),
        }
    }

    /// Consistency with the model's parameters: every reachable resolution
    /// (and audio setting) has a rate, and the rate frames exist.
    pub(crate) fn check(&self, model: &Model) -> Result<(), String> {
        let all_rates: Vec<Rates> = match self {
            PricingRule::Second { rates, .. } => rates.iter().map(|rate| rate.rates).collect(),
            PricingRule::Clip { rate } => vec![*rate],
            PricingRule::Token {
                rate,
                with_reference_video_rate,
                ..
            } => vec![*rate, *with_reference_video_rate],
        };
        if all_rates
            .iter()
            .any(|rates| rates.ours.is_negative() || rates.official < rates.ours)
        {
            return Err(
                "every official rate must be at least our rate, and no rate negative".to_owned(),
            );
        }
        let takes_reference_videos = model
            .parameter("reference_video_urls")
            .is_some_and(|parameter| parameter.parameter_type == ParameterType::UriArray);
        match self {
            PricingRule::Second {
                rates,
                reference_video_seconds,
            } => {
                if *reference_video_seconds == ReferenceVideoBilling::OutputRate
                    && !takes_reference_videos
                {
                    return Err("reference videos are billed but the model takes none".to_owned());
                }
                let audio_priced = rates.iter().any(|rate| rate.generate_audio.is_some());
                let audio_settings: &[Option<bool>] = if audio_priced {
                    &[Some(false), Some(true)]
                } else {
                    &[None]
                };
                for &mode in model.modes() {
                    for resolution in model.resolutions(mode)? {
                        if model
                            .frame(&resolution, crate::catalog::BASE_ASPECT_RATIO)
                            .is_none()
                        {
                            return Err(format!("the rate frame {resolution} 16:9 is missing"));
                        }
                        for &audio in audio_settings {
                            let matching = rates
                                .iter()
                                .filter(|rate| {
                                    rate.resolution == resolution && rate.generate_audio == audio
                                })
                                .count();
                            if matching != 1 {
                                return Err(format!(
                                    "there must be exactly one rate for {resolution} with audio {audio:?}, found {matching}"
                                ));
                            }
                        }
                    }
                }
                Ok(())
            }
            PricingRule::Clip { .. } => Ok(()),
            PricingRule::Token {
                frames_per_second,
                pixels_per_token,
                ..
            } => {
                if *frames_per_second == 0 || *pixels_per_token == 0 {
                    return Err(
                        "frames_per_second and pixels_per_token must be positive".to_owned()
                    );
                }
                Ok(())
            }
        }
    }
}

/// Exact `numerator / denominator`, floored, saturating instead of
/// overflowing for absurd reference durations.
fn floor_ratio(numerator: u128, denominator: u128) -> u128 {
    numerator / denominator.max(1)
}

/// Amounts saturate a cent below `i64::MAX` so that rounding to the cent
/// cannot overflow; no real request comes near either figure.
fn to_micros(value: u128) -> Micros {
    const CEILING: i64 = i64::MAX - MICROS_PER_CENT;
    Micros(i64::try_from(value).map_or(CEILING, |micros| micros.min(CEILING)))
}

fn rate_micros(rate: Micros) -> u128 {
    u128::try_from(rate.0).unwrap_or(0)
}

/// What a request asks to be billed for, read once from its input and
/// media: the frame, the seconds of output and of reference video.
struct Billed<'a> {
    frame: &'a Frame,
    pixels: u128,
    generate_audio: bool,
    output_milliseconds: u128,
    has_reference_videos: bool,
    reference_milliseconds: u128,
}

/// A rule's rates and its two unrounded amounts (ours, the official one).
type RuleOutcome = (Rates, (Micros, Micros));

pub(crate) fn price(endpoint: Endpoint<'_>, input: &ValidatedInput, media: &MediaFacts) -> Price {
    let frame: Frame = endpoint.frame(input);
    let has_reference_videos = !input.reference_video_urls().is_empty();
    let billed = Billed {
        frame: &frame,
        pixels: u128::from(frame.pixels()),
        generate_audio: input.generate_audio(),
        output_milliseconds: u128::from(input.duration_s()) * 1000,
        has_reference_videos,
        reference_milliseconds: if has_reference_videos {
            media
                .reference_video_durations_ms
                .iter()
                .map(|&duration| u128::from(duration))
                .sum()
        } else {
            0
        },
    };
    let mut breakdown = Breakdown {
        unit: endpoint.model.pricing().unit(),
        resolution: frame.resolution.clone(),
        aspect_ratio: frame.aspect_ratio.clone(),
        width: frame.width,
        height: frame.height,
        generate_audio: billed.generate_audio,
        output_seconds: input.duration_s(),
        reference_video_milliseconds: 0,
        billed_milliseconds: None,
        tokens: None,
        rate_frame_width: None,
        rate_frame_height: None,
        rate_micros: Micros::ZERO,
        official_rate_micros: Micros::ZERO,
        unrounded_amount_micros: Micros::ZERO,
        unrounded_official_micros: Micros::ZERO,
    };
    let (rates, unrounded) = match endpoint.model.pricing() {
        PricingRule::Second {
            rates,
            reference_video_seconds,
        } => per_second(
            endpoint,
            &billed,
            rates,
            *reference_video_seconds,
            &mut breakdown,
        ),
        PricingRule::Clip { rate } => (*rate, (rate.ours, rate.official)),
        PricingRule::Token {
            frames_per_second,
            pixels_per_token,
            rate,
            with_reference_video_rate,
        } => {
            let rate = if billed.has_reference_videos {
                *with_reference_video_rate
            } else {
                *rate
            };
            per_token(
                &billed,
                *frames_per_second,
                *pixels_per_token,
                rate,
                &mut breakdown,
            )
        }
    };
    breakdown.rate_micros = rates.ours;
    breakdown.official_rate_micros = rates.official;
    breakdown.unrounded_amount_micros = unrounded.0;
    breakdown.unrounded_official_micros = unrounded.1;
    Price {
        amount: unrounded.0.round_to_cent(),
        official: unrounded.1.round_to_cent(),
        breakdown,
    }
}

/// A per-second rate, chosen by resolution (and audio, where the rates
/// differ by it), is quoted for the resolution's base frame and scaled by
/// the requested frame's pixels; reference video is billed at the output
/// rate where the rule says so.
fn per_second(
    endpoint: Endpoint<'_>,
    billed: &Billed<'_>,
    rates: &[SecondRate],
    reference_video_seconds: ReferenceVideoBilling,
    breakdown: &mut Breakdown,
) -> RuleOutcome {
    let frame = billed.frame;
    let billed_reference = match reference_video_seconds {
        ReferenceVideoBilling::OutputRate => billed.reference_milliseconds,
        ReferenceVideoBilling::None => 0,
    };
    let billed_milliseconds = billed.output_milliseconds + billed_reference;
    let audio_priced = rates.iter().any(|rate| rate.generate_audio.is_some());
    let wanted_audio = audio_priced.then_some(billed.generate_audio);
    let rate = rates
        .iter()
        .find(|rate| rate.resolution == frame.resolution && rate.generate_audio == wanted_audio)
        .map_or(
            Rates {
                ours: Micros::ZERO,
                official: Micros::ZERO,
            },
            |rate| rate.rates,
        );
    let rate_frame = endpoint
        .model
        .frame(&frame.resolution, crate::catalog::BASE_ASPECT_RATIO)
        .unwrap_or(frame);
    let rate_pixels = u128::from(rate_frame.pixels());
    breakdown.reference_video_milliseconds = u64::try_from(billed_reference).unwrap_or(u64::MAX);
    breakdown.billed_milliseconds = Some(u64::try_from(billed_milliseconds).unwrap_or(u64::MAX));
    breakdown.rate_frame_width = Some(rate_frame.width);
    breakdown.rate_frame_height = Some(rate_frame.height);
    let amount = |rate: Micros| {
        to_micros(floor_ratio(
            rate_micros(rate)
                .saturating_mul(billed_milliseconds)
                .saturating_mul(billed.pixels),
            rate_pixels * 1000,
        ))
    };
    (rate, (amount(rate.ours), amount(rate.official)))
}

/// Tokens are the frame's pixels times frames over the output and any
/// reference video, per `pixels_per_token`; rates are per million tokens.
fn per_token(
    billed: &Billed<'_>,
    frames_per_second: u32,
    pixels_per_token: u32,
    rate: Rates,
    breakdown: &mut Breakdown,
) -> RuleOutcome {
    let billed_reference = if billed.has_reference_videos {
        billed.reference_milliseconds
    } else {
        0
    };
    let billed_milliseconds = billed.output_milliseconds + billed_reference;
    let tokens = floor_ratio(
        billed
            .pixels
            .saturating_mul(u128::from(frames_per_second))
            .saturating_mul(billed_milliseconds),
        u128::from(pixels_per_token) * 1000,
    );
    breakdown.reference_video_milliseconds = u64::try_from(billed_reference).unwrap_or(u64::MAX);
    breakdown.billed_milliseconds = Some(u64::try_from(billed_milliseconds).unwrap_or(u64::MAX));
    breakdown.tokens = Some(u64::try_from(tokens).unwrap_or(u64::MAX));
    let amount = |rate: Micros| {
        to_micros(floor_ratio(
            tokens.saturating_mul(rate_micros(rate)),
            1_000_000,
        ))
    };
    (rate, (amount(rate.ours), amount(rate.official)))
}
