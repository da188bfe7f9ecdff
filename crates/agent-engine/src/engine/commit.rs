//! Committing a run's journal entries: directly from the branch that made them, or, where
//! the scheduler can spawn a task, by one committer beside the branches.
//!
//! A wide durable fan-out makes thousands of entries at once. Built and appended by the
//! branches themselves, each costs the task that polls them all a model request's
//! fingerprint and summary (the prompt serialized and hashed twice), the backend's checksum
//! and its group-commit bookkeeping. Handed to a committer task instead, a branch only queues
//! what the entry is made of and waits; the committer builds the queued entries and appends
//! them together, on another thread.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;

use agent_op::journal::{Entry, Journal, JournalError, Request};
use agent_op::{BoxFuture, Cause, Prompt, ProviderError, Response, TraceId};
use tokio::sync::oneshot;

use crate::engine::journal::Journaling;
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
            queue.push(std::iter::empty(), tx);
            rx
        };
        let _ = answer.await;
    }
}

/// An entry waiting for its commit, built or not yet.
pub(crate) enum Deferred {
    /// Built already.
    Entry(Entry),
    /// A model call's entry, made where it is committed: its key (the branch's path as
    /// text), its request's fingerprint and summary (when not built already), and its
    /// result's JSON. The branch that made the call waits for the commit and then takes its
    /// model name and result back out of `call`, so what it allocated is freed where it was
    /// allocated, not on the committer's or the backend's thread.
    Model {
        /// The branch that made the call.
        branch: TraceId,
        /// The call's number in it.
        seq: u64,
        /// The request, when it was built to ask the journal.
        request: Option<Request>,
        prompt: Arc<Prompt>,
        call: Arc<ModelCall>,
    },
}

/// A model call as its entry records it: the model asked, and what it answered.
#[derive(Clone)]
pub(crate) struct ModelCall {
    pub(crate) model: String,
    pub(crate) result: Result<Response, ProviderError>,
}

impl Deferred {
    /// The entry, in the run whose id is `root` (keys hold branch paths below it). A model
    /// call's result that does not serialize (no `Response` fails to) is
    /// [`JournalError::Malformed`].
    fn build(self, journal: &dyn Journal, root: &TraceId) -> Result<Entry, JournalError> {
        match self {
            Deferred::Entry(entry) => Ok(entry),
            Deferred::Model {
                branch,
                seq,
                request,
                prompt,
                call,
            } => {
                let key = Journaling::branch_key(root, &branch, seq);
                let result = match serde_json::value::to_raw_value(&call.result) {
                    Ok(result) => result,
                    Err(e) => {
                        return Err(JournalError::Malformed {
                            journal: journal.describe(),
                            at: key.to_string(),
                            cause: Cause::new(e),
                        });
                    }
                };
                let request = request.unwrap_or_else(|| Request::model(&call.model, &prompt));
                Ok(request.entry(key, result))
            }
        }
    }
}

/// Builds `entries`, in order; the first that cannot be built is the error.
fn build_all(
    entries: impl IntoIterator<Item = Deferred>,
    journal: &dyn Journal,
    root: &TraceId,
) -> Result<Vec<Entry>, JournalError> {
    entries
        .into_iter()
        .map(|entry| entry.build(journal, root))
        .collect()
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
    /// The run's id: entries' keys hold branch paths below it.
    root: TraceId,
    queue: Mutex<Queue>,
}

/// Who waits for a commit, to be told how it ended.
type Waiter = oneshot::Sender<Result<(), JournalError>>;

/// Entries handed over and not taken yet, who waits for them, and whether a committer task
/// is running (it takes them before it ends).
#[derive(Default)]
struct Queue {
    entries: VecDeque<Deferred>,
    /// Who waits, in the order they handed their entries over, and how many each did.
    waiters: VecDeque<(Waiter, usize)>,
    running: bool,
    /// The first append that failed: every commit after it fails the same way, since
    /// appending what came after would leave a gap in the journal.
    failed: Option<JournalError>,
}

