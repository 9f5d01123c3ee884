//! Every billing rule of SPEC.md section 2, as properties over the whole
//! catalog and as spot values computed by hand.

use serde_json::{Value, json};
use vidgate_core::pricing::PriceUnit;
use vidgate_core::{Catalog, Endpoint, MediaFacts, Micros, Mode, Price, Purpose};

use crate::spec::{
    AUDIO, IMAGE, R2V, Rule, SPEC_RATES, SpecModel, VIDEO, accepted_values, spec_models,
};

fn quote(endpoint: Endpoint<'_>, body: &Value, media: &MediaFacts) -> Price {
    let input = endpoint
        .validate_value(body, Purpose::Quote)
        .unwrap_or_else(|error| panic!("{} {body}: {error:?}", endpoint.id()));
    endpoint.price(&input, media)
}

fn no_media() -> MediaFacts {
    MediaFacts::default()
}

fn videos(durations_ms: &[u64]) -> MediaFacts {
    MediaFacts {
        reference_video_durations_ms: durations_ms.to_vec(),
    }
}

fn choices(model: &SpecModel, mode: Mode, name: &str) -> Vec<Value> {
    match model
        .param(name)
        .filter(|param| param.in_mode(mode))
        .map(|param| &param.rule)
    {
        Some(Rule::Choice(values)) => values.iter().map(|value| json!(value)).collect(),
        Some(Rule::Bool) => vec![json!(false), json!(true)],
        _ => vec![Value::Null],
    }
}

fn durations(model: &SpecModel, mode: Mode) -> Vec<i64> {
    match model
        .param("duration")
        .filter(|param| param.in_mode(mode))
        .map(|param| &param.rule)
    {
        Some(Rule::IntRange(minimum, maximum)) => (*minimum..=*maximum).collect(),
        Some(Rule::IntChoice(values)) => values.to_vec(),
        other => panic!("{} {mode} has no duration: {other:?}", model.id),
    }
}

/// Every combination of the price-affecting enumerations of an endpoint,
/// as request bodies without a duration.
fn settings(model: &SpecModel, mode: Mode) -> Vec<Value> {
    let mut bodies = Vec::new();
    for resolution in choices(model, mode, "resolution") {
        for aspect_ratio in choices(model, mode, "aspect_ratio") {
            for audio in choices(model, mode, "generate_audio") {
                let mut body = json!({});
                for (name, value) in [
                    ("resolution", &resolution),
                    ("aspect_ratio", &aspect_ratio),
                    ("generate_audio", &audio),
                ] {
                    if !value.is_null() {
                        body[name] = value.clone();
                    }
                }
                bodies.push(body);
            }
        }
    }
    bodies
}

fn with(body: &Value, name: &str, value: Value) -> Value {
    let mut body = body.clone();
    body[name] = value;
    body
}

