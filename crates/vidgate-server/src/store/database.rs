//! Which database a `Store` runs on, and the few lines that run one
//! statement on whichever it is.
//!
//! The aggregates write each statement once, as an ordinary sqlx query
//! inside an ordinary method, and hand it to `on_reader!`, `on_writer!` or
//! `on_transaction!`. Each of these is a `match` of two arms that runs the
//! same expression on the SQLite or the PostgreSQL connection, so the
//! expression is type-checked for both databases and a compile error points
//! at the statement itself. Both arms must answer one type, so an
//! `execute` ends in `.map(|done| done.rows_affected())` (each driver has
//! its own result type).
//!
//! Nearly every statement is one query run one way, so five forms take the
//! query and add that tail themselves: `execute_on_writer!` and
//! `execute_in_transaction!` answer the rows affected, and
//! `fetch_on_reader!`, `fetch_on_writer!` and `fetch_in_transaction!` run
//! the fetch they are named (`fetch_one`, `fetch_optional` or `fetch_all`).
//! The query stays at the call site, so it is still checked for both
//! databases there; the closure forms remain for the few statements that
//! are more than one query expression (a `QueryBuilder`). Everything that
//! differs between the databases is a method here that dispatches to
//! `sqlite.rs` or `postgres.rs`.

use std::time::Duration;

use sqlx::{Postgres, Sqlite, Transaction};

use super::caller_cache::CallerCache;
use super::changes::GenerationWatch;
use super::inline_reads::InlineRow;
use super::{PgStore, SqliteStore, Store, StoreError};

/// The database under a `Store`, with what each keeps of its own (pools,
/// SQLite's inline reader, PostgreSQL's listener, the submit batches).
pub(super) enum Database {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// A write transaction on either database. Statements run on it through
/// `on_transaction!`; it ends with `commit` (dropping it rolls back).
pub(super) enum WriteTransaction {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// The row locks a statement inside a write transaction takes on
/// PostgreSQL. SQLite's single writer makes both unnecessary there.
#[derive(Clone, Copy)]
pub(super) enum RowLocking {
    /// `FOR UPDATE`: concurrent submits of one account take turns.
    ForUpdate,
    /// `FOR UPDATE SKIP LOCKED`: concurrent claimers and rescuers pass over
    /// each other's rows instead of waiting or taking them twice.
    SkipLocked,
}

impl RowLocking {
    fn postgres_clause(self) -> &'static str {
        match self {
            RowLocking::ForUpdate => "FOR UPDATE",
            RowLocking::SkipLocked => "FOR UPDATE SKIP LOCKED",
        }
    }
}

/// Runs `$statement` with `$pool` bound to the store's pool `$which`
/// (`reader` or `writer`), whichever database it is.
macro_rules! on_pool {
    ($store:expr, $which:ident, |$pool:ident| $statement:expr) => {
        match &$store.database {
            $crate::store::database::Database::Sqlite(database) => {
                let $pool = database.$which();
                $statement
            }
            $crate::store::database::Database::Postgres(database) => {
                let $pool = database.$which();
                $statement
            }
        }
    };
}

/// Runs `$statement` with `$pool` bound to the store's pool for reads.
macro_rules! on_reader {
    ($store:expr, |$pool:ident| $statement:expr) => {
        on_pool!($store, reader, |$pool| $statement)
    };
}

/// Runs `$statement` with `$pool` bound to the store's pool for writes
/// outside a transaction (one statement is its own transaction).
macro_rules! on_writer {
    ($store:expr, |$pool:ident| $statement:expr) => {
        on_pool!($store, writer, |$pool| $statement)
    };
}

/// Runs `$statement` with `$connection` bound to the connection of
/// `$transaction`, a `&mut WriteTransaction`.
macro_rules! on_transaction {
    ($transaction:expr, |$connection:ident| $statement:expr) => {
        match $transaction {
            $crate::store::database::WriteTransaction::Sqlite(transaction) => {
                let $connection = &mut **transaction;
                $statement
            }
            $crate::store::database::WriteTransaction::Postgres(transaction) => {
                let $connection = &mut **transaction;
                $statement
            }
        }
    };
}

/// Runs `$query` on the store's pool for writes and answers how many rows
/// it changed.
macro_rules! execute_on_writer {
    ($store:expr, $query:expr) => {
        on_writer!($store, |writer| $query
            .execute(writer)
            .await
            .map(|done| done.rows_affected()))
    };
}

/// Runs `$query` on the connection of `$transaction` and answers how many
/// rows it changed.
macro_rules! execute_in_transaction {
    ($transaction:expr, $query:expr) => {
        on_transaction!($transaction, |connection| $query
            .execute(connection)
            .await
            .map(|done| done.rows_affected()))
    };
}

/// Fetches the rows of `$query` from the store's pool for reads, with the
/// query's method `$fetch` (`fetch_one`, `fetch_optional` or `fetch_all`).
macro_rules! fetch_on_reader {
    ($store:expr, $fetch:ident, $query:expr) => {
        on_reader!($store, |reader| $query.$fetch(reader).await)
    };
}

/// Fetches the rows of `$query` from the store's pool for writes (a
/// statement that changes rows and returns them, or a read that must see
/// the latest write), with the query's method `$fetch`.
macro_rules! fetch_on_writer {
    ($store:expr, $fetch:ident, $query:expr) => {
        on_writer!($store, |writer| $query.$fetch(writer).await)
    };
}

/// Fetches the rows of `$query` inside `$transaction`, with the query's
/// method `$fetch`.
macro_rules! fetch_in_transaction {
    ($transaction:expr, $fetch:ident, $query:expr) => {
        on_transaction!($transaction, |connection| $query.$fetch(connection).await)
    };
}

impl WriteTransaction {
    pub(super) async fn commit(self) -> Result<(), StoreError> {
        match self {
            WriteTransaction::Sqlite(transaction) => transaction.commit().await?,
            WriteTransaction::Postgres(transaction) => transaction.commit().await?,
        }
        Ok(())
    }

