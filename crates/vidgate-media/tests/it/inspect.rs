//! The catalog's reference-media rules on real media served over HTTP: each
//! limit at and just past its bound, and the facts pricing gets.

use crate::common;

use std::collections::HashMap;

use common::{MediaServer, image, mp3, mp4, wav};
use image::ImageFormat;
use serde_json::{Value, json};
use vidgate_core::{Catalog, Endpoint, InvalidRequest, MediaFacts, Purpose, ValidatedInput};
use vidgate_media::{
    FetchLimit, FetchSettings, Fetcher, InspectError, Inspection, MediaInspector, ProbeCache,
    Requester, Scope, hex,
};

struct Fixture {
    server: MediaServer,
    inspector: MediaInspector,
    catalog: Catalog,
}

impl Fixture {
    async fn new(files: Vec<(&str, Vec<u8>)>) -> Fixture {
        let files: HashMap<String, Vec<u8>> = files
            .into_iter()
            .map(|(name, bytes)| (name.to_owned(), bytes))
            .collect();
        let fetcher = Fetcher::new(FetchSettings {
            allow_private_network: true,
            ..FetchSettings::default()
        })
        .unwrap();
        Fixture {
            server: MediaServer::start(files).await,
            inspector: MediaInspector::with_default_cache(fetcher),
            catalog: Catalog::embedded(),
        }
    }

    fn urls(&self, names: &[&str]) -> Value {
        json!(
            names
                .iter()
                .map(|name| self.server.url(name))
                .collect::<Vec<_>>()
        )
    }

    async fn inspect(
        &self,
        endpoint: &str,
        body: Value,
        scope: Scope,
    ) -> Result<MediaFacts, InvalidRequest> {
        let endpoint = self.catalog.endpoint(endpoint).unwrap();
        let input = endpoint
            .validate_value(&body, Purpose::Submit)
            .expect("the body is valid before media checks");
        match self
            .inspector
            .inspect(&account("acct_test"), endpoint, &input, scope)
            .await
        {
            Ok(facts) => Ok(facts),
            Err(InspectError::Invalid(error)) => Err(error),
            Err(busy) => panic!("one request at a time cannot be busy: {busy:?}"),
        }
    }
}

const M1_REFERENCE: &str = "vendor_1/model_1/reference-to-video";
const M4_REFERENCE: &str = "vendor_4/model_4/reference-to-video";
const M1_IMAGE: &str = "vendor_1/model_1/image-to-video";
const M2_IMAGE: &str = "vendor_2/model_2/image-to-video";

fn refused(result: Result<MediaFacts, InvalidRequest>, param: &str) -> String {
    let error = result.expect_err("the media should be refused");
    assert_eq!(error.param.as_deref(), Some(param), "{}", error.message);
    error.message
}

#[tokio::test]
async fn reference_video_seconds_at_and_past_each_bound() {
    let fixture = Fixture::new(vec![
        ("1s.mp4", mp4(320, 240, 1, 24)),
        ("15s.mp4", mp4(320, 240, 15, 16)),
        ("16s.mp4", mp4(320, 240, 16, 16)),
    ])
    .await;
    let body = |names: &[&str], duration: u32| json!({"prompt": "p", "duration": duration, "reference_video_urls": fixture.urls(names)});
    let check = |names: &'static [&'static str], duration: u32| {
        fixture.inspect(M1_REFERENCE, body(names, duration), Scope::Everything)
    };
    let facts = check(&["1s.mp4"], 5).await.unwrap();
    assert_eq!(facts.reference_video_durations_ms, vec![1000]);
    // 15 s of reference plus 15 s of output is exactly the 30 s cap.
    let facts = check(&["15s.mp4"], 15).await.unwrap();
    assert_eq!(facts.reference_video_durations_ms, vec![15_000]);
    assert_eq!(
        refused(
            check(&["1s.mp4", "16s.mp4"], 5).await,
            "reference_video_urls"
        ),
        "reference_video_urls[1] is 16 s long; each reference video must be 1 to 15 s"
    );
    assert_eq!(
        refused(
            check(&["15s.mp4", "1s.mp4"], 5).await,
            "reference_video_urls"
        ),
        "reference_video_urls add up to 16 s; reference videos may last at most 15 s in total"
    );
    assert_eq!(
        refused(check(&["15s.mp4"], 16).await, "reference_video_urls"),
        "reference_video_urls add up to 15 s and the output is 16 s, 31 s in all; reference plus output seconds may be at most 30"
    );
    // M4 needs at least 2 s per reference video.
    let m4_short = json!({"prompt": "p", "reference_video_urls": fixture.urls(&["1s.mp4"])});
    assert_eq!(
        refused(
            fixture
                .inspect(M4_REFERENCE, m4_short, Scope::PriceAffecting)
                .await,
            "reference_video_urls"
        ),
        "reference_video_urls[0] is 1 s long; each reference video must be 2 to 15 s"
    );
}

