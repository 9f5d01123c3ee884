//! The HTTP layer: the only part of vidgate that knows status codes and
//! headers. Handlers are thin: they parse, call the domain and the store, and
//! present the result. One file per resource.

pub mod account;
mod admin;
mod cog_callbacks;
mod dialect_errors;
mod envelope;
mod error;
mod fair_use;
mod files;
mod generations;
mod health;
mod live;
mod mcp;
mod metrics;
mod models;
mod openai_videos;
mod openapi;
mod openrouter_videos;
mod payments;
mod prepared;
mod provider_webhooks;
mod quote;
mod runs;
mod serve;
mod traced;
mod uploads;
mod webhooks;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use openapi::{Door, Refusal, Route, SecurityScheme, Surface, VIDGATE_ERROR, described};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::services::ServeDir;
use vidgate_core::Catalog;

pub use crate::representation::{generation_json, rfc3339};
pub use account::account_json;
pub use error::ApiError;
pub use metrics::metrics_router;
pub use serve::{HttpService, serve};
pub use webhooks::webhook_secret_json;

use crate::application::callers::{self, CallerRefusal};
use crate::application::state::AppState;
use crate::dashboard::{CSRF_HEADER, session_token};
use crate::metrics::RateLimit;
use crate::store::Caller;

/// Largest JSON body accepted. The biggest legitimate body (a 5000-character
/// prompt, a 2000-character negative prompt and a dozen URLs) is far smaller.
const MAX_JSON_BODY_BYTES: usize = 256 * 1024;

/// Where the customers' API is mounted. Its routes are registered with the
/// whole path rather than nested under it: a nested router strips the
/// prefix from every request (a new URI) and adds a layer to every route,
/// which per request cost about as much as the handler of a static
/// document does.
const API_PREFIX: &str = "/api/v1";

/// A path of the customers' API, as the router registers it.
fn api_path(path: &str) -> String {
    format!("{API_PREFIX}{path}")
}

/// Every route the document describes, by the door it is behind: the
/// router serves them and `openapi::document` describes them, so a route
/// cannot be served undescribed. A new surface (its own mount, guard and
/// security scheme) is one more entry here; a new route of a surface is
/// one more line in its table.
fn surfaces(
    catalog: &Catalog,
    api_base: &str,
    max_upload_bytes: u64,
    published: openapi::Published,
) -> Vec<Surface> {
    vec![
        Surface {
            door: &fair_use::PUBLIC,
            routes: public_routes(catalog, api_base, published),
            guard: |routes, state| routes.route_layer(fair_use::FairUse::new(state.clone())),
        },
        Surface {
            door: &CUSTOMER,
            routes: customer_routes(max_upload_bytes),
            guard: |routes, state| {
                routes.route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
            },
        },
        // Other services' dialects, for the clients people already have
        // (issue 53, `dialects/`).
        openai_videos::surface(max_upload_bytes),
        openrouter_videos::public_surface(),
        openrouter_videos::surface(),
        admin::surface(),
    ]
}

/// The public endpoints: the catalog, quotes and this API's document,
/// without a key, within a fair-use limit per client address.
fn public_routes(catalog: &Catalog, api_base: &str, published: openapi::Published) -> Vec<Route> {
    let mut routes = models::routes(catalog, api_base);
    routes.push(described(
        Method::POST,
        "/quote/{vendor}/{model}/{mode}",
        quote::quote,
        &quote::QUOTE,
    ));
    routes.push(openapi::route(published));
    routes
}

