//! `vidgate admin account rotate-webhook-secret` on a real database.

use crate::support::{sqlite_admin, sqlite_admin_json};
use vidgate_server::store;

#[tokio::test]
async fn rotating_a_webhook_secret_keeps_the_previous_one_for_a_day() {
    let data_dir = tempfile::tempdir().unwrap();
    let created = sqlite_admin_json(data_dir.path(), &["account", "create", "--name", "hooks"]);
    let account_id = created["account_id"].as_str().unwrap();
    let original = created["webhook_secret"].as_str().unwrap();

    let rotated = sqlite_admin_json(
        data_dir.path(),
        &["account", "rotate-webhook-secret", account_id],
    );
    assert_eq!(rotated["account_id"], account_id);
    let current = rotated["webhook_secret"].as_str().unwrap();
    assert!(current.starts_with("whsec_") && current != original);
    assert!(
        rotated["previous_secret_expires_at"].is_string(),
        "{rotated}"
    );

    let database_url = vidgate_server::default_database_url(data_dir.path());
    let store = store::open(&database_url).await.unwrap();
    let account = store.accounts().get(account_id).await.unwrap().unwrap();
    assert_eq!(account.webhook_secret, current);
    assert_eq!(account.previous_webhook_secret.as_deref(), Some(original));
    let day_from_now = store::now_millis() + 24 * 3600 * 1000;
    let expires_at = account.previous_webhook_secret_expires_at.unwrap();
    assert!((day_from_now - expires_at).abs() < 60_000);

    let missing = sqlite_admin(
        data_dir.path(),
        &["account", "rotate-webhook-secret", "acct_missing"],
    );
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no account"));
}
