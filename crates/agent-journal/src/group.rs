//! Group commit: appends that arrive while a commit is under way are committed together by
//! the next one, so concurrent branches share commits instead of queueing one per entry.

#[cfg(feature = "postgres")]
use std::sync::Mutex;

use agent_op::journal::{Entry, JournalError};
use tokio::sync::oneshot;

type Waiter = oneshot::Sender<Result<(), JournalError>>;

/// The answer to a queued append: whether its entries were committed.
pub(crate) type Answered = oneshot::Receiver<Result<(), JournalError>>;

/// Entries taken for one commit, in the order they were queued, and who waits for them.
#[derive(Default)]
pub(crate) struct Batch {
    /// The entries of each queued append, in order. Kept apart, not gathered into one
    /// vector: a wide fan-out queues thousands, which would be moved again at every growth.
    pub(crate) appends: Vec<Vec<Entry>>,
    /// The checksum of each entry, in order: summed when the entry is queued, while what it
    /// holds was just written (in a large batch, reading it again later misses the cache).
    pub(crate) checksums: Vec<u32>,
    /// Who waits for them.
    pub(crate) waiters: Waiters,
}

impl Batch {
    /// Whether no append is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.0.is_empty()
    }

    /// Queues `entries`, with their `checksums`; the receiver answers once they are
    /// committed (or failed).
    pub(crate) fn push(
        &mut self,
        entries: Vec<Entry>,
        checksums: impl IntoIterator<Item = u32>,
    ) -> Answered {
        let (tx, rx) = oneshot::channel();
        self.checksums.extend(checksums);
        self.appends.push(entries);
        self.waiters.0.push(tx);
        rx
    }
}

/// Who waits for a batch's commit.
#[derive(Default)]
pub(crate) struct Waiters(Vec<Waiter>);

impl Waiters {
    /// Tells every waiter how the commit ended.
    pub(crate) fn answer(self, result: &Result<(), JournalError>) {
        for waiter in self.0 {
            let _ = waiter.send(result.clone());
        }
    }
}

/// Entries waiting for a commit, with who waits for them: the PostgreSQL journal's queue,
/// which its appends take turns at committing. (The SQLite journal's thread keeps its own.)
#[cfg(feature = "postgres")]
#[derive(Default)]
pub(crate) struct Pending {
    queue: Mutex<Batch>,
}

#[cfg(feature = "postgres")]
impl Pending {
    /// Queues `entries`; the receiver answers once they are committed (or failed).
    pub(crate) fn push(&self, entries: Vec<Entry>) -> Answered {
        // Summed before the lock is taken: every branch of a wide fan-out queues here at
        // once, and the committer takes the queue under the same lock.
        let checksums = checksums(&entries);
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.push(entries, checksums)
    }

    /// Takes everything queued (call it holding the writer, so batches commit in order).
    pub(crate) fn take(&self) -> Batch {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The checksums of `entries`, summed now. (An append holds one entry, almost always: the
/// rest go into a vector only when there are any.)
pub(crate) fn checksums(entries: &[Entry]) -> impl Iterator<Item = u32> + use<> {
    let first = entries.first().map(Entry::checksum);
    let rest: Vec<u32> = entries.iter().skip(1).map(Entry::checksum).collect();
    first.into_iter().chain(rest)
}

/// What an append waits for once its entries are queued.
#[cfg(feature = "postgres")]
pub(crate) enum Turn<G> {
    /// A commit already took its entries and ended so.
    Answered(Result<(), JournalError>),
    /// The writer's turn: commit what is queued (its own entries among them).
    Writer(G),
}

/// Waits for `answered` or for the writer `lock`, whichever comes first. An append whose
/// entries the commit under way will not take waits for the writer; one whose entries a
/// commit took waits for that commit only, rather than for a turn at the writer it would
/// find nothing left to do with (in a wide fan-out, thousands of such turns pass the writer
/// on one after another).
#[cfg(feature = "postgres")]
pub(crate) async fn turn<G>(
    journal: &str,
    answered: &mut Answered,
    lock: impl std::future::Future<Output = G>,
) -> Turn<G> {
    tokio::select! {
        biased;
        result = answered => Turn::Answered(settle(journal, result)),
        guard = lock => Turn::Writer(guard),
    }
}

/// Waits for the answer to a queued batch.
pub(crate) async fn wait(journal: &str, answered: Answered) -> Result<(), JournalError> {
    settle(journal, answered.await)
}

fn settle(
    journal: &str,
    answer: Result<Result<(), JournalError>, oneshot::error::RecvError>,
) -> Result<(), JournalError> {
    match answer {
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
