//! Per-caller request rate limits: a token bucket per API key (SPEC.md
//! section 8: capacity 20, refilled at 10 per second by default). Each
//! account can have its own figures, passed with every check.
//!
//! Without Redis the buckets live in this process, so each node limits on its
//! own and N nodes let a key through up to N times as fast. With Redis every
//! node shares one bucket per key, kept by an atomic GCRA script that reads
//! Redis's own clock (node clocks may differ) and sets a TTL so idle keys
//! vanish. If Redis cannot be reached at request time, the check falls back
//! to this node's bucket and logs it: a Redis outage then loosens the limit
//! to per node (N nodes let a key through up to N times as fast) instead of
//! refusing every authenticated request, while the limits that protect
//! money (balance and concurrency) are enforced by the database either way.
//! After one failure the node stops asking Redis on requests, which would
//! cost each of them the wait for a dead server, and a background task
//! asks Redis every `REDIS_RECHECK_INTERVAL` until it answers again.
//!
//! The dashboard's sign-in attempts are limited here too (`SignInLimits`),
//! per client address, per (email, address) pair and, for browsers that
//! never signed in to it, per email, in the same buckets (so in Redis when
//! there is one).

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::store::Caller;

type Bucket = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// The rate limiter of one node: local buckets, or buckets shared in Redis.
pub enum CallerRateLimiter {
    Local(LocalRateLimiter),
    Shared(Box<RedisRateLimiter>),
}

impl CallerRateLimiter {
    /// Buckets in this process only.
    pub fn local() -> CallerRateLimiter {
        CallerRateLimiter::Local(LocalRateLimiter::default())
    }

    /// Buckets in the Redis server at `redis_url`, shared by every node using
    /// it. Fails if Redis does not answer now, so a misconfiguration shows at
    /// start rather than as a silently per-node limit.
    pub async fn shared(redis_url: &str) -> Result<CallerRateLimiter, redis::RedisError> {
        Ok(CallerRateLimiter::Shared(Box::new(
            RedisRateLimiter::connect(redis_url).await?,
        )))
    }

    /// Takes one token from the caller's bucket if there is one.
    /// Takes one request from an authenticated caller's bucket, at the
    /// limits of its account.
    pub async fn check_caller(&self, caller: &Caller) -> RateStatus {
        self.check(
            &caller.key_id,
            caller.limits.requests_per_second,
            caller.limits.burst,
        )
        .await
    }

    /// The check when it needs no wait: this node's own buckets answer at
    /// once; buckets shared in Redis need a round trip, so `None`.
    pub fn check_at_once(&self, key: &str, per_second: u32, burst: u32) -> Option<RateStatus> {
        match self {
            CallerRateLimiter::Local(local) => Some(local.check(key, per_second, burst)),
            CallerRateLimiter::Shared(_) => None,
        }
    }

    pub async fn check(&self, caller: &str, per_second: u32, burst: u32) -> RateStatus {
        self.check_every(caller, per_second_interval(per_second), burst)
            .await
    }

    /// Takes one token from `key`'s bucket, which holds `burst` tokens and
    /// gains one every `refill`.
    pub async fn check_every(&self, key: &str, refill: Duration, burst: u32) -> RateStatus {
        match self {
            CallerRateLimiter::Local(local) => local.check_every(key, refill, burst),
            CallerRateLimiter::Shared(shared) => {
                shared
                    .check_every_or(key, (refill, burst), (refill, burst))
                    .await
            }
        }
    }

    /// Takes one token from a bucket that several nodes share (a
    /// provider's request budget, `backend/hosted/budget/`): in Redis, the
    /// whole bucket, `whole` (refill interval, capacity); in this node,
    /// without Redis or while it cannot be reached, the node's `share`.
    pub async fn check_budget(
        &self,
        key: &str,
        whole: (Duration, u32),
        share: (Duration, u32),
    ) -> RateStatus {
        match self {
            CallerRateLimiter::Local(local) => local.check_every(key, share.0, share.1),
            CallerRateLimiter::Shared(shared) => shared.check_every_or(key, whole, share).await,
        }
    }
}

