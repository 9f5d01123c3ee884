//! Retention: retiring the records of clips and uploads older than the
//! retention time, and the list of expired files whose objects the sweep
//! deletes from storage (and whose URLs then answer 410 Gone).
//!
//! Each step is a short transaction that several nodes may run at once: the
//! records a step takes are selected with `FOR UPDATE SKIP LOCKED` on
//! PostgreSQL (SQLite has one writer), and an object's deletion is claimed
//! with a lease, as jobs are.

use async_trait::async_trait;
use serde_json::Value;

use super::{StoreError, rfc3339};

/// An expired file whose object a sweeper claimed the deletion of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredFile {
    pub relative_path: String,
    pub account_id: String,
}

#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Marks up to `limit` succeeded generations completed at or before
    /// `cutoff` as expired: their output says so from now on, and their
    /// clips join the expired files. Returns how many were marked.
    async fn expire_generation_outputs(
        &self,
        cutoff: i64,
        now: i64,
        limit: u32,
    ) -> Result<usize, StoreError>;
    /// Retires up to `limit` uploads (used or not) and direct uploads never
    /// used, created at or before `cutoff`: the account can no longer name
    /// them in requests, and their objects join the expired files. Returns
    /// how many were retired.
    async fn expire_uploads(&self, cutoff: i64, now: i64, limit: u32) -> Result<usize, StoreError>;
    /// Claims up to `limit` expired files whose objects are not deleted yet
    /// and not claimed by a live lease, until `claimed_until`.
    async fn claim_expired_files(
        &self,
        now: i64,
        claimed_until: i64,
        limit: u32,
    ) -> Result<Vec<ExpiredFile>, StoreError>;
    /// Records that the object of an expired file is gone from storage.
    async fn record_file_deleted(&self, relative_path: &str, now: i64) -> Result<(), StoreError>;
    /// When the file at `relative_path` expired, if it did.
    async fn file_expired_at(&self, relative_path: &str) -> Result<Option<i64>, StoreError>;
}

/// The stored path of a clip, from its output's `video_url`
/// (`<api base>/files/<path>`); `None` for an output with no stored file.
pub(super) fn stored_path_of_output(output: &Value) -> Option<String> {
    let video_url = output.get("video_url")?.as_str()?;
    let (_, relative_path) = video_url.rsplit_once("/files/")?;
    Some(relative_path.to_owned())
}

/// The output of an expired generation: what it was, with `expired` and
/// `expired_at` added. The `video_url` stays, so that a client holding it
/// learns from the 410 why it no longer plays.
fn expired_output(mut output: Value, now: i64) -> Value {
    if let Some(fields) = output.as_object_mut() {
        fields.insert("expired".into(), Value::Bool(true));
        fields.insert("expired_at".into(), Value::String(rfc3339(now)));
    }
    output
}

