//! Fetching a request's media from the URLs a client gave, safely.
//!
//! The server fetches URLs that anyone may send, so every fetch:
//!
//! - accepts only `http` and `https`;
//! - checks the address it connects to after DNS resolution, with a resolver
//!   that returns only the addresses it checked, so the connection is pinned
//!   to them and a second lookup (DNS rebinding) cannot swap them; a host
//!   written as an IP literal never reaches a resolver and is checked here;
//! - follows redirects itself, up to a limit, checking each hop the same way;
//! - ignores proxy settings from the environment, which would bypass the
//!   address check;
//! - stops reading past a byte limit and gives up after a total time;
//! - streams the body to a scratch file, hashing it on the way, so memory
//!   does not grow with the file.
//!
//! `allow_private_network` lifts the address check for local development and
//! tests. A URL that the server can answer itself (such as its own files)
//! can be read without HTTP through a [`LocalSource`].

use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::{StatusCode, header};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use url::{Host, Url};

use crate::address;

/// How fetches behave; the defaults suit a public deployment.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    /// Skips the address check so that media on loopback or private networks
    /// can be used (local development and tests). Off in production.
    pub allow_private_network: bool,
    /// Addresses that pass the check although they are private, such as an
    /// operator's internal media server.
    pub trusted_addresses: Vec<IpAddr>,
    /// Redirects followed before giving up.
    pub max_redirects: usize,
    /// The whole fetch, redirects and body included.
    pub total_timeout: Duration,
    pub connect_timeout: Duration,
    /// Where downloads are written while they are checked; the system's
    /// temporary directory when `None`.
    pub scratch_directory: Option<PathBuf>,
}

impl FetchSettings {
    fn scratch_dir(&self) -> PathBuf {
        self.scratch_directory
            .clone()
            .unwrap_or_else(std::env::temp_dir)
    }
}

impl Default for FetchSettings {
    fn default() -> FetchSettings {
        FetchSettings {
            allow_private_network: false,
            trusted_addresses: Vec::new(),
            max_redirects: 5,
            total_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            scratch_directory: None,
        }
    }
}

/// Why a URL could not be fetched. The messages are written to be shown to
/// the client after the name of the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("must be an http or https URL")]
    UnsupportedScheme,
    #[error("is not a valid URL: {0}")]
    InvalidUrl(String),
    /// The address and the reason are kept for the log; the message names
    /// neither, because a public endpoint must not tell a stranger what a
    /// host name resolves to inside the operator's network.
    #[error("is not a public address, which the service does not fetch from")]
    ForbiddenAddress {
        address: IpAddr,
        reason: &'static str,
    },
    /// Said in the same words as `ForbiddenAddress`: were the two told
    /// apart, the public quote would tell a stranger which names exist
    /// inside the operator's network (those that resolve to a private
    /// address). The host and the resolver's error are kept for the log.
    #[error("is not a public address, which the service does not fetch from")]
    Unresolvable(String),
    #[error("redirected more than {0} times")]
    TooManyRedirects(usize),
    #[error("redirected without a valid Location")]
    BadRedirect,
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("took longer than {0} s to download")]
    Timeout(u64),
    #[error("could not be downloaded: {0}")]
    Network(String),
    /// The server could not write its scratch copy (a full or unwritable
    /// disk): the server's failure, not the URL's.
    #[error("could not be kept for checking; try again later")]
    Scratch,
}

/// Reads URLs the server can answer itself from its own storage, without
/// HTTP and without the address check (the bytes never leave the server's
/// storage). The server plugs its file store in here for URLs under
/// `{api_base}/files/`; the open is asynchronous because that store may be
/// an object store rather than a local disk.
pub trait LocalSource: Send + Sync {
    /// A reader of the bytes behind `url` (the fetcher stops it past
    /// `max_bytes`; a source that knows the size may refuse at once), or
    /// `None` when the URL is not one of ours and must be fetched over the
    /// network.
    fn open<'a>(&'a self, url: &'a Url, max_bytes: u64) -> Option<LocalOpen<'a>>;
}

