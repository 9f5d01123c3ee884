//! The catalog: the shipped data, lookups, frames, reference limits, the
//! public model record and the consistency checks of `from_json`.

use serde_json::{Value, json};
use vidgate_core::catalog::MediaKind;
use vidgate_core::{Catalog, CatalogError, Mode, Purpose};

use crate::spec::{I2V, R2V, T2V, spec_models};

const EMBEDDED: &str = include_str!("../../catalog.json");

#[test]
fn the_embedded_catalog_has_the_six_models_of_the_spec() {
    let catalog = Catalog::embedded();
    let listed: Vec<(&str, &str)> = catalog
        .models()
        .iter()
        .map(|model| (model.label.as_str(), model.id.as_str()))
        .collect();
    let expected: Vec<(&str, &str)> = spec_models()
        .iter()
        .map(|model| (model.label, model.id))
        .collect();
    assert_eq!(listed, expected);
    for (model, spec) in catalog.models().iter().zip(spec_models()) {
        assert_eq!(model.modes(), spec.modes, "{}", model.label);
        assert_eq!(model.description_version, "1.0.0", "{}", model.label);
        assert_eq!(model.backend, "local", "{}", model.label);
        assert!(
            !model.name.is_empty() && !model.description.is_empty(),
            "{}",
            model.label
        );
    }
    // SPEC.md section 1, written out once more as the table shows it.
    let section_one = [
        ("M1", vec![T2V, I2V, R2V]),
        ("M2", vec![T2V, I2V]),
        ("M3", vec![T2V, I2V]),
        ("M4", vec![T2V, I2V, R2V]),
        ("M5", vec![T2V, I2V, R2V]),
        ("M6", vec![T2V, I2V, R2V]),
    ];
    for (label, modes) in section_one {
        let model = catalog
            .models()
            .iter()
            .find(|model| model.label == label)
            .unwrap();
        assert_eq!(model.modes(), modes.as_slice(), "{label}");
    }
    assert_eq!(catalog.endpoints().count(), 16);
}

#[test]
fn endpoints_and_models_are_found_by_id_and_nothing_else() {
    let catalog = Catalog::embedded();
    for spec in spec_models() {
        let model = catalog.model(spec.id).unwrap();
        assert_eq!(model.label, spec.label);
        for mode in Mode::ALL {
            let found = catalog.endpoint(&spec.endpoint_id(mode));
            assert_eq!(
                found.is_some(),
                spec.modes.contains(&mode),
                "{}",
                spec.endpoint_id(mode)
            );
            if let Some(endpoint) = found {
                assert_eq!(endpoint.id(), spec.endpoint_id(mode));
                assert_eq!(endpoint.mode, mode);
                assert_eq!(endpoint.model.id, spec.id);
                assert_eq!(
                    model.endpoint(mode).map(|endpoint| endpoint.id()),
                    Some(spec.endpoint_id(mode))
                );
            } else {
                assert!(model.endpoint(mode).is_none());
            }
        }
    }
    for unknown in [
        "",
        "vendor_1/model_1",
        "vendor_1/model_1/",
        "vendor_1/model_1/text-to-video/",
        "vendor_1/model_1/video-to-video",
        "vendor_1/model_1/Text-To-Video",
        "VENDOR_1/model_1/text-to-video",
        "vendor_7/model_7/text-to-video",
        "vendor_1/model_2/text-to-video",
        "model_1/text-to-video",
        "/vendor_1/model_1/text-to-video",
    ] {
        assert!(catalog.endpoint(unknown).is_none(), "{unknown:?}");
    }
    for unknown in [
        "",
        "vendor_1",
        "vendor_1/model_1/text-to-video",
        "M1",
        "vendor_7/model_7",
    ] {
        assert!(catalog.model(unknown).is_none(), "{unknown:?}");
    }
}