/// Implements `RetentionStore` for one store type; expanded for both by
/// `impl_for_both_stores!` (see `mod.rs` for what the parameters mean).
macro_rules! impl_retention_store {
    (
        store: $store:ty,
        database: $database:ty,
        lock_account: $lock_account:literal,
        skip_locked: $skip_locked:literal $(,)?
    ) => {
        #[async_trait]
        impl RetentionStore for $store {
            async fn expire_generation_outputs(
                &self,
                cutoff: i64,
                now: i64,
                limit: u32,
            ) -> Result<usize, StoreError> {
                let mut transaction = self.begin_write().await?;
                let expiring: Vec<(String, String, Option<String>)> = sqlx::query_as(concat!(
                    "SELECT id, account_id, output FROM generations \
                     WHERE status = 'succeeded' AND output_expired_at IS NULL \
                     AND completed_at <= $1 ORDER BY completed_at LIMIT $2 ",
                    $skip_locked
                ))
                .bind(cutoff)
                .bind(i64::from(limit))
                .fetch_all(&mut *transaction)
                .await?;
                for (generation_id, account_id, output) in &expiring {
                    let output = output
                        .as_deref()
                        .map(serde_json::from_str::<Value>)
                        .transpose()
                        .map_err(|error| {
                            StoreError::Corrupt(format!("generation {generation_id}: {error}"))
                        })?;
                    let relative_path = output.as_ref().and_then(stored_path_of_output);
                    sqlx::query(
                        "UPDATE generations SET output = $1, output_expired_at = $2 WHERE id = $3",
                    )
                    .bind(output.map(|output| expired_output(output, now).to_string()))
                    .bind(now)
                    .bind(generation_id)
                    .execute(&mut *transaction)
                    .await?;
                    if let Some(relative_path) = relative_path {
                        sqlx::query(
                            "INSERT INTO expired_files (relative_path, account_id, expired_at) \
                             VALUES ($1, $2, $3) ON CONFLICT (relative_path) DO NOTHING",
                        )
                        .bind(relative_path)
                        .bind(account_id)
                        .bind(now)
                        .execute(&mut *transaction)
                        .await?;
                    }
                }
                transaction.commit().await?;
                Ok(expiring.len())
            }

            async fn expire_uploads(
                &self,
                cutoff: i64,
                now: i64,
                limit: u32,
            ) -> Result<usize, StoreError> {
                let mut transaction = self.begin_write().await?;
                let mut expiring: Vec<(String, String, String)> = sqlx::query_as(concat!(
                    "SELECT id, account_id, relative_path FROM uploads \
                     WHERE created_at <= $1 ORDER BY created_at LIMIT $2 ",
                    $skip_locked
                ))
                .bind(cutoff)
                .bind(i64::from(limit))
                .fetch_all(&mut *transaction)
                .await?;
                // A direct upload never used has no uploads row: its object
                // (if the client ever PUT one) expires all the same.
                let never_used: Vec<(String, String, String)> = sqlx::query_as(concat!(
                    "SELECT id, account_id, relative_path FROM direct_uploads AS pending \
                     WHERE created_at <= $1 \
                     AND NOT EXISTS (SELECT 1 FROM uploads WHERE uploads.id = pending.id) \
                     ORDER BY created_at LIMIT $2 ",
                    $skip_locked
                ))
                .bind(cutoff)
                .bind(i64::from(limit))
                .fetch_all(&mut *transaction)
                .await?;
                expiring.extend(never_used);
                for (upload_id, account_id, relative_path) in &expiring {
                    sqlx::query("DELETE FROM uploads WHERE id = $1")
                        .bind(upload_id)
                        .execute(&mut *transaction)
                        .await?;
                    sqlx::query("DELETE FROM direct_uploads WHERE id = $1")
                        .bind(upload_id)
                        .execute(&mut *transaction)
                        .await?;
                    sqlx::query(
                        "INSERT INTO expired_files (relative_path, account_id, expired_at) \
                         VALUES ($1, $2, $3) ON CONFLICT (relative_path) DO NOTHING",
                    )
                    .bind(relative_path)
                    .bind(account_id)
                    .bind(now)
                    .execute(&mut *transaction)
                    .await?;
                }
                transaction.commit().await?;
                Ok(expiring.len())
            }

            async fn claim_expired_files(
                &self,
                now: i64,
                claimed_until: i64,
                limit: u32,
            ) -> Result<Vec<ExpiredFile>, StoreError> {
                let claimed: Vec<(String, String)> = sqlx::query_as(concat!(
                    "UPDATE expired_files SET claimed_until = $1 WHERE relative_path IN (\
                     SELECT relative_path FROM expired_files WHERE deleted_at IS NULL \
                     AND (claimed_until IS NULL OR claimed_until < $2) \
                     ORDER BY expired_at LIMIT $3 ",
                    $skip_locked,
                    ") RETURNING relative_path, account_id"
                ))
                .bind(claimed_until)
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(self.writer())
                .await?;
                Ok(claimed
                    .into_iter()
                    .map(|(relative_path, account_id)| ExpiredFile {
                        relative_path,
                        account_id,
                    })
                    .collect())
            }

            async fn record_file_deleted(
                &self,
                relative_path: &str,
                now: i64,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "UPDATE expired_files SET deleted_at = $1, claimed_until = NULL \
                     WHERE relative_path = $2",
                )
                .bind(now)
                .bind(relative_path)
                .execute(self.writer())
                .await?;
                Ok(())
            }

            async fn file_expired_at(
                &self,
                relative_path: &str,
            ) -> Result<Option<i64>, StoreError> {
                Ok(sqlx::query_scalar(
                    "SELECT expired_at FROM expired_files WHERE relative_path = $1",
                )
                .bind(relative_path)
                .fetch_optional(self.reader())
                .await?)
            }
        }
    };
}

impl_for_both_stores!(impl_retention_store);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_stored_path_is_read_from_the_video_url() {
        let output =
            json!({ "video_url": "https://api.example/api/v1/files/outputs/abc/gen_1.mp4" });
        assert_eq!(
            stored_path_of_output(&output).as_deref(),
            Some("outputs/abc/gen_1.mp4")
        );
        assert_eq!(stored_path_of_output(&json!({ "seed": 1 })), None);
    }

    #[test]
    fn an_expired_output_keeps_its_fields_and_says_when_it_expired() {
        let output = expired_output(json!({ "video_url": "u", "seed": 7 }), 0);
        assert_eq!(
            output,
            json!({
                "video_url": "u",
                "seed": 7,
                "expired": true,
                "expired_at": "1970-01-01T00:00:00.000Z",
            })
        );
    }
}
