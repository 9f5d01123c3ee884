//! Where finished clips and uploaded files live: local disk under the data
//! directory (the default), or an S3-compatible bucket under a prefix
//! (`--storage s3://bucket/prefix`). Either way a file is addressed by a
//! relative path (`outputs/<token>/<id>.mp4`, `uploads/<token>/<id>.<ext>`)
//! and served by vidgate itself under `/api/v1/files/<path>`: an unguessable
//! capability URL, as model APIs commonly hand out, which a `<video>` element
//! can play without an Authorization header. Keeping every public URL on our
//! own origin means our own-upload URLs resolve internally without HTTP and
//! a page's `media-src 'self'` policy holds with either store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3;
pub use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::signer::{HeaderName, Method, SignedUrlOptions, Signer};
use object_store::{
    Attribute, Attributes, GetOptions, GetRange, GetResult, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload,
};
use url::Url;

use crate::ids::random_token;

/// How long a presigned upload URL stays valid: long enough to PUT the
/// largest upload over a slow link, short enough that a leaked URL cannot
/// be used to replace the object for long.
pub const DIRECT_UPLOAD_VALIDITY: Duration = Duration::from_secs(15 * 60);

/// Which store `vidgate serve` was told to use (`--storage`).
#[derive(Debug, Clone)]
pub enum StorageConfig {
    /// Local disk under the data directory.
    Local,
    /// An S3-compatible bucket; `builder` carries the bucket, credentials,
    /// region and endpoint, and objects are written under `prefix`.
    S3 {
        builder: Box<AmazonS3Builder>,
        prefix: String,
    },
}

impl StorageConfig {
    /// Parses `local` or `s3://bucket/prefix`, taking credentials, region and
    /// endpoint from the usual AWS variables (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` or `AWS_SECRET_ACCESS_KEY_FILE`, `AWS_REGION`,
    /// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, …).
    pub fn from_flag(text: &str) -> Result<StorageConfig, String> {
        if text == "local" {
            return Ok(StorageConfig::Local);
        }
        let url = Url::parse(text)
            .ok()
            .filter(|url| url.scheme() == "s3")
            .ok_or_else(|| format!("unknown storage {text:?}: use local or s3://bucket/prefix"))?;
        let bucket = url
            .host_str()
            .filter(|bucket| !bucket.is_empty())
            .ok_or_else(|| format!("{text:?} names no bucket: use s3://bucket/prefix"))?;
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        // The secret key may come from a file, as other secrets do.
        if let Some(secret_key) = crate::secrets::secret_from_environment("AWS_SECRET_ACCESS_KEY")
            .map_err(|error| error.to_string())?
        {
            builder = builder.with_secret_access_key(secret_key);
        }
        Ok(StorageConfig::S3 {
            builder: Box::new(builder),
            prefix: url.path().trim_matches('/').to_owned(),
        })
    }
}

/// A stored file, addressed by its path relative to the storage root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub relative_path: String,
    pub size_bytes: u64,
}

/// Why a stored file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no such file")]
    NotFound,
    #[error("larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the store failed")]
    Store(#[source] std::io::Error),
}