#[tokio::test]
async fn reference_video_frame_rate_and_format() {
    let fixture = Fixture::new(vec![
        ("16fps.mp4", mp4(320, 240, 1, 16)),
        ("15fps.mp4", mp4(320, 240, 1, 15)),
        ("still.png", image(ImageFormat::Png, 320, 240)),
        ("broken.mp4", mp4(320, 240, 1, 24)[..600].to_vec()),
    ])
    .await;
    let body = |name: &str| json!({"prompt": "p", "reference_video_urls": fixture.urls(&[name])});
    let check = |name: &'static str| fixture.inspect(M1_REFERENCE, body(name), Scope::Everything);
    assert!(check("16fps.mp4").await.is_ok());
    assert_eq!(
        refused(check("15fps.mp4").await, "reference_video_urls"),
        "reference_video_urls[0] runs at 15.00 fps; each reference video must have at least 16 fps"
    );
    assert_eq!(
        refused(check("still.png").await, "reference_video_urls"),
        "reference_video_urls[0] is a PNG file; each reference video must be MP4 or MOV"
    );
    let unreadable = refused(check("broken.mp4").await, "reference_video_urls");
    assert!(
        unreadable.starts_with("reference_video_urls[0] is not a readable MP4 file"),
        "{unreadable}"
    );
    let missing = refused(check("missing.mp4").await, "reference_video_urls");
    assert_eq!(missing, "reference_video_urls[0] answered HTTP 404");
}

#[tokio::test]
async fn reference_audio_seconds_and_formats() {
    let fixture = Fixture::new(vec![
        ("1s.wav", wav(1000)),
        ("short.wav", wav(999)),
        ("15s.wav", wav(15_000)),
        ("long.wav", wav(15_001)),
        ("8s.wav", wav(8000)),
        ("1s.mp3", mp3(40)),
        ("clip.mp4", mp4(320, 240, 1, 24)),
    ])
    .await;
    let body = |names: &[&str]| json!({"prompt": "p", "reference_audio_urls": fixture.urls(names)});
    let check = |names: &'static [&'static str]| {
        fixture.inspect(M1_REFERENCE, body(names), Scope::Everything)
    };
    assert!(check(&["1s.wav", "1s.mp3"]).await.is_ok());
    assert!(check(&["15s.wav"]).await.is_ok());
    assert_eq!(
        refused(check(&["short.wav"]).await, "reference_audio_urls"),
        "reference_audio_urls[0] is 0.999 s long; each reference audio file must be 1 to 15 s"
    );
    assert_eq!(
        refused(check(&["1s.wav", "long.wav"]).await, "reference_audio_urls"),
        "reference_audio_urls[1] is 15.001 s long; each reference audio file must be 1 to 15 s"
    );
    assert_eq!(
        refused(check(&["8s.wav", "8s.wav"]).await, "reference_audio_urls"),
        "reference_audio_urls add up to 16 s; reference audio files may last at most 15 s in total"
    );
    assert_eq!(
        refused(check(&["clip.mp4"]).await, "reference_audio_urls"),
        "reference_audio_urls[0] is an MP4 file; each reference audio file must be MP3 or WAV"
    );
    // A quote looks at reference videos only, so audio is not fetched.
    assert_eq!(
        fixture
            .inspect(M1_REFERENCE, body(&["short.wav"]), Scope::PriceAffecting)
            .await,
        Ok(MediaFacts::default())
    );
}

