//! The HTTP listener's bounds: a client that trickles its request head or
//! body is cut off at its deadline, and connections past the cap wait until
//! one closes. The deadlines are short here and the trickles long, so each
//! test asserts where the cut came, not how long anything took.

// These tests are about the listener, not the store, so they run on SQLite
// only and leave the harness's `on_both_stores!` unused.
#[allow(unused_macros, unused_imports)]
use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{StoreKind, TestApp, TestSettings, spawn_app_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vidgate_server::limits::HttpLimits;

const QUOTE_PATH: &str = "/api/v1/quote/vendor_1/model_1/text-to-video";
const QUOTE_BODY: &str = r#"{"prompt": "a red kite", "duration": 3}"#;

async fn app_with_limits(limits: HttpLimits) -> TestApp {
    spawn_app_with(TestSettings {
        http: limits,
        ..TestSettings::new(StoreKind::Sqlite)
    })
    .await
}

fn short_deadlines() -> HttpLimits {
    HttpLimits {
        header_read_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..HttpLimits::default()
    }
}

/// What a trickle came to: how many of its bytes were sent before the
/// server answered or closed, and what it answered.
struct Trickled {
    bytes_sent: usize,
    answer: String,
}

/// Sends `prefix` at once, then `trickle` one byte every 100 ms, watching
/// between bytes for the server to answer or close the connection.
async fn trickle(app: &TestApp, prefix: &str, trickle: &[u8]) -> Trickled {
    let mut stream = TcpStream::connect(app.server.local_addr.unwrap())
        .await
        .unwrap();
    stream.write_all(prefix.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    for (sent, byte) in trickle.iter().enumerate() {
        if stream.write_all(&[*byte]).await.is_err() {
            return Trickled {
                bytes_sent: sent,
                answer: String::from_utf8_lossy(&answer).into_owned(),
            };
        }
        match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await {
            Err(_) => continue,
            Ok(Ok(read)) => {
                answer.extend_from_slice(&buffer[..read]);
                return Trickled {
                    bytes_sent: sent + 1,
                    answer: String::from_utf8_lossy(&answer).into_owned(),
                };
            }
            Ok(Err(_)) => {
                return Trickled {
                    bytes_sent: sent + 1,
                    answer: String::new(),
                };
            }
        }
    }
    // Everything was sent: read the answer the server gave.
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    Trickled {
        bytes_sent: trickle.len(),
        answer: String::from_utf8_lossy(&answer).into_owned(),
    }
}

#[tokio::test]
async fn a_trickled_request_head_is_cut_off() {
    let app = app_with_limits(short_deadlines()).await;
    // 100 bytes at 10 a second take ten times the one-second deadline.
    let header_value = vec![b'a'; 100];
    let trickled = trickle(
        &app,
        "GET /api/v1/models HTTP/1.1\r\nHost: vidgate\r\nX-Slow: ",
        &[header_value.as_slice(), b"\r\n\r\n"].concat(),
    )
    .await;
    assert!(
        trickled.bytes_sent < header_value.len(),
        "the head was read to its end ({} bytes)",
        trickled.bytes_sent
    );
    assert!(!trickled.answer.contains(" 200 "), "{}", trickled.answer);

    // A client that sends its head at once is served as before.
    let models = app.get_without_key("/models").await;
    assert_eq!(models.status(), 200);
}

#[tokio::test]
async fn a_trickled_request_body_is_cut_off() {
    let app = app_with_limits(short_deadlines()).await;
    // The body is a valid quote padded with 100 spaces, so that only its
    // pace can refuse it.
    let body = format!("{QUOTE_BODY}{}", " ".repeat(100));
    let head = format!(
        "POST {QUOTE_PATH} HTTP/1.1\r\nHost: vidgate\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );

    let at_once = trickle(&app, &format!("{head}{body}"), b"").await;
    assert!(
        at_once.answer.starts_with("HTTP/1.1 200"),
        "{}",
        at_once.answer
    );

    let trickled = trickle(&app, &head, body.as_bytes()).await;
    assert!(
        trickled.bytes_sent < body.len(),
        "the body was read to its end ({} bytes)",
        trickled.bytes_sent
    );
    assert!(!trickled.answer.contains(" 200 "), "{}", trickled.answer);
}

#[tokio::test]
async fn connections_past_the_cap_wait_until_one_closes() {
    let app = app_with_limits(HttpLimits {
        max_connections: 2,
        ..HttpLimits::default()
    })
    .await;
    let address = app.server.local_addr.unwrap();
    // Two connections that send nothing hold both slots.
    let first = TcpStream::connect(address).await.unwrap();
    let _second = TcpStream::connect(address).await.unwrap();

    let first_closed = Arc::new(AtomicBool::new(false));
    let request = {
        let first_closed = first_closed.clone();
        let client = reqwest::Client::new();
        let url = app.url("/models");
        tokio::spawn(async move {
            let response = client.get(url).send().await.unwrap();
            (response.status(), first_closed.load(Ordering::SeqCst))
        })
    };
    // Give the third connection every chance to be served early.
    tokio::time::sleep(Duration::from_millis(500)).await;
    first_closed.store(true, Ordering::SeqCst);
    drop(first);

    let (status, answered_after_close) = request.await.unwrap();
    assert_eq!(status, 200);
    assert!(
        answered_after_close,
        "a third connection was served while two held the cap"
    );
}

/// Whether the server closed `stream` within `within`, reading whatever it
/// sent before.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn one_address_holds_only_its_share_of_the_connections() {
    let app = app_with_limits(HttpLimits {
        max_connections: 64,
        max_connections_per_address: 8,
        ..HttpLimits::default()
    })
    .await;
    let address = app.server.local_addr.unwrap();
    // Eight idle connections from 127.0.0.1 hold its share.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(address).await.unwrap());
    }
    // Its ninth is closed at once, before it could send anything.
    let mut ninth = TcpStream::connect(address).await.unwrap();
    assert!(closed_within(&mut ninth, Duration::from_secs(3)).await);
    // Another address is served as usual.
    let bystander = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let response = bystander.get(app.url("/models")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // A connection given back makes room for the address again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = reqwest::get(app.url("/models")).await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_crowded_listener_closes_silent_connections_sooner() {
    let app = app_with_limits(HttpLimits {
        header_read_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        max_connections: 8,
        max_connections_per_address: 8,
        ..HttpLimits::default()
    })
    .await;
    let address = app.server.local_addr.unwrap();
    // Silent connections hold every slot; their timeouts allow a minute.
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(address).await.unwrap());
    }
    // Crowded, the listener closes silent ones after seconds, until it is
    // no longer crowded, and a request finds a slot.
    let response = reqwest::Client::new()
        .get(app.url("/models"))
        .timeout(Duration::from_secs(15))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut closed = 0;
    for stream in &mut silent {
        if closed_within(stream, Duration::from_millis(100)).await {
            closed += 1;
        }
    }
    assert!((1..8).contains(&closed), "{closed} of 8 closed");
}