/// Stripe Checkout Sessions one account may start (from the API and the
/// dashboard together): this many at once, then one more every
/// `CHECKOUT_REFILL`. Each is a request to the operator's Stripe account,
/// whose own rate limit every customer shares, and a person paying needs a
/// few; one account's keys made them at ten a second per key.
pub const CHECKOUT_BURST: u32 = 5;
pub const CHECKOUT_REFILL: Duration = Duration::from_secs(12);

impl CallerRateLimiter {
    /// Takes one Checkout Session from the account's bucket, shared by
    /// every node when the buckets are in Redis.
    pub async fn check_checkout(&self, account_id: &str) -> RateStatus {
        self.check_every(
            &format!("checkout:{account_id}"),
            CHECKOUT_REFILL,
            CHECKOUT_BURST,
        )
        .await
    }
}

/// What an account past its Checkout Sessions is told.
pub fn checkout_refusal_message() -> String {
    format!(
        "Too many payments started for this account: {CHECKOUT_BURST} at once, then one every {} seconds. Finish one of them, or try again later.",
        CHECKOUT_REFILL.as_secs()
    )
}

/// Token buckets in this process (governor), one per caller.
#[derive(Default)]
pub struct LocalRateLimiter {
    buckets: Mutex<LocalBuckets>,
}

#[derive(Default)]
struct LocalBuckets {
    by_caller: HashMap<String, LocalBucket>,
    checks_since_prune: u32,
}

struct LocalBucket {
    quota: Quota,
    limiter: std::sync::Arc<Bucket>,
    last_used: std::time::Instant,
}

/// How many checks pass between sweeps for idle buckets.
const CHECKS_PER_PRUNE: u32 = 4096;

impl LocalBucket {
    fn new(quota: Quota) -> LocalBucket {
        LocalBucket {
            quota,
            limiter: std::sync::Arc::new(RateLimiter::direct(quota).with_middleware()),
            last_used: std::time::Instant::now(),
        }
    }

    /// A bucket unused for as long as it takes to refill completely is full,
    /// exactly like a new one, so forgetting it changes no decision.
    fn is_idle(&self) -> bool {
        let full_refill = self.quota.replenish_interval() * self.quota.burst_size().get();
        self.last_used.elapsed() > full_refill
    }
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

/// The time one token takes to come back at `per_second` tokens a second.
fn per_second_interval(per_second: u32) -> Duration {
    Duration::from_secs(1) / per_second.max(1)
}

impl LocalRateLimiter {
    /// Takes one token from the caller's bucket if there is one.
    pub fn check(&self, caller: &str, per_second: u32, burst: u32) -> RateStatus {
        self.check_every(caller, per_second_interval(per_second), burst)
    }

