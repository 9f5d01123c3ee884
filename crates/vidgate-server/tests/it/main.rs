//! The integration tests of vidgate-server, as one test binary: each module is one
//! area, and the helpers are in one place. One binary links the crate once,
//! where a binary per file linked it once per file.

mod common;
mod fake_providers;
mod fake_stripe;
use vidgate_test_support::schema_fake;

mod cog;
mod connections;
mod dashboard;
mod dialects;
mod fair_shares;
mod foundation;
mod group_commit;
mod hardening;
mod hosted;
mod layers;
mod ledger;
mod lifecycle;
mod live_status;
mod low_balance;
mod media;
mod operations;
mod operator_actions;
mod operator_api;
mod point_reads;
mod postgres_functions;
mod provider_accepts;
mod provider_fidelity;
mod provider_schemas;
mod providers;
mod rate_limit;
mod s3;
mod schema_parity;
mod spend_limits;
mod stripe;
mod uploads;
mod webhooks;
