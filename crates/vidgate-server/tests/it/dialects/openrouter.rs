//! OpenRouter's video API at `/api/v1/videos`: over plain HTTP, and driven
//! by OpenRouter's own TypeScript SDK (`tests/openrouter_client/drive.mjs`).

use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;

use super::{DROPIN_NODE, api_generation};
use crate::common::{StoreKind, on_both_stores, spawn_app};

on_both_stores!(
    openrouter_create_poll_content_and_models_over_http,
    openrouter_errors_are_openrouter_error_objects,
    the_openrouter_sdk_drives_api_v1_videos,
);

const MODEL: &str = "vendor_1/model_1";

/// Every key of OpenRouter's `VideoModel` the SDK requires (null allowed),
/// from `esm/models/videomodel.js` of @openrouter/sdk 1.3.19.
const VIDEO_MODEL_KEYS: [&str; 14] = [
    "allowed_passthrough_parameters",
    "canonical_slug",
    "created",
    "creativity",
    "generate_audio",
    "id",
    "name",
    "seed",
    "supported_aspect_ratios",
    "supported_durations",
    "supported_frame_images",
    "supported_resolutions",
    "supported_sizes",
    "upscale_factor",
];

async fn openrouter_create_poll_content_and_models_over_http(store: StoreKind) {
    let app = spawn_app(store).await;
    let key = app.key().to_owned();
    let image_url = app.upload_png().await["url"].as_str().unwrap().to_owned();
    let created = app
        .post_json(
            "/videos",
            &key,
            &json!({
                "model": MODEL,
                "prompt": "a kite",
                "duration": 2,
                "size": "480x854",
                "seed": 7,
                "generate_audio": false,
                "callback_url": "https://hooks.example.com/vidgate",
                "provider": { "options": {} },
            }),
        )
        .await;
    assert_eq!(created.status(), StatusCode::ACCEPTED);
    let created: Value = created.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["status"], "pending");
    assert_eq!(created["polling_url"], app.url(&format!("/videos/{id}")));
    let record = api_generation(&app, &key, &id).await;
    assert_eq!(record["source"], "openrouter");
    assert_eq!(record["input"]["duration"], 2);
    assert_eq!(record["input"]["resolution"], "480p");
    assert_eq!(record["input"]["aspect_ratio"], "9:16");
    assert_eq!(record["input"]["seed"], 7);
    assert_eq!(
        record["input"]["webhook_url"],
        "https://hooks.example.com/vidgate"
    );

    let from_image = app
        .post_json(
            "/videos",
            &key,
            &json!({
                "model": MODEL,
                "prompt": "the card, moving",
                "duration": 2,
                "resolution": "480p",
                "frame_images": [{ "type": "image_url", "image_url": { "url": image_url }, "frame_type": "first_frame" }],
            }),
        )
        .await;
    assert_eq!(from_image.status(), StatusCode::ACCEPTED);
    let from_image: Value = from_image.json().await.unwrap();
    let from_image_id = from_image["id"].as_str().unwrap();
    let record = api_generation(&app, &key, from_image_id).await;
    assert_eq!(record["mode"], "image-to-video");
    assert_eq!(record["input"]["image_url"], image_url.as_str());

    let finished = app.wait_for_status(&id, &["succeeded"]).await;
    let job = app.get_json(&format!("/videos/{id}"), &key).await;
    assert_eq!(job["status"], "completed");
    let price = (finished["cost"]["amount_usd"].as_f64().unwrap() * 1e6).round() as i64;
    assert_eq!(
        Micros((job["usage"]["cost"].as_f64().unwrap() * 1e6).round() as i64),
        Micros(price)
    );
    let content_url = job["unsigned_urls"][0].as_str().unwrap();
    assert_eq!(
        content_url,
        app.url(&format!("/videos/{id}/content?index=0"))
    );
    let content = app
        .client
        .get(content_url)
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(content.status(), StatusCode::OK);
    assert_eq!(content.headers()["content-type"], "video/mp4");
    assert_eq!(&content.bytes().await.unwrap()[4..8], b"ftyp");

    let models = app.get_without_key("/videos/models").await;
    assert_eq!(models.status(), StatusCode::OK);
    let models: Value = models.json().await.unwrap();
    let models = models["data"].as_array().unwrap();
    assert_eq!(models.len(), app.settings.catalog.models().len());
    for model in models {
        for key in VIDEO_MODEL_KEYS {
            assert!(model.get(key).is_some(), "{key} in {model}");
        }
    }
    app.wait_for_status(from_image_id, &["succeeded"]).await;
    app.assert_ledger_invariant(&app.account.account.id).await;
}

