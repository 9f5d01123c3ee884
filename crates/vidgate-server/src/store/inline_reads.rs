//! SQLite's hot reads (a generation by id and account, the caller of an API
//! key whose cached entry expired, a page of an account's generations), run
//! inline on the calling thread through a small pool of synchronous
//! `rusqlite` connections.
//!
//! sqlx runs every SQLite connection on a worker thread of its own and hands
//! each statement to it and each row back through channels. For a read that
//! costs SQLite a few microseconds (a primary-key lookup in cached pages, or
//! an index seek that reads 21 entries in order) those hand-offs, each a
//! futex wake-up of another thread, cost several times the read itself and
//! cap `GET /generations/{id}` and `GET /generations`. Running the statement
//! right where the request is handled removes them; the runtime's thread is
//! held for about as long as it takes to render the answer.
//!
//! The connections are read-only and in autocommit mode, so every statement
//! is its own read transaction on a fresh WAL snapshot: it sees every write
//! committed before it started, by this process or by any other (`vidgate
//! admin`, another node's worker), exactly as the sqlx readers do. They never
//! wait for a lock (busy timeout zero): in the rare moments SQLite cannot
//! start a read at once (another connection recovering the WAL, or holding
//! the database exclusively), the read reports it and the store runs the same
//! statement through its sqlx reader pool, which waits on its own thread.
//!
//! rusqlite and sqlx link the same `libsqlite3-sys`, so one SQLite library is
//! in the process.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::types::{FromSqlError, ValueRef};
use rusqlite::{ErrorCode, OpenFlags, OptionalExtension};

/// Idle connections kept for the next reads. Reads run on the runtime's
/// threads, one at a time on each, so a few cover a node; a connection
/// opened beyond them is closed after its read.
const MAX_IDLE_CONNECTIONS: usize = 8;

/// A row type the inline reader fills, by column name. Declared with
/// `database_row!` (see `mod.rs`), which also derives sqlx's `FromRow` from
/// the same fields.
pub(super) trait InlineRow: Sized {
    fn from_inline_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
}

