//! The stylesheet and the script, compiled into the binary and served under
//! a path that contains a digest of their content, so browsers may cache
//! them for a year and still get a new file after an upgrade.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::ids::sha256_hex;

const STYLESHEET: &str = include_str!("assets/app.css");
const SCRIPT: &str = include_str!("assets/app.js");
const ICON: &str = include_str!("assets/icon.svg");

/// The digest of the three files: one version for all keeps the paths simple.
fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        sha256_hex(format!("{STYLESHEET}\0{SCRIPT}\0{ICON}").as_bytes())[..16].to_owned()
    })
}

pub fn stylesheet_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| format!("/dashboard/assets/{}/app.css", version()))
}

pub fn script_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| format!("/dashboard/assets/{}/app.js", version()))
}

pub fn icon_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| format!("/dashboard/assets/{}/icon.svg", version()))
}

pub async fn serve(Path((requested_version, name)): Path<(String, String)>) -> Response {
    let (body, content_type) = match name.as_str() {
        "app.css" => (STYLESHEET, "text/css; charset=utf-8"),
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return super::not_found(None),
    };
    // An old version's path is not served the new content under a year-long
    // cache: it is gone, as it would be behind any asset pipeline.
    if requested_version != version() {
        return super::not_found(None);
    }
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            ),
        ],
        body,
    )
        .into_response()
}
