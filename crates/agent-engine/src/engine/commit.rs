//! Committing a run's journal entries: directly from the branch that made them, or, where
//! the scheduler can spawn a task, by one committer beside the branches.
//!
//! A wide durable fan-out makes thousands of entries at once. Built and appended by the
//! branches themselves, each costs the task that polls them all a model request's
//! fingerprint and summary (the prompt serialized and hashed twice), the backend's checksum
//! and its group-commit bookkeeping. Handed to a committer task instead, a branch only queues
//! what the entry is made of and waits; the committer builds the queued entries and appends
//! them together, on another thread.

use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;

use agent_op::journal::{Entry, Journal, JournalError, Key, Request};
use agent_op::{BoxFuture, Cause, Prompt};
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use crate::engine::scheduler::Spawn;

/// The committers whose task is running, with the address of their sink: a run about to
/// read a journal waits for those of its journal first (see [`settled`]).
static RUNNING: Mutex<Vec<(usize, Weak<Shared>)>> = Mutex::new(Vec::new());

/// The address of `journal`'s value: the same for every `Arc` (or reference) to it.
fn address(journal: &dyn Journal) -> usize {
    std::ptr::from_ref(journal).cast::<()>() as usize
}

fn running() -> std::sync::MutexGuard<'static, Vec<(usize, Weak<Shared>)>> {
    // Only pushes and removals happen under this lock; a panic cannot leave it inconsistent.
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the entries handed over to a committer of `journal` have been appended (or
/// failed): the committer of a run that was dropped still appends what its branches gave it,
/// and a run that reads the journal before it has must not take those effects for undone
/// (it would make them again, and then fail to append them). The answer is the dropped
/// run's; whatever it is, the journal says the rest.
pub(crate) async fn settled(journal: &dyn Journal) {
    let at = address(journal);
    let committers: Vec<Arc<Shared>> = running()
        .iter()
        .filter(|(sink, _)| *sink == at)
        .filter_map(|(_, shared)| shared.upgrade())
        .collect();
    for shared in committers {
        let answer = {
            let mut queue = shared.lock();
            if !queue.running {
                continue;
            }
            // Answered once everything queued before it is appended (see `Task::run`).
            let (tx, rx) = oneshot::channel();
            queue.waiters.push(tx);
            rx
        };
        let _ = answer.await;
    }
}

/// An entry waiting for its commit, built or not yet.
pub(crate) enum Deferred {
    /// Built already.
    Entry(Entry),
    /// A model call's entry, whose request's fingerprint and summary are worked out where
    /// it is committed.
    Model {
        key: Key,
        model: String,
        prompt: Arc<Prompt>,
        result: Box<RawValue>,
    },
}

impl Deferred {
    /// The entry.
    fn build(self) -> Entry {
        match self {
            Deferred::Entry(entry) => entry,
            Deferred::Model {
                key,
                model,
                prompt,
                result,
            } => Request::model(&model, &prompt).entry(key, result),
        }
    }
}

/// Commits entries to a run's sink, in the order they are handed over.
pub(crate) struct Committer {
    shared: Arc<Shared>,
    /// Where the committer task is started; `None`: each caller appends its own entries.
    spawn: Option<Spawn>,
}

/// What the committer task and the branches share.
struct Shared {
    sink: Arc<dyn Journal>,
    queue: Mutex<Queue>,
}

/// Who waits for a commit, to be told how it ended.
type Waiter = oneshot::Sender<Result<(), JournalError>>;

/// Entries handed over and not taken yet, who waits for them, and whether a committer task
/// is running (it takes them before it ends).
#[derive(Default)]
struct Queue {
    entries: Vec<Deferred>,
    waiters: Vec<Waiter>,
    running: bool,
    /// The first append that failed: every commit after it fails the same way, since
    /// appending what came after would leave a gap in the journal.
    failed: Option<JournalError>,
}

impl Committer {
    /// Commits to `sink`, with a committer task started by `spawn` when there is one.
    pub(crate) fn new(sink: Arc<dyn Journal>, spawn: Option<Spawn>) -> Committer {
        Committer {
            shared: Arc::new(Shared {
                sink,
                queue: Mutex::new(Queue::default()),
            }),
            spawn,
        }
    }

    /// Commits `entries`, in order, after every entry handed over before them; returns once
    /// they are durable. With a committer task, empty `entries` wait for the commits handed
    /// over before.
    pub(crate) async fn commit(
        &self,
        entries: impl IntoIterator<Item = Deferred>,
    ) -> Result<(), JournalError> {
        let Some(spawn) = &self.spawn else {
            let entries: Vec<Entry> = entries.into_iter().map(Deferred::build).collect();
            if entries.is_empty() {
                return Ok(());
            }
            return self.shared.sink.append(entries).await;
        };
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queue = self.shared.lock();
            queue.entries.extend(entries);
            queue.waiters.push(tx);
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            running().push((address(&*self.shared.sink), Arc::downgrade(&self.shared)));
            let task = Task {
                shared: Arc::clone(&self.shared),
                ended: false,
            };
            spawn(Box::pin(task.run()));
        }
        rx.await.unwrap_or_else(|_| {
            Err(JournalError::Io {
                journal: self.shared.sink.describe(),
                cause: Cause::new(std::io::Error::other(
                    "the task committing the run's entries stopped before it answered (its \
                     runtime shut down, or it panicked)",
                )),
            })
        })
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes this committer (and any whose run is gone) off [`RUNNING`]: its task ended.
    /// Called with the queue's lock held (the lock order: the queue's, then [`RUNNING`]'s).
    fn unregister(&self) {
        let this: *const Shared = self;
        running().retain(|(_, shared)| {
            shared.strong_count() > 0 && !std::ptr::eq(shared.as_ptr(), this)
        });
    }

    /// Tells `waiters` how their commit ended, keeping a failure for the commits after it
    /// (its waiters may all be gone: branches cancelled while they waited).
    fn answer(&self, waiters: Vec<Waiter>, result: Result<(), JournalError>) {
        if let Err(error) = &result {
            self.lock().failed.get_or_insert_with(|| error.clone());
        }
        for waiter in waiters {
            let _ = waiter.send(result.clone());
        }
    }
}

/// The committer task: appends what is queued, batch after batch, until nothing is.
/// Dropped before it ends (its runtime shut down, even before it first ran), it tells
/// whoever waits, by dropping their answers' senders, and the next commit starts a new one.
struct Task {
    shared: Arc<Shared>,
    ended: bool,
}

/// An append under way, with who waits for it.
type InFlight<'a> = (BoxFuture<'a, Result<(), JournalError>>, Vec<Waiter>);

