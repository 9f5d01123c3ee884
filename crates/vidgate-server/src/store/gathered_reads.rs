//! PostgreSQL's reads of one generation by id and account
//! (`GET /generations/{id}`, the API's hottest read), gathered: whichever
//! waiting read is given a turn and a point reader's connection
//! (`point_readers.rs`) reads every generation then waiting in one
//! statement, and answers each (issue 55).
//!
//! A point read costs PostgreSQL far more in waking up than in reading:
//! measured here, a backend spent 40–48 µs of CPU per read of vidgate's
//! against 20–24 µs per read of pgbench's busier clients, and one statement
//! reading 8 generations ran at 5 times the rows per second of 8
//! statements. So at most two such statements run at once (`AT_ONCE`, of
//! the 8 point readers): under load the reads wait for a turn and share a
//! round trip, and PostgreSQL's CPU per read fell to 9–10 µs, vidgate's from
//! 71–73 to 38–40 µs, and the rate doubled (BENCHMARKS.md, session 24).
//! Alone, a read is one statement, as before.
//!
//! A read stays in the list until it is answered. The read that took it
//! may go away before answering (its client hung up) or fail; the dropped
//! answer then puts the read back in the list, so that no read is lost and
//! none waits on a batch that will not come. A read that cannot reach the
//! database answers every read waiting with `StoreError::Unavailable` (a
//! 503 the client retries), as a batch of submits does: waiting, they would
//! meet the same one after another.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::{Semaphore, oneshot};

use super::StoreError;
use super::generations::GenerationRow;
use super::point_readers::{Held, PointReaders};

/// The most reads one statement answers: the bound of its arrays.
const MOST_IN_ONE_STATEMENT: usize = 64;

/// The generations of the pairs of ids and accounts in `$1` and `$2`, those
/// that exist. One statement for any number of reads, prepared once.
const GENERATIONS_OF_ACCOUNTS: &str = statement!(
    "SELECT ",
    GenerationRow::COLUMNS,
    " FROM unnest($1::text[], $2::text[]) AS wanted (id, account_id) \
     JOIN generations USING (id, account_id)"
);

struct WaitingRead {
    id: String,
    account_id: String,
    answer: oneshot::Sender<Result<Option<GenerationRow>, StoreError>>,
}

/// How many statements of gathered reads run at once: fewer than the point
/// readers, so that under load reads wait, and gather, for one of these.
const AT_ONCE: usize = 2;

/// The reads waiting for a point reader.
pub(super) struct GenerationReads {
    waiting: Mutex<Vec<WaitingRead>>,
    statements: Semaphore,
}

impl Default for GenerationReads {
    fn default() -> GenerationReads {
        GenerationReads {
            waiting: Mutex::default(),
            statements: Semaphore::new(AT_ONCE),
        }
    }
}

impl GenerationReads {
    /// Generation `id` of `account_id`, read on one of `readers`, with the
    /// reads waiting when a connection is free.
    pub(super) async fn read(
        &self,
        readers: &PointReaders,
        id: &str,
        account_id: &str,
    ) -> Result<Option<GenerationRow>, StoreError> {
        let mut answered = self.wait(id, account_id);
        loop {
            tokio::select! {
                biased;
                answer = &mut answered => match answer {
                    Ok(answer) => return answer,
                    // The read that took this one went away or failed.
                    Err(_) => answered = self.wait(id, account_id),
                },
                held = async {
                    let turn = self.statements.acquire().await;
                    (turn, readers.hold().await)
                } => {
                    let (_turn, held) = held;
                    let held = match held {
                        Ok(held) => held,
                        Err(error) if error.is_unavailable() => {
                            self.refuse_all();
                            return Err(error);
                        }
                        Err(error) => return Err(error),
                    };
                    let taken = self.take();
                    if !taken.is_empty() {
                        read_and_answer(held, taken).await?;
                    }
                }
            }
        }
    }

    fn wait(
        &self,
        id: &str,
        account_id: &str,
    ) -> oneshot::Receiver<Result<Option<GenerationRow>, StoreError>> {
        let (answer, answered) = oneshot::channel();
        self.waiting().push(WaitingRead {
            id: id.to_owned(),
            account_id: account_id.to_owned(),
            answer,
        });
        answered
    }

    /// The first reads waiting, as many as one statement answers.
    fn take(&self) -> Vec<WaitingRead> {
        let mut waiting = self.waiting();
        let count = waiting.len().min(MOST_IN_ONE_STATEMENT);
        waiting.drain(..count).collect()
    }

    /// Answers every waiting read that the database is unreachable: each
    /// would otherwise meet the same, two at a time, a connection's time-out
    /// after another.
    fn refuse_all(&self) {
        for read in std::mem::take(&mut *self.waiting()) {
            let _ = read.answer.send(Err(StoreError::Unavailable));
        }
    }

    fn waiting(&self) -> MutexGuard<'_, Vec<WaitingRead>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Reads the generations of `taken` in one statement on `held`'s
/// connection, and answers each read: its row, or none.
async fn read_and_answer(mut held: Held<'_>, taken: Vec<WaitingRead>) -> Result<(), StoreError> {
    let ids: Vec<&str> = taken.iter().map(|read| read.id.as_str()).collect();
    let accounts: Vec<&str> = taken.iter().map(|read| read.account_id.as_str()).collect();
    let rows = sqlx::query_as::<_, GenerationRow>(GENERATIONS_OF_ACCOUNTS)
        .bind(&ids)
        .bind(&accounts)
        .fetch_all(held.connection())
        .await;
    let rows = held.finished(rows)?;
    for read in taken {
        let row = rows.iter().find(|row| row.is(&read.id, &read.account_id));
        // A read whose caller went away is answered to no one.
        let _ = read.answer.send(Ok(row.cloned()));
    }
    Ok(())
}
