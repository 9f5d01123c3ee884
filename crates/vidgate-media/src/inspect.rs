//! The inspector ties fetching, probing, caching and the rules together:
//! given a validated request, it fetches and probes the media the scope
//! covers, checks the catalog's limits and returns the facts pricing needs.
//!
//! Fetches are capped per process ([`FetchLimit`]): a request that finds
//! every slot taken waits briefly, then is told to come back
//! ([`InspectError::Busy`]), so the disk, bandwidth and probing work media
//! costs are bounded by configuration, not by how many strangers call a
//! public endpoint at once. Every fetch is made for a [`Requester`]: one
//! client address or one account holds only a few slots at once, and some
//! slots are kept for accounts, so anonymous quotes naming slow servers
//! cannot make a paying customer's submit wait. A request refused because
//! its own requester holds all of its slots is told so apart from one
//! refused because the process is full
//! ([`InspectError::RequesterAtLimit`]): the first is a limit on one
//! client, which the API answers 429, the second the node unable to serve,
//! which it answers 503.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use vidgate_core::{Endpoint, InvalidRequest, MediaFacts, MediaKind, ValidatedInput};

use crate::cache::ProbeCache;
use crate::fetch::{FetchError, FetchedFile, Fetcher};
use crate::probe::{MediaInfo, ProbeError, probe_file};
use crate::rules::{MediaField, Scope, check_field, media_fields};

/// Why one URL could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// Every fetch slot of the process stayed taken for the whole wait.
    #[error("could not be fetched now: the service is busy")]
    Busy,
    /// The requester's own slots stayed taken for the whole wait: it was
    /// already running as many fetches as one client or account may.
    #[error("could not be fetched now: too many fetches of this client at once")]
    RequesterAtLimit { limit: usize },
}

/// Why a request's media could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    /// A URL cannot be fetched, is not a supported file, or breaks a limit:
    /// the client's to fix, naming the field.
    #[error("{}", .0.message)]
    Invalid(InvalidRequest),
    /// This process is already fetching as much media as it may; the same
    /// request may succeed after `retry_after`.
    #[error("media fetching is at capacity")]
    Busy { retry_after: Duration },
    /// The requester (one client network, or one account) is already
    /// running `limit` fetches, the most it may at once; the same request
    /// may succeed after `retry_after`, once one of them ends.
    #[error("this client runs as many media fetches as it may at once")]
    RequesterAtLimit { limit: usize, retry_after: Duration },
}

impl From<InvalidRequest> for InspectError {
    fn from(error: InvalidRequest) -> InspectError {
        InspectError::Invalid(error)
    }
}

/// URLs probed in the last few minutes are not fetched again.
pub const DEFAULT_CACHE_CAPACITY: usize = 512;
pub const DEFAULT_CACHE_TIME_TO_LIVE: Duration = Duration::from_secs(10 * 60);

/// How many media fetches (download and probe) one process runs at once
/// (half of them, rounded down, kept for accounts: anonymous requests never
/// take those), how many one client address or one account may run at
/// once, and how long a fetch waits for a free slot before the request is
/// refused as busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimit {
    pub max_concurrent: usize,
    pub wait: Duration,
    /// Fetches one client address runs at once for anonymous requests.
    pub per_client: usize,
    /// Fetches one account runs at once.
    pub per_account: usize,
}

impl Default for FetchLimit {
    fn default() -> FetchLimit {
        FetchLimit {
            max_concurrent: 16,
            wait: Duration::from_secs(2),
            per_client: 2,
            per_account: 4,
        }
    }
}

impl FetchLimit {
    /// The slots anyone may take, and those kept for accounts: half, so
    /// that a flood of anonymous quotes leaves submits as many slots as it
    /// takes. A single slot is anyone's.
    fn split(&self) -> (usize, usize) {
        let total = self.max_concurrent.max(1);
        let reserved = total / 2;
        (total - reserved, reserved)
    }
}