async fn openrouter_errors_are_openrouter_error_objects(store: StoreKind) {
    let app = spawn_app(store).await;
    let key = app.key().to_owned();
    for (body, param) in [
        (
            json!({ "model": MODEL, "prompt": "x", "duration": 99 }),
            "duration",
        ),
        (
            json!({ "model": MODEL, "prompt": "x", "callback_url": "ftp://nowhere" }),
            "callback_url",
        ),
        (
            json!({ "model": MODEL, "prompt": "x", "creativity": 3 }),
            "creativity",
        ),
        (json!({ "model": "openai/sora-2", "prompt": "x" }), "model"),
        (
            json!({ "model": MODEL, "prompt": "x", "size": "1x1" }),
            "size",
        ),
        (
            json!({ "model": MODEL, "prompt": "x", "frame_images": [], "input_references": [] }),
            "input_references",
        ),
    ] {
        let response = app.post_json("/videos", &key, &body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], 400, "{error}");
        assert_eq!(error["error"]["metadata"]["param"], param, "{error}");
        assert_eq!(
            error["error"]["metadata"]["code"], "invalid_request",
            "{error}"
        );
        assert!(
            error["error"]["message"]
                .as_str()
                .is_some_and(|message| !message.is_empty())
        );
    }
    let unauthenticated = app.get_without_key("/videos/gen_x").await;
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
    let error: Value = unauthenticated.json().await.unwrap();
    assert_eq!(error["error"]["code"], 401, "{error}");
    let missing = app.get("/videos/gen_missing", &key).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let error: Value = missing.json().await.unwrap();
    assert_eq!(error["error"]["code"], 404, "{error}");
}

/// `@openrouter/sdk` (1.3.19, as `tests/openrouter_client/package-lock.json`
/// pins it): `listVideosModels`, `generate`, `getGeneration`,
/// `getVideoContent` and its typed errors. It runs when
/// `VIDGATE_TEST_DROPIN_NODE` names a Node (20 or later) and `npm ci` ran in
/// `tests/openrouter_client` (`.ci/run` does both).
async fn the_openrouter_sdk_drives_api_v1_videos(store: StoreKind) {
    let Some(node) = crate::providers::program_named_by(
        DROPIN_NODE,
        "a Node with `npm ci` run in tests/openrouter_client, to drive /api/v1/videos with OpenRouter's SDK",
    ) else {
        return;
    };
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openrouter_client");
    assert!(
        package.join("node_modules/@openrouter/sdk").is_dir(),
        "run `npm ci` in {}",
        package.display()
    );
    let app = spawn_app(store).await;
    let image_url = app.upload_png().await["url"].as_str().unwrap().to_owned();
    let mut command = std::process::Command::new(node);
    command
        .current_dir(&package)
        .arg("drive.mjs")
        .arg(&app.api_base)
        .arg(app.key())
        .arg(&image_url);
    let (status, printed) = crate::providers::run_program(command, "node runs").await;
    assert!(status.success(), "{printed}");
    for part in [
        "listVideosModels",
        "generate, getGeneration",
        "getVideoContent",
        "frame_images",
        "errors",
    ] {
        assert!(
            printed.contains(&format!("openrouter: {part} ok")),
            "{printed}"
        );
    }
    let ids = printed
        .lines()
        .find_map(|line| line.strip_prefix("ids: "))
        .expect("the script prints its ids");
    for id in ids.split_whitespace() {
        assert_eq!(
            api_generation(&app, app.key(), id).await["source"],
            "openrouter"
        );
    }
    app.assert_ledger_invariant(&app.account.account.id).await;
}
