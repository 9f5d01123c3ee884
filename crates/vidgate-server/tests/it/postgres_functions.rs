//! PostgreSQL's functions, each kept whole in one file of
//! `migrations/postgres/functions/` and applied after the numbered
//! migrations (`store/schema.rs`): applied to a fresh database, applied
//! again when the database's copy differs from the file, left alone when a
//! newer release applied a higher revision, and applied once when several
//! nodes start together.

use sqlx::{Connection, PgConnection};
use vidgate_server::store::{self, Migrations, SqliteDurability};

use crate::common::{StoreKind, TestDatabase};

/// Each function's recorded revision and checksum, by name.
async fn recorded(url: &str) -> Vec<(String, i64, String)> {
    let mut connection = PgConnection::connect(url).await.unwrap();
    sqlx::query_as("SELECT name, revision, sha256 FROM vidgate_functions ORDER BY name")
        .fetch_all(&mut connection)
        .await
        .unwrap()
}

/// The text of a function's body as the database has it.
async fn body(url: &str, name: &str) -> String {
    let mut connection = PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE proname = $1")
        .bind(name)
        .fetch_one(&mut connection)
        .await
        .unwrap()
}

async fn execute(url: &str, statement: &str) {
    let mut connection = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&mut connection)
        .await
        .unwrap();
}

/// A stand-in body: the function answers that the account does not exist.
const STAND_IN: &str = "CREATE OR REPLACE FUNCTION vidgate_submit_generation(\
    new_id TEXT, new_account_id TEXT, new_api_key_id TEXT, new_model TEXT, new_endpoint TEXT, \
    new_mode TEXT, new_input TEXT, new_price BIGINT, new_official BIGINT, new_webhook_url TEXT, \
    new_idempotency_key TEXT, new_request_sha256 TEXT, new_max_attempts BIGINT, \
    now_millis BIGINT, idempotency_window_millis BIGINT, work_channel TEXT, \
    new_media_binding TEXT) \
    RETURNS TABLE (outcome TEXT, generation_id TEXT, balance BIGINT, concurrency_limit BIGINT) \
    LANGUAGE plpgsql AS $$ BEGIN \
    RETURN QUERY SELECT 'account_not_found', NULL::TEXT, NULL::BIGINT, NULL::BIGINT; END $$;";

#[tokio::test]
async fn each_function_is_applied_from_its_file_and_again_when_the_database_differs() {
    let Some(kind) = StoreKind::postgres("each_function_is_applied_from_its_file") else {
        return;
    };
    let database = TestDatabase::create(&kind).await;
    let url = database.url();
    drop(store::open(&url).await.unwrap());
    let applied = recorded(&url).await;
    let names: Vec<&str> = applied.iter().map(|(name, ..)| name.as_str()).collect();
    assert_eq!(
        names,
        ["vidgate_submit_generation", "vidgate_submit_generations"]
    );
    let from_file = body(&url, "vidgate_submit_generation").await;
    assert!(from_file.contains("pg_notify(work_channel, new_id)"));

    // Someone changed the function by hand: the database's copy is not the
    // file's, so a node of this release applies the file again.
    execute(&url, STAND_IN).await;
    execute(
        &url,
        "UPDATE vidgate_functions SET sha256 = 'changed' \
         WHERE name = 'vidgate_submit_generation'",
    )
    .await;
    assert_eq!(
        store::pending_migrations(&url)
            .await
            .unwrap()
            .iter()
            .map(|pending| pending.description.as_str())
            .collect::<Vec<_>>(),
        ["function vidgate_submit_generation"]
    );
    // A node that only requires the schema refuses it as not migrated.
    assert!(matches!(
        store::open_with(&url, Migrations::Require, SqliteDurability::default()).await,
        Err(store::StoreError::NotMigrated { pending: 1 })
    ));
    drop(store::open(&url).await.unwrap());
    assert_eq!(body(&url, "vidgate_submit_generation").await, from_file);
    assert_eq!(recorded(&url).await, applied);
    assert!(store::pending_migrations(&url).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_node_of_an_older_release_leaves_a_newer_function_alone() {
    let Some(kind) = StoreKind::postgres("a_node_of_an_older_release_leaves") else {
        return;
    };
    let database = TestDatabase::create(&kind).await;
    let url = database.url();
    drop(store::open(&url).await.unwrap());
    // A newer release applied its revision of the function.
    execute(&url, STAND_IN).await;
    execute(
        &url,
        "UPDATE vidgate_functions SET revision = revision + 1, sha256 = 'newer' \
         WHERE name = 'vidgate_submit_generation'",
    )
    .await;
    let newer = body(&url, "vidgate_submit_generation").await;
    drop(store::open(&url).await.unwrap());
    assert_eq!(body(&url, "vidgate_submit_generation").await, newer);
    assert!(store::pending_migrations(&url).await.unwrap().is_empty());
}

#[tokio::test]
async fn nodes_starting_together_apply_the_functions_once() {
    let Some(kind) = StoreKind::postgres("nodes_starting_together_apply") else {
        return;
    };
    let database = TestDatabase::create(&kind).await;
    let url = database.url();
    // Four nodes open the store at once: their connections race at the
    // database while the futures interleave here.
    let opened = tokio::join!(
        store::open(&url),
        store::open(&url),
        store::open(&url),
        store::open(&url)
    );
    for node in [opened.0, opened.1, opened.2, opened.3] {
        node.expect("every node opens the store");
    }
    let mut connection = PgConnection::connect(&url).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM vidgate_functions")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert_eq!(rows, 2);
}