#[test]
fn modes_have_their_spec_names() {
    let names = ["text-to-video", "image-to-video", "reference-to-video"];
    for (mode, name) in Mode::ALL.into_iter().zip(names) {
        assert_eq!(mode.as_str(), name);
        assert_eq!(mode.to_string(), name);
        assert_eq!(name.parse::<Mode>(), Ok(mode));
        assert_eq!(serde_json::to_value(mode).unwrap(), json!(name));
        assert_eq!(serde_json::from_value::<Mode>(json!(name)).unwrap(), mode);
    }
    for wrong in ["", "text_to_video", "TextToVideo", "video-to-video"] {
        assert!(wrong.parse::<Mode>().is_err(), "{wrong}");
    }
}

/// Frames of every model but M4 keep the resolution's height as the short
/// side and the exact aspect ratio; 16:9 at 480p is 854x480 by convention.
#[test]
fn frame_sizes_follow_the_short_side_rule() {
    let catalog = Catalog::embedded();
    let spot = [
        ("M1", "480p", "16:9", (854, 480)),
        ("M1", "480p", "9:16", (480, 854)),
        ("M1", "720p", "16:9", (1280, 720)),
        ("M1", "720p", "1:1", (720, 720)),
        ("M1", "720p", "4:3", (960, 720)),
        ("M1", "720p", "3:4", (720, 960)),
        ("M1", "1080p", "16:9", (1920, 1080)),
        ("M1", "1080p", "4:3", (1440, 1080)),
        ("M2", "720p", "9:16", (720, 1280)),
        ("M3", "720p", "21:9", (1680, 720)),
        ("M3", "720p", "2:1", (1440, 720)),
        ("M5", "480p", "3:4", (480, 640)),
        ("M6", "1080p", "1:1", (1080, 1080)),
        ("M4", "4k", "16:9", (3840, 2160)),
        ("M4", "720p", "1:1", (960, 960)),
        ("M4", "720p", "4:3", (1104, 832)),
        ("M4", "720p", "21:9", (1472, 624)),
    ];
    let model = |label: &str| {
        catalog
            .models()
            .iter()
            .find(|model| model.label == label)
            .unwrap()
    };
    for (label, resolution, aspect_ratio, size) in spot {
        assert_eq!(
            model(label).frame_size(resolution, aspect_ratio),
            Some(size),
            "{label} {resolution} {aspect_ratio}"
        );
    }
    assert_eq!(model("M2").frame_size("1080p", "16:9"), None);
    assert_eq!(model("M1").frame_size("720p", "21:9"), None);
    for model in catalog.models().iter().filter(|model| model.label != "M4") {
        for frame in model.frames() {
            let height = resolution_height(&frame.resolution);
            let (across, down) = aspect_parts(&frame.aspect_ratio);
            assert_eq!(
                frame.width.min(frame.height),
                height,
                "{} {:?}",
                model.label,
                frame
            );
            if frame.resolution != "480p" || across * down != 144 {
                assert_eq!(
                    frame.width * down,
                    frame.height * across,
                    "{} {:?}",
                    model.label,
                    frame
                );
            }
        }
    }
}