/// The most entries the committer task appends at once (more when one commit hands over
/// more). A wide fan-out hands its entries over faster than they are built and appended, so
/// unbounded batches grew to thousands: the backend started on the last one late, and its
/// branches all waited for it. Batches of about a millisecond's work keep both sides busy
/// (a durable fan-out of 10,000 calls: 7 % faster than unbounded, 4 % faster than 500, in
/// alternating runs).
const MAX_BATCH: usize = 1000;

impl Queue {
    /// Queues `entries`, for `waiter`.
    fn push(&mut self, entries: impl IntoIterator<Item = Deferred>, waiter: Waiter) {
        let before = self.entries.len();
        self.entries.extend(entries);
        self.waiters
            .push_back((waiter, self.entries.len() - before));
    }

    /// Takes the next batch: the entries of the first waiters, up to [`MAX_BATCH`] (and at
    /// least the first waiter's), and those waiters.
    fn take_batch(&mut self) -> (Vec<Deferred>, Vec<Waiter>) {
        let mut entries = 0;
        let mut waiters = 0;
        for &(_, count) in &self.waiters {
            if waiters > 0 && entries + count > MAX_BATCH {
                break;
            }
            entries += count;
            waiters += 1;
        }
        (
            self.entries.drain(..entries).collect(),
            self.waiters
                .drain(..waiters)
                .map(|(waiter, _)| waiter)
                .collect(),
        )
    }
}

