//! The request-rate limit shared through Redis: two limiters (two nodes) on
//! one Redis share each key's bucket. Skipped without `VIDGATE_TEST_REDIS_URL`.

use std::time::Duration;

use vidgate_server::rate_limit::CallerRateLimiter;

const REDIS_URL_VARIABLE: &str = "VIDGATE_TEST_REDIS_URL";

fn redis_url(test_name: &str) -> Option<String> {
    match std::env::var(REDIS_URL_VARIABLE) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipping {test_name}: set {REDIS_URL_VARIABLE} (e.g. redis://127.0.0.1:6379) to run it"
            );
            None
        }
    }
}

/// A key no other test run uses, so runs never share a bucket.
fn unique_key() -> String {
    format!("key_test_{}", vidgate_server::ids::random_token(12))
}

#[tokio::test]
async fn two_nodes_share_one_bucket_per_key() {
    let Some(url) = redis_url("two_nodes_share_one_bucket_per_key") else {
        return;
    };
    let nodes = [
        CallerRateLimiter::shared(&url).await.unwrap(),
        CallerRateLimiter::shared(&url).await.unwrap(),
    ];
    let key = unique_key();
    let mut allowed = 0;
    for request in 0..25 {
        let status = nodes[request % 2].check(&key, 1, 20).await;
        assert_eq!(status.limit, 20);
        if status.allowed {
            allowed += 1;
            assert_eq!(status.remaining, 20 - allowed, "after {allowed} requests");
        } else {
            assert_eq!(status.remaining, 0);
            // One token a second: the next is at most a second away.
            assert!(status.reset > Duration::ZERO && status.reset <= Duration::from_secs(1));
        }
    }
    assert_eq!(allowed, 20);
    // Another key has its own bucket.
    assert!(nodes[1].check(&unique_key(), 1, 20).await.allowed);
}

#[tokio::test]
async fn a_shared_bucket_refills_at_the_accounts_rate() {
    let Some(url) = redis_url("a_shared_bucket_refills_at_the_accounts_rate") else {
        return;
    };
    let limiter = CallerRateLimiter::shared(&url).await.unwrap();
    let key = unique_key();
    assert!(limiter.check(&key, 10, 2).await.allowed);
    assert!(limiter.check(&key, 10, 2).await.allowed);
    assert!(!limiter.check(&key, 10, 2).await.allowed);
    // Ten tokens a second: one is back after a tenth of a second.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(limiter.check(&key, 10, 2).await.allowed);
}

#[tokio::test]
async fn an_unreachable_redis_is_refused_at_start() {
    // Port 1 is privileged and unused on a test machine: nothing answers.
    assert!(
        CallerRateLimiter::shared("redis://127.0.0.1:1")
            .await
            .is_err()
    );
}

/// Redis going away at request time loosens the limit to this node's bucket
/// instead of failing requests. Needs `redis-server` on the PATH to run a
/// Redis of its own that it can stop.
#[tokio::test]
async fn a_redis_outage_falls_back_to_the_nodes_own_bucket() {
    if redis_url("a_redis_outage_falls_back_to_the_nodes_own_bucket").is_none() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server runs (CI sets VIDGATE_TEST_REDIS_URL only where Redis is installed)");
    let url = format!("redis://127.0.0.1:{port}");
    let mut limiter = None;
    for _ in 0..50 {
        if let Ok(connected) = CallerRateLimiter::shared(&url).await {
            limiter = Some(connected);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let limiter = limiter.expect("the private Redis answers");
    let key = unique_key();
    assert!(limiter.check(&key, 1, 2).await.allowed);
    server.kill().unwrap();
    server.wait().unwrap();

    // The local bucket is fresh, so it allows its full burst, then refuses.
    let started = std::time::Instant::now();
    assert!(limiter.check(&key, 1, 2).await.allowed);
    assert!(limiter.check(&key, 1, 2).await.allowed);
    assert!(!limiter.check(&key, 1, 2).await.allowed);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the fallback answered only after {:?}",
        started.elapsed()
    );
}

/// An account starts at most `CHECKOUT_BURST` Stripe Checkout Sessions at
/// once (its keys made them at ten a second each); the next is answered
/// 429 with `Retry-After` and reaches no one, a refused amount takes none
/// of them, and another account is not held back.
#[tokio::test]
async fn checkout_sessions_are_limited_per_account() {
    use crate::common::{StoreKind, TestSettings, spawn_app_with};
    use crate::fake_stripe::{FakeStripe, STRIPE_SECRET_KEY, STRIPE_WEBHOOK_SECRET};
    use serde_json::json;
    use vidgate_server::rate_limit::CHECKOUT_BURST;
    use vidgate_server::stripe::{CheckoutAmounts, StripeSettings};

    let fake = FakeStripe::start().await;
    let app = spawn_app_with(TestSettings {
        stripe: Some(StripeSettings {
            secret_key: STRIPE_SECRET_KEY.into(),
            webhook_secret: STRIPE_WEBHOOK_SECRET.into(),
            api_url: fake.base_url.clone(),
            amounts: CheckoutAmounts::default(),
        }),
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await;
    let checkout = |key: String, amount: &'static str| {
        let app = &app;
        async move {
            app.post_json("/account/checkout", &key, &json!({ "amount_usd": amount }))
                .await
        }
    };
    let refused_amount = checkout(app.key().to_owned(), "lots").await;
    assert_eq!(refused_amount.status(), reqwest::StatusCode::BAD_REQUEST);
    for _ in 0..CHECKOUT_BURST {
        let started = checkout(app.key().to_owned(), "20.00").await;
        assert_eq!(started.status(), reqwest::StatusCode::CREATED);
    }
    // A second key of the account draws on the same sessions.
    let second_key = vidgate_server::application::accounts::create_api_key(
        app.server.store.as_ref(),
        &app.account.account.id,
        "second",
    )
    .await
    .unwrap();
    let refused = checkout(second_key.api_key.clone(), "20.00").await;
    assert_eq!(refused.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(fake.create_requests().len(), CHECKOUT_BURST as usize);

    let other = app.new_account(10).await;
    let started = checkout(other.api_key.clone(), "20.00").await;
    assert_eq!(started.status(), reqwest::StatusCode::CREATED);
}
