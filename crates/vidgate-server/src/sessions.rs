//! Dashboard sessions as vidgate keeps them, apart from how a browser
//! carries them (cookies and forms are the dashboard's business). A session
//! is a random token whose SHA-256 alone the database keeps; it ends after
//! `IDLE_TIMEOUT` without use, at `ABSOLUTE_LIFETIME` after sign-in however
//! active, or when revoked. Both the dashboard's pages and the API's
//! authentication (a session is an API caller) read sessions here.

use std::time::Duration;

use subtle::ConstantTimeEq;

use crate::ids::{random_secret, random_token, sha256_hex};
use crate::store::{Caller, NewSession, Session, Store, StoreError, User, now_millis};

/// A session unused for this long has ended.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// A session ends this long after sign-in, however active it is.
pub const ABSOLUTE_LIFETIME: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// Compares a CSRF token in constant time; an empty expected token never
/// matches.
pub fn tokens_match(expected: &str, given: &str) -> bool {
    !expected.is_empty() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The live session a token names, if any.
pub async fn live_session(store: &dyn Store, token: &str) -> Result<Option<Session>, StoreError> {
    store
        .session(&sha256_hex(token.as_bytes()), IDLE_TIMEOUT)
        .await
}

/// Starts a session for a user who just proved their password; returns its
/// token, which only the browser keeps.
pub async fn start_session(store: &dyn Store, user: &User) -> Result<String, StoreError> {
    let token = random_secret();
    store
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
        key_id: format!("session:{}", session.id),
        account_id: session.account_id.clone(),
        limits: session.limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_must_match_exactly_and_not_be_empty() {
        assert!(tokens_match("abc", "abc"));
        assert!(!tokens_match("abc", "abd"));
        assert!(!tokens_match("abc", ""));
        assert!(!tokens_match("", ""));
    }
}
