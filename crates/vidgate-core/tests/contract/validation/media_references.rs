//! Request media: credentials in URLs, prompt mentions of the references,
//! and which references each mode needs beside another.

use serde_json::{Value, json};
use vidgate_core::{Catalog, Purpose};

use super::submit;
use crate::spec::{AUDIO, IMAGE, VIDEO};

#[test]
fn media_urls_may_carry_credentials_but_webhooks_may_not() {
    let catalog = Catalog::embedded();
    let endpoint = catalog.endpoint("vendor_1/model_1/image-to-video").unwrap();
    let with_credentials = "https://user:secret@media.example.com/a.png";
    assert!(
        submit(
            endpoint,
            json!({"prompt": "a", "image_url": with_credentials})
        )
        .is_ok()
    );
    let error = submit(
        endpoint,
        json!({"prompt": "a", "image_url": IMAGE, "webhook_url": with_credentials}),
    )
    .unwrap_err();
    assert_eq!(error.param.as_deref(), Some("webhook_url"));
    assert_eq!(
        error.message,
        "webhook_url must not contain a user name or password"
    );
}

#[test]
fn prompt_mentions_must_point_at_supplied_references() {
    let catalog = Catalog::embedded();
    let images = json!([IMAGE, IMAGE]);
    let videos = json!([VIDEO]);
    let audios = json!([AUDIO, AUDIO, AUDIO]);
    // (endpoint, prompt, extra fields, accepted)
    let cases: Vec<(&str, &str, Value, bool)> = vec![
        (
            "vendor_1/model_1/reference-to-video",
            "@Image1 and @Image2 dance",
            json!({"reference_image_urls": images}),
            true,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Image3 dances",
            json!({"reference_image_urls": images}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Image0 dances",
            json!({"reference_image_urls": images}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Image12 dances",
            json!({"reference_image_urls": images}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Image99999999999999999999999 dances",
            json!({"reference_image_urls": images}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Video1 as motion",
            json!({"reference_video_urls": videos}),
            true,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Video2 as motion",
            json!({"reference_video_urls": videos}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Video1 as motion",
            json!({"reference_image_urls": images}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Audio3 speaks",
            json!({"reference_audio_urls": audios}),
            true,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Audio4 speaks",
            json!({"reference_audio_urls": audios}),
            false,
        ),
        (
            "vendor_1/model_1/reference-to-video",
            "@Audio1 speaks",
            json!({"reference_audio_urls": []}),
            false,
        ),
        // Not mentions: no number, other words, other case.
        (
            "vendor_1/model_1/reference-to-video",
            "@Image, @Images, @image1, @Picture1, a@b",
            json!({}),
            true,
        ),
        (
            "vendor_1/model_1/text-to-video",
            "@Image1 dances",
            json!({}),
            false,
        ),
        (
            "vendor_1/model_1/image-to-video",
            "@Image1 dances",
            json!({"image_url": IMAGE}),
            false,
        ),
        (
            "vendor_2/model_2/text-to-video",
            "@Video1 moves",
            json!({}),
            false,
        ),
        (
            "vendor_6/model_6/reference-to-video",
            "@Image2 runs",
            json!({"reference_image_urls": images}),
            true,
        ),
        (
            "vendor_6/model_6/reference-to-video",
            "@Video1 runs",
            json!({"reference_image_urls": images}),
            false,
        ),
        (
            "vendor_4/model_4/reference-to-video",
            "@Audio1 over @Video1",
            json!({"reference_video_urls": videos, "reference_audio_urls": [AUDIO]}),
            true,
        ),
    ];
    for (endpoint_id, prompt, extra, accepted) in cases {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        let mut body = extra;
        body["prompt"] = json!(prompt);
        for purpose in [Purpose::Submit, Purpose::Quote] {
            let result = endpoint.validate_value(&body, purpose);
            match (accepted, result) {
                (true, Ok(_)) => {}
                (false, Err(error)) => {
                    assert_eq!(
                        error.param.as_deref(),
                        Some("prompt"),
                        "{endpoint_id} {prompt}"
                    );
                    assert!(
                        error.message.starts_with("prompt mentions @"),
                        "{}",
                        error.message
                    );
                }
                (expected, result) => {
                    panic!("{endpoint_id} {prompt:?}: expected accepted={expected}, got {result:?}")
                }
            }
        }
    }
}

#[test]
fn m4_reference_audio_needs_a_reference_image_or_video() {
    let catalog = Catalog::embedded();
    let m4 = catalog
        .endpoint("vendor_4/model_4/reference-to-video")
        .unwrap();
    let cases = [
        (json!({"reference_audio_urls": [AUDIO]}), false),
        (
            json!({"reference_audio_urls": [AUDIO], "reference_image_urls": []}),
            false,
        ),
        (
            json!({"reference_audio_urls": [AUDIO], "reference_image_urls": [IMAGE]}),
            true,
        ),
        (
            json!({"reference_audio_urls": [AUDIO], "reference_video_urls": [VIDEO]}),
            true,
        ),
        (json!({"reference_audio_urls": []}), true),
        (json!({}), true),
    ];
    for (mut body, accepted) in cases {
        body["prompt"] = json!("a");
        for purpose in [Purpose::Submit, Purpose::Quote] {
            match m4.validate_value(&body, purpose) {
                Ok(_) => assert!(accepted, "{body}"),
                Err(error) => {
                    assert!(!accepted, "{body}: {error:?}");
                    assert_eq!(error.param.as_deref(), Some("reference_audio_urls"));
                    assert!(
                        error
                            .message
                            .contains("reference_image_urls or reference_video_urls")
                    );
                }
            }
        }
    }
    // M1 and M5 take reference audio on its own.
    for endpoint_id in [
        "vendor_1/model_1/reference-to-video",
        "vendor_5/model_5/reference-to-video",
    ] {
        let endpoint = catalog.endpoint(endpoint_id).unwrap();
        assert!(
            submit(
                endpoint,
                json!({"prompt": "a", "reference_audio_urls": [AUDIO]})
            )
            .is_ok()
        );
    }
}
