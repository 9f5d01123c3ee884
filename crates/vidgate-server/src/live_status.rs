//! Live status: following a generation until it changes, for the requests
//! that wait (`Prefer: wait=N`) and the event streams
//! (`GET /generations/{id}/events`).
//!
//! A follower watches the generation through the store (`watch_generation`:
//! an in-process signal on SQLite, `LISTEN`/`NOTIFY` across nodes on
//! PostgreSQL) and reads it again when woken, and at least every
//! `REREAD_INTERVAL` whatever it heard, so a missed signal delays it by at
//! most that and never loses a final state. Between reads it holds no
//! database connection.
//!
//! `LiveStatus` bounds how many waits and streams are open at once, per API
//! key (or dashboard session) and per node, and closes them all at shutdown
//! so that a draining node does not wait on them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::{Generation, GenerationWatch, Store, StoreError};

/// The longest wait a client may ask for, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// How often a follower reads its generation again without being woken.
pub const REREAD_INTERVAL: Duration = Duration::from_secs(1);

/// How long one event stream stays open before it is closed (a client
/// resumes it with `Last-Event-ID`), so that a generation that stays queued
/// cannot hold a slot for ever.
pub const MAX_STREAM_DURATION: Duration = Duration::from_secs(30 * 60);

/// How long a client refused by a cap is asked to wait before trying again.
pub const CAP_RETRY_AFTER: Duration = Duration::from_secs(2);

/// The caps on open waits and streams, counted together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveStatusLimits {
    /// Open at once on this node for one API key or dashboard session.
    pub per_key: u32,
    /// Open at once on this node for everyone; below the HTTP connection
    /// cap, so that other requests still find connections.
    pub per_node: u32,
}

impl Default for LiveStatusLimits {
    fn default() -> LiveStatusLimits {
        LiveStatusLimits {
            per_key: 100,
            per_node: 768,
        }
    }
}

/// Which cap refused a wait or a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LiveStatusRefusal {
    #[error(
        "Too many waits and event streams open for this key: at most {limit} at once. Retry later, or poll."
    )]
    Key { limit: u32 },
    #[error("This server holds as many waits and event streams as it can. Retry later, or poll.")]
    Node { limit: u32 },
}

/// The node's open waits and streams, and the signal that closes them.
pub struct LiveStatus {
    limits: LiveStatusLimits,
    /// Longest wait honoured: `MAX_WAIT_SECONDS`, or less when the HTTP
    /// idle timeout would cut a longer silent request.
    max_wait: Duration,
    open: Mutex<OpenCounts>,
    closing: CancellationToken,
}

#[derive(Default)]
struct OpenCounts {
    total: usize,
    per_key: HashMap<Box<str>, usize>,
}

impl LiveStatus {
    pub fn new(limits: LiveStatusLimits, http_idle_timeout: Duration) -> LiveStatus {
        LiveStatus {
            limits,
            max_wait: http_idle_timeout.min(Duration::from_secs(MAX_WAIT_SECONDS)),
            open: Mutex::default(),
            closing: CancellationToken::new(),
        }
    }

    /// The wait honoured for a request of `seconds`.
    pub fn applied_wait(&self, seconds: u64) -> Duration {
        Duration::from_secs(seconds).min(self.max_wait)
    }

    /// Takes a slot for one wait or stream of `key_id`, given back when the
    /// slot is dropped; refused past either cap.
    pub fn admit(self: &Arc<Self>, key_id: &str) -> Result<LiveSlot, LiveStatusRefusal> {
        let mut open = self.open.lock().expect("the counts are never poisoned");
        if open.total >= self.limits.per_node as usize {
            return Err(LiveStatusRefusal::Node {
                limit: self.limits.per_node,
            });
        }
        let of_key = open.per_key.get(key_id).copied().unwrap_or(0);
        if of_key >= self.limits.per_key as usize {
            return Err(LiveStatusRefusal::Key {
                limit: self.limits.per_key,
            });
        }
        open.total += 1;
        open.per_key.insert(key_id.into(), of_key + 1);
        Ok(LiveSlot {
            live_status: self.clone(),
            key_id: key_id.into(),
        })
    }

    /// Waits and streams open now.
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .expect("the counts are never poisoned")
            .total
    }

    /// Ends every wait (each answers with the state it has) and every
    /// stream, now and from now on: the node is shutting down.
    pub fn close_all(&self) {
        self.closing.cancel();
    }

    /// Cancelled when the node shuts down.
    pub fn closing(&self) -> &CancellationToken {
        &self.closing
    }
}

