//! The journal's own thread: it owns the connection, commits what appends queue (everything
//! queued meanwhile in one transaction: group commit), and answers reads and the close.
//!
//! An append only queues its entries and waits for the answer, so no executor's thread
//! ever blocks on SQLite, and a commit, once queued, happens even if the append that queued
//! it is dropped (a race loser cancelled mid-append).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use agent_op::Cause;
use agent_op::journal::{Entry, JournalError};
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::{Durability, db};
use crate::group::{Answered, Batch, checksums};

/// Where an answer goes.
pub(super) type Reply<T> = oneshot::Sender<Result<T, JournalError>>;

/// What the journal's handle and its thread share.
pub(super) struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when the thread is asleep and there is work.
    work: Condvar,
}

/// Work for the thread, in the order it does it: the queued appends (one commit), then the
/// reads, then the close.
#[derive(Default)]
struct Queue {
    appends: Batch,
    reads: Vec<Reply<Vec<Entry>>>,
    /// SQL run on the journal's connection, for tests that damage a journal.
    #[cfg(test)]
    executes: Vec<(String, Reply<()>)>,
    /// Set when the handle is closed or dropped: the thread then closes the database.
    closing: bool,
    closed: Vec<Reply<()>>,
    /// Whether the thread waits for work (so a queueing handle must wake it).
    asleep: bool,
    /// Whether the thread has ended: what is queued then is never answered, so its
    /// waiters are dropped at once (they hear that their work was abandoned).
    ended: bool,
}

impl Queue {
    /// Drops everything queued: its waiters hear that it was abandoned.
    fn abandon(&mut self) {
        self.appends = Batch::default();
        self.reads.clear();
        self.closed.clear();
        #[cfg(test)]
        self.executes.clear();
    }

    /// Whether nothing but (perhaps) the close is queued.
    fn nothing_queued(&self) -> bool {
        #[cfg(test)]
        if !self.executes.is_empty() {
            return false;
        }
        self.appends.is_empty() && self.reads.is_empty()
    }

    fn has_work(&self) -> bool {
        self.closing || !self.nothing_queued()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Only pushes and takes happen under this lock: a panic cannot leave it inconsistent.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues work with `add`, waking the thread if it sleeps.
    fn queue<T>(&self, add: impl FnOnce(&mut Queue) -> T) -> T {
        let mut queue = self.lock();
        let added = add(&mut queue);
        if queue.ended {
            queue.abandon();
        } else if std::mem::take(&mut queue.asleep) {
            self.work.notify_one();
        }
        added
    }

    /// Queues `entries` for the next commit; the receiver answers once it is done.
    pub(super) fn append(&self, entries: Vec<Entry>) -> Answered {
        // Summed before the lock is taken: every branch of a wide fan-out queues here at once.
        let checksums = checksums(&entries);
        self.queue(|queue| queue.appends.push(entries, checksums))
    }

    /// Queues a read of every entry.
    pub(super) fn read(&self) -> oneshot::Receiver<Result<Vec<Entry>, JournalError>> {
        let (tx, rx) = oneshot::channel();
        self.queue(|queue| queue.reads.push(tx));
        rx
    }

    /// Asks the thread to close the database once its queued work is done; `reply`, if
    /// any, hears how closing went.
    pub(super) fn close(&self, reply: Option<Reply<()>>) {
        self.queue(|queue| {
            queue.closing = true;
            queue.closed.extend(reply);
        });
    }

    /// Queues `sql` to run on the journal's connection.
    #[cfg(test)]
    pub(super) fn execute(&self, sql: &str) -> oneshot::Receiver<Result<(), JournalError>> {
        let (tx, rx) = oneshot::channel();
        self.queue(|queue| queue.executes.push((sql.to_owned(), tx)));
        rx
    }
}

/// Starts the thread of the journal at `path` (`name` in messages), which opens the
/// database and answers `opened` with whether it could.
pub(super) fn start(
    name: Arc<str>,
    path: PathBuf,
    durability: Durability,
    existed: bool,
    opened: Reply<()>,
) -> Result<Arc<Shared>, JournalError> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        work: Condvar::new(),
    });
    let theirs = Arc::clone(&shared);
    let journal = name.to_string();
    let spawned = std::thread::Builder::new()
        .name("agent-journal-sqlite".into())
        .spawn(move || {
            let _ended = Ended(&theirs);
            let conn = match db::open(&name, &path, durability, existed) {
                Ok(conn) => conn,
                Err(e) => {
                    let _ = opened.send(Err(e));
                    return;
                }
            };
            let _ = opened.send(Ok(()));
            run(&name, &theirs, conn);
        });
    match spawned {
        Ok(_) => Ok(shared),
        Err(e) => Err(JournalError::Io {
            journal,
            cause: Cause::new(e),
        }),
    }
}

/// Marks the thread ended however it ends (a panic included), abandoning what is queued.
struct Ended<'a>(&'a Shared);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.ended = true;
        queue.abandon();
    }
}

/// The thread's loop: takes everything queued and does it, until the handle is closed and
/// nothing is left; then closes the database.
fn run(name: &str, shared: &Shared, mut conn: Connection) {
    loop {
        let mut queue = shared.lock();
        while !queue.has_work() {
            queue.asleep = true;
            queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
        queue.asleep = false;
        let appends = std::mem::take(&mut queue.appends);
        let reads = std::mem::take(&mut queue.reads);
        #[cfg(test)]
        let executes = std::mem::take(&mut queue.executes);
        let closing = queue.closing;
        drop(queue);
        if !appends.is_empty() {
            let Batch {
                appends,
                checksums,
                waiters,
            } = appends;
            let result = db::insert(name, &mut conn, appends.iter().flatten(), &checksums);
            waiters.answer(&result);
            // Freed here, after the answer: the appending tasks need not wait for it.
            drop(appends);
        }
        for read in reads {
            let _ = read.send(db::entries(name, &conn));
        }
        #[cfg(test)]
        for (sql, reply) in executes {
            let _ = reply.send(conn.execute_batch(&sql).map_err(|e| db::database(name, e)));
        }
        if closing {
            let mut queue = shared.lock();
            if !queue.nothing_queued() {
                continue;
            }
            let replies = std::mem::take(&mut queue.closed);
            drop(queue);
            // Closing checkpoints the log into the database file.
            let result = conn.close().map_err(|(_, e)| db::database(name, e));
            for reply in replies {
                let _ = reply.send(result.clone());
            }
            return;
        }
    }
}
