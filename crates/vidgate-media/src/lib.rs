//! Reference media for vidgate: fetching the URLs in a request without
//! letting them reach private networks ([`fetch`]), reading what the bytes
//! are ([`probe`]), checking them against the catalog's limits ([`rules`]),
//! and the [`MediaInspector`] that does all three with a [`ProbeCache`].
//!
//! No HTTP server code lives here; the server calls
//! [`MediaInspector::inspect`] on submit and quote, and the worker fetches
//! the images and audio it renders with with the same [`Fetcher`].

pub mod address;
pub mod audio;
pub mod cache;
pub mod fetch;
pub mod inspect;
pub mod normalize;
pub mod probe;
pub mod rules;

pub use cache::ProbeCache;
pub use fetch::{
    FetchError, FetchSettings, FetchedFile, Fetcher, LocalBody, LocalOpen, LocalSource, hex,
};
pub use inspect::{
    FetchLimit, InspectError, InspectedMedia, Inspection, MediaError, MediaInspector, Requester,
};
pub use normalize::normalize_url;
pub use probe::{
    FrameRate, MediaDetails, MediaFormat, MediaInfo, ProbeError, probe, probe_file,
    video_file_has_audio, video_has_audio,
};
pub use rules::{MediaField, Scope, check_field, media_fields};
