//! Identifiers and secrets. Identifiers carry a type prefix (`gen_`, `acct_`,
//! `key_`) so a stray id in a log or a support ticket says what it is.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::{Rng, RngExt};
use sha2::{Digest, Sha256};

/// Every API key starts with this, so keys are recognisable in code reviews
/// and secret scanners, and a malformed header is refused without a lookup.
pub const API_KEY_PREFIX: &str = "vg_live_";

/// Time-ordered (UUID v7), so ids sort roughly by creation.
pub fn new_generation_id() -> String {
    format!("gen_{}", uuid::Uuid::now_v7().simple())
}

/// Whether `text` has the shape of a generation id (`gen_` and 32
/// lowercase hex digits): what an unauthenticated route checks before it
/// looks a generation up or logs the text, which a URL's path may have
/// decoded to anything, line breaks included.
pub fn is_generation_id(text: &str) -> bool {
    text.strip_prefix("gen_").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    })
}

/// A webhook delivery's id, sent as `webhook-id` on every attempt so that
/// receivers can recognise a retry of a message they already handled.
pub fn new_webhook_message_id() -> String {
    format!("msg_{}", uuid::Uuid::now_v7().simple())
}

pub fn new_account_id() -> String {
    format!("acct_{}", random_token(20))
}

pub fn new_key_id() -> String {
    format!("key_{}", random_token(20))
}

/// A random string of lowercase letters and digits (about 5.2 bits each).
pub fn random_token(length: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut random = rand::rng();
    (0..length)
        .map(|_| char::from(ALPHABET[random.random_range(0..ALPHABET.len())]))
        .collect()
}

/// A new API key: the secret (shown once), its display prefix and the digest
/// that is all the database keeps.
pub struct NewSecretKey {
    pub secret: String,
    pub display_prefix: String,
    pub sha256: String,
}

pub fn new_api_key() -> NewSecretKey {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{API_KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    NewSecretKey {
        display_prefix: secret[..API_KEY_PREFIX.len() + 6].to_owned(),
        sha256: sha256_hex(secret.as_bytes()),
        secret,
    }
}

/// 32 random bytes, base64url without padding.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A Standard Webhooks signing secret: `whsec_` and base64 of 32 random bytes.
pub fn new_webhook_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// API keys are 256-bit random secrets, so a fast unsalted digest is enough:
/// there is nothing to brute-force, and lookups stay one index probe.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_prefixed_random_and_hashed() {
        let first = new_api_key();
        let second = new_api_key();
        assert!(first.secret.starts_with(API_KEY_PREFIX));
        assert_eq!(first.secret.len(), API_KEY_PREFIX.len() + 43);
        assert_ne!(first.secret, second.secret);
        assert!(first.secret.starts_with(&first.display_prefix));
        assert_eq!(first.sha256, sha256_hex(first.secret.as_bytes()));
        assert_eq!(first.sha256.len(), 64);
    }

    #[test]
    fn webhook_secrets_decode_to_32_bytes() {
        let secret = new_webhook_secret();
        let encoded = secret.strip_prefix("whsec_").unwrap();
        assert_eq!(STANDARD.decode(encoded).unwrap().len(), 32);
    }

    #[test]
    fn generation_ids_have_their_prefix() {
        let id = new_generation_id();
        assert!(id.starts_with("gen_") && id.len() == 36, "{id}");
        assert!(is_generation_id(&id), "{id}");
        for not_one in [
            "gen_",
            "gen_someone_else",
            "acct_0192f3b4c5d6e7f8a9b0c1d2e3f4a5b6",
            "gen_0192f3b4c5d6e7f8a9b0c1d2e3f4a5b\n",
            "gen_0192F3B4C5D6E7F8A9B0C1D2E3F4A5B6",
        ] {
            assert!(!is_generation_id(not_one), "{not_one:?}");
        }
    }
}
