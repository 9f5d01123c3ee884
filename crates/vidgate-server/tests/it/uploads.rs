//! Multipart uploads: the type is decided by content, the URL serves the
//! file and works in requests, and only the uploading account may use it.

use crate::common;

use common::*;
use image::{Rgb, RgbImage};
use reqwest::StatusCode;
use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};

async fn upload(
    app: &TestApp,
    key: &str,
    field: &str,
    bytes: Vec<u8>,
    claimed_type: &str,
) -> reqwest::Response {
    let part = Part::bytes(bytes)
        .file_name("upload.bin")
        .mime_str(claimed_type)
        .unwrap();
    app.client
        .post(app.url("/uploads"))
        .bearer_auth(key)
        .multipart(Form::new().part(field.to_owned(), part))
        .send()
        .await
        .unwrap()
}

/// Uploads a small PNG in the `file` field with its true type.
async fn upload_a_png(app: &TestApp, key: &str) -> reqwest::Response {
    upload(app, key, "file", common::png([200, 40, 40]), "image/png").await
}

async fn an_uploaded_image_is_probed_served_and_usable(store: StoreKind) {
    let app = spawn_app(store).await;
    let image = common::png([200, 40, 40]);
    // The client's claimed type is ignored: the content decides.
    let response = upload(
        &app,
        app.key(),
        "file",
        image.clone(),
        "application/octet-stream",
    )
    .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let record: Value = response.json().await.unwrap();
    assert!(record["id"].as_str().unwrap().starts_with("upl_"));
    assert_eq!(record["object"], "upload");
    assert_eq!(record["content_type"], "image/png");
    assert_eq!(record["size_bytes"], image.len());
    assert_eq!(
        record["media"],
        json!({ "format": "png", "width": 320, "height": 240 })
    );
    let url = record["url"].as_str().unwrap();
    let served = app.client.get(url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.bytes().await.unwrap().as_ref(), image.as_slice());

    app.run_to_success(
        "vendor_1/model_1/image-to-video",
        json!({ "prompt": "the red card", "image_url": url, "duration": 2, "resolution": "480p", "generate_audio": false }),
    )
    .await;

    // Another account cannot use the upload in its requests.
    let other = app.new_account(10).await;
    let refused = app
        .post_json(
            "/run/vendor_1/model_1/image-to-video",
            &other.api_key,
            &json!({ "prompt": "borrowed", "image_url": url }),
        )
        .await;
    assert_invalid_request(refused, "image_url").await;
    assert_eq!(app.account_state(&other.account.id).await.held.0, 0);
}

/// A file larger than the JSON body limit of the other routes (256 KiB) is
/// taken: the uploads route's own limit overrides it.
async fn an_upload_larger_than_a_json_body_is_taken(store: StoreKind) {
    let app = spawn_app(store).await;
    // Noise does not compress, so the PNG stays near its 480 KB of pixels.
    let mut state: u32 = 12345;
    let noise = RgbImage::from_fn(400, 400, |_, _| {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let [red, green, blue, _] = state.to_le_bytes();
        Rgb([red, green, blue])
    });
    let mut image = std::io::Cursor::new(Vec::new());
    noise.write_to(&mut image, image::ImageFormat::Png).unwrap();
    let image = image.into_inner();
    assert!(image.len() > 256 * 1024, "{} bytes", image.len());
    let response = upload(&app, app.key(), "file", image.clone(), "image/png").await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let record: Value = response.json().await.unwrap();
    assert_eq!(record["size_bytes"], image.len());
}

async fn unsupported_or_missing_files_are_refused(store: StoreKind) {
    let app = spawn_app(store).await;
    let text = upload(
        &app,
        app.key(),
        "file",
        b"just some text, not media".to_vec(),
        "image/png",
    )
    .await;
    assert_invalid_request(text, "file").await;
    let wrong_field = upload(
        &app,
        app.key(),
        "picture",
        common::png([200, 40, 40]),
        "image/png",
    )
    .await;
    assert_invalid_request(wrong_field, "file").await;
    let not_multipart = app
        .post_json("/uploads", app.key(), &json!({ "file": "x" }))
        .await;
    assert_invalid_request(not_multipart, "file").await;
    let no_key = app.post_without_key("/uploads").await;
    assert_error(no_key, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
}

/// Issue 16, item 6: the ownership check used to compare the raw string,
/// so another spelling of the same URL let another account use the upload.
async fn no_spelling_of_an_upload_url_lets_another_account_use_it(store: StoreKind) {
    let app = spawn_app(store).await;
    let response = upload_a_png(&app, app.key()).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let record: Value = response.json().await.unwrap();
    let url = record["url"].as_str().unwrap().to_owned();
    let (origin, path) = url.split_at(url.find("/api/v1/").unwrap());
    let relative = path.strip_prefix("/api/v1/files/").unwrap();
    let other = app.new_account(10).await;
    for spelling in [
        url.replacen("http://", "HTTP://", 1),
        url.replacen("/files/", "/files/./", 1),
        url.replacen("/files/", "/files/outputs/../", 1),
        url.replacen("/files/uploads/", "/files/%75ploads/", 1),
        url.replacen("/files/", "/files/%2e/", 1),
        format!("{url}?copy=1"),
        format!("{url}#t=1"),
        format!("{}/api/v1/files/{relative}", origin.to_uppercase()),
    ] {
        let refused = app
            .post_json(
                "/run/vendor_1/model_1/image-to-video",
                &other.api_key,
                &json!({ "prompt": "borrowed", "image_url": spelling, "duration": 2, "resolution": "480p" }),
            )
            .await;
        assert_invalid_request(refused, "image_url").await;
    }
    assert_eq!(app.account_state(&other.account.id).await.held.0, 0);
    // The owner may use another spelling of its own upload.
    app.submit_ok(
        "vendor_1/model_1/image-to-video",
        json!({ "prompt": "mine", "image_url": url.replacen("http://", "HTTP://", 1), "duration": 2, "resolution": "480p", "generate_audio": false }),
    )
    .await;
}

/// Issue 16, item 2: an account that never had credit cannot use uploads
/// as free storage without bound; one with credit has a far larger quota.
async fn an_account_without_credit_has_a_small_upload_quota(store: StoreKind) {
    let app = spawn_app(store).await;
    let free = app.new_account(0).await;
    for _ in 0..10 {
        let response = upload_a_png(&app, &free.api_key).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    let refused = upload_a_png(&app, &free.api_key).await;
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    for _ in 0..11 {
        let response = upload_a_png(&app, app.key()).await;
        assert_eq!(response.status(), StatusCode::CREATED);
    }
}

on_both_stores!(
    an_upload_larger_than_a_json_body_is_taken,
    an_account_without_credit_has_a_small_upload_quota,
    no_spelling_of_an_upload_url_lets_another_account_use_it,
    an_uploaded_image_is_probed_served_and_usable,
    unsupported_or_missing_files_are_refused,
);
