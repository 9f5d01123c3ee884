//! S3-compatible storage against a real S3 API: moto's server
//! (`moto[server]` from PyPI). `VIDGATE_TEST_MOTO_SERVER` names its
//! `moto_server` program (`.ci/run` installs it in `target/s3-venv` and sets
//! the variable, so a failed install fails CI); without it these tests print
//! a notice and pass, like the Cog tests. Each test starts moto on a free
//! port and creates its own bucket.

use crate::common;
use crate::fake_providers;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fake_providers::{FakeProviders, PADDED_OUTPUT_FREE_BYTES, Provider, example_backends};
use image::{Rgb, RgbImage};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT_RANGES, CONTENT_RANGE, CONTENT_TYPE};
use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use vidgate_server::storage::{AmazonS3Builder, ReadError, Storage, StorageConfig};

const PREFIX: &str = "vidgate/media";

/// The `moto_server` program, or `None` (after a notice) to skip.
fn moto_program(test_name: &str) -> Option<PathBuf> {
    match std::env::var_os("VIDGATE_TEST_MOTO_SERVER") {
        // A relative path is taken from the workspace root, as CI exports it.
        Some(program) => Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(program),
        ),
        None => {
            eprintln!("skipping {test_name}: VIDGATE_TEST_MOTO_SERVER is not set");
            None
        }
    }
}

/// A moto S3 server on a free port with one bucket, killed when dropped.
struct Moto {
    process: Child,
    endpoint: String,
    bucket: String,
}