    pub(super) async fn rollback(self) -> Result<(), StoreError> {
        match self {
            WriteTransaction::Sqlite(transaction) => transaction.rollback().await?,
            WriteTransaction::Postgres(transaction) => transaction.rollback().await?,
        }
        Ok(())
    }

    /// The clause that takes the row locks of `locking` in a statement
    /// of this transaction. It is one of three constants, so a statement
    /// that adds it to literals is as safe as a literal (`AssertSqlSafe`).
    pub(super) fn row_locking(&self, locking: RowLocking) -> &'static str {
        match self {
            WriteTransaction::Sqlite(_) => "",
            WriteTransaction::Postgres(_) => locking.postgres_clause(),
        }
    }
}

/// Reads at most one row of `statement` on `pool`, binding `parameters` in
/// order: every point read on PostgreSQL, and SQLite's when its inline
/// reader would have to wait. It is generic over the database because the
/// two are the same statement on a different pool.
pub(super) async fn point_read_on_pool<DB, R>(
    pool: &sqlx::Pool<DB>,
    statement: &'static str,
    parameters: &[&str],
) -> Result<Option<R>, StoreError>
where
    DB: sqlx::Database,
    for<'connection> &'connection mut DB::Connection: sqlx::Executor<'connection, Database = DB>,
    for<'value> &'value str: sqlx::Encode<'value, DB> + sqlx::Type<DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    R: for<'row> sqlx::FromRow<'row, DB::Row> + Send + Unpin,
{
    let mut query = sqlx::query_as::<DB, R>(statement);
    for parameter in parameters {
        query = query.bind(*parameter);
    }
    Ok(query.fetch_optional(pool).await?)
}

