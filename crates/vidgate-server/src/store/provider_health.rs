//! Provider health: each hosted provider's circuit as a node last saw it
//! (closed or open, its consecutive failures, the last error, the recent
//! latency of its calls), saved by the node whenever it changes so that
//! `vidgate admin providers`, which runs next to the database and not in a
//! server, can show it. Circuits themselves live in each node's memory
//! (`backend/hosted/circuit.rs`); the row is the latest node's view.

use super::{Store, StoreError};

/// One provider's circuit as a node saw it. Its fields are the columns of
/// its row, so it is read from the table by name, as it is.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ProviderHealth {
    /// `fal` or `replicate`.
    pub provider: String,
    /// Whether dispatch skips the provider now.
    pub open: bool,
    pub consecutive_failures: i64,
    pub last_error: Option<String>,
    /// Unix ms of `last_error`.
    pub last_error_at: Option<i64>,
    /// The moving average of the provider's recent successful calls.
    pub latency_ms: Option<i64>,
    /// The node that saved this view, and when (Unix ms).
    pub node_id: String,
    pub updated_at: i64,
}

/// The operations of `provider_health` (see `Store::provider_health`).
#[derive(Clone, Copy)]
pub struct ProviderHealthRecords<'store> {
    pub(super) store: &'store Store,
}

impl ProviderHealthRecords<'_> {
    /// Saves a node's view of a provider, replacing the previous one.
    pub async fn save(self, health: &ProviderHealth) -> Result<(), StoreError> {
        execute_on_writer!(
            self.store,
            sqlx::query(
                "INSERT INTO provider_health (provider, open, consecutive_failures, \
                 last_error, last_error_at, latency_ms, node_id, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (provider) DO UPDATE SET open = excluded.open, \
                 consecutive_failures = excluded.consecutive_failures, \
                 last_error = excluded.last_error, last_error_at = excluded.last_error_at, \
                 latency_ms = excluded.latency_ms, node_id = excluded.node_id, \
                 updated_at = excluded.updated_at",
            )
            .bind(&health.provider)
            .bind(health.open)
            .bind(health.consecutive_failures)
            .bind(&health.last_error)
            .bind(health.last_error_at)
            .bind(health.latency_ms)
            .bind(&health.node_id)
            .bind(health.updated_at)
        )?;
        Ok(())
    }

    /// Every provider's latest saved view, by provider name.
    pub async fn read(self) -> Result<Vec<ProviderHealth>, StoreError> {
        Ok(fetch_on_reader!(
            self.store,
            fetch_all,
            sqlx::query_as(
                "SELECT provider, open, consecutive_failures, last_error, last_error_at, \
                 latency_ms, node_id, updated_at FROM provider_health ORDER BY provider",
            )
        )?)
    }
}
