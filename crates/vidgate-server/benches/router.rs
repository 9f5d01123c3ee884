//! The fixed cost of what vidgate does around every request, measured in
//! process. Requests go through the service the API listener answers with
//! (`RunningServer::http_service`: the envelope, the panic guard, the
//! routes and their layers), one after another on one core, without
//! sockets; the reference is a bare axum router answering the same bytes,
//! timed in the same run. With no kernel and no load generator in the
//! figures the ratios hold from run to run, where `hot_paths -- reads` (wrk
//! over loopback, which shares the machine's cores) moves by ±0.1.
//!
//! Run with `cargo bench -p vidgate-server --bench router`;
//! `VIDGATE_BENCH_ITERATIONS` sets the requests per round (200,000), and
//! words after `--` keep only the requests whose names contain one of them
//! (`-- limit=20` for the list alone).
//! Under `valgrind --tool=callgrind`, the difference between two runs'
//! instruction counts divided by the difference of their requests is what
//! a request costs without the start-up (BENCHMARKS.md, sessions 17 and 18).

mod common;

use std::net::SocketAddr;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::routing::get;
use tower::{Service, ServiceExt};
use vidgate_server::ServerOptions;
use vidgate_server::limits::PublicRateLimit;
use vidgate_test_support::seeded_generation;

const ROUNDS: usize = 3;

/// Finished generations seeded into the bench account, so that its list
/// reads a full page of an account with history (issue 42 compares a
/// 20-row page with a single GET).
const SEEDED_GENERATIONS: i64 = 1_000;

/// When the seeded generations were created, one per millisecond before
/// it: older than anything the bench submits, so the page is stable.
const SEED_EPOCH_MILLIS: i64 = 1_700_000_000_000;

/// One request shape, sent to vidgate and to the bare router.
struct Case {
    name: &'static str,
    vidgate: Request<Body>,
    bare_path: &'static str,
    expected: StatusCode,
}

