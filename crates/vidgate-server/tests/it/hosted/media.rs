//! The kept media a provider fetches through signed URLs, refused once
//! expired or tampered with.

use super::*;

/// Issue 17, item 6: a provider fetches a job's media from vidgate, within
/// its URL's lifetime, through a signed URL of the exact bytes submit
/// checked; the URL lasts the model's start deadline and ten minutes more.
async fn a_provider_fetches_the_kept_media_through_a_signed_url(store: StoreKind) {
    for provider in [Provider::FAL, Provider::REPLICATE] {
        let fake = FakeProviders::start().await;
        let app = app_at(store.clone(), backends_for(&fake, provider, 5.0, 20.0), 2).await;
        let upload = app.upload_png().await;
        let upload_url = upload["url"].as_str().unwrap();
        let uploaded = app.download(upload_url).await;
        let generation = app
            .submit_ok(
                M1_IMAGE_TO_VIDEO,
                json!({ "prompt": "the card comes alive", "image_url": upload_url,
                        "duration": 2, "resolution": "480p" }),
            )
            .await;
        let submitted_at = unix_now();
        let done = app
            .wait_for_status(generation["id"].as_str().unwrap(), &["succeeded", "failed"])
            .await;
        assert_eq!(done["status"], "succeeded", "{provider:?}: {done}");
        let job = &fake.jobs_at(provider)[0];
        let fetches = fake.state.media_fetches.lock().unwrap().clone();
        assert_eq!(fetches.len(), 1, "{provider:?}: {fetches:?}");
        let fetch = &fetches[0];
        assert_eq!(fetch.job_id, job.id);
        assert_eq!(fetch.status, 200, "{provider:?}: {fetch:?}");
        assert_eq!(
            fetch.sha256.as_deref(),
            Some(fake_providers::hex_digest(&uploaded).as_str()),
            "{provider:?}: the bytes submit checked"
        );
        // vidgate's signed URL of its kept copy, never the customer's.
        assert!(
            fetch
                .url
                .starts_with(&format!("{}/files/media/", app.api_base))
                && fetch.url.contains("&signature="),
            "{provider:?}: {}",
            fetch.url
        );
        // The test's start deadline is 30 s; the margin is ten minutes.
        let lifetime = expiry_of(&fetch.url) - submitted_at;
        assert!(
            (600..=632).contains(&lifetime),
            "{provider:?}: a lifetime of {lifetime} s"
        );
    }
}

/// Issue 17, item 6: a media URL handed to a provider is refused with 403
/// once it has expired, and at once when its signature or expiry was
/// changed, when its signature is used for another generation's file, or
/// without its signature. A provider that starts the job after the URL
/// expired cannot fetch the media, and the generation fails and is
/// refunded.
async fn a_media_url_is_refused_after_it_expires_or_when_tampered_with(store: StoreKind) {
    let fake = FakeProviders::start().await;
    // The jobs wait in the provider's queue past their URLs' lifetime.
    fake.switches(|switches| switches.queue_for = Duration::from_secs(9));
    let timeouts = json!({
        "request_seconds": 5,
        "start_seconds": 30,
        "job_seconds": 60,
        "poll_seconds": 0.1,
        "retry_seconds": 20,
        "media_url_seconds": 5,
    });
    let app = app_at(
        store,
        backends_with(&fake, Provider::REPLICATE, timeouts, json!([])),
        2,
    )
    .await;
    let mut handed = Vec::new();
    for prompt in ["the first card", "the second card"] {
        let upload = app.upload_png().await;
        let generation = app
            .submit_ok(
                M1_IMAGE_TO_VIDEO,
                json!({ "prompt": prompt, "image_url": upload["url"],
                        "duration": 2, "resolution": "480p" }),
            )
            .await;
        let id = generation["id"].as_str().unwrap().to_owned();
        let job = recorded_job(&app, &fake, &id).await;
        // Replicate's field for M1's image.
        handed.push((id, job.input["image"].as_str().unwrap().to_owned()));
    }
    let (first_id, first_url) = &handed[0];
    let (_, second_url) = &handed[1];
    let (first_file, first_query) = first_url.split_once('?').unwrap();
    let (second_file, _) = second_url.split_once('?').unwrap();

    let fetched = app.client.get(first_url).send().await.unwrap();
    assert_eq!(fetched.status(), 200, "within its lifetime");
    let (before, signature) = first_url.split_once("signature=").unwrap();
    let flipped = if signature.starts_with('A') { "B" } else { "A" };
    assert_media_refused(
        &app,
        &format!("{before}signature={flipped}{}", &signature[1..]),
        "signature",
    )
    .await;
    let expires = expiry_of(first_url);
    assert_media_refused(
        &app,
        &first_url.replace(
            &format!("expires={expires}"),
            &format!("expires={}", expires + 3600),
        ),
        "signature",
    )
    .await;
    assert_media_refused(&app, &format!("{second_file}?{first_query}"), "signature").await;
    assert_media_refused(&app, first_file, "not signed").await;
    // An escaped spelling, which the file server would decode to the same
    // copy, is no way round the signature.
    let escaped = app
        .client
        .get(first_file.replace("/files/media/", "/files/%6dedia/"))
        .send()
        .await
        .unwrap();
    assert_eq!(escaped.status(), 404, "an escaped spelling");
    // Nor can a customer's request reach the copy by naming it as its own
    // media, signed or not, where submit would read it from storage.
    let held_before = app.account_state(&app.account.account.id).await.held;
    for url in [first_url.as_str(), first_file] {
        let refused = app
            .submit(
                M1_IMAGE_TO_VIDEO,
                json!({ "prompt": "a borrowed card", "image_url": url,
                        "duration": 2, "resolution": "480p" }),
            )
            .await;
        common::assert_invalid_request(refused, "image_url").await;
    }
    assert_eq!(
        app.account_state(&app.account.account.id).await.held,
        held_before
    );

    while unix_now() < expires {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_media_refused(&app, first_url, "expired").await;

    let done = app
        .wait_for_status(first_id, &["succeeded", "failed"])
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    let first_job = recorded_job(&app, &fake, first_id).await;
    let fetches = fake.state.media_fetches.lock().unwrap().clone();
    let refused: Vec<u16> = fetches
        .iter()
        .filter(|fetch| fetch.job_id == first_job.id)
        .map(|fetch| fetch.status)
        .collect();
    assert_eq!(refused, vec![403], "{fetches:?}");
    app.assert_ledger_invariant(&app.account.account.id).await;
}

const M1_IMAGE_TO_VIDEO: &str = "vendor_1/model_1/image-to-video";

/// The `expires` of a signed media URL.
fn expiry_of(url: &str) -> i64 {
    let (_, query) = url.split_once('?').expect("the URL is signed");
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "expires")
        .and_then(|(_, value)| value.parse().ok())
        .expect("the URL has an expiry")
}

/// Asserts that `url` answers 403 `forbidden` with a message naming `why`.
async fn assert_media_refused(app: &TestApp, url: &str, why: &str) {
    let response = app.client.get(url).send().await.unwrap();
    assert_eq!(response.status(), 403, "{url}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(why), "{url}: {message}");
}

on_both_stores!(
    a_provider_fetches_the_kept_media_through_a_signed_url,
    a_media_url_is_refused_after_it_expires_or_when_tampered_with,
);
