//! Accepting HTTP/1.1 connections with bounds a stranger cannot stretch:
//! a cap on open connections and a share of it per client address that
//! shrinks as the node fills, a deadline for each request's head and body,
//! and an idle timeout, which `axum::serve` does not offer.
//!
//! Each connection is served by hyper's HTTP/1 connection builder with a
//! timer, so a head trickled byte by byte is cut off; request bodies are
//! wrapped in a deadline; and the connection's socket records when bytes
//! last moved, so one that stays silent (a client that neither sends nor
//! reads) is asked to close and then dropped. While the listener is
//! crowded (`CROWDED_SHARE` of its connections open) a silent connection
//! is asked to close after `CROWDED_IDLE_TIMEOUT` instead: idle keep-alive
//! connections give their slots to clients with requests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};
use tower_http::timeout::DeadlineBody;

use crate::application::client_address::TrustedProxies;
use crate::limits::HttpLimits;

/// How long a connection may stay silent before it is asked to close while
/// the listener is crowded (a request in progress still gets its answer).
const CROWDED_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// The listener is crowded from this share of `max_connections` open, in
/// quarters: three quarters.
const CROWDED_SHARE: (usize, usize) = (3, 4);

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
/// its request in progress and close, and returns when all have. The
/// `proxies` are exempt from the cap per address.
pub async fn serve(
    listener: TcpListener,
    router: impl HttpService,
    limits: HttpLimits,
    proxies: TrustedProxies,
    shutdown: CancellationToken,
) {
    let connection_slots = Arc::new(Semaphore::new(limits.max_connections));
    let table = Arc::new(ConnectionTable::new(limits, proxies));
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
        let Some(place) = table.open(peer.ip()) else {
            // Closed at once: this address holds its share already.
            tracing::debug!(%peer, "refused a connection past its address's share");
            drop(stream);
            continue;
        };
        let router = router.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, limits, place, shutdown).await;
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
    place: ConnectionPlace,
    shutdown: CancellationToken,
) {
    let mut crowded = place.table.crowded.subscribe();
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
        // Once asked to close, a connection is dropped only after the full
        // idle timeout: a silent wait in progress still gets its answer.
        let crowded_now = *crowded.borrow();
        let idle_timeout = if crowded_now && !closing {
            limits.idle_timeout.min(CROWDED_IDLE_TIMEOUT)
        } else {
            limits.idle_timeout
        };
        let idle_deadline = activity.last() + idle_timeout;
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
            // The table outlives its connections, so the sender is never
            // dropped while this waits.
            Ok(()) = crowded.changed() => {}
            _ = tokio::time::sleep_until(idle_deadline) => {
                if activity.last() + idle_timeout > Instant::now() {
                    continue;
                }
                // One that never sent a byte has no request to finish, and
                // hyper would hold it for its first head until the header
                // timeout: while crowded it is dropped now.
                if closing || (crowded_now && !activity.ever_moved()) {
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

/// The listener's open connections, counted per client address (an IPv6
/// /64) and in all, and whether it is crowded.
struct ConnectionTable {
    per_address_limit: usize,
    max_connections: usize,
    crowded_from: usize,
    proxies: TrustedProxies,
    open: Mutex<OpenConnections>,
    /// True while at least `crowded_from` connections are open.
    crowded: watch::Sender<bool>,
}

#[derive(Default)]
struct OpenConnections {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
}

impl ConnectionTable {
    fn new(limits: HttpLimits, proxies: TrustedProxies) -> ConnectionTable {
        let (share, of) = CROWDED_SHARE;
        ConnectionTable {
            per_address_limit: limits.max_connections_per_address.max(1),
            max_connections: limits.max_connections,
            crowded_from: (limits.max_connections * share / of).max(1),
            proxies,
            open: Mutex::default(),
            crowded: watch::Sender::new(false),
        }
    }

    /// The connections one address may hold while other addresses hold
    /// `held_by_others`: its cap, scaled down by the part of the node the
    /// others hold (half its cap when they hold half the node), and at
    /// least one, since the accept loop took a free slot for the
    /// connection. So the share shrinks as the node fills and no small
    /// group of addresses can take every connection: where eight addresses
    /// at a fixed eighth each held the whole node, each address now takes
    /// at most its cap times the part still free, and eight of them leave
    /// about a third of it free, however they arrive.
    fn share_of_address(&self, held_by_others: usize) -> usize {
        let left_by_others = self.max_connections.saturating_sub(held_by_others);
        (self.per_address_limit * left_by_others)
            .div_ceil(self.max_connections)
            .max(1)
    }

    /// A place for a connection from `peer`, or `None` when its address
    /// holds its share of connections already (a trusted proxy never does).
    fn open(self: &Arc<Self>, peer: IpAddr) -> Option<ConnectionPlace> {
        let address = address_group(peer);
        let mut open = self.open.lock().expect("the counts are never poisoned");
        let of_address = open.per_address.get(&address).copied().unwrap_or(0);
        if of_address >= self.share_of_address(open.total - of_address)
            && !self.proxies.trusts(peer)
        {
            return None;
        }
        open.per_address.insert(address, of_address + 1);
        open.total += 1;
        self.crowded
            .send_if_modified(|crowded| update(crowded, open.total >= self.crowded_from));
        Some(ConnectionPlace {
            table: self.clone(),
            address,
        })
    }
}

/// Sets `flag` to `value`, saying whether it changed.
fn update(flag: &mut bool, value: bool) -> bool {
    let changed = *flag != value;
    *flag = value;
    changed
}

/// The address a connection counts under: an IPv4 address, or an IPv6
/// address's /64, since whoever holds one address of a /64 holds them all.
fn address_group(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let network = u128::from(v6) & !(u128::from(u64::MAX));
            IpAddr::V6(Ipv6Addr::from(network))
        }
    }
}

/// One open connection's place in the table, given back when dropped.
struct ConnectionPlace {
    table: Arc<ConnectionTable>,
    address: IpAddr,
}

impl Drop for ConnectionPlace {
    fn drop(&mut self) {
        let table = &self.table;
        let mut open = table.open.lock().expect("the counts are never poisoned");
        open.total -= 1;
        if let Some(of_address) = open.per_address.get_mut(&self.address) {
            *of_address -= 1;
            if *of_address == 0 {
                open.per_address.remove(&self.address);
            }
        }
        table
            .crowded
            .send_if_modified(|crowded| update(crowded, open.total >= table.crowded_from));
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
        // At least 1, so that zero means bytes never moved.
        let elapsed = (self.opened.elapsed().as_millis() as u64).max(1);
        self.millis.store(elapsed, Ordering::Relaxed);
    }

    /// Whether bytes moved since the connection opened (or it was asked to
    /// close).
    fn ever_moved(&self) -> bool {
        self.millis.load(Ordering::Relaxed) != 0
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max_connections: usize, per_address: usize, proxies: &[&str]) -> Arc<ConnectionTable> {
        let limits = HttpLimits {
            max_connections,
            max_connections_per_address: per_address,
            ..HttpLimits::default()
        };
        let proxies = TrustedProxies::new(proxies.iter().map(|net| net.parse().unwrap()).collect());
        Arc::new(ConnectionTable::new(limits, proxies))
    }

    #[test]
    fn an_address_past_its_share_is_refused_and_others_are_not() {
        // Room enough that the share does not shrink below the cap here.
        let table = table(16, 2, &["10.0.0.1/32"]);
        let first = table.open("192.0.2.1".parse().unwrap()).unwrap();
        let _second = table.open("192.0.2.1".parse().unwrap()).unwrap();
        assert!(table.open("192.0.2.1".parse().unwrap()).is_none());
        assert!(table.open("192.0.2.2".parse().unwrap()).is_some());
        // One /64 is one address.
        let _v6 = table.open("2001:db8::1".parse().unwrap()).unwrap();
        let _v6_again = table.open("2001:db8::ffff:2".parse().unwrap()).unwrap();
        assert!(table.open("2001:db8::3".parse().unwrap()).is_none());
        // A trusted proxy carries everyone's requests.
        let proxied: Vec<_> = (0..3)
            .map(|_| table.open("10.0.0.1".parse().unwrap()).unwrap())
            .collect();
        assert_eq!(proxied.len(), 3);
        drop(first);
        assert!(table.open("192.0.2.1".parse().unwrap()).is_some());
    }

    /// Eight addresses at their default share (an eighth) held every
    /// connection; the share shrinks as the node fills, so they leave a
    /// quarter or more free and a ninth address still finds a connection.
    #[test]
    fn eight_addresses_cannot_hold_every_connection() {
        let per_address = HttpLimits::default_connections_per_address(64);
        for peers in [
            (1..=8)
                .map(|address| format!("192.0.2.{address}"))
                .collect::<Vec<_>>(),
            // Eight /64s are eight addresses too.
            (1..=8)
                .map(|network| format!("2001:db8:0:{network}::1"))
                .collect(),
        ] {
            let table = table(64, per_address, &[]);
            let mut held = Vec::new();
            for peer in &peers {
                let peer: IpAddr = peer.parse().unwrap();
                while let Some(place) = table.open(peer) {
                    held.push(place);
                }
            }
            assert!(64 - held.len() >= 64 / 4, "{} of 64 held", held.len());
            assert!(table.open("198.51.100.1".parse().unwrap()).is_some());
        }
    }

    #[test]
    fn the_share_of_one_address_shrinks_as_the_node_fills() {
        let table = table(100, 40, &["10.0.0.1/32"]);
        let take_all = |peer: &str| -> Vec<ConnectionPlace> {
            std::iter::from_fn(|| table.open(peer.parse().unwrap()))
                .take(100)
                .collect()
        };
        // Alone, an address may take its whole cap.
        assert_eq!(take_all("192.0.2.1").len(), 40);
        // With 80 of the 100 held by others (here a proxy), a fifth of it.
        let _proxied: Vec<_> = (0..80)
            .map(|_| table.open("10.0.0.1".parse().unwrap()).unwrap())
            .collect();
        let crowded = take_all("192.0.2.1");
        assert_eq!(crowded.len(), 8);
        // Another address still finds one.
        assert!(table.open("192.0.2.2".parse().unwrap()).is_some());
    }

    #[test]
    fn the_table_is_crowded_from_three_quarters_of_the_cap() {
        let table = table(4, 4, &[]);
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(table.open("192.0.2.1".parse().unwrap()).unwrap());
        }
        assert!(!*table.crowded.borrow());
        held.push(table.open("192.0.2.1".parse().unwrap()).unwrap());
        assert!(*table.crowded.borrow());
        held.pop();
        assert!(!*table.crowded.borrow());
    }
}
