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
use vidgate_server::http::HttpService;
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

/// Where the bench reads one model, with and without its ETag.
const MODEL_PATH: &str = "/api/v1/models/vendor_1/model_1";

/// The page of the seeded account's list the bench reads.
const LIST_PATH: &str = "/api/v1/generations?limit=20";

/// A vidgate node in process, the account the bench uses and the
/// directory its database lives in, which must outlive the node.
struct BenchServer {
    server: vidgate_server::RunningServer,
    bearer: HeaderValue,
    _data_dir: tempfile::TempDir,
}

/// What vidgate answered to the requests the bench times, read once so
/// that the bare router can answer the same bytes.
struct VidgateAnswers {
    etag: HeaderValue,
    model_bytes: Bytes,
    generation_path: String,
    generation_bytes: Bytes,
    list_bytes: Bytes,
}

/// Sets up logging as the binary does, so that every request's span costs
/// what it costs in production.
fn set_up_logging_as_vidgate_serve_does() {
    // The binary's logging, as `vidgate serve` sets it up without a
    // terminal: every request's span is formatted by it.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
}

/// Reads the requests per round from `VIDGATE_BENCH_ITERATIONS`, so that a
/// quick run or a run under callgrind can ask for fewer.
fn iterations_from_environment() -> u32 {
    std::env::var("VIDGATE_BENCH_ITERATIONS")
        .map(|text| text.parse().expect("a number of requests"))
        .unwrap_or(200_000)
}

/// Starts a node without workers and with a fair-use limit that never
/// refuses, and gives it an unlimited account with a history of finished
/// generations, so that the timed reads see an account like a real one.
async fn start_server_with_seeded_account() -> BenchServer {
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
    let account = common::unlimited_account(&server).await;
    let bearer = HeaderValue::from_str(&format!("Bearer {}", account.api_key)).unwrap();
    seed_finished_generations(&database_url, &account.account.id, SEEDED_GENERATIONS).await;
    BenchServer {
        server,
        bearer,
        _data_dir: data_dir,
    }
}

/// Reads vidgate's answers once (the model and its ETag, a submitted
/// generation and the list page), so that the bare router answers the
/// same bytes.
async fn read_vidgate_answers_once(
    service: &impl HttpService,
    bearer: &HeaderValue,
) -> VidgateAnswers {
    // What the bare router answers: vidgate's own answers, read once.
    let send = |request: Request<Body>| service.clone().oneshot(with_peer(request));
    let model = send(Request::get(MODEL_PATH).body(Body::empty()).unwrap())
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
    let list_bytes = answer_of(LIST_PATH.to_owned()).await;
    VidgateAnswers {
        etag,
        model_bytes,
        generation_path,
        generation_bytes,
        list_bytes,
    }
}

/// Builds the reference: a bare axum router that answers each case with
/// vidgate's bytes and nothing around them.
fn bare_router_with_vidgate_answers(answers: &VidgateAnswers) -> axum::Router {
    let etag = answers.etag.clone();
    let model_bytes = answers.model_bytes.clone();
    let generation_bytes = answers.generation_bytes.clone();
    let list_bytes = answers.list_bytes.clone();
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
}

/// Builds every request shape the bench times, each with the bare
/// router's path that answers it the same way.
fn all_cases(answers: &VidgateAnswers, bearer: HeaderValue) -> [Case; 5] {
    [
        Case {
            name: "GET /models/{id} with If-None-Match (304)",
            vidgate: Request::get(MODEL_PATH)
                .header(header::IF_NONE_MATCH, answers.etag.clone())
                .body(Body::empty())
                .unwrap(),
            bare_path: "/304",
            expected: StatusCode::NOT_MODIFIED,
        },
        Case {
            name: "GET /models/{id}",
            vidgate: Request::get(MODEL_PATH).body(Body::empty()).unwrap(),
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
            vidgate: Request::get(&answers.generation_path)
                .header(header::AUTHORIZATION, bearer.clone())
                .body(Body::empty())
                .unwrap(),
            bare_path: "/generation",
            expected: StatusCode::OK,
        },
        Case {
            name: "GET /generations?limit=20 (SQLite, an account of 1,001 generations; the bare router serves its bytes)",
            vidgate: Request::get(LIST_PATH)
                .header(header::AUTHORIZATION, bearer)
                .body(Body::empty())
                .unwrap(),
            bare_path: "/list",
            expected: StatusCode::OK,
        },
    ]
}

/// Keeps the cases the command line names, so that one request can be
/// timed alone.
fn cases_named_on_the_command_line(cases: [Case; 5]) -> Vec<Case> {
    // Cargo passes `--bench` to a bench without a harness; any other word
    // names the requests to keep.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|word| !word.starts_with("--"))
        .collect();
    cases
        .into_iter()
        .filter(|case| wanted.is_empty() || wanted.iter().any(|word| case.name.contains(word)))
        .collect()
}

/// Times every case on vidgate and on the bare router and prints the
/// table of their best rounds and ratios.
async fn print_table(
    service: &impl HttpService,
    bare: &axum::Router,
    cases: &[Case],
    iterations: u32,
) {
    println!(
        "In process, one request at a time: {iterations} requests per round, best of {ROUNDS} rounds, nanoseconds per request\n"
    );
    println!("| request | vidgate | bare axum router | ratio (bare / vidgate) |");
    println!("|---|---|---|---|");
    for case in cases {
        let bare_request = Request::get(case.bare_path).body(Body::empty()).unwrap();
        let mut best_vidgate = f64::MAX;
        let mut best_bare = f64::MAX;
        // Alternating rounds, so that a burst of other work on the machine
        // lands on both.
        for _ in 0..ROUNDS {
            best_bare = best_bare.min(time(bare, &bare_request, case.expected, iterations).await);
            best_vidgate =
                best_vidgate.min(time(service, &case.vidgate, case.expected, iterations).await);
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
}

#[tokio::main]
async fn main() {
    set_up_logging_as_vidgate_serve_does();
    let iterations = iterations_from_environment();
    let BenchServer {
        server,
        bearer,
        _data_dir,
    } = start_server_with_seeded_account().await;
    let service = server.http_service().expect("an API node");
    let answers = read_vidgate_answers_once(&service, &bearer).await;
    let bare = bare_router_with_vidgate_answers(&answers);
    let cases = cases_named_on_the_command_line(all_cases(&answers, bearer));
    print_table(&service, &bare, &cases, iterations).await;
    server.shutdown().await;
}