impl Task {
    async fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        // At most one append is under way, so entries are appended in the order they were
        // handed over whatever the backend; the next batch is built meanwhile.
        let mut in_flight: Option<InFlight<'_>> = None;
        loop {
            let (entries, waiters) = {
                let mut queue = shared.lock();
                if queue.waiters.is_empty() && in_flight.is_none() {
                    queue.running = false;
                    self.ended = true;
                    // Under the queue's lock: a commit that starts the next task registers
                    // it after this.
                    shared.unregister();
                    return;
                }
                (
                    std::mem::take(&mut queue.entries),
                    std::mem::take(&mut queue.waiters),
                )
            };
            let entries: Vec<Entry> = entries.into_iter().map(Deferred::build).collect();
            if let Some((append, earlier)) = in_flight.take() {
                shared.answer(earlier, append.await);
            }
            if waiters.is_empty() {
                continue;
            }
            let failed = shared.lock().failed.clone();
            if let Some(error) = failed {
                shared.answer(waiters, Err(error));
                continue;
            }
            if entries.is_empty() {
                shared.answer(waiters, Ok(()));
                continue;
            }
            // Polled once here, so the backend starts committing before the next batch is
            // built (the SQLite journal hands its statement over at once).
            let mut append = shared.sink.append(entries);
            match std::future::poll_fn(|cx| Poll::Ready(append.as_mut().poll(cx))).await {
                Poll::Ready(result) => shared.answer(waiters, result),
                Poll::Pending => in_flight = Some((append, waiters)),
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if !self.ended {
            let mut queue = self.shared.lock();
            queue.running = false;
            // Their waiters are told they failed: committed later, they would be a surprise.
            queue.waiters.clear();
            queue.entries.clear();
            self.shared.unregister();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_op::journal::EntryKind;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A journal that keeps what it is given, counting appends.
    #[derive(Default)]
    struct Kept {
        entries: Mutex<Vec<Entry>>,
        appends: AtomicUsize,
    }

    impl Journal for Kept {
        fn describe(&self) -> String {
            "kept".to_owned()
        }
        fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
            Box::pin(async { Ok(self.entries.lock().unwrap().clone()) })
        }
        fn append(&self, entries: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
            Box::pin(async move {
                tokio::task::yield_now().await;
                self.appends.fetch_add(1, Ordering::Relaxed);
                self.entries.lock().unwrap().extend(entries);
                Ok(())
            })
        }
    }

    fn tokio_spawn() -> Spawn {
        Arc::new(|task| drop(tokio::spawn(task)))
    }

    fn model(seq: u64) -> Deferred {
        Deferred::Model {
            key: Key {
                branch: seq.to_string(),
                seq,
            },
            model: "m".to_owned(),
            prompt: Arc::new(Prompt::new().user(format!("q{seq}"))),
            result: serde_json::value::to_raw_value(&seq).unwrap(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committer_task_commits_concurrent_entries_together_as_their_branches_would() {
        let kept = Arc::new(Kept::default());
        let committer = Arc::new(Committer::new(kept.clone(), Some(tokio_spawn())));
        let commits = (0..200u64).map(|seq| {
            let committer = committer.clone();
            async move { committer.commit(vec![model(seq)]).await }
        });
        for result in futures_util::future::join_all(commits).await {
            result.unwrap();
        }
        let entries = kept.entries.lock().unwrap().clone();
        assert_eq!(entries.len(), 200);
        // Built as a branch builds them itself.
        for entry in &entries {
            let seq = entry.key.seq;
            let prompt = Prompt::new().user(format!("q{seq}"));
            let expected = Request::model("m", &prompt).entry(
                entry.key.clone(),
                serde_json::value::to_raw_value(&seq).unwrap(),
            );
            assert_eq!(entry, &expected);
            assert_eq!(entry.kind, EntryKind::Model);
        }
        // Queued while a commit was under way, and taken together by the next.
        assert!(kept.appends.load(Ordering::Relaxed) < 200);
    }

    #[tokio::test]
    async fn without_a_task_each_caller_appends_its_own_entries() {
        let kept = Arc::new(Kept::default());
        let committer = Committer::new(kept.clone(), None);
        committer.commit(vec![model(1), model(2)]).await.unwrap();
        committer.commit(Vec::new()).await.unwrap();
        assert_eq!(kept.appends.load(Ordering::Relaxed), 1);
        let seqs: Vec<u64> = kept
            .entries
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.key.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
    }

    /// A journal whose appends fail, counting them.
    #[derive(Default)]
    struct Failing {
        appends: AtomicUsize,
    }

    impl Journal for Failing {
        fn describe(&self) -> String {
            "failing".to_owned()
        }
        fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn append(&self, _: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
            self.appends.fetch_add(1, Ordering::Relaxed);
            Box::pin(async {
                Err(JournalError::Io {
                    journal: "failing".to_owned(),
                    cause: Cause::new(std::io::Error::other("disk full")),
                })
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_commit_is_every_waiters_error_and_every_later_commits() {
        let failing = Arc::new(Failing::default());
        let committer = Committer::new(failing.clone(), Some(tokio_spawn()));
        for _ in 0..2 {
            let error = committer.commit(vec![model(1)]).await.unwrap_err();
            assert!(error.to_string().contains("disk full"), "{error:?}");
        }
        // The barrier at a run's end too, and nothing more was tried after the gap.
        assert!(committer.commit(Vec::new()).await.is_err());
        assert_eq!(failing.appends.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_committer_stopped_with_its_runtime_fails_its_waiters_instead_of_hanging() {
        let kept = Arc::new(Kept::default());
        // A spawner whose tasks never run: dropped at once, as at a runtime's shutdown.
        let committer = Committer::new(kept, Some(Arc::new(drop)));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for _ in 0..2 {
            let error = rt.block_on(committer.commit(vec![model(1)])).unwrap_err();
            assert!(error.to_string().contains("stopped"), "{error}");
        }
    }
}