/// `request` with the peer address the listener attaches (the fair-use
/// bucket of the public routes reads it).
fn with_peer(mut request: Request<Body>) -> Request<Body> {
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// A copy of a bodiless `request`, with the peer address.
fn copy(request: &Request<Body>) -> Request<Body> {
    let mut copied = Request::builder()
        .method(request.method().clone())
        .uri(request.uri().clone())
        .body(Body::empty())
        .unwrap();
    *copied.headers_mut() = request.headers().clone();
    with_peer(copied)
}

/// Nanoseconds per request over `iterations` requests, each checked for
/// its status. Each request is copied from `template` inside the loop, a
/// cost both sides pay alike.
async fn time<S>(
    service: &S,
    template: &Request<Body>,
    expected: StatusCode,
    iterations: u32,
) -> f64
where
    S: Service<
            Request<Body>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone,
{
    let started = Instant::now();
    for _ in 0..iterations {
        let response = service.clone().oneshot(copy(template)).await.unwrap();
        assert_eq!(response.status(), expected, "{}", template.uri());
    }
    started.elapsed().as_nanos() as f64 / f64::from(iterations)
}

/// Inserts `count` succeeded generations of `account_id` into the SQLite
/// database at `database_url` in one statement: submitting them through
/// the API would take minutes under callgrind.
async fn seed_finished_generations(database_url: &str, account_id: &str, count: i64) {
    let pool = sqlx::SqlitePool::connect(database_url).await.unwrap();
    sqlx::query(seeded_generation::SQLITE_INSERT)
        .bind(account_id)
        .bind(1_i64)
        .bind(count)
        .bind(SEED_EPOCH_MILLIS)
        .bind(seeded_generation::INPUT)
        .bind(seeded_generation::OUTPUT)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

async fn body_of(response: axum::response::Response) -> Bytes {
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
}

#[tokio::main]
async fn main() {
    // The binary's logging, as `vidgate serve` sets it up without a
    // terminal: every request's span is formatted by it.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let iterations: u32 = std::env::var("VIDGATE_BENCH_ITERATIONS")
        .map(|text| text.parse().expect("a number of requests"))
        .unwrap_or(200_000);

    let data_dir = tempfile::tempdir().unwrap();
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut options = ServerOptions::new(listen, data_dir.path().to_path_buf());
    let database_url = vidgate_server::default_database_url(data_dir.path());
    options.queue.workers = 0;
    // The fair-use bucket is taken on every public request as usual; its
    // limit is raised only so that it never refuses one.
    options.public_rate_limit = PublicRateLimit {
        per_second: u32::MAX,
        burst: u32::MAX,
    };
    let server = vidgate_server::start(options).await.unwrap();
    let service = server.http_service().expect("an API node");
    let account = common::unlimited_account(&server).await;
    let bearer = HeaderValue::from_str(&format!("Bearer {}", account.api_key)).unwrap();
    seed_finished_generations(&database_url, &account.account.id, SEEDED_GENERATIONS).await;

    // What the bare router answers: vidgate's own answers, read once.
    let send = |request: Request<Body>| service.clone().oneshot(with_peer(request));
    let model_path = "/api/v1/models/vendor_1/model_1";
    let model = send(Request::get(model_path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let etag = model.headers()[header::ETAG].clone();
    let model_bytes = body_of(model).await;
    let submitted = send(
        Request::post("/api/v1/run/vendor_1/model_1/text-to-video")
            .header(header::AUTHORIZATION, bearer.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"prompt":"a benchmark","duration":5}"#))
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(submitted.status(), StatusCode::ACCEPTED);
    let generation: serde_json::Value = serde_json::from_slice(&body_of(submitted).await).unwrap();
    let generation_path = format!("/api/v1/generations/{}", generation["id"].as_str().unwrap());
    // The answer's bytes of an authorized GET, for the bare router.
    let answer_of = |path: String| {
        let request = Request::get(path)
            .header(header::AUTHORIZATION, bearer.clone())
            .body(Body::empty())
            .unwrap();
        async { body_of(send(request).await.unwrap()).await }
    };
    let generation_bytes = answer_of(generation_path.clone()).await;
    let list_path = "/api/v1/generations?limit=20";
    let list_bytes = answer_of(list_path.to_owned()).await;

    let bare = {
        let etag = etag.clone();
        axum::Router::new()
            .route(
                "/304",
                get(move || {
                    let etag = etag.clone();
                    async move { (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]) }
                }),
            )
            .route(
                "/model",
                get(move || {
                    let body = model_bytes.clone();
                    async move { ([(header::CONTENT_TYPE, "application/json")], body) }
                }),
            )
            .route(
                "/generation",
                get(move || {
                    let body = generation_bytes.clone();
                    async move { ([(header::CONTENT_TYPE, "application/json")], body) }
                }),
            )
            .route(
                "/list",
                get(move || {
                    let body = list_bytes.clone();
                    async move { ([(header::CONTENT_TYPE, "application/json")], body) }
                }),
            )
    };

    let cases = [
        Case {
            name: "GET /models/{id} with If-None-Match (304)",
            vidgate: Request::get(model_path)
                .header(header::IF_NONE_MATCH, etag)
                .body(Body::empty())
                .unwrap(),
            bare_path: "/304",
            expected: StatusCode::NOT_MODIFIED,
        },
        Case {
            name: "GET /models/{id}",
            vidgate: Request::get(model_path).body(Body::empty()).unwrap(),
            bare_path: "/model",
            expected: StatusCode::OK,
        },
        Case {
            name: "unknown route (404; the bare router's empty 404)",
            vidgate: Request::get("/api/v1/nothing/here")
                .body(Body::empty())
                .unwrap(),
            bare_path: "/nothing/here",
            expected: StatusCode::NOT_FOUND,
        },
        Case {
            name: "GET /generations/{id} (SQLite; the bare router serves its bytes)",
            vidgate: Request::get(&generation_path)
                .header(header::AUTHORIZATION, bearer.clone())
                .body(Body::empty())
                .unwrap(),
            bare_path: "/generation",
            expected: StatusCode::OK,
        },
        Case {
            name: "GET /generations?limit=20 (SQLite, an account of 1,001 generations; the bare router serves its bytes)",
            vidgate: Request::get(list_path)
                .header(header::AUTHORIZATION, bearer)
                .body(Body::empty())
                .unwrap(),
            bare_path: "/list",
            expected: StatusCode::OK,
        },
    ];

    // Cargo passes `--bench` to a bench without a harness; any other word
    // names the requests to keep.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|word| !word.starts_with("--"))
        .collect();
    let cases: Vec<Case> = cases
        .into_iter()
        .filter(|case| wanted.is_empty() || wanted.iter().any(|word| case.name.contains(word)))
        .collect();
    println!(
        "In process, one request at a time: {iterations} requests per round, best of {ROUNDS} rounds, nanoseconds per request\n"
    );
    println!("| request | vidgate | bare axum router | ratio (bare / vidgate) |");
    println!("|---|---|---|---|");
    for case in &cases {
        let bare_request = Request::get(case.bare_path).body(Body::empty()).unwrap();
        let mut best_vidgate = f64::MAX;
        let mut best_bare = f64::MAX;
        // Alternating rounds, so that a burst of other work on the machine
        // lands on both.
        for _ in 0..ROUNDS {
            best_bare = best_bare.min(time(&bare, &bare_request, case.expected, iterations).await);
            best_vidgate =
                best_vidgate.min(time(&service, &case.vidgate, case.expected, iterations).await);
        }
        println!(
            "| {} | {best_vidgate:.0} | {best_bare:.0} | {:.2} |",
            case.name,
            best_bare / best_vidgate
        );
    }
    println!(
        "\nOne at a time, a read that goes through sqlx waits for SQLite's connection thread on every statement; under load those waits overlap (`cargo bench -p vidgate --bench hot_paths -- reads lists`)."
    );
    server.shutdown().await;
}
