//! Group commit: appends that arrive while a commit is under way are committed together by
//! the next one, so concurrent branches share commits instead of queueing one per entry.

use std::sync::Mutex;

use agent_op::journal::{Entry, JournalError};
use tokio::sync::oneshot;

type Waiter = oneshot::Sender<Result<(), JournalError>>;

/// Queued entries, each batch with who waits for it.
pub(crate) type Batch = Vec<(Vec<Entry>, Waiter)>;

/// Entries waiting for a commit, with who waits for each batch.
#[derive(Default)]
pub(crate) struct Pending {
    queue: Mutex<Vec<(Vec<Entry>, Waiter)>>,
}

impl Pending {
    /// Queues `entries`; the receiver answers once they are committed (or failed).
    pub(crate) fn push(&self, entries: Vec<Entry>) -> oneshot::Receiver<Result<(), JournalError>> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((entries, tx));
        rx
    }

    /// Takes everything queued (call it holding the writer, so batches commit in order).
    pub(crate) fn take(&self) -> Batch {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Tells every waiter of `batch` how its commit ended.
pub(crate) fn answer(batch: Batch, result: &Result<(), JournalError>) {
    for (_, waiter) in batch {
        let _ = waiter.send(result.clone());
    }
}

/// Waits for the answer to a queued batch.
pub(crate) async fn wait(
    journal: &str,
    rx: oneshot::Receiver<Result<(), JournalError>>,
) -> Result<(), JournalError> {
    match rx.await {
        Ok(result) => result,
        // The committer was dropped mid-commit (its run was cancelled): nothing says the
        // entries reached the journal.
        Err(_) => Err(JournalError::Io {
            journal: journal.to_owned(),
            cause: agent_op::Cause::new(std::io::Error::other(
                "the commit holding this entry was abandoned",
            )),
        }),
    }
}