#[tokio::test]
async fn images_must_be_jpg_png_or_webp() {
    let fixture = Fixture::new(vec![
        ("a.png", image(ImageFormat::Png, 64, 64)),
        ("a.jpg", image(ImageFormat::Jpeg, 64, 64)),
        ("a.webp", image(ImageFormat::WebP, 64, 64)),
        ("a.wav", wav(1000)),
        ("a.gif", b"GIF89a\x08\x00\x08\x00\x80\x00\x00".to_vec()),
    ])
    .await;
    let opening = |name: &str| json!({"prompt": "p", "image_url": fixture.server.url(name)});
    let check = |name: &'static str| fixture.inspect(M1_IMAGE, opening(name), Scope::Everything);
    for name in ["a.png", "a.jpg", "a.webp"] {
        assert!(check(name).await.is_ok(), "{name}");
    }
    assert_eq!(
        refused(check("a.wav").await, "image_url"),
        "image_url is a WAV file; image_url must be JPG, PNG or WebP"
    );
    assert_eq!(
        refused(check("a.gif").await, "image_url"),
        "image_url is not a JPG, PNG, WebP, MP4, MOV, MP3 or WAV file"
    );
    let closing = json!({
        "prompt": "p",
        "image_url": fixture.server.url("a.png"),
        "end_image_url": fixture.server.url("a.wav"),
    });
    refused(
        fixture.inspect(M2_IMAGE, closing, Scope::Everything).await,
        "end_image_url",
    );
    let references =
        json!({"prompt": "p", "reference_image_urls": fixture.urls(&["a.jpg", "a.gif"])});
    let message = refused(
        fixture
            .inspect(M1_REFERENCE, references, Scope::Everything)
            .await,
        "reference_image_urls",
    );
    assert!(message.starts_with("reference_image_urls[1] "), "{message}");
}

#[tokio::test]
async fn m4_total_bytes_stop_the_download() {
    // Two 30 MB files exceed M4's 50 MiB total; the second download stops at
    // what is left of it.
    let big = {
        let mut bytes = mp4(320, 240, 2, 24);
        bytes.resize(30 * 1024 * 1024, 0);
        bytes
    };
    let fixture = Fixture::new(vec![("a.mp4", big.clone()), ("b.mp4", big)]).await;
    let body = json!({"prompt": "p", "reference_video_urls": fixture.urls(&["a.mp4", "b.mp4"])});
    assert_eq!(
        refused(
            fixture.inspect(M4_REFERENCE, body, Scope::Everything).await,
            "reference_video_urls"
        ),
        "reference_video_urls add up to more than 52428800 bytes; reference videos may hold at most 52428800 bytes in total"
    );
}

#[tokio::test]
async fn a_second_inspection_uses_the_cache() {
    let fixture = Fixture::new(vec![("a.mp4", mp4(320, 240, 2, 24))]).await;
    let body = json!({"prompt": "p", "reference_video_urls": fixture.urls(&["a.mp4"])});
    let quoted = fixture
        .inspect(M1_REFERENCE, body.clone(), Scope::PriceAffecting)
        .await
        .unwrap();
    assert_eq!(fixture.inspector.cache().len(), 1);
    // The server is gone, so only the cache can answer.
    drop(fixture.server);
    let endpoint = fixture.catalog.endpoint(M1_REFERENCE).unwrap();
    let input = endpoint.validate_value(&body, Purpose::Submit).unwrap();
    let submitted = fixture
        .inspector
        .inspect(&account("acct_test"), endpoint, &input, Scope::Everything)
        .await
        .unwrap();
    assert_eq!(quoted, submitted);
}

fn private_fetcher() -> Fetcher {
    Fetcher::new(FetchSettings {
        allow_private_network: true,
        ..FetchSettings::default()
    })
    .unwrap()
}

fn account(id: &str) -> Requester {
    Requester::Account { id: id.to_owned() }
}

fn anonymous(client: &str) -> Requester {
    Requester::Anonymous {
        client: client.to_owned(),
    }
}

