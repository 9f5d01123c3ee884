//! The fair-use limit of the public endpoints (`GET /models`,
//! `GET /models/{vendor}/{model}`, `POST /quote/…`, `GET /openapi.json`): a
//! token bucket per client address, kept by the same limiter as the API
//! keys' buckets, so it lives in Redis and is shared by every node when
//! `--redis-url` is set. A quote can make the server download reference
//! videos, so without it one stranger could keep every fetch slot busy.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::ApiError;
use crate::metrics::RateLimit;
use crate::state::AppState;

/// Requests per second and the burst one client address may make to the
/// public endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicRateLimit {
    pub per_second: u32,
    pub burst: u32,
}

impl Default for PublicRateLimit {
    /// Enough for a person, a dashboard playground re-pricing as its form
    /// changes, or a client that reads the catalog at start; far too little
    /// to keep the media fetches of a node busy.
    fn default() -> PublicRateLimit {
        PublicRateLimit {
            per_second: 5,
            burst: 20,
        }
    }
}

/// Takes one request from the client address's public bucket, or answers
/// 429 with `Retry-After`.
pub async fn limit_public(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let limit = state.public_rate_limit;
    // The client is the TCP peer, or the client a trusted proxy names.
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| {
            state
                .trusted_proxies
                .client_address(peer.ip(), request.headers())
        });
    // Written on the stack: every public request makes a key, and only a
    // bucket's first request keeps one.
    let mut key = [0_u8; BUCKET_KEY_CAPACITY];
    let key = bucket_key(client, &mut key);
    let rate = state
        .rate_limiter
        .check(key, limit.per_second, limit.burst)
        .await;
    if !rate.allowed {
        state
            .metrics
            .record_rate_limit_refusal(RateLimit::PublicFairUse);
        return Err(ApiError::RateLimited {
            message: format!(
                "Too many requests to the public endpoints from this address: at most {} per second with bursts of {}.",
                limit.per_second, limit.burst
            ),
            retry_after: rate.reset,
        });
    }
    Ok(next.run(request).await)
}

/// Room for the longest key: `public:` and an IPv6 /64 with four
/// four-digit groups.
const BUCKET_KEY_CAPACITY: usize = 48;

/// The limiter's key for a client's bucket, `public:<bucket>`, written into
/// `buffer`; `public:unknown` when the peer is not known.
fn bucket_key(client: Option<IpAddr>, buffer: &mut [u8; BUCKET_KEY_CAPACITY]) -> &str {
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let written = match client {
        Some(address) => write!(cursor, "public:{}", AddressBucket(address)),
        None => write!(cursor, "public:unknown"),
    };
    written.expect("the longest key fits its buffer");
    let length = cursor.position() as usize;
    std::str::from_utf8(&buffer[..length]).expect("an address is written in ASCII")
}

/// The bucket an address counts against: an IPv4 address on its own, an
/// IPv6 address by its /64 (one subscriber usually holds a whole /64, so
/// per-address buckets would be free to multiply), and an IPv4-mapped IPv6
/// address as the IPv4 address it is.
struct AddressBucket(IpAddr);

impl std::fmt::Display for AddressBucket {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.to_canonical() {
            IpAddr::V4(v4) => write!(formatter, "{v4}"),
            IpAddr::V6(v6) => {
                let segments = v6.segments();
                write!(
                    formatter,
                    "{:x}:{:x}:{:x}:{:x}::/64",
                    segments[0], segments[1], segments[2], segments[3]
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_share_a_bucket_per_64_and_mapped_ipv4_is_ipv4() {
        let bucket = |text: &str| {
            let mut buffer = [0; BUCKET_KEY_CAPACITY];
            bucket_key(Some(text.parse().unwrap()), &mut buffer).to_owned()
        };
        assert_eq!(bucket("203.0.113.9"), "public:203.0.113.9");
        assert_eq!(
            bucket("2001:db8:ffff:ffff:1:2:3:4"),
            "public:2001:db8:ffff:ffff::/64"
        );
        assert_eq!(bucket("::ffff:203.0.113.9"), "public:203.0.113.9");
        assert_eq!(bucket("2001:db8:1:2::1"), bucket("2001:db8:1:2:ffff::9"));
        assert_ne!(bucket("2001:db8:1:2::1"), bucket("2001:db8:1:3::1"));
        let mut buffer = [0; BUCKET_KEY_CAPACITY];
        assert_eq!(bucket_key(None, &mut buffer), "public:unknown");
    }
}
