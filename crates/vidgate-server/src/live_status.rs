//! Live status: following a generation until it changes, for the requests
//! that wait (`Prefer: wait=N`) and the event streams
//! (`GET /generations/{id}/events`).
//!
//! The followers of one generation share one reader
//! ([`FollowedGenerations`]): a task that watches the generation through the
//! store (`watch_generation`: an in-process signal on SQLite,
//! `LISTEN`/`NOTIFY` across nodes on PostgreSQL), reads it again when woken,
//! and hands each new state to every follower through a `watch` channel. So
//! a thousand streams of one generation cost one read per change, not a
//! thousand. While the store cannot vouch for its announcements (a
//! PostgreSQL listener not connected, or reconnecting), the reader also
//! reads every `REREAD_INTERVAL`, so a missed signal delays the followers by
//! at most that and never loses a final state; while it can, an idle
//! generation costs no read at all. Between reads nothing holds a database
//! connection.
//!
//! `LiveStatus` bounds how many waits and streams are open at once, per API
//! key (or dashboard session), per account and per node, and closes them
//! all at shutdown so that a draining node does not wait on them. The cap
//! per account is below the node's, so one account with many keys cannot
//! take every slot and the rest stay for other accounts. A caller's waits
//! and streams also end once its key or session is revoked or its account
//! deleted (`end_revoked_callers`), within the second the caller cache
//! trusts a key for, on every node.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::{CALLER_CACHE_TTL, Caller, Generation, GenerationWatch, Store, StoreError};

/// The longest wait a client may ask for, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// How often a generation's reader reads it again without being woken,
/// while the store's announcements may be missed.
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
    /// Open at once on this node for one account, all its keys and sessions
    /// together; below `per_node`, so that however many keys an account
    /// makes, the rest of the node's slots stay for other accounts. By
    /// default a part of `per_node` (`default_per_account`).
    pub per_account: u32,
    /// Open at once on this node for everyone; below the HTTP connection
    /// cap, so that other requests still find connections.
    pub per_node: u32,
}

impl LiveStatusLimits {
    /// The default cap per account: an eighth of the node's, so that eight
    /// accounts are needed to take every slot (at a third, three took them
    /// all), and a node cap lowered alone lowers it too instead of leaving
    /// it above the node's. At least one, and below the node's cap from a
    /// node cap of two.
    pub const fn default_per_account(per_node: u32) -> u32 {
        let share = per_node / 8;
        if share == 0 { 1 } else { share }
    }

    /// The default limits for a node that holds `per_node` at once.
    pub const fn for_node(per_node: u32) -> LiveStatusLimits {
        LiveStatusLimits {
            per_key: 100,
            per_account: LiveStatusLimits::default_per_account(per_node),
            per_node,
        }
    }
}

impl Default for LiveStatusLimits {
    fn default() -> LiveStatusLimits {
        LiveStatusLimits::for_node(768)
    }
}

/// Which cap refused a wait or a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LiveStatusRefusal {
    #[error(
        "Too many waits and event streams open for this key: at most {limit} at once. Retry later, or poll."
    )]
    Key { limit: u32 },
    #[error(
        "Too many waits and event streams open for this account: at most {limit} at once. Retry later, or poll."
    )]
    Account { limit: u32 },
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
    followed: Arc<FollowedGenerations>,
}

#[derive(Default)]
struct OpenCounts {
    total: usize,
    per_account: HashMap<Box<str>, usize>,
    /// Keyed by the caller's key id (`session:<id>` for a session).
    per_caller: HashMap<Box<str>, OpenOfCaller>,
}

/// One caller's open waits and streams, and the signal that ends them
/// when its credentials end.
struct OpenOfCaller {
    open: usize,
    revoked: CancellationToken,
}

impl LiveStatus {
    pub fn new(limits: LiveStatusLimits, http_idle_timeout: Duration) -> LiveStatus {
        LiveStatus {
            limits,
            max_wait: http_idle_timeout.min(Duration::from_secs(MAX_WAIT_SECONDS)),
            open: Mutex::default(),
            closing: CancellationToken::new(),
            followed: Arc::default(),
        }
    }

