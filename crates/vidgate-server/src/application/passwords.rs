//! Password hashing: Argon2id with the `argon2` crate's default parameters
//! (19 MiB, 2 passes), always on a blocking thread, because one hash takes
//! tens of milliseconds of CPU that would otherwise stall the async runtime.
//!
//! Every hash and every check, whoever asks (sign-in, sign-up, the password
//! page, invitations, the operator), runs under one process-wide gate of
//! about one slot per core. Without it each attempt took its 19 MiB at
//! once: 60 wrong sign-ins from two addresses took a node from 48 MiB to
//! 1.19 GiB, and glibc kept it (issue 50). An attempt waits for a slot at
//! most `SLOT_WAIT`, then is refused with `PasswordError::Busy` before any
//! memory is taken, and each hash hands its freed memory back to the
//! operating system. `cargo bench -p vidgate --bench hot_paths
//! -- sign-in-memory` measures it.

use std::sync::OnceLock;
use std::time::Duration;

use argon2::{Argon2, PasswordHasher, PasswordVerifier};
use tokio::sync::{Semaphore, SemaphorePermit};

/// Passwords shorter than this are refused when set.
pub const MIN_PASSWORD_CHARS: usize = 10;
/// Longer input is refused before hashing, so nobody can make the server
/// hash megabytes.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// How long an attempt waits for a hashing slot before it is refused. Long
/// enough for a few hashes ahead of it (each takes tens of milliseconds),
/// short enough that a burst is refused instead of queued for minutes.
const SLOT_WAIT: Duration = Duration::from_secs(2);
/// What a refused attempt is told to wait before trying again.
pub const BUSY_RETRY_AFTER: Duration = Duration::from_secs(2);
/// The most slots, whatever the core count: each slot is 19 MiB at most.
const MAX_SLOTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("could not hash the password: {0}")]
    Hash(String),
    #[error("the hashing thread failed")]
    Join(#[from] tokio::task::JoinError),
    /// Every hashing slot stayed taken for `SLOT_WAIT`: the caller answers
    /// 503 with `Retry-After: retry_after`.
    #[error("the server is checking too many passwords at once")]
    Busy { retry_after: Duration },
}

impl PasswordError {
    /// How long to wait before trying again, when every hashing slot was
    /// taken; `None` for a failure on our side.
    pub fn busy_retry_after(&self) -> Option<Duration> {
        match self {
            PasswordError::Busy { retry_after } => Some(*retry_after),
            PasswordError::Hash(_) | PasswordError::Join(_) => None,
        }
    }
}

/// Hashing slots: the process has one set (`hashing_slots`), as many as
/// the cores, at most `MAX_SLOTS`; tests make their own.
struct HashingSlots {
    slots: Semaphore,
    /// How long an attempt waits for a slot before it is refused.
    wait: Duration,
}

fn hashing_slots() -> &'static HashingSlots {
    static SLOTS: OnceLock<HashingSlots> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let count = std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, MAX_SLOTS);
        HashingSlots {
            slots: Semaphore::new(count),
            wait: SLOT_WAIT,
        }
    })
}

impl HashingSlots {
    /// Runs `work` (one Argon2 hash) on a blocking thread once a slot is
    /// free, or refuses with `Busy` after `wait`. The slot goes with the
    /// work, so a caller that stops waiting (a client that hung up) does not
    /// free it before the hash has finished.
    async fn run<T: Send + 'static>(
        &'static self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let permit: SemaphorePermit<'static> =
            tokio::time::timeout(self.wait, self.slots.acquire())
                .await
                .map_err(|_| PasswordError::Busy {
                    retry_after: BUSY_RETRY_AFTER,
                })?
                .expect("the hashing slots are never closed");
        Ok(tokio::task::spawn_blocking(move || {
            let result = work();
            // Each hash returns its 19 MiB as soon as it is done. glibc does
            // not reuse a hash's freed block for the next one (measured: 2
            // slots, yet each hash of a burst added about 13 MB that stayed
            // until a trim, 836 MB over 60 hashes), so without this the cap
            // bounded the CPU but not the memory. A trim walks the free lists
            // and hands freed pages back: well under a hash's own time.
            crate::allocator::return_freed_memory();
            drop(permit);
            result
        })
        .await?)
    }
}

