//! fal's queue API held against its documents: states, errors, lists and
//! signed webhooks.

use super::*;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use serde_json::json;

#[test]
fn status_and_result_use_the_app_id_of_the_endpoint() {
    assert_eq!(
        app_id("alibaba/wan-3.0/reference-to-video"),
        "alibaba/wan-3.0"
    );
    assert_eq!(
        app_id("fal-ai/kling-video/o3/standard/reference-to-video"),
        "fal-ai/kling-video"
    );
    assert_eq!(app_id("owner/app"), "owner/app");
    let client = FalClient::new(
        "http://127.0.0.1:9/queue",
        "http://127.0.0.1:9",
        "http://127.0.0.1:9/jwks",
        "k".into(),
        Duration::from_secs(1),
    )
    .unwrap();
    assert_eq!(
        client
            .request_url("fal-ai/kling-video/v3/pro/text-to-video", "r1", "/status")
            .as_str(),
        "http://127.0.0.1:9/queue/fal-ai/kling-video/requests/r1/status"
    );
}

#[test]
fn queue_statuses_map_to_states_and_a_completed_error_is_a_failure() {
    assert_eq!(
        queue_state(&json!({ "status": "IN_QUEUE", "queue_position": 3 })).unwrap(),
        QueueState::InQueue
    );
    assert_eq!(
        queue_state(&json!({ "status": "IN_PROGRESS" })).unwrap(),
        QueueState::InProgress
    );
    assert_eq!(
        queue_state(&json!({ "status": "COMPLETED", "error": null })).unwrap(),
        QueueState::Completed
    );
    assert_eq!(
        queue_state(
            &json!({ "status": "COMPLETED", "error": "Request timed out",
                             "error_type": "request_timeout" })
        )
        .unwrap(),
        QueueState::CompletedWithError(ProviderFailure {
            kind: FailureKind::TimedOut,
            message: "Request timed out".into()
        })
    );
    assert!(queue_state(&json!({ "status": "DONE" })).is_err());
}

#[test]
fn a_result_with_a_video_succeeds_and_one_without_fails() {
    let result = json!({ "video": { "url": "https://v3b.fal.media/files/x/out.mp4",
                                    "content_type": "video/mp4", "file_size": 123 },
                         "seed": 7 });
    assert_eq!(
        result_state(&result),
        ProviderJobState::Succeeded {
            video_url: "https://v3b.fal.media/files/x/out.mp4".into()
        }
    );
    assert!(matches!(
        result_state(&json!({ "images": [] })),
        ProviderJobState::Failed(_)
    ));
}

#[test]
fn model_and_request_errors_are_classified_with_their_messages() {
    let now = SystemTime::now();
    let moderated = classify_error(
        422,
        &HeaderMap::new(),
        br#"{"detail":[{"loc":["body","prompt"],"msg":"The prompt was flagged","type":"content_policy_violation"}]}"#,
        now,
    );
    assert_eq!(
        moderated,
        ProviderError::Refused {
            status: 422,
            kind: FailureKind::Moderated,
            message: "prompt: The prompt was flagged".into()
        }
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-fal-error-type",
        HeaderValue::from_static("runner_disconnected"),
    );
    let unavailable = classify_error(
        503,
        &headers,
        br#"{"detail":"Runner disconnected","error_type":"runner_disconnected"}"#,
        now,
    );
    assert!(unavailable.is_transient(), "{unavailable:?}");
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-fal-request-timeout-type",
        HeaderValue::from_static("user"),
    );
    assert!(matches!(
        classify_error(504, &headers, br#"{"detail":"Request timed out"}"#, now),
        ProviderError::Refused {
            kind: FailureKind::TimedOut,
            ..
        }
    ));
    assert!(classify_error(504, &HeaderMap::new(), b"<html>gateway</html>", now).is_transient());
}

