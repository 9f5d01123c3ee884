//! The fair-use limit of the public endpoints (`GET /models`,
//! `GET /models/{vendor}/{model}`, `POST /quote/…`, `GET /openapi.json`): a
//! token bucket per client address, kept by the same limiter as the API
//! keys' buckets, so it lives in Redis and is shared by every node when
//! `--redis-url` is set. A quote can make the server download reference
//! videos, so without it one stranger could keep every fetch slot busy.

use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, Request};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service, ServiceExt};

use super::openapi::{Door, Refusal, VIDGATE_ERROR};
use super::{API_PREFIX, ApiError};
use crate::application::state::AppState;
use crate::metrics::RateLimit;
use crate::rate_limit::{AddressBucket, RateStatus};

/// The public endpoints' door: no key, and past the fair-use limit a 429.
pub(super) const PUBLIC: Door = Door {
    mount: API_PREFIX,
    security: None,
    tag: None,
    refusals: &[Refusal {
        status: "429",
        description: "rate_limited: too many requests to the public endpoints from this client address; Retry-After says when to try again.",
    }],
    rate_limit_headers: false,
    error: VIDGATE_ERROR,
};

/// The fair-use limit as a route layer: takes one request from the client
/// address's public bucket, or answers 429 with `Retry-After`.
///
/// A plain service rather than a `middleware::from_fn`, which boxes a future
/// and clones the route it wraps on every request: with this node's own
/// buckets the check is decided at once and the route's own future is
/// returned; only a check in Redis waits, in a boxed future.
#[derive(Clone)]
pub(super) struct FairUse {
    state: AppState,
}

impl FairUse {
    pub(super) fn new(state: AppState) -> FairUse {
        FairUse { state }
    }
}

impl<S> Layer<S> for FairUse {
    type Service = FairUseRoute<S>;

    fn layer(&self, route: S) -> FairUseRoute<S> {
        FairUseRoute {
            state: self.state.clone(),
            route,
        }
    }
}

#[derive(Clone)]
pub(super) struct FairUseRoute<S> {
    state: AppState,
    route: S,
}

impl<S> Service<Request> for FairUseRoute<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = FairUseResponse<S::Future>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.route.poll_ready(context)
    }

    fn call(&mut self, request: Request) -> FairUseResponse<S::Future> {
        let limit = self.state.public_rate_limit;
        // The client is the TCP peer, or the client a trusted proxy names.
        let client =
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(peer)| {
                    self.state
                        .trusted_proxies
                        .client_address(peer.ip(), request.headers())
                });
        // Written on the stack: every public request makes a key, and only a
        // bucket's first request keeps one.
        let mut key = [0_u8; BUCKET_KEY_CAPACITY];
        let key = bucket_key(client, &mut key);
        match self
            .state
            .rate_limiter
            .check_at_once(key, limit.per_second, limit.burst)
        {
            Some(rate) if rate.allowed => FairUseResponse::Admitted(self.route.call(request)),
            Some(rate) => FairUseResponse::Refused(Some(refusal(&self.state, rate))),
            None => {
                let state = self.state.clone();
                let key = key.to_owned();
                // The route is called after the wait, so the one that was
                // polled ready goes with the request (tower's rule).
                let fresh_route = self.route.clone();
                let ready_route = std::mem::replace(&mut self.route, fresh_route);
                FairUseResponse::Waiting(Box::pin(async move {
                    let rate = state
                        .rate_limiter
                        .check(&key, limit.per_second, limit.burst)
                        .await;
                    if rate.allowed {
                        ready_route.oneshot(request).await
                    } else {
                        Ok(refusal(&state, rate))
                    }
                }))
            }
        }
    }
}

/// The route's answer, a refusal, or (with Redis) the wait for the check.
pub(super) enum FairUseResponse<F> {
    Admitted(F),
    Refused(Option<Response>),
    Waiting(Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>),
}

impl<F> Future for FairUseResponse<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            FairUseResponse::Admitted(response) => Pin::new(response).poll(context),
            FairUseResponse::Refused(refusal) => {
                Poll::Ready(Ok(refusal.take().expect("polled after it was ready")))
            }
            FairUseResponse::Waiting(waiting) => waiting.as_mut().poll(context),
        }
    }
}

/// The 429 for a client whose bucket is empty, counted in the metrics.
fn refusal(state: &AppState, rate: RateStatus) -> Response {
    state
        .metrics
        .record_rate_limit_refusal(RateLimit::PublicFairUse);
    let limit = state.public_rate_limit;
    ApiError::RateLimited {
        message: format!(
            "Too many requests to the public endpoints from this address: at most {} per second with bursts of {}.",
            limit.per_second, limit.burst
        ),
        retry_after: rate.reset,
    }
    .into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_key_is_the_address_bucket_in_the_public_namespace() {
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