/// What the aggregates need of the database beyond running a statement,
/// each done the way its database does it (`sqlite.rs`, `postgres.rs`).
impl Store {
    /// The clause that takes the row locks of `locking` in a statement
    /// outside a transaction (one statement is its own transaction).
    pub(super) fn row_locking(&self, locking: RowLocking) -> &'static str {
        match &self.database {
            Database::Sqlite(_) => "",
            Database::Postgres(_) => locking.postgres_clause(),
        }
    }

    pub(super) async fn begin_write(&self) -> Result<WriteTransaction, StoreError> {
        Ok(match &self.database {
            Database::Sqlite(database) => WriteTransaction::Sqlite(database.begin_write().await?),
            Database::Postgres(database) => {
                WriteTransaction::Postgres(database.begin_write().await?)
            }
        })
    }

    /// Reads at most one row of a `database_row!` type by key: inline on
    /// SQLite (see `inline_reads.rs`), one statement on PostgreSQL on the
    /// point readers' own connections (`point_readers.rs`).
    pub(super) async fn point_read<R>(
        &self,
        statement: &'static str,
        parameters: &[&str],
    ) -> Result<Option<R>, StoreError>
    where
        R: InlineRow
            + for<'row> sqlx::FromRow<'row, sqlx::sqlite::SqliteRow>
            + for<'row> sqlx::FromRow<'row, sqlx::postgres::PgRow>
            + Send
            + Unpin,
    {
        match &self.database {
            Database::Sqlite(database) => database.point_read(statement, parameters).await,
            Database::Postgres(database) => database.point_read(statement, parameters).await,
        }
    }

    /// The cache of authenticated API keys.
    pub(super) fn callers(&self) -> &CallerCache {
        match &self.database {
            Database::Sqlite(database) => database.callers(),
            Database::Postgres(database) => database.callers(),
        }
    }

    /// Tells other processes that a job was queued, when `transaction`
    /// commits.
    pub(super) async fn announce_work(
        transaction: &mut WriteTransaction,
        generation_id: &str,
    ) -> Result<(), StoreError> {
        match transaction {
            WriteTransaction::Sqlite(transaction) => {
                SqliteStore::announce_work(transaction, generation_id).await
            }
            WriteTransaction::Postgres(transaction) => {
                PgStore::announce_work(transaction, generation_id).await
            }
        }
    }

    pub(super) async fn wait_for_announced_work(&self, timeout: Duration) {
        match &self.database {
            Database::Sqlite(database) => database.wait_for_announced_work(timeout).await,
            Database::Postgres(database) => database.wait_for_announced_work(timeout).await,
        }
    }

    /// After a change of a generation's status committed: wakes its
    /// watchers on every node.
    pub(super) async fn announce_generation_change(&self, generation_id: &str) {
        match &self.database {
            Database::Sqlite(database) => database.announce_generation_change(generation_id).await,
            Database::Postgres(database) => {
                database.announce_generation_change(generation_id).await
            }
        }
    }

    pub(super) async fn watch_generation_changes(&self, generation_id: &str) -> GenerationWatch {
        match &self.database {
            Database::Sqlite(database) => database.watch_generation_changes(generation_id).await,
            Database::Postgres(database) => database.watch_generation_changes(generation_id).await,
        }
    }

    pub(super) fn generation_announcements_heard(&self) -> tokio::sync::watch::Receiver<bool> {
        match &self.database {
            Database::Sqlite(database) => database.generation_announcements_heard(),
            Database::Postgres(database) => database.generation_announcements_heard(),
        }
    }

    pub(super) async fn announce_to_other_nodes(
        &self,
        generation_id: &str,
    ) -> Result<(), StoreError> {
        match &self.database {
            Database::Sqlite(database) => database.announce_to_other_nodes(generation_id).await,
            Database::Postgres(database) => database.announce_to_other_nodes(generation_id).await,
        }
    }

    pub(super) async fn hear_other_nodes(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<String>> {
        match &self.database {
            Database::Sqlite(database) => database.hear_other_nodes().await,
            Database::Postgres(database) => database.hear_other_nodes().await,
        }
    }
}