/// Why a new password is not accepted, in words for the person setting it.
pub fn check_new_password(password: &str) -> Result<(), String> {
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "The password must have at least {MIN_PASSWORD_CHARS} characters."
        ));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(format!(
            "The password must have at most {MAX_PASSWORD_BYTES} bytes."
        ));
    }
    Ok(())
}

/// The PHC string of a new salted Argon2id hash.
pub async fn hash(password: String) -> Result<String, PasswordError> {
    hashing_slots().run(move || hash_now(&password)).await?
}

fn hash_now(password: &str) -> Result<String, PasswordError> {
    Argon2::default()
        .hash_password(password.as_bytes())
        .map(|hash| hash.to_string())
        .map_err(|error| PasswordError::Hash(error.to_string()))
}

/// Whether `password` matches `stored`. With no stored hash (an unknown
/// email) it verifies against a fixed dummy hash and answers false, so the
/// answer takes as long either way and its timing does not tell which
/// emails have users.
pub async fn verify(password: String, stored: Option<String>) -> Result<bool, PasswordError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Ok(false);
    }
    hashing_slots()
        .run(move || {
            let known = stored.is_some();
            let hash = match stored {
                Some(hash) => hash,
                None => dummy_hash()?.to_owned(),
            };
            let matches = Argon2::default()
                .verify_password(password.as_bytes(), hash.as_str())
                .is_ok();
            Ok(known && matches)
        })
        .await?
}

/// Computes the dummy hash ahead of the first sign-in for an unknown email,
/// so that even that one takes no longer than a sign-in for a known one.
pub fn prepare_dummy_hash() {
    if let Err(error) = dummy_hash() {
        tracing::error!(error = %error, "could not prepare the dummy password hash");
    }
}

fn dummy_hash() -> Result<&'static str, PasswordError> {
    static DUMMY: OnceLock<String> = OnceLock::new();
    if let Some(hash) = DUMMY.get() {
        return Ok(hash);
    }
    let hash = hash_now(&crate::ids::random_token(32))?;
    Ok(DUMMY.get_or_init(|| hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let hash = hash("correct horse battery".into()).await.unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(
            verify("correct horse battery".into(), Some(hash.clone()))
                .await
                .unwrap()
        );
        assert!(
            !verify("wrong horse battery".into(), Some(hash))
                .await
                .unwrap()
        );
        assert!(!verify("correct horse battery".into(), None).await.unwrap());
    }

    #[tokio::test]
    async fn a_hash_waits_for_a_slot_and_is_refused_when_none_frees_in_time() {
        let slots: &'static HashingSlots = Box::leak(Box::new(HashingSlots {
            slots: Semaphore::new(1),
            wait: Duration::from_millis(50),
        }));
        let held = slots.slots.acquire().await.unwrap();
        let refused = slots.run(|| "hashed").await;
        assert!(
            matches!(refused, Err(PasswordError::Busy { retry_after }) if retry_after == BUSY_RETRY_AFTER),
            "{refused:?}"
        );
        // A slot freed while the attempt waits lets it through.
        let waiting = tokio::spawn(slots.run(|| "hashed"));
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(held);
        assert_eq!(waiting.await.unwrap().unwrap(), "hashed");
        // And the slot is free again after the work.
        assert_eq!(slots.slots.available_permits(), 1);
    }

    #[test]
    fn new_passwords_have_bounds() {
        assert!(check_new_password("short").is_err());
        assert!(check_new_password(&"x".repeat(MAX_PASSWORD_BYTES + 1)).is_err());
        assert!(check_new_password("long enough password").is_ok());
    }
}
