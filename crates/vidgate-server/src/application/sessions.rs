//! Dashboard sessions as vidgate keeps them, apart from how a browser
//! carries them (cookies and forms are the dashboard's business). A session
//! is a random token whose SHA-256 alone the database keeps; it ends after
//! `IDLE_TIMEOUT` without use, at `ABSOLUTE_LIFETIME` after sign-in however
//! active, or when revoked. Both the dashboard's pages and the API's
//! authentication (a session is an API caller) read sessions here.

use std::time::Duration;

use subtle::ConstantTimeEq;

use crate::ids::{random_secret, random_token, sha256_hex};
use crate::store::{
    Caller, NewSession, SESSION_CALLER_PREFIX, Session, Store, StoreError, User, now_millis,
};

/// A session unused for this long has ended.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// A session ends this long after sign-in, however active it is.
pub const ABSOLUTE_LIFETIME: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Compares a CSRF token in constant time; an empty expected token never
/// matches.
pub fn tokens_match(expected: &str, given: &str) -> bool {
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The purpose under which the pre-session CSRF key is kept in the store.
const PRE_SESSION_KEY_PURPOSE: &str = "dashboard-pre-session-csrf";

/// How long a pre-session CSRF token is good for: as long as a sign-in page
/// stays open.
pub const PRE_SESSION_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// The CSRF tokens of the sign-in and sign-up forms, before there is a
/// session: `<nonce>.<expiry>.<HMAC-SHA256 of both>` with a key every node
/// shares, carried in a cookie and echoed by the form. Only a token this
/// service issued, and not yet expired, passes, so a cookie planted with a
/// value of the planter's choosing does not.
pub struct PreSessionCsrf {
    key: Vec<u8>,
}

impl PreSessionCsrf {
    /// The tokens' key every node shares: the store's, or a new random one
    /// that this call stores when there is none yet.
    pub async fn shared(store: &Store) -> Result<PreSessionCsrf, StoreError> {
        let key = store
            .server_keys()
            .get(PRE_SESSION_KEY_PURPOSE, &random_secret())
            .await?;
        Ok(PreSessionCsrf::new(key.as_bytes()))
    }

    pub fn new(key: &[u8]) -> PreSessionCsrf {
        PreSessionCsrf { key: key.to_vec() }
    }

    fn signature(&self, nonce: &str, expires_at: i64) -> String {
        signature(&self.key, nonce, expires_at)
    }

    /// A new token, good for `PRE_SESSION_LIFETIME` from `now` (Unix ms).
    pub fn issue(&self, now: i64) -> String {
        let nonce = random_secret();
        let expires_at = now + PRE_SESSION_LIFETIME.as_millis() as i64;
        let signature = self.signature(&nonce, expires_at);
        format!("{nonce}.{expires_at}.{signature}")
    }

    /// Whether `token` is one this service issued that has not expired at
    /// `now`; the signature is compared in constant time.
    pub fn is_valid(&self, token: &str, now: i64) -> bool {
        let mut parts = token.splitn(3, '.');
        let (Some(nonce), Some(expires_at), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let Ok(expires_at) = expires_at.parse::<i64>() else {
            return false;
        };
        tokens_match(&self.signature(nonce, expires_at), signature) && now < expires_at
    }
}

/// The base64url HMAC-SHA256 under `key` of `{subject}.{expires_at}`, the
/// signature of the dashboard's signed tokens.
fn signature(key: &[u8], subject: &str, expires_at: i64) -> String {
    use base64::Engine;
    use hmac::{KeyInit, Mac};
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(subject.as_bytes());
    mac.update(b".");
    mac.update(expires_at.to_string().as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// The purpose under which the device cookies' key is kept in the store.
const DEVICE_KEY_PURPOSE: &str = "dashboard-device-cookie";

/// How long a browser in which an email signed in stays known to it.
pub const DEVICE_LIFETIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Device cookies, OWASP's answer to online guessing that must not lock the
/// owner out ("Slow Down Online Guessing Attacks with Device Cookies"): a
/// browser in which an email's password was right once carries
/// `<expiry>.<HMAC-SHA256 of the email and the expiry>`. Guesses at an
/// email from browsers without one share the email's own bucket, which
/// refuses when empty however many addresses or IPv6 networks they come
/// from; a browser with one is held to its address's and pair's buckets
/// only, so strangers emptying the email's bucket do not lock its owner out
/// of a browser they used before.
pub struct DeviceCookies {
    key: Vec<u8>,
}

impl DeviceCookies {
    /// The cookies' key every node shares: the store's, or a new random one
    /// that this call stores when there is none yet.
    pub async fn shared(store: &Store) -> Result<DeviceCookies, StoreError> {
        let key = store
            .server_keys()
            .get(DEVICE_KEY_PURPOSE, &random_secret())
            .await?;
        Ok(DeviceCookies::new(key.as_bytes()))
    }

    pub fn new(key: &[u8]) -> DeviceCookies {
        DeviceCookies { key: key.to_vec() }
    }

    /// The cookie value for a browser in which `email` just signed in,
    /// good for `DEVICE_LIFETIME` from `now` (Unix ms).
    pub fn issue(&self, email: &str, now: i64) -> String {
        let expires_at = now + DEVICE_LIFETIME.as_millis() as i64;
        format!("{expires_at}.{}", signature(&self.key, email, expires_at))
    }

    /// Whether `value` is a cookie this service issued for `email` that has
    /// not expired at `now`; the signature is compared in constant time.
    pub fn is_valid_for(&self, value: &str, email: &str, now: i64) -> bool {
        let Some((expires_at, given)) = value.split_once('.') else {
            return false;
        };
        let Ok(expires_at) = expires_at.parse::<i64>() else {
            return false;
        };
        tokens_match(&signature(&self.key, email, expires_at), given) && now < expires_at
    }
}

/// The live session a token names, if any.
pub async fn live_session(store: &Store, token: &str) -> Result<Option<Session>, StoreError> {
    store
        .users()
        .session(&sha256_hex(token.as_bytes()), IDLE_TIMEOUT)
        .await
}

/// Starts a session for a user who just proved their password; returns its
/// token, which only the browser keeps.
pub async fn start_session(store: &Store, user: &User) -> Result<String, StoreError> {
    let token = random_secret();
    store
        .users()
        .create_session(&NewSession {
            id: format!("ses_{}", random_token(20)),
            token_sha256: sha256_hex(token.as_bytes()),
            user_id: user.id.clone(),
            account_id: user.account_id.clone(),
            csrf_token: random_secret(),
            expires_at: now_millis() + ABSOLUTE_LIFETIME.as_millis() as i64,
        })
        .await?;
    Ok(token)
}

/// The session as an API caller: the session's account, with a rate-limit
/// bucket of its own, so the dashboard's calls count without sharing a key's.
pub fn api_caller(session: &Session) -> Caller {
    Caller {
        key_id: format!("{SESSION_CALLER_PREFIX}{}", session.id),
        account_id: session.account_id.clone(),
        limits: session.limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_issued_unexpired_pre_session_token_is_valid() {
        let csrf = PreSessionCsrf::new(b"a key");
        let now = 1_800_000_000_000;
        let token = csrf.issue(now);
        assert!(csrf.is_valid(&token, now));
        assert!(!csrf.is_valid(&token, now + PRE_SESSION_LIFETIME.as_millis() as i64));
        assert!(!PreSessionCsrf::new(b"another key").is_valid(&token, now));
        let (nonce, rest) = token.split_once('.').unwrap();
        assert!(!csrf.is_valid(&format!("{nonce}x.{rest}"), now));
        for forged in [
            "",
            "planted",
            "a.b.c",
            "a.1.",
            &format!("{nonce}.{}.x", now + 1),
        ] {
            assert!(!csrf.is_valid(forged, now), "{forged}");
        }
    }

    #[test]
    fn a_device_cookie_is_good_for_its_email_only_until_it_expires() {
        let devices = DeviceCookies::new(b"a key");
        let now = 1_800_000_000_000;
        let cookie = devices.issue("ada@example.com", now);
        assert!(devices.is_valid_for(&cookie, "ada@example.com", now));
        assert!(!devices.is_valid_for(&cookie, "bob@example.com", now));
        assert!(!devices.is_valid_for(
            &cookie,
            "ada@example.com",
            now + DEVICE_LIFETIME.as_millis() as i64
        ));
        assert!(!DeviceCookies::new(b"another key").is_valid_for(&cookie, "ada@example.com", now));
        // A later expiry with the old signature does not pass.
        let (_, signature) = cookie.split_once('.').unwrap();
        let stretched = format!("{}.{signature}", i64::MAX);
        assert!(!devices.is_valid_for(&stretched, "ada@example.com", now));
        for forged in ["", "planted", "1.", ".x"] {
            assert!(
                !devices.is_valid_for(forged, "ada@example.com", now),
                "{forged}"
            );
        }
    }

    #[test]
    fn tokens_must_match_exactly_and_not_be_empty() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abc", "abd"));
        assert!(!tokens_match("abc", ""));
        assert!(!tokens_match("", ""));
    }
}