/// Why the start-up probe of the storage failed, by the step that failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("could not write a probe object")]
    Write(#[source] std::io::Error),
    #[error("could not read back the probe object it wrote")]
    Read(#[source] std::io::Error),
    #[error("read back different bytes than it wrote")]
    Mismatch,
    #[error("could not delete the probe object it wrote")]
    Delete(#[source] std::io::Error),
}

pub struct Storage {
    backend: Backend,
    /// Where multipart uploads are streamed before they are checked.
    incoming: PathBuf,
}

enum Backend {
    Local {
        root: PathBuf,
    },
    S3 {
        store: Arc<AmazonS3>,
        prefix: String,
    },
}

impl Storage {
    /// Local disk under `root`, exactly as `/files/` serves it.
    pub fn local(root: PathBuf) -> Storage {
        Storage {
            incoming: root.join("uploads").join(".incoming"),
            backend: Backend::Local { root },
        }
    }

    /// The configured store; `data_dir` holds the multipart scratch files.
    pub fn open(config: &StorageConfig, data_dir: &Path) -> Result<Storage, object_store::Error> {
        match config {
            StorageConfig::Local => Ok(Storage::local(data_dir.join("files"))),
            StorageConfig::S3 { builder, prefix } => Ok(Storage {
                backend: Backend::S3 {
                    store: Arc::new(builder.as_ref().clone().build()?),
                    prefix: prefix.clone(),
                },
                incoming: data_dir.join("incoming"),
            }),
        }
    }

    /// The directory behind `/files/` when files are on local disk.
    pub fn local_root(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Local { root } => Some(root),
            Backend::S3 { .. } => None,
        }
    }

    fn object_path(prefix: &str, relative_path: &str) -> ObjectPath {
        if prefix.is_empty() {
            ObjectPath::from(relative_path)
        } else {
            ObjectPath::from(format!("{prefix}/{relative_path}"))
        }
    }

    /// Writes a generation's clip. On disk the bytes go to a temporary name
    /// first and are renamed into place, so a reader never sees a partial
    /// file; an object store's PUT is atomic by itself.
    pub async fn put_output(
        &self,
        generation_id: &str,
        bytes: &[u8],
    ) -> std::io::Result<StoredFile> {
        let relative_path = Storage::output_path(generation_id);
        match &self.backend {
            Backend::Local { root } => {
                let final_path = Storage::local_destination(root, &relative_path).await?;
                let temporary_path = final_path.with_file_name(format!(".{generation_id}.partial"));
                tokio::fs::write(&temporary_path, bytes).await?;
                tokio::fs::rename(&temporary_path, &final_path).await?;
            }
            Backend::S3 { store, prefix } => {
                put_object(
                    store,
                    &Storage::object_path(prefix, &relative_path),
                    bytes.to_vec(),
                    "video/mp4",
                )
                .await?;
            }
        }
        Ok(StoredFile {
            relative_path,
            size_bytes: bytes.len() as u64,
        })
    }

    /// Stores a generation's clip from a complete file made by
    /// `incoming_file`, never reading it whole: on disk the file is renamed
    /// into place (atomic, so a reader never sees a partial file); to a
    /// bucket it is sent as a multipart upload, which the bucket shows only
    /// once complete, and then removed. On failure the file is removed when
    /// `clip` is dropped.
    pub async fn put_output_file(
        &self,
        generation_id: &str,
        clip: tempfile::TempPath,
    ) -> std::io::Result<StoredFile> {
        let relative_path = Storage::output_path(generation_id);
        let size_bytes = tokio::fs::metadata(&clip).await?.len();
        match &self.backend {
            Backend::Local { root } => {
                let final_path = Storage::local_destination(root, &relative_path).await?;
                tokio::fs::rename(&clip, &final_path).await?;
                // The file now lives at its final path; the scratch name is
                // gone, so there is nothing left to remove.
                let _ = clip.keep();
            }
            Backend::S3 { store, prefix } => {
                put_file(
                    store,
                    &Storage::object_path(prefix, &relative_path),
                    &clip,
                    "video/mp4",
                )
                .await?;
            }
        }
        Ok(StoredFile {
            relative_path,
            size_bytes,
        })
    }

    /// Where a generation's clip is stored: under a fresh unguessable token.
    fn output_path(generation_id: &str) -> String {
        format!("outputs/{}/{generation_id}.mp4", random_token(24))
    }

    /// The local path of a stored name, with its directory made.
    async fn local_destination(root: &Path, relative_path: &str) -> std::io::Result<PathBuf> {
        let final_path = root.join(relative_path);
        let directory = final_path
            .parent()
            .expect("stored names have a parent directory");
        tokio::fs::create_dir_all(directory).await?;
        Ok(final_path)
    }

    /// A new local file to stream a multipart upload or a downloaded clip
    /// into (for the size cap and the probe), under a hidden name that is
    /// never served or resolved as one of our URLs until `keep_upload` or
    /// `put_output_file` stores it. On local disk the directory is under
    /// the storage root, so storing it is a rename on one filesystem.
    pub async fn incoming_file(&self) -> std::io::Result<(PathBuf, tokio::fs::File)> {
        tokio::fs::create_dir_all(&self.incoming).await?;
        let path = self.incoming.join(format!("{}.partial", random_token(24)));
        let file = tokio::fs::File::create(&path).await?;
        Ok((path, file))
    }

    /// Removes the incoming files last written more than `older_than` ago,
    /// which a process that died mid-write left behind (every live writer
    /// removes its own file on every path); returns how many it removed.
    pub async fn remove_abandoned_incoming_files(
        &self,
        older_than: Duration,
    ) -> std::io::Result<usize> {
        let mut entries = match tokio::fs::read_dir(&self.incoming).await {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error),
        };
        let mut removed = 0;
        while let Some(entry) = entries.next_entry().await? {
            let metadata = entry.metadata().await?;
            let idle_for = metadata.modified()?.elapsed().unwrap_or_default();
            if !metadata.is_file() || idle_for <= older_than {
                continue;
            }
            match tokio::fs::remove_file(entry.path()).await {
                Ok(()) => removed += 1,
                // Another node sharing this data directory took it first.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(removed)
    }

    /// Stores a complete, checked upload at its capability URL path: on disk
    /// by moving the incoming file, in an object store by sending the
    /// incoming file in parts (never whole in memory) and removing it.
    pub async fn keep_upload(
        &self,
        incoming: &Path,
        upload_id: &str,
        extension: &str,
        content_type: &'static str,
    ) -> std::io::Result<StoredFile> {
        let relative_path = format!("uploads/{}/{upload_id}.{extension}", random_token(24));
        let size_bytes = tokio::fs::metadata(incoming).await?.len();
        match &self.backend {
            Backend::Local { root } => {
                let final_path = root.join(&relative_path);
                if let Some(directory) = final_path.parent() {
                    tokio::fs::create_dir_all(directory).await?;
                }
                tokio::fs::rename(incoming, &final_path).await?;
            }
            Backend::S3 { store, prefix } => {
                let stored = put_file(
                    store,
                    &Storage::object_path(prefix, &relative_path),
                    incoming,
                    content_type,
                )
                .await;
                tokio::fs::remove_file(incoming).await?;
                stored?;
            }
        }
        Ok(StoredFile {
            relative_path,
            size_bytes,
        })
    }

    /// Removes a stored file (and on disk its token directory); used when a
    /// finished clip could not be recorded (the job's lease was lost).
    pub async fn delete(&self, file: &StoredFile) -> std::io::Result<()> {
        match &self.backend {
            Backend::Local { root } => {
                let path = root.join(&file.relative_path);
                tokio::fs::remove_file(&path).await?;
                if let Some(directory) = path.parent() {
                    tokio::fs::remove_dir(directory).await?;
                }
                Ok(())
            }
            Backend::S3 { store, prefix } => store
                .delete(&Storage::object_path(prefix, &file.relative_path))
                .await
                .map_err(std::io::Error::other),
        }
    }

    /// Removes the file at `relative_path` if it is there (and on disk its
    /// token directory, when that is empty): the retention sweep, which may
    /// retry a deletion another node finished, or delete a direct upload
    /// whose object was never sent.
    pub async fn delete_if_present(&self, relative_path: &str) -> std::io::Result<()> {
        match &self.backend {
            Backend::Local { root } => {
                let path = root.join(relative_path);
                match tokio::fs::remove_file(&path).await {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error),
                }
                // Another file in the directory keeps it; that is fine.
                if let Some(directory) = path.parent() {
                    let _ = tokio::fs::remove_dir(directory).await;
                }
                Ok(())
            }
            // Deleting a missing object succeeds on S3 and its look-alikes.
            Backend::S3 { store, prefix } => match store
                .delete(&Storage::object_path(prefix, relative_path))
                .await
            {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(error) => Err(std::io::Error::other(error)),
            },
        }
    }

    /// Writes a small probe file and removes it again: readiness asks
    /// whether clips can still be stored (a full disk, a read-only mount,
    /// revoked bucket credentials). The probe's name is random, so probes of
    /// several nodes never collide, and it exists only for the check.
    pub async fn check_writable(&self) -> std::io::Result<()> {
        let probe_name = format!(".probe-{}", random_token(16));
        match &self.backend {
            Backend::Local { root } => {
                let path = root.join(probe_name);
                tokio::fs::write(&path, b"vidgate").await?;
                tokio::fs::remove_file(&path).await
            }
            Backend::S3 { store, prefix } => {
                let location = Storage::object_path(prefix, &format!("health/{probe_name}"));
                put_object(store, &location, b"vidgate".to_vec(), UNKNOWN_CONTENT_TYPE).await?;
                store.delete(&location).await.map_err(std::io::Error::other)
            }
        }
    }

    /// Reads a whole stored file, refusing one larger than `max_bytes`.
    pub async fn read(&self, relative_path: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
        match &self.backend {
            Backend::Local { root } => {
                use tokio::io::AsyncReadExt;
                let file = tokio::fs::File::open(root.join(relative_path))
                    .await
                    .map_err(|_| ReadError::NotFound)?;
                let mut body = Vec::new();
                // Reading one byte past the limit tells a file at the limit
                // from a larger one without trusting its metadata.
                file.take(max_bytes.saturating_add(1))
                    .read_to_end(&mut body)
                    .await
                    .map_err(|_| ReadError::NotFound)?;
                if body.len() as u64 > max_bytes {
                    return Err(ReadError::TooLarge { limit: max_bytes });
                }
                Ok(body)
            }
            Backend::S3 { store, prefix } => {
                let result = get_object_within(store, prefix, relative_path, max_bytes).await?;
                Ok(result.bytes().await.map_err(read_error)?.to_vec())
            }
        }
    }

    /// A reader of a stored file, in pieces, refusing one whose stored size
    /// is over `max_bytes` at once (the reader's user still stops past the
    /// limit, whatever the metadata said).
    pub async fn open_reader(
        &self,
        relative_path: &str,
        max_bytes: u64,
    ) -> Result<vidgate_media::LocalBody, ReadError> {
        match &self.backend {
            Backend::Local { root } => {
                let file = tokio::fs::File::open(root.join(relative_path))
                    .await
                    .map_err(|_| ReadError::NotFound)?;
                let size = file.metadata().await.map_err(ReadError::Store)?.len();
                if size > max_bytes {
                    return Err(ReadError::TooLarge { limit: max_bytes });
                }
                Ok(Box::pin(file))
            }
            Backend::S3 { store, prefix } => {
                let result = get_object_within(store, prefix, relative_path, max_bytes).await?;
                Ok(Box::pin(tokio_util::io::StreamReader::new(
                    result.into_stream(),
                )))
            }
        }
    }

    /// Stores the file at `source` under `relative_path` unless a file is
    /// already there: for content-addressed paths, whose content is the same
    /// whenever the path is. On disk it is copied to a hidden name and
    /// renamed into place; to a bucket it is sent in parts, never read whole.
    pub async fn put_file_once(
        &self,
        source: &Path,
        relative_path: &str,
        content_type: &'static str,
    ) -> std::io::Result<()> {
        match &self.backend {
            Backend::Local { root } => {
                let final_path = root.join(relative_path);
                if tokio::fs::try_exists(&final_path).await? {
                    return Ok(());
                }
                let directory = final_path
                    .parent()
                    .expect("stored paths have a parent directory");
                tokio::fs::create_dir_all(directory).await?;
                let temporary_path = directory.join(format!(".{}.partial", random_token(12)));
                tokio::fs::copy(source, &temporary_path).await?;
                tokio::fs::rename(&temporary_path, &final_path).await
            }
            Backend::S3 { store, prefix } => {
                let location = Storage::object_path(prefix, relative_path);
                match store.head(&location).await {
                    Ok(_) => return Ok(()),
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(error) => return Err(std::io::Error::other(error)),
                }
                put_file(store, &location, source, content_type).await
            }
        }
    }

    /// The size of an object in the bucket; `/files/` asks it first to
    /// answer a Range request. (Local files are served from disk instead.)
    pub async fn object_size(&self, relative_path: &str) -> Result<u64, ReadError> {
        let Backend::S3 { store, prefix } = &self.backend else {
            return Err(ReadError::NotFound);
        };
        let meta = store
            .head(&Storage::object_path(prefix, relative_path))
            .await
            .map_err(read_error)?;
        Ok(meta.size)
    }

    /// A non-empty byte range of an object in the bucket, to stream.
    pub async fn object_range(
        &self,
        relative_path: &str,
        range: std::ops::Range<u64>,
    ) -> Result<GetResult, ReadError> {
        let Backend::S3 { store, prefix } = &self.backend else {
            return Err(ReadError::NotFound);
        };
        let options = GetOptions::default().with_range(Some(GetRange::Bounded(range)));
        store
            .get_opts(&Storage::object_path(prefix, relative_path), options)
            .await
            .map_err(read_error)
    }

    /// A presigned PUT URL for `relative_path`, valid for
    /// [`DIRECT_UPLOAD_VALIDITY`], binding `content_type` when the client
    /// declared one; `None` on local storage, which has no signer. The size
    /// cannot be bound: object_store refuses to sign `Content-Length`, so a
    /// file's size is checked when a request first uses it.
    pub async fn presign_put(
        &self,
        relative_path: &str,
        content_type: Option<&str>,
    ) -> std::io::Result<Option<Url>> {
        let Backend::S3 { store, prefix } = &self.backend else {
            return Ok(None);
        };
        let mut options = SignedUrlOptions::new();
        if let Some(content_type) = content_type {
            let value = content_type.parse().map_err(std::io::Error::other)?;
            options = options.with_signed_header(HeaderName::from_static("content-type"), value);
        }
        store
            .signed_url_opts(
                Method::PUT,
                &Storage::object_path(prefix, relative_path),
                DIRECT_UPLOAD_VALIDITY,
                &options,
            )
            .await
            .map(Some)
            .map_err(std::io::Error::other)
    }

    /// Writes a small probe object, reads it back and deletes it: the three
    /// things vidgate does with stored files, so that a missing bucket, a
    /// wrong endpoint or a missing permission stops the start instead of
    /// failing the first finished job. The probe's hidden name is never
    /// served under `/files/`.
    pub async fn probe(&self) -> Result<(), ProbeError> {
        let relative_path = format!(".probes/{}", random_token(16));
        let contents = format!("vidgate storage probe {relative_path}").into_bytes();
        match &self.backend {
            Backend::Local { root } => {
                let path = root.join(&relative_path);
                let directory = path.parent().expect("probe paths have a parent directory");
                tokio::fs::create_dir_all(directory)
                    .await
                    .map_err(ProbeError::Write)?;
                tokio::fs::write(&path, &contents)
                    .await
                    .map_err(ProbeError::Write)?;
                let read = tokio::fs::read(&path).await.map_err(ProbeError::Read)?;
                if read != contents {
                    return Err(ProbeError::Mismatch);
                }
                tokio::fs::remove_file(&path)
                    .await
                    .map_err(ProbeError::Delete)
            }
            Backend::S3 { store, prefix } => {
                let location = Storage::object_path(prefix, &relative_path);
                put_object(store, &location, contents.clone(), "text/plain")
                    .await
                    .map_err(ProbeError::Write)?;
                let read = async { store.get(&location).await?.bytes().await }
                    .await
                    .map_err(|error| ProbeError::Read(std::io::Error::other(error)))?;
                if read.as_ref() != contents.as_slice() {
                    return Err(ProbeError::Mismatch);
                }
                store
                    .delete(&location)
                    .await
                    .map_err(|error| ProbeError::Delete(std::io::Error::other(error)))
            }
        }
    }
}

async fn put_object(
    store: &AmazonS3,
    location: &ObjectPath,
    contents: Vec<u8>,
    content_type: &'static str,
) -> std::io::Result<()> {
    let mut attributes = Attributes::new();
    attributes.insert(Attribute::ContentType, content_type.into());
    let options = PutOptions {
        attributes,
        ..PutOptions::default()
    };
    store
        .put_opts(location, PutPayload::from(contents), options)
        .await
        .map(drop)
        .map_err(std::io::Error::other)
}

/// Sends a local file to the bucket as a multipart upload of 8 MiB parts,
/// so memory holds one part at a time (a single PUT would need the whole
/// file in memory).
async fn put_file(
    store: &AmazonS3,
    location: &ObjectPath,
    source: &Path,
    content_type: &'static str,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    const PART_BYTES: usize = 8 * 1024 * 1024;
    let mut attributes = Attributes::new();
    attributes.insert(Attribute::ContentType, content_type.into());
    let upload = store
        .put_multipart_opts(
            location,
            PutMultipartOptions {
                attributes,
                ..PutMultipartOptions::default()
            },
        )
        .await
        .map_err(std::io::Error::other)?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
    let mut file = tokio::fs::File::open(source).await?;
    let mut buffer = vec![0u8; 1024 * 1024];
    loop {
        let read = file.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        // At most two parts are in flight, so memory stays bounded.
        writer
            .wait_for_capacity(2)
            .await
            .map_err(std::io::Error::other)?;
        writer.write(&buffer[..read]);
    }
    writer
        .finish()
        .await
        .map(drop)
        .map_err(std::io::Error::other)
}

/// Starts reading an object, refusing one whose stored size is over
/// `max_bytes` before any of its body is read.
async fn get_object_within(
    store: &AmazonS3,
    prefix: &str,
    relative_path: &str,
    max_bytes: u64,
) -> Result<object_store::GetResult, ReadError> {
    let result = store
        .get(&Storage::object_path(prefix, relative_path))
        .await
        .map_err(read_error)?;
    if result.meta.size > max_bytes {
        return Err(ReadError::TooLarge { limit: max_bytes });
    }
    Ok(result)
}

fn read_error(error: object_store::Error) -> ReadError {
    match error {
        object_store::Error::NotFound { .. } => ReadError::NotFound,
        other => ReadError::Store(std::io::Error::other(other)),
    }
}

/// The media types vidgate stores, by extension and by name.
const MEDIA_TYPES: [(&str, &str); 7] = [
    ("jpg", "image/jpeg"),
    ("png", "image/png"),
    ("webp", "image/webp"),
    ("mp4", "video/mp4"),
    ("mov", "video/quicktime"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/wav"),
];

/// What a file of no known media type is served as: an opaque download.
pub const UNKNOWN_CONTENT_TYPE: &str = "application/octet-stream";

/// The type a stored file is served with, from its extension, which we
/// chose after probing (or from a direct upload's declared type, checked
/// when the file is first used); [`UNKNOWN_CONTENT_TYPE`] without one.
pub fn content_type_of(relative_path: &str) -> &'static str {
    let extension = relative_path
        .rsplit_once('/')
        .map_or(relative_path, |(_, name)| name)
        .rsplit_once('.')
        .map(|(_, extension)| extension);
    MEDIA_TYPES
        .iter()
        .find(|(known, _)| Some(*known) == extension)
        .map_or(UNKNOWN_CONTENT_TYPE, |(_, name)| name)
}

/// The media type of a probed format (its catalog name is our extension).
pub fn media_type_of_extension(extension: &str) -> &'static str {
    content_type_of(&format!("file.{extension}"))
}

/// `name` as one of the media types vidgate stores, if it is one.
pub fn media_type_named(name: &str) -> Option<&'static str> {
    MEDIA_TYPES
        .iter()
        .find(|(_, known)| *known == name)
        .map(|(_, known)| *known)
}

/// The extension vidgate gives files of a media type from [`MEDIA_TYPES`].
pub fn extension_of(media_type: &str) -> &'static str {
    MEDIA_TYPES
        .iter()
        .find(|(_, known)| *known == media_type)
        .map_or("bin", |(extension, _)| extension)
}

/// Checks a path taken from a `/files/` URL: stored names are plain ASCII
/// that needs no escaping, so anything escaped, hidden (a partial write),
/// empty or climbing out is not one of ours.
pub fn is_stored_name(relative_path: &str) -> bool {
    !relative_path.is_empty()
        && relative_path.split('/').all(|segment| {
            !segment.is_empty()
                && !segment.starts_with('.')
                && segment
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-_.".contains(&byte))
        })
}