/// `route` with room for a file of up to `max_upload_bytes` in its body,
/// and the multipart framing around it.
fn with_upload_limit(mut route: Route, max_upload_bytes: u64) -> Route {
    let limit = usize::try_from(max_upload_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(64 * 1024);
    route.handler = route.handler.layer(DefaultBodyLimit::max(limit));
    route
}

/// The customers' endpoints, with an API key or a dashboard session.
fn customer_routes(max_upload_bytes: u64) -> Vec<Route> {
    let generation = "/generations/{id}";
    let upload = with_upload_limit(
        described(Method::POST, "/uploads", uploads::create, &uploads::CREATE),
        max_upload_bytes,
    );
    vec![
        described(
            Method::POST,
            "/run/{vendor}/{model}/{mode}",
            runs::submit,
            &runs::SUBMIT,
        ),
        described(
            Method::GET,
            "/generations",
            generations::list,
            &generations::LIST,
        ),
        described(
            Method::GET,
            generation,
            generations::show,
            &generations::SHOW,
        ),
        described(
            Method::GET,
            "/generations/{id}/events",
            live::events,
            &live::EVENTS,
        ),
        described(
            Method::POST,
            "/generations/{id}/cancel",
            generations::cancel,
            &generations::CANCEL,
        ),
        described(
            Method::GET,
            "/generations/{id}/webhook-deliveries",
            webhooks::list_deliveries,
            &webhooks::LIST_DELIVERIES,
        ),
        described(
            Method::POST,
            "/generations/{id}/webhook-deliveries/{delivery_id}/retry",
            webhooks::retry_delivery,
            &webhooks::RETRY_DELIVERY,
        ),
        described(Method::GET, "/account", account::show, &account::SHOW),
        described(
            Method::POST,
            "/account/webhook-secret/rotate",
            webhooks::rotate_secret,
            &webhooks::ROTATE_SECRET,
        ),
        described(
            Method::POST,
            "/account/checkout",
            payments::checkout,
            &payments::CHECKOUT,
        ),
        upload,
        described(
            Method::POST,
            "/uploads/initiate",
            uploads::initiate,
            &uploads::INITIATE,
        ),
    ]
}

/// How a customer's request authenticates: an API key, or a dashboard
/// session cookie (`authenticate`).
const API_KEY: SecurityScheme = SecurityScheme {
    name: "bearer",
    description: "An API key: vg_live_…",
};

/// The refusals of the key check and the caller's limits
/// (`authenticate`), which guard every answer behind a customer's door.
const KEY_CHECK_REFUSALS: &[Refusal] = &[
    Refusal {
        status: "401",
        description: "unauthorized: the key is missing, malformed or revoked.",
    },
    Refusal {
        status: "403",
        description: "forbidden: a request that is authenticated by a dashboard session cookie and changes something needs the page's X-CSRF-Token header.",
    },
    Refusal {
        status: "429",
        description: "rate_limited: too many requests per second, too many generations in progress, or (with Prefer: wait or an event stream) too many waits and streams open for this key or on this server, or this account is already fetching as much request media as one account may at once. Retry-After says when to try again. Nothing is charged.",
    },
    Refusal {
        status: "500",
        description: "internal_error: retry with backoff.",
    },
];

/// The customers' door.
const CUSTOMER: Door = Door {
    mount: API_PREFIX,
    security: Some(API_KEY),
    tag: None,
    refusals: KEY_CHECK_REFUSALS,
    rate_limit_headers: true,
    error: VIDGATE_ERROR,
};

/// The public listener's service: the routes inside the envelope (see
/// `envelope.rs`). The envelope and the panic guard wrap the router whole,
/// not route by route as `Router::layer` would, where every request would
/// clone them with its route.
pub fn router(state: AppState) -> impl HttpService {
    let published = openapi::Published::default();
    let surfaces = surfaces(
        &state.catalog,
        &state.api_base,
        state.max_upload_bytes,
        published.clone(),
    );
    published.publish(&openapi::document(
        &state.catalog,
        &state.api_base,
        &surfaces,
    ));
    let api = surfaces.into_iter().fold(Router::new(), |api, surface| {
        api.merge(surface.router(&state))
    });

    // Files on local disk are served by ServeDir; objects in a bucket are
    // streamed through vidgate, so their URLs stay on our origin too. Either
    // way a file the retention sweep deleted answers 410 instead of 404, and
    // kept request media needs a signed URL that has not expired.
    let gone = middleware::from_fn_with_state(state.clone(), files::gone_when_expired);
    let signed = middleware::from_fn_with_state(state.clone(), files::kept_media_needs_a_signature);
    let api = match state.storage.local_root() {
        Some(root) => api.nest_service(
            &api_path("/files"),
            tower::Layer::layer(&signed, tower::Layer::layer(&gone, ServeDir::new(root))),
        ),
        None => api.route(
            &api_path("/files/{*path}"),
            get(files::serve).layer(gone).layer(signed),
        ),
    };

    // Outside /api/v1: model servers, providers and Stripe call them, not
    // customers.
    let internal = Router::new()
        .route(
            "/internal/cog/{generation_id}/{token}",
            post(cog_callbacks::receive),
        )
        .route(
            "/internal/providers/{vendor}/{model}/{generation_id}/{token}",
            post(provider_webhooks::receive),
        )
        .route("/webhooks/stripe", post(payments::receive_event));

    // Outside /api/v1 and unauthenticated: load balancers and orchestrators
    // probe them.
    let probes = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz));

    let envelope_state = (state.metrics.clone(), state.health.clone());
    let routes = Router::new()
        .merge(api)
        // The MCP server for agents (issue 53), which speaks JSON-RPC rather
        // than HTTP resources, so the document does not describe it.
        .merge(mcp::routes(&state))
        .merge(internal)
        .merge(probes)
        .merge(crate::dashboard::router())
        .fallback(|| async { ApiError::NotFound("No such endpoint.".into()) })
        .route_layer(metrics::NoteMatchedRoute);
    let routes = if crate::telemetry::enabled() {
        routes.route_layer(middleware::from_fn(traced::server_span))
    } else {
        routes
    }
    .with_state(state);
    tower::ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(
            envelope_state,
            envelope::envelope,
        ))
        // The JSON body limit of every route, set once outside the routing
        // (a router's `layer` would wrap each route and cost every request
        // a boxed service). A route's own limit, inside, overrides it: the
        // uploads take a file, the dashboard's forms are smaller. The model
        // servers' and providers' callbacks read their bodies with bounds
        // of their own.
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY_BYTES))
        // A panic answers 500 inside the envelope, so it is logged, timed
        // and given a request id like any other answer.
        .layer(CatchPanicLayer::custom(|_panic| {
            tracing::error!("a request handler panicked");
            ApiError::Internal("handler panicked".into()).into_response()
        }))
        .service(routes)
}

