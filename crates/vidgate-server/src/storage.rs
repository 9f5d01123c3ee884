//! Where finished clips live. Local disk under the data directory by default;
//! the files are served under `/api/v1/files/` by an unguessable path (a
//! capability URL, as model APIs commonly hand out), so that a `<video>`
//! element can play them without an Authorization header.

use std::path::{Path, PathBuf};

use crate::ids::random_token;

pub struct LocalStorage {
    root: PathBuf,
}

/// A stored file, addressed by its path relative to the storage root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub relative_path: String,
    pub size_bytes: u64,
}

impl LocalStorage {
    pub fn new(root: PathBuf) -> LocalStorage {
        LocalStorage { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes a generation's clip. The bytes go to a temporary name first and
    /// are renamed into place, so a reader never sees a partial file.
    pub async fn put_output(
        &self,
        generation_id: &str,
        bytes: &[u8],
    ) -> std::io::Result<StoredFile> {
        let token = random_token(24);
        let relative_path = format!("outputs/{token}/{generation_id}.mp4");
        let final_path = self.root.join(&relative_path);
        let directory = final_path
            .parent()
            .expect("output paths have a parent directory");
        tokio::fs::create_dir_all(directory).await?;
        let temporary_path = directory.join(format!(".{generation_id}.partial"));
        tokio::fs::write(&temporary_path, bytes).await?;
        tokio::fs::rename(&temporary_path, &final_path).await?;
        Ok(StoredFile {
            relative_path,
            size_bytes: bytes.len() as u64,
        })
    }

    /// A new file to stream an upload into, under a hidden name that is never
    /// served or resolved as one of our URLs until `keep_upload` moves it.
    pub async fn incoming_file(&self) -> std::io::Result<(PathBuf, tokio::fs::File)> {
        let directory = self.root.join("uploads").join(".incoming");
        tokio::fs::create_dir_all(&directory).await?;
        let path = directory.join(format!("{}.partial", random_token(24)));
        let file = tokio::fs::File::create(&path).await?;
        Ok((path, file))
    }

    /// Moves a complete, checked upload to its capability URL path.
    pub async fn keep_upload(
        &self,
        incoming: &Path,
        upload_id: &str,
        extension: &str,
        size_bytes: u64,
    ) -> std::io::Result<StoredFile> {
        let relative_path = format!("uploads/{}/{upload_id}.{extension}", random_token(24));
        let final_path = self.root.join(&relative_path);
        if let Some(directory) = final_path.parent() {
            tokio::fs::create_dir_all(directory).await?;
        }
        tokio::fs::rename(incoming, &final_path).await?;
        Ok(StoredFile {
            relative_path,
            size_bytes,
        })
    }

    /// Removes a stored file and its token directory; used when a finished
    /// clip could not be recorded (the job's lease was lost meanwhile).
    pub async fn delete(&self, file: &StoredFile) -> std::io::Result<()> {
        let path = self.root.join(&file.relative_path);
        tokio::fs::remove_file(&path).await?;
        if let Some(directory) = path.parent() {
            tokio::fs::remove_dir(directory).await?;
        }
        Ok(())
    }
}