/// An inspector of two fetch slots (one of them kept for accounts), one
/// anonymous fetch per client, that waits 200 ms for a slot.
fn two_slot_inspector() -> std::sync::Arc<MediaInspector> {
    std::sync::Arc::new(MediaInspector::with_fetch_limit(
        private_fetcher(),
        ProbeCache::new(16, std::time::Duration::from_secs(60)),
        FetchLimit {
            max_concurrent: 2,
            wait: std::time::Duration::from_millis(200),
            per_client: 1,
            per_account: 4,
        },
    ))
}

/// Takes a fetch slot for `requester` with a download that answers after
/// five seconds, and returns once it holds it.
async fn hold_a_slot(
    inspector: &std::sync::Arc<MediaInspector>,
    server: &MediaServer,
    requester: Requester,
) -> tokio::task::JoinHandle<()> {
    let available = inspector.available_fetch_slots();
    let slow = server.path_url("/slow");
    let holder = {
        let inspector = inspector.clone();
        tokio::spawn(async move {
            let _ = inspector.fetch_and_probe(&requester, &slow, 1000).await;
        })
    };
    while inspector.available_fetch_slots() == available {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    holder
}

/// Asserts that an inspection was turned away for want of a fetch slot.
fn assert_busy<T: std::fmt::Debug>(result: &Result<T, InspectError>) {
    assert!(
        matches!(result, Err(InspectError::Busy { .. })),
        "{result:?}"
    );
}

/// An M1 reference-to-video request naming the one clip (1 s) on its own
/// media server; the catalog is kept for the endpoint to borrow.
struct OneClipRequest {
    server: MediaServer,
    catalog: Catalog,
    input: ValidatedInput,
}

impl OneClipRequest {
    async fn start() -> OneClipRequest {
        let server =
            MediaServer::start(HashMap::from([("a.mp4".to_owned(), mp4(320, 240, 1, 24))])).await;
        let catalog = Catalog::embedded();
        let body = json!({"prompt": "p", "reference_video_urls": [server.url("a.mp4")]});
        let input = catalog
            .endpoint(M1_REFERENCE)
            .unwrap()
            .validate_value(&body, Purpose::Submit)
            .unwrap();
        OneClipRequest {
            server,
            catalog,
            input,
        }
    }

    fn endpoint(&self) -> Endpoint<'_> {
        self.catalog.endpoint(M1_REFERENCE).unwrap()
    }

    /// This request inspected for `requester` by `inspector`.
    async fn inspect(
        &self,
        inspector: &MediaInspector,
        requester: &Requester,
        scope: Scope,
    ) -> Result<MediaFacts, InspectError> {
        inspector
            .inspect(requester, self.endpoint(), &self.input, scope)
            .await
    }

    /// This request inspected for `requester` by `inspector`, its media kept
    /// as a submit keeps them.
    async fn inspect_and_keep(
        &self,
        inspector: &MediaInspector,
        requester: &Requester,
    ) -> Result<Inspection, InspectError> {
        inspector
            .inspect_and_keep(requester, self.endpoint(), &self.input)
            .await
    }
}

#[tokio::test]
async fn over_the_fetch_limit_a_request_waits_then_is_told_to_come_back() {
    let request = OneClipRequest::start().await;
    let inspector = two_slot_inspector();
    // Both slots are taken by downloads that answer after five seconds.
    let first = hold_a_slot(&inspector, &request.server, account("acct_slow")).await;
    let second = hold_a_slot(&inspector, &request.server, account("acct_slow")).await;
    let refused = request
        .inspect(&inspector, &account("acct_other"), Scope::PriceAffecting)
        .await;
    assert!(
        matches!(refused, Err(InspectError::Busy { retry_after }) if retry_after.as_secs() >= 1),
        "{refused:?}"
    );
    first.abort();
    let _ = first.await;
    // With a slot free again, the same request is answered.
    assert!(
        request
            .inspect(&inspector, &account("acct_other"), Scope::PriceAffecting)
            .await
            .is_ok()
    );
    second.abort();
}

