//! `GET /files/<path>` when files are in an object store: the object is
//! streamed through vidgate with the Range support a `<video>` element needs
//! (206 with `Content-Range`, `Accept-Ranges`, 416), so every public URL
//! stays on our own origin. On local disk, `ServeDir` answers instead. With
//! either, a file the retention sweep deleted (or whose account was
//! deleted) answers 410 Gone at once, kept request media is served only to
//! a signed URL that has not expired, and every answer says `nosniff` and
//! how long a client may keep it.

use axum::body::Body;
use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState, rfc3339};
use crate::bound_media::is_kept_media;
use crate::storage::{
    ReadError, UNKNOWN_CONTENT_TYPE, content_type_of, is_stored_name, media_type_named,
};
use crate::store::now_millis;

/// A stored file as an answer from another route (the clip of a video
/// behind the other dialects' `content` routes): the same bytes, type and
/// Range handling as `GET /files/<path>`, from local disk or the bucket.
pub async fn serve_stored(
    state: &AppState,
    relative_path: String,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(root) = state.storage.local_root() else {
        return serve(
            State(state.clone()),
            Method::GET,
            Path(relative_path),
            headers,
        )
        .await;
    };
    if !is_stored_name(&relative_path) {
        return Err(ApiError::NotFound("No such file.".into()));
    }
    let mut request = Request::new(Body::empty());
    *request.headers_mut() = headers;
    let response = tower::ServiceExt::oneshot(
        tower_http::services::ServeFile::new(root.join(&relative_path)),
        request,
    )
    .await
    .map_err(ApiError::internal)?;
    Ok(response.map(Body::new))
}

pub async fn serve(
    State(state): State<AppState>,
    method: Method,
    Path(relative_path): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound("No such file.".into());
    if !is_stored_name(&relative_path) {
        return Err(not_found());
    }
    let failed = |error: ReadError| match error {
        ReadError::NotFound => not_found(),
        other => ApiError::internal(other),
    };
    let size = state
        .storage
        .object_size(&relative_path)
        .await
        .map_err(failed)?;
    let range = match headers.get(header::RANGE) {
        None => None,
        Some(value) => match satisfiable_range(value, size) {
            Some(range) => Some(range),
            None => return Ok(unsatisfiable(size)),
        },
    };
    let span = range.clone().unwrap_or(0..size);
    let body = if span.is_empty() || method == Method::HEAD {
        Body::empty()
    } else {
        let object = state
            .storage
            .object_range(&relative_path, span.clone())
            .await
            .map_err(failed)?;
        Body::from_stream(object.into_stream())
    };
    let mut response = Response::new(body);
    let content_type = served_type(&state, &relative_path).await?;
    let response_headers = response.headers_mut();
    response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response_headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    response_headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response_headers.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(span.end - span.start),
    );
    if range.is_some() {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        response.headers_mut().insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {}-{}/{size}", span.start, span.end - 1))
                .expect("digits are a valid header value"),
        );
    }
    Ok(response)
}

/// Where files are served, as request paths spell it.
const FILES_PATH_PREFIX: &str = "/api/v1/files/";

/// A file's path as request logs may show it: the kind of file (`outputs`,
/// `uploads`, `media`) and nothing of its name, which is the capability
/// that lets anyone holding the URL fetch it. `None` for other paths.
pub fn loggable_path(path: &str) -> Option<String> {
    let name = path.strip_prefix(FILES_PATH_PREFIX)?;
    let kind = name.split('/').next().unwrap_or_default();
    let kind = if is_stored_name(kind) { kind } else { "-" };
    Some(format!("{FILES_PATH_PREFIX}{kind}/[redacted]"))
}

/// The request's URI as the client sent it, however the router nested it.
fn original_uri(request: &Request) -> &Uri {
    request
        .extensions()
        .get::<OriginalUri>()
        .map_or_else(|| request.uri(), |original| &original.0)
}

/// The stored name a request asks for: what follows the mount point,
/// `/api/v1/files/`, as the client spelled it.
fn stored_name_of(request: &Request) -> String {
    original_uri(request)
        .path()
        .split_once("/files/")
        .map(|(_, relative_path)| relative_path.to_owned())
        .unwrap_or_default()
}

