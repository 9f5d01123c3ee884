//! PostgreSQL's hot reads on connections of their own, outside sqlx's pool
//! (issue 55): every `Store::point_read` (the key check among them), the
//! gathered reads of `GET /generations/{id}` (`gathered_reads.rs`) and an
//! account's list of generations.
//!
//! sqlx's pool pings each connection as it comes back, whatever the
//! options say: a second round trip to the database for every statement,
//! run by a task of its own. On a point read that is half the database's
//! work and two more wake-ups of a thread, which profiling showed to be
//! where the time went (BENCHMARKS.md, session 23: half the CPU in the
//! kernel's context switches). Here a read takes a free connection of a
//! small set, runs its prepared statement, and leaves the connection as it
//! is: one round trip per read.
//!
//! A connection is known to be clean when its last read finished. A read
//! whose caller went away mid-statement (a client that hung up) leaves it
//! marked unfinished, and the next read of that connection waits for the
//! database to be ready first (`ping`). A connection that failed is
//! dropped and opened again by the next read that takes its place.

use sqlx::postgres::{PgConnectOptions, PgRow};
use sqlx::{Connection, PgConnection, Postgres};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::StoreError;
use super::schema;

/// How many point reads run at once per process: as many as the clients
/// of PostgreSQL's own reference read (pgbench's 10), beside the pool.
const POINT_READERS: usize = 8;

/// One connection's place: empty until first used or after a failure.
#[derive(Default)]
struct Place {
    connection: Option<PgConnection>,
    /// A read started on the connection and did not finish.
    unfinished: bool,
}

pub(super) struct PointReaders {
    options: PgConnectOptions,
    /// The places no read holds.
    free: std::sync::Mutex<Vec<Place>>,
    /// One permit per place: reads wait for one in the order they came.
    permits: Semaphore,
}

/// A place a read holds; put back when dropped, also by a read whose caller
/// went away (its connection then marked unfinished).
pub(super) struct Held<'a> {
    readers: &'a PointReaders,
    place: Option<Place>,
    _permit: SemaphorePermit<'a>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            // Before the permit is released (fields drop after this), so a
            // read given the permit always finds a place.
            self.readers
                .free
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(place);
        }
    }
}

impl PointReaders {
    pub(super) fn new(options: PgConnectOptions) -> PointReaders {
        PointReaders {
            options,
            free: std::sync::Mutex::new((0..POINT_READERS).map(|_| Place::default()).collect()),
            permits: Semaphore::new(POINT_READERS),
        }
    }

    /// Reads at most one row of `statement` with `parameters`.
    pub(super) async fn read<R>(
        &self,
        statement: &'static str,
        parameters: &[&str],
    ) -> Result<Option<R>, StoreError>
    where
        R: for<'row> sqlx::FromRow<'row, PgRow> + Send + Unpin,
    {
        let mut held = self.hold().await?;
        let mut query = sqlx::query_as::<_, R>(statement);
        for parameter in parameters {
            query = query.bind(*parameter);
        }
        let row = query.fetch_optional(held.connection()).await;
        Ok(held.finished(row)?)
    }

    /// Reads every row of the statement `query` has built: an account's
    /// list, whose statement has only the filters given (`list_pieces`).
    pub(super) async fn read_all<R>(
        &self,
        mut query: sqlx::QueryBuilder<Postgres>,
    ) -> Result<Vec<R>, StoreError>
    where
        R: for<'row> sqlx::FromRow<'row, PgRow> + Send + Unpin,
    {
        let mut held = self.hold().await?;
        let rows = query.build_query_as().fetch_all(held.connection()).await;
        Ok(held.finished(rows)?)
    }

    /// A free place, in the order reads came, with a connection ready for
    /// a statement and marked unfinished until `Held::finished`.
    pub(super) async fn hold(&self) -> Result<Held<'_>, StoreError> {
        let permit = self
            .permits
            .acquire()
            .await
            .expect("the point readers' semaphore is never closed");
        let place = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .expect("a permit is a free place");
        let mut held = Held {
            readers: self,
            place: Some(place),
            _permit: permit,
        };
        let place = held.place.as_mut().expect("held until dropped");
        let ready = match &mut place.connection {
            Some(connection) if place.unfinished => {
                connection.ping().await.map_err(StoreError::from)
            }
            Some(_) => Ok(()),
            empty => schema::connect_postgres(&self.options)
                .await
                .map(|connection| *empty = Some(connection)),
        };
        if let Err(error) = ready {
            // The next read starts from a new connection.
            place.connection = None;
            return Err(error);
        }
        place.unfinished = true;
        Ok(held)
    }
}

impl Held<'_> {
    pub(super) fn connection(&mut self) -> &mut PgConnection {
        self.place
            .as_mut()
            .and_then(|place| place.connection.as_mut())
            .expect("a held place has a ready connection")
    }

    /// Marks the connection clean after a statement that finished, or drops
    /// it after one that failed, whatever failed: the next read then starts
    /// from a new connection.
    pub(super) fn finished<T>(mut self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        let place = self.place.as_mut().expect("held until dropped");
        match &result {
            Ok(_) => place.unfinished = false,
            Err(_) => place.connection = None,
        }
        result
    }
}
