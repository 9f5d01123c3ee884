//! What the customer asked for is what the provider receives (issue 37),
//! end to end on both stores against the fake providers:
//!
//! - the customer's `@Image1`, `@Video1`, `@Audio1` reach every target that
//!   takes references written as that target names them (fal: as written;
//!   Replicate's Seedance: `[Image1]`; Replicate's Kling omni:
//!   `<<<image_1>>>`), and text that only looks like a mention (an e-mail
//!   address) is left alone;
//! - limits across fields and lengths (`limits` in the backends file) are
//!   refused at submit with 400 naming the parameter, nothing held, or
//!   sent to the provider of a failover model that serves them;
//! - values the providers' first-party schemas serve are served (fal's
//!   Seedance image-to-video at 1080p, Replicate's FLUX 3 at 7 s and from
//!   frames);
//! - no seed is reported that the provider was not sent.

use crate::common;
use crate::fake_providers;
use crate::provider_accepts::{app_with, assert_refused, fast_timeouts};

use serde_json::{Value, json};
use vidgate_server::backend::BackendsConfig;

use common::{StoreKind, TestApp, TestSettings, on_both_stores, spawn_app_with};
use fake_providers::{
    FAL_KEY, FakeProviders, Provider, REPLICATE_TOKEN, backends_file_at_fake, example_backends,
    example_entry, failover_backends_adjusted,
};
use vidgate_core::Catalog;

fn at(fake: &FakeProviders, provider: Provider) -> BackendsConfig {
    example_backends(fake, provider, |model| {
        model["timeouts"] = fast_timeouts();
    })
}

/// Submits `body` to `endpoint`, waits for it to succeed; the generation.
async fn run(app: &TestApp, endpoint: &str, body: Value) -> Value {
    let generation = app.submit_ok(endpoint, body).await;
    let done = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "succeeded", "{endpoint}: {done}");
    done
}

/// The input of the one job the fake received at `target`.
fn sent_to(fake: &FakeProviders, provider: Provider, target: &str) -> Value {
    let jobs: Vec<_> = fake
        .jobs_at(provider)
        .into_iter()
        .filter(|job| job.target == target)
        .collect();
    assert_eq!(jobs.len(), 1, "{provider:?} {target}: {jobs:?}");
    jobs[0].input.clone()
}

/// After a refusal: the account holds what it held `before`, and no
/// provider was sent a job.
async fn assert_nothing_held_or_sent(
    app: &TestApp,
    before: &vidgate_server::store::Account,
    fake: &FakeProviders,
) {
    assert_eq!(
        app.account_state(&app.account.account.id).await.held,
        before.held
    );
    assert!(fake.jobs().is_empty(), "nothing sent: {:?}", fake.jobs());
}

const MENTIONS: &str = "@Image1 meets @Image2 (write to a@Image1.com)";