/// Read-only connections to one SQLite database file, used inline.
pub(super) struct InlineReader {
    path: PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl InlineReader {
    /// Opens one connection at once, so that a database this reader cannot
    /// open fails the store's start rather than its first request.
    pub(super) fn open(path: &Path) -> rusqlite::Result<InlineReader> {
        let reader = InlineReader {
            path: path.to_owned(),
            idle: Mutex::new(Vec::new()),
        };
        let first = reader.connect()?;
        reader.give_back(first);
        Ok(reader)
    }

    fn connect(&self) -> rusqlite::Result<rusqlite::Connection> {
        let connection = rusqlite::Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // Never sleep on the runtime's thread waiting for a lock: a busy
        // database is reported at once and the read moves to a pool that
        // can wait (see `is_busy`).
        connection.busy_timeout(Duration::ZERO)?;
        // A prepared statement is planned once, whatever values it is run
        // with: otherwise SQLite plans a statement whose LIMIT is a bound
        // value (a list's page) again at every run, because binding that
        // value expires the plan, and planning cost a page more than
        // reading its rows.
        connection.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
        Ok(connection)
    }

    fn take(&self) -> rusqlite::Result<rusqlite::Connection> {
        let idle = self
            .idle
            .lock()
            .expect("the inline reader's lock is never poisoned")
            .pop();
        match idle {
            Some(connection) => Ok(connection),
            None => self.connect(),
        }
    }

    fn give_back(&self, connection: rusqlite::Connection) {
        let mut idle = self
            .idle
            .lock()
            .expect("the inline reader's lock is never poisoned");
        if idle.len() < MAX_IDLE_CONNECTIONS {
            idle.push(connection);
        }
    }

    /// Runs `statement` (which numbers its parameters `$1`, `$2`, … in
    /// order, as every statement of the store does) with `parameters` and
    /// reads its first row, if any.
    pub(super) fn read_optional<R: InlineRow>(
        &self,
        statement: &str,
        parameters: &[&str],
    ) -> rusqlite::Result<Option<R>> {
        let connection = self.take()?;
        let row = connection
            .prepare_cached(statement)
            .and_then(|mut prepared| {
                prepared
                    .query_row(rusqlite::params_from_iter(parameters), R::from_inline_row)
                    .optional()
            });
        // A connection whose read failed is as good as any other: SQLite
        // ends the statement and its read transaction either way.
        self.give_back(connection);
        row
    }

    /// Runs `statement` (its parameters numbered as `read_optional`'s) with
    /// `parameters`, texts and integers alike, and reads all its rows.
    pub(super) fn read_all<R: InlineRow, P: rusqlite::ToSql>(
        &self,
        statement: &str,
        parameters: &[P],
    ) -> rusqlite::Result<Vec<R>> {
        let mut rows = Vec::new();
        self.for_each_row(statement, parameters, |row| {
            rows.push(R::from_inline_row(row)?);
            Ok(())
        })?;
        Ok(rows)
    }

    /// Runs `statement` as `read_all` does and hands each row to `each` in
    /// place, where its texts can be borrowed rather than copied. A read
    /// that SQLite refuses as busy is refused before the first row.
    pub(super) fn for_each_row<P: rusqlite::ToSql>(
        &self,
        statement: &str,
        parameters: &[P],
        mut each: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>,
    ) -> rusqlite::Result<()> {
        let connection = self.take()?;
        let read = connection
            .prepare_cached(statement)
            .and_then(|mut prepared| {
                let mut rows = prepared.query(rusqlite::params_from_iter(parameters))?;
                while let Some(row) = rows.next()? {
                    each(row)?;
                }
                Ok(())
            });
        // As in `read_optional`: SQLite has ended the statement either way.
        self.give_back(connection);
        read
    }
}

/// The value at `*position` of `row`, then the next position. Debug builds
/// check that the column there is `name`: the row type's fields must be in
/// the order its statement selects them.
pub(super) fn column<T: rusqlite::types::FromSql>(
    row: &rusqlite::Row<'_>,
    position: &mut usize,
    name: &str,
) -> rusqlite::Result<T> {
    let at = *position;
    *position += 1;
    debug_assert_eq!(
        row.as_ref().column_name(at).ok(),
        Some(name),
        "column {at} of an inline read is not the field it fills"
    );
    row.get(at)
}

/// A row's columns read in order and in place: texts borrowed from the
/// row rather than copied, valid until the next row is read. Debug builds
/// check each column's name, as `column` does.
pub(super) struct ColumnsInPlace<'row, 'statement> {
    row: &'row rusqlite::Row<'statement>,
    position: usize,
}

impl<'row, 'statement> ColumnsInPlace<'row, 'statement> {
    pub(super) fn new(row: &'row rusqlite::Row<'statement>) -> ColumnsInPlace<'row, 'statement> {
        ColumnsInPlace { row, position: 0 }
    }

    /// The next column, which must be `name`.
    fn next(&mut self, name: &str) -> rusqlite::Result<(usize, ValueRef<'row>)> {
        let at = self.position;
        self.position += 1;
        debug_assert_eq!(
            self.row.as_ref().column_name(at).ok(),
            Some(name),
            "column {at} of an inline read is not the field it fills"
        );
        Ok((at, self.row.get_ref(at)?))
    }

    pub(super) fn text(&mut self, name: &str) -> rusqlite::Result<&'row str> {
        let (at, value) = self.next(name)?;
        value
            .as_str()
            .map_err(|error| conversion_failure(at, value, error))
    }

    /// A text column parsed into `T`, such as a state's name.
    pub(super) fn parsed_text<T>(&mut self, name: &str) -> rusqlite::Result<T>
    where
        T: std::str::FromStr,
        T::Err: std::error::Error + Send + Sync + 'static,
    {
        let (at, value) = self.next(name)?;
        let text = value
            .as_str()
            .map_err(|error| conversion_failure(at, value, error))?;
        text.parse().map_err(|error| {
            rusqlite::Error::FromSqlConversionFailure(at, value.data_type(), Box::new(error))
        })
    }

    pub(super) fn optional_text(&mut self, name: &str) -> rusqlite::Result<Option<&'row str>> {
        let (at, value) = self.next(name)?;
        value
            .as_str_or_null()
            .map_err(|error| conversion_failure(at, value, error))
    }

    pub(super) fn integer(&mut self, name: &str) -> rusqlite::Result<i64> {
        let (at, value) = self.next(name)?;
        value
            .as_i64()
            .map_err(|error| conversion_failure(at, value, error))
    }

    pub(super) fn optional_integer(&mut self, name: &str) -> rusqlite::Result<Option<i64>> {
        let (at, value) = self.next(name)?;
        value
            .as_i64_or_null()
            .map_err(|error| conversion_failure(at, value, error))
    }

    /// Passes over a column the reader has no use for.
    pub(super) fn skip(&mut self, name: &str) -> rusqlite::Result<()> {
        self.next(name).map(drop)
    }
}