/// The bytes of a file a [`LocalSource`] serves, read in pieces.
pub type LocalBody = Pin<Box<dyn AsyncRead + Send>>;

/// An open from a [`LocalSource`]; a missing file is `FetchError::Status(404)`.
pub type LocalOpen<'a> = Pin<Box<dyn Future<Output = Result<LocalBody, FetchError>> + Send + 'a>>;

/// A downloaded file in the scratch directory, with its size and SHA-256,
/// removed from disk when dropped. Media is streamed here rather than held
/// in memory, so a download's memory does not grow with the file.
#[derive(Debug)]
pub struct FetchedFile {
    path: tempfile::TempPath,
    size_bytes: u64,
    sha256: [u8; 32],
}

impl FetchedFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The SHA-256 of the content, in lower-case hex: what binds a job to
    /// exactly these bytes.
    pub fn sha256_hex(&self) -> String {
        hex(&self.sha256)
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// A scratch file being written: hashes and counts what it is given and
/// refuses more than its limit.
struct ScratchFile {
    file: tokio::fs::File,
    path: tempfile::TempPath,
    hasher: Sha256,
    size_bytes: u64,
    max_bytes: u64,
}

impl ScratchFile {
    async fn create(directory: &Path, max_bytes: u64) -> Result<ScratchFile, FetchError> {
        let directory = directory.to_owned();
        let (file, path) = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&directory)?;
            tempfile::Builder::new()
                .prefix(".media-")
                .tempfile_in(&directory)
                .map(tempfile::NamedTempFile::into_parts)
        })
        .await
        .map_err(|_| FetchError::Scratch)?
        .map_err(|_| FetchError::Scratch)?;
        Ok(ScratchFile {
            file: tokio::fs::File::from_std(file),
            path,
            hasher: Sha256::new(),
            size_bytes: 0,
            max_bytes,
        })
    }

    async fn write(&mut self, chunk: &[u8]) -> Result<(), FetchError> {
        self.size_bytes += chunk.len() as u64;
        if self.size_bytes > self.max_bytes {
            return Err(FetchError::TooLarge {
                limit: self.max_bytes,
            });
        }
        self.hasher.update(chunk);
        self.file
            .write_all(chunk)
            .await
            .map_err(|_| FetchError::Scratch)
    }

    /// Copies a local source's body in pieces of at most 64 KiB.
    async fn copy_from(&mut self, mut body: LocalBody) -> Result<(), FetchError> {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = body
                .read(&mut buffer)
                .await
                .map_err(|error| FetchError::Network(error.to_string()))?;
            if read == 0 {
                return Ok(());
            }
            self.write(&buffer[..read]).await?;
        }
    }

    async fn finish(mut self) -> Result<FetchedFile, FetchError> {
        self.file.flush().await.map_err(|_| FetchError::Scratch)?;
        Ok(FetchedFile {
            path: self.path,
            size_bytes: self.size_bytes,
            sha256: self.hasher.finalize().into(),
        })
    }
}

/// Fetches media safely; cheap to clone, share one per process.
#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    settings: Arc<FetchSettings>,
    local_source: Option<Arc<dyn LocalSource>>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Fetcher")
            .field("settings", &self.settings)
            .field("local_source", &self.local_source.is_some())
            .finish()
    }
}