async fn every_target_that_takes_references_receives_them_in_its_own_syntax(store: StoreKind) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
        let fake = FakeProviders::start().await;
        let app = app_with(store.clone(), at(&fake, provider)).await;
        let image = app.upload_png().await["url"].clone();
        let video = app.upload_mp4(2).await["url"].clone();
        let audio = app.upload_wav(2).await["url"].clone();
        let two_images = json!([image, image]);
        // (endpoint, request, target, what the target must receive)
        let mut cases: Vec<(&str, Value, &str, String)> = Vec::new();
        let with_images = |extra: Value| {
            let mut body = json!({ "prompt": MENTIONS, "reference_image_urls": two_images });
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let seedance = json!({
            "prompt": format!("{MENTIONS}, to @Audio1, moving like @Video1"),
            "duration": 4, "reference_image_urls": two_images,
            "reference_video_urls": [video], "reference_audio_urls": [audio] });
        match provider.name {
            "fal" => {
                let unchanged = format!("{MENTIONS}, to @Audio1, moving like @Video1");
                cases.push((
                    "vendor_1/model_1/reference-to-video",
                    with_images(json!({ "duration": 2 })),
                    "alibaba/wan-3.0/reference-to-video",
                    MENTIONS.into(),
                ));
                cases.push((
                    "vendor_5/model_5/reference-to-video",
                    with_images(json!({ "duration": 2 })),
                    "alibaba/wan-3.0-prime/reference-to-video",
                    MENTIONS.into(),
                ));
                cases.push((
                    "vendor_4/model_4/reference-to-video",
                    seedance,
                    "bytedance/seedance-2.0/reference-to-video",
                    unchanged,
                ));
                cases.push((
                    "vendor_6/model_6/reference-to-video",
                    with_images(json!({ "duration": 3, "resolution": "720p" })),
                    "fal-ai/kling-video/o3/standard/reference-to-video",
                    MENTIONS.into(),
                ));
                cases.push((
                    "vendor_6/model_6/reference-to-video",
                    with_images(json!({ "duration": 3, "resolution": "1080p" })),
                    "fal-ai/kling-video/o3/pro/reference-to-video",
                    MENTIONS.into(),
                ));
            }
            "replicate" => {
                cases.push((
                    "vendor_4/model_4/reference-to-video",
                    seedance,
                    "bytedance/seedance-2.0",
                    "[Image1] meets [Image2] (write to a@Image1.com), to [Audio1], moving like [Video1]"
                        .into(),
                ));
                cases.push((
                    "vendor_6/model_6/reference-to-video",
                    with_images(json!({ "duration": 3 })),
                    "kwaivgi/kling-v3-omni-video",
                    "<<<image_1>>> meets <<<image_2>>> (write to a@Image1.com)".into(),
                ));
            }
            other => unreachable!("this test runs fal and Replicate, not {other}"),
        }
        for (endpoint, body, target, expected) in cases {
            let done = run(&app, endpoint, body).await;
            let jobs: Vec<_> = fake
                .jobs_at(provider)
                .into_iter()
                .filter(|job| job.target == target)
                .collect();
            let job = jobs.last().unwrap();
            assert_eq!(
                job.input["prompt"],
                expected.as_str(),
                "{provider:?} {target}"
            );
            // The customer's prompt is kept as they wrote it.
            assert!(
                done["input"]["prompt"]
                    .as_str()
                    .unwrap()
                    .starts_with(MENTIONS),
                "{done}"
            );
        }
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

/// A prompt of `length` characters.
fn prompt_of(length: usize) -> String {
    "a kite over the sea. "
        .chars()
        .cycle()
        .take(length)
        .collect()
}

async fn a_limit_across_fields_or_lengths_is_refused_at_a_single_provider_with_nothing_held(
    store: StoreKind,
) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
        let fake = FakeProviders::start().await;
        let app = app_with(store.clone(), at(&fake, provider)).await;
        let before = app.account_state(&app.account.account.id).await;
        // Kling takes at most 2500 characters, at both providers; the
        // catalog sells 5000.
        assert_refused(
            &app,
            "vendor_6/model_6/text-to-video",
            json!({ "prompt": prompt_of(2501), "duration": 3 }),
            "prompt",
            "2501 characters long; at most 2500",
        )
        .await;
        if provider == Provider::FAL {
            // fal's Seedance takes 12 reference files in all.
            let image = app.upload_png().await["url"].clone();
            let video = app.upload_mp4(2).await["url"].clone();
            let audio = app.upload_wav(2).await["url"].clone();
            assert_refused(
                &app,
                "vendor_4/model_4/reference-to-video",
                json!({ "prompt": "a kite", "duration": 4,
                        "reference_image_urls": vec![image; 9],
                        "reference_video_urls": vec![video.clone(); 3],
                        "reference_audio_urls": [audio] }),
                "reference_image_urls",
                "hold 13 items together; at most 12",
            )
            .await;
            // fal's Seedance takes no seed: refused, never dropped.
            assert_refused(
                &app,
                "vendor_4/model_4/text-to-video",
                json!({ "prompt": "a kite", "duration": 4, "seed": 7 }),
                "seed",
                "send the request without it",
            )
            .await;
        }
        let after = app.account_state(&app.account.account.id).await;
        assert_eq!(after.balance, before.balance, "nothing charged");
        assert_eq!(after.held, before.held, "nothing held");
        assert!(fake.jobs().is_empty(), "nothing sent: {:?}", fake.jobs());
        // At the limit, it runs, the prompt whole.
        let done = run(
            &app,
            "vendor_6/model_6/text-to-video",
            json!({ "prompt": prompt_of(2500), "duration": 3 }),
        )
        .await;
        assert_eq!(done["status"], "succeeded");
        let jobs = fake.jobs_at(provider);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].input["prompt"], prompt_of(2500).as_str());
        app.assert_ledger_invariant(&app.account.account.id).await;
    }
}

