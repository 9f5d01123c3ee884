//! The two stores' schemas are one schema: after all migrations, a fresh
//! SQLite database and a fresh PostgreSQL database have the same migrations
//! applied, the same tables, the same columns (by name, type family and
//! nullability), the same primary keys and unique constraints, and the same
//! indexes (by name, columns, uniqueness and whether they are partial). The
//! migrations are kept by hand in two folders; this is what notices a
//! migration, a column or an index added to one of them only.
//!
//! Each schema is read from its database's own catalogue and written as a
//! set of plain facts ("column generations.status text not null"), so a
//! difference is reported as the facts one store has and the other lacks.

use std::collections::BTreeSet;

use sqlx::{Connection, PgConnection, SqliteConnection};

use crate::common::{StoreKind, open_test_store};

/// Facts meant to be in one store only, each with a comment that says why.
/// Besides these, the type families and the primary keys' nullability
/// (below) are the only differences the two databases need, and they are
/// normalised.
const INTENDED_DIFFERENCES: &[&str] = &[
    // The record of PostgreSQL's functions (migration 0030,
    // `store/schema.rs`): SQLite has no functions, its submit is Rust.
    "table vidgate_functions",
    "column vidgate_functions.name text not null",
    "column vidgate_functions.revision integer not null",
    "column vidgate_functions.sha256 text not null",
    "column vidgate_functions.applied_at integer not null",
    "primary key vidgate_functions (name)",
];

#[tokio::test]
async fn sqlite_and_postgres_have_the_same_schema_after_all_migrations() {
    let Some(postgres) = StoreKind::postgres("sqlite_and_postgres_have_the_same_schema") else {
        return;
    };
    // Opening a store applies every migration of its database.
    let sqlite_store = open_test_store(&StoreKind::Sqlite).await;
    let postgres_store = open_test_store(&postgres).await;
    let sqlite = sqlite_schema(&sqlite_store.database.url()).await;
    let postgres = postgres_schema(&postgres_store.database.url()).await;

    let unintended = |fact: &&String| !INTENDED_DIFFERENCES.contains(&fact.as_str());
    let only_sqlite: Vec<&String> = sqlite.difference(&postgres).filter(unintended).collect();
    let only_postgres: Vec<&String> = postgres.difference(&sqlite).filter(unintended).collect();
    assert!(
        only_sqlite.is_empty() && only_postgres.is_empty(),
        "the schemas differ after all migrations\nonly in SQLite:\n  {}\nonly in PostgreSQL:\n  {}",
        join(&only_sqlite),
        join(&only_postgres)
    );
    assert!(
        sqlite.iter().any(|fact| fact.starts_with("index ")),
        "the schemas were read: indexes are among the facts"
    );
}

fn join(facts: &[&String]) -> String {
    facts
        .iter()
        .map(|fact| fact.as_str())
        .collect::<Vec<_>>()
        .join("\n  ")
}

/// The family a column's declared type belongs to. SQLite stores every
/// integer in up to eight bytes whatever its declared width, so `INTEGER`
/// and `BIGINT` are one family; the other names are taken as they are.
fn type_family(declared: &str) -> String {
    let declared = declared.to_ascii_lowercase();
    if declared.contains("int") {
        "integer".to_owned()
    } else if declared.contains("char") || declared == "text" {
        "text".to_owned()
    } else {
        declared
    }
}

fn column_fact(table: &str, column: &str, declared: &str, not_null: bool) -> String {
    let nullability = if not_null { "not null" } else { "null" };
    format!(
        "column {table}.{column} {} {nullability}",
        type_family(declared)
    )
}

fn index_fact(name: &str, table: &str, columns: &[String], unique: bool, partial: bool) -> String {
    let unique = if unique { "unique " } else { "" };
    let partial = if partial { " where …" } else { "" };
    format!(
        "index {unique}{name} on {table} ({}){partial}",
        columns.join(", ")
    )
}