/// Authenticates the Bearer key, or without an `Authorization` header a
/// dashboard session cookie (with `X-CSRF-Token` on unsafe methods), applies
/// the caller's request-rate limit (a session has its own bucket) and
/// reports it in `x-ratelimit-*` headers on every authenticated response.
async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // A request with an `Authorization` header is always a key's, even when
    // the browser also sends a session cookie.
    let session = if request.headers().contains_key(header::AUTHORIZATION) {
        None
    } else {
        session_token(request.headers(), state.dashboard.secure_cookies)
    };
    let caller = match session {
        Some(token) => {
            let changes_state = !matches!(
                *request.method(),
                Method::GET | Method::HEAD | Method::OPTIONS
            );
            let csrf_token = request
                .headers()
                .get(CSRF_HEADER)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("");
            callers::caller_for_session(state.store.as_ref(), token, changes_state, csrf_token)
                .await?
        }
        None => caller_from_headers(&state, request.headers()).await?,
    };
    let rate = state.rate_limiter.check_caller(&caller).await;
    let mut response = if rate.allowed {
        request.extensions_mut().insert(caller);
        next.run(request).await
    } else {
        state.metrics.record_rate_limit_refusal(RateLimit::Caller);
        ApiError::RateLimited {
            message: format!(
                "Too many requests: this key may make {} requests per second with bursts of {}.",
                caller.limits.requests_per_second, caller.limits.burst
            ),
            retry_after: rate.reset,
        }
        .into_response()
    };
    let headers = response.headers_mut();
    headers.insert("x-ratelimit-limit", HeaderValue::from(rate.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(rate.remaining));
    headers.insert(
        "x-ratelimit-reset",
        HeaderValue::from(rate.reset.as_secs_f64().ceil() as u64),
    );
    Ok(response)
}

async fn caller_from_headers(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let header = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            ApiError::Unauthorized("Missing Authorization header: send `Bearer <API key>`.".into())
        })?
        .to_str()
        .map_err(|_| ApiError::Unauthorized("Malformed Authorization header.".into()))?;
    let key = header
        .strip_prefix("Bearer ")
        .map(str::trim)
        .ok_or(CallerRefusal::MalformedApiKey)?;
    Ok(callers::caller_for_api_key(state.store.as_ref(), key).await?)
}

/// Gives every error response the spec's JSON shape, including those made by
/// layers and extractors we do not control (unknown routes, wrong methods,
/// bodies over the limit, missing files). Responses that are already JSON
/// were made by `ApiError` and pass through.
fn ensure_error_shape(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    // The dashboard's error pages are HTML for people, with the same status.
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_json || is_html {
        return response;
    }
    let error = match status {
        StatusCode::NOT_FOUND => ApiError::NotFound("No such endpoint or file.".into()),
        StatusCode::METHOD_NOT_ALLOWED => {
            ApiError::MethodNotAllowed("This endpoint does not accept that HTTP method.".into())
        }
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(format!(
            "The request body is larger than {MAX_JSON_BODY_BYTES} bytes."
        )),
        StatusCode::RANGE_NOT_SATISFIABLE => return response,
        status if status.is_client_error() => ApiError::InvalidRequest {
            message: "The request could not be read.".into(),
            param: None,
        },
        _ => ApiError::Internal(format!("a layer answered {status}").into()),
    };
    let mut shaped = error.into_response();
    // Keep headers such as `Allow` that tell the client how to fix the call.
    for (name, value) in response.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            shaped.headers_mut().insert(name.clone(), value.clone());
        }
    }
    shaped
}

/// Resolves the `{vendor}/{model}/{mode}` path segments to a catalog endpoint.
fn endpoint_from_path<'a>(
    catalog: &'a Catalog,
    (vendor, model, mode): &(String, String, String),
) -> Result<vidgate_core::Endpoint<'a>, ApiError> {
    let endpoint_id = format!("{vendor}/{model}/{mode}");
    catalog
        .endpoint(&endpoint_id)
        .ok_or_else(|| ApiError::NotFound(format!("No endpoint {endpoint_id:?} exists.")))
}

fn body_bytes(
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<axum::body::Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!(
                "The request body is larger than {MAX_JSON_BODY_BYTES} bytes."
            ))
        } else {
            ApiError::InvalidRequest {
                message: format!("The request body could not be read: {rejection}"),
                param: None,
            }
        }
    })
}

fn invalid_request(error: vidgate_core::InvalidRequest) -> ApiError {
    ApiError::InvalidRequest {
        message: error.message,
        param: error.param,
    }
}