impl Moto {
    async fn start(program: &Path) -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let process = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let moto = Moto {
            process,
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: "vidgate-test".into(),
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        // moto checks no credentials, so a plain PUT creates the bucket.
        loop {
            let created = client
                .put(format!("{}/{}", moto.endpoint, moto.bucket))
                .send()
                .await;
            if let Ok(response) = created {
                assert!(response.status().is_success(), "{}", response.status());
                return moto;
            }
            assert!(Instant::now() < deadline, "moto_server never answered");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn storage(&self) -> StorageConfig {
        StorageConfig::S3 {
            builder: Box::new(
                AmazonS3Builder::new()
                    .with_bucket_name(&self.bucket)
                    .with_endpoint(&self.endpoint)
                    .with_allow_http(true)
                    .with_region("us-east-1")
                    .with_access_key_id("test")
                    .with_secret_access_key("test"),
            ),
            prefix: PREFIX.into(),
        }
    }

    /// The object behind one of vidgate's `/files/` URLs, read from the
    /// bucket directly (not through vidgate's HTTP server).
    async fn object(&self, app: &TestApp, url: &str) -> Option<Vec<u8>> {
        let relative = url
            .strip_prefix(&format!("{}/files/", app.api_base))
            .expect("a /files/ URL");
        let bucket = Storage::open(&self.storage(), app.data_dir.path()).unwrap();
        match bucket.read(relative, u64::MAX).await {
            Ok(bytes) => Some(bytes),
            Err(ReadError::NotFound) => None,
            Err(error) => panic!("the bucket could not be read: {error}"),
        }
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A moto server and an app that keeps its files in its bucket; `None`
/// (the caller skips its test) when no moto server is configured.
async fn moto_and_s3_app(store: StoreKind, test_name: &str) -> Option<(Moto, TestApp)> {
    let program = moto_program(test_name)?;
    let moto = Moto::start(&program).await;
    let app = spawn_app_with(TestSettings {
        storage: moto.storage(),
        ..TestSettings::new(store)
    })
    .await;
    Some((moto, app))
}

/// `POST /uploads/initiate`, asserting the presigned upload's shape.
async fn initiate(app: &TestApp, body: Value) -> Value {
    let response = app.post_json("/uploads/initiate", app.key(), &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let record: Value = response.json().await.unwrap();
    assert!(
        record["id"].as_str().unwrap().starts_with("upl_"),
        "{record}"
    );
    assert_eq!(record["method"], "PUT");
    assert!(record["expires_at"].is_string(), "{record}");
    assert!(
        record["url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}/files/uploads/", app.api_base)),
        "{record}"
    );
    record
}

/// PUTs `bytes` to a presigned upload as a client would, with its headers.
async fn put_presigned(app: &TestApp, record: &Value, bytes: Vec<u8>) {
    let mut request = app
        .client
        .put(record["upload_url"].as_str().unwrap())
        .body(bytes);
    for (name, value) in record["headers"].as_object().unwrap() {
        request = request.header(name, value.as_str().unwrap());
    }
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

fn image_to_video(image_url: &str) -> Value {
    json!({ "prompt": "the blue card", "image_url": image_url, "duration": 2, "resolution": "480p", "generate_audio": false })
}

async fn a_presigned_upload_renders_and_the_clip_is_served_from_the_bucket(store: StoreKind) {
    let Some((moto, app)) = moto_and_s3_app(store, "a_presigned_upload_renders").await else {
        return;
    };
    let image = common::png([40, 120, 200]);
    let record = initiate(
        &app,
        json!({ "content_type": "image/png", "size_bytes": image.len() }),
    )
    .await;
    assert_eq!(record["headers"], json!({ "Content-Type": "image/png" }));
    put_presigned(&app, &record, image.clone()).await;
    let url = record["url"].as_str().unwrap();

    let done = app
        .run_to_success("vendor_1/model_1/image-to-video", image_to_video(url))
        .await;

    // The upload is served back through vidgate with its probed type.
    let served = app.client.get(url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()[CONTENT_TYPE], "image/png");
    assert_eq!(served.bytes().await.unwrap().as_ref(), image.as_slice());

    // The clip is in the bucket, and /files serves it with Range support.
    let video_url = done["output"]["video_url"].as_str().unwrap();
    assert!(video_url.starts_with(&format!("{}/files/outputs/", app.api_base)));
    let clip = moto
        .object(&app, video_url)
        .await
        .expect("the clip is in the bucket");
    assert_eq!(
        clip.len() as u64,
        done["output"]["size_bytes"].as_u64().unwrap()
    );

    let whole = app.client.get(video_url).send().await.unwrap();
    assert_eq!(whole.status(), StatusCode::OK);
    assert_eq!(whole.headers()[CONTENT_TYPE], "video/mp4");
    assert_eq!(whole.headers()[ACCEPT_RANGES], "bytes");
    assert_eq!(whole.bytes().await.unwrap().as_ref(), clip.as_slice());

    let part = app.get_range(video_url, "bytes=100-1099").await;
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        part.headers()[CONTENT_RANGE],
        format!("bytes 100-1099/{}", clip.len()).as_str()
    );
    assert_eq!(part.headers()[CONTENT_TYPE], "video/mp4");
    assert_eq!(part.bytes().await.unwrap().as_ref(), &clip[100..1100]);

    let tail = app.get_range(video_url, "bytes=-10").await;
    assert_eq!(tail.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        tail.bytes().await.unwrap().as_ref(),
        &clip[clip.len() - 10..]
    );

    let beyond = app
        .get_range(video_url, &format!("bytes={}-", clip.len()))
        .await;
    assert_eq!(beyond.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        beyond.headers()[CONTENT_RANGE],
        format!("bytes */{}", clip.len()).as_str()
    );

    let missing = app
        .get_without_key("/files/outputs/nothing/gen_none.mp4")
        .await;
    assert_error(missing, StatusCode::NOT_FOUND, "not_found", None).await;

    // Another account cannot use the upload in its requests.
    let other = app.new_account(10).await;
    let refused = app
        .post_json(
            "/run/vendor_1/model_1/image-to-video",
            &other.api_key,
            &image_to_video(url),
        )
        .await;
    assert_invalid_request(refused, "image_url").await;
    assert_eq!(app.account_state(&other.account.id).await.held.0, 0);
}

async fn a_multipart_upload_is_stored_in_the_bucket(store: StoreKind) {
    let Some((moto, app)) =
        moto_and_s3_app(store, "a_multipart_upload_is_stored_in_the_bucket").await
    else {
        return;
    };
    let image = common::png([40, 120, 200]);
    let part = Part::bytes(image.clone()).file_name("card.png");
    let response = app
        .client
        .post(app.url("/uploads"))
        .bearer_auth(app.key())
        .multipart(Form::new().part("file", part))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let record: Value = response.json().await.unwrap();
    assert_eq!(record["content_type"], "image/png");
    let url = record["url"].as_str().unwrap();

    assert_eq!(moto.object(&app, url).await, Some(image.clone()));
    // Nothing is left on local disk: the scratch file was removed.
    let incoming = app.data_dir.path().join("incoming");
    assert_eq!(std::fs::read_dir(incoming).unwrap().count(), 0);

    let served = app.client.get(url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()[CONTENT_TYPE], "image/png");
    assert_eq!(served.bytes().await.unwrap().as_ref(), image.as_slice());

    app.run_to_success("vendor_1/model_1/image-to-video", image_to_video(url))
        .await;
}

async fn a_hosted_providers_output_is_streamed_into_the_bucket(store: StoreKind) {
    let Some(program) = moto_program("a_hosted_providers_output_is_streamed_into_the_bucket")
    else {
        return;
    };
    let moto = Moto::start(&program).await;
    let fake = FakeProviders::start().await;
    let app = spawn_app_with(TestSettings {
        storage: moto.storage(),
        backends: example_backends(&fake, Provider::FAL, |model| {
            model["timeouts"] = json!({ "request_seconds": 5, "start_seconds": 30,
                "job_seconds": 60, "poll_seconds": 0.1, "retry_seconds": 20 });
        }),
        ..TestSettings::new(store)
    })
    .await;
    // Tens of megabytes, so the clip goes to the bucket in several parts.
    let done = app
        .run_to_success(
            "vendor_1/model_1/text-to-video",
            json!({ "prompt": "a kite over the sea [fake:padded-output]", "duration": 2 }),
        )
        .await;
    let job = &fake.jobs_at(Provider::FAL)[0];
    let produced = fake
        .state
        .output(&job.id)
        .expect("the fake produced a clip");
    assert!(produced.len() > PADDED_OUTPUT_FREE_BYTES);
    assert_eq!(done["output"]["size_bytes"], json!(produced.len()));
    assert_eq!(done["output"]["width"], 320);
    let url = done["output"]["video_url"].as_str().unwrap();
    let stored = moto
        .object(&app, url)
        .await
        .expect("the clip is in the bucket");
    assert!(
        stored == produced.as_ref(),
        "the bucket holds the provider's clip"
    );
    let served = app.client.get(url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()[CONTENT_TYPE], "video/mp4");
    // The downloaded file was removed from local disk once in the bucket.
    let incoming = app.data_dir.path().join("incoming");
    assert_eq!(std::fs::read_dir(incoming).unwrap().count(), 0);
}

async fn direct_uploads_are_checked_on_first_use(store: StoreKind) {
    let Some((_moto, app)) =
        moto_and_s3_app(store, "direct_uploads_are_checked_on_first_use").await
    else {
        return;
    };

    // Initiated but never PUT: the request names the field, nothing held.
    let record = initiate(&app, json!({})).await;
    assert_eq!(record["headers"], json!({}));
    let url = record["url"].as_str().unwrap();
    let refused = app
        .submit("vendor_1/model_1/image-to-video", image_to_video(url))
        .await;
    let body = assert_invalid_request(refused, "image_url").await;
    assert_error_message_contains(&body, "has not been uploaded");

    // Not media: refused with the field named; after a real image is PUT
    // to the same URL, the upload works.
    put_presigned(&app, &record, b"plain text, not an image".to_vec()).await;
    let not_media = app
        .submit("vendor_1/model_1/image-to-video", image_to_video(url))
        .await;
    assert_invalid_request(not_media, "image_url").await;
    put_presigned(&app, &record, common::png([40, 120, 200])).await;
    app.submit_ok("vendor_1/model_1/image-to-video", image_to_video(url))
        .await;
    let served = app.client.get(url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()[CONTENT_TYPE], "image/png");

    // A declared type the file does not have is refused on first use.
    let declared_video = initiate(&app, json!({ "content_type": "video/mp4" })).await;
    put_presigned(&app, &declared_video, common::png([40, 120, 200])).await;
    let mismatch = app
        .submit(
            "vendor_1/model_1/image-to-video",
            image_to_video(declared_video["url"].as_str().unwrap()),
        )
        .await;
    assert_invalid_request(mismatch, "image_url").await;

    // Bad initiate bodies name their field.
    for (body, param) in [
        (json!({ "size_bytes": 104_857_601u64 }), Some("size_bytes")),
        (json!({ "size_bytes": 0 }), Some("size_bytes")),
        (json!({ "size_bytes": "12" }), Some("size_bytes")),
        (json!({ "content_type": "text/html" }), Some("content_type")),
        (json!({ "filename": "a.png" }), Some("filename")),
        (json!([1]), None),
    ] {
        let response = app.post_json("/uploads/initiate", app.key(), &body).await;
        assert_error(response, StatusCode::BAD_REQUEST, "invalid_request", param).await;
    }
    let no_key = app.post_without_key("/uploads/initiate").await;
    assert_error(no_key, StatusCode::UNAUTHORIZED, "unauthorized", None).await;
}

fn png_of(colour: [u8; 3]) -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    RgbImage::from_pixel(320, 240, Rgb(colour))
        .write_to(&mut bytes, image::ImageFormat::Png)
        .unwrap();
    bytes.into_inner()
}

/// The clip of `image_to_video` with a fixed seed, prompt and sleep (the
/// job waits before reading its media, so the file can change meanwhile).
async fn render_seeded(
    app: &TestApp,
    image_url: &str,
    after_submit: impl AsyncFnOnce(),
) -> Vec<u8> {
    let mut body = image_to_video(image_url);
    body["prompt"] = json!("[sim:sleep=1500] the card comes alive");
    body["seed"] = json!(7);
    let generation = app.submit_ok("vendor_1/model_1/image-to-video", body).await;
    after_submit().await;
    let finished = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    let clip = app
        .client
        .get(finished["output"]["video_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    clip.bytes().await.unwrap().to_vec()
}

/// Issue 16, item 8: a direct upload PUT again after a request used it
/// changes nothing for that request's job, which renders the bytes it was
/// checked and priced with; the next request uses the new bytes. The
/// presigned URL is short-lived.
async fn a_direct_upload_overwritten_after_its_first_use_does_not_change_the_job(store: StoreKind) {
    let Some((_moto, app)) =
        moto_and_s3_app(store, "a_direct_upload_overwritten_after_its_first_use").await
    else {
        return;
    };
    let red = png_of([220, 30, 30]);
    let blue = png_of([30, 30, 220]);

    // The presigned URL lasts 15 minutes and binds the declared type.
    let declared = initiate(
        &app,
        json!({ "content_type": "image/png", "size_bytes": red.len() }),
    )
    .await;
    assert_eq!(declared["headers"], json!({ "Content-Type": "image/png" }));
    let upload_url = url::Url::parse(declared["upload_url"].as_str().unwrap()).unwrap();
    let query: std::collections::HashMap<_, _> = upload_url.query_pairs().into_owned().collect();
    assert_eq!(query["X-Amz-Expires"], "900", "{upload_url}");
    let signed_headers: Vec<&str> = query["X-Amz-SignedHeaders"].split(';').collect();
    assert!(
        signed_headers.contains(&"content-type"),
        "{signed_headers:?}"
    );

    // Overwritten while its first job waits: the job renders red.
    let record = initiate(&app, json!({})).await;
    let url = record["url"].as_str().unwrap().to_owned();
    put_presigned(&app, &record, red.clone()).await;
    let first = render_seeded(&app, &url, async || {
        put_presigned(&app, &record, blue.clone()).await;
    })
    .await;
    // The next request checks and uses what the URL holds now: blue.
    let second = render_seeded(&app, &url, async || {}).await;
    // References: the same request with a red and a blue upload that
    // never changed.
    let red_reference = initiate(&app, json!({})).await;
    put_presigned(&app, &red_reference, red).await;
    let red_clip = render_seeded(&app, red_reference["url"].as_str().unwrap(), async || {}).await;
    let blue_reference = initiate(&app, json!({})).await;
    put_presigned(&app, &blue_reference, blue).await;
    let blue_clip = render_seeded(&app, blue_reference["url"].as_str().unwrap(), async || {}).await;

    assert!(red_clip != blue_clip, "the image does not show in the clip");
    assert!(
        first == red_clip,
        "the first job rendered other bytes than it checked"
    );
    assert!(
        second == blue_clip,
        "the second job did not use the new bytes"
    );
}

on_both_stores!(
    a_presigned_upload_renders_and_the_clip_is_served_from_the_bucket,
    a_multipart_upload_is_stored_in_the_bucket,
    direct_uploads_are_checked_on_first_use,
    a_direct_upload_overwritten_after_its_first_use_does_not_change_the_job,
    a_hosted_providers_output_is_streamed_into_the_bucket,
);
