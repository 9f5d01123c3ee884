//! Per-caller request rate limits: a token bucket per API key (SPEC.md
//! section 8: capacity 20, refilled at 10 per second by default), kept in
//! this process. Each account can have its own figures, so every key gets a
//! limiter built for its account's quota, rebuilt if the quota changes.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

type Bucket = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

#[derive(Default)]
pub struct CallerRateLimiter {
    buckets: Mutex<HashMap<String, (Quota, std::sync::Arc<Bucket>)>>,
}

/// What the rate-limit response headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    /// The bucket's capacity.
    pub limit: u32,
    pub remaining: u32,
    /// Time until the bucket is full again (or, when limited, until the next
    /// request may pass).
    pub reset: Duration,
    pub allowed: bool,
}

impl CallerRateLimiter {
    /// Takes one token from the caller's bucket if there is one.
    pub fn check(&self, caller: &str, per_second: u32, burst: u32) -> RateStatus {
        let per_second = NonZeroU32::new(per_second.max(1)).expect("at least one");
        let burst_size = NonZeroU32::new(burst.max(1)).expect("at least one");
        let quota = Quota::per_second(per_second).allow_burst(burst_size);
        let bucket = {
            let mut buckets = self.buckets.lock().expect("rate limiter lock poisoned");
            let entry = buckets.entry(caller.to_owned()).or_insert_with(|| {
                (quota, std::sync::Arc::new(RateLimiter::direct(quota).with_middleware()))
            });
            if entry.0 != quota {
                *entry = (quota, std::sync::Arc::new(RateLimiter::direct(quota).with_middleware()));
            }
            entry.1.clone()
        };
        match bucket.check() {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                let missing = burst_size.get().saturating_sub(remaining);
                RateStatus {
                    limit: burst_size.get(),
                    remaining,
                    reset: Duration::from_secs_f64(missing as f64 / per_second.get() as f64),
                    allowed: true,
                }
            }
            Err(not_until) => RateStatus {
                limit: burst_size.get(),
                remaining: 0,
                reset: not_until.wait_time_from(DefaultClock::default().now()),
                allowed: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_25_lets_20_through() {
        let limiter = CallerRateLimiter::default();
        let allowed = (0..25).filter(|_| limiter.check("key_a", 10, 20).allowed).count();
        assert_eq!(allowed, 20);
        // Another caller has its own bucket.
        assert!(limiter.check("key_b", 10, 20).allowed);
    }

    #[test]
    fn reports_remaining_tokens_and_wait() {
        let limiter = CallerRateLimiter::default();
        let first = limiter.check("key", 10, 3);
        assert_eq!((first.limit, first.remaining, first.allowed), (3, 2, true));
        limiter.check("key", 10, 3);
        limiter.check("key", 10, 3);
        let refused = limiter.check("key", 10, 3);
        assert!(!refused.allowed);
        assert!(refused.reset > Duration::ZERO && refused.reset <= Duration::from_millis(100));
    }

    #[test]
    fn a_changed_quota_takes_effect() {
        let limiter = CallerRateLimiter::default();
        assert!(limiter.check("key", 1, 1).allowed);
        assert!(!limiter.check("key", 1, 1).allowed);
        assert!(limiter.check("key", 1, 5).allowed);
    }
}
