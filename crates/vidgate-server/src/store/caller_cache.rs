//! Authenticated callers remembered for a moment, so that most API requests
//! do not read the database to authenticate.
//!
//! An entry is used for at most `CALLER_CACHE_TTL` after the database said
//! the key was valid. A revocation on this node clears the cache at once;
//! one made by another node or by `vidgate admin` takes effect here when the
//! entry expires, so within one second everywhere. Limits changed with
//! `vidgate admin account limits` apply within the same second. Only keys
//! the database accepted are remembered, so unknown keys cannot fill it.
//! Each revocation on this node is also announced (`revocations`), so that
//! the waits and event streams a revoked key holds open end at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Caller;

/// How long a key the database accepted is trusted without asking again.
pub const CALLER_CACHE_TTL: Duration = Duration::from_secs(1);

/// Bounds the memory a burst of distinct valid keys can take.
const MAX_CACHED_CALLERS: usize = 10_000;

pub struct CallerCache {
    state: Mutex<CacheState>,
    /// The count of revocations, announced to whoever watches.
    announced: tokio::sync::watch::Sender<u64>,
}

impl Default for CallerCache {
    fn default() -> CallerCache {
        CallerCache {
            state: Mutex::default(),
            announced: tokio::sync::watch::Sender::new(0),
        }
    }
}

#[derive(Default)]
struct CacheState {
    /// Keyed by the key's secret digest.
    callers: HashMap<String, (Caller, Instant)>,
    /// Counts revocations, so that a lookup that read the database before a
    /// revocation cannot put the revoked key back after it.
    revocations: u64,
}

/// Taken before reading the database; `remember` uses it to refuse a stale
/// answer.
#[derive(Clone, Copy)]
pub struct LookupTicket {
    revocations: u64,
    started: Instant,
}

impl CallerCache {
    /// The remembered caller of this digest, if still fresh.
    pub fn get(&self, secret_sha256: &str) -> Option<Caller> {
        let state = self
            .state
            .lock()
            .expect("the caller cache lock is never poisoned");
        state
            .callers
            .get(secret_sha256)
            .filter(|(_, fetched)| fetched.elapsed() < CALLER_CACHE_TTL)
            .map(|(caller, _)| caller.clone())
    }

    /// Call before reading the database for a caller.
    pub fn ticket(&self) -> LookupTicket {
        let state = self
            .state
            .lock()
            .expect("the caller cache lock is never poisoned");
        LookupTicket {
            revocations: state.revocations,
            started: Instant::now(),
        }
    }

    /// Remembers what the database said, unless a key was revoked since the
    /// ticket was taken. The entry's age counts from the ticket, when the
    /// database was asked.
    pub fn remember(&self, ticket: LookupTicket, secret_sha256: &str, caller: &Caller) {
        let mut state = self
            .state
            .lock()
            .expect("the caller cache lock is never poisoned");
        if state.revocations != ticket.revocations {
            return;
        }
        if state.callers.len() >= MAX_CACHED_CALLERS {
            state
                .callers
                .retain(|_, (_, fetched)| fetched.elapsed() < CALLER_CACHE_TTL);
            if state.callers.len() >= MAX_CACHED_CALLERS {
                state.callers.clear();
            }
        }
        state
            .callers
            .insert(secret_sha256.to_owned(), (caller.clone(), ticket.started));
    }

    /// Forgets every caller: call after a key was revoked (in the database),
    /// so the revocation applies to the next request on this node.
    pub fn forget_all(&self) {
        let mut state = self
            .state
            .lock()
            .expect("the caller cache lock is never poisoned");
        state.revocations += 1;
        state.callers.clear();
        self.announced.send_replace(state.revocations);
    }

    /// Changes after every revocation on this node.
    pub fn revocations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.announced.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::AccountLimits;

    fn caller(key_id: &str) -> Caller {
        Caller {
            key_id: key_id.into(),
            account_id: "acct_1".into(),
            limits: AccountLimits::default(),
        }
    }

    #[test]
    fn remembers_a_caller_until_a_revocation() {
        let cache = CallerCache::default();
        assert!(cache.get("digest").is_none());
        let ticket = cache.ticket();
        cache.remember(ticket, "digest", &caller("key_1"));
        assert_eq!(cache.get("digest").unwrap().key_id, "key_1");
        cache.forget_all();
        assert!(cache.get("digest").is_none());
    }

    #[test]
    fn a_lookup_that_raced_a_revocation_is_not_remembered() {
        let cache = CallerCache::default();
        let ticket = cache.ticket();
        cache.forget_all();
        cache.remember(ticket, "digest", &caller("key_1"));
        assert!(cache.get("digest").is_none());
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let cache = CallerCache::default();
        let stale = LookupTicket {
            revocations: 0,
            started: Instant::now() - CALLER_CACHE_TTL,
        };
        cache.remember(stale, "digest", &caller("key_1"));
        assert!(cache.get("digest").is_none());
    }
}
