//! JSON documents that only change when the catalog does (the public model
//! records and the OpenAPI description): serialised once when the router is
//! built, then answered from those bytes with a strong `ETag`, or `304 Not
//! Modified` when the client already holds them.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;

use crate::ids::sha256_hex;

/// The catalog changes only when the operator replaces it and restarts, so
/// clients and proxies may keep these documents for a while.
const CACHE_CONTROL: &str = "public, max-age=300";

/// A serialised JSON document and its entity tag.
#[derive(Clone)]
pub struct PreparedJson {
    body: Bytes,
    etag: HeaderValue,
}

impl PreparedJson {
    pub fn new(document: &impl Serialize) -> PreparedJson {
        let text = serde_json::to_string(document).expect("a prepared document is plain JSON");
        let etag = format!("\"{}\"", &sha256_hex(text.as_bytes())[..32]);
        PreparedJson {
            body: Bytes::from(text),
            etag: HeaderValue::from_str(&etag).expect("a quoted hex digest is a header value"),
        }
    }

    /// The document, or 304 when `If-None-Match` names its tag (or `*`).
    /// Both answers carry the tag and the cache lifetime.
    pub fn respond(&self, request_headers: &HeaderMap) -> Response {
        let response = if self.is_held_by_client(request_headers) {
            Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .body(Body::empty())
        } else {
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(self.body.clone()))
        };
        let mut response = response.expect("static headers are valid");
        let headers = response.headers_mut();
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(CACHE_CONTROL),
        );
        headers.insert(header::ETAG, self.etag.clone());
        response
    }

    /// `If-None-Match` uses the weak comparison (RFC 9110 section 13.1.2),
    /// so a `W/` prefix a proxy added still matches.
    fn is_held_by_client(&self, request_headers: &HeaderMap) -> bool {
        let ours = self.etag.as_bytes();
        request_headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|tags| tags.split(','))
            .map(str::trim)
            .any(|tag| tag == "*" || tag.trim_start_matches("W/").as_bytes() == ours)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_with(if_none_match: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(if_none_match).unwrap(),
        );
        headers
    }

    #[test]
    fn answers_the_document_then_304_for_its_tag() {
        let prepared = PreparedJson::new(&serde_json::json!({ "object": "list" }));
        let full = prepared.respond(&HeaderMap::new());
        assert_eq!(full.status(), StatusCode::OK);
        let etag = full.headers()[header::ETAG].to_str().unwrap().to_owned();
        assert_eq!(full.headers()[header::CACHE_CONTROL], CACHE_CONTROL);

        for matching in [
            etag.clone(),
            format!("W/{etag}"),
            format!("\"x\", {etag}"),
            "*".into(),
        ] {
            let response = prepared.respond(&headers_with(&matching));
            assert_eq!(response.status(), StatusCode::NOT_MODIFIED, "{matching}");
            assert_eq!(response.headers()[header::ETAG], etag.as_str());
        }
        let other = prepared.respond(&headers_with("\"0123\""));
        assert_eq!(other.status(), StatusCode::OK);
    }
}