impl Fetcher {
    pub fn new(settings: FetchSettings) -> Result<Fetcher, FetchError> {
        let settings = Arc::new(settings);
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(CheckingResolver {
                settings: settings.clone(),
            }))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.total_timeout)
            .user_agent(concat!("vidgate-media/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| FetchError::Network(error.to_string()))?;
        Ok(Fetcher {
            client,
            settings,
            local_source: None,
        })
    }

    /// Reads URLs that `source` recognises from local storage instead.
    pub fn with_local_source(mut self, source: Arc<dyn LocalSource>) -> Fetcher {
        self.local_source = Some(source);
        self
    }

    pub fn settings(&self) -> &FetchSettings {
        &self.settings
    }

    /// Downloads `url` into memory, refusing more than `max_bytes` bytes.
    /// For small files (images, audio a job renders with); probing uses
    /// [`Fetcher::fetch_to_file`].
    pub async fn fetch(&self, url: &str, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        let file = self.fetch_to_file(url, max_bytes).await?;
        tokio::fs::read(file.path())
            .await
            .map_err(|_| FetchError::Scratch)
    }

    /// Downloads `url` (normalised first, see [`crate::normalize_url`]) to a
    /// scratch file, refusing more than `max_bytes` bytes; memory stays at
    /// a few buffers whatever the size.
    pub async fn fetch_to_file(
        &self,
        url: &str,
        max_bytes: u64,
    ) -> Result<FetchedFile, FetchError> {
        let url = crate::normalize::parse_normalized(url)?;
        let mut sink = ScratchFile::create(&self.settings.scratch_dir(), max_bytes).await?;
        let seconds = self.settings.total_timeout.as_secs();
        tokio::time::timeout(self.settings.total_timeout, async {
            let opened = match &self.local_source {
                Some(source) => match source.open(&url, max_bytes) {
                    Some(open) => Some(open.await?),
                    None => None,
                },
                None => None,
            };
            match opened {
                Some(body) => sink.copy_from(body).await,
                None => self.fetch_following_redirects(url, &mut sink).await,
            }
        })
        .await
        .unwrap_or(Err(FetchError::Timeout(seconds)))?;
        sink.finish().await
    }

    async fn fetch_following_redirects(
        &self,
        mut url: Url,
        sink: &mut ScratchFile,
    ) -> Result<(), FetchError> {
        let mut redirects = 0;
        loop {
            self.check_url(&url)?;
            let response = self
                .client
                .get(url.clone())
                .send()
                .await
                .map_err(|error| describe_request_error(&error, &self.settings))?;
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                redirects += 1;
                if redirects > self.settings.max_redirects {
                    return Err(FetchError::TooManyRedirects(self.settings.max_redirects));
                }
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|value| value.to_str().ok())
                    .ok_or(FetchError::BadRedirect)?;
                url = url.join(location).map_err(|_| FetchError::BadRedirect)?;
                continue;
            }
            if !status.is_success() {
                return Err(FetchError::Status(status.as_u16()));
            }
            return read_body(response, sink, &self.settings).await;
        }
    }

    /// The checks that need no network: the scheme, and an IP-literal host
    /// (which reqwest connects to without asking the resolver).
    pub fn check_url(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::UnsupportedScheme);
        }
        let literal = match url.host() {
            Some(Host::Ipv4(address)) => Some(IpAddr::V4(address)),
            Some(Host::Ipv6(address)) => Some(IpAddr::V6(address)),
            Some(Host::Domain(_)) => None,
            None => return Err(FetchError::InvalidUrl("it has no host".to_owned())),
        };
        match literal {
            Some(address) => check_address(address, &self.settings),
            None => Ok(()),
        }
    }
}

fn check_address(address: IpAddr, settings: &FetchSettings) -> Result<(), FetchError> {
    if settings.allow_private_network || settings.trusted_addresses.contains(&address) {
        return Ok(());
    }
    match address::refusal_reason(address) {
        Some(reason) => Err(FetchError::ForbiddenAddress { address, reason }),
        None => Ok(()),
    }
}

async fn read_body(
    mut response: reqwest::Response,
    sink: &mut ScratchFile,
    settings: &FetchSettings,
) -> Result<(), FetchError> {
    if response
        .content_length()
        .is_some_and(|length| length > sink.max_bytes)
    {
        return Err(FetchError::TooLarge {
            limit: sink.max_bytes,
        });
    }
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| describe_request_error(&error, settings))?
    {
        sink.write(&chunk).await?;
    }
    Ok(())
}

