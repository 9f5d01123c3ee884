//! What the benches share.

use vidgate_core::Micros;
use vidgate_server::RunningServer;
use vidgate_server::accounts::{self, CreatedAccount};
use vidgate_server::store::AccountLimits;

/// An account with ample credit and limits no benchmark reaches, so the
/// figures are the server's and not its refusals.
pub async fn unlimited_account(server: &RunningServer) -> CreatedAccount {
    let account =
        accounts::create_account(server.store.as_ref(), "bench", Micros(1_000_000_000_000))
            .await
            .unwrap();
    let unlimited = AccountLimits {
        requests_per_second: 1_000_000_000,
        burst: 1_000_000_000,
        max_concurrent: 1_000_000,
    };
    server
        .store
        .accounts()
        .set_limits(&account.account.id, unlimited)
        .await
        .unwrap();
    account
}