/// Who a fetch is made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requester {
    /// A request without credentials (a quote), by its client: an address,
    /// or an IPv6 network, as the server groups its clients for fetches.
    Anonymous { client: String },
    /// A request of an authenticated account (a submit).
    Account { id: String },
}

impl Requester {
    fn key(&self) -> String {
        match self {
            Requester::Anonymous { client } => format!("client:{client}"),
            Requester::Account { id } => format!("account:{id}"),
        }
    }
}

/// The fetch slots of one process: those anyone may take, those only
/// accounts may take, and how many each requester holds.
struct FetchSlots {
    shared: Arc<Semaphore>,
    reserved: Arc<Semaphore>,
    per_client: usize,
    per_account: usize,
    /// Each requester's own slots while it holds one; an entry is removed
    /// when its last slot is given back.
    by_requester: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A fetch slot held: the process's and the requester's, given back when
/// dropped.
struct FetchSlot<'slots> {
    _permit: OwnedSemaphorePermit,
    _requester: RequesterHold<'slots>,
}

/// A requester's claim on its own slots, from the wait for one until the
/// fetch ends; dropping it (a fetch done, or a wait given up) forgets the
/// requester when nobody else of it holds or waits for a slot, so the map
/// is only as large as the requesters fetching now.
struct RequesterHold<'slots> {
    slots: &'slots FetchSlots,
    key: String,
    semaphore: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for RequesterHold<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        drop(self.semaphore.take());
        let mut by_requester = self
            .slots
            .by_requester
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if by_requester
            .get(&self.key)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            by_requester.remove(&self.key);
        }
    }
}

impl FetchSlots {
    fn new(limit: FetchLimit) -> FetchSlots {
        let (shared, reserved) = limit.split();
        FetchSlots {
            shared: Arc::new(Semaphore::new(shared)),
            reserved: Arc::new(Semaphore::new(reserved)),
            per_client: limit.per_client.max(1),
            per_account: limit.per_account.max(1),
            by_requester: Mutex::new(HashMap::new()),
        }
    }

    fn available(&self) -> usize {
        self.shared.available_permits() + self.reserved.available_permits()
    }

    /// A slot for `requester`: one of its own first, then one of the
    /// process's (for an account either kind, the shared first), waiting
    /// for both until `deadline`. Which of the two is still missing then
    /// says whose limit refused it.
    async fn acquire(
        &self,
        requester: &Requester,
        deadline: Instant,
    ) -> Result<FetchSlot<'_>, MediaError> {
        let key = requester.key();
        let cap = match requester {
            Requester::Anonymous { .. } => self.per_client,
            Requester::Account { .. } => self.per_account,
        };
        let semaphore = {
            let mut by_requester = self
                .by_requester
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            by_requester
                .entry(key.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(cap)))
                .clone()
        };
        let mut hold = RequesterHold {
            slots: self,
            key,
            semaphore: Some(semaphore.clone()),
            permit: None,
        };
        // The semaphores are never closed, so an acquire fails only by
        // running out of time.
        hold.permit = Some(
            tokio::time::timeout_at(deadline, semaphore.acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
                .ok_or(MediaError::RequesterAtLimit { limit: cap })?,
        );
        let process_slot = async {
            match requester {
                Requester::Anonymous { .. } => self.shared.clone().acquire_owned().await,
                Requester::Account { .. } => tokio::select! {
                    biased;
                    permit = self.shared.clone().acquire_owned() => permit,
                    permit = self.reserved.clone().acquire_owned() => permit,
                },
            }
        };
        let permit = tokio::time::timeout_at(deadline, process_slot)
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or(MediaError::Busy)?;
        Ok(FetchSlot {
            _permit: permit,
            _requester: hold,
        })
    }
}

/// What a busy refusal tells the client to wait: about as long as a slow
/// fetch holds its slot for.
pub const BUSY_RETRY_AFTER: Duration = Duration::from_secs(5);