/// Turns a reqwest error into a `FetchError`, recovering the resolver's own
/// refusal from the error's source chain.
fn describe_request_error(error: &reqwest::Error, settings: &FetchSettings) -> FetchError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(refusal) = current.downcast_ref::<ResolverRefusal>() {
            return refusal.0.clone();
        }
        source = current.source();
    }
    if error.is_timeout() {
        return FetchError::Timeout(settings.total_timeout.as_secs());
    }
    // The innermost cause says most ("connection refused", "certificate
    // expired"); reqwest's own message only names the URL.
    let mut innermost: &(dyn StdError + 'static) = error;
    while let Some(next) = innermost.source() {
        innermost = next;
    }
    FetchError::Network(innermost.to_string())
}

/// The resolver's refusal, carried through reqwest's error chain.
#[derive(Debug)]
struct ResolverRefusal(FetchError);

impl std::fmt::Display for ResolverRefusal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(formatter)
    }
}

impl StdError for ResolverRefusal {}

/// Resolves host names with the system resolver and keeps only addresses
/// that pass the check. reqwest connects to exactly the addresses returned,
/// so what was checked is what is used.
struct CheckingResolver {
    settings: Arc<FetchSettings>,
}

impl Resolve for CheckingResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let settings = self.settings.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|error| {
                    Box::new(ResolverRefusal(FetchError::Unresolvable(format!(
                        "{host}: {error}"
                    )))) as Box<dyn StdError + Send + Sync>
                })?
                .collect();
            let mut first_refusal = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|socket| match check_address(socket.ip(), &settings) {
                    Ok(()) => true,
                    Err(refusal) => {
                        first_refusal.get_or_insert(refusal);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let refusal = first_refusal
                    .unwrap_or_else(|| FetchError::Unresolvable(format!("{host}: no addresses")));
                return Err(Box::new(ResolverRefusal(refusal)) as Box<dyn StdError + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetcher(allow_private_network: bool) -> Fetcher {
        Fetcher::new(FetchSettings {
            allow_private_network,
            ..FetchSettings::default()
        })
        .unwrap()
    }

    fn check(fetcher: &Fetcher, url: &str) -> Result<(), FetchError> {
        fetcher.check_url(&Url::parse(url).unwrap())
    }

    #[test]
    fn refuses_other_schemes() {
        let fetcher = fetcher(true);
        for url in [
            "file:///etc/passwd",
            "ftp://example.com/a.mp4",
            "gopher://example.com/",
            "data:image/png;base64,AAAA",
        ] {
            assert_eq!(
                check(&fetcher, url),
                Err(FetchError::UnsupportedScheme),
                "{url}"
            );
        }
    }

    #[test]
    fn refuses_private_ip_literals_unless_allowed() {
        let strict = fetcher(false);
        for url in [
            "http://127.0.0.1:8080/a.png",
            "http://10.0.0.1/a.png",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/a.png",
            "http://[::ffff:192.168.0.1]/a.png",
            "http://0x7f000001/a.png",
            "http://2130706433/a.png",
        ] {
            assert!(
                matches!(
                    check(&strict, url),
                    Err(FetchError::ForbiddenAddress { .. })
                ),
                "{url}"
            );
        }
        assert_eq!(check(&strict, "https://93.184.215.14/a.png"), Ok(()));
        assert_eq!(check(&fetcher(true), "http://127.0.0.1/a.png"), Ok(()));
    }

    #[test]
    fn trusted_addresses_pass_the_check() {
        let fetcher = Fetcher::new(FetchSettings {
            trusted_addresses: vec!["10.1.2.3".parse().unwrap()],
            ..FetchSettings::default()
        })
        .unwrap();
        assert_eq!(check(&fetcher, "http://10.1.2.3/a.png"), Ok(()));
        assert!(check(&fetcher, "http://10.1.2.4/a.png").is_err());
    }
}
