//! The vidgate service: HTTP API, store, ledger, queue, workers, backends.
//! See ARCHITECTURE.md at the repository root for the map and invariants.

pub mod allocator;
pub mod application;
pub mod backend;
pub mod bound_media;
pub mod checks;
pub mod dashboard;
pub mod diagnostics;
pub mod dialects;
pub mod health;
pub mod http;
pub mod ids;
pub mod limits;
pub mod live_status;
pub mod media;
pub mod metrics;
pub mod operator_actions;
pub mod options;
pub mod rate_limit;
pub mod representation;
pub mod retention;
pub mod secrets;
pub mod spend_limits;
pub mod startup;
pub mod storage;
pub mod store;
pub mod stripe;
pub mod telemetry;
pub mod webhook_senders;
pub mod workers;

pub use options::{Role, ServerOptions, create_private_directory, default_database_url};
pub use startup::{RunningServer, ServerError, start};
