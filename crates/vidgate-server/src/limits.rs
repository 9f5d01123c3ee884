//! The limits of the HTTP listener and of the public endpoints, as plain
//! settings: the options carry them, the application state hands them to
//! handlers and `http/` holds requests to them. They sit below all three
//! so that none of them imports another for these types.

use std::time::Duration;

/// The bounds every HTTP connection is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// From the moment a connection is ready for a request (just opened, or
    /// its previous response sent) until the request's whole head has
    /// arrived; so also how long a kept-alive connection may wait unused.
    pub header_read_timeout: Duration,
    /// How long a request's whole body may take to arrive (a 100 MiB upload
    /// needs about 350 KB/s to make the default).
    pub body_timeout: Duration,
    /// How long a connection may move no bytes in either direction before it
    /// is asked to close (a request in progress still gets its answer), and
    /// after as long again with no bytes, dropped.
    pub idle_timeout: Duration,
    /// Connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Connections one client address (an IPv6 /64) may hold open at once
    /// while other addresses hold none; as they fill the node, its share
    /// shrinks in proportion (half of it when others hold half the
    /// connections). One more is closed as soon as it is accepted, so that
    /// no small group of addresses can take every connection. The trusted
    /// proxies are exempt: every client behind them shares their addresses.
    pub max_connections_per_address: usize,
}

impl HttpLimits {
    /// The share of `max_connections` one address may hold by default.
    pub const fn default_connections_per_address(max_connections: usize) -> usize {
        let share = max_connections / 8;
        if share == 0 { 1 } else { share }
    }
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_connections_per_address: HttpLimits::default_connections_per_address(1024),
        }
    }
}

/// Requests per second and the burst one client address may make to the
/// public endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicRateLimit {
    pub per_second: u32,
    pub burst: u32,
}

impl Default for PublicRateLimit {
    /// Enough for a person, a dashboard playground re-pricing as its form
    /// changes, or a client that reads the catalog at start; far too little
    /// to keep the media fetches of a node busy.
    fn default() -> PublicRateLimit {
        PublicRateLimit {
            per_second: 5,
            burst: 20,
        }
    }
}