async fn a_failover_model_sends_a_request_beyond_its_first_providers_limit_to_one_that_serves_it(
    store: StoreKind,
) {
    let fake = FakeProviders::start().await;
    // Kling at fal, then at Replicate, whose limit is taken out here (and
    // the fake's copy of Replicate's schema not enforced) so that one
    // provider serves what the other does not: both take 2500 characters.
    fake.state.switches.lock().unwrap().validate_inputs = false;
    let kling = failover_backends_adjusted(
        &fake,
        "vendor_6/model_6",
        FAL_KEY,
        REPLICATE_TOKEN,
        &fast_timeouts(),
        |provider, entry| {
            if provider == Provider::REPLICATE {
                entry.as_object_mut().unwrap().remove("limits");
            }
        },
    );
    let app = app_with(store.clone(), kling).await;
    let long = run(
        &app,
        "vendor_6/model_6/text-to-video",
        json!({ "prompt": prompt_of(3000), "duration": 3 }),
    )
    .await;
    let short = run(
        &app,
        "vendor_6/model_6/text-to-video",
        json!({ "prompt": prompt_of(100), "duration": 3 }),
    )
    .await;
    assert_eq!(long["status"], "succeeded");
    assert_eq!(short["status"], "succeeded");
    let at_replicate = fake.jobs_at(Provider::REPLICATE);
    assert_eq!(at_replicate.len(), 1, "{at_replicate:?}");
    assert_eq!(
        at_replicate[0].input["prompt"],
        prompt_of(3000).as_str(),
        "never cut"
    );
    let at_fal = fake.jobs_at(Provider::FAL);
    assert_eq!(at_fal.len(), 1, "{at_fal:?}");
    assert_eq!(at_fal[0].input["prompt"], prompt_of(100).as_str());
    // With the limit at both, nothing serves it: 400, nothing held.
    let fake = FakeProviders::start().await;
    let both = failover_backends_adjusted(
        &fake,
        "vendor_6/model_6",
        FAL_KEY,
        REPLICATE_TOKEN,
        &fast_timeouts(),
        |_, _| {},
    );
    let app = app_with(store.clone(), both).await;
    let before = app.account_state(&app.account.account.id).await;
    assert_refused(
        &app,
        "vendor_6/model_6/text-to-video",
        json!({ "prompt": prompt_of(3000), "duration": 3 }),
        "prompt",
        "at most 2500",
    )
    .await;
    assert_nothing_held_or_sent(&app, &before, &fake).await;

    // Seedance: 13 reference files go to Replicate, which takes 9 + 3 + 3;
    // a seed goes there too, as fal takes none.
    let fake = FakeProviders::start().await;
    let seedance = failover_backends_adjusted(
        &fake,
        "vendor_4/model_4",
        FAL_KEY,
        REPLICATE_TOKEN,
        &fast_timeouts(),
        |_, _| {},
    );
    let app = app_with(store, seedance).await;
    let image = app.upload_png().await["url"].clone();
    let video = app.upload_mp4(2).await["url"].clone();
    let audio = app.upload_wav(2).await["url"].clone();
    let thirteen = run(
        &app,
        "vendor_4/model_4/reference-to-video",
        json!({ "prompt": "@Image9 and @Video3", "duration": 4,
                "reference_image_urls": vec![image.clone(); 9],
                "reference_video_urls": vec![video.clone(); 3],
                "reference_audio_urls": [audio] }),
    )
    .await;
    let seeded = run(
        &app,
        "vendor_4/model_4/text-to-video",
        json!({ "prompt": "a kite", "duration": 4, "seed": 7 }),
    )
    .await;
    let twelve = run(
        &app,
        "vendor_4/model_4/reference-to-video",
        json!({ "prompt": "@Image9 and @Video3", "duration": 4,
                "reference_image_urls": vec![image; 9],
                "reference_video_urls": vec![video; 3] }),
    )
    .await;
    for done in [&thirteen, &seeded, &twelve] {
        assert_eq!(done["status"], "succeeded");
    }
    let at_replicate = fake.jobs_at(Provider::REPLICATE);
    assert_eq!(at_replicate.len(), 2, "{at_replicate:?}");
    assert!(
        at_replicate
            .iter()
            .any(|job| job.input["prompt"] == "[Image9] and [Video3]"
                && job.input["reference_images"].as_array().unwrap().len() == 9
                && job.input["reference_audios"].as_array().unwrap().len() == 1),
        "{at_replicate:?}"
    );
    assert!(
        at_replicate.iter().any(|job| job.input["seed"] == 7),
        "{at_replicate:?}"
    );
    assert_eq!(seeded["output"]["seed"], 7, "{seeded}");
    let at_fal = fake.jobs_at(Provider::FAL);
    assert_eq!(at_fal.len(), 1, "{at_fal:?}");
    assert_eq!(at_fal[0].input["prompt"], "@Image9 and @Video3");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn what_the_first_party_schemas_serve_is_served(store: StoreKind) {
    // fal's Seedance 2.0 image-to-video (standard tier) serves 1080p.
    let fake = FakeProviders::start().await;
    let app = app_with(store.clone(), at(&fake, Provider::FAL)).await;
    let image = app.upload_png().await["url"].clone();
    let done = run(
        &app,
        "vendor_4/model_4/image-to-video",
        json!({ "prompt": "a kite", "duration": 4, "resolution": "1080p", "image_url": image }),
    )
    .await;
    let sent = sent_to(
        &fake,
        Provider::FAL,
        "bytedance/seedance-2.0/image-to-video",
    );
    assert_eq!(sent["resolution"], "1080p");
    // fal's Seedance takes no seed: none is sent, none is claimed.
    assert!(sent.get("seed").is_none(), "{sent}");
    assert!(done["output"].get("seed").is_none(), "{done}");

    // Replicate's FLUX 3: any whole number of seconds from 5 to 20, and
    // image-to-video with the opening and closing frames in `images`.
    let fake = FakeProviders::start().await;
    let app = app_with(store, at(&fake, Provider::REPLICATE)).await;
    run(
        &app,
        "vendor_3/model_3/text-to-video",
        json!({ "prompt": "a kite", "duration": 7 }),
    )
    .await;
    let (opening_color, closing_color) = ([200, 30, 30], [30, 30, 200]);
    let opening = app.upload_png_of(opening_color).await["url"].clone();
    let closing = app.upload_png_of(closing_color).await["url"].clone();
    run(
        &app,
        "vendor_3/model_3/image-to-video",
        json!({ "prompt": "a kite", "duration": 5, "image_url": opening,
                "end_image_url": closing }),
    )
    .await;
    let jobs = fake.jobs_at(Provider::REPLICATE);
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert_eq!(jobs[0].input["duration"], 7);
    let frames = jobs[1].input["images"].as_array().unwrap();
    assert_eq!(frames.len(), 2, "{jobs:?}");
    // The opening frame first, the closing frame second: vidgate's own
    // copies, named by their bytes' SHA-256.
    for (frame, color) in frames.iter().zip([opening_color, closing_color]) {
        let digest = fake_providers::hex_digest(&common::png_of(color));
        assert!(frame.as_str().unwrap().contains(&digest), "{frame}");
    }
    app.assert_ledger_invariant(&app.account.account.id).await;
}

/// The embedded catalog, selling more than it does: M2 at 1080p too, and
/// M6 reference-to-video with one reference video, so that the limits
/// the embedded catalog cannot reach (Replicate's Veo 3.1 Lite needs 8 s at
/// 1080p; Kling omni's sound is "mutually exclusive with reference video")
/// can be shown to hold.
fn catalog_selling_more() -> Catalog {
    let mut file: Value =
        serde_json::from_str(include_str!("../../../vidgate-core/catalog.json")).unwrap();
    for model in file["models"].as_array_mut().unwrap() {
        match model["id"].as_str().unwrap() {
            "vendor_2/model_2" => {
                for parameter in model["parameters"].as_array_mut().unwrap() {
                    if parameter["name"] == "resolution" {
                        parameter["enum"] = json!(["720p", "1080p"]);
                    }
                }
                let frames = model["frames"].as_array_mut().unwrap();
                frames.push(json!({ "resolution": "1080p", "aspect_ratio": "16:9",
                                    "width": 1920, "height": 1080 }));
                frames.push(json!({ "resolution": "1080p", "aspect_ratio": "9:16",
                                    "width": 1080, "height": 1920 }));
            }
            "vendor_6/model_6" => {
                model["parameters"].as_array_mut().unwrap().push(json!({
                    "name": "reference_video_urls", "type": "uri-array",
                    "modes": ["reference-to-video"], "max_items": 1,
                    "description": "A reference video.",
                    "media": { "kind": "video", "formats": ["mp4", "mov"],
                               "min_seconds": 3, "max_seconds": 10, "max_total_seconds": 10 } }));
            }
            _ => {}
        }
    }
    Catalog::from_json(&file.to_string()).expect("the wider catalog is consistent")
}

async fn app_selling_more(store: StoreKind, backends: BackendsConfig) -> TestApp {
    let mut settings = TestSettings::new(store);
    settings.backends = backends;
    settings.workers = 2;
    settings.catalog = catalog_selling_more();
    spawn_app_with(settings).await
}

/// The example entry of `model` at `provider`, with fast timeouts.
fn entry(provider: Provider, model: &str) -> Value {
    let mut entry = example_entry(provider, model);
    entry["timeouts"] = fast_timeouts();
    entry
}

/// M6 at Replicate as the example file has it, its reference-to-video
/// sending the catalog's reference video as Kling omni's.
fn kling_with_a_reference_video() -> Value {
    let mut kling = entry(Provider::REPLICATE, "vendor_6/model_6");
    let mode = &mut kling["modes"]["reference-to-video"];
    mode["fields"]["reference_video_urls"] =
        json!({ "to": "reference_video", "transform": "first" });
    mode["limits"] = json!([{ "parameter": "generate_audio", "accepts": [false],
        "when_given": ["reference_video_urls"] }]);
    kling
}

async fn limits_a_catalog_selling_more_would_reach_are_refused_or_routed(store: StoreKind) {
    let catalog = catalog_selling_more();
    // Replicate's Veo 3.1 Lite alone: 1080p at 6 s is refused, at 8 s sent.
    let fake = FakeProviders::start().await;
    let veo =
        json!({ "models": { "vendor_2/model_2": entry(Provider::REPLICATE, "vendor_2/model_2") } });
    let app = app_selling_more(store.clone(), backends_file_at_fake(&fake, veo, &catalog)).await;
    let before = app.account_state(&app.account.account.id).await;
    assert_refused(
        &app,
        "vendor_2/model_2/text-to-video",
        json!({ "prompt": "a kite", "duration": 6, "resolution": "1080p" }),
        "duration",
        "duration 6 is not available with resolution 1080p",
    )
    .await;
    assert_nothing_held_or_sent(&app, &before, &fake).await;
    run(
        &app,
        "vendor_2/model_2/text-to-video",
        json!({ "prompt": "a kite", "duration": 8, "resolution": "1080p" }),
    )
    .await;
    let sent = sent_to(&fake, Provider::REPLICATE, "google/veo-3.1-lite");
    assert_eq!(
        (sent["duration"].clone(), sent["resolution"].clone()),
        (json!(8), json!("1080p"))
    );

    // Replicate first, then fal, whose Veo takes 1080p at any length: the
    // 6 s clip goes to fal, never shortened nor lowered.
    let fake = FakeProviders::start().await;
    let mut replicate_first = entry(Provider::REPLICATE, "vendor_2/model_2");
    replicate_first["backend"] = json!("replicate");
    let failover = json!({ "models": { "vendor_2/model_2": { "backend": "failover",
        "providers": [replicate_first, entry(Provider::FAL, "vendor_2/model_2")] } } });
    let app = app_selling_more(
        store.clone(),
        backends_file_at_fake(&fake, failover, &catalog),
    )
    .await;
    run(
        &app,
        "vendor_2/model_2/text-to-video",
        json!({ "prompt": "a kite", "duration": 6, "resolution": "1080p" }),
    )
    .await;
    let at_fal = sent_to(&fake, Provider::FAL, "fal-ai/veo3.1/lite");
    assert_eq!(
        (at_fal["duration"].clone(), at_fal["resolution"].clone()),
        (json!("6s"), json!("1080p"))
    );
    assert!(fake.jobs_at(Provider::REPLICATE).is_empty());

    // Kling omni takes no sound with a reference video: refused naming
    // generate_audio; without sound it is sent, the video named as omni
    // names it.
    let fake = FakeProviders::start().await;
    let kling = json!({ "models": { "vendor_6/model_6": kling_with_a_reference_video() } });
    let app = app_selling_more(store.clone(), backends_file_at_fake(&fake, kling, &catalog)).await;
    let image = app.upload_png().await["url"].clone();
    let video = app.upload_mp4(3).await["url"].clone();
    let before = app.account_state(&app.account.account.id).await;
    let with_video = |generate_audio: bool| {
        json!({ "prompt": "@Image1 walks like @Video1", "duration": 3,
                "reference_image_urls": [image], "reference_video_urls": [video],
                "generate_audio": generate_audio })
    };
    assert_refused(
        &app,
        "vendor_6/model_6/reference-to-video",
        with_video(true),
        "generate_audio",
        "generate_audio true is not available with reference_video_urls",
    )
    .await;
    assert_nothing_held_or_sent(&app, &before, &fake).await;
    run(
        &app,
        "vendor_6/model_6/reference-to-video",
        with_video(false),
    )
    .await;
    let sent = sent_to(&fake, Provider::REPLICATE, "kwaivgi/kling-v3-omni-video");
    assert_eq!(sent["prompt"], "<<<image_1>>> walks like <<<video_1>>>");
    assert_eq!(sent["generate_audio"], false);
    assert!(sent["reference_video"].is_string(), "{sent}");

    // With fal behind it, which has no field for a reference video at all:
    // nothing serves sound with a video, and the refusal names the
    // parameter of the first provider's limit; sound without a video runs.
    let fake = FakeProviders::start().await;
    let mut fal = entry(Provider::FAL, "vendor_6/model_6");
    fal["modes"]["reference-to-video"]["fields"]["reference_video_urls"] = Value::Null;
    fal["modes"]["reference-to-video"]["accepts"]["reference_video_urls"] = json!([]);
    let failover = json!({ "models": { "vendor_6/model_6": { "backend": "failover",
        "providers": [kling_with_a_reference_video(), fal] } } });
    let app = app_selling_more(store, backends_file_at_fake(&fake, failover, &catalog)).await;
    let image = app.upload_png().await["url"].clone();
    let video = app.upload_mp4(3).await["url"].clone();
    assert_refused(
        &app,
        "vendor_6/model_6/reference-to-video",
        json!({ "prompt": "@Image1 walks like @Video1", "duration": 3,
                "reference_image_urls": [image], "reference_video_urls": [video],
                "generate_audio": true }),
        "generate_audio",
        "not available with reference_video_urls",
    )
    .await;
    assert!(fake.jobs().is_empty());
    run(
        &app,
        "vendor_6/model_6/reference-to-video",
        json!({ "prompt": "@Image1 sings", "duration": 3, "reference_image_urls": [image],
                "generate_audio": true }),
    )
    .await;
    assert_eq!(
        sent_to(&fake, Provider::REPLICATE, "kwaivgi/kling-v3-omni-video")["prompt"],
        "<<<image_1>>> sings"
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
}

on_both_stores!(
    limits_a_catalog_selling_more_would_reach_are_refused_or_routed,
    every_target_that_takes_references_receives_them_in_its_own_syntax,
    a_limit_across_fields_or_lengths_is_refused_at_a_single_provider_with_nothing_held,
    a_failover_model_sends_a_request_beyond_its_first_providers_limit_to_one_that_serves_it,
    what_the_first_party_schemas_serve_is_served,
);
