//! What the benches share.

use vidgate_core::Micros;
use vidgate_server::RunningServer;
use vidgate_server::application::accounts::{self, CreatedAccount};
use vidgate_server::operator_actions;
use vidgate_server::operator_actions::accounts::{LimitChanges, MAX_LIMIT_FIGURE};

/// An account with ample credit and limits no benchmark reaches, so the
/// figures are the server's and not its refusals.
pub async fn unlimited_account(server: &RunningServer) -> CreatedAccount {
    let account =
        accounts::create_account(server.store.as_ref(), "bench", Micros(1_000_000_000_000))
            .await
            .unwrap();
    // The highest figures the operator may set, as `vidgate admin account
    // limits` would.
    let unlimited = LimitChanges {
        requests_per_second: Some(MAX_LIMIT_FIGURE),
        burst: Some(MAX_LIMIT_FIGURE),
        max_concurrent: Some(MAX_LIMIT_FIGURE),
    };
    operator_actions::accounts::set_limits(
        server.store.as_ref(),
        "bench",
        &account.account.id,
        unlimited,
    )
    .await
    .unwrap();
    account
}
