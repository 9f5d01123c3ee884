//! Group commit of submits: one transaction, and so one commit and one
//! flush of the log to disk, for all the submits that arrived together.
//!
//! Every submit of a node goes through its store's `SubmitQueue` to one
//! task. The task takes whatever is waiting (at most `MAX_BATCH`) and hands
//! it to the store's `BatchSubmitter`, which decides each submit in arrival
//! order with exactly the rules of a submit on its own (the idempotent
//! replay, the concurrency cap, the balance, the hold and its ledger row in
//! the transaction that inserts the generation) and commits them together.
//! While a batch runs, the next submits queue, so the batches grow with the
//! load; there is no timer, so a submit that finds the queue empty goes at
//! once and costs what it did without grouping. A refusal is one submit's
//! answer, never the batch's failure. A database error fails the whole
//! transaction, so the batch's submits are then made again each in a
//! transaction of its own: one bad submit fails alone.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use super::generations::{NewGeneration, SubmitOutcome, SubmitRefusal};

/// The most submits one transaction carries. Large enough that one commit
/// serves every connection of a busy node; small enough that the account
/// locks a batch takes are held for milliseconds, not for a long statement.
pub(super) const MAX_BATCH: usize = 64;

/// Submits that may wait for a batch before a caller waits to queue its own.
const QUEUE_CAPACITY: usize = 16 * MAX_BATCH;

/// What one submit comes to: its outcome, or why it was refused.
pub(super) type SubmitAnswer = Result<SubmitOutcome, SubmitRefusal>;

/// How a store submits generations.
pub(super) trait BatchSubmitter: Clone + Send + Sync + 'static {
    /// Submits `generation` in a transaction of its own.
    fn submit_alone(&self, generation: &NewGeneration)
    -> impl Future<Output = SubmitAnswer> + Send;

    /// Submits every generation of `batch` in one transaction, in order,
    /// each as `submit_alone` would, and answers them in the batch's order.
    /// An error means the transaction failed and nothing of it was kept.
    fn submit_together(
        &self,
        batch: &[NewGeneration],
    ) -> impl Future<Output = Result<Vec<SubmitAnswer>, StoreError>> + Send;
}

/// A submit waiting for its batch, and where its answer goes.
struct QueuedSubmit {
    generation: NewGeneration,
    answer: oneshot::Sender<SubmitAnswer>,
}

/// The queue in front of a store's batch task.
pub(super) struct SubmitQueue<Submitter> {
    submitter: Submitter,
    /// The running task's queue. The task is started by the first submit
    /// (an admin command or an API-only test never starts one) and started
    /// again if it ever stopped (a panic, or the runtime that ran it ended).
    queue: Mutex<Option<mpsc::Sender<QueuedSubmit>>>,
}

impl<Submitter: BatchSubmitter> SubmitQueue<Submitter> {
    pub(super) fn new(submitter: Submitter) -> SubmitQueue<Submitter> {
        SubmitQueue {
            submitter,
            queue: Mutex::new(None),
        }
    }

    /// Submits `generation` with whatever other submits are waiting, and
    /// answers this one's outcome.
    pub(super) async fn submit(&self, generation: NewGeneration) -> SubmitAnswer {
        let (answer, answered) = oneshot::channel();
        self.running_queue()
            .send(QueuedSubmit { generation, answer })
            .await
            .map_err(|_| StoreError::SubmitQueueStopped)?;
        answered.await.map_err(|_| StoreError::SubmitQueueStopped)?
    }

    fn running_queue(&self) -> mpsc::Sender<QueuedSubmit> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = queue.as_ref().filter(|sender| !sender.is_closed()) {
            return running.clone();
        }
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(submit_batches(self.submitter.clone(), receiver));
        *queue = Some(sender.clone());
        sender
    }
}

/// The batch task: runs until the store, and with it the last sender, is
/// dropped, after answering every submit already queued.
async fn submit_batches<Submitter: BatchSubmitter>(
    submitter: Submitter,
    mut receiver: mpsc::Receiver<QueuedSubmit>,
) {
    let mut waiting = Vec::with_capacity(MAX_BATCH);
    while receiver.recv_many(&mut waiting, MAX_BATCH).await > 0 {
        let (batch, answers): (Vec<NewGeneration>, Vec<oneshot::Sender<SubmitAnswer>>) = waiting
            .drain(..)
            .map(|queued| (queued.generation, queued.answer))
            .unzip();
        let outcomes = submit_batch(&submitter, &batch).await;
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            // A caller that stopped waiting (its client went away) has its
            // submit made all the same, as when a reply is lost.
            let _ = answer.send(outcome);
        }
    }
}

/// Every submit of `batch` answered: together in one transaction, or, when
/// that transaction fails, each in its own.
async fn submit_batch<Submitter: BatchSubmitter>(
    submitter: &Submitter,
    batch: &[NewGeneration],
) -> Vec<SubmitAnswer> {
    if let [generation] = batch {
        return vec![submitter.submit_alone(generation).await];
    }
    match submitter.submit_together(batch).await {
        Ok(answers) => answers,
        // Each submit alone would wait as long again for a database that
        // is not there: they all fail now, and their clients retry.
        Err(error) if error.is_unavailable() => batch
            .iter()
            .map(|_| Err(SubmitRefusal::Store(StoreError::Unavailable)))
            .collect(),
        Err(error) => {
            tracing::warn!(
                error = ?error,
                submits = batch.len(),
                "a batch of submits failed; submitting each on its own"
            );
            let mut answers = Vec::with_capacity(batch.len());
            for generation in batch {
                answers.push(submitter.submit_alone(generation).await);
            }
            answers
        }
    }
}
