//! The model entry's check, the inputs it sends and the ones it plans.

use serde_json::json;
use vidgate_core::Catalog;

use super::input::apply_mapping;
use super::*;
use crate::backend::contract::Job;
use crate::backend::hosted::protocol::ProviderTarget;

fn job(model: &str, mode: &str, input: Value) -> Job {
    Job {
        generation_id: "gen_test".into(),
        model: model.into(),
        mode: mode.parse().unwrap(),
        input: vidgate_core::ValidatedInput::from_stored_json(input.clone()),
        media_input: vidgate_core::ValidatedInput::from_stored_json(input),
        media: Default::default(),
        width: 1280,
        height: 720,
        seed: 42,
        price: vidgate_core::Micros(0),
    }
}

fn kling_config() -> HostedModelConfig {
    serde_json::from_value(json!({
        "modes": {
            "text-to-video": { "target_by": { "parameter": "resolution", "targets": {
                "720p": "fal-ai/kling-video/v3/standard/text-to-video",
                "1080p": "fal-ai/kling-video/v3/pro/text-to-video" } } },
            "image-to-video": { "target": "fal-ai/kling-video/v3/pro/image-to-video",
                "fields": { "image_url": "start_image_url", "aspect_ratio": null } }
        },
        "fields": {
            "prompt": "prompt", "negative_prompt": "negative_prompt",
            "duration": { "to": "duration", "transform": "string" },
            "aspect_ratio": "aspect_ratio", "resolution": null,
            "generate_audio": "generate_audio", "end_image_url": "end_image_url"
        },
        "fixed": { "cfg_scale": 0.5 }
    }))
    .unwrap()
}

#[test]
fn the_cost_comes_from_the_most_specific_line_in_force() {
    let mut config = kling_config();
    config.costs = serde_json::from_value(json!([
        { "from": "2026-01-01", "usd_per_second": "0.10" },
        { "from": "2026-01-01", "usd_per_second": "0.168",
          "target": "fal-ai/kling-video/v3/pro/text-to-video" },
        { "from": "2026-01-01", "usd_per_second": "0.224",
          "target": "fal-ai/kling-video/v3/pro/text-to-video",
          "when": { "generate_audio": true } },
        { "from": "2027-01-01", "usd_per_second": "0.05" }
    ]))
    .unwrap();
    let pro = "fal-ai/kling-video/v3/pro/text-to-video";
    let silent = job(
        "vendor_6/model_6",
        "text-to-video",
        json!({ "generate_audio": false }),
    );
    let with_audio = job(
        "vendor_6/model_6",
        "text-to-video",
        json!({ "generate_audio": true }),
    );
    let micros = |job: &Job, target: &str, day: &str| {
        config
            .cost_of(&job.input.to_json(), target, day, 5.0)
            .map(|cost| cost.0)
    };
    assert_eq!(micros(&silent, pro, "2026-06-01"), Some(840_000));
    assert_eq!(micros(&with_audio, pro, "2026-06-01"), Some(1_120_000));
    assert_eq!(
        micros(&silent, "another/target", "2026-06-01"),
        Some(500_000)
    );
    // A newer price list replaces the older one from its day on.
    assert_eq!(micros(&with_audio, pro, "2027-01-01"), Some(250_000));
    assert_eq!(micros(&silent, pro, "2025-12-31"), None);
}

