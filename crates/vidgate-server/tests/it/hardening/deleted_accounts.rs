//! A deleted account: its files stop answering at once, and nothing of
//! what people wrote about it is left, while its books stay.

use super::*;

/// The reasons of an account's credit adjustments, read from the database
/// itself (no API shows a deleted account's).
async fn adjustment_reasons(app: &TestApp, account_id: &str) -> Vec<String> {
    adjustment_column(
        app,
        "SELECT reason FROM credit_adjustments WHERE account_id = $1",
        account_id,
    )
    .await
}

/// The idempotency keys of an account's credit adjustments, read from the
/// database itself.
async fn adjustment_keys(app: &TestApp, account_id: &str) -> Vec<String> {
    adjustment_column(
        app,
        "SELECT idempotency_key FROM credit_adjustments WHERE account_id = $1",
        account_id,
    )
    .await
}

/// One text column of an account's credit adjustments, by `statement`.
async fn adjustment_column(
    app: &TestApp,
    statement: &'static str,
    account_id: &str,
) -> Vec<String> {
    use sqlx::Connection;
    match &app.settings.store {
        StoreKind::Sqlite => {
            let mut connection = sqlx::SqliteConnection::connect(&app.database.url())
                .await
                .unwrap();
            sqlx::query_scalar(statement)
                .bind(account_id)
                .fetch_all(&mut connection)
                .await
                .unwrap()
        }
        StoreKind::Postgres { .. } => {
            let mut connection = sqlx::PgConnection::connect(&app.database.url())
                .await
                .unwrap();
            sqlx::query_scalar(statement)
                .bind(account_id)
                .fetch_all(&mut connection)
                .await
                .unwrap()
        }
    }
}

/// Deleting an account makes its clips and uploads answer 410 at once (not
/// after the next sweep), and leaves nothing of what people wrote about it
/// (names, emails, reasons, failure messages), while the events and their
/// figures stay. Every file answer says `nosniff` and may be kept privately
/// for an hour at most.
async fn a_deleted_account_leaves_no_reachable_file_and_no_personal_text(store: StoreKind) {
    use vidgate_server::store::{AdjustmentKind, AuditAction, NewAuditEntry, NewCreditAdjustment};
    let app = spawn_app(store).await;
    let store = app.server.store.clone();
    let account_id = app.account.account.id.clone();
    let finished = app.submit_ok(M1_T2V, quick_body("a private prompt")).await;
    let finished = app
        .wait_for_status(finished["id"].as_str().unwrap(), &["succeeded"])
        .await;
    let video_url = finished["output"]["video_url"].as_str().unwrap().to_owned();
    let upload_url = app.upload_png().await["url"].as_str().unwrap().to_owned();
    let failed = app
        .submit_ok(M1_T2V, quick_body("Jane's secret [sim:fail]"))
        .await;
    let failed_id = failed["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&failed_id, &["failed"]).await;
    store
        .operator()
        .record_audit(NewAuditEntry {
            actor: "operator".into(),
            action: AuditAction::AccountCreate,
            target: account_id.clone(),
            detail: serde_json::json!({ "name": "Jane Doe", "key_id": app.account.key_id }),
        })
        .await
        .unwrap();
    store.operator()
        .record_audit(NewAuditEntry {
            actor: "operator".into(),
            action: AuditAction::KeyCreate,
            target: app.account.key_id.clone(),
            detail: serde_json::json!({ "account_id": account_id, "name": "jane@example.com's key" }),
        })
        .await
        .unwrap();
    // Issue 38, item 7: a user removed before the account, whose entry
    // names the account only in its detail, and an idempotency key the
    // operator wrote from what they knew of the customer.
    let removed = vidgate_server::application::users::create_user(
        store.as_ref(),
        &account_id,
        "jane.removed@example.com",
        None,
    )
    .await
    .unwrap();
    store
        .operator()
        .record_audit(NewAuditEntry {
            actor: "operator".into(),
            action: AuditAction::UserCreate,
            target: removed.user.id.clone(),
            detail: serde_json::json!({ "account_id": account_id,
                                        "email": "jane.removed@example.com" }),
        })
        .await
        .unwrap();
    vidgate_server::operator_actions::users::remove(
        store.as_ref(),
        "operator",
        "jane.removed@example.com",
    )
    .await
    .unwrap();
    store
        .operator()
        .adjust_credit(NewCreditAdjustment {
            idempotency_key: "refund-for-jane@example.com".into(),
            account_id: account_id.clone(),
            kind: AdjustmentKind::Credit,
            amount: vidgate_core::Micros(500_000),
            reason: "a refund".into(),
            actor: "operator".into(),
        })
        .await
        .unwrap();
    store
        .operator()
        .adjust_credit(NewCreditAdjustment {
            idempotency_key: "goodwill-1".into(),
            account_id: account_id.clone(),
            kind: AdjustmentKind::Credit,
            amount: vidgate_core::Micros(1_000_000),
            reason: "Jane Doe complained by phone".into(),
            actor: "operator".into(),
        })
        .await
        .unwrap();
    for url in [&video_url, &upload_url] {
        let response = app.client.get(url).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        assert_eq!(response.headers()["cache-control"], "private, max-age=3600");
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    }

    store
        .operator()
        .delete_account(&account_id, "operator")
        .await
        .unwrap();
    for url in [&video_url, &upload_url] {
        app.assert_gone(url).await;
    }
    let log = store.operator().audit_log(None, 100).await.unwrap();
    let actions: Vec<&str> = log.iter().map(|entry| entry.action.as_str()).collect();
    assert!(actions.contains(&"account.create"), "{actions:?}");
    assert!(actions.contains(&"key.create"), "{actions:?}");
    for entry in &log {
        let text = format!("{} {}", entry.target, entry.detail).to_lowercase();
        assert!(!text.contains("jane"), "{entry:?}");
    }
    assert!(actions.contains(&"user.create"), "{actions:?}");
    assert_eq!(
        adjustment_reasons(&app, &account_id).await,
        ["[deleted]", "[deleted]"]
    );
    for key in adjustment_keys(&app, &account_id).await {
        assert!(!key.to_lowercase().contains("jane"), "{key}");
    }
    let failed = store
        .generations()
        .get(&account_id, &failed_id)
        .await
        .unwrap()
        .unwrap();
    let error = failed.error.unwrap().value().unwrap();
    assert_eq!(error["message"], "[deleted]");
    assert!(error["code"].is_string(), "{error}");
    app.assert_ledger_invariant(&account_id).await;
    app.server.shutdown().await;
}

on_both_stores!(a_deleted_account_leaves_no_reachable_file_and_no_personal_text,);
