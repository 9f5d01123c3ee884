//! The inspector ties fetching, probing, caching and the rules together:
//! given a validated request, it fetches and probes the media the scope
//! covers, checks the catalog's limits and returns the facts pricing needs.

use std::time::Duration;

use vidgate_core::{Endpoint, InvalidRequest, MediaFacts, MediaKind, ValidatedInput};

use crate::cache::ProbeCache;
use crate::fetch::{FetchError, Fetcher};
use crate::probe::{MediaInfo, ProbeError, probe};
use crate::rules::{MediaField, Scope, check_field, media_fields};

/// Why one URL could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
}

/// URLs probed in the last few minutes are not fetched again.
pub const DEFAULT_CACHE_CAPACITY: usize = 512;
pub const DEFAULT_CACHE_TIME_TO_LIVE: Duration = Duration::from_secs(10 * 60);

pub struct MediaInspector {
    fetcher: Fetcher,
    cache: ProbeCache,
}

impl MediaInspector {
    pub fn new(fetcher: Fetcher, cache: ProbeCache) -> MediaInspector {
        MediaInspector { fetcher, cache }
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

    /// Probes the media at `url`, downloading at most `max_bytes` unless a
    /// recent probe of the same URL is cached.
    pub async fn probe_url(&self, url: &str, max_bytes: u64) -> Result<MediaInfo, MediaError> {
        if let Some(info) = self.cache.get(url) {
            return Ok(info);
        }
        let bytes = self.fetcher.fetch(url, max_bytes).await?;
        // Parsing a 100 MB container is CPU work that must not stall the
        // async workers.
        let info = tokio::task::spawn_blocking(move || probe(&bytes))
            .await
            .map_err(|_| ProbeError::Unreadable {
                format: "media",
                reason: "probing it failed".to_owned(),
            })??;
        self.cache.insert(url, info.clone());
        Ok(info)
    }

    /// Fetches and probes the request's media that `scope` covers, checks
    /// every limit of the catalog, and returns the facts pricing needs. Any
    /// refusal names the field and, in a list, the item.
    pub async fn inspect(
        &self,
        endpoint: Endpoint<'_>,
        input: &ValidatedInput,
        scope: Scope,
    ) -> Result<MediaFacts, InvalidRequest> {
        let output_seconds = input.duration_s();
        let mut facts = MediaFacts::default();
        for field in media_fields(endpoint, input, scope) {
            let mut items = Vec::with_capacity(field.urls.len());
            let mut bytes_before = 0;
            for (index, url) in field.urls.iter().enumerate() {
                let limit = field.download_limit(bytes_before);
                let info = self
                    .probe_url(url, limit)
                    .await
                    .map_err(|error| describe_failure(&field, index, error))?;
                bytes_before += info.size_bytes;
                items.push(info);
            }
            check_field(&field, &items, output_seconds)?;
            if field.is_list && field.limits.kind == MediaKind::Video {
                facts.reference_video_durations_ms =
                    items.iter().filter_map(MediaInfo::duration_ms).collect();
            }
        }
        Ok(facts)
    }
}

fn describe_failure(field: &MediaField<'_>, index: usize, error: MediaError) -> InvalidRequest {
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
    InvalidRequest::new(Some(field.parameter), message)
}
