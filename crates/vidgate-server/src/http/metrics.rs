//! The metrics' HTTP side: the route layer that tells the envelope
//! (`envelope.rs`, which times every request) which route template a
//! request matched, and `GET /metrics` on the separate metrics listener
//! (`--metrics-listen`), which the public port never serves.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower::{Layer, Service};

use crate::metrics::Metrics;
use crate::store::Store;

/// The content type of the OpenMetrics text format, which Prometheus asks
/// for and reads.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A route layer that copies the route template a request matched onto
/// its response, where the envelope (outside the routing) finds it. A route
/// layer, so it runs only for matched routes.
///
/// Written as a plain service rather than with `middleware::from_fn`, which
/// per request boxes a future and clones the route it wraps; this one does
/// neither, and every matched request passes through it.
#[derive(Clone, Copy)]
pub(super) struct NoteMatchedRoute;

impl<S> Layer<S> for NoteMatchedRoute {
    type Service = NotedRoute<S>;

    fn layer(&self, route: S) -> NotedRoute<S> {
        NotedRoute { route }
    }
}

#[derive(Clone)]
pub(super) struct NotedRoute<S> {
    route: S,
}

impl<S> Service<Request> for NotedRoute<S>
where
    S: Service<Request, Response = Response>,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = S::Error;
    type Future = NotedResponse<S::Future>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.route.poll_ready(context)
    }

    fn call(&mut self, request: Request) -> NotedResponse<S::Future> {
        NotedResponse {
            matched: request.extensions().get::<MatchedPath>().cloned(),
            response: self.route.call(request),
        }
    }
}

/// The route's response, with the template it matched.
pub(super) struct NotedResponse<F> {
    response: F,
    matched: Option<MatchedPath>,
}

impl<F, E> Future for NotedResponse<F>
where
    F: Future<Output = Result<Response, E>> + Unpin,
{
    type Output = Result<Response, E>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let mut response = ready!(Pin::new(&mut self.response).poll(context))?;
        if let Some(matched) = self.matched.take() {
            response.extensions_mut().insert(matched);
        }
        Poll::Ready(Ok(response))
    }
}

#[derive(Clone)]
struct MetricsState {
    store: Arc<Store>,
    metrics: Arc<Metrics>,
}

/// The metrics listener's router: `/metrics` and nothing else.
pub fn metrics_router(store: Arc<Store>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(MetricsState { store, metrics })
}

/// Reads the store's gauges for this scrape, then answers every series. A
/// failed read still answers the series kept in the process (they matter
/// most during a database outage), counts the failure and logs it.
async fn scrape(State(state): State<MetricsState>) -> Response {
    let store_state = async {
        let depth = state.store.queue().queue_depth().await?;
        let longest_waiting = state
            .store
            .queue()
            .longest_waiting_accounts(crate::metrics::WAITING_ACCOUNTS_RANKED)
            .await?;
        let pending = state.store.webhooks().pending_deliveries().await?;
        let providers = state.store.provider_health().read().await?;
        Ok::<_, crate::store::StoreError>((depth, longest_waiting, pending, providers))
    }
    .await;
    match store_state {
        Ok((depth, longest_waiting, pending, providers)) => {
            state
                .metrics
                .set_store_state(&depth, &longest_waiting, pending, &providers)
        }
        Err(error) => {
            tracing::error!(error = %error, "reading the store's state for the metrics failed");
            state.metrics.record_store_read_failure();
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        state.metrics.encode(),
    )
        .into_response()
}