/// One item of a request's media as submit fetched it: the bytes (in a
/// scratch file, with their SHA-256) that were checked and priced, so that
/// the server can keep exactly them for the job.
#[derive(Debug)]
pub struct InspectedMedia {
    /// The request parameter, e.g. `reference_video_urls`.
    pub parameter: String,
    /// The item's place in a list parameter; 0 for a single URL.
    pub index: usize,
    /// The URL in its normal form.
    pub url: String,
    pub info: MediaInfo,
    pub file: FetchedFile,
}

/// Everything submit learnt about a request's media.
#[derive(Debug, Default)]
pub struct Inspection {
    pub facts: MediaFacts,
    pub media: Vec<InspectedMedia>,
}

pub struct MediaInspector {
    fetcher: Fetcher,
    cache: ProbeCache,
    fetch_slots: FetchSlots,
    fetch_limit: FetchLimit,
}

impl MediaInspector {
    pub fn new(fetcher: Fetcher, cache: ProbeCache) -> MediaInspector {
        MediaInspector::with_fetch_limit(fetcher, cache, FetchLimit::default())
    }

    /// An inspector that runs at most `limit.max_concurrent` fetches at once.
    pub fn with_fetch_limit(
        fetcher: Fetcher,
        cache: ProbeCache,
        limit: FetchLimit,
    ) -> MediaInspector {
        MediaInspector {
            fetcher,
            cache,
            fetch_slots: FetchSlots::new(limit),
            fetch_limit: limit,
        }
    }

    /// An inspector with the default cache.
    pub fn with_default_cache(fetcher: Fetcher) -> MediaInspector {
        MediaInspector::new(
            fetcher,
            ProbeCache::new(DEFAULT_CACHE_CAPACITY, DEFAULT_CACHE_TIME_TO_LIVE),
        )
    }

    pub fn fetcher(&self) -> &Fetcher {
        &self.fetcher
    }

    pub fn cache(&self) -> &ProbeCache {
        &self.cache
    }

    pub fn fetch_limit(&self) -> FetchLimit {
        self.fetch_limit
    }

    /// Fetch slots free right now.
    pub fn available_fetch_slots(&self) -> usize {
        self.fetch_slots.available()
    }

    /// Probes the media at `url`, downloading at most `max_bytes` unless a
    /// recent probe of the same URL (in normal form) is cached.
    pub async fn probe_url(
        &self,
        requester: &Requester,
        url: &str,
        max_bytes: u64,
    ) -> Result<MediaInfo, MediaError> {
        let key = crate::normalize_url(url).unwrap_or_else(|| url.to_owned());
        if let Some(info) = self.cache.get(&key) {
            return Ok(info);
        }
        let (info, _file) = self.fetch_and_probe(requester, &key, max_bytes).await?;
        Ok(info)
    }

    /// Downloads `url` to a scratch file within a fetch slot of
    /// `requester`'s and probes it there, on a blocking thread, never
    /// holding the file in memory.
    pub async fn fetch_and_probe(
        &self,
        requester: &Requester,
        url: &str,
        max_bytes: u64,
    ) -> Result<(MediaInfo, FetchedFile), MediaError> {
        let _slot = self
            .fetch_slots
            .acquire(requester, Instant::now() + self.fetch_limit.wait)
            .await?;
        let file = self.fetcher.fetch_to_file(url, max_bytes).await?;
        let path = file.path().to_owned();
        let info = tokio::task::spawn_blocking(move || probe_file(&path))
            .await
            .map_err(|_| ProbeError::Unreadable {
                format: "media",
                reason: "probing it failed".to_owned(),
            })??;
        let key = crate::normalize_url(url).unwrap_or_else(|| url.to_owned());
        self.cache.insert(&key, info.clone());
        Ok((info, file))
    }