#[test]
fn only_an_ingress_5xx_says_the_submit_never_reached_fal() {
    let nginx = b"<html><body><center>503 Service Temporarily Unavailable</center><hr><center>nginx</center></body></html>";
    let now = SystemTime::now();
    assert!(matches!(
        classify_error(503, &HeaderMap::new(), nginx, now),
        ProviderError::NotReceived { .. }
    ));
    // From fal's servers (they set `x-fal-request-id`), or without the
    // ingress's body, the outcome of a submit is unknown.
    let mut from_fal = HeaderMap::new();
    from_fal.insert("x-fal-request-id", HeaderValue::from_static("abc"));
    assert!(matches!(
        classify_error(503, &from_fal, nginx, now),
        ProviderError::Unavailable { .. }
    ));
    assert!(matches!(
        classify_error(
            503,
            &HeaderMap::new(),
            br#"{"detail":"Runner scheduling failure"}"#,
            now
        ),
        ProviderError::Unavailable { .. }
    ));
    assert!(matches!(
        classify_error(500, &HeaderMap::new(), nginx, now),
        ProviderError::Unavailable { .. }
    ));
}

#[test]
fn cancel_answers_in_both_documented_shapes() {
    // No answer of fal's proves that the request ended: the state does.
    for taken in [
        json!({ "status": "OK" }),
        json!({ "success": true }),
        json!({ "status": "CANCELLATION_REQUESTED" }),
    ] {
        assert_eq!(cancel_outcome(&taken), CancelOutcome::Requested, "{taken}");
    }
    for refused in [
        json!({ "status": "ALREADY_COMPLETED" }),
        json!({ "success": false }),
    ] {
        assert_eq!(
            cancel_outcome(&refused),
            CancelOutcome::Refused,
            "{refused}"
        );
    }
    assert_eq!(
        cancel_outcome(&json!({ "status": "NOT_FOUND" })),
        CancelOutcome::NotFound
    );
}

#[test]
fn reconcile_finds_requests_with_every_sent_field_from_the_intent_on() {
    let input = json!({ "prompt": "a kite", "duration": "5" });
    // fal lists the input with its defaults filled in.
    let listed = json!({ "prompt": "a kite", "duration": "5", "enable_safety_checker": true });
    let endpoint = "fal-ai/kite/text-to-video";
    let page = json!({ "has_more": false, "next_cursor": null, "items": [
        { "request_id": "later", "endpoint_id": endpoint, "sent_at": "2026-11-23T12:00:09.250Z", "json_input": listed },
        { "request_id": "first", "endpoint_id": endpoint, "sent_at": "2026-11-23T12:00:01Z", "json_input": listed },
        { "request_id": "before", "endpoint_id": endpoint, "sent_at": "2026-11-23T11:59:00Z", "json_input": listed },
        { "request_id": "elsewhere", "endpoint_id": "fal-ai/kite/image-to-video", "sent_at": "2026-11-23T12:00:02Z", "json_input": listed },
        { "request_id": "other", "endpoint_id": endpoint, "sent_at": "2026-11-23T12:00:00Z", "json_input": { "prompt": "x" } },
    ]});
    let since = unix_seconds("2026-11-23T12:00:00Z").unwrap();
    let mut found = matching_requests(&page, endpoint, &input, since);
    found.sort();
    let ids: Vec<&str> = found.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids, ["first", "later"]);
    assert!(matching_requests(&page, endpoint, &json!({ "prompt": "y" }), since).is_empty());
    assert!(input_unknown_requests(&page, endpoint, since).is_empty());
}

#[test]
fn a_request_listed_without_its_input_is_neither_matched_nor_ruled_out() {
    let endpoint = "fal-ai/kite/text-to-video";
    let page = json!({ "has_more": false, "next_cursor": null, "items": [
        { "request_id": "no_payload", "endpoint_id": endpoint, "sent_at": "2026-11-23T12:00:01Z" },
        { "request_id": "empty_payload", "endpoint_id": endpoint, "sent_at": "2026-11-23T12:00:02Z", "json_input": {} },
        { "request_id": "before", "endpoint_id": endpoint, "sent_at": "2026-11-23T11:00:00Z" },
    ]});
    let since = unix_seconds("2026-11-23T12:00:00Z").unwrap();
    let input = json!({ "prompt": "a kite" });
    assert!(matching_requests(&page, endpoint, &input, since).is_empty());
    let unknown: Vec<String> = input_unknown_requests(&page, endpoint, since)
        .into_iter()
        .map(|job| job.job_id)
        .collect();
    assert_eq!(unknown, ["no_payload", "empty_payload"]);
}

