//! The integration tests of vidgate, as one test binary: each module is one
//! area, and the helpers are in one place. One binary links the crate once,
//! where a binary per file linked it once per file.

// Two helpers of the server's tests, shared by path: this binary uses only
// part of each.
#[allow(dead_code)]
#[path = "../../../vidgate-server/tests/it/schema_fake/mod.rs"]
mod schema_fake;
mod support;
#[allow(dead_code)]
#[path = "../../../vidgate-server/tests/it/common/test_database.rs"]
mod test_database;

mod admin_providers;
mod admin_users;
mod admin_webhooks;
mod checks;
mod client;
mod deploy_guide;
mod multi_node;
mod process;
mod startup;
