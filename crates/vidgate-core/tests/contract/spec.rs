//! SPEC.md sections 1 and 4 and the agreed pricing table, transcribed by hand
//! independently of `catalog.json`. The tests compare the catalog-driven
//! validator and pricer against this transcription, so a wrong entry in the
//! data file makes them fail instead of being echoed back.

use serde_json::{Value, json};
use vidgate_core::Mode;

pub const T2V: Mode = Mode::TextToVideo;
pub const I2V: Mode = Mode::ImageToVideo;
pub const R2V: Mode = Mode::ReferenceToVideo;
const ALL: &[Mode] = &[T2V, I2V, R2V];
const BOTH: &[Mode] = &[T2V, I2V];

#[derive(Clone, Debug)]
pub enum Rule {
    Text {
        min_length: usize,
        max_length: Option<usize>,
    },
    Uri {
        reject_credentials: bool,
    },
    UriList {
        max_items: usize,
    },
    Choice(&'static [&'static str]),
    IntRange(i64, i64),
    IntChoice(&'static [i64]),
    Bool,
}

#[derive(Clone, Debug)]
pub struct SpecParam {
    pub name: &'static str,
    pub modes: &'static [Mode],
    pub required_in: &'static [Mode],
    pub rule: Rule,
    pub default: Option<Value>,
    pub price_affecting: bool,
    /// Spec: M4's reference audio "needs at least one reference image or
    /// reference video".
    pub needs_any_of: &'static [&'static str],
}

impl SpecParam {
    pub fn in_mode(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
    }
}

#[derive(Clone, Debug)]
pub struct SpecModel {
    pub id: &'static str,
    pub label: &'static str,
    pub modes: &'static [Mode],
    pub params: Vec<SpecParam>,
}

impl SpecModel {
    pub fn endpoint_id(&self, mode: Mode) -> String {
        format!("{}/{}", self.id, mode.as_str())
    }

    pub fn params_in(&self, mode: Mode) -> impl Iterator<Item = &SpecParam> {
        self.params.iter().filter(move |param| param.in_mode(mode))
    }

    pub fn param(&self, name: &str) -> Option<&SpecParam> {
        self.params.iter().find(|param| param.name == name)
    }
}

fn param(name: &'static str, modes: &'static [Mode], rule: Rule) -> SpecParam {
    SpecParam {
        name,
        modes,
        required_in: &[],
        rule,
        default: None,
        price_affecting: false,
        needs_any_of: &[],
    }
}

impl SpecParam {
    fn required(mut self) -> SpecParam {
        self.required_in = self.modes;
        self
    }
    fn default(mut self, value: Value) -> SpecParam {
        self.default = Some(value);
        self
    }
    fn priced(mut self) -> SpecParam {
        self.price_affecting = true;
        self
    }
}

/// The bounds SPEC.md leaves "not shown" take M1's values (CATALOG.md).
const PROMPT_MAX: usize = 5000;
const NEGATIVE_PROMPT_MAX: usize = 2000;
const SEED_MAX: i64 = 2_147_483_647;

fn prompt(modes: &'static [Mode]) -> SpecParam {
    param(
        "prompt",
        modes,
        Rule::Text {
            min_length: 1,
            max_length: Some(PROMPT_MAX),
        },
    )
    .required()
}
fn image_url() -> SpecParam {
    param(
        "image_url",
        &[I2V],
        Rule::Uri {
            reject_credentials: false,
        },
    )
    .required()
}
fn end_image_url() -> SpecParam {
    param(
        "end_image_url",
        &[I2V],
        Rule::Uri {
            reject_credentials: false,
        },
    )
}
fn webhook_url(modes: &'static [Mode]) -> SpecParam {
    param(
        "webhook_url",
        modes,
        Rule::Uri {
            reject_credentials: true,
        },
    )
}
fn negative_prompt(modes: &'static [Mode]) -> SpecParam {
    param(
        "negative_prompt",
        modes,
        Rule::Text {
            min_length: 0,
            max_length: Some(NEGATIVE_PROMPT_MAX),
        },
    )
}
fn seed(modes: &'static [Mode]) -> SpecParam {
    param("seed", modes, Rule::IntRange(0, SEED_MAX))
}
fn list(name: &'static str, max_items: usize) -> SpecParam {
    param(name, &[R2V], Rule::UriList { max_items })
}