/// The error `Row::get` gives for a column of another type than asked.
fn conversion_failure(at: usize, value: ValueRef<'_>, error: FromSqlError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(at, value.data_type(), Box::new(error))
}

/// Whether a read failed only because SQLite could not start it without
/// waiting for another connection's lock.
pub(super) fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A database in rollback-journal mode held by another connection's
    /// exclusive transaction, which no reader can enter until it ends: the
    /// one real way to make a SQLite read wait for a lock (WAL readers only
    /// meet it while another connection recovers the WAL).
    pub(in crate::store) struct HeldDatabase {
        pub path: PathBuf,
        _holder: rusqlite::Connection,
        _directory: tempfile::TempDir,
    }

    pub(in crate::store) fn held_database() -> HeldDatabase {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("held.sqlite");
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder
            .execute_batch("CREATE TABLE t (id TEXT); BEGIN EXCLUSIVE;")
            .unwrap();
        HeldDatabase {
            path,
            _holder: holder,
            _directory: directory,
        }
    }

    struct Id(String);

    impl InlineRow for Id {
        fn from_inline_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Id> {
            Ok(Id(row.get("id")?))
        }
    }

    #[test]
    fn reads_rows_by_numbered_parameters() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("rows.sqlite");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (id TEXT, kind TEXT); INSERT INTO t VALUES ('a', 'x');")
            .unwrap();
        let reader = InlineReader::open(&path).unwrap();
        let statement = "SELECT id FROM t WHERE id = $1 AND kind = $2";
        let found: Option<Id> = reader.read_optional(statement, &["a", "x"]).unwrap();
        assert_eq!(found.unwrap().0, "a");
        let missing: Option<Id> = reader.read_optional(statement, &["a", "y"]).unwrap();
        assert!(missing.is_none());
    }

    database_row! {
        struct IdAndKind {
            id: String,
            kind: String,
        }
    }

    database_row! {
        struct KindAndId {
            kind: String,
            id: String,
        }
    }

    fn table_of_one_row() -> (tempfile::TempDir, InlineReader) {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("rows.sqlite");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (id TEXT, kind TEXT); INSERT INTO t VALUES ('a', 'x');")
            .unwrap();
        let reader = InlineReader::open(&path).unwrap();
        (directory, reader)
    }

    #[test]
    fn a_declared_row_is_filled_by_position_in_the_order_selected() {
        let (_directory, reader) = table_of_one_row();
        let row: IdAndKind = reader
            .read_optional("SELECT id, kind FROM t WHERE id = $1", &["a"])
            .unwrap()
            .unwrap();
        assert_eq!((row.id.as_str(), row.kind.as_str()), ("a", "x"));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "is not the field it fills")]
    fn a_statement_selecting_in_another_order_than_its_row_fails_in_debug_builds() {
        let (_directory, reader) = table_of_one_row();
        let row: KindAndId = reader
            .read_optional("SELECT id, kind FROM t WHERE id = $1", &["a"])
            .unwrap()
            .unwrap();
        // Unreached in a debug build: by position, `kind` would hold the id.
        assert_eq!((row.kind.as_str(), row.id.as_str()), ("a", "x"));
    }

    #[test]
    fn a_statement_is_planned_once_whatever_its_values() {
        let (_directory, reader) = table_of_one_row();
        let statement = "SELECT id, kind FROM t WHERE kind = $1 LIMIT $2";
        for limit in [1_i64, 2, 3] {
            let rows: Vec<IdAndKind> = reader
                .read_all::<_, &dyn rusqlite::ToSql>(statement, &[&"x", &limit])
                .unwrap();
            assert_eq!(rows.len(), 1);
        }
        // Reads take turns on one idle connection, which has the statement
        // in its cache.
        let connection = reader.take().unwrap();
        let prepared = connection.prepare_cached(statement).unwrap();
        assert_eq!(prepared.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    #[test]
    fn a_read_that_would_wait_for_a_lock_is_refused_at_once_as_busy() {
        let held = held_database();
        let reader = InlineReader::open(&held.path).unwrap();
        let started = std::time::Instant::now();
        let error = reader
            .read_optional::<Id>("SELECT id FROM t WHERE id = $1", &["a"])
            .err()
            .expect("the read cannot start while the database is held");
        assert!(is_busy(&error), "{error}");
        // rusqlite's own default would wait five seconds.
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
