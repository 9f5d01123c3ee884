//! Submit and get throughput and latency of the real server over loopback
//! HTTP. Run with `cargo bench -p vidgate-server --bench api`; set
//! `VIDGATE_BENCH_DATABASE_URL=postgres://…` to measure another store.
//! Workers are off so the figures are the API and the store, not rendering.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use vidgate_server::ServerOptions;

const CLIENTS: usize = 16;
const REQUESTS_PER_CLIENT: usize = 250;

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index]
}

fn report(name: &str, mut latencies: Vec<Duration>, elapsed: Duration) {
    latencies.sort();
    println!(
        "{name:<7} {:>6} requests  {:>8.0} req/s  p50 {:>6.2} ms  p90 {:>6.2} ms  p99 {:>6.2} ms  max {:>6.2} ms",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.90).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3,
    );
}

/// Runs `CLIENTS` concurrent loops of `REQUESTS_PER_CLIENT` requests each.
async fn load<F, Fut>(make_request: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = reqwest::StatusCode> + Send,
{
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..CLIENTS {
        let make_request = make_request.clone();
        clients.spawn(async move {
            let mut latencies = Vec::with_capacity(REQUESTS_PER_CLIENT);
            for request in 0..REQUESTS_PER_CLIENT {
                let sent = Instant::now();
                let status = make_request(client * REQUESTS_PER_CLIENT + request).await;
                assert!(status.is_success(), "request failed with {status}");
                latencies.push(sent.elapsed());
            }
            latencies
        });
    }
    let latencies = clients.join_all().await.into_iter().flatten().collect();
    (latencies, started.elapsed())
}

#[tokio::main]
async fn main() {
    let data_dir = tempfile::tempdir().unwrap();
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut options = ServerOptions::new(listen, data_dir.path().to_path_buf());
    options.database_url = std::env::var("VIDGATE_BENCH_DATABASE_URL").ok();
    // `VIDGATE_BENCH_SQLITE_SYNCHRONOUS=normal` measures the relaxed setting.
    if let Ok(mode) = std::env::var("VIDGATE_BENCH_SQLITE_SYNCHRONOUS") {
        options.sqlite_durability = mode.parse().expect("full or normal");
    }
    options.queue.workers = 0;
    let server = vidgate_server::start(options).await.unwrap();
    let account = common::unlimited_account(&server).await;
    let client = reqwest::Client::new();
    let submit_url = format!("{}/run/vendor_1/model_1/text-to-video", server.api_base);
    println!(
        "store: {}; {CLIENTS} concurrent clients, {REQUESTS_PER_CLIENT} requests each, loopback HTTP/1.1",
        std::env::var("VIDGATE_BENCH_DATABASE_URL")
            .map(|_| "postgresql")
            .unwrap_or("sqlite")
    );

    let (submit_latencies, submit_elapsed) = load({
        let client = client.clone();
        let key = account.api_key.clone();
        move |index| {
            let request = client
                .post(submit_url.clone())
                .bearer_auth(&key)
                .json(&json!({ "prompt": format!("benchmark {index}"), "duration": 5 }));
            async move { request.send().await.unwrap().status() }
        }
    })
    .await;
    report("submit", submit_latencies, submit_elapsed);

    let listed: serde_json::Value = client
        .get(format!("{}/generations?limit=100", server.api_base))
        .bearer_auth(&account.api_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<String> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|generation| generation["id"].as_str().unwrap().to_owned())
        .collect();
    let (get_latencies, get_elapsed) = load({
        let client = client.clone();
        let key = account.api_key.clone();
        let api_base = server.api_base.clone();
        move |index| {
            let request = client
                .get(format!("{api_base}/generations/{}", ids[index % ids.len()]))
                .bearer_auth(&key);
            async move { request.send().await.unwrap().status() }
        }
    })
    .await;
    report("get", get_latencies, get_elapsed);
    server.shutdown().await;
}