fn m1_like(id: &'static str, label: &'static str) -> SpecModel {
    SpecModel {
        id,
        label,
        modes: ALL,
        params: vec![
            prompt(ALL),
            image_url(),
            list("reference_image_urls", 4),
            list("reference_video_urls", 5).priced(),
            list("reference_audio_urls", 5),
            param(
                "aspect_ratio",
                &[T2V, R2V],
                Rule::Choice(&["16:9", "9:16", "1:1", "4:3", "3:4"]),
            )
            .default(json!("16:9"))
            .priced(),
            param("resolution", ALL, Rule::Choice(&["480p", "720p", "1080p"]))
                .default(json!("720p"))
                .priced(),
            param("duration", ALL, Rule::IntRange(2, 30))
                .default(json!(5))
                .priced(),
            param("generate_audio", ALL, Rule::Bool).default(json!(true)),
            negative_prompt(ALL),
            seed(ALL),
            webhook_url(ALL),
        ],
    }
}

pub fn spec_models() -> Vec<SpecModel> {
    let m2 = SpecModel {
        id: "vendor_2/model_2",
        label: "M2",
        modes: BOTH,
        params: vec![
            prompt(BOTH),
            image_url(),
            end_image_url(),
            param("aspect_ratio", BOTH, Rule::Choice(&["16:9", "9:16"]))
                .default(json!("16:9"))
                .priced(),
            param("resolution", BOTH, Rule::Choice(&["720p"]))
                .default(json!("720p"))
                .priced(),
            param("duration", BOTH, Rule::IntChoice(&[4, 6, 8]))
                .default(json!(8))
                .priced(),
            webhook_url(BOTH),
        ],
    };
    let m3 = SpecModel {
        id: "vendor_3/model_3",
        label: "M3",
        modes: BOTH,
        params: vec![
            prompt(BOTH),
            image_url(),
            end_image_url(),
            param(
                "aspect_ratio",
                &[T2V],
                Rule::Choice(&["16:9", "9:16", "1:1", "4:3", "3:4", "21:9", "2:1"]),
            )
            .default(json!("16:9"))
            .priced(),
            param("duration", BOTH, Rule::IntRange(5, 20))
                .default(json!(5))
                .priced(),
            param("generate_audio", BOTH, Rule::Bool).default(json!(true)),
            webhook_url(BOTH),
        ],
    };
    let mut m4_audio = list("reference_audio_urls", 3);
    m4_audio.needs_any_of = &["reference_image_urls", "reference_video_urls"];
    let m4 = SpecModel {
        id: "vendor_4/model_4",
        label: "M4",
        modes: ALL,
        params: vec![
            prompt(ALL),
            image_url(),
            end_image_url(),
            list("reference_image_urls", 9),
            list("reference_video_urls", 3).priced(),
            m4_audio,
            param(
                "aspect_ratio",
                ALL,
                Rule::Choice(&["16:9", "9:16", "1:1", "4:3", "3:4", "21:9"]),
            )
            .default(json!("16:9"))
            .priced(),
            param(
                "resolution",
                ALL,
                Rule::Choice(&["480p", "720p", "1080p", "4k"]),
            )
            .default(json!("720p"))
            .priced(),
            param("duration", ALL, Rule::IntRange(4, 15))
                .default(json!(5))
                .priced(),
            param("generate_audio", ALL, Rule::Bool).default(json!(true)),
            seed(ALL),
            webhook_url(ALL),
        ],
    };
    let mut m6_images = list("reference_image_urls", 7).required();
    m6_images.required_in = &[R2V];
    let m6 = SpecModel {
        id: "vendor_6/model_6",
        label: "M6",
        modes: ALL,
        params: vec![
            prompt(ALL),
            image_url(),
            end_image_url(),
            m6_images,
            param(
                "aspect_ratio",
                &[T2V, R2V],
                Rule::Choice(&["16:9", "9:16", "1:1"]),
            )
            .default(json!("16:9"))
            .priced(),
            param("resolution", ALL, Rule::Choice(&["720p", "1080p"]))
                .default(json!("720p"))
                .priced(),
            param("duration", ALL, Rule::IntRange(3, 15))
                .default(json!(5))
                .priced(),
            param("generate_audio", ALL, Rule::Bool)
                .default(json!(false))
                .priced(),
            negative_prompt(ALL),
            webhook_url(ALL),
        ],
    };
    vec![
        m1_like("vendor_1/model_1", "M1"),
        m2,
        m3,
        m4,
        m1_like("vendor_5/model_5", "M5"),
        m6,
    ]
}

/// Every parameter name any model defines, plus names no model defines.
pub fn every_parameter_name() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = spec_models()
        .iter()
        .flat_map(|model| model.params.iter().map(|param| param.name))
        .collect();
    names.extend(["foo", "Prompt", "model", "num_frames"]);
    names.sort();
    names.dedup();
    names
}

pub const IMAGE: &str = "https://media.example.com/cat.png";
pub const VIDEO: &str = "https://media.example.com/clip.mp4";
pub const AUDIO: &str = "https://media.example.com/voice.mp3";

