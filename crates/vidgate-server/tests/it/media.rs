//! Request media over real HTTP: a quote with reference videos equals the
//! later charge, refused media is a 400 that charges nothing, the address
//! guard holds without the private-network flag, and the local engine
//! renders with the fetched images and audio. The media is made by the
//! tests and served from 127.0.0.1.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode as AxumStatus;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::{
    StoreKind, TestApp, TestSettings, assert_error, assert_invalid_request, on_both_stores,
    spawn_app, spawn_app_with, spawn_app_without_workers,
};

use reqwest::StatusCode;
use serde_json::{Value, json};
use vidgate_core::Micros;

type Files = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// Serves files from a map the test can change while the server runs.
struct MediaHost {
    files: Files,
    base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MediaHost {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MediaHost {
    async fn start(files: Vec<(&str, Vec<u8>)>) -> MediaHost {
        let files: Files = Arc::new(Mutex::new(
            files
                .into_iter()
                .map(|(name, bytes)| (name.to_owned(), bytes))
                .collect(),
        ));
        let router = Router::new()
            .route("/{name}", get(serve))
            .with_state(files.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        MediaHost { files, base, task }
    }

    fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    fn remove(&self, name: &str) {
        self.files.lock().unwrap().remove(name);
    }
}

async fn serve(State(files): State<Files>, Path(name): Path<String>) -> Response {
    match files.lock().unwrap().get(&name) {
        Some(bytes) => bytes.clone().into_response(),
        None => AxumStatus::NOT_FOUND.into_response(),
    }
}

/// A silent MP4 from the local engine.
fn mp4(duration_s: u32) -> Vec<u8> {
    let request = vidgate_engine::RenderRequest {
        width: 320,
        height: 240,
        duration_s,
        fps: 24,
        seed: 3,
        prompt: "reference".to_owned(),
        ..vidgate_engine::RenderRequest::default()
    };
    vidgate_engine::render(&request, &|_| {}, &AtomicBool::new(false))
        .unwrap()
        .mp4
}

/// `frames` silent MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz): a
/// header, zeroed side information (nothing coded, which decodes as
/// silence) and padding to the 417-byte frame; each lasts 1152 samples.
fn silent_mp3(frames: usize) -> Vec<u8> {
    let mut frame = vec![0u8; 417];
    frame[..4].copy_from_slice(&[0xFF, 0xFB, 0x90, 0x64]);
    frame.repeat(frames)
}

async fn quote(app: &TestApp, endpoint: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/quote/{endpoint}")))
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn balance(app: &TestApp) -> Micros {
    app.account_state(&app.account.account.id).await.balance
}

/// Quotes, submits, waits for success, and checks that the quote, the hold
/// and the capture are the same amount. Returns the quote.
async fn assert_quote_is_the_charge(app: &TestApp, endpoint: &str, body: Value) -> Value {
    let quoted = quote(app, endpoint, &body).await;
    assert_eq!(quoted.status(), StatusCode::OK);
    let quoted: Value = quoted.json().await.unwrap();
    let before = balance(app).await;
    let mut submitted_body = body;
    submitted_body["prompt"] = json!("a kite over the sea");
    let generation = app.submit_ok(endpoint, submitted_body).await;
    assert_eq!(
        generation["cost"]["amount_usd"],
        quoted["cost"]["amount_usd"]
    );
    let finished = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    assert_eq!(finished["cost"]["amount_usd"], quoted["cost"]["amount_usd"]);
    let charged = before - balance(app).await;
    assert_eq!(
        charged.to_usd(),
        quoted["cost"]["amount_usd"].as_f64().unwrap()
    );
    app.assert_ledger_invariant(&app.account.account.id).await;
    quoted
}

async fn m1_quote_with_a_reference_video_equals_the_charge(store: StoreKind) {
    let host = MediaHost::start(vec![("ref.mp4", mp4(2))]).await;
    let app = spawn_app(store).await;
    let body = json!({
        "duration": 2,
        "resolution": "480p",
        "generate_audio": false,
        "reference_video_urls": [host.url("ref.mp4")],
    });
    let quoted =
        assert_quote_is_the_charge(&app, "vendor_1/model_1/reference-to-video", body).await;
    // 2 s of output and 2 s of reference, both at 480p's $0.05 per second.
    assert_eq!(quoted["breakdown"]["reference_video_milliseconds"], 2000);
    assert_eq!(quoted["cost"]["amount_usd"], 0.2);
}

async fn m4_quote_with_a_reference_video_equals_the_charge(store: StoreKind) {
    let host = MediaHost::start(vec![("ref.mp4", mp4(2))]).await;
    let app = spawn_app(store).await;
    let body = json!({
        "duration": 4,
        "resolution": "480p",
        "generate_audio": false,
        "reference_video_urls": [host.url("ref.mp4")],
    });
    let quoted =
        assert_quote_is_the_charge(&app, "vendor_4/model_4/reference-to-video", body).await;
    // 854 × 480 × 24 × 6 s / 1024 tokens at the with-video rate.
    assert_eq!(quoted["breakdown"]["reference_video_milliseconds"], 2000);
    assert_eq!(quoted["breakdown"]["tokens"], 57_645);
    assert_eq!(quoted["breakdown"]["rate_micros"], 1_400_000);
}

/// The public quote reads our own files without HTTP, as submit does, so
/// it refuses kept media the same way: otherwise a stranger holding an
/// expired signed URL could still have the copy probed.
async fn a_quote_may_not_name_kept_media(store: StoreKind) {
    let host = MediaHost::start(vec![("ref.mp4", mp4(2))]).await;
    // No workers: the job stays queued, so its kept copy stays on disk.
    let app = spawn_app_without_workers(store).await;
    let endpoint = "vendor_1/model_1/reference-to-video";
    let body = |url: String| {
        json!({
            "duration": 2,
            "resolution": "480p",
            "generate_audio": false,
            "reference_video_urls": [url],
        })
    };
    let mut submitted = body(host.url("ref.mp4"));
    submitted["prompt"] = json!("a kite");
    app.submit_ok(endpoint, submitted).await;
    let relative = kept_media_copies(&app)
        .pop()
        .expect("submit kept the video");
    for url in [
        app.url(&format!("/files/{relative}")),
        app.url(&format!("/files/./{relative}")),
    ] {
        let refused = quote(&app, endpoint, &body(url.clone())).await;
        assert_invalid_request(refused, "reference_video_urls").await;
    }
}

async fn refused_media_is_a_400_naming_the_field_and_charges_nothing(store: StoreKind) {
    let host = MediaHost::start(vec![
        ("short.mp4", mp4(1)),
        ("a.png", common::png([9, 9, 9])),
    ])
    .await;
    let app = spawn_app(store).await;
    let before = balance(&app).await;
    // M4 reference videos must last at least 2 s.
    let too_short = json!({"prompt": "p", "reference_video_urls": [host.url("short.mp4")]});
    let body = assert_invalid_request(
        app.submit("vendor_4/model_4/reference-to-video", too_short.clone())
            .await,
        "reference_video_urls",
    )
    .await;
    assert_eq!(
        body["error"]["message"],
        "reference_video_urls[0] is 1 s long; each reference video must be 2 to 15 s"
    );
    assert_invalid_request(
        quote(&app, "vendor_4/model_4/reference-to-video", &too_short).await,
        "reference_video_urls",
    )
    .await;
    // A missing opening image fails the submit, not the job.
    let missing = json!({"prompt": "p", "image_url": host.url("gone.png"), "duration": 2, "resolution": "480p"});
    let refused = app.submit("vendor_1/model_1/image-to-video", missing).await;
    let body = assert_invalid_request(refused, "image_url").await;
    assert_eq!(body["error"]["message"], "image_url answered HTTP 404");
    // An image is not a reference video.
    let wrong_kind = json!({"prompt": "p", "reference_video_urls": [host.url("a.png")]});
    assert_invalid_request(
        app.submit("vendor_1/model_1/reference-to-video", wrong_kind)
            .await,
        "reference_video_urls",
    )
    .await;
    assert_eq!(balance(&app).await, before);
    let listed = app.get_json("/generations", app.key()).await;
    assert_eq!(listed["data"], json!([]));
}

async fn without_the_flag_loopback_media_is_refused(store: StoreKind) {
    let host = MediaHost::start(vec![("ref.mp4", mp4(2))]).await;
    let app = spawn_app_with(TestSettings {
        allow_private_network: false,
        ..TestSettings::new(store)
    })
    .await;
    let body = json!({"prompt": "p", "reference_video_urls": [host.url("ref.mp4")]});
    let refused = assert_invalid_request(
        quote(&app, "vendor_1/model_1/reference-to-video", &body).await,
        "reference_video_urls",
    )
    .await;
    let message = refused["error"]["message"].as_str().unwrap();
    // The message does not tell a stranger what the host resolved to.
    assert_eq!(
        message,
        "reference_video_urls[0] is not a public address, which the service does not fetch from"
    );
    assert_invalid_request(
        app.submit("vendor_1/model_1/reference-to-video", body)
            .await,
        "reference_video_urls",
    )
    .await;
}

/// Submits, waits for success and downloads the clip.
async fn render(app: &TestApp, endpoint: &str, body: Value) -> Vec<u8> {
    let finished = app.run_to_success(endpoint, body).await;
    app.download(finished["output"]["video_url"].as_str().unwrap())
        .await
}

async fn image_to_video_renders_with_the_fetched_png(store: StoreKind) {
    let host = MediaHost::start(vec![
        ("red.png", common::png([220, 30, 30])),
        ("blue.png", common::png([30, 30, 220])),
    ])
    .await;
    let app = spawn_app(store).await;
    let opening_on = |name: &str| {
        json!({
            "prompt": "the picture comes alive",
            "image_url": host.url(name),
            "duration": 2,
            "resolution": "480p",
            "generate_audio": false,
            "seed": 11,
        })
    };
    let endpoint = "vendor_1/model_1/image-to-video";
    let red = render(&app, endpoint, opening_on("red.png")).await;
    let blue = render(&app, endpoint, opening_on("blue.png")).await;
    assert!(red.len() > 1000);
    // Same prompt, seed and settings: only the opening image differs, so
    // different clips show that the fetched image was rendered.
    assert!(red != blue, "the opening image was not rendered");
}

/// Issue 16, items 7 and 8: the job renders with the bytes submit checked
/// and priced, kept by vidgate, not with whatever the customer's URL serves
/// (or no longer serves) when the job runs.
async fn the_job_renders_the_bytes_submit_checked_even_if_the_url_changes(store: StoreKind) {
    let host = MediaHost::start(vec![("a.png", common::png([1, 2, 3]))]).await;
    let app = spawn_app(store).await;
    // The job sleeps before it reads its media, so the image can vanish
    // after the submit checked it.
    let generation = app
        .submit_ok(
            "vendor_1/model_1/image-to-video",
            json!({
                "prompt": "[sim:sleep=400] a picture",
                "image_url": host.url("a.png"),
                "duration": 2,
                "resolution": "480p",
            }),
        )
        .await;
    host.remove("a.png");
    let finished = app
        .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
        .await;
    assert_eq!(finished["status"], "succeeded", "{finished}");
    // The kept copy lived as long as the job: it is gone now.
    all_kept_media_released(&app).await;
}

/// How many kept media copies are on the app's local disk.
fn kept_media_files(app: &TestApp) -> usize {
    kept_media_copies(app).len()
}

/// The stored paths (`media/<token>/<name>`) of the kept media copies on
/// the app's local disk.
fn kept_media_copies(app: &TestApp) -> Vec<String> {
    let kept = app.data_dir.path().join("files").join("media");
    let Ok(tokens) = std::fs::read_dir(&kept) else {
        return Vec::new();
    };
    let mut copies = Vec::new();
    for token in tokens.filter_map(Result::ok) {
        let Ok(files) = std::fs::read_dir(token.path()) else {
            continue;
        };
        for file in files.filter_map(Result::ok) {
            copies.push(format!(
                "media/{}/{}",
                token.file_name().to_string_lossy(),
                file.file_name().to_string_lossy()
            ));
        }
    }
    copies
}

/// Issue 16: a job the rescuer fails after its last attempt (its workers
/// died with it every time) is final, and its kept media is removed as for
/// a job that failed in a worker.
async fn the_kept_media_of_a_job_the_rescuer_fails_is_removed(store: StoreKind) {
    let host = MediaHost::start(vec![("a.png", common::png([9, 8, 7]))]).await;
    // No workers: only this test claims the job, as a worker that dies.
    let app = spawn_app_without_workers(store).await;
    let generation = app
        .submit_ok(
            "vendor_1/model_1/image-to-video",
            json!({ "prompt": "lost", "image_url": host.url("a.png"), "duration": 2, "resolution": "480p" }),
        )
        .await;
    let id = generation["id"].as_str().unwrap();
    assert_eq!(kept_media_files(&app), 1, "submit keeps the checked image");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = app.generation(id).await["status"]
            .as_str()
            .unwrap()
            .to_owned();
        if status == "failed" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {status}");
        // A claim whose lease ends at once: the rescuer (every 200 ms)
        // finds it expired, re-queues it, and fails it after the last.
        if status == "queued" {
            app.server
                .store
                .queue()
                .claim_next("dead-worker", std::time::Duration::from_millis(1))
                .await
                .unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    all_kept_media_released(&app).await;
}

/// Waits until no kept media copy is left on the app's disk. The worker
/// (and the rescuer) release a job's media right after committing its final
/// state, so a reader who saw that state may still see the copy for a
/// moment; five seconds is far longer than a release takes.
async fn all_kept_media_released(app: &TestApp) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while kept_media_files(app) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "kept media left behind"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn reference_to_video_composes_the_images_and_mixes_the_audio(store: StoreKind) {
    let host = MediaHost::start(vec![
        ("a.png", common::png([200, 40, 40])),
        ("b.png", common::png([40, 200, 40])),
        ("c.png", common::png([40, 40, 200])),
        ("tone.wav", common::wav_tone(2)),
        ("silence.mp3", silent_mp3(80)),
    ])
    .await;
    let app = spawn_app(store).await;
    let body = |images: [&str; 2], audio: Option<&str>| {
        let audio_urls: Vec<String> = audio.map(|name| host.url(name)).into_iter().collect();
        json!({
            "prompt": "two pictures to music",
            "reference_image_urls": [host.url(images[0]), host.url(images[1])],
            "reference_audio_urls": audio_urls,
            "duration": 2,
            "resolution": "480p",
            "generate_audio": true,
            "seed": 5,
        })
    };
    let endpoint = "vendor_1/model_1/reference-to-video";
    let with_audio = render(&app, endpoint, body(["a.png", "b.png"], Some("tone.wav"))).await;
    let without_audio = render(&app, endpoint, body(["a.png", "b.png"], None)).await;
    let other_images = render(&app, endpoint, body(["a.png", "c.png"], Some("tone.wav"))).await;
    // Everything else is equal, so each difference comes from fetched media.
    assert!(
        with_audio != without_audio,
        "the reference audio was not mixed"
    );
    assert!(
        with_audio != other_images,
        "the reference images were not used"
    );
    // The engine skips audio it cannot read, so a clip that differs from the
    // one without audio shows the MP3 was decoded for it.
    let with_mp3 = render(
        &app,
        endpoint,
        body(["a.png", "b.png"], Some("silence.mp3")),
    )
    .await;
    assert!(
        with_mp3 != without_audio,
        "the MP3 was not decoded and mixed"
    );
}

/// A URL on an allowed host that redirects to a private address is refused
/// without `--allow-private-network`: 127.0.0.1 is trusted (it stands in for
/// a public host), the redirect goes to 127.0.0.2, which is not, so nothing
/// leaves this machine.
async fn a_redirect_to_a_private_address_is_refused_naming_the_field(store: StoreKind) {
    let host = MediaHost::start(vec![("card.png", common::png([10, 200, 30]))]).await;
    let port = host.base.rsplit_once(':').unwrap().1.to_owned();
    let redirector = Router::new().route(
        "/away",
        get(move || async move {
            axum::response::Redirect::temporary(&format!("http://127.0.0.2:{port}/card.png"))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let away = format!("http://{}/away", listener.local_addr().unwrap());
    let redirecting = tokio::spawn(async move {
        axum::serve(listener, redirector).await.unwrap();
    });
    let app = spawn_app_with(TestSettings {
        allow_private_network: false,
        trusted_media_addresses: vec!["127.0.0.1".parse().unwrap()],
        ..TestSettings::new(store)
    })
    .await;
    let request = |image_url: &str| json!({ "prompt": "p", "image_url": image_url, "duration": 2, "resolution": "480p" });
    // The trusted host itself is fetched, so the refusal is the redirect's.
    let direct = app
        .submit(
            "vendor_1/model_1/image-to-video",
            request(&host.url("card.png")),
        )
        .await;
    assert_eq!(direct.status(), StatusCode::ACCEPTED);
    let before = balance(&app).await;
    let refused = assert_invalid_request(
        app.submit("vendor_1/model_1/image-to-video", request(&away))
            .await,
        "image_url",
    )
    .await;
    // Refused for the redirect's private target, which the message does
    // not name.
    let message = refused["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "image_url is not a public address, which the service does not fetch from"
    );
    assert!(!message.contains("127.0.0.2"), "{message}");
    assert_eq!(balance(&app).await, before);
    redirecting.abort();
}

/// Issue 16, item 1: the public endpoints answer one client address at most
/// a fair-use rate, then 429 with Retry-After; keys are not counted.
async fn the_public_endpoints_have_a_fair_use_limit_per_address(store: StoreKind) {
    let app = spawn_app_with(TestSettings {
        public_rate_limit: vidgate_server::limits::PublicRateLimit {
            per_second: 1,
            burst: 3,
        },
        ..TestSettings::new(store)
    })
    .await;
    for path in ["/models", "/quote/vendor_1/model_1/text-to-video"] {
        let mut refusal = None;
        for _ in 0..10 {
            let request = if path.starts_with("/quote") {
                app.client.post(app.url(path)).json(&json!({}))
            } else {
                app.client.get(app.url(path))
            };
            let response = request.send().await.unwrap();
            if response.status() == StatusCode::TOO_MANY_REQUESTS {
                refusal = Some(response);
                break;
            }
            assert_eq!(response.status(), StatusCode::OK, "{path}");
        }
        let refusal = refusal.expect("the tenth request in a row is over the limit");
        let retry_after: u64 = refusal.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry_after >= 1);
        assert_error(refusal, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    }
    let account = app.get("/account", app.key()).await;
    assert_eq!(account.status(), StatusCode::OK);
}

/// With Redis, the fair-use bucket of an address is one for every node:
/// two nodes together let through one burst, not one each.
#[tokio::test]
async fn with_redis_nodes_share_an_addresss_fair_use_bucket() {
    let Ok(redis_url) = std::env::var("VIDGATE_TEST_REDIS_URL") else {
        eprintln!(
            "skipping with_redis_nodes_share_an_addresss_fair_use_bucket: set VIDGATE_TEST_REDIS_URL"
        );
        return;
    };
    let settings = || TestSettings {
        public_rate_limit: vidgate_server::limits::PublicRateLimit {
            per_second: 1,
            burst: 3,
        },
        // The client address comes from X-Forwarded-For, so that this run
        // has a bucket no other test run shares.
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        redis_url: Some(redis_url.clone()),
        ..TestSettings::new(StoreKind::Sqlite)
    };
    let nodes = [
        spawn_app_with(settings()).await,
        spawn_app_with(settings()).await,
    ];
    let client = format!(
        "2001:db8:{:x}:{:x}::1",
        rand::random::<u16>(),
        rand::random::<u16>()
    );

    let mut allowed = 0;
    let mut refusals = Vec::new();
    for request in 0..8 {
        let node = &nodes[request % 2];
        let response = node
            .client
            .get(node.url("/models"))
            .header("x-forwarded-for", &client)
            .send()
            .await
            .unwrap();
        match response.status() {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => refusals.push(response),
            other => panic!("unexpected {other}"),
        }
    }
    // Three in the burst, and at most one more if a second passed; separate
    // buckets would have let six through.
    assert!((3..=4).contains(&allowed), "{allowed} allowed");
    let refusal = refusals.pop().unwrap();
    assert!(refusal.headers().contains_key("retry-after"));
    assert_error(refusal, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
}

/// Issue 38, item 7: the anonymous quote answers a host name that does not
/// resolve exactly as one that resolves to a private address, so a
/// stranger cannot learn which names exist inside the operator's network.
#[tokio::test]
async fn the_public_quote_tells_an_unresolvable_name_from_a_private_one_in_no_way() {
    let app = spawn_app_with(TestSettings {
        allow_private_network: false,
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    let mut answers = Vec::new();
    for url in [
        "http://localhost/ref.mp4",
        "http://no-such-host.vidgate-test.invalid/ref.mp4",
    ] {
        let body = json!({"prompt": "p", "reference_video_urls": [url]});
        let answer = quote(&app, "vendor_1/model_1/reference-to-video", &body).await;
        let status = answer.status();
        let body: Value = answer.json().await.unwrap();
        answers.push((status, body));
    }
    assert_eq!(answers[0].0, StatusCode::BAD_REQUEST, "{answers:?}");
    assert_eq!(answers[0], answers[1]);
}

on_both_stores!(
    the_public_endpoints_have_a_fair_use_limit_per_address,
    m1_quote_with_a_reference_video_equals_the_charge,
    m4_quote_with_a_reference_video_equals_the_charge,
    a_quote_may_not_name_kept_media,
    refused_media_is_a_400_naming_the_field_and_charges_nothing,
    without_the_flag_loopback_media_is_refused,
    a_redirect_to_a_private_address_is_refused_naming_the_field,
    image_to_video_renders_with_the_fetched_png,
    the_job_renders_the_bytes_submit_checked_even_if_the_url_changes,
    reference_to_video_composes_the_images_and_mixes_the_audio,
    the_kept_media_of_a_job_the_rescuer_fails_is_removed,
);