fn key_pair() -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&[7u8; 32]).unwrap()
}

fn signed_headers(
    key: &Ed25519KeyPair,
    request_id: &str,
    timestamp: i64,
    body: &[u8],
) -> HeaderMap {
    let signature = key.sign(&signed_message(
        request_id,
        "user-1",
        &timestamp.to_string(),
        body,
    ));
    let hex: String = signature
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("x-fal-webhook-request-id", request_id.to_owned()),
        ("x-fal-webhook-user-id", "user-1".to_owned()),
        ("x-fal-webhook-timestamp", timestamp.to_string()),
        ("x-fal-webhook-signature", hex),
    ] {
        headers.insert(name, HeaderValue::from_str(&value).unwrap());
    }
    headers
}

#[test]
fn webhooks_verify_against_any_jwks_key_and_forgeries_are_refused() {
    let key = key_pair();
    let public: [u8; 32] = key.public_key().as_ref().try_into().unwrap();
    let jwks = json!({ "keys": [
        { "kty": "RSA", "n": "x", "e": "AQAB" },
        { "kty": "OKP", "crv": "Ed25519", "x": URL_SAFE_NO_PAD.encode([1u8; 32]) },
        { "kty": "OKP", "crv": "Ed25519", "x": URL_SAFE_NO_PAD.encode(public) },
    ]});
    let keys = parse_jwks(jwks.to_string().as_bytes()).unwrap();
    assert_eq!(keys.len(), 2);

    let now = 1_800_000_000;
    let body = json!({ "request_id": "req-1", "status": "OK",
                       "payload": { "video": { "url": "https://v3b.fal.media/files/a.mp4" } } })
    .to_string();
    let verified = verify_webhook(
        &signed_headers(&key, "req-1", now, body.as_bytes()),
        body.as_bytes(),
        &keys,
        now,
    )
    .unwrap();
    assert_eq!(
        verified,
        FalWebhook {
            request_id: "req-1".into(),
            user_id: "user-1".into(),
            state: ProviderJobState::Succeeded {
                video_url: "https://v3b.fal.media/files/a.mp4".into()
            }
        }
    );

    let forged_body = body.replace("a.mp4", "b.mp4");
    assert_eq!(
        verify_webhook(
            &signed_headers(&key, "req-1", now, body.as_bytes()),
            forged_body.as_bytes(),
            &keys,
            now
        ),
        Err(WebhookRejection::BadSignature)
    );
    assert_eq!(
        verify_webhook(
            &signed_headers(&key, "req-1", now - 301, body.as_bytes()),
            body.as_bytes(),
            &keys,
            now
        ),
        Err(WebhookRejection::Stale)
    );
    let stranger = Ed25519KeyPair::from_seed_unchecked(&[9u8; 32]).unwrap();
    assert_eq!(
        verify_webhook(
            &signed_headers(&stranger, "req-1", now, body.as_bytes()),
            body.as_bytes(),
            &keys,
            now
        ),
        Err(WebhookRejection::BadSignature)
    );
    // A signed body about another request is not taken for this one.
    assert!(matches!(
        verify_webhook(
            &signed_headers(&key, "req-2", now, body.as_bytes()),
            body.as_bytes(),
            &keys,
            now
        ),
        Err(WebhookRejection::InvalidBody(_))
    ));
    assert!(parse_jwks(br#"{"keys":[]}"#).is_err());
}

#[test]
fn an_error_webhook_is_a_failure_of_its_kind() {
    let payload = json!({ "request_id": "r", "status": "ERROR", "error": "Invalid status code: 422",
                          "payload": { "detail": [{ "loc": ["body", "prompt"], "msg": "flagged",
                                                    "type": "content_policy_violation" }] } });
    assert_eq!(
        webhook_state(&payload),
        ProviderJobState::Failed(ProviderFailure {
            kind: FailureKind::Moderated,
            message: "Invalid status code: 422: prompt: flagged".into()
        })
    );
}