/// The facts of the SQLite database at `url`.
async fn sqlite_schema(url: &str) -> BTreeSet<String> {
    let mut connection = SqliteConnection::connect(url)
        .await
        .expect("the SQLite database opens");
    let mut facts = BTreeSet::new();
    let migrations: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, description FROM _sqlx_migrations")
            .fetch_all(&mut connection)
            .await
            .expect("SQLite's migrations");
    facts.extend(
        migrations
            .into_iter()
            .map(|(version, description)| format!("migration {version} {description}")),
    );
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_schema WHERE type = 'table' \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut connection)
    .await
    .expect("SQLite's tables");
    for table in tables {
        facts.insert(format!("table {table}"));
        let columns: Vec<(String, String, bool, i64)> = sqlx::query_as(
            "SELECT name, type, \"notnull\", pk FROM pragma_table_info($1) ORDER BY cid",
        )
        .bind(&table)
        .fetch_all(&mut connection)
        .await
        .expect("SQLite's columns");
        let mut primary_key: Vec<(i64, String)> = Vec::new();
        for (column, declared, not_null, key_position) in columns {
            // PostgreSQL makes every primary key column NOT NULL; SQLite
            // leaves a column that is not an INTEGER PRIMARY KEY nullable
            // unless it says so. Neither store stores a NULL key.
            facts.insert(column_fact(
                &table,
                &column,
                &declared,
                not_null || key_position > 0,
            ));
            if key_position > 0 {
                primary_key.push((key_position, column));
            }
        }
        primary_key.sort();
        if !primary_key.is_empty() {
            let columns: Vec<String> = primary_key.into_iter().map(|(_, column)| column).collect();
            facts.insert(format!("primary key {table} ({})", columns.join(", ")));
        }
        let indexes: Vec<(String, bool, String, bool)> =
            sqlx::query_as("SELECT name, \"unique\", origin, partial FROM pragma_index_list($1)")
                .bind(&table)
                .fetch_all(&mut connection)
                .await
                .expect("SQLite's indexes");
        for (index, unique, origin, partial) in indexes {
            let columns: Vec<Option<String>> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                    .bind(&index)
                    .fetch_all(&mut connection)
                    .await
                    .expect("SQLite's index columns");
            let columns: Vec<String> = columns
                .into_iter()
                .map(|column| column.unwrap_or_else(|| "(expression)".to_owned()))
                .collect();
            match origin.as_str() {
                // The primary key is a fact of its own above.
                "pk" => {}
                // A UNIQUE constraint's index is named by each database
                // its own way.
                "u" => {
                    facts.insert(format!("unique {table} ({})", columns.join(", ")));
                }
                _ => {
                    facts.insert(index_fact(&index, &table, &columns, unique, partial));
                }
            }
        }
    }
    connection.close().await.ok();
    facts
}

/// A PostgreSQL index as the catalogue describes it: its name, its table,
/// whether it is unique and partial, the kind of constraint it backs if
/// any ('p' a primary key, 'u' a UNIQUE constraint), and its columns in
/// order (an expression's is NULL).
type PostgresIndex = (
    String,
    String,
    bool,
    bool,
    Option<String>,
    Vec<Option<String>>,
);

/// The facts of the PostgreSQL database at `url` (its `public` schema).
async fn postgres_schema(url: &str) -> BTreeSet<String> {
    let mut connection = PgConnection::connect(url)
        .await
        .expect("the PostgreSQL database opens");
    let mut facts = BTreeSet::new();
    let migrations: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, description FROM _sqlx_migrations")
            .fetch_all(&mut connection)
            .await
            .expect("PostgreSQL's migrations");
    facts.extend(
        migrations
            .into_iter()
            .map(|(version, description)| format!("migration {version} {description}")),
    );
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' AND table_type = 'BASE TABLE' \
         AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut connection)
    .await
    .expect("PostgreSQL's tables");
    facts.extend(tables.iter().map(|table| format!("table {table}")));
    let columns: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text \
         FROM information_schema.columns \
         WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut connection)
    .await
    .expect("PostgreSQL's columns");
    for (table, column, declared, nullable) in columns {
        facts.insert(column_fact(&table, &column, &declared, nullable == "NO"));
    }
    let indexes: Vec<PostgresIndex> =
        sqlx::query_as(
            "SELECT index_class.relname::text, table_class.relname::text, \
                    pg_index.indisunique, pg_index.indpred IS NOT NULL, \
                    (SELECT pg_constraint.contype::text FROM pg_constraint \
                     WHERE pg_constraint.conindid = pg_index.indexrelid LIMIT 1), \
                    ARRAY(SELECT pg_attribute.attname::text \
                          FROM unnest(pg_index.indkey::int2[]) WITH ORDINALITY AS key(number, position) \
                          LEFT JOIN pg_attribute ON pg_attribute.attrelid = table_class.oid \
                               AND pg_attribute.attnum = key.number \
                          ORDER BY key.position) \
             FROM pg_index \
             JOIN pg_class index_class ON index_class.oid = pg_index.indexrelid \
             JOIN pg_class table_class ON table_class.oid = pg_index.indrelid \
             JOIN pg_namespace ON pg_namespace.oid = table_class.relnamespace \
             WHERE pg_namespace.nspname = 'public' AND table_class.relname <> '_sqlx_migrations'",
        )
        .fetch_all(&mut connection)
        .await
        .expect("PostgreSQL's indexes");
    for (index, table, unique, partial, constraint, columns) in indexes {
        let columns: Vec<String> = columns
            .into_iter()
            .map(|column| column.unwrap_or_else(|| "(expression)".to_owned()))
            .collect();
        match constraint.as_deref() {
            Some("p") => {
                facts.insert(format!("primary key {table} ({})", columns.join(", ")));
            }
            Some("u") => {
                facts.insert(format!("unique {table} ({})", columns.join(", ")));
            }
            _ => {
                facts.insert(index_fact(&index, &table, &columns, unique, partial));
            }
        }
    }
    connection.close().await.ok();
    facts
}
