//! Retention: retiring the records of clips and uploads older than the
//! retention time, and the list of expired files whose objects the sweep
//! deletes from storage (and whose URLs then answer 410 Gone).
//!
//! Each step is a short transaction that several nodes may run at once: the
//! records a step takes are selected with `FOR UPDATE SKIP LOCKED` on
//! PostgreSQL (SQLite has one writer), and an object's deletion is claimed
//! with a lease, as jobs are.

use serde_json::Value;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

use super::database::{RowLocking, WriteTransaction};
use super::{Store, StoreError, rfc3339};

/// An expired file whose object a sweeper claimed the deletion of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredFile {
    pub relative_path: String,
    pub account_id: String,
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

/// Adds a file to the expired files that the retention sweep deletes, in
/// the transaction that retires what named it; a file already there keeps
/// its first entry.
pub(super) async fn record_expired_file(
    transaction: &mut WriteTransaction,
    relative_path: &str,
    account_id: &str,
    expired_at: i64,
) -> Result<(), StoreError> {
    execute_in_transaction!(
        transaction,
        sqlx::query(
            "INSERT INTO expired_files (relative_path, account_id, expired_at) \
             VALUES ($1, $2, $3) ON CONFLICT (relative_path) DO NOTHING",
        )
        .bind(relative_path)
        .bind(account_id)
        .bind(expired_at)
    )?;
    Ok(())
}

/// Selects inside `transaction` up to `limit` rows of `selection` that
/// expire at `cutoff`, locking them with `SKIP LOCKED` on PostgreSQL so
/// that nodes sweeping at once take different rows. `selection` binds the
/// cutoff as `$1` and the limit as `$2`, and ends where the locking clause
/// goes. It is generic over the row, as `Store::point_read` is, because the
/// three selections of the sweep read different columns.
async fn select_expiring<Row>(
    transaction: &mut WriteTransaction,
    selection: &'static str,
    cutoff: i64,
    limit: u32,
) -> Result<Vec<Row>, StoreError>
where
    Row: for<'row> sqlx::FromRow<'row, SqliteRow>
        + for<'row> sqlx::FromRow<'row, PgRow>
        + Send
        + Unpin,
{
    let statement = format!(
        "{selection}{locking}",
        locking = transaction.row_locking(RowLocking::SkipLocked),
    );
    Ok(fetch_in_transaction!(
        transaction,
        fetch_all,
        sqlx::query_as(AssertSqlSafe(statement))
            .bind(cutoff)
            .bind(i64::from(limit))
    )?)
}

/// The operations of `retention` (see `Store::retention`).
#[derive(Clone, Copy)]
pub struct Retention<'store> {
    pub(super) store: &'store Store,
}

impl Retention<'_> {
    /// Marks up to `limit` succeeded generations completed at or before
    /// `cutoff` as expired: their output says so from now on, and their
    /// clips join the expired files. Returns how many were marked.
    pub async fn expire_generation_outputs(
        self,
        cutoff: i64,
        now: i64,
        limit: u32,
    ) -> Result<usize, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let expiring: Vec<(String, String, Option<String>)> = select_expiring(
            &mut transaction,
            "SELECT id, account_id, output FROM generations \
             WHERE status = 'succeeded' AND output_expired_at IS NULL \
             AND completed_at <= $1 ORDER BY completed_at LIMIT $2 ",
            cutoff,
            limit,
        )
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
            execute_in_transaction!(
                &mut transaction,
                sqlx::query(
                    "UPDATE generations SET output = $1, output_expired_at = $2 WHERE id = $3",
                )
                .bind(output.map(|output| expired_output(output, now).to_string()))
                .bind(now)
                .bind(generation_id)
            )?;
            if let Some(relative_path) = relative_path {
                record_expired_file(&mut transaction, &relative_path, account_id, now).await?;
            }
        }
        transaction.commit().await?;
        Ok(expiring.len())
    }

    /// Retires up to `limit` uploads (used or not) and direct uploads never
    /// used, created at or before `cutoff`: the account can no longer name
    /// them in requests, and their objects join the expired files. Returns
    /// how many were retired.
    pub async fn expire_uploads(
        self,
        cutoff: i64,
        now: i64,
        limit: u32,
    ) -> Result<usize, StoreError> {
        let mut transaction = self.store.begin_write().await?;
        let mut expiring: Vec<(String, String, String)> = select_expiring(
            &mut transaction,
            "SELECT id, account_id, relative_path FROM uploads \
             WHERE created_at <= $1 ORDER BY created_at LIMIT $2 ",
            cutoff,
            limit,
        )
        .await?;
        // A direct upload never used has no uploads row: its object
        // (if the client ever PUT one) expires all the same.
        let never_used: Vec<(String, String, String)> = select_expiring(
            &mut transaction,
            "SELECT id, account_id, relative_path FROM direct_uploads AS pending \
             WHERE created_at <= $1 \
             AND NOT EXISTS (SELECT 1 FROM uploads WHERE uploads.id = pending.id) \
             ORDER BY created_at LIMIT $2 ",
            cutoff,
            limit,
        )
        .await?;
        expiring.extend(never_used);
        for (upload_id, account_id, relative_path) in &expiring {
            execute_in_transaction!(
                &mut transaction,
                sqlx::query("DELETE FROM uploads WHERE id = $1").bind(upload_id)
            )?;
            execute_in_transaction!(
                &mut transaction,
                sqlx::query("DELETE FROM direct_uploads WHERE id = $1").bind(upload_id)
            )?;
            record_expired_file(&mut transaction, relative_path, account_id, now).await?;
        }
        transaction.commit().await?;
        Ok(expiring.len())
    }

    /// Claims up to `limit` expired files whose objects are not deleted yet
    /// and not claimed by a live lease, until `claimed_until`.
    pub async fn claim_expired_files(
        self,
        now: i64,
        claimed_until: i64,
        limit: u32,
    ) -> Result<Vec<ExpiredFile>, StoreError> {
        let statement = format!(
            concat!(
                "UPDATE expired_files SET claimed_until = $1 WHERE relative_path IN (\
                 SELECT relative_path FROM expired_files WHERE deleted_at IS NULL \
                 AND (claimed_until IS NULL OR claimed_until < $2) \
                 ORDER BY expired_at LIMIT $3 ",
                "{locking}",
                ") RETURNING relative_path, account_id"
            ),
            locking = self.store.row_locking(RowLocking::SkipLocked),
        );
        let claimed: Vec<(String, String)> = fetch_on_writer!(
            self.store,
            fetch_all,
            sqlx::query_as(AssertSqlSafe(statement))
                .bind(claimed_until)
                .bind(now)
                .bind(i64::from(limit))
        )?;
        Ok(claimed
            .into_iter()
            .map(|(relative_path, account_id)| ExpiredFile {
                relative_path,
                account_id,
            })
            .collect())
    }

    /// Records that the object of an expired file is gone from storage.
    pub async fn record_file_deleted(
        self,
        relative_path: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        execute_on_writer!(
            self.store,
            sqlx::query(
                "UPDATE expired_files SET deleted_at = $1, claimed_until = NULL \
                 WHERE relative_path = $2",
            )
            .bind(now)
            .bind(relative_path)
        )?;
        Ok(())
    }

    /// When the file at `relative_path` expired, if it did.
    pub async fn file_expired_at(self, relative_path: &str) -> Result<Option<i64>, StoreError> {
        Ok(fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar("SELECT expired_at FROM expired_files WHERE relative_path = $1")
                .bind(relative_path)
        )?)
    }
}

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