impl Committer {
    /// Commits the run `root`'s entries to `sink`, with a committer task started by `spawn`
    /// when there is one.
    pub(crate) fn new(sink: Arc<dyn Journal>, spawn: Option<Spawn>, root: TraceId) -> Committer {
        Committer {
            shared: Arc::new(Shared {
                sink,
                root,
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
            let shared = &self.shared;
            let entries = build_all(entries, &*shared.sink, &shared.root)?;
            if entries.is_empty() {
                return Ok(());
            }
            return self.shared.sink.append(entries).await;
        };
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queue = self.shared.lock();
            queue.push(entries, tx);
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
                queue.take_batch()
            };
            let built = build_all(entries, &*shared.sink, &shared.root);
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
            // An entry that cannot be made fails its batch and every commit after it, as a
            // failed append does: appending what came after would leave a gap.
            let entries = match built {
                Ok(entries) => entries,
                Err(error) => {
                    shared.answer(waiters, Err(error));
                    continue;
                }
            };
            if entries.is_empty() {
                shared.answer(waiters, Ok(()));
                continue;
            }
            // Polled once here, so the backend starts committing before the next batch is
            // built (the SQLite journal queues it for its thread at once).
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
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A journal that keeps what it is given and the size of every append. Its appends
    /// wait for a permit of `gate` (open unless made [`Kept::gated`]).
    struct Kept {
        gate: tokio::sync::Semaphore,
        started: AtomicBool,
        sizes: Mutex<Vec<usize>>,
        entries: Mutex<Vec<Entry>>,
    }

    impl Default for Kept {
        fn default() -> Kept {
            Kept::with_permits(tokio::sync::Semaphore::MAX_PERMITS)
        }
    }

    impl Kept {
        /// A journal whose appends wait until permits are added to its gate.
        fn gated() -> Kept {
            Kept::with_permits(0)
        }

        fn with_permits(permits: usize) -> Kept {
            Kept {
                gate: tokio::sync::Semaphore::new(permits),
                started: AtomicBool::new(false),
                sizes: Mutex::new(Vec::new()),
                entries: Mutex::new(Vec::new()),
            }
        }

        fn appends(&self) -> usize {
            self.sizes.lock().unwrap().len()
        }
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
                self.started.store(true, Ordering::SeqCst);
                tokio::task::yield_now().await;
                drop(self.gate.acquire().await.unwrap());
                self.sizes.lock().unwrap().push(entries.len());
                self.entries.lock().unwrap().extend(entries);
                Ok(())
            })
        }
    }

    fn tokio_spawn() -> Spawn {
        Arc::new(|task| drop(tokio::spawn(task)))
    }

    /// The run every test's entries belong to.
    fn root() -> TraceId {
        TraceId::from("quiet-run-0001")
    }

    /// A model call of branch `seq` of [`root`], its `seq`th effect, answering `q{seq}`.
    fn model(seq: u64) -> Deferred {
        Deferred::Model {
            branch: root().child(seq as usize),
            seq,
            request: None,
            prompt: Arc::new(Prompt::new().user(format!("q{seq}"))),
            call: Arc::new(ModelCall {
                model: "m".to_owned(),
                result: Ok(Response::text(format!("a{seq}"))),
            }),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_committer_task_commits_concurrent_entries_together_as_their_branches_would() {
        let kept = Arc::new(Kept::default());
        let committer = Arc::new(Committer::new(kept.clone(), Some(tokio_spawn()), root()));
        let commits = (0..200u64).map(|seq| {
            let committer = committer.clone();
            async move { committer.commit(vec![model(seq)]).await }
        });
        for result in futures_util::future::join_all(commits).await {
            result.unwrap();
        }
        let entries = kept.entries.lock().unwrap().clone();
        assert_eq!(entries.len(), 200);
        // Built as a branch builds them itself, keyed by the branch's path below the run.
        for entry in &entries {
            let seq = entry.key.seq;
            assert_eq!(entry.key.branch, seq.to_string());
            let prompt = Prompt::new().user(format!("q{seq}"));
            let answer: Result<Response, ProviderError> = Ok(Response::text(format!("a{seq}")));
            let expected = Request::model("m", &prompt).entry(
                entry.key.clone(),
                serde_json::value::to_raw_value(&answer).unwrap(),
            );
            assert_eq!(entry, &expected);
            assert_eq!(entry.kind, EntryKind::Model);
        }
        // Queued while a commit was under way, and taken together by the next.
        assert!(kept.appends() < 200);
    }

    #[tokio::test]
    async fn without_a_task_each_caller_appends_its_own_entries() {
        let kept = Arc::new(Kept::default());
        let committer = Committer::new(kept.clone(), None, root());
        committer.commit(vec![model(1), model(2)]).await.unwrap();
        committer.commit(Vec::new()).await.unwrap();
        assert_eq!(kept.appends(), 1);
        let seqs: Vec<u64> = kept
            .entries
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.key.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
    }

    /// Entries handed over while an append is under way are appended in batches of at most
    /// `MAX_BATCH`, in the order they were handed over; one commit of more is appended whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_entries_are_appended_in_bounded_batches_in_order() {
        let gated = Arc::new(Kept::gated());
        let committer = Arc::new(Committer::new(gated.clone(), Some(tokio_spawn()), root()));
        // The first commit's append waits at the gate; everything after it queues.
        let first = tokio::spawn({
            let committer = committer.clone();
            async move { committer.commit(vec![model(0)]).await }
        });
        while !gated.started.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        // Handed over in this order: each commit queues its entries when first polled.
        let mut commits: Vec<BoxFuture<'_, Result<(), JournalError>>> = (1..=2_500u64)
            .map(|seq| Box::pin(committer.commit(vec![model(seq)])) as BoxFuture<'_, _>)
            .collect();
        commits.push(Box::pin(
            committer.commit((2_501..4_001u64).map(model).collect::<Vec<_>>()),
        ));
        let open = async {
            while committer.shared.lock().entries.len() < 4_000 {
                tokio::task::yield_now().await;
            }
            gated.gate.add_permits(usize::MAX >> 4);
        };
        let (results, ()) = tokio::join!(futures_util::future::join_all(commits), open);
        first.await.unwrap().unwrap();
        for result in results {
            result.unwrap();
        }
        let sizes = gated.sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 4_001, "{sizes:?}");
        assert_eq!(sizes.first(), Some(&1), "{sizes:?}");
        assert_eq!(sizes.last(), Some(&1_500), "{sizes:?}");
        assert!(
            sizes[1..sizes.len() - 1].iter().all(|&n| n <= MAX_BATCH),
            "{sizes:?}"
        );
        let seqs: Vec<u64> = gated
            .entries
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.key.seq)
            .collect();
        assert_eq!(seqs, (0..4_001).collect::<Vec<_>>());
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
        let committer = Committer::new(failing.clone(), Some(tokio_spawn()), root());
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
        let committer = Committer::new(kept, Some(Arc::new(drop)), root());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for _ in 0..2 {
            let error = rt.block_on(committer.commit(vec![model(1)])).unwrap_err();
            assert!(error.to_string().contains("stopped"), "{error}");
        }
    }
}