    /// Takes one token from `caller`'s bucket of `burst` tokens, refilled
    /// one every `refill`, if there is one.
    pub fn check_every(&self, caller: &str, refill: Duration, burst: u32) -> RateStatus {
        let refill = refill.max(Duration::from_micros(1));
        let burst_size = NonZeroU32::new(burst.max(1)).expect("at least one");
        let quota = Quota::with_period(refill)
            .expect("a non-zero refill period")
            .allow_burst(burst_size);
        let bucket = {
            let mut buckets = self.buckets.lock().expect("rate limiter lock poisoned");
            buckets.checks_since_prune += 1;
            if buckets.checks_since_prune >= CHECKS_PER_PRUNE {
                buckets.prune_idle();
            }
            // A lookup by `&str` first: the key is copied only for a new
            // bucket, not on every request.
            match buckets.by_caller.get_mut(caller) {
                Some(entry) if entry.quota == quota => {
                    entry.last_used = std::time::Instant::now();
                    entry.limiter.clone()
                }
                _ => {
                    let entry = LocalBucket::new(quota);
                    let limiter = entry.limiter.clone();
                    buckets.by_caller.insert(caller.to_owned(), entry);
                    limiter
                }
            }
        };
        match bucket.check() {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                let missing = burst_size.get().saturating_sub(remaining);
                RateStatus {
                    limit: burst_size.get(),
                    remaining,
                    reset: refill * missing,
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

/// The generic cell rate algorithm over one Redis key per caller: the key
/// holds the theoretical arrival time (TAT, microseconds on Redis's clock) of
/// the next request. A request passes if the bucket, drained by one interval
/// per request and refilled as time passes, is not over its capacity.
/// ARGV: the emission interval (microseconds per token) and the capacity.
/// Returns {allowed, remaining, reset in microseconds}.
const GCRA_SCRIPT: &str = r"
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000000 + tonumber(now_parts[2])
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local new_tat = tat + interval
local allowed_from = new_tat - interval * capacity
if allowed_from > now then
  return {0, 0, allowed_from - now}
end
local ttl_ms = math.ceil((new_tat - now) / 1000) + 1000
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', ttl_ms)
return {1, math.floor((now - allowed_from) / interval), new_tat - now}
";

/// How long a check may wait for Redis before this node's bucket answers.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);

/// How often, while Redis is down, the background task asks it again.
const REDIS_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

impl LocalBuckets {
    /// Keeps memory bounded by the callers active lately, not by every key
    /// that ever made a request.
    fn prune_idle(&mut self) {
        self.by_caller.retain(|_, bucket| !bucket.is_idle());
        self.checks_since_prune = 0;
    }
}

/// Token buckets shared by all nodes through Redis.
pub struct RedisRateLimiter {
    connection: redis::aio::ConnectionManager,
    script: redis::Script,
    /// Answers while Redis cannot be reached.
    fallback: LocalRateLimiter,
    /// Set by a failed check, cleared by the background task that finds
    /// Redis answering again; while set, checks go to `fallback` at once.
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RedisRateLimiter {
    async fn connect(redis_url: &str) -> Result<RedisRateLimiter, redis::RedisError> {
        let client = redis::Client::open(redis_url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT))
            .set_number_of_retries(1);
        let connection = redis::aio::ConnectionManager::new_with_config(client, config).await?;
        Ok(RedisRateLimiter {
            connection,
            script: redis::Script::new(GCRA_SCRIPT),
            fallback: LocalRateLimiter::default(),
            down: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        })
    }

    /// Takes one token from `caller`'s bucket in Redis, of `burst` tokens
    /// refilled one every `refill`; while Redis cannot be reached, from
    /// this node's bucket of `fallback` (refill interval, capacity).
    async fn check_every_or(
        &self,
        caller: &str,
        (refill, burst): (Duration, u32),
        fallback: (Duration, u32),
    ) -> RateStatus {
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return self.fallback.check_every(caller, fallback.0, fallback.1);
        }
        let burst = burst.max(1);
        let interval_micros = (refill.as_micros() as u64).max(1);
        let mut connection = self.connection.clone();
        let outcome: Result<(i64, i64, i64), redis::RedisError> = self
            .script
            .key(format!("vidgate:rate:{caller}"))
            .arg(interval_micros)
            .arg(burst)
            .invoke_async(&mut connection)
            .await;
        match outcome {
            Ok((allowed, remaining, reset_micros)) => RateStatus {
                limit: burst,
                remaining: remaining.clamp(0, i64::from(burst)) as u32,
                reset: Duration::from_micros(reset_micros.max(0) as u64),
                allowed: allowed == 1,
            },
            Err(error) => {
                self.went_down(&error);
                self.fallback.check_every(caller, fallback.0, fallback.1)
            }
        }
    }

    /// Marks Redis down (once per outage: the checks that failed at the
    /// same moment find it marked), logs it, and starts the task that asks
    /// Redis until it answers, then marks it up again and logs that.
    fn went_down(&self, error: &redis::RedisError) {
        use std::sync::atomic::Ordering;
        if self.down.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(error = %error, "Redis is unreachable: rate limits are per node until it answers");
        let down = self.down.clone();
        let mut connection = self.connection.clone();
        let began = std::time::Instant::now();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REDIS_RECHECK_INTERVAL).await;
                let answer: Result<String, redis::RedisError> =
                    redis::cmd("PING").query_async(&mut connection).await;
                if answer.is_ok() {
                    down.store(false, Ordering::SeqCst);
                    tracing::info!(
                        outage_seconds = format!("{:.1}", began.elapsed().as_secs_f64()),
                        "Redis answers again: rate limits are shared by every node again"
                    );
                    return;
                }
            }
        });
    }
}

