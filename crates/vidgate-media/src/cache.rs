//! A small in-memory cache of probe results keyed by URL, so that a quote
//! followed by a submit, or a submit that names the same URL twice, fetches
//! each URL once. Only facts are kept, never the bytes, so an entry costs a
//! few dozen bytes. Entries expire, because the file behind a URL can change.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::probe::MediaInfo;

pub struct ProbeCache {
    capacity: usize,
    time_to_live: Duration,
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<String, CacheEntry>,
    /// Increases on every use; the entry with the smallest value is the
    /// least recently used.
    clock: u64,
}

struct CacheEntry {
    info: MediaInfo,
    stored_at: Instant,
    last_used: u64,
}

impl ProbeCache {
    /// A cache of at most `capacity` URLs, each kept for `time_to_live`.
    pub fn new(capacity: usize, time_to_live: Duration) -> ProbeCache {
        ProbeCache {
            capacity,
            time_to_live,
            state: Mutex::new(CacheState::default()),
        }
    }

    pub fn get(&self, url: &str) -> Option<MediaInfo> {
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        let fresh = state
            .entries
            .get(url)
            .is_some_and(|entry| entry.stored_at.elapsed() < self.time_to_live);
        if !fresh {
            state.entries.remove(url);
            return None;
        }
        let entry = state.entries.get_mut(url)?;
        entry.last_used = clock;
        Some(entry.info.clone())
    }

    pub fn insert(&self, url: &str, info: MediaInfo) {
        if self.capacity == 0 {
            return;
        }
        let mut state = self.lock();
        state.clock += 1;
        let clock = state.clock;
        if !state.entries.contains_key(url) && state.entries.len() >= self.capacity {
            // A linear scan is fine at a few hundred entries and keeps the
            // cache free of a second index to keep in step.
            let oldest = state
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                state.entries.remove(&oldest);
            }
        }
        state.entries.insert(
            url.to_owned(),
            CacheEntry {
                info,
                stored_at: Instant::now(),
                last_used: clock,
            },
        );
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (every update is a single insert or remove), so a poisoned lock is
        // still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{MediaDetails, MediaFormat};

    fn info(size_bytes: u64) -> MediaInfo {
        MediaInfo {
            format: MediaFormat::Png,
            size_bytes,
            details: MediaDetails::Image {
                width: 2,
                height: 2,
            },
        }
    }

    #[test]
    fn evicts_the_least_recently_used_entry() {
        let cache = ProbeCache::new(2, Duration::from_secs(60));
        cache.insert("a", info(1));
        cache.insert("b", info(2));
        assert_eq!(cache.get("a"), Some(info(1)));
        cache.insert("c", info(3));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("b"), None);
        assert_eq!(cache.get("a"), Some(info(1)));
        assert_eq!(cache.get("c"), Some(info(3)));
    }

    #[test]
    fn entries_expire() {
        let cache = ProbeCache::new(10, Duration::ZERO);
        cache.insert("a", info(1));
        assert_eq!(cache.get("a"), None);
        assert!(cache.is_empty());
    }
}
