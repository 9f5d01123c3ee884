//! Accepting HTTP/1.1 connections with bounds a stranger cannot stretch:
//! a cap on open connections, a deadline for each request's head and body,
//! and an idle timeout, which `axum::serve` does not offer.
//!
//! Each connection is served by hyper's HTTP/1 connection builder with a
//! timer, so a head trickled byte by byte is cut off; request bodies are
//! wrapped in a deadline; and the connection's socket records when bytes
//! last moved, so one that stays silent (a client that neither sends nor
//! reads) is asked to close and then dropped.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};
use tower_http::timeout::DeadlineBody;

use crate::limits::HttpLimits;

/// What `serve` answers requests with: a router, or a router inside layers
/// that wrap it whole.
pub trait HttpService:
    Service<Request<Body>, Response = Response, Error = Infallible, Future: Send>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> HttpService for S where
    S: Service<Request<Body>, Response = Response, Error = Infallible, Future: Send>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Serves `router` on `listener` within `limits` until `shutdown` is
/// cancelled, then stops accepting, asks every open connection to finish
/// its request in progress and close, and returns when all have.
pub async fn serve(
    listener: TcpListener,
    router: impl HttpService,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let connection_slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // A slot is taken before accepting, so connections past the cap wait
        // in the kernel's backlog instead of holding memory here.
        let slot = tokio::select! {
            slot = connection_slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: pause, as hyper's
                    // and axum's accept loops do, rather than spin.
                    tracing::warn!(error = %error, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let router = router.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, limits, shutdown).await;
            drop(slot);
        });
    }
    // Every connection holds a slot until it ends, so holding them all means
    // every connection has ended.
    let _all_closed = connection_slots
        .acquire_many(limits.max_connections as u32)
        .await;
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: impl HttpService,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(LastActivity::new());
    let io = TokioIo::new(TrackedStream {
        inner: stream,
        activity: activity.clone(),
    });
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // The extractor `ConnectInfo<SocketAddr>` reads the peer from here,
        // as with axum's own `into_make_service_with_connect_info`.
        request.extensions_mut().insert(ConnectInfo(peer));
        let request = request.map(|body| Body::new(DeadlineBody::new(limits.body_timeout, body)));
        let router = router.clone();
        async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        let idle_deadline = activity.last() + limits.idle_timeout;
        tokio::select! {
            finished = connection.as_mut() => {
                if let Err(error) = finished {
                    tracing::debug!(%peer, error = %error, "an HTTP connection ended with an error");
                }
                return;
            }
            _ = shutdown.cancelled(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = tokio::time::sleep_until(idle_deadline) => {
                if activity.last() + limits.idle_timeout > Instant::now() {
                    continue;
                }
                if closing {
                    tracing::debug!(%peer, "dropping an HTTP connection that stayed idle");
                    return;
                }
                connection.as_mut().graceful_shutdown();
                closing = true;
                // The second idle period counts from here.
                activity.touch();
            }
        }
    }
}

/// When bytes last moved on a connection, in milliseconds since it opened.
struct LastActivity {
    opened: Instant,
    millis: AtomicU64,
}

impl LastActivity {
    fn new() -> LastActivity {
        LastActivity {
            opened: Instant::now(),
            millis: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let elapsed = self.opened.elapsed().as_millis() as u64;
        self.millis.store(elapsed, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.millis.load(Ordering::Relaxed))
    }
}

/// A TCP stream that records when bytes last moved through it.
struct TrackedStream {
    inner: TcpStream,
    activity: Arc<LastActivity>,
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buffer.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(context, buffer);
        if matches!(polled, Poll::Ready(Ok(()))) && buffer.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(context, bytes);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(context, buffers);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}
