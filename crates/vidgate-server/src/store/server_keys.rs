//! Server keys: secrets the server makes for itself, one per purpose, kept
//! in the database so that every node sharing it uses the same one (today
//! the key that signs the short-lived URLs of kept request media, see
//! `bound_media.rs`).

use super::{Store, StoreError, now_millis};

/// The operations of `server_keys` (see `Store::server_keys`).
#[derive(Clone, Copy)]
pub struct ServerKeys<'store> {
    pub(super) store: &'store Store,
}

impl ServerKeys<'_> {
    /// The key of `purpose`: the stored one, or `generated` when none is
    /// stored yet. Of several nodes storing their own at once, the first
    /// wins and every node gets that one.
    pub async fn get(self, purpose: &str, generated: &str) -> Result<String, StoreError> {
        execute_on_writer!(
            self.store,
            sqlx::query(
                "INSERT INTO server_keys (purpose, secret, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (purpose) DO NOTHING",
            )
            .bind(purpose)
            .bind(generated)
            .bind(now_millis())
        )?;
        // Read on the writer, which has just seen the row whoever
        // stored it.
        let secret: String = fetch_on_writer!(
            self.store,
            fetch_one,
            sqlx::query_scalar("SELECT secret FROM server_keys WHERE purpose = $1").bind(purpose)
        )?;
        Ok(secret)
    }
}