/// The smallest body a submit accepts: every required field with a valid
/// value, plus what a parameter under test needs beside it.
pub fn minimal_body(model: &SpecModel, mode: Mode) -> serde_json::Map<String, Value> {
    let mut body = serde_json::Map::new();
    for param in model.params_in(mode) {
        if param.required_in.contains(&mode) {
            body.insert(param.name.to_owned(), sample_value(param));
        }
    }
    body
}

/// One valid value of a parameter.
pub fn sample_value(param: &SpecParam) -> Value {
    match &param.rule {
        Rule::Text { .. } => json!("a red fox runs through snow"),
        Rule::Uri { .. } => json!(IMAGE),
        Rule::UriList { .. } => json!([IMAGE]),
        Rule::Choice(values) => json!(values[0]),
        Rule::IntRange(minimum, _) => json!(minimum),
        Rule::IntChoice(values) => json!(values[0]),
        Rule::Bool => json!(true),
    }
}

/// Accepted values of a parameter, each with the value the echo must carry.
pub fn accepted_values(param: &SpecParam) -> Vec<(Value, Value)> {
    let same = |value: Value| (value.clone(), value);
    match &param.rule {
        Rule::Text {
            min_length,
            max_length,
        } => {
            let mut values = vec![
                same(json!("x".repeat((*min_length).max(1)))),
                same(json!("a calm sea at dawn")),
            ];
            if *min_length == 0 {
                values.push(same(json!("")));
            }
            if let Some(max_length) = max_length {
                values.push(same(json!("x".repeat(*max_length))));
                // Lengths count characters: this is twice as many bytes.
                values.push(same(json!("é".repeat(*max_length))));
            }
            values
        }
        Rule::Uri { .. } => vec![
            same(json!(IMAGE)),
            same(json!(
                "http://media.example.com:8080/a/b.webp?size=large#top"
            )),
            same(json!("HTTPS://MEDIA.EXAMPLE.COM/A.JPG")),
            same(json!("https://192.0.2.7/a.png")),
            same(json!("https://[2001:db8::1]/a.png")),
        ],
        Rule::UriList { max_items } => {
            let mut values = vec![
                same(json!([IMAGE])),
                same(Value::Array(
                    (0..*max_items)
                        .map(|index| json!(format!("{IMAGE}?n={index}")))
                        .collect(),
                )),
            ];
            // An empty required list counts as missing (M6's reference images).
            if param.required_in.is_empty() {
                values.push(same(json!([])));
            }
            values
        }
        Rule::Choice(values) => values.iter().map(|value| same(json!(value))).collect(),
        Rule::IntRange(minimum, maximum) => vec![
            same(json!(minimum)),
            same(json!(maximum)),
            same(json!((minimum + maximum) / 2)),
            (json!(*minimum as f64), json!(minimum)),
            (json!(*maximum as f64), json!(maximum)),
        ],
        Rule::IntChoice(values) => {
            let mut accepted: Vec<(Value, Value)> =
                values.iter().map(|value| same(json!(value))).collect();
            accepted.extend(
                values
                    .iter()
                    .map(|value| (json!(*value as f64), json!(value))),
            );
            accepted
        }
        Rule::Bool => vec![same(json!(true)), same(json!(false))],
    }
}

