//! Media servers for the tests of fetch slots: one that never finishes a
//! body, and one that serves a picture and counts the requests it got.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;

/// A server that answers every request with headers promising a large body
/// and then sends one byte a second: each fetch of it holds a fetch slot
/// until the fetch's own time limit.
pub async fn trickling_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut connection, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut request = [0_u8; 4096];
                let _ = connection.read(&mut request).await;
                let head =
                    "HTTP/1.1 200 OK\r\ncontent-type: video/mp4\r\ncontent-length: 1000000\r\n\r\n";
                if connection.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if connection.write_all(b"\0").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    base
}

/// A server that answers every request with one PNG picture, and the count
/// of the requests it answered.
pub async fn picture_server() -> (String, Arc<AtomicUsize>) {
    let mut bytes = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_pixel(320, 240, image::Rgb([200, 40, 40]))
        .write_to(&mut bytes, image::ImageFormat::Png)
        .unwrap();
    let picture = bytes.into_inner();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let router = axum::Router::new().fallback(move || {
        let picture = picture.clone();
        counted.fetch_add(1, Ordering::SeqCst);
        async move { ([("content-type", "image/png")], picture) }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (base, requests)
}