    /// Fetches and probes the request's media that `scope` covers (using
    /// the probe cache), checks every limit of the catalog, and returns the
    /// facts pricing needs. Any refusal names the field and, in a list, the
    /// item. For quotes: nothing is kept.
    pub async fn inspect(
        &self,
        requester: &Requester,
        endpoint: Endpoint<'_>,
        input: &ValidatedInput,
        scope: Scope,
    ) -> Result<MediaFacts, InspectError> {
        Ok(self
            .run(requester, endpoint, input, scope, false)
            .await?
            .facts)
    }

    /// Fetches every media item of the request (never from the cache: the
    /// bytes are what is wanted), probes and checks them like
    /// [`MediaInspector::inspect`], and returns them with the facts, so that
    /// the job can be bound to exactly the bytes that were checked and
    /// priced.
    pub async fn inspect_and_keep(
        &self,
        requester: &Requester,
        endpoint: Endpoint<'_>,
        input: &ValidatedInput,
    ) -> Result<Inspection, InspectError> {
        self.run(requester, endpoint, input, Scope::Everything, true)
            .await
    }

    async fn run(
        &self,
        requester: &Requester,
        endpoint: Endpoint<'_>,
        input: &ValidatedInput,
        scope: Scope,
        keep: bool,
    ) -> Result<Inspection, InspectError> {
        let output_seconds = input.duration_s();
        let mut inspection = Inspection::default();
        for field in media_fields(endpoint, input, scope) {
            let mut items = Vec::with_capacity(field.urls.len());
            let mut bytes_before = 0;
            for (index, url) in field.urls.iter().enumerate() {
                let limit = field.download_limit(bytes_before);
                let fetched = if keep {
                    self.fetch_and_probe(requester, url, limit)
                        .await
                        .map(|(info, file)| (info, Some(file)))
                } else {
                    self.probe_url(requester, url, limit)
                        .await
                        .map(|info| (info, None))
                };
                let (info, file) =
                    fetched.map_err(|error| describe_failure(&field, index, error))?;
                bytes_before += info.size_bytes;
                if let Some(file) = file {
                    inspection.media.push(InspectedMedia {
                        parameter: field.parameter.to_owned(),
                        index,
                        url: url.clone(),
                        info: info.clone(),
                        file,
                    });
                }
                items.push(info);
            }
            check_field(&field, &items, output_seconds)?;
            if field.is_list && field.limits.kind == MediaKind::Video {
                inspection.facts.reference_video_durations_ms =
                    items.iter().filter_map(MediaInfo::duration_ms).collect();
            }
        }
        Ok(inspection)
    }
}

fn describe_failure(field: &MediaField<'_>, index: usize, error: MediaError) -> InspectError {
    match error {
        MediaError::Busy => {
            return InspectError::Busy {
                retry_after: BUSY_RETRY_AFTER,
            };
        }
        MediaError::RequesterAtLimit { limit } => {
            return InspectError::RequesterAtLimit {
                limit,
                retry_after: BUSY_RETRY_AFTER,
            };
        }
        MediaError::Fetch(_) | MediaError::Probe(_) => {}
    }
    let label = field.item_label(index);
    let message = match (&error, field.limits.max_total_bytes) {
        // A download cut short by what was left of a total is a total that
        // is exceeded, not a file that is too large on its own.
        (MediaError::Fetch(FetchError::TooLarge { limit }), Some(total))
            if field.limits.max_bytes_each.is_none_or(|each| *limit < each) =>
        {
            format!(
                "{} add up to more than {total} bytes; reference {}s may hold at most {total} bytes in total",
                field.parameter,
                match field.limits.kind {
                    MediaKind::Image => "image",
                    MediaKind::Video => "video",
                    MediaKind::Audio => "audio file",
                }
            )
        }
        _ => format!("{label} {error}"),
    };
    InspectError::Invalid(InvalidRequest::new(Some(field.parameter), message))
}
