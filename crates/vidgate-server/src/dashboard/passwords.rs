//! Password hashing: Argon2id with the `argon2` crate's default parameters
//! (19 MiB, 2 passes), always on a blocking thread, because one hash takes
//! tens of milliseconds of CPU that would otherwise stall the async runtime.

use std::sync::OnceLock;

use argon2::{Argon2, PasswordHasher, PasswordVerifier};

/// Passwords shorter than this are refused when set.
pub const MIN_PASSWORD_CHARS: usize = 10;
/// Longer input is refused before hashing, so nobody can make the server
/// hash megabytes.
pub const MAX_PASSWORD_BYTES: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum PasswordError {
    #[error("could not hash the password: {0}")]
    Hash(String),
    #[error("the hashing thread failed")]
    Join(#[from] tokio::task::JoinError),
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
    tokio::task::spawn_blocking(move || hash_now(&password)).await?
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
    tokio::task::spawn_blocking(move || {
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

    #[test]
    fn new_passwords_have_bounds() {
        assert!(check_new_password("short").is_err());
        assert!(check_new_password(&"x".repeat(MAX_PASSWORD_BYTES + 1)).is_err());
        assert!(check_new_password("long enough password").is_ok());
    }
}