/// The bucket an address counts against in per-client limits: an IPv4
/// address on its own, an IPv6 address by its /64 (one subscriber usually
/// holds a whole /64, so per-address buckets would be free to multiply),
/// and an IPv4-mapped IPv6 address as the IPv4 address it is. Its `Display`
/// is the key.
pub struct AddressBucket(pub IpAddr);

impl std::fmt::Display for AddressBucket {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_address_group(formatter, self.0, 4)
    }
}

/// An IPv4 address as it is, an IPv6 address as the network of its first
/// `ipv6_segments` 16-bit segments (`2001:db8:1:2::/64` for four).
fn write_address_group(
    formatter: &mut std::fmt::Formatter<'_>,
    address: IpAddr,
    ipv6_segments: usize,
) -> std::fmt::Result {
    match address.to_canonical() {
        IpAddr::V4(v4) => write!(formatter, "{v4}"),
        IpAddr::V6(v6) => {
            for segment in &v6.segments()[..ipv6_segments] {
                write!(formatter, "{segment:x}:")?;
            }
            write!(formatter, ":/{}", ipv6_segments * 16)
        }
    }
}

/// A client address as the anonymous media-fetch cap groups it: an IPv4
/// address, or an IPv6 /48, wider than the /64 of `AddressBucket`. A /64 is
/// one network, but a single site is commonly handed a /48 (65,536 /64s),
/// so grouping fetches by /64 let one client hold the slots of many.
pub struct NetworkBucket(pub IpAddr);

impl std::fmt::Display for NetworkBucket {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_address_group(formatter, self.0, 3)
    }
}

/// Sign-in attempts allowed at once per email and client address, then one
/// more every 10 s: a wrong password from one place slows that place only.
const ATTEMPTS_PER_PAIR_BURST: u32 = 5;
const PAIR_REFILL: Duration = Duration::from_secs(10);
/// Sign-in attempts allowed at once per email from browsers that never
/// signed in to it, from all addresses together, then one more every 30 s:
/// at most 130 guesses an hour at one email, however many addresses or IPv6
/// networks they come from. A browser that signed in to the email before
/// (its device cookie, `sessions::DeviceCookies`) does not count against it,
/// so strangers emptying it do not lock the owner out.
const ATTEMPTS_PER_EMAIL_BURST: u32 = 10;
const EMAIL_REFILL: Duration = Duration::from_secs(30);
/// Sign-in attempts allowed at once per client address, then one more
/// every 2 s: room for a team behind one address, none for a password spray.
const ATTEMPTS_PER_ADDRESS_BURST: u32 = 30;
const ADDRESS_REFILL: Duration = Duration::from_secs(2);

/// Where a sign-in attempt comes from, as far as the email's own bucket is
/// concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignInDevice {
    /// A browser that signed in to this email before (a valid device
    /// cookie), or a signed-in session: not held to the email's bucket.
    Known,
    /// Anything else: shares the email's bucket with every other stranger.
    Unknown,
}