#[test]
fn price_lines_must_have_a_date_and_an_amount() {
    let model = Catalog::embedded()
        .model("vendor_6/model_6")
        .unwrap()
        .clone();
    for (line, expected) in [
        (
            json!({ "from": "2026-02-30", "usd_per_second": "0.1" }),
            "not a date",
        ),
        (
            json!({ "from": "2026-02-01", "usd_per_second": "ten" }),
            "not an amount",
        ),
    ] {
        let mut config = kling_config();
        config.costs = vec![serde_json::from_value(line).unwrap()];
        let error = config.check(&model).unwrap_err();
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn inputs_are_renamed_transformed_and_merged_over_fixed_fields() {
    let config = kling_config();
    let text = job(
        "vendor_6/model_6",
        "text-to-video",
        json!({ "prompt": "a kite", "duration": 5, "resolution": "1080p",
                "aspect_ratio": "16:9", "generate_audio": false,
                "webhook_url": "https://customer.example/hook" }),
    );
    assert_eq!(
        config.target(&text).unwrap(),
        ProviderTarget("fal-ai/kling-video/v3/pro/text-to-video".into())
    );
    assert_eq!(
        config.provider_input(&text).unwrap(),
        json!({ "prompt": "a kite", "duration": "5", "aspect_ratio": "16:9",
                "generate_audio": false, "cfg_scale": 0.5 })
    );
    let image = job(
        "vendor_6/model_6",
        "image-to-video",
        json!({ "prompt": "a kite", "duration": 3, "resolution": "720p",
                "image_url": "https://files/a.png", "generate_audio": true }),
    );
    assert_eq!(
        config.provider_input(&image).unwrap(),
        json!({ "prompt": "a kite", "duration": "3", "start_image_url": "https://files/a.png",
                "generate_audio": true, "cfg_scale": 0.5 })
    );
}

#[test]
fn an_end_frame_sends_the_job_to_the_first_last_frame_target_with_its_own_fields() {
    let config: HostedModelConfig = serde_json::from_value(json!({
        "modes": {
            "text-to-video": { "target": "fal-ai/veo3.1/lite" },
            "image-to-video": {
                "target": "fal-ai/veo3.1/lite/image-to-video",
                "when_present": { "end_image_url": {
                    "target": "fal-ai/veo3.1/lite/first-last-frame-to-video",
                    "fields": { "image_url": "first_frame_url", "end_image_url": "last_frame_url" },
                    "fixed": { "auto_fix": false } } }
            }
        },
        "fields": {
            "prompt": "prompt", "aspect_ratio": "aspect_ratio", "resolution": "resolution",
            "duration": { "to": "duration", "transform": "seconds_suffix" },
            "image_url": "image_url", "end_image_url": null
        }
    }))
    .unwrap();
    config
        .check(Catalog::embedded().model("vendor_2/model_2").unwrap())
        .unwrap();
    let start_only = job(
        "vendor_2/model_2",
        "image-to-video",
        json!({ "prompt": "a kite", "duration": 4, "image_url": "https://files/a.png" }),
    );
    assert_eq!(
        config.target(&start_only).unwrap().0,
        "fal-ai/veo3.1/lite/image-to-video"
    );
    assert_eq!(
        config.provider_input(&start_only).unwrap(),
        json!({ "prompt": "a kite", "duration": "4s", "image_url": "https://files/a.png" })
    );
    let both_ends = job(
        "vendor_2/model_2",
        "image-to-video",
        json!({ "prompt": "a kite", "duration": 4, "image_url": "https://files/a.png",
                "end_image_url": "https://files/b.png" }),
    );
    assert_eq!(
        config.target(&both_ends).unwrap().0,
        "fal-ai/veo3.1/lite/first-last-frame-to-video"
    );
    assert_eq!(
        config.provider_input(&both_ends).unwrap(),
        json!({ "prompt": "a kite", "duration": "4s", "first_frame_url": "https://files/a.png",
                "last_frame_url": "https://files/b.png", "auto_fix": false })
    );
}

#[test]
fn a_value_outside_accepts_is_not_served_and_the_mode_overrides_the_model() {
    let mut config = kling_config();
    config.accepts = serde_json::from_value(json!({ "resolution": ["720p"] })).unwrap();
    config.modes.get_mut("image-to-video").unwrap().accepts =
        serde_json::from_value(json!({ "resolution": ["720p", "1080p"], "negative_prompt": [] }))
            .unwrap();
    let input = |value: Value| vidgate_core::ValidatedInput::from_stored_json(value);
    let text = "text-to-video".parse().unwrap();
    let image = "image-to-video".parse().unwrap();
    assert_eq!(
        config.serves(text, &input(json!({ "resolution": "720p" }))),
        Ok(())
    );
    let refused = config
        .serves(text, &input(json!({ "resolution": "1080p" })))
        .unwrap_err();
    assert_eq!(refused.parameter, "resolution");
    assert_eq!(
        refused.message("vendor_6/model_6", text),
        "resolution 1080p is not available for vendor_6/model_6 text-to-video on this deployment."
    );
    assert_eq!(
        config.serves(image, &input(json!({ "resolution": "1080p" }))),
        Ok(())
    );
    // An empty list: no value is served, and leaving it out is fine.
    let refused = config
        .serves(image, &input(json!({ "negative_prompt": "blur" })))
        .unwrap_err();
    assert_eq!(refused.parameter, "negative_prompt");
    assert_eq!(
        refused.message("vendor_6/model_6", image),
        "negative_prompt is not available for vendor_6/model_6 image-to-video on this deployment (sent: blur); send the request without it."
    );
    assert_eq!(
        config.serves(image, &input(json!({ "negative_prompt": null }))),
        Ok(())
    );
    // A parameter the mode does not take cannot be restricted.
    config.modes.get_mut("text-to-video").unwrap().accepts =
        serde_json::from_value(json!({ "image_url": [] })).unwrap();
    config.fields.insert(
        "resolution".into(),
        Some(FieldMapping::Rename("resolution".into())),
    );
    let error = config
        .check(Catalog::embedded().model("vendor_6/model_6").unwrap())
        .unwrap_err();
    assert!(error.contains("accepts"), "{error}");
}

#[test]
fn the_prompt_names_references_as_the_target_does() {
    let config: HostedModelConfig = serde_json::from_value(json!({
        "modes": {
            "text-to-video": { "target": "bytedance/seedance-2.0" },
            "reference-to-video": { "target": "bytedance/seedance-2.0" }
        },
        "fields": {
            "prompt": "prompt", "resolution": "resolution", "aspect_ratio": "aspect_ratio",
            "duration": "duration", "generate_audio": "generate_audio", "seed": "seed",
            "reference_image_urls": "reference_images",
            "reference_video_urls": "reference_videos",
            "reference_audio_urls": "reference_audios"
        },
        "references": { "image": "[Image{n}]", "video": "[Video{n}]", "audio": "[Audio{n}]" }
    }))
    .unwrap();
    config
        .check(Catalog::embedded().model("vendor_4/model_4").unwrap())
        .unwrap();
    let references = job(
        "vendor_4/model_4",
        "reference-to-video",
        json!({ "prompt": "@Image2 sings @Audio1 to @Image1 (mail a@Image1.com)",
                "reference_image_urls": ["https://files/a.png", "https://files/b.png"],
                "reference_audio_urls": ["https://files/a.wav"], "duration": 5 }),
    );
    let input = config.provider_input(&references).unwrap();
    assert_eq!(
        input["prompt"],
        "[Image2] sings [Audio1] to [Image1] (mail a@Image1.com)"
    );
    // The job's own input is the customer's, unchanged.
    assert_eq!(
        references.input.get("prompt").unwrap(),
        "@Image2 sings @Audio1 to @Image1 (mail a@Image1.com)"
    );
    // A syntax that leaves out a kind the mode sends is refused at start.
    let mut partial = config.clone();
    partial.references.as_mut().unwrap().audio = None;
    let error = partial
        .check(Catalog::embedded().model("vendor_4/model_4").unwrap())
        .unwrap_err();
    assert!(error.contains("no audio syntax"), "{error}");
    let mut bad = config.clone();
    bad.references.as_mut().unwrap().video = Some("[Video]".into());
    let error = bad
        .check(Catalog::embedded().model("vendor_4/model_4").unwrap())
        .unwrap_err();
    assert!(error.contains("{n}"), "{error}");
}

#[test]
fn two_of_our_parameters_can_fill_one_list_in_order() {
    let config: HostedModelConfig = serde_json::from_value(json!({
        "modes": { "image-to-video": { "target": "black-forest-labs/flux-3" } },
        "fields": {
            "prompt": "prompt", "duration": "duration", "generate_audio": "generate_audio",
            "image_url": { "to": "images", "transform": "item", "index": 0 },
            "end_image_url": { "to": "images", "transform": "item", "index": 1 }
        }
    }))
    .unwrap();
    config
        .check(Catalog::embedded().model("vendor_3/model_3").unwrap())
        .unwrap();
    let both = job(
        "vendor_3/model_3",
        "image-to-video",
        json!({ "prompt": "a kite", "duration": 7, "image_url": "https://files/open.png",
                "end_image_url": "https://files/close.png" }),
    );
    assert_eq!(
        config.provider_input(&both).unwrap()["images"],
        json!(["https://files/open.png", "https://files/close.png"])
    );
    let opening_only = job(
        "vendor_3/model_3",
        "image-to-video",
        json!({ "prompt": "a kite", "duration": 7, "image_url": "https://files/open.png" }),
    );
    assert_eq!(
        config.provider_input(&opening_only).unwrap()["images"],
        json!(["https://files/open.png"])
    );
}

#[test]
fn limits_across_fields_and_lengths_refuse_naming_the_parameter() {
    let input = |value: Value| vidgate_core::ValidatedInput::from_stored_json(value);
    let limits: Vec<Limit> = serde_json::from_value(json!([
        { "parameter": "prompt", "max_length": 10 },
        { "parameter": "reference_image_urls", "max_items": 3,
          "counted_with": ["reference_video_urls", "reference_audio_urls"] },
        { "parameter": "duration", "accepts": [8], "when": { "resolution": ["1080p"] } },
        { "parameter": "generate_audio", "accepts": [false],
          "when_given": ["reference_video_urls"] }
    ]))
    .unwrap();
    let first_refusal = |value: Value| {
        let value = input(value);
        limits.iter().find_map(|limit| limit.check(&value).err())
    };
    let mode: Mode = "reference-to-video".parse().unwrap();
    // Within every limit.
    assert_eq!(
        first_refusal(
            json!({ "prompt": "ten chars!", "duration": 6, "resolution": "720p",
                              "reference_image_urls": ["a", "b", "c"],
                              "generate_audio": true })
        ),
        None
    );
    // Characters, not bytes.
    assert_eq!(first_refusal(json!({ "prompt": "éééééééééé" })), None);
    let long = first_refusal(json!({ "prompt": "eleven char" })).unwrap();
    assert_eq!(long.parameter, "prompt");
    assert_eq!(
        long.message("vendor_6/model_6", mode),
        "prompt is 11 characters long; at most 10 are taken for vendor_6/model_6 reference-to-video on this deployment."
    );
    let many = first_refusal(json!({ "reference_image_urls": ["a", "b"],
                                     "reference_video_urls": ["v"],
                                     "reference_audio_urls": ["s"] }))
    .unwrap();
    assert_eq!(many.parameter, "reference_image_urls");
    assert!(
        many.message("vendor_4/model_4", mode).starts_with(
            "reference_image_urls, reference_video_urls and reference_audio_urls hold 4 items together; at most 3 are taken"
        ),
        "{}",
        many.message("vendor_4/model_4", mode)
    );
    let short = first_refusal(json!({ "duration": 6, "resolution": "1080p" })).unwrap();
    assert_eq!(short.parameter, "duration");
    assert!(
        short
            .message("vendor_2/model_2", mode)
            .starts_with("duration 6 is not available with resolution 1080p"),
        "{}",
        short.message("vendor_2/model_2", mode)
    );
    assert_eq!(
        first_refusal(json!({ "duration": 8, "resolution": "1080p" })),
        None
    );
    let loud = first_refusal(json!({ "generate_audio": true,
                                     "reference_video_urls": ["v"] }))
    .unwrap();
    assert_eq!(loud.parameter, "generate_audio");
    assert!(
        loud.message("vendor_6/model_6", mode)
            .starts_with("generate_audio true is not available with reference_video_urls"),
        "{}",
        loud.message("vendor_6/model_6", mode)
    );
    // An empty list is not given.
    assert_eq!(
        first_refusal(json!({ "generate_audio": true, "reference_video_urls": [] })),
        None
    );
}

#[test]
fn a_mode_checks_its_limits_and_the_models_and_the_file_check_knows_their_parameters() {
    let mut config = kling_config();
    config.fields.insert(
        "resolution".into(),
        Some(FieldMapping::Rename("resolution".into())),
    );
    config.limits =
        serde_json::from_value(json!([{ "parameter": "prompt", "max_length": 5 }])).unwrap();
    let kling = Catalog::embedded()
        .model("vendor_6/model_6")
        .unwrap()
        .clone();
    config.check(&kling).unwrap();
    let text: Mode = "text-to-video".parse().unwrap();
    let input = |value: Value| vidgate_core::ValidatedInput::from_stored_json(value);
    assert_eq!(
        config
            .serves(text, &input(json!({ "prompt": "a long kite" })))
            .unwrap_err()
            .parameter,
        "prompt"
    );
    assert_eq!(
        config.serves(text, &input(json!({ "prompt": "kite" }))),
        Ok(())
    );
    // A parameter the mode does not take cannot be limited there.
    config.modes.get_mut("text-to-video").unwrap().limits =
        serde_json::from_value(json!([{ "parameter": "image_url", "max_length": 5 }])).unwrap();
    let error = config.check(&kling).unwrap_err();
    assert!(error.contains("image_url"), "{error}");
    config
        .modes
        .get_mut("text-to-video")
        .unwrap()
        .limits
        .clear();
    // A limit that limits nothing, and an unknown parameter.
    config.limits = serde_json::from_value(json!([{ "parameter": "prompt" }])).unwrap();
    assert!(config.check(&kling).unwrap_err().contains("none of"));
    config.limits =
        serde_json::from_value(json!([{ "parameter": "prmpt", "max_length": 5 }])).unwrap();
    assert!(config.check(&kling).unwrap_err().contains("prmpt"));
    config.limits.clear();
    // Only configured targets can be marked unverified.
    config.unverified = vec!["kwaivgi/kling-v9".into()];
    assert!(config.check(&kling).unwrap_err().contains("unverified"));
    config.unverified = vec!["fal-ai/kling-video/v3/pro/image-to-video".into()];
    config.check(&kling).unwrap();
}

#[test]
fn the_seed_reported_is_the_one_the_provider_was_sent() {
    let mut config = kling_config();
    config.fields.insert("seed".into(), None);
    let with_seed = job(
        "vendor_6/model_6",
        "text-to-video",
        json!({ "prompt": "a kite" }),
    );
    // Mapped to nothing: the target takes no seed, none is claimed.
    assert_eq!(config.seed_sent(&with_seed, &json!({ "seed": 42 })), None);
    config.fields.insert(
        "seed".into(),
        Some(FieldMapping::Rename("random_seed".into())),
    );
    // The seed the recorded input holds, not this attempt's own.
    assert_eq!(
        config.seed_sent(&with_seed, &json!({ "random_seed": 7 })),
        Some(7)
    );
    assert_eq!(config.seed_sent(&with_seed, &json!({})), None);
}

#[test]
fn value_maps_and_transforms_apply() {
    let mapping: FieldMapping = serde_json::from_value(
        json!({ "to": "mode", "values": { "720p": "standard", "1080p": "pro" } }),
    )
    .unwrap();
    assert_eq!(
        apply_mapping(&mapping, json!("1080p")).unwrap(),
        ("mode".into(), json!("pro"))
    );
    let seconds: FieldMapping =
        serde_json::from_value(json!({ "to": "duration", "transform": "seconds_suffix" })).unwrap();
    assert_eq!(
        apply_mapping(&seconds, json!(8)).unwrap(),
        ("duration".into(), json!("8s"))
    );
    let first: FieldMapping =
        serde_json::from_value(json!({ "to": "image", "transform": "first" })).unwrap();
    assert_eq!(
        apply_mapping(&first, json!(["a", "b"])).unwrap(),
        ("image".into(), json!("a"))
    );
}

#[test]
fn the_check_wants_every_parameter_mapped_and_price_affecting_ones_sent() {
    let catalog = Catalog::embedded();
    let kling = catalog.model("vendor_6/model_6").unwrap();
    // resolution chooses the endpoint for t2v; i2v does not map it.
    let error = kling_config().check(kling).unwrap_err();
    assert!(error.contains("resolution"), "{error}");
    let mut config = kling_config();
    config.fields.insert(
        "resolution".into(),
        Some(FieldMapping::Rename("resolution".into())),
    );
    config.check(kling).unwrap();
    config.fields.remove("duration");
    let error = config.check(kling).unwrap_err();
    assert!(error.contains("duration"), "{error}");
    let mut config = kling_config();
    config.fields.insert(
        "resolution".into(),
        Some(FieldMapping::Rename("resolution".into())),
    );
    config
        .modes
        .get_mut("text-to-video")
        .unwrap()
        .target_by
        .as_mut()
        .unwrap()
        .targets
        .remove("1080p");
    let error = config.check(kling).unwrap_err();
    assert!(error.contains("1080p"), "{error}");
}

#[test]
fn the_example_backends_files_map_every_parameter_of_the_catalog() {
    let catalog = Catalog::embedded();
    // Every registered provider's example file.
    for provider in crate::backend::hosted::providers::PROVIDERS {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(provider.example_file());
        let text = std::fs::read_to_string(path).unwrap();
        let file: Value = serde_json::from_str(&text).unwrap();
        // An aggregator's file maps all six models; a maker's own source
        // (ModelArk) only the models it makes.
        let models = file["models"].as_object().unwrap();
        assert!(!models.is_empty(), "{}", provider.example_file());
        for (model_id, entry) in models {
            let mut entry = entry.clone();
            entry.as_object_mut().unwrap().remove("backend");
            let config: HostedModelConfig = serde_json::from_value(entry).unwrap();
            let checked = config.check(catalog.model(model_id).unwrap());
            assert!(checked.is_ok(), "{model_id}: {checked:?}");
        }
    }
}