#[tokio::test]
async fn anonymous_fetches_never_take_the_slots_kept_for_accounts() {
    let request = OneClipRequest::start().await;
    let inspector = two_slot_inspector();
    // A stranger holds the one slot anyone may take.
    let stranger = hold_a_slot(&inspector, &request.server, anonymous("198.51.100.1")).await;
    // Another stranger finds no slot; an account takes the kept one.
    let refused = request
        .inspect(&inspector, &anonymous("198.51.100.2"), Scope::Everything)
        .await;
    assert_busy(&refused);
    let kept = request
        .inspect_and_keep(&inspector, &account("acct_paying"))
        .await;
    assert!(kept.is_ok(), "{kept:?}");
    stranger.abort();
}

#[tokio::test]
async fn one_client_runs_only_its_share_of_fetches_at_once() {
    let request = OneClipRequest::start().await;
    let inspector = std::sync::Arc::new(MediaInspector::with_fetch_limit(
        private_fetcher(),
        ProbeCache::new(16, std::time::Duration::from_secs(60)),
        FetchLimit {
            max_concurrent: 8,
            wait: std::time::Duration::from_millis(200),
            per_client: 1,
            per_account: 1,
        },
    ));
    for requester in [anonymous("198.51.100.1"), account("acct_busy")] {
        let holder = hold_a_slot(&inspector, &request.server, requester.clone()).await;
        // Free slots remain, but not for this requester; others get them.
        assert!(inspector.available_fetch_slots() > 0);
        // Refused for its own limit, not for the process's: the API tells
        // the two apart (429 against 503).
        let refused = request.inspect_and_keep(&inspector, &requester).await;
        assert!(
            matches!(
                refused,
                Err(InspectError::RequesterAtLimit { limit: 1, retry_after }) if retry_after.as_secs() >= 1
            ),
            "{refused:?}"
        );
        let other = request
            .inspect_and_keep(&inspector, &anonymous("198.51.100.9"))
            .await;
        assert!(other.is_ok(), "{other:?}");
        holder.abort();
        let _ = holder.await;
    }
}

#[tokio::test]
async fn submit_keeps_the_bytes_it_checked_with_their_hash() {
    let clip = mp4(320, 240, 2, 24);
    let picture = image(ImageFormat::Png, 64, 64);
    let server = MediaServer::start(HashMap::from([
        ("a.mp4".to_owned(), clip.clone()),
        ("a.png".to_owned(), picture.clone()),
    ]))
    .await;
    let inspector = MediaInspector::with_default_cache(private_fetcher());
    let catalog = Catalog::embedded();
    let endpoint = catalog.endpoint(M1_REFERENCE).unwrap();
    let body = json!({
        "prompt": "p",
        "reference_video_urls": [server.url("a.mp4")],
        "reference_image_urls": [server.url("a.png"), server.url("a.png")],
    });
    let input = endpoint.validate_value(&body, Purpose::Submit).unwrap();
    let inspection = inspector
        .inspect_and_keep(&account("acct_test"), endpoint, &input)
        .await
        .unwrap();
    assert_eq!(inspection.facts.reference_video_durations_ms, vec![2000]);
    let mut kept: Vec<(String, usize, u64)> = inspection
        .media
        .iter()
        .map(|item| (item.parameter.clone(), item.index, item.file.size_bytes()))
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        vec![
            ("reference_image_urls".to_owned(), 0, picture.len() as u64),
            ("reference_image_urls".to_owned(), 1, picture.len() as u64),
            ("reference_video_urls".to_owned(), 0, clip.len() as u64),
        ]
    );
    for item in &inspection.media {
        let bytes = std::fs::read(item.file.path()).unwrap();
        use sha2::Digest;
        assert_eq!(item.file.sha256_hex(), hex(&sha2::Sha256::digest(&bytes)));
        let expected = if item.parameter == "reference_video_urls" {
            &clip
        } else {
            &picture
        };
        assert_eq!(&bytes, expected);
    }
    // The scratch files go away with the inspection.
    let paths: Vec<_> = inspection
        .media
        .iter()
        .map(|item| item.file.path().to_owned())
        .collect();
    drop(inspection);
    assert!(paths.iter().all(|path| !path.exists()));
}
