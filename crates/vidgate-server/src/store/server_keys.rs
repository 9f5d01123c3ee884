//! Server keys: secrets the server makes for itself, one per purpose, kept
//! in the database so that every node sharing it uses the same one (today
//! the key that signs the short-lived URLs of kept request media, see
//! `bound_media.rs`).

use async_trait::async_trait;

use super::{StoreError, now_millis};

#[async_trait]
pub trait ServerKeyStore: Send + Sync {
    /// The key of `purpose`: the stored one, or `generated` when none is
    /// stored yet. Of several nodes storing their own at once, the first
    /// wins and every node gets that one.
    async fn server_key(&self, purpose: &str, generated: &str) -> Result<String, StoreError>;
}

/// Implements `ServerKeyStore` for one store type; expanded for both by
/// `impl_for_both_stores!` (see `mod.rs` for what the parameters mean).
macro_rules! impl_server_key_store {
    (
        store: $store:ty,
        database: $database:ty,
        lock_account: $lock_account:literal,
        skip_locked: $skip_locked:literal $(,)?
    ) => {
        #[async_trait]
        impl ServerKeyStore for $store {
            async fn server_key(
                &self,
                purpose: &str,
                generated: &str,
            ) -> Result<String, StoreError> {
                sqlx::query(
                    "INSERT INTO server_keys (purpose, secret, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (purpose) DO NOTHING",
                )
                .bind(purpose)
                .bind(generated)
                .bind(now_millis())
                .execute(self.writer())
                .await?;
                // Read on the writer, which has just seen the row whoever
                // stored it.
                let secret: String =
                    sqlx::query_scalar("SELECT secret FROM server_keys WHERE purpose = $1")
                        .bind(purpose)
                        .fetch_one(self.writer())
                        .await?;
                Ok(secret)
            }
        }
    };
}

impl_for_both_stores!(impl_server_key_store);
