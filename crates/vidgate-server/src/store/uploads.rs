//! Uploads: files an account uploaded through vidgate, and presigned direct
//! uploads until their first use records them.

use serde_json::Value;

use super::{Store, StoreError};

/// A file an account uploaded, as the uploads table records it.
pub struct NewUpload {
    pub id: String,
    pub account_id: String,
    pub relative_path: String,
    pub content_type: String,
    pub size_bytes: i64,
    pub media: Value,
    pub created_at: i64,
}

/// A presigned direct upload: the object is PUT straight to the bucket, and
/// checked (then recorded as an upload) the first time a request names it.
pub struct NewDirectUpload {
    pub id: String,
    pub account_id: String,
    pub relative_path: String,
    pub created_at: i64,
}

/// A direct upload as first use needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectUpload {
    pub id: String,
    pub account_id: String,
}

/// What an account's uploads take up: every recorded upload, and direct
/// uploads not yet used (their size is not known yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadUsage {
    pub count: i64,
    pub bytes: i64,
}

impl Store {
    /// Runs `statement`, an insert into `uploads` with or without a
    /// conflict clause, for `upload`: the two ways an upload is recorded
    /// bind the same columns in the same order.
    async fn insert_upload(
        &self,
        statement: &'static str,
        upload: &NewUpload,
    ) -> Result<(), StoreError> {
        execute_on_writer!(
            self,
            sqlx::query(statement)
                .bind(&upload.id)
                .bind(&upload.account_id)
                .bind(&upload.relative_path)
                .bind(&upload.content_type)
                .bind(upload.size_bytes)
                .bind(upload.media.to_string())
                .bind(upload.created_at)
        )?;
        Ok(())
    }
}

/// The operations of `uploads` (see `Store::uploads`).
#[derive(Clone, Copy)]
pub struct Uploads<'store> {
    pub(super) store: &'store Store,
}

impl Uploads<'_> {
    /// How many uploads the account holds and their recorded bytes.
    pub async fn usage(self, account_id: &str) -> Result<UploadUsage, StoreError> {
        let (count, bytes): (i64, i64) = fetch_on_reader!(
            self.store,
            fetch_one,
            sqlx::query_as(
                "SELECT \
                 (SELECT COUNT(*) FROM uploads WHERE account_id = $1) + \
                 (SELECT COUNT(*) FROM direct_uploads AS pending WHERE account_id = $1 \
                  AND NOT EXISTS (SELECT 1 FROM uploads WHERE uploads.id = pending.id)), \
                 CAST((SELECT COALESCE(SUM(size_bytes), 0) FROM uploads \
                  WHERE account_id = $1) AS BIGINT)",
            )
            .bind(account_id)
        )?;
        Ok(UploadUsage { count, bytes })
    }

    /// Records a file an account uploaded (already written to storage).
    pub async fn create(self, upload: &NewUpload) -> Result<(), StoreError> {
        self.store
            .insert_upload(
                "INSERT INTO uploads (id, account_id, relative_path, content_type, \
             size_bytes, media, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                upload,
            )
            .await
    }

    /// The account that uploaded the file stored at `relative_path`.
    pub async fn owner(self, relative_path: &str) -> Result<Option<String>, StoreError> {
        Ok(fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar("SELECT account_id FROM uploads WHERE relative_path = $1")
                .bind(relative_path)
        )?)
    }

    /// Records a presigned direct upload before its object exists.
    pub async fn create_direct(self, upload: &NewDirectUpload) -> Result<(), StoreError> {
        execute_on_writer!(
            self.store,
            sqlx::query(
                "INSERT INTO direct_uploads (id, account_id, relative_path, created_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&upload.id)
            .bind(&upload.account_id)
            .bind(&upload.relative_path)
            .bind(upload.created_at)
        )?;
        Ok(())
    }

    /// The direct upload whose object is stored at `relative_path`.
    pub async fn direct(self, relative_path: &str) -> Result<Option<DirectUpload>, StoreError> {
        let row: Option<(String, String)> = fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_as("SELECT id, account_id FROM direct_uploads WHERE relative_path = $1")
                .bind(relative_path)
        )?;
        Ok(row.map(|(id, account_id)| DirectUpload { id, account_id }))
    }

    /// Records a direct upload's probed object as an upload; a second
    /// recording of the same upload (two first uses at once) is a no-op.
    pub async fn record_direct(self, upload: &NewUpload) -> Result<(), StoreError> {
        self.store
            .insert_upload(
                "INSERT INTO uploads (id, account_id, relative_path, content_type, \
             size_bytes, media, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (id) DO NOTHING",
                upload,
            )
            .await
    }

    /// The probed media type of the upload stored at `relative_path`.
    pub async fn content_type(self, relative_path: &str) -> Result<Option<String>, StoreError> {
        Ok(fetch_on_reader!(
            self.store,
            fetch_optional,
            sqlx::query_scalar("SELECT content_type FROM uploads WHERE relative_path = $1")
                .bind(relative_path)
        )?)
    }
}
