//! Shares that no one client may take whole: the media-fetch slots kept for
//! accounts (an account that cannot pay is refused before it fetches), the
//! anonymous fetch cap per client network, answered as the limit on one
//! client that it is (429 `rate_limited`).

use crate::common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn image_to_video_body(image_url: &str) -> Value {
    json!({
        "prompt": "the picture comes alive",
        "image_url": image_url,
        "duration": 2,
        "resolution": "480p",
        "generate_audio": false,
    })
}

/// An account without the money for a request with media is refused with
/// 402 before any of its media is fetched, so it holds none of the fetch
/// slots kept for accounts; an account with money fetches and is accepted.
async fn an_account_that_cannot_pay_is_refused_before_its_media_is_fetched(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let (pictures, requests) = picture_server().await;
    let penniless = app.new_account(0).await;
    let response = app
        .client
        .post(app.url("/run/vendor_1/model_1/image-to-video"))
        .bearer_auth(&penniless.api_key)
        .json(&image_to_video_body(&format!("{pictures}/card.png")))
        .send()
        .await
        .unwrap();
    assert_insufficient_balance(response).await;
    assert_eq!(requests.load(Ordering::SeqCst), 0, "the media was fetched");

    assert_submit_with_a_picture_is_accepted(&app, &pictures).await;
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

/// Submits an image-to-video request naming `pictures`' card with the
/// app's paying account, and asserts it was accepted.
async fn assert_submit_with_a_picture_is_accepted(app: &TestApp, pictures: &str) {
    let accepted = app
        .submit(
            "vendor_1/model_1/image-to-video",
            image_to_video_body(&format!("{pictures}/card.png")),
        )
        .await;
    assert_eq!(accepted.status(), StatusCode::ACCEPTED);
}

/// A submit that repeats an accepted one's idempotency key is replayed, even
/// once the account's balance no longer covers a new one.
async fn a_replay_with_media_is_answered_after_the_balance_is_spent(store: StoreKind) {
    let app = spawn_app_without_workers(store).await;
    let (pictures, _) = picture_server().await;
    let body = image_to_video_body(&format!("{pictures}/card.png"));
    let quoted: Value = app
        .client
        .post(app.url("/quote/vendor_1/model_1/image-to-video"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Prices are whole cents, so the dollars convert exactly.
    let price = (quoted["cost"]["amount_usd"].as_f64().unwrap() * 1_000_000.0).round() as i64;
    let exact = vidgate_server::application::accounts::create_account(
        app.server.store.as_ref(),
        "exact",
        vidgate_core::Micros(price),
    )
    .await
    .unwrap();
    let submit = || {
        app.client
            .post(app.url("/run/vendor_1/model_1/image-to-video"))
            .bearer_auth(&exact.api_key)
            .header("idempotency-key", "once")
            .json(&body)
            .send()
    };
    let first = submit().await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value = first.json().await.unwrap();
    let replay = submit().await.unwrap();
    assert_eq!(replay.status(), StatusCode::ACCEPTED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["id"], first["id"]);
}

on_both_stores!(
    an_account_that_cannot_pay_is_refused_before_its_media_is_fetched,
    a_replay_with_media_is_answered_after_the_balance_is_spent,
);

/// Anonymous quotes are capped per client network: quotes from two /64s
/// of one IPv6 /48 hold that network's fetch slots, and a third /64 of it
/// is refused as busy, while another /48 still gets a slot.
#[tokio::test]
async fn anonymous_quotes_from_one_ipv6_48_share_the_fetch_cap() {
    let trickle = trickling_server().await;
    let app = spawn_app_with(TestSettings {
        workers: 0,
        trusted_proxies: vec!["127.0.0.1/32".parse().unwrap()],
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    let quote_from = |client: &str, clip: &str| {
        app.client
            .post(app.url("/quote/vendor_1/model_1/reference-to-video"))
            .header("x-forwarded-for", client)
            .timeout(Duration::from_secs(60))
            .json(&json!({
                "prompt": "p",
                "reference_video_urls": [format!("{trickle}/{clip}.mp4")],
            }))
            .send()
    };
    // The per-client cap is two fetches.
    let holding: Vec<_> = ["2001:db8:1:1::1", "2001:db8:1:2::1"]
        .into_iter()
        .enumerate()
        .map(|(index, client)| tokio::spawn(quote_from(client, &format!("held-{index}"))))
        .collect();
    // Until both hold their slots.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let refused = quote_from("2001:db8:1:3::1", "third").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    // A limit on one client network: 429, not the node's 503.
    assert!(refused.headers().contains_key("retry-after"));
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
    // Another /48 is another client: its fetch starts (and trickles on).
    let elsewhere = tokio::time::timeout(
        Duration::from_secs(4),
        quote_from("2001:db8:2:1::1", "elsewhere"),
    )
    .await;
    assert!(
        elsewhere.is_err(),
        "another network's quote was not fetched: {elsewhere:?}"
    );
    for quote in holding {
        quote.abort();
    }
}

/// Issue 42, item 4: sixteen anonymous quotes from one address, each naming
/// a slow, large reference video. The address's two fetches run on; the
/// fourteen others are refused for the address's own limit, as 429
/// `rate_limited` with `Retry-After` (not 503, which says the model is
/// down), and a paying customer's submit with media is accepted meanwhile.
#[tokio::test]
async fn a_flood_of_slow_quotes_from_one_address_is_answered_429_and_submits_go_on() {
    let trickle = trickling_server().await;
    let (pictures, _) = picture_server().await;
    let app = spawn_app_without_workers(StoreKind::Sqlite).await;
    let (answered, mut answers) = tokio::sync::mpsc::unbounded_channel();
    let flood: Vec<_> = (0..16)
        .map(|index| {
            let request = app
                .client
                .post(app.url("/quote/vendor_1/model_1/reference-to-video"))
                .timeout(Duration::from_secs(120))
                .json(&json!({
                    "prompt": "p",
                    "reference_video_urls": [format!("{trickle}/large-{index}.mp4")],
                }));
            let answered = answered.clone();
            tokio::spawn(async move {
                let _ = answered.send(request.send().await.unwrap());
            })
        })
        .collect();
    // The two quotes that hold the address's fetches never end (their
    // videos trickle a byte a second), so the first fourteen answers are
    // the refusals.
    for _ in 0..14 {
        let refused = answers.recv().await.unwrap();
        let retry_after = refused
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().parse::<u64>().unwrap());
        assert!(
            retry_after.is_some_and(|seconds| seconds >= 1),
            "{retry_after:?}"
        );
        let body = assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited", None).await;
        assert_eq!(
            body.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["error"],
            "{body}"
        );
    }
    // While the address still holds its fetches, a paying customer's
    // submit fetches its own media and is accepted.
    assert_submit_with_a_picture_is_accepted(&app, &pictures).await;
    assert!(answers.try_recv().is_err(), "a held quote was answered");
    for quote in flood {
        quote.abort();
    }
}
