//! Stripe's webhook signatures, checked as Stripe documents them
//! (https://docs.stripe.com/webhooks#verify-manually) and as its own
//! libraries check them (`WebhookSignature.verify_header` of the Python
//! package): the `Stripe-Signature` header is `t=<unix seconds>` and one or
//! more `v1=<hex HMAC-SHA256>` (Stripe sends several while a secret is
//! being rolled), each signing `{t}.{raw body}` with the whole `whsec_…`
//! secret as the key. Any `v1` may match; other schemes (`v0`) are ignored.
//! No I/O: the caller passes the time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// How old a signature may be, as Stripe's libraries default to: a
/// captured event replayed later than this is refused even though its
/// signature is sound.
pub const SIGNATURE_TOLERANCE_SECONDS: i64 = 300;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    #[error("the Stripe-Signature header is missing")]
    Missing,
    #[error("the Stripe-Signature header has no timestamp")]
    NoTimestamp,
    #[error("the Stripe-Signature header has no v1 signature")]
    NoSignature,
    #[error("no v1 signature matches the body")]
    Mismatch,
    #[error("the signature's timestamp is more than {SIGNATURE_TOLERANCE_SECONDS} s old")]
    Stale,
    #[error("the signature's timestamp is more than {SIGNATURE_TOLERANCE_SECONDS} s ahead")]
    Ahead,
}

/// Checks `header` (the `Stripe-Signature` value) against the raw `body`
/// with `secret` at `now_seconds`. The comparison of each candidate takes
/// the same time however much of it matches.
pub fn verify_signature(
    header: Option<&str>,
    body: &[u8],
    secret: &str,
    now_seconds: i64,
) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for item in header.split(',') {
        match item.trim().split_once('=') {
            Some(("t", value)) => timestamp = value.parse::<i64>().ok(),
            Some(("v1", value)) => candidates.push(value),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::NoTimestamp)?;
    if candidates.is_empty() {
        return Err(SignatureError::NoSignature);
    }
    let expected = signature_hex(secret, timestamp, body);
    let matched = candidates
        .iter()
        .any(|candidate| bool::from(candidate.as_bytes().ct_eq(expected.as_bytes())));
    if !matched {
        return Err(SignatureError::Mismatch);
    }
    // Stripe's libraries refuse only the old ones. A timestamp far ahead of
    // this node's clock is refused too (issue 50): otherwise a captured
    // event signed for the future could be replayed until that time and
    // past it, since it never grows old. Within the tolerance it is the
    // sender's clock, not a replay.
    if timestamp < now_seconds - SIGNATURE_TOLERANCE_SECONDS {
        return Err(SignatureError::Stale);
    }
    if timestamp > now_seconds + SIGNATURE_TOLERANCE_SECONDS {
        return Err(SignatureError::Ahead);
    }
    Ok(())
}

/// The lowercase hex HMAC-SHA256 of `{timestamp}.{body}` under `secret`.
fn signature_hex(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_secret";
    const BODY: &[u8] = br#"{"id":"evt_1","type":"checkout.session.completed"}"#;

    fn header(timestamp: i64, signatures: &[&str]) -> String {
        let mut header = format!("t={timestamp}");
        for signature in signatures {
            header.push_str(&format!(",v1={signature}"));
        }
        header
    }

    #[test]
    fn a_header_as_stripe_signs_passes() {
        let signature = signature_hex(SECRET, 1_700_000_000, BODY);
        let header = header(1_700_000_000, &[&signature]);
        assert_eq!(
            verify_signature(Some(&header), BODY, SECRET, 1_700_000_010),
            Ok(())
        );
    }

    #[test]
    fn any_of_several_v1_signatures_may_match_and_v0_is_ignored() {
        let signature = signature_hex(SECRET, 1_700_000_000, BODY);
        let header = format!(
            "t=1700000000,v0={signature},v1={},v1={signature}",
            "0".repeat(64)
        );
        assert_eq!(
            verify_signature(Some(&header), BODY, SECRET, 1_700_000_000),
            Ok(())
        );
        let only_v0 = format!("t=1700000000,v0={signature}");
        assert_eq!(
            verify_signature(Some(&only_v0), BODY, SECRET, 1_700_000_000),
            Err(SignatureError::NoSignature)
        );
    }

    #[test]
    fn another_body_secret_or_timestamp_does_not_match() {
        let signature = signature_hex(SECRET, 1_700_000_000, BODY);
        let signed = header(1_700_000_000, &[&signature]);
        let cases = [
            (signed.clone(), &br#"{"id":"evt_2"}"#[..], SECRET),
            (signed.clone(), BODY, "whsec_another"),
            (header(1_700_000_001, &[&signature]), BODY, SECRET),
        ];
        for (header, body, secret) in cases {
            assert_eq!(
                verify_signature(Some(&header), body, secret, 1_700_000_000),
                Err(SignatureError::Mismatch),
                "{header}"
            );
        }
    }

    #[test]
    fn a_signature_older_than_the_tolerance_is_stale() {
        let signature = signature_hex(SECRET, 1_700_000_000, BODY);
        let header = header(1_700_000_000, &[&signature]);
        let last_second = 1_700_000_000 + SIGNATURE_TOLERANCE_SECONDS;
        assert_eq!(
            verify_signature(Some(&header), BODY, SECRET, last_second),
            Ok(())
        );
        assert_eq!(
            verify_signature(Some(&header), BODY, SECRET, last_second + 1),
            Err(SignatureError::Stale)
        );
    }

    #[test]
    fn a_signature_further_ahead_than_the_tolerance_is_refused() {
        let signature = signature_hex(SECRET, 1_700_000_000, BODY);
        let header = header(1_700_000_000, &[&signature]);
        let earliest = 1_700_000_000 - SIGNATURE_TOLERANCE_SECONDS;
        assert_eq!(
            verify_signature(Some(&header), BODY, SECRET, earliest),
            Ok(())
        );
        assert_eq!(
            verify_signature(Some(&header), BODY, SECRET, earliest - 1),
            Err(SignatureError::Ahead)
        );
    }

    #[test]
    fn a_missing_or_malformed_header_is_refused() {
        assert_eq!(
            verify_signature(None, BODY, SECRET, 0),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify_signature(Some("v1=abc"), BODY, SECRET, 0),
            Err(SignatureError::NoTimestamp)
        );
        assert_eq!(
            verify_signature(Some("t=soon,v1=abc"), BODY, SECRET, 0),
            Err(SignatureError::NoTimestamp)
        );
    }
}