/// Sign-in attempts limited per client address, per (email, address) pair,
/// and per email for unknown devices, in the node's rate limiter (so in
/// Redis when it has one). Every attempt counts, right or wrong, so that
/// guessing is slow whatever the outcome; an attempt refused by one bucket
/// takes nothing from those checked after it. The email's bucket bounds
/// the guesses at one email from everywhere; it does not apply to a known
/// device, so a stranger emptying it cannot lock the owner out of a
/// browser they signed in from before (the owner on a new browser waits for
/// the bucket like anyone, which is the price of the bound).
pub struct SignInLimits {
    limiter: std::sync::Arc<CallerRateLimiter>,
}

impl SignInLimits {
    pub fn new(limiter: std::sync::Arc<CallerRateLimiter>) -> SignInLimits {
        SignInLimits { limiter }
    }

    /// Takes one attempt from the address's and the pair's buckets, and the
    /// email's for an unknown device: `Ok` when the attempt's password may
    /// be checked, or the wait before the next attempt when a bucket is
    /// empty.
    pub async fn check(
        &self,
        email: &str,
        address: Option<IpAddr>,
        device: SignInDevice,
    ) -> Result<(), Duration> {
        // Keys of their own namespace, never an API key id. An IPv6 client
        // counts by its /64, as in the public endpoints' limit: whoever holds
        // one holds every address in it.
        let address = address.map_or_else(
            || "unknown".to_owned(),
            |address| AddressBucket(address).to_string(),
        );
        let buckets = [
            (
                format!("sign-in:address:{address}"),
                ADDRESS_REFILL,
                ATTEMPTS_PER_ADDRESS_BURST,
            ),
            (
                format!("sign-in:pair:{address}:{email}"),
                PAIR_REFILL,
                ATTEMPTS_PER_PAIR_BURST,
            ),
        ];
        for (key, refill, burst) in buckets {
            let status = self.limiter.check_every(&key, refill, burst).await;
            if !status.allowed {
                return Err(status.reset);
            }
        }
        if device == SignInDevice::Known {
            return Ok(());
        }
        let email_status = self
            .limiter
            .check_every(
                &format!("sign-in:email:{email}"),
                EMAIL_REFILL,
                ATTEMPTS_PER_EMAIL_BURST,
            )
            .await;
        if email_status.allowed {
            Ok(())
        } else {
            Err(email_status.reset)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_25_lets_20_through() {
        let limiter = LocalRateLimiter::default();
        let allowed = (0..25)
            .filter(|_| limiter.check("key_a", 10, 20).allowed)
            .count();
        assert_eq!(allowed, 20);
        // Another caller has its own bucket.
        assert!(limiter.check("key_b", 10, 20).allowed);
    }

    #[test]
    fn reports_remaining_tokens_and_wait() {
        let limiter = LocalRateLimiter::default();
        let first = limiter.check("key", 10, 3);
        assert_eq!((first.limit, first.remaining, first.allowed), (3, 2, true));
        limiter.check("key", 10, 3);
        limiter.check("key", 10, 3);
        let refused = limiter.check("key", 10, 3);
        assert!(!refused.allowed);
        assert!(refused.reset > Duration::ZERO && refused.reset <= Duration::from_millis(100));
    }

    #[test]
    fn idle_full_buckets_are_forgotten_and_busy_ones_kept() {
        let limiter = LocalRateLimiter::default();
        // Refills completely in a millisecond.
        assert!(limiter.check("idle", 1000, 1).allowed);
        // Refills completely in a thousand seconds.
        assert!(limiter.check("busy", 1, 1000).allowed);
        std::thread::sleep(Duration::from_millis(20));
        let mut buckets = limiter.buckets.lock().unwrap();
        buckets.prune_idle();
        assert!(!buckets.by_caller.contains_key("idle"));
        assert!(buckets.by_caller.contains_key("busy"));
    }

    #[test]
    fn a_changed_quota_takes_effect() {
        let limiter = LocalRateLimiter::default();
        assert!(limiter.check("key", 1, 1).allowed);
        assert!(!limiter.check("key", 1, 1).allowed);
        assert!(limiter.check("key", 1, 5).allowed);
    }
    #[test]
    fn ipv6_clients_share_a_bucket_per_64_and_mapped_ipv4_is_ipv4() {
        let bucket = |text: &str| AddressBucket(text.parse().unwrap()).to_string();
        assert_eq!(bucket("203.0.113.9"), "203.0.113.9");
        assert_eq!(
            bucket("2001:db8:ffff:ffff:1:2:3:4"),
            "2001:db8:ffff:ffff::/64"
        );
        assert_eq!(bucket("::ffff:203.0.113.9"), "203.0.113.9");
        assert_eq!(bucket("2001:db8:1:2::1"), bucket("2001:db8:1:2:ffff::9"));
        assert_ne!(bucket("2001:db8:1:2::1"), bucket("2001:db8:1:3::1"));
    }
    #[test]
    fn a_network_bucket_is_an_ipv4_address_or_an_ipv6_48() {
        let bucket = |text: &str| NetworkBucket(text.parse().unwrap()).to_string();
        assert_eq!(bucket("198.51.100.7"), "198.51.100.7");
        assert_eq!(bucket("::ffff:198.51.100.7"), "198.51.100.7");
        assert_eq!(bucket("2001:db8:1:2::1"), "2001:db8:1::/48");
        assert_eq!(bucket("2001:db8:1:ffff:1:2:3:4"), "2001:db8:1::/48");
        assert_ne!(bucket("2001:db8:2::1"), bucket("2001:db8:1::1"));
    }

    #[tokio::test]
    async fn guesses_at_an_email_from_many_networks_are_bounded_but_its_known_devices_get_in() {
        let limits = SignInLimits::new(std::sync::Arc::new(CallerRateLimiter::local()));
        // Each guess from another IPv6 /64, so no address or pair bucket
        // ever fills: only the email's bounds them.
        let network = |index: u32| -> IpAddr { format!("2001:db8:{index:x}::1").parse().unwrap() };
        for attempt in 0..ATTEMPTS_PER_EMAIL_BURST {
            assert_eq!(
                limits
                    .check(
                        "ada@example.com",
                        Some(network(attempt)),
                        SignInDevice::Unknown
                    )
                    .await,
                Ok(())
            );
        }
        let refused = limits
            .check("ada@example.com", Some(network(999)), SignInDevice::Unknown)
            .await;
        assert!(
            matches!(refused, Err(wait) if wait > Duration::ZERO && wait <= EMAIL_REFILL),
            "{refused:?}"
        );
        // The owner's browser, known to the email, still gets in.
        let owner: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(
            limits
                .check("ada@example.com", Some(owner), SignInDevice::Known)
                .await,
            Ok(())
        );
        // Another email is not touched.
        assert_eq!(
            limits
                .check("bob@example.com", Some(owner), SignInDevice::Unknown)
                .await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn sign_in_attempts_from_one_ipv6_64_share_the_address_bucket() {
        let limits = SignInLimits::new(std::sync::Arc::new(CallerRateLimiter::local()));
        // A different email each time, so only the address's bucket is
        // shared; a different address of one /64 each time.
        for attempt in 0..ATTEMPTS_PER_ADDRESS_BURST {
            let address: IpAddr = format!("2001:db8:1:2::{:x}", attempt + 1).parse().unwrap();
            let email = format!("user{attempt}@example.com");
            assert!(
                limits
                    .check(&email, Some(address), SignInDevice::Unknown)
                    .await
                    .is_ok()
            );
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        assert!(
            limits
                .check("another@example.com", Some(same_64), SignInDevice::Known)
                .await
                .is_err()
        );
        let next_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert!(
            limits
                .check("another@example.com", Some(next_64), SignInDevice::Unknown)
                .await
                .is_ok()
        );
    }
}
