//! The metrics' HTTP side: the route layer that tells the envelope
//! (`envelope.rs`, which times every request) which route template a
//! request matched, and `GET /metrics` on the separate metrics listener
//! (`--metrics-listen`), which the public port never serves.

use std::sync::Arc;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::metrics::Metrics;
use crate::store::Store;

/// The content type of the OpenMetrics text format, which Prometheus asks
/// for and reads.
const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Copies the route template a request matched onto its response, where
/// the envelope (outside the routing) finds it. A route layer, so it
/// runs only for matched routes.
pub(super) async fn note_matched_route(request: Request, next: Next) -> Response {
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let mut response = next.run(request).await;
    if let Some(matched) = matched {
        response.extensions_mut().insert(matched);
    }
    response
}

#[derive(Clone)]
struct MetricsState {
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

/// The metrics listener's router: `/metrics` and nothing else.
pub fn metrics_router(store: Arc<dyn Store>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(MetricsState { store, metrics })
}

/// Reads the store's gauges for this scrape, then answers every series. A
/// failed read still answers the series kept in the process (they matter
/// most during a database outage), counts the failure and logs it.
async fn scrape(State(state): State<MetricsState>) -> Response {
    let store_state = async {
        let depth = state.store.queue_depth().await?;
        let pending = state.store.pending_webhook_deliveries().await?;
        let providers = state.store.provider_health().await?;
        Ok::<_, crate::store::StoreError>((depth, pending, providers))
    }
    .await;
    match store_state {
        Ok((depth, pending, providers)) => {
            state.metrics.set_store_state(&depth, pending, &providers)
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
