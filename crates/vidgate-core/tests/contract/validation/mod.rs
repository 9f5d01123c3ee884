//! Request validation against the SPEC.md section 4 tables.

use serde_json::{Map, Value, json};
use vidgate_core::{Catalog, Endpoint, InvalidRequest, Mode, Purpose, ValidatedInput};

use crate::spec::{
    AUDIO, I2V, IMAGE, R2V, Rule, SpecModel, VIDEO, accepted_values, every_parameter_name,
    minimal_body, rejected_values, spec_models,
};

fn endpoint<'a>(catalog: &'a Catalog, model: &SpecModel, mode: Mode) -> Endpoint<'a> {
    catalog
        .endpoint(&model.endpoint_id(mode))
        .unwrap_or_else(|| panic!("endpoint {} is missing", model.endpoint_id(mode)))
}

fn submit(endpoint: Endpoint<'_>, body: Value) -> Result<ValidatedInput, InvalidRequest> {
    endpoint.validate_value(&body, Purpose::Submit)
}

/// Every (model, mode) pair of SPEC.md section 1.
fn every_endpoint() -> Vec<(SpecModel, Mode)> {
    spec_models()
        .into_iter()
        .flat_map(|model| {
            model
                .modes
                .iter()
                .map(move |&mode| (model.clone(), mode))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A body with `name` set to `value` on top of the minimal valid body, plus
/// whatever the parameter needs beside it.
fn body_with(model: &SpecModel, mode: Mode, name: &str, value: Value) -> Value {
    let mut body = minimal_body(model, mode);
    if let Some(param) = model.param(name)
        && let Some(first) = param.needs_any_of.first()
    {
        body.insert((*first).to_owned(), json!([IMAGE]));
    }
    body.insert(name.to_owned(), value);
    Value::Object(body)
}

#[test]
fn minimal_bodies_are_accepted_on_every_endpoint() {
    let catalog = Catalog::embedded();
    for (model, mode) in every_endpoint() {
        let body = Value::Object(minimal_body(&model, mode));
        let result = submit(endpoint(&catalog, &model, mode), body.clone());
        assert!(
            result.is_ok(),
            "{} {body}: {result:?}",
            model.endpoint_id(mode)
        );
    }
}

#[test]
fn every_accepted_value_of_every_parameter_is_accepted_and_echoed() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        for param in model.params_in(mode) {
            for (value, echoed) in accepted_values(param) {
                let body = body_with(&model, mode, param.name, value.clone());
                let input = submit(endpoint, body).unwrap_or_else(|error| {
                    panic!("{} {}={value}: {error:?}", endpoint.id(), param.name)
                });
                assert_eq!(
                    input.to_json()[param.name],
                    echoed,
                    "{} {}={value}",
                    endpoint.id(),
                    param.name
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 300, "only {checked} values were checked");
}

#[test]
fn every_rejected_value_of_every_parameter_names_the_parameter() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        for param in model.params_in(mode) {
            for (value, fragment) in rejected_values(param) {
                for purpose in [Purpose::Submit, Purpose::Quote] {
                    let body = body_with(&model, mode, param.name, value.clone());
                    let error = endpoint.validate_value(&body, purpose).expect_err(&format!(
                        "{} {}={value} was accepted",
                        endpoint.id(),
                        param.name
                    ));
                    assert_eq!(
                        error.param.as_deref(),
                        Some(param.name),
                        "{} {}={value}",
                        endpoint.id(),
                        param.name
                    );
                    assert!(
                        error.message.contains(param.name) && error.message.contains(fragment),
                        "{} {}={value}: message {:?} lacks {fragment:?}",
                        endpoint.id(),
                        param.name,
                        error.message
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500, "only {checked} values were checked");
}

#[test]
fn bound_messages_state_the_bound() {
    let catalog = Catalog::embedded();
    let m1 = catalog
        .endpoint("vendor_1/model_1/reference-to-video")
        .unwrap();
    let cases = [
        (
            json!({"prompt": "a", "duration": 31}),
            "duration",
            "duration must be an integer from 2 to 30; got 31",
        ),
        (
            json!({"prompt": "a", "duration": 1}),
            "duration",
            "duration must be an integer from 2 to 30; got 1",
        ),
        (
            json!({"prompt": "a", "aspect_ratio": "21:9"}),
            "aspect_ratio",
            "aspect_ratio must be one of 16:9, 9:16, 1:1, 4:3, 3:4; got 21:9",
        ),
        (
            json!({"prompt": "x".repeat(5001)}),
            "prompt",
            "prompt must be at most 5000 characters long; got 5001",
        ),
        (
            json!({"prompt": "a", "reference_image_urls": [IMAGE, IMAGE, IMAGE, IMAGE, IMAGE]}),
            "reference_image_urls",
            "reference_image_urls may hold at most 4 items; got 5",
        ),
        (
            json!({"prompt": "a", "reference_video_urls": [VIDEO, 7]}),
            "reference_video_urls",
            "reference_video_urls[1] must be a URL string, not a number",
        ),
        (
            json!({"prompt": "a", "seed": 2_147_483_648_i64}),
            "seed",
            "seed must be an integer from 0 to 2147483647; got 2147483648",
        ),
        (
            json!({"prompt": "a", "seed": 5.5}),
            "seed",
            "seed must be a whole number; got 5.5",
        ),
        (
            json!({"prompt": "a", "duration": "5"}),
            "duration",
            "duration must be an integer, not a string",
        ),
    ];
    for (body, param, message) in cases {
        let error = submit(m1, body).unwrap_err();
        assert_eq!(
            (error.param.as_deref(), error.message.as_str()),
            (Some(param), message)
        );
    }
    let m2 = catalog.endpoint("vendor_2/model_2/text-to-video").unwrap();
    let error = submit(m2, json!({"prompt": "a", "duration": 5})).unwrap_err();
    assert_eq!(error.message, "duration must be one of 4, 6, 8; got 5");
}

#[test]
fn parameters_not_defined_for_the_mode_are_rejected_with_their_name() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        for name in every_parameter_name() {
            if model.param(name).is_some_and(|param| param.in_mode(mode)) {
                continue;
            }
            for value in [json!("16:9"), json!(5), json!(null), json!([IMAGE])] {
                let body = body_with(&model, mode, name, value.clone());
                let error = submit(endpoint, body)
                    .expect_err(&format!("{} accepted {name}={value}", endpoint.id()));
                assert_eq!(error.param.as_deref(), Some(name), "{}", endpoint.id());
                assert!(
                    error.message.contains(name),
                    "{}: {}",
                    endpoint.id(),
                    error.message
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 200, "only {checked} bodies were checked");
}

#[test]
fn the_briefs_examples_of_parameters_outside_their_mode_are_rejected() {
    let catalog = Catalog::embedded();
    let cases = [
        (
            "vendor_1/model_1/text-to-video",
            "image_url",
            json!(IMAGE),
            "only accepted in image-to-video",
        ),
        (
            "vendor_1/model_1/image-to-video",
            "aspect_ratio",
            json!("16:9"),
            "not accepted in image-to-video",
        ),
        (
            "vendor_3/model_3/text-to-video",
            "resolution",
            json!("720p"),
            "unknown parameter",
        ),
        (
            "vendor_6/model_6/text-to-video",
            "seed",
            json!(1),
            "unknown parameter",
        ),
        (
            "vendor_1/model_1/image-to-video",
            "end_image_url",
            json!(IMAGE),
            "unknown parameter",
        ),
        (
            "vendor_3/model_3/image-to-video",
            "aspect_ratio",
            json!("16:9"),
            "only accepted in text-to-video",
        ),
        (
            "vendor_6/model_6/reference-to-video",
            "reference_video_urls",
            json!([VIDEO]),
            "unknown parameter",
        ),
        (
            "vendor_2/model_2/text-to-video",
            "generate_audio",
            json!(true),
            "unknown parameter",
        ),
    ];
    for (endpoint_id, name, value, fragment) in cases {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        let mut body = json!({"prompt": "a", "image_url": IMAGE, "reference_image_urls": [IMAGE]});
        let object = body.as_object_mut().unwrap();
        object.retain(|key, _| key == "prompt" || endpoint.parameter(key).is_some());
        object.insert(name.to_owned(), value);
        let error = submit(endpoint, body).unwrap_err();
        assert_eq!(error.param.as_deref(), Some(name), "{endpoint_id}");
        assert!(
            error.message.contains(fragment),
            "{endpoint_id}: {}",
            error.message
        );
    }
}

#[test]
fn missing_required_fields_are_rejected_on_submit_but_not_on_quote() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        for param in model
            .params_in(mode)
            .filter(|param| param.required_in.contains(&mode))
        {
            for absent in [None, Some(Value::Null)] {
                let mut body = minimal_body(&model, mode);
                match &absent {
                    None => body.remove(param.name),
                    Some(null) => body.insert(param.name.to_owned(), null.clone()),
                };
                let body = Value::Object(body);
                let error =
                    submit(endpoint, body.clone()).expect_err(&format!("{} {body}", endpoint.id()));
                assert_eq!(
                    error.param.as_deref(),
                    Some(param.name),
                    "{} {body}",
                    endpoint.id()
                );
                assert_eq!(error.message, format!("{} is required", param.name));
                assert!(
                    endpoint.validate_value(&body, Purpose::Quote).is_ok(),
                    "quote {} {body}",
                    endpoint.id()
                );
                checked += 1;
            }
        }
        // A quote of an empty body prices the defaults.
        assert!(
            endpoint.validate(b"{}", Purpose::Quote).is_ok(),
            "{}",
            endpoint.id()
        );
    }
    assert!(
        checked >= 2 * (16 + 5),
        "only {checked} bodies were checked"
    );
}

#[test]
fn required_fields_per_mode_match_the_spec() {
    let catalog = Catalog::embedded();
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        let error = endpoint.validate(b"{}", Purpose::Submit).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("prompt"), "{}", endpoint.id());
        let mut expected: Vec<&str> = vec!["prompt"];
        if mode == I2V {
            expected.push("image_url");
        }
        if mode == R2V && model.label == "M6" {
            expected.push("reference_image_urls");
        }
        let schema = endpoint.input_schema();
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|name| name.as_str().unwrap())
            .collect::<Vec<_>>();
        required.sort();
        expected.sort();
        assert_eq!(required, expected, "{}", endpoint.id());
    }
}

#[test]
fn m6_reference_images_must_not_be_empty_on_submit() {
    let catalog = Catalog::embedded();
    let endpoint = catalog
        .endpoint("vendor_6/model_6/reference-to-video")
        .unwrap();
    let body = json!({"prompt": "a", "reference_image_urls": []});
    let error = submit(endpoint, body.clone()).unwrap_err();
    assert_eq!(error.param.as_deref(), Some("reference_image_urls"));
    assert!(
        error.message.contains("at least one item"),
        "{}",
        error.message
    );
    assert!(endpoint.validate_value(&body, Purpose::Quote).is_ok());
    assert!(
        submit(
            endpoint,
            json!({"prompt": "a", "reference_image_urls": [IMAGE]})
        )
        .is_ok()
    );
}

#[test]
fn defaults_are_filled_per_spec() {
    let catalog = Catalog::embedded();
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        let body = minimal_body(&model, mode);
        let input = submit(endpoint, Value::Object(body.clone())).unwrap();
        let mut expected = body;
        for param in model.params_in(mode) {
            if let Some(default) = &param.default {
                expected.insert(param.name.to_owned(), default.clone());
            }
        }
        assert_eq!(
            input.to_json(),
            Value::Object(expected),
            "{}",
            endpoint.id()
        );
        // A quote fills the same defaults.
        let quoted = endpoint.validate(b"{}", Purpose::Quote).unwrap();
        for param in model.params_in(mode) {
            assert_eq!(
                quoted.get(param.name),
                param.default.as_ref(),
                "{} {}",
                endpoint.id(),
                param.name
            );
        }
    }
}

#[test]
fn the_briefs_default_examples_hold() {
    let catalog = Catalog::embedded();
    let defaults = |endpoint_id: &str| {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        endpoint.validate(b"{}", Purpose::Quote).unwrap()
    };
    let m1 = defaults("vendor_1/model_1/text-to-video");
    assert_eq!(
        (
            m1.aspect_ratio(),
            m1.resolution(),
            m1.duration_s(),
            m1.generate_audio()
        ),
        (Some("16:9"), Some("720p"), 5, true)
    );
    assert_eq!(m1.seed(), None);
    assert_eq!(m1.negative_prompt(), None);
    assert_eq!(defaults("vendor_2/model_2/image-to-video").duration_s(), 8);
    assert!(!defaults("vendor_6/model_6/text-to-video").generate_audio());
    assert_eq!(
        defaults("vendor_1/model_1/image-to-video").aspect_ratio(),
        None
    );
    assert_eq!(
        defaults("vendor_3/model_3/text-to-video").resolution(),
        None
    );
}

#[test]
fn accessors_read_the_accepted_input() {
    let catalog = Catalog::embedded();
    let endpoint = catalog
        .endpoint("vendor_1/model_1/reference-to-video")
        .unwrap();
    let input = submit(
        endpoint,
        json!({
            "prompt": "@Image1 walks, @Video1 moves, @Audio1 plays",
            "negative_prompt": "blur",
            "seed": 42.0,
            "webhook_url": "https://hooks.example.com/done",
            "reference_image_urls": [IMAGE],
            "reference_video_urls": [VIDEO],
            "reference_audio_urls": [AUDIO],
            "duration": 7,
            "resolution": "1080p",
            "aspect_ratio": "9:16",
            "generate_audio": false,
        }),
    )
    .unwrap();
    assert_eq!(
        input.prompt(),
        "@Image1 walks, @Video1 moves, @Audio1 plays"
    );
    assert_eq!(input.negative_prompt(), Some("blur"));
    assert_eq!(input.seed(), Some(42));
    assert_eq!(input.webhook_url(), Some("https://hooks.example.com/done"));
    assert_eq!(input.reference_image_urls(), vec![IMAGE]);
    assert_eq!(input.reference_video_urls(), vec![VIDEO]);
    assert_eq!(input.reference_audio_urls(), vec![AUDIO]);
    assert_eq!(
        (input.duration_s(), input.resolution(), input.aspect_ratio()),
        (7, Some("1080p"), Some("9:16"))
    );
    assert!(!input.generate_audio());
    assert_eq!(input.image_url(), None);
    // The stored echo reads back to the same input.
    assert_eq!(ValidatedInput::from_stored_json(input.to_json()), input);
    assert_eq!(
        ValidatedInput::from_stored_json(json!("not an object")),
        ValidatedInput::default()
    );

    let i2v = catalog.endpoint("vendor_2/model_2/image-to-video").unwrap();
    let input = submit(
        i2v,
        json!({"prompt": "a", "image_url": IMAGE, "end_image_url": VIDEO}),
    )
    .unwrap();
    assert_eq!(
        (input.image_url(), input.end_image_url()),
        (Some(IMAGE), Some(VIDEO))
    );
}

#[test]
fn bodies_that_are_not_json_objects_are_rejected_without_a_param() {
    let catalog = Catalog::embedded();
    let endpoint = catalog.endpoint("vendor_1/model_1/text-to-video").unwrap();
    let cases: [(&[u8], &str); 10] = [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"prompt=a", "not valid JSON"),
        (b"{\"prompt\": }", "not valid JSON"),
        (b"{\"prompt\": \"a\"} trailing", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[]", "must be a JSON object, not an array"),
        (b"\"a\"", "must be a JSON object, not a string"),
        (b"5", "must be a JSON object, not a number"),
        (b"null", "must be a JSON object, not null"),
    ];
    for (body, fragment) in cases {
        for purpose in [Purpose::Submit, Purpose::Quote] {
            let error = endpoint.validate(body, purpose).unwrap_err();
            assert_eq!(error.param, None, "{body:?}");
            assert!(
                error.message.contains(fragment),
                "{body:?}: {}",
                error.message
            );
        }
    }
    assert!(
        endpoint
            .validate(br#"{"prompt": "a"}"#, Purpose::Submit)
            .is_ok()
    );
}

#[test]
fn optional_null_fields_count_as_omitted() {
    let catalog = Catalog::embedded();
    let endpoint = catalog.endpoint("vendor_1/model_1/text-to-video").unwrap();
    let input = submit(
        endpoint,
        json!({"prompt": "a", "duration": null, "seed": null, "webhook_url": null}),
    )
    .unwrap();
    assert_eq!(input.duration_s(), 5);
    assert_eq!(input.seed(), None);
    assert_eq!(input.to_json().get("webhook_url"), None);
}

#[test]
fn the_echo_has_a_stable_key_order() {
    let catalog = Catalog::embedded();
    let endpoint = catalog.endpoint("vendor_1/model_1/text-to-video").unwrap();
    let forward = endpoint
        .validate(
            br#"{"prompt": "a", "seed": 3, "duration": 6}"#,
            Purpose::Submit,
        )
        .unwrap();
    let backward = endpoint
        .validate(
            br#"{"duration": 6, "seed": 3, "prompt": "a"}"#,
            Purpose::Submit,
        )
        .unwrap();
    assert_eq!(
        serde_json::to_string(&forward.to_json()).unwrap(),
        serde_json::to_string(&backward.to_json()).unwrap()
    );
}

#[test]
fn schemas_list_exactly_the_parameters_the_validator_accepts() {
    let catalog = Catalog::embedded();
    for (model, mode) in every_endpoint() {
        let endpoint = endpoint(&catalog, &model, mode);
        let schema = endpoint.input_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        let properties: &Map<String, Value> = schema["properties"].as_object().unwrap();
        let mut in_schema: Vec<&str> = properties.keys().map(String::as_str).collect();
        in_schema.sort();
        let mut accepted_by_validator: Vec<&str> = every_parameter_name()
            .into_iter()
            .filter(|name| {
                let value = model
                    .param(name)
                    .map_or(json!("x"), crate::spec::sample_value);
                submit(endpoint, body_with(&model, mode, name, value)).is_ok()
            })
            .collect();
        accepted_by_validator.sort();
        let mut in_spec: Vec<&str> = model.params_in(mode).map(|param| param.name).collect();
        in_spec.sort();
        assert_eq!(in_schema, in_spec, "{}", endpoint.id());
        assert_eq!(accepted_by_validator, in_spec, "{}", endpoint.id());
        for param in model.params_in(mode) {
            let property = &properties[param.name];
            let context = format!("{} {}", endpoint.id(), param.name);
            assert_eq!(
                property["x-price-affecting"].as_bool().unwrap_or(false),
                param.price_affecting,
                "{context}"
            );
            assert_eq!(property.get("default"), param.default.as_ref(), "{context}");
            assert!(
                property["description"]
                    .as_str()
                    .is_some_and(|text| !text.is_empty()),
                "{context}"
            );
            match &param.rule {
                Rule::Text { max_length, .. } => {
                    assert_eq!(property["type"], "string", "{context}");
                    assert_eq!(
                        property["maxLength"].as_u64(),
                        max_length.map(|length| length as u64),
                        "{context}"
                    );
                }
                Rule::Uri { .. } => {
                    assert_eq!(
                        (&property["type"], &property["format"]),
                        (&json!("string"), &json!("uri")),
                        "{context}"
                    );
                }
                Rule::UriList { max_items } => {
                    assert_eq!(property["type"], "array", "{context}");
                    assert_eq!(property["items"]["format"], "uri", "{context}");
                    assert_eq!(property["maxItems"], json!(max_items), "{context}");
                }
                Rule::Choice(values) => {
                    assert_eq!(property["type"], "string", "{context}");
                    assert_eq!(property["enum"], json!(values), "{context}");
                }
                Rule::IntRange(minimum, maximum) => {
                    assert_eq!(property["type"], "integer", "{context}");
                    assert_eq!(
                        (&property["minimum"], &property["maximum"]),
                        (&json!(minimum), &json!(maximum)),
                        "{context}"
                    );
                }
                Rule::IntChoice(values) => {
                    assert_eq!(property["type"], "integer", "{context}");
                    assert_eq!(property["enum"], json!(values), "{context}");
                }
                Rule::Bool => assert_eq!(property["type"], "boolean", "{context}"),
            }
        }
    }
}

#[test]
fn texts_count_characters_not_bytes() {
    let catalog = Catalog::embedded();
    let endpoint = catalog.endpoint("vendor_6/model_6/text-to-video").unwrap();
    assert!(
        submit(
            endpoint,
            json!({"prompt": "🎬".repeat(5000), "negative_prompt": "ü".repeat(2000)})
        )
        .is_ok()
    );
    let error = submit(
        endpoint,
        json!({"prompt": "a", "negative_prompt": "ü".repeat(2001)}),
    )
    .unwrap_err();
    assert_eq!(
        error.message,
        "negative_prompt must be at most 2000 characters long; got 2001"
    );
}

mod media_references;
mod properties;