    /// Starts following one generation of one account, and returns it as
    /// it is now; `None` when the account has no such generation. Joins
    /// the generation's reader when it has one on this node (then nothing
    /// is read), or reads it and starts one.
    pub async fn follow(
        &self,
        store: &Arc<Store>,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Option<(GenerationFollower, Generation)>, StoreError> {
        self.followed.follow(store, account_id, generation_id).await
    }

    /// Generations with a reader on this node now.
    pub fn followed_generations(&self) -> usize {
        self.followed.len()
    }

    /// The wait honoured for a request of `seconds`.
    pub fn applied_wait(&self, seconds: u64) -> Duration {
        Duration::from_secs(seconds).min(self.max_wait)
    }

    /// Takes a slot for one wait or stream of `caller`, given back when the
    /// slot is dropped; refused past any of the caps.
    pub fn admit(self: &Arc<Self>, caller: &Caller) -> Result<LiveSlot, LiveStatusRefusal> {
        let mut open = self.open.lock().expect("the counts are never poisoned");
        if open.total >= self.limits.per_node as usize {
            return Err(LiveStatusRefusal::Node {
                limit: self.limits.per_node,
            });
        }
        let of_account = open
            .per_account
            .get(caller.account_id.as_str())
            .copied()
            .unwrap_or(0);
        if of_account >= self.limits.per_account as usize {
            return Err(LiveStatusRefusal::Account {
                limit: self.limits.per_account,
            });
        }
        let of_key = open
            .per_caller
            .get(caller.key_id.as_str())
            .map_or(0, |of_caller| of_caller.open);
        if of_key >= self.limits.per_key as usize {
            return Err(LiveStatusRefusal::Key {
                limit: self.limits.per_key,
            });
        }
        let of_caller = open
            .per_caller
            .entry(caller.key_id.as_str().into())
            .or_insert_with(|| OpenOfCaller {
                open: 0,
                revoked: CancellationToken::new(),
            });
        of_caller.open += 1;
        let revoked = of_caller.revoked.clone();
        open.total += 1;
        open.per_account
            .insert(caller.account_id.as_str().into(), of_account + 1);
        Ok(LiveSlot {
            live_status: self.clone(),
            key_id: caller.key_id.as_str().into(),
            account_id: caller.account_id.as_str().into(),
            revoked,
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

    /// The callers holding waits or streams open now.
    fn open_callers(&self) -> Vec<String> {
        let open = self.open.lock().expect("the counts are never poisoned");
        open.per_caller
            .keys()
            .map(|key_id| key_id.to_string())
            .collect()
    }

    /// Ends the waits and streams of each of `callers` not in `live`.
    fn end_callers_not_in(&self, callers: &[String], live: &HashSet<String>) {
        let open = self.open.lock().expect("the counts are never poisoned");
        for ended in callers.iter().filter(|caller| !live.contains(*caller)) {
            if let Some(of_caller) = open.per_caller.get(ended.as_str()) {
                of_caller.revoked.cancel();
            }
        }
    }

    /// Until `shutdown`: every `CALLER_CACHE_TTL`, and at once after a
    /// revocation on this node, asks the store which of the callers with
    /// waits or streams open are still live, and ends the waits and streams
    /// of the others. A revoked key is refused by a new request within the
    /// same second (the caller cache's), so what it already had open ends
    /// with it; one statement a second serves every open stream.
    pub async fn end_revoked_callers(
        self: Arc<Self>,
        store: Arc<Store>,
        shutdown: CancellationToken,
    ) {
        let mut revocations = store.accounts().revocations();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(CALLER_CACHE_TTL) => {}
                changed = revocations.changed() => {
                    // The store, and so the sender, outlives this task;
                    // should it not, the timer alone paces the loop.
                    if changed.is_err() {
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(CALLER_CACHE_TTL) => {}
                        }
                    }
                }
            }
            let callers = self.open_callers();
            if callers.is_empty() {
                continue;
            }
            match store.accounts().live_callers(&callers).await {
                Ok(live) => self.end_callers_not_in(&callers, &live),
                Err(error) => {
                    tracing::warn!(error = %error, "could not check the callers of open waits and streams; trying again in a second");
                }
            }
        }
    }
}

/// One open wait or stream, counted until dropped.
pub struct LiveSlot {
    live_status: Arc<LiveStatus>,
    key_id: Box<str>,
    account_id: Box<str>,
    revoked: CancellationToken,
}

impl LiveSlot {
    /// Cancelled once the caller's key or session is revoked or its
    /// account deleted: the wait or stream must end without saying more.
    pub fn revoked(&self) -> &CancellationToken {
        &self.revoked
    }
}

impl Drop for LiveSlot {
    fn drop(&mut self) {
        let mut open = self
            .live_status
            .open
            .lock()
            .expect("the counts are never poisoned");
        open.total -= 1;
        if let Some(of_account) = open.per_account.get_mut(&self.account_id) {
            *of_account -= 1;
            if *of_account == 0 {
                open.per_account.remove(&self.account_id);
            }
        }
        if let Some(of_caller) = open.per_caller.get_mut(&self.key_id) {
            of_caller.open -= 1;
            if of_caller.open == 0 {
                open.per_caller.remove(&self.key_id);
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

/// Which generation a reader reads: the account is part of it, since a
/// generation is read only within its account.
type FollowKey = (Box<str>, Box<str>);

/// What a reader hands its followers: the generation as last read, `None`
/// once it no longer exists.
type Latest = Option<Arc<Generation>>;

/// The generations followed on this node, each with the one channel its
/// reader publishes on. An entry lives while any follower holds a receiver
/// of it; the last follower to go removes it, and its reader then ends.
#[derive(Default)]
pub struct FollowedGenerations {
    followed: Mutex<HashMap<FollowKey, Arc<watch::Sender<Latest>>>>,
}

impl FollowedGenerations {
    fn len(&self) -> usize {
        self.followed
            .lock()
            .expect("the followed map is never poisoned")
            .len()
    }

    /// A receiver of the entry of `key`, if there is one.
    fn join(&self, key: &FollowKey) -> Option<watch::Receiver<Latest>> {
        self.followed
            .lock()
            .expect("the followed map is never poisoned")
            .get(key)
            .map(|sender| sender.subscribe())
    }

    async fn follow(
        self: &Arc<Self>,
        store: &Arc<Store>,
        account_id: &str,
        generation_id: &str,
    ) -> Result<Option<(GenerationFollower, Generation)>, StoreError> {
        let key: FollowKey = (account_id.into(), generation_id.into());
        if let Some(receiver) = self.join(&key) {
            return Ok(self.follower_of(key, receiver));
        }
        // The watch starts before the read, so that a change committed
        // after the read wakes the reader.
        let watch = store.generations().watch(generation_id).await;
        let Some(current) = store.generations().get(account_id, generation_id).await? else {
            return Ok(None);
        };
        let receiver = {
            let mut followed = self
                .followed
                .lock()
                .expect("the followed map is never poisoned");
            // Another follower may have started a reader meanwhile: this
            // one joins it, and its own read and watch are dropped.
            if let Some(sender) = followed.get(&key) {
                sender.subscribe()
            } else {
                let (sender, receiver) = watch::channel(Some(Arc::new(current)));
                let sender = Arc::new(sender);
                followed.insert(key.clone(), sender.clone());
                tokio::spawn(read_for_followers(
                    store.clone(),
                    key.clone(),
                    watch,
                    sender,
                ));
                receiver
            }
        };
        Ok(self.follower_of(key, receiver))
    }

    fn follower_of(
        self: &Arc<Self>,
        key: FollowKey,
        mut receiver: watch::Receiver<Latest>,
    ) -> Option<(GenerationFollower, Generation)> {
        let current = receiver.borrow_and_update().as_deref().cloned();
        let follower = GenerationFollower {
            followed: self.clone(),
            key,
            receiver: Some(receiver),
        };
        // Dropped at once (its entry forgotten if it was the last) when
        // the generation is gone.
        current.map(|current| (follower, current))
    }
}

/// The reader of one generation for all of its followers on this node: it
/// reads the generation when the store announces a change of it, and every
/// `REREAD_INTERVAL` while the store's announcements may be missed, and
/// publishes what it read, waking the followers only when the state
/// changed. It ends once the generation is final or gone (the last state
/// stays with the channel), or once no follower is left.
async fn read_for_followers(
    store: Arc<Store>,
    key: FollowKey,
    mut watch: GenerationWatch,
    sender: Arc<watch::Sender<Latest>>,
) {
    let (account_id, generation_id) = key;
    let mut announcements_heard = store.generations().announcements_heard();
    loop {
        if sender
            .borrow()
            .as_ref()
            .is_none_or(|generation| generation.status.is_final())
        {
            return;
        }
        let heard = *announcements_heard.borrow_and_update();
        let fallback = async {
            if heard {
                std::future::pending::<()>().await;
            } else {
                tokio::time::sleep(REREAD_INTERVAL).await;
            }
        };
        tokio::select! {
            () = sender.closed() => return,
            () = watch.changed() => {}
            () = fallback => {}
            changed = announcements_heard.changed() => {
                // The store keeps the sender for as long as it lives, and
                // this task holds the store: it cannot close under us.
                if changed.is_err() {
                    return;
                }
                // Whether to read on a timer is decided again.
                continue;
            }
        }
        match store.generations().get(&account_id, &generation_id).await {
            Ok(found) => {
                sender.send_if_modified(|latest| {
                    let changed = match (latest.as_deref(), &found) {
                        (Some(before), Some(now)) => state_id(before) != state_id(now),
                        (None, None) => false,
                        _ => true,
                    };
                    // The record is kept fresh either way; only a new
                    // state wakes the followers.
                    *latest = found.map(Arc::new);
                    changed
                });
            }
            Err(error) => {
                // The followers keep what they had; the next read is a
                // second away, announced or not.
                tracing::warn!(generation = %generation_id, error = %error, "could not read a followed generation; trying again in a second");
                tokio::select! {
                    () = sender.closed() => return,
                    () = tokio::time::sleep(REREAD_INTERVAL) => {}
                }
            }
        }
    }
}

/// Follows one generation of one account, through the reader it shares
/// with the generation's other followers on this node.
pub struct GenerationFollower {
    followed: Arc<FollowedGenerations>,
    key: FollowKey,
    /// `None` only while being dropped.
    receiver: Option<watch::Receiver<Latest>>,
}

impl GenerationFollower {
    /// Returns the generation once its state differs from `seen`, or as it
    /// is when `until` passes or `closing` is cancelled, whichever comes
    /// first; `None` if it no longer exists.
    pub async fn next_state(
        &mut self,
        seen: &str,
        until: Instant,
        closing: &CancellationToken,
    ) -> Option<Generation> {
        let receiver = self
            .receiver
            .as_mut()
            .expect("the receiver is taken only on drop");
        loop {
            // `None`: the generation no longer exists.
            let latest = receiver.borrow_and_update().clone()?;
            if state_id(&latest) != seen || Instant::now() >= until || closing.is_cancelled() {
                return Some(Generation::clone(&latest));
            }
            tokio::select! {
                changed = receiver.changed() => {
                    // The map keeps the sender while this follower holds
                    // a receiver, so the channel cannot close under us.
                    if changed.is_err() {
                        return Some(Generation::clone(&latest));
                    }
                }
                () = tokio::time::sleep_until(until) => {}
                () = closing.cancelled() => {}
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
    ) -> Generation {
        while !current.status.is_final() && Instant::now() < until && !closing.is_cancelled() {
            match self.next_state(&state_id(&current), until, closing).await {
                Some(next) => current = next,
                None => break,
            }
        }
        current
    }
}

impl Drop for GenerationFollower {
    fn drop(&mut self) {
        let mut followed = self
            .followed
            .followed
            .lock()
            .expect("the followed map is never poisoned");
        drop(self.receiver.take());
        // The map's lock is held, so no follower can join between this
        // check and the removal; the reader sees its channel closed and
        // ends.
        if followed
            .get(&self.key)
            .is_some_and(|sender| sender.receiver_count() == 0)
        {
            followed.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::AccountLimits;

    fn live_status(per_key: u32, per_account: u32, per_node: u32) -> Arc<LiveStatus> {
        Arc::new(LiveStatus::new(
            LiveStatusLimits {
                per_key,
                per_account,
                per_node,
            },
            Duration::from_secs(60),
        ))
    }

    fn caller(key_id: &str, account_id: &str) -> Caller {
        Caller {
            key_id: key_id.into(),
            account_id: account_id.into(),
            limits: AccountLimits::default(),
        }
    }

    /// Three accounts held every slot of a node at the defaults (256 each
    /// of 768); now eight are needed, and a ninth still finds slots.
    #[test]
    fn a_few_accounts_cannot_hold_every_slot_at_the_defaults() {
        let live_status = Arc::new(LiveStatus::new(
            LiveStatusLimits::default(),
            Duration::from_secs(60),
        ));
        let mut held = Vec::new();
        for account in 0..3 {
            for key in 0.. {
                let caller = caller(&format!("key_{account}_{key}"), &format!("acct_{account}"));
                match live_status.admit(&caller) {
                    Ok(slot) => held.push(slot),
                    Err(LiveStatusRefusal::Account { .. }) => break,
                    Err(other) => panic!("account {account}: {other:?}"),
                }
            }
        }
        assert!(held.len() <= 768 * 3 / 8, "{} of 768 held", held.len());
        assert!(
            live_status
                .admit(&caller("key_other", "acct_other"))
                .is_ok()
        );
    }

    /// A node cap lowered alone lowers the default cap per account with it.
    #[test]
    fn the_default_cap_per_account_is_a_part_of_the_node_s() {
        for per_node in [2, 8, 64, 100, 768, 10_000] {
            let limits = LiveStatusLimits::for_node(per_node);
            assert!(limits.per_account < per_node, "{limits:?}");
            assert!(limits.per_account >= 1, "{limits:?}");
        }
        assert_eq!(LiveStatusLimits::default().per_account, 96);
    }

    #[test]
    fn a_key_past_its_cap_is_refused_and_its_slots_come_back_when_dropped() {
        let live_status = live_status(2, 10, 10);
        let first = live_status.admit(&caller("key_a", "acct_a")).unwrap();
        let _second = live_status.admit(&caller("key_a", "acct_a")).unwrap();
        assert_eq!(
            live_status.admit(&caller("key_a", "acct_a")).err(),
            Some(LiveStatusRefusal::Key { limit: 2 })
        );
        // Another key has slots of its own.
        let _other = live_status.admit(&caller("key_b", "acct_b")).unwrap();
        assert_eq!(live_status.open(), 3);
        drop(first);
        assert!(live_status.admit(&caller("key_a", "acct_a")).is_ok());
    }

    #[test]
    fn an_account_past_its_cap_is_refused_whatever_key_it_uses() {
        let live_status = live_status(2, 3, 10);
        let mut held = Vec::new();
        for key in ["key_1", "key_2", "key_3"] {
            held.push(live_status.admit(&caller(key, "acct_a")).unwrap());
        }
        assert_eq!(
            live_status.admit(&caller("key_4", "acct_a")).err(),
            Some(LiveStatusRefusal::Account { limit: 3 })
        );
        // Another account still finds the node's remaining slots.
        assert!(live_status.admit(&caller("key_b", "acct_b")).is_ok());
        held.pop();
        assert!(live_status.admit(&caller("key_4", "acct_a")).is_ok());
    }

    #[test]
    fn the_node_past_its_cap_refuses_every_key() {
        let live_status = live_status(5, 5, 2);
        let _first = live_status.admit(&caller("key_a", "acct_a")).unwrap();
        let second = live_status.admit(&caller("key_b", "acct_b")).unwrap();
        assert_eq!(
            live_status.admit(&caller("key_c", "acct_c")).err(),
            Some(LiveStatusRefusal::Node { limit: 2 })
        );
        drop(second);
        assert!(live_status.admit(&caller("key_c", "acct_c")).is_ok());
    }

    #[test]
    fn ending_a_caller_signals_its_slots_only() {
        let live_status = live_status(5, 5, 10);
        let revoked = live_status.admit(&caller("key_a", "acct_a")).unwrap();
        let kept = live_status.admit(&caller("key_b", "acct_a")).unwrap();
        let mut callers = live_status.open_callers();
        callers.sort();
        assert_eq!(callers, ["key_a", "key_b"]);
        live_status.end_callers_not_in(&callers, &HashSet::from(["key_b".to_owned()]));
        assert!(revoked.revoked().is_cancelled());
        assert!(!kept.revoked().is_cancelled());
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
