//! Media the tests make themselves, and a tiny HTTP server on 127.0.0.1
//! that serves it.

use std::collections::HashMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use image::{ImageFormat, Rgb, RgbImage};

/// An MP4 from the local engine, silent, with a moving scene.
pub fn mp4(width: u32, height: u32, duration_s: u32, fps: u32) -> Vec<u8> {
    let request = vidgate_engine::RenderRequest {
        width,
        height,
        duration_s,
        fps,
        seed: 7,
        prompt: "a test clip".to_owned(),
        ..vidgate_engine::RenderRequest::default()
    };
    vidgate_engine::render(&request, &|_| {}, &AtomicBool::new(false))
        .expect("the engine renders")
        .mp4
}

/// A 16-bit mono PCM WAV of `milliseconds` of a quiet tone at 8 kHz.
pub fn wav(milliseconds: u64) -> Vec<u8> {
    const SAMPLE_RATE: u32 = 8000;
    let samples = (milliseconds * u64::from(SAMPLE_RATE) / 1000) as u32;
    let data_bytes = samples * 2;
    let mut bytes = Vec::with_capacity(44 + data_bytes as usize);
    bytes.extend_from_slice(b"RIFF");
    bytes.extend_from_slice(&(36 + data_bytes).to_le_bytes());
    bytes.extend_from_slice(b"WAVEfmt ");
    bytes.extend_from_slice(&16u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes()); // PCM
    bytes.extend_from_slice(&1u16.to_le_bytes()); // mono
    bytes.extend_from_slice(&SAMPLE_RATE.to_le_bytes());
    bytes.extend_from_slice(&(SAMPLE_RATE * 2).to_le_bytes()); // byte rate
    bytes.extend_from_slice(&2u16.to_le_bytes()); // block align
    bytes.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    bytes.extend_from_slice(b"data");
    bytes.extend_from_slice(&data_bytes.to_le_bytes());
    for index in 0..samples {
        let phase = index as f32 * 440.0 * std::f32::consts::TAU / SAMPLE_RATE as f32;
        let sample = (phase.sin() * 3000.0) as i16;
        bytes.extend_from_slice(&sample.to_le_bytes());
    }
    bytes
}

/// `frames` silent MPEG-1 Layer III frames (128 kbit/s, 44.1 kHz, joint
/// stereo): each is a header, zeroed side information (no coded data, which
/// decodes as silence) and padding to the frame length of 417 bytes, and
/// lasts 1152 samples.
pub fn mp3(frames: usize) -> Vec<u8> {
    const FRAME_BYTES: usize = 417;
    let mut bytes = Vec::with_capacity(frames * FRAME_BYTES);
    for _ in 0..frames {
        bytes.extend_from_slice(&[0xFF, 0xFB, 0x90, 0x64]);
        bytes.extend(std::iter::repeat_n(0u8, FRAME_BYTES - 4));
    }
    bytes
}

/// A small gradient image in `format`.
pub fn image(format: ImageFormat, width: u32, height: u32) -> Vec<u8> {
    let picture = RgbImage::from_fn(width, height, |x, y| {
        Rgb([(x * 255 / width) as u8, (y * 255 / height) as u8, 128])
    });
    let mut bytes = Cursor::new(Vec::new());
    picture
        .write_to(&mut bytes, format)
        .expect("the image encodes");
    bytes.into_inner()
}

/// Serves `files` at `/file/{name}`, plus:
/// - `/redirect/{count}/{name}`: redirects `count` times, then to the file;
/// - `/away/{address}`: redirects to `http://{address}/file/anything`;
/// - `/loop`: redirects to itself forever;
/// - `/slow`: answers after five seconds;
/// - `/stream/{bytes}`: a body of that many bytes without a Content-Length.
pub struct MediaServer {
    pub address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MediaServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MediaServer {
    pub async fn start(files: HashMap<String, Vec<u8>>) -> MediaServer {
        let files = Arc::new(files);
        let router = Router::new()
            .route("/file/{name}", get(serve_file))
            .route("/redirect/{count}/{name}", get(redirect))
            .route("/away/{target}", get(away))
            .route("/loop", get(|| async { redirect_to("/loop") }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route("/stream/{bytes}", get(stream))
            .with_state(files);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        MediaServer { address, task }
    }

    /// The URL of a served file.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/file/{name}", self.address)
    }

    pub fn path_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

async fn serve_file(
    State(files): State<Arc<HashMap<String, Vec<u8>>>>,
    Path(name): Path<String>,
) -> Response {
    match files.get(&name) {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn redirect_to(location: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location.to_owned())]).into_response()
}

async fn redirect(Path((count, name)): Path<(u32, String)>) -> Response {
    if count == 0 {
        redirect_to(&format!("/file/{name}"))
    } else {
        redirect_to(&format!("/redirect/{}/{name}", count - 1))
    }
}

/// Redirects to another host, given as `address:port` or a bracketed IPv6
/// literal.
async fn away(Path(target): Path<String>) -> Response {
    redirect_to(&format!("http://{target}/file/anything"))
}

async fn stream(Path(bytes): Path<usize>) -> Response {
    let chunks = (0..bytes.div_ceil(1024)).map(move |index| {
        let size = 1024.min(bytes - index * 1024);
        Ok::<_, std::io::Error>(vec![0u8; size])
    });
    Body::from_stream(futures_util::stream::iter(chunks)).into_response()
}