/// M4 keeps every frame within 3 % of its resolution's 16:9 pixel count, so
/// that the aspect ratio barely moves the token price.
#[test]
fn m4_frames_keep_the_pixel_count_within_three_percent() {
    let catalog = Catalog::embedded();
    let m4 = catalog.model("vendor_4/model_4").unwrap();
    let mut checked = 0;
    for resolution in ["480p", "720p", "1080p", "4k"] {
        let (base_width, base_height) = m4.frame_size(resolution, "16:9").unwrap();
        let base_pixels = f64::from(base_width) * f64::from(base_height);
        for aspect_ratio in ["16:9", "9:16", "1:1", "4:3", "3:4", "21:9"] {
            let (width, height) = m4.frame_size(resolution, aspect_ratio).unwrap();
            let pixels = f64::from(width) * f64::from(height);
            assert!(
                (pixels / base_pixels - 1.0).abs() < 0.03,
                "{resolution} {aspect_ratio}: {width}x{height}"
            );
            let (across, down) = aspect_parts(aspect_ratio);
            let nominal = f64::from(across) / f64::from(down);
            let actual = f64::from(width) / f64::from(height);
            assert!(
                (actual / nominal - 1.0).abs() < 0.02,
                "{resolution} {aspect_ratio}: {width}x{height}"
            );
            if !aspect_ratio.contains("16") {
                assert_eq!(
                    (width % 16, height % 16),
                    (0, 0),
                    "{resolution} {aspect_ratio}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 24);
}

#[test]
fn every_frame_is_even_and_every_accepted_combination_has_one() {
    let catalog = Catalog::embedded();
    for model in catalog.models() {
        for frame in model.frames() {
            assert_eq!(
                (frame.width % 2, frame.height % 2),
                (0, 0),
                "{} {frame:?}",
                model.label
            );
        }
    }
    for spec in spec_models() {
        let model = catalog.model(spec.id).unwrap();
        for &mode in spec.modes {
            let endpoint = model.endpoint(mode).unwrap();
            let values = |name: &str| match spec
                .param(name)
                .filter(|param| param.in_mode(mode))
                .map(|param| &param.rule)
            {
                Some(crate::spec::Rule::Choice(values)) => values.to_vec(),
                _ => Vec::new(),
            };
            let resolutions = values("resolution");
            let aspect_ratios = values("aspect_ratio");
            for resolution in if resolutions.is_empty() {
                vec!["720p"]
            } else {
                resolutions.clone()
            } {
                for aspect_ratio in if aspect_ratios.is_empty() {
                    vec!["16:9"]
                } else {
                    aspect_ratios.clone()
                } {
                    let mut body = json!({});
                    if !resolutions.is_empty() {
                        body["resolution"] = json!(resolution);
                    }
                    if !aspect_ratios.is_empty() {
                        body["aspect_ratio"] = json!(aspect_ratio);
                    }
                    let input = endpoint.validate_value(&body, Purpose::Quote).unwrap();
                    assert_eq!(
                        Some(endpoint.frame_size(&input)),
                        model.frame_size(resolution, aspect_ratio),
                        "{} {resolution} {aspect_ratio}",
                        endpoint.id()
                    );
                }
            }
        }
    }
    // Modes without aspect ratio or resolution fall back to 16:9 and 720p.
    let quote = |endpoint_id: &str, body: Value| {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        endpoint.frame_size(&endpoint.validate_value(&body, Purpose::Quote).unwrap())
    };
    assert_eq!(
        quote("vendor_3/model_3/image-to-video", json!({})),
        (1280, 720)
    );
    assert_eq!(
        quote(
            "vendor_1/model_1/image-to-video",
            json!({"resolution": "1080p"})
        ),
        (1920, 1080)
    );
    assert_eq!(
        quote("vendor_6/model_6/image-to-video", json!({})),
        (1280, 720)
    );
}

fn resolution_height(resolution: &str) -> u32 {
    match resolution {
        "480p" => 480,
        "720p" => 720,
        "1080p" => 1080,
        "4k" => 2160,
        other => panic!("unexpected resolution {other}"),
    }
}

fn aspect_parts(aspect_ratio: &str) -> (u32, u32) {
    let (across, down) = aspect_ratio.split_once(':').unwrap();
    (across.parse().unwrap(), down.parse().unwrap())
}

#[test]
fn reference_media_limits_are_typed_and_match_the_spec() {
    let catalog = Catalog::embedded();
    let model = |id: &str| catalog.model(id).unwrap();
    for id in ["vendor_1/model_1", "vendor_5/model_5"] {
        let video = model(id).reference_limits(MediaKind::Video).unwrap();
        assert_eq!(video.parameter, "reference_video_urls");
        assert_eq!(video.max_items, Some(5));
        let media = video.media;
        assert_eq!(media.formats, ["mp4", "mov"]);
        assert_eq!(
            (
                media.min_seconds,
                media.max_seconds,
                media.max_total_seconds
            ),
            (Some(1), Some(15), Some(15))
        );
        assert_eq!(
            (media.max_bytes_each, media.max_total_bytes),
            (Some(104_857_600), None)
        );
        assert_eq!(
            (media.min_side_px, media.max_side_px, media.min_fps),
            (Some(240), Some(4096), Some(16))
        );
        assert_eq!(media.max_reference_plus_output_seconds, Some(30));
        let audio = model(id).reference_limits(MediaKind::Audio).unwrap();
        assert_eq!(
            (audio.parameter, audio.max_items),
            ("reference_audio_urls", Some(5))
        );
        assert_eq!(audio.media.formats, ["mp3", "wav"]);
        assert_eq!(
            (
                audio.media.min_seconds,
                audio.media.max_seconds,
                audio.media.max_total_seconds
            ),
            (Some(1), Some(15), Some(15))
        );
        assert_eq!(audio.media.max_bytes_each, Some(15_728_640));
        let images = model(id).reference_limits(MediaKind::Image).unwrap();
        assert_eq!(
            (images.parameter, images.max_items),
            ("reference_image_urls", Some(4))
        );
        assert_eq!(images.media.formats, ["jpg", "png", "webp"]);
    }
    let m4 = model("vendor_4/model_4");
    let video = m4.reference_limits(MediaKind::Video).unwrap();
    assert_eq!(video.max_items, Some(3));
    assert_eq!(
        (
            video.media.min_seconds,
            video.media.max_seconds,
            video.media.max_total_seconds
        ),
        (Some(2), Some(15), Some(15))
    );
    assert_eq!(
        (video.media.max_bytes_each, video.media.max_total_bytes),
        (None, Some(52_428_800))
    );
    let audio = m4.reference_limits(MediaKind::Audio).unwrap();
    assert_eq!(
        (
            audio.max_items,
            audio.media.min_seconds,
            audio.media.max_bytes_each
        ),
        (Some(3), Some(2), Some(15_728_640))
    );
    assert_eq!(
        m4.reference_limits(MediaKind::Image).unwrap().max_items,
        Some(9)
    );
    let m6 = model("vendor_6/model_6");
    assert_eq!(
        m6.reference_limits(MediaKind::Image).unwrap().max_items,
        Some(7)
    );
    assert!(m6.reference_limits(MediaKind::Video).is_none());
    assert!(m6.reference_limits(MediaKind::Audio).is_none());
    for id in ["vendor_2/model_2", "vendor_3/model_3"] {
        for kind in [MediaKind::Image, MediaKind::Video, MediaKind::Audio] {
            assert!(model(id).reference_limits(kind).is_none(), "{id} {kind:?}");
        }
    }
    // The opening and closing images are images too.
    let image_url = model("vendor_2/model_2").parameter("image_url").unwrap();
    assert_eq!(
        image_url.media.as_ref().map(|media| media.kind),
        Some(MediaKind::Image)
    );
}

#[test]
fn the_public_model_record_lists_endpoints_schemas_and_pricing() {
    let catalog = Catalog::embedded();
    for model in catalog.models() {
        let record = model.public_json("https://api.example.com/api/v1/");
        assert_eq!(record["id"], json!(model.id));
        assert_eq!(record["object"], "model");
        assert_eq!(record["label"], json!(model.label));
        assert_eq!(record["name"], json!(model.name));
        assert_eq!(record["description_version"], "1.0.0");
        assert_eq!(record["modes"], json!(model.modes()));
        let endpoints = record["endpoints"].as_array().unwrap();
        assert_eq!(endpoints.len(), model.modes().len());
        for (entry, &mode) in endpoints.iter().zip(model.modes()) {
            let id = format!("{}/{}", model.id, mode);
            assert_eq!(entry["id"], json!(id));
            assert_eq!(entry["mode"], json!(mode));
            assert_eq!(
                entry["url"],
                json!(format!("https://api.example.com/api/v1/run/{id}"))
            );
            assert_eq!(
                entry["quote_url"],
                json!(format!("https://api.example.com/api/v1/quote/{id}"))
            );
            assert_eq!(
                entry["input_schema"],
                model.endpoint(mode).unwrap().input_schema()
            );
        }
        let pricing = &record["pricing"];
        assert_eq!(pricing["currency"], "usd");
        assert!(!pricing["rates"].as_array().unwrap().is_empty());
        assert!(!pricing["notes"].as_array().unwrap().is_empty());
    }
    let unit = |id: &str| catalog.model(id).unwrap().public_json("")["pricing"]["unit"].clone();
    assert_eq!(
        [
            "vendor_1/model_1",
            "vendor_2/model_2",
            "vendor_4/model_4",
            "vendor_6/model_6"
        ]
        .map(unit),
        [
            json!("second"),
            json!("clip"),
            json!("token"),
            json!("second")
        ]
    );
    let m1 = catalog.model("vendor_1/model_1").unwrap().public_json("");
    assert_eq!(
        m1["pricing"]["rates"][1],
        json!({"resolution": "720p", "usd_per_second": 0.1, "official_usd_per_second": 0.12})
    );
}

/// `from_json` refuses a replacement catalog that validation or pricing
/// could not rely on. Each case edits the shipped file in one place.
#[test]
fn broken_catalogs_are_refused() {
    let shipped: Value = serde_json::from_str(EMBEDDED).unwrap();
    let model_index = |label: &str| {
        shipped["models"]
            .as_array()
            .unwrap()
            .iter()
            .position(|model| model["label"] == label)
            .unwrap()
    };
    let parameter_index = |label: &str, name: &str| {
        shipped["models"][model_index(label)]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .position(|parameter| parameter["name"] == name)
            .unwrap()
    };
    type Edit = Box<dyn Fn(&mut Value)>;
    let m1 = model_index("M1");
    let m3 = model_index("M3");
    let m6 = model_index("M6");
    let duration = parameter_index("M1", "duration");
    let aspect = parameter_index("M1", "aspect_ratio");
    let audio = parameter_index("M1", "generate_audio");
    let prompt = parameter_index("M1", "prompt");
    let cases: Vec<(&str, Edit, bool)> = vec![
        (
            "no models",
            Box::new(|catalog| catalog["models"] = json!([])),
            false,
        ),
        (
            "duplicate model",
            Box::new(move |catalog| {
                let first = catalog["models"][m1].clone();
                catalog["models"].as_array_mut().unwrap().push(first);
            }),
            false,
        ),
        (
            "duplicate label",
            Box::new(move |catalog| catalog["models"][m3]["label"] = json!("M1")),
            false,
        ),
        (
            "bad id",
            Box::new(move |catalog| catalog["models"][m1]["id"] = json!("model_1")),
            false,
        ),
        (
            "missing frame",
            Box::new(move |catalog| {
                catalog["models"][m1]["frames"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
            false,
        ),
        (
            "odd frame",
            Box::new(move |catalog| catalog["models"][m1]["frames"][0]["width"] = json!(855)),
            false,
        ),
        (
            "parameter in a foreign mode",
            Box::new(move |catalog| {
                catalog["models"][m3]["parameters"][0]["modes"] = json!(["reference-to-video"]);
            }),
            false,
        ),
        (
            "default out of range",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][duration]["default"] = json!(99);
            }),
            false,
        ),
        (
            "default outside the enum",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][aspect]["default"] = json!("21:9");
            }),
            false,
        ),
        (
            "misspelt field",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][prompt]["max_lenght"] = json!(5000);
            }),
            false,
        ),
        (
            "enum on a boolean",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][audio]["enum"] = json!([true]);
            }),
            false,
        ),
        (
            "required with a default",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][prompt]["default"] = json!("a cat");
            }),
            false,
        ),
        (
            "aspect ratio without enum",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][aspect]
                    .as_object_mut()
                    .unwrap()
                    .remove("enum");
            }),
            false,
        ),
        (
            "official below ours",
            Box::new(move |catalog| {
                catalog["models"][m1]["pricing"]["rates"][0]["official_usd"] = json!("0.01");
            }),
            false,
        ),
        (
            "unparsable rate",
            Box::new(move |catalog| {
                catalog["models"][m1]["pricing"]["rates"][0]["ours_usd"] = json!("five cents");
            }),
            false,
        ),
        (
            "missing rate",
            Box::new(move |catalog| {
                catalog["models"][m1]["pricing"]["rates"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
            false,
        ),
        (
            "missing audio rate",
            Box::new(move |catalog| {
                catalog["models"][m6]["pricing"]["rates"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
            false,
        ),
        (
            "reference billing without reference videos",
            Box::new(move |catalog| {
                catalog["models"][m3]["pricing"]["reference_video_seconds"] = json!("output_rate");
            }),
            false,
        ),
        (
            "unknown pricing unit",
            Box::new(move |catalog| catalog["models"][m1]["pricing"]["unit"] = json!("minute")),
            false,
        ),
        (
            "no resolution and no output resolution",
            Box::new(move |catalog| {
                catalog["models"][m3]
                    .as_object_mut()
                    .unwrap()
                    .remove("output_resolution");
            }),
            false,
        ),
        (
            "unknown requires_any_of",
            Box::new(move |catalog| {
                let m4 = &mut catalog["models"][3];
                for parameter in m4["parameters"].as_array_mut().unwrap() {
                    if parameter["name"] == "reference_audio_urls" {
                        parameter["requires_any_of"] = json!(["reference_text_urls"]);
                    }
                }
            }),
            false,
        ),
        // Harmless edits are accepted, and the models come back in label order.
        ("unchanged", Box::new(|_| {}), true),
        (
            "models reversed",
            Box::new(|catalog| catalog["models"].as_array_mut().unwrap().reverse()),
            true,
        ),
        (
            "tighter bound",
            Box::new(move |catalog| {
                catalog["models"][m1]["parameters"][prompt]["max_length"] = json!(100)
            }),
            true,
        ),
    ];
    for (name, edit, accepted) in cases {
        let mut edited = shipped.clone();
        edit(&mut edited);
        let result = Catalog::from_json(&edited.to_string());
        match result {
            Ok(catalog) => {
                assert!(accepted, "{name} was accepted");
                let labels: Vec<&str> = catalog
                    .models()
                    .iter()
                    .map(|model| model.label.as_str())
                    .collect();
                assert_eq!(labels, ["M1", "M2", "M3", "M4", "M5", "M6"], "{name}");
            }
            Err(error) => assert!(!accepted, "{name} was refused: {error}"),
        }
    }
    assert!(matches!(
        Catalog::from_json("{"),
        Err(CatalogError::Malformed(_))
    ));
    assert!(matches!(
        Catalog::from_json("[]"),
        Err(CatalogError::Malformed(_))
    ));
    let mut shipped_without_frames = shipped.clone();
    shipped_without_frames["models"][m1]["frames"] = json!([]);
    let error = Catalog::from_json(&shipped_without_frames.to_string()).unwrap_err();
    assert!(
        matches!(&error, CatalogError::Inconsistent(text) if text.contains("vendor_1/model_1")),
        "{error}"
    );
}

#[test]
fn a_replaced_catalog_changes_validation() {
    let mut shipped: Value = serde_json::from_str(EMBEDDED).unwrap();
    for parameter in shipped["models"][0]["parameters"].as_array_mut().unwrap() {
        if parameter["name"] == "prompt" {
            parameter["max_length"] = json!(10);
        }
    }
    let catalog = Catalog::from_json(&shipped.to_string()).unwrap();
    let endpoint = catalog.endpoint("vendor_1/model_1/text-to-video").unwrap();
    let error = endpoint
        .validate(br#"{"prompt": "eleven char"}"#, Purpose::Submit)
        .unwrap_err();
    assert_eq!(
        error.message,
        "prompt must be at most 10 characters long; got 11"
    );
}
