//! The integration tests of vidgate, as one test binary: each module is one
//! area, and the helpers are in one place. One binary links the crate once,
//! where a binary per file linked it once per file.

mod support;
// The helpers this binary shares with the server's tests.
use vidgate_test_support::{schema_fake, test_database};

mod admin_money;
mod admin_providers;
mod admin_users;
mod admin_webhooks;
mod checks;
mod client;
mod deploy_guide;
mod multi_node;
mod process;
mod startup;
mod traces;