/// Every endpoint with the spec model, for the property tests.
fn every_endpoint(catalog: &Catalog) -> Vec<(SpecModel, Endpoint<'_>)> {
    spec_models()
        .into_iter()
        .flat_map(|model| {
            model
                .modes
                .iter()
                .map(|&mode| {
                    (
                        model.clone(),
                        catalog.endpoint(&model.endpoint_id(mode)).unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn spot_prices_match_hand_computed_values() {
    let catalog = Catalog::embedded();
    // (endpoint, body, reference video ms, our cents, official cents)
    let cases: Vec<(&str, Value, Vec<u64>, i64, i64)> = vec![
        ("vendor_1/model_1/text-to-video", json!({}), vec![], 50, 60),
        (
            "vendor_1/model_1/text-to-video",
            json!({"resolution": "480p", "duration": 2}),
            vec![],
            10,
            12,
        ),
        (
            "vendor_1/model_1/text-to-video",
            json!({"resolution": "1080p", "duration": 30}),
            vec![],
            600,
            720,
        ),
        // 1:1 is 720x720, 0.5625 of the 16:9 area: 0.28125 and 0.3375.
        (
            "vendor_1/model_1/text-to-video",
            json!({"aspect_ratio": "1:1"}),
            vec![],
            28,
            34,
        ),
        // 4:3 is 960x720, 0.75 of the area: 0.375 rounds half up.
        (
            "vendor_1/model_1/text-to-video",
            json!({"aspect_ratio": "4:3"}),
            vec![],
            38,
            45,
        ),
        (
            "vendor_1/model_1/image-to-video",
            json!({"resolution": "1080p", "duration": 10}),
            vec![],
            200,
            240,
        ),
        // 5 output seconds and 4.5 reference seconds at 0.10.
        (
            "vendor_1/model_1/reference-to-video",
            json!({"reference_video_urls": [VIDEO, VIDEO]}),
            vec![3000, 1500],
            95,
            114,
        ),
        ("vendor_2/model_2/text-to-video", json!({}), vec![], 80, 120),
        (
            "vendor_2/model_2/image-to-video",
            json!({"duration": 4, "aspect_ratio": "9:16"}),
            vec![],
            80,
            120,
        ),
        ("vendor_3/model_3/text-to-video", json!({}), vec![], 40, 50),
        // 21:9 is 1680x720, 1.3125 of the area: 1.05 and 1.3125.
        (
            "vendor_3/model_3/text-to-video",
            json!({"aspect_ratio": "21:9", "duration": 10}),
            vec![],
            105,
            131,
        ),
        (
            "vendor_3/model_3/text-to-video",
            json!({"aspect_ratio": "2:1"}),
            vec![],
            45,
            56,
        ),
        (
            "vendor_3/model_3/image-to-video",
            json!({"duration": 20}),
            vec![],
            160,
            200,
        ),
        // 1280x720x24x5/1024 = 108000 tokens: 0.216 and 0.27.
        ("vendor_4/model_4/text-to-video", json!({}), vec![], 22, 27),
        // 3840x2160x24x15/1024 = 2916000 tokens: 5.832 and 7.29.
        (
            "vendor_4/model_4/text-to-video",
            json!({"resolution": "4k", "duration": 15}),
            vec![],
            583,
            729,
        ),
        // 854x480x24x4/1024 = 38430 tokens: 0.07686 and 0.096075.
        (
            "vendor_4/model_4/image-to-video",
            json!({"resolution": "480p", "duration": 4}),
            vec![],
            8,
            10,
        ),
        // 216000 tokens of output and reference at 1.40 and 1.75.
        (
            "vendor_4/model_4/reference-to-video",
            json!({"reference_video_urls": [VIDEO]}),
            vec![5000],
            30,
            38,
        ),
        ("vendor_5/model_5/text-to-video", json!({}), vec![], 40, 50),
        (
            "vendor_5/model_5/text-to-video",
            json!({"resolution": "480p", "duration": 30}),
            vec![],
            120,
            150,
        ),
        (
            "vendor_5/model_5/reference-to-video",
            json!({"resolution": "1080p", "reference_video_urls": [VIDEO]}),
            vec![5000],
            160,
            200,
        ),
        ("vendor_6/model_6/text-to-video", json!({}), vec![], 35, 42),
        (
            "vendor_6/model_6/text-to-video",
            json!({"generate_audio": true}),
            vec![],
            70,
            84,
        ),
        (
            "vendor_6/model_6/image-to-video",
            json!({"resolution": "1080p", "duration": 10}),
            vec![],
            120,
            144,
        ),
        (
            "vendor_6/model_6/text-to-video",
            json!({"resolution": "1080p", "generate_audio": true, "duration": 15}),
            vec![],
            300,
            360,
        ),
        // 1:1 is 720x720: 0.39375 and 0.4725.
        (
            "vendor_6/model_6/reference-to-video",
            json!({"aspect_ratio": "1:1", "generate_audio": true, "reference_image_urls": [IMAGE]}),
            vec![],
            39,
            47,
        ),
    ];
    for (endpoint_id, body, durations, ours, official) in cases {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        let price = quote(endpoint, &body, &videos(&durations));
        assert_eq!(
            (price.amount, price.official),
            (
                Micros::from_usd_cents(ours),
                Micros::from_usd_cents(official)
            ),
            "{endpoint_id} {body} {durations:?}: {:?}",
            price.breakdown
        );
        assert_eq!(price.saved(), Micros::from_usd_cents(official - ours));
    }
}

#[test]
fn m4_breakdown_counts_tokens() {
    let catalog = Catalog::embedded();
    let m4 = catalog
        .endpoint("vendor_4/model_4/reference-to-video")
        .unwrap();
    let plain = quote(m4, &json!({}), &no_media());
    assert_eq!(plain.breakdown.unit, PriceUnit::Token);
    assert_eq!(plain.breakdown.tokens, Some(108_000));
    assert_eq!((plain.breakdown.width, plain.breakdown.height), (1280, 720));
    assert_eq!(plain.breakdown.rate_micros, Micros(2_000_000));
    assert_eq!(plain.breakdown.unrounded_amount_micros, Micros(216_000));
    let with_video = quote(
        m4,
        &json!({"reference_video_urls": [VIDEO]}),
        &videos(&[5000]),
    );
    assert_eq!(with_video.breakdown.tokens, Some(216_000));
    assert_eq!(with_video.breakdown.reference_video_milliseconds, 5000);
    assert_eq!(
        (
            with_video.breakdown.rate_micros,
            with_video.breakdown.official_rate_micros
        ),
        (Micros(1_400_000), Micros(1_750_000))
    );
    let serialised = serde_json::to_value(&with_video).unwrap();
    assert_eq!(serialised["amount"], 300_000);
    assert_eq!(serialised["breakdown"]["unit"], "token");
    assert_eq!(serialised["breakdown"]["tokens"], 216_000);
    assert_eq!(serialised["breakdown"]["rate_micros"], 1_400_000);
    assert_eq!(serialised["breakdown"]["output_seconds"], 5);
}

#[test]
fn per_second_rates_match_the_agreed_table() {
    let catalog = Catalog::embedded();
    for rate in SPEC_RATES {
        let model = catalog
            .models()
            .iter()
            .find(|model| model.label == rate.label)
            .unwrap();
        let endpoint = model.endpoint(Mode::TextToVideo).unwrap();
        let mut body = json!({"aspect_ratio": "16:9"});
        if endpoint.parameter("resolution").is_some() {
            body["resolution"] = json!(rate.resolution);
        }
        if let Some(audio) = rate.audio {
            body["generate_audio"] = json!(audio);
        }
        let price = quote(endpoint, &body, &no_media());
        assert_eq!(
            (
                price.breakdown.rate_micros,
                price.breakdown.official_rate_micros
            ),
            (Micros(rate.ours), Micros(rate.official)),
            "{} {}",
            rate.label,
            rate.resolution
        );
        // One second (or one clip) of the 16:9 frame costs exactly the rate.
        let shortest = if rate.label == "M2" { 4 } else { 10 };
        let price = quote(
            endpoint,
            &with(&body, "duration", json!(shortest)),
            &no_media(),
        );
        let seconds = if rate.label == "M2" { 1 } else { shortest };
        assert_eq!(
            price.breakdown.unrounded_amount_micros,
            Micros(rate.ours * seconds),
            "{}",
            rate.label
        );
        assert_eq!(
            price.breakdown.unrounded_official_micros,
            Micros(rate.official * seconds),
            "{}",
            rate.label
        );
    }
}

#[test]
fn price_is_linear_in_seconds_except_m2_which_bills_per_clip() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, endpoint) in every_endpoint(&catalog) {
        for body in settings(&model, endpoint.mode) {
            let all = durations(&model, endpoint.mode);
            let longest = *all.last().unwrap();
            let reference = quote(
                endpoint,
                &with(&body, "duration", json!(longest)),
                &no_media(),
            );
            for &seconds in &all {
                let price = quote(
                    endpoint,
                    &with(&body, "duration", json!(seconds)),
                    &no_media(),
                );
                if model.label == "M2" {
                    assert_eq!(
                        price,
                        Price {
                            breakdown: price.breakdown.clone(),
                            ..reference.clone()
                        }
                    );
                    assert_eq!(price.breakdown.unit, PriceUnit::Clip);
                } else {
                    // The unrounded amounts are proportional up to flooring
                    // to the micro-dollar; the charged amounts up to a cent.
                    let scaled = reference.breakdown.unrounded_amount_micros.0 * seconds / longest;
                    let difference = (price.breakdown.unrounded_amount_micros.0 - scaled).abs();
                    assert!(
                        difference <= 1,
                        "{} {body} {seconds}s: {difference}",
                        endpoint.id()
                    );
                    let rounding =
                        (price.amount.0 - price.breakdown.unrounded_amount_micros.0).abs();
                    assert!(rounding <= 5_000, "{} {body} {seconds}s", endpoint.id());
                    assert_eq!(price.breakdown.output_seconds, seconds as u32);
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 500, "only {checked} prices were checked");
}

#[test]
fn duration_and_resolution_change_the_price_where_accepted() {
    let catalog = Catalog::embedded();
    for (model, endpoint) in every_endpoint(&catalog) {
        for body in settings(&model, endpoint.mode) {
            let all = durations(&model, endpoint.mode);
            let amounts: Vec<Micros> = all
                .iter()
                .map(|seconds| {
                    quote(
                        endpoint,
                        &with(&body, "duration", json!(seconds)),
                        &no_media(),
                    )
                    .amount
                })
                .collect();
            let increasing = amounts.windows(2).all(|pair| pair[0] < pair[1]);
            assert_eq!(
                increasing,
                model.label != "M2",
                "{} {body}: {amounts:?}",
                endpoint.id()
            );
        }
        let resolutions = choices(&model, endpoint.mode, "resolution");
        if resolutions.len() > 1 {
            let amounts: Vec<Micros> = resolutions
                .iter()
                .map(|resolution| {
                    quote(endpoint, &json!({"resolution": resolution}), &no_media()).amount
                })
                .collect();
            assert!(
                amounts.windows(2).all(|pair| pair[0] < pair[1]),
                "{}: {amounts:?}",
                endpoint.id()
            );
        }
    }
}

#[test]
fn only_m6_charges_for_audio() {
    let catalog = Catalog::embedded();
    for (model, endpoint) in every_endpoint(&catalog) {
        if endpoint.parameter("generate_audio").is_none() {
            continue;
        }
        for body in settings(&model, endpoint.mode) {
            let silent = quote(
                endpoint,
                &with(&body, "generate_audio", json!(false)),
                &no_media(),
            );
            let audible = quote(
                endpoint,
                &with(&body, "generate_audio", json!(true)),
                &no_media(),
            );
            if model.label == "M6" {
                assert!(
                    audible.amount > silent.amount && audible.official > silent.official,
                    "{} {body}",
                    endpoint.id()
                );
            } else {
                assert_eq!(
                    (audible.amount, audible.official),
                    (silent.amount, silent.official),
                    "{} {body}",
                    endpoint.id()
                );
            }
        }
    }
}

#[test]
fn m4_aspect_ratio_moves_the_price_by_less_than_three_percent() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, endpoint) in every_endpoint(&catalog)
        .into_iter()
        .filter(|(model, _)| model.label == "M4")
    {
        for resolution in choices(&model, endpoint.mode, "resolution") {
            for seconds in durations(&model, endpoint.mode) {
                let body = json!({"resolution": resolution, "duration": seconds});
                let base = quote(
                    endpoint,
                    &with(&body, "aspect_ratio", json!("16:9")),
                    &no_media(),
                );
                for aspect_ratio in choices(&model, endpoint.mode, "aspect_ratio") {
                    let price = quote(
                        endpoint,
                        &with(&body, "aspect_ratio", aspect_ratio.clone()),
                        &no_media(),
                    );
                    let ratio = price.breakdown.unrounded_amount_micros.0 as f64
                        / base.breakdown.unrounded_amount_micros.0 as f64;
                    assert!(
                        (ratio - 1.0).abs() < 0.03,
                        "{} {body} {aspect_ratio}: {ratio}",
                        endpoint.id()
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100);
    // Other per-second models scale with the frame area instead.
    let m1 = catalog.endpoint("vendor_1/model_1/text-to-video").unwrap();
    let square = quote(
        m1,
        &json!({"aspect_ratio": "1:1", "duration": 10}),
        &no_media(),
    );
    assert_eq!(square.breakdown.unrounded_amount_micros, Micros(562_500));
}

/// Parameters the spec marks as not price-affecting never change the price;
/// every accepted value of each is tried against the minimal body.
#[test]
fn parameters_that_do_not_affect_price_never_change_it() {
    let catalog = Catalog::embedded();
    let mut checked = 0;
    for (model, endpoint) in every_endpoint(&catalog) {
        let mode = endpoint.mode;
        let base_body = json!({"reference_image_urls": [IMAGE]});
        let base_body = if endpoint.parameter("reference_image_urls").is_some() {
            base_body
        } else {
            json!({})
        };
        let base = quote(endpoint, &base_body, &no_media());
        for param in model.params_in(mode).filter(|param| !param.price_affecting) {
            for (value, _) in accepted_values(param) {
                let price = quote(
                    endpoint,
                    &with(&base_body, param.name, value.clone()),
                    &no_media(),
                );
                assert_eq!(
                    (price.amount, price.official),
                    (base.amount, base.official),
                    "{} {}={value}",
                    endpoint.id(),
                    param.name
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 150, "only {checked} prices were checked");
    // The brief's list, spelled out on M1 with every such field at once.
    let m1 = catalog
        .endpoint("vendor_1/model_1/reference-to-video")
        .unwrap();
    let everything = json!({
        "prompt": "@Image1 and @Audio1, slow dolly shot",
        "seed": 7,
        "webhook_url": "https://hooks.example.com/x",
        "negative_prompt": "blur",
        "reference_image_urls": [IMAGE, IMAGE],
        "reference_audio_urls": [AUDIO],
    });
    assert_eq!(
        quote(m1, &everything, &no_media()).amount,
        quote(m1, &json!({}), &no_media()).amount
    );
}

#[test]
fn m1_and_m5_bill_reference_seconds_at_the_output_rate() {
    let catalog = Catalog::embedded();
    for (model, endpoint) in every_endpoint(&catalog) {
        if !["M1", "M5"].contains(&model.label) || endpoint.mode != R2V {
            continue;
        }
        for body in settings(&model, endpoint.mode) {
            // 5 output seconds plus 2.5 + 2.5 reference seconds cost what 10
            // output seconds cost.
            let with_references = quote(
                endpoint,
                &with(
                    &with(&body, "duration", json!(5)),
                    "reference_video_urls",
                    json!([VIDEO, VIDEO]),
                ),
                &videos(&[2500, 2500]),
            );
            let longer = quote(endpoint, &with(&body, "duration", json!(10)), &no_media());
            assert_eq!(
                (with_references.amount, with_references.official),
                (longer.amount, longer.official),
                "{} {body}",
                endpoint.id()
            );
            assert_eq!(with_references.breakdown.reference_video_milliseconds, 5000);
            assert_eq!(with_references.breakdown.billed_milliseconds, Some(10_000));
        }
        // Durations without reference videos in the request are not billed.
        let stray = quote(endpoint, &json!({}), &videos(&[5000]));
        assert_eq!(
            stray.amount,
            quote(endpoint, &json!({}), &no_media()).amount
        );
    }
}

#[test]
fn m4_reference_videos_switch_to_the_lower_token_rate_and_count_their_seconds() {
    let catalog = Catalog::embedded();
    let m4 = catalog
        .endpoint("vendor_4/model_4/reference-to-video")
        .unwrap();
    for resolution in ["480p", "720p", "1080p", "4k"] {
        for aspect_ratio in ["16:9", "9:16", "1:1", "4:3", "3:4", "21:9"] {
            let body =
                json!({"resolution": resolution, "aspect_ratio": aspect_ratio, "duration": 6});
            let plain = quote(m4, &body, &no_media());
            let given = with(&body, "reference_video_urls", json!([VIDEO, VIDEO]));
            let unprobed = quote(m4, &given, &no_media());
            let probed = quote(m4, &given, &videos(&[4000, 2000]));
            let tokens = plain.breakdown.tokens.unwrap();
            // Same tokens at 1.40 instead of 2.00 per million.
            assert_eq!(unprobed.breakdown.tokens, Some(tokens));
            assert_eq!(
                unprobed.breakdown.unrounded_amount_micros.0,
                plain.breakdown.unrounded_amount_micros.0 * 7 / 10
            );
            // Six reference seconds double the tokens of six output seconds.
            assert_eq!(probed.breakdown.tokens, Some(2 * tokens));
            assert!(probed.amount > unprobed.amount);
            assert!(unprobed.amount <= plain.amount);
            // Reference images and audio do not switch the rate.
            let images = quote(
                m4,
                &with(&body, "reference_image_urls", json!([IMAGE])),
                &videos(&[4000]),
            );
            assert_eq!(images.amount, plain.amount, "{resolution} {aspect_ratio}");
        }
    }
}

#[test]
fn official_price_is_never_below_ours() {
    let catalog = Catalog::embedded();
    for (model, endpoint) in every_endpoint(&catalog) {
        for body in settings(&model, endpoint.mode) {
            for seconds in durations(&model, endpoint.mode) {
                let price = quote(
                    endpoint,
                    &with(&body, "duration", json!(seconds)),
                    &no_media(),
                );
                assert!(
                    price.official >= price.amount,
                    "{} {body} {seconds}",
                    endpoint.id()
                );
                assert!(price.amount > Micros::ZERO);
                assert_eq!(price.amount, price.amount.round_to_cent());
                assert_eq!(price.official, price.official.round_to_cent());
            }
        }
    }
}

#[test]
fn absurd_reference_durations_saturate_instead_of_overflowing() {
    let catalog = Catalog::embedded();
    for endpoint_id in [
        "vendor_1/model_1/reference-to-video",
        "vendor_4/model_4/reference-to-video",
    ] {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        let price = quote(
            endpoint,
            &json!({"reference_video_urls": [VIDEO, VIDEO]}),
            &videos(&[u64::MAX, u64::MAX]),
        );
        assert!(
            price.amount > Micros::ZERO && price.official >= price.amount,
            "{endpoint_id}"
        );
    }
}