/// One open wait or stream, counted until dropped.
pub struct LiveSlot {
    live_status: Arc<LiveStatus>,
    key_id: Box<str>,
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        let mut open = self
            .live_status
            .open
            .lock()
            .expect("the counts are never poisoned");
        open.total -= 1;
        if let Some(of_key) = open.per_key.get_mut(&self.key_id) {
            *of_key -= 1;
            if *of_key == 0 {
                open.per_key.remove(&self.key_id);
            }
        }
    }
}

/// What names a generation's state for its followers: its status and its
/// attempts (a re-queued job runs again under the next attempt). The event
/// streams use it as the event id.
pub fn state_id(generation: &Generation) -> String {
    format!("{}-{}", generation.status.as_str(), generation.attempts)
}

/// Follows one generation of one account.
pub struct GenerationFollower {
    store: Arc<Store>,
    account_id: String,
    generation_id: String,
    watch: GenerationWatch,
}

impl GenerationFollower {
    /// Starts following, and reads the generation's state as it is now;
    /// `None` when the account has no such generation. The watch starts
    /// before the read, so a change committed after the read wakes it.
    pub async fn start(
        store: Arc<Store>,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Option<(GenerationFollower, Generation)>, StoreError> {
        let watch = store.watch_generation(generation_id).await;
        let Some(current) = store.generation(account_id, generation_id).await? else {
            return Ok(None);
        };
        Ok(Some((
            GenerationFollower {
                store,
                account_id: account_id.to_owned(),
                generation_id: generation_id.to_owned(),
                watch,
            },
            current,
        )))
    }

    /// Returns the generation once its state differs from `seen`, or as it
    /// is when `until` passes or `closing` is cancelled, whichever comes
    /// first; `None` if it no longer exists.
    pub async fn next_state(
        &mut self,
        seen: &str,
        until: Instant,
        closing: &CancellationToken,
    ) -> Result<Option<Generation>, StoreError> {
        loop {
            let reread_at = (Instant::now() + REREAD_INTERVAL).min(until);
            tokio::select! {
                () = self.watch.changed() => {}
                () = tokio::time::sleep_until(reread_at) => {}
                () = closing.cancelled() => {}
            }
            let Some(current) = self
                .store
                .generation(&self.account_id, &self.generation_id)
                .await?
            else {
                return Ok(None);
            };
            if state_id(&current) != seen || Instant::now() >= until || closing.is_cancelled() {
                return Ok(Some(current));
            }
        }
    }

    /// Follows the generation from `current` until it is final, `until`
    /// passes or `closing` is cancelled, and returns it as last read.
    pub async fn until_final(
        &mut self,
        mut current: Generation,
        until: Instant,
        closing: &CancellationToken,
    ) -> Result<Generation, StoreError> {
        while !current.status.is_final() && Instant::now() < until && !closing.is_cancelled() {
            match self.next_state(&state_id(&current), until, closing).await? {
                Some(next) => current = next,
                None => break,
            }
        }
        Ok(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live_status(per_key: u32, per_node: u32) -> Arc<LiveStatus> {
        Arc::new(LiveStatus::new(
            LiveStatusLimits { per_key, per_node },
            Duration::from_secs(60),
        ))
    }

    #[test]
    fn a_key_past_its_cap_is_refused_and_its_slots_come_back_when_dropped() {
        let live_status = live_status(2, 10);
        let first = live_status.admit("key_a").unwrap();
        let _second = live_status.admit("key_a").unwrap();
        assert_eq!(
            live_status.admit("key_a").err(),
            Some(LiveStatusRefusal::Key { limit: 2 })
        );
        // Another key has slots of its own.
        let _other = live_status.admit("key_b").unwrap();
        assert_eq!(live_status.open(), 3);
        drop(first);
        assert!(live_status.admit("key_a").is_ok());
    }

    #[test]
    fn the_node_past_its_cap_refuses_every_key() {
        let live_status = live_status(5, 2);
        let _first = live_status.admit("key_a").unwrap();
        let second = live_status.admit("key_b").unwrap();
        assert_eq!(
            live_status.admit("key_c").err(),
            Some(LiveStatusRefusal::Node { limit: 2 })
        );
        drop(second);
        assert!(live_status.admit("key_c").is_ok());
    }

    #[test]
    fn a_wait_is_never_longer_than_the_idle_timeout_would_allow() {
        let short = LiveStatus::new(LiveStatusLimits::default(), Duration::from_secs(20));
        assert_eq!(short.applied_wait(5), Duration::from_secs(5));
        assert_eq!(short.applied_wait(60), Duration::from_secs(20));
        let long = LiveStatus::new(LiveStatusLimits::default(), Duration::from_secs(300));
        assert_eq!(long.applied_wait(60), Duration::from_secs(60));
    }
}