/// Rejected values of a parameter, each with a fragment the message must
/// contain beside the parameter name.
pub fn rejected_values(param: &SpecParam) -> Vec<(Value, &'static str)> {
    let wrong_types = |expected_fragment: &'static str| -> Vec<(Value, &'static str)> {
        vec![
            (json!(5), expected_fragment),
            (json!(true), expected_fragment),
            (json!({"url": IMAGE}), expected_fragment),
        ]
    };
    match &param.rule {
        Rule::Text {
            min_length,
            max_length,
        } => {
            let mut rejected = wrong_types("string");
            rejected.push((json!(["text"]), "string"));
            if let Some(max_length) = max_length {
                rejected.push((json!("x".repeat(max_length + 1)), "at most"));
                rejected.push((json!("é".repeat(max_length + 1)), "at most"));
            }
            if *min_length == 1 {
                rejected.push((json!(""), "empty"));
            }
            rejected
        }
        Rule::Uri { reject_credentials } => {
            let mut rejected = wrong_types("URL");
            rejected.extend([
                (json!([IMAGE]), "URL"),
                (json!(""), "URL"),
                (json!("ftp://media.example.com/a.png"), "http"),
                (json!("media.example.com/a.png"), "http"),
                (json!("/uploads/a.png"), "http"),
                (json!("http:media.example.com/a.png"), "http"),
                (json!("data:image/png;base64,iVBORw0KGgo="), "http"),
                (json!(" https://media.example.com/a.png"), "spaces"),
                (json!("https://media example.com/a.png"), "spaces"),
                (json!("https://"), "URL"),
                (json!("https://exa<mple.com/a.png"), "URL"),
            ]);
            if *reject_credentials {
                rejected.push((json!("https://user:secret@hooks.example.com/x"), "password"));
                rejected.push((json!("https://user@hooks.example.com/x"), "password"));
            }
            rejected
        }
        Rule::UriList { max_items } => vec![
            (json!(IMAGE), "array"),
            (json!(5), "array"),
            (json!({"0": IMAGE}), "array"),
            (Value::Array(vec![json!(IMAGE); max_items + 1]), "at most"),
            (json!([5]), "[0]"),
            (json!([IMAGE, null]), "[1]"),
            (json!([IMAGE, "ftp://media.example.com/b.png"]), "[1]"),
            (json!([IMAGE, IMAGE, "not a url"]), "[2]"),
            (json!([[IMAGE]]), "[0]"),
        ],
        Rule::Choice(values) => {
            let mut rejected = wrong_types("string");
            rejected.extend([
                (json!("16:10"), "one of"),
                (json!(""), "one of"),
                (json!("2160p"), "one of"),
            ]);
            let upper = values[0].to_uppercase();
            if upper != values[0] {
                rejected.push((json!(upper), "one of"));
            }
            rejected
        }
        Rule::IntRange(minimum, maximum) => vec![
            (json!(minimum - 1), "from"),
            (json!(maximum + 1), "from"),
            (json!(-1), "from"),
            (json!(1e20), "from"),
            (json!(u64::MAX), "from"),
            (json!(minimum.to_string()), "integer"),
            (json!(*minimum as f64 + 0.5), "whole number"),
            (json!(true), "integer"),
            (json!([minimum]), "integer"),
        ],
        Rule::IntChoice(values) => {
            let mut rejected = vec![
                (json!(values[0].to_string()), "integer"),
                (json!(values[0] as f64 + 0.5), "whole number"),
                (json!(values[0] - 1), "one of"),
                (json!(values[values.len() - 1] + 1), "one of"),
            ];
            for pair in values.windows(2) {
                if pair[1] - pair[0] > 1 {
                    rejected.push((json!(pair[0] + 1), "one of"));
                }
            }
            rejected
        }
        Rule::Bool => vec![
            (json!("true"), "true or false"),
            (json!(1), "true or false"),
            (json!(0), "true or false"),
        ],
    }
}

/// Our rate and the official rate, in micro-dollars, per second of the 16:9
/// frame (per clip for M2, per million tokens for M4).
pub struct SpecRate {
    pub label: &'static str,
    pub resolution: &'static str,
    pub audio: Option<bool>,
    pub ours: i64,
    pub official: i64,
}

pub const SPEC_RATES: &[SpecRate] = &[
    SpecRate {
        label: "M1",
        resolution: "480p",
        audio: None,
        ours: 50_000,
        official: 60_000,
    },
    SpecRate {
        label: "M1",
        resolution: "720p",
        audio: None,
        ours: 100_000,
        official: 120_000,
    },
    SpecRate {
        label: "M1",
        resolution: "1080p",
        audio: None,
        ours: 200_000,
        official: 240_000,
    },
    SpecRate {
        label: "M2",
        resolution: "720p",
        audio: None,
        ours: 800_000,
        official: 1_200_000,
    },
    SpecRate {
        label: "M3",
        resolution: "720p",
        audio: None,
        ours: 80_000,
        official: 100_000,
    },
    SpecRate {
        label: "M5",
        resolution: "480p",
        audio: None,
        ours: 40_000,
        official: 50_000,
    },
    SpecRate {
        label: "M5",
        resolution: "720p",
        audio: None,
        ours: 80_000,
        official: 100_000,
    },
    SpecRate {
        label: "M5",
        resolution: "1080p",
        audio: None,
        ours: 160_000,
        official: 200_000,
    },
    SpecRate {
        label: "M6",
        resolution: "720p",
        audio: Some(false),
        ours: 70_000,
        official: 84_000,
    },
    SpecRate {
        label: "M6",
        resolution: "720p",
        audio: Some(true),
        ours: 140_000,
        official: 168_000,
    },
    SpecRate {
        label: "M6",
        resolution: "1080p",
        audio: Some(false),
        ours: 120_000,
        official: 144_000,
    },
    SpecRate {
        label: "M6",
        resolution: "1080p",
        audio: Some(true),
        ours: 200_000,
        official: 240_000,
    },
];
