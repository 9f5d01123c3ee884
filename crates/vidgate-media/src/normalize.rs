//! One spelling per media URL. Decisions keyed on a URL (which account owns
//! an upload, the probe cache, whether a URL is one of the server's own
//! files) must all see the same string, or a second spelling of the same
//! resource slips past one of them: `HTTP://host/files/uploads/…` or
//! `…/files/./uploads/…` named another account's upload while the ownership
//! check compared raw strings. Every such decision goes through
//! [`normalize_url`].
//!
//! The form is the WHATWG parse (scheme and host in lower case, the default
//! port dropped, `.` and `..` segments resolved, `%2e` included) plus what
//! RFC 3986 section 6.2.2 adds: percent-escapes of unreserved characters
//! decoded, the hex digits of every other escape in upper case, and no
//! fragment (it is never sent to a server). A trailing dot on a host name is
//! dropped too.

use url::{Host, Url};

use crate::fetch::FetchError;

/// The normal form of `text`, or `None` when it is not a URL (the fetch
/// then reports why).
pub fn normalize_url(text: &str) -> Option<String> {
    parse_normalized(text).ok().map(String::from)
}

/// Parses `text` and brings it to its normal form.
pub(crate) fn parse_normalized(text: &str) -> Result<Url, FetchError> {
    let invalid = |error: url::ParseError| FetchError::InvalidUrl(error.to_string());
    let mut url = Url::parse(text).map_err(invalid)?;
    url.set_fragment(None);
    if let Some(Host::Domain(domain)) = url.host()
        && let Some(trimmed) = domain.strip_suffix('.')
        && !trimmed.is_empty()
    {
        let trimmed = trimmed.to_owned();
        url.set_host(Some(&trimmed)).map_err(invalid)?;
    }
    // Decoding an escape can reveal a dot segment (`%2E` was resolved by
    // the parser already, but the loop makes the result a fixed point
    // whatever the input), so decode and re-parse until nothing changes.
    for _ in 0..4 {
        let path = decode_unreserved(url.path());
        let query = url.query().map(decode_unreserved);
        if path == url.path() && query.as_deref() == url.query() {
            break;
        }
        let mut rebuilt = url.clone();
        rebuilt.set_path(&path);
        rebuilt.set_query(query.as_deref());
        url = Url::parse(rebuilt.as_str()).map_err(invalid)?;
    }
    Ok(url)
}

/// RFC 3986's unreserved characters, which mean the same escaped or not.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)
}

/// Decodes escapes of unreserved characters and upper-cases the hex digits
/// of the others.
fn decode_unreserved(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%' && index + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[index + 1..index + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) if is_unreserved(byte) => {
                out.push(char::from(byte));
                index += 3;
            }
            Some(byte) => {
                out.push_str(&format!("%{byte:02X}"));
                index += 3;
            }
            None => {
                let character = text[index..].chars().next().expect("inside the text");
                out.push(character);
                index += character.len_utf8();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANONICAL: &str = "http://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png";

    #[test]
    fn every_spelling_of_one_url_has_one_normal_form() {
        for spelling in [
            CANONICAL,
            "HTTP://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png",
            "Http://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/./uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/x/../uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/%2e/uploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/uploads/abc/%2E%2E/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/%75ploads/abc/upl_1.png",
            "http://127.0.0.1:8080/api/v1/files/uploads/abc/upl%5F1%2Epng",
            "http://127.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png#frame",
            "http://0x7f.0.0.1:8080/api/v1/files/uploads/abc/upl_1.png",
        ] {
            assert_eq!(
                normalize_url(spelling).as_deref(),
                Some(CANONICAL),
                "{spelling}"
            );
        }
    }

    #[test]
    fn host_case_default_ports_and_trailing_dots_are_normalised() {
        let canonical = "https://media.example.com/a.mp4";
        for spelling in [
            "https://MEDIA.Example.COM/a.mp4",
            "https://media.example.com:443/a.mp4",
            "HTTPS://media.example.com.:443/a.mp4",
        ] {
            assert_eq!(
                normalize_url(spelling).as_deref(),
                Some(canonical),
                "{spelling}"
            );
        }
        assert_eq!(
            normalize_url("http://media.example.com:80/a.mp4").as_deref(),
            Some("http://media.example.com/a.mp4")
        );
        // A port that is not the default is part of the address.
        assert_eq!(
            normalize_url("http://media.example.com:8080/a.mp4").as_deref(),
            Some("http://media.example.com:8080/a.mp4")
        );
    }

    #[test]
    fn reserved_escapes_stay_escaped_with_upper_case_hex() {
        assert_eq!(
            normalize_url("http://example.com/a%2fb%3f?x=%2a%41").as_deref(),
            Some("http://example.com/a%2Fb%3F?x=%2AA")
        );
        assert_eq!(normalize_url("not a url"), None);
    }
}