/// Serves kept request media (`media/…`, see `bound_media.rs`) only to a
/// URL with a valid signature that has not expired, and refuses it with
/// 403 `forbidden` otherwise (not 410: the copy may still be there for a
/// URL signed later, and a fetcher is told nothing about whether it
/// exists). A name not in its plain spelling answers 404 here, so that no
/// escaped spelling, which the file server would decode, passes this check
/// unsigned.
pub async fn kept_media_needs_a_signature(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let relative_path = stored_name_of(&request);
    if !is_stored_name(&relative_path) {
        return Err(ApiError::NotFound("No such file.".into()));
    }
    if is_kept_media(&relative_path) {
        state
            .media_signer
            .check(
                &relative_path,
                original_uri(&request).query(),
                now_millis() / 1000,
            )
            .map_err(|refusal| ApiError::Forbidden(refusal.to_string()))?;
    }
    Ok(next.run(request).await)
}

/// How long a client may keep a file it fetched: an hour, far shorter than
/// the shortest retention (a day), so that a deleted file does not live on
/// in caches for long. `private`: a file's URL is its capability, and a
/// shared cache must not answer it to anyone else.
const FILE_CACHE_CONTROL: &str = "private, max-age=3600";

/// Answers 410 Gone, with the time it expired, for a file that expired or
/// whose account was deleted, before the storage is asked: the bytes may
/// still be there until the next sweep deletes them, but not one more
/// request gets them. Every answer of a file route carries `nosniff` and
/// every file served `FILE_CACHE_CONTROL`.
pub async fn gone_when_expired(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let relative_path = stored_name_of(&request);
    let mut response = if is_stored_name(&relative_path)
        && let Some(expired_at) = state
            .store
            .retention()
            .file_expired_at(&relative_path)
            .await?
    {
        ApiError::Gone(format!(
            "This file expired at {} and was deleted; the record that named it remains.",
            rfc3339(expired_at)
        ))
        .into_response()
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if response.status().is_success() {
        response.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(FILE_CACHE_CONTROL),
        );
    }
    Ok(response)
}

/// The type to serve a file as: from its name, or for a direct upload (named
/// before its content was known) the type its probe recorded. Anything else
/// is an opaque download, so a client can never make our origin serve a page.
async fn served_type(state: &AppState, relative_path: &str) -> Result<&'static str, ApiError> {
    let named = content_type_of(relative_path);
    if named != UNKNOWN_CONTENT_TYPE || !relative_path.starts_with("uploads/") {
        return Ok(named);
    }
    let recorded = state.store.uploads().content_type(relative_path).await?;
    Ok(recorded
        .as_deref()
        .and_then(media_type_named)
        .unwrap_or(UNKNOWN_CONTENT_TYPE))
}

/// The one byte range a `Range` header asks for, as ServeDir reads it: a
/// malformed header, several ranges, or a range outside the object cannot be
/// satisfied.
fn satisfiable_range(value: &HeaderValue, size: u64) -> Option<std::ops::Range<u64>> {
    let text = value.to_str().ok()?;
    let ranges = http_range_header::parse_range_header(text)
        .ok()?
        .validate(size)
        .ok()?;
    match ranges.as_slice() {
        [range] if *range.start() < size => Some(*range.start()..range.end() + 1),
        _ => None,
    }
}

fn unsatisfiable(size: u64) -> Response {
    let mut response = (
        StatusCode::RANGE_NOT_SATISFIABLE,
        "The requested range is not satisfiable.",
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_RANGE,
        HeaderValue::from_str(&format!("bytes */{size}")).expect("digits are a valid header value"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(header: &str, size: u64) -> Option<std::ops::Range<u64>> {
        satisfiable_range(&HeaderValue::from_str(header).unwrap(), size)
    }

    #[test]
    fn logged_file_paths_never_show_a_file_name() {
        let name = "outputs/Zq8vT1sYb2xW9kLmN3pR5tU7/gen_01abc.mp4";
        let logged = loggable_path(&format!("/api/v1/files/{name}")).unwrap();
        assert_eq!(logged, "/api/v1/files/outputs/[redacted]");
        assert_eq!(
            loggable_path("/api/v1/files/%2e%2e/x").unwrap(),
            "/api/v1/files/-/[redacted]"
        );
        assert_eq!(loggable_path("/api/v1/generations/gen_01abc"), None);
    }

    #[test]
    fn single_ranges_are_read_and_clamped() {
        assert_eq!(range("bytes=0-99", 1000), Some(0..100));
        assert_eq!(range("bytes=900-", 1000), Some(900..1000));
        assert_eq!(range("bytes=-100", 1000), Some(900..1000));
        assert_eq!(range("bytes=990-2000", 1000), Some(990..1000));
    }

    #[test]
    fn other_ranges_cannot_be_satisfied() {
        assert_eq!(range("bytes=1000-", 1000), None);
        assert_eq!(range("bytes=0-1,5-6", 1000), None);
        assert_eq!(range("items=0-1", 1000), None);
        assert_eq!(range("bytes=0-", 0), None);
    }
}
