//! Cancellation safety: an operation dropped at any await point leaves the store whole.
//!
//! `timeout`, `race` and the abort token all stop a memory operation the same way: they drop
//! its future, wherever it happens to be. [`cancelled_operations_leave_the_store_usable`]
//! does that to every operation of the trait, at every await point it reaches — after its
//! first poll, after its second, and so on until a run completes — and also at arbitrary
//! moments (polls a few microseconds apart), and after each drop checks that:
//!
//! - the same handle and a second handle on the same store still work, promptly (a lock left
//!   held or a connection left inside a transaction makes the next operations fail or hang);
//! - the store is consistent: `count` agrees with the listing, every listed entry reads back
//!   whole with its tags, and a fresh entry is found by search;
//! - the backend's own integrity check ([`Fixture::with_integrity_check`]) passes.
//!
//! [`poll_then_drop`] and [`poll_spaced_then_drop`] are public so a backend can put its own
//! extra operations (a batch insert, say) through the same treatment.

use std::collections::{BTreeMap, BTreeSet};
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use agent_op::{BoxFuture, MemoryBackend, MemoryError, MemoryId, PrunePolicy, Tag};

use super::{Factory, Fixture, fresh, memory, ok};

/// Polls `future` until it completes or has been polled `polls` times, then drops it. Each
/// poll after the first happens when the future wakes its task, so the future is dropped
/// exactly at its `polls`-th await point. `None` when it was dropped unfinished.
pub async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut done = 0;
    poll_fn(|cx| {
        done += 1;
        match future.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending if done >= polls => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Polls `future` `polls` times, `gap` apart whether or not it asked to be woken, then drops
/// it unless it completed. This lands drops at moments [`poll_then_drop`] cannot: while work
/// the future handed to another thread is half done.
///
/// It sleeps the calling thread between polls, so run it on a multi-threaded runtime.
pub async fn poll_spaced_then_drop<F: Future>(
    future: F,
    polls: usize,
    gap: Duration,
) -> Option<F::Output> {
    let mut future = pin!(future);
    for i in 0..polls {
        if i > 0 {
            std::thread::sleep(gap);
        }
        let polled = poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
        if let Poll::Ready(out) = polled {
            return Some(out);
        }
    }
    None
}

/// How long the checks after a drop may take: only catches a hang (a lock left held by a
/// dropped operation blocks forever), so generous for loaded machines.
const PROMPT: Duration = Duration::from_secs(60);

/// An operation dropped after this many wake-ups without finishing fails the check: the
/// operations of a small store complete in far fewer.
const MAX_POLLS: usize = 5_000;

/// Spaced drops: after this many polls ...
const SPACED_POLLS: [usize; 4] = [1, 2, 3, 5];
/// ... this far apart.
const SPACED_GAPS_US: [u64; 3] = [10, 60, 250];

/// The operations of [`MemoryBackend`], each run against the store's current contents.
#[derive(Copy, Clone, Debug)]
enum Operation {
    Store,
    Search,
    SearchCandidates,
    RecordAccess,
    Recent,
    ByTags,
    Get,
    Count,
    Delete,
    Prune,
}

const OPERATIONS: [Operation; 10] = [
    Operation::Store,
    Operation::Search,
    Operation::SearchCandidates,
    Operation::RecordAccess,
    Operation::Recent,
    Operation::ByTags,
    Operation::Get,
    Operation::Count,
    Operation::Delete,
    Operation::Prune,
];

/// What one run of an operation works on.
struct Target {
    /// Existing entries (for `get`, `record_access`).
    ids: Vec<MemoryId>,
    /// An entry this run may delete.
    victim: MemoryId,
    tags: Vec<Tag>,
    policy: PrunePolicy,
}

impl Operation {
    /// Adds what one run of the operation consumes (an entry to delete, duplicates to merge).
    async fn prepare(self, b: &dyn MemoryBackend, ids: &[MemoryId], round: usize) -> Target {
        let victim = match self {
            Operation::Delete => ok(
                b.store(memory(&format!("to be deleted {round}"), &["victim"]))
                    .await,
                "store",
            ),
            _ => ids[0].clone(),
        };
        if let Operation::Prune = self {
            for _ in 0..2 {
                ok(
                    b.store(memory(&format!("duplicate fact {round}"), &["dup"]))
                        .await,
                    "store",
                );
            }
        }
        Target {
            ids: ids.to_vec(),
            victim,
            tags: vec![Tag::from("fact")],
            policy: PrunePolicy::new()
                .max_entries(10_000)
                .max_age(Duration::from_secs(365 * 24 * 3600))
                .merge_similarity(0.999),
        }
    }

    /// Starts one run of the operation, as the engine would.
    fn start<'a>(
        self,
        b: &'a dyn MemoryBackend,
        t: &'a Target,
        round: usize,
    ) -> BoxFuture<'a, Result<(), MemoryError>> {
        Box::pin(async move {
            match self {
                Operation::Store => {
                    let content = format!("stored while cancelled {round}");
                    b.store(memory(&content, &["cancelled", "fact"])).await?;
                }
                Operation::Search => {
                    b.search("capital of France", 3).await?;
                }
                Operation::SearchCandidates => {
                    b.search_candidates("Rust ownership", 3).await?;
                }
                Operation::RecordAccess => {
                    b.record_access(&t.ids).await?;
                }
                Operation::Recent => {
                    b.recent(4).await?;
                }
                Operation::ByTags => {
                    b.by_tags(&t.tags).await?;
                }
                Operation::Get => {
                    b.get(&t.ids[1]).await?;
                }
                Operation::Count => {
                    b.count().await?;
                }
                Operation::Delete => {
                    b.delete(&t.victim).await?;
                }
                Operation::Prune => {
                    b.prune(&t.policy).await?;
                }
            }
            Ok(())
        })
    }
}

/// Every operation of the trait, dropped at each of its await points in turn and at
/// arbitrary moments, leaves the store usable from this handle and another, consistent, and
/// passing the backend's integrity check. See the [module docs](self).
pub async fn cancelled_operations_leave_the_store_usable(factory: &impl Factory) {
    for operation in OPERATIONS {
        let (f, _clock) = fresh(factory).await;
        let b = f.backend().as_ref();
        let mut seed = Vec::new();
        for (i, fact) in super::FACTS.iter().enumerate() {
            let tags: &[&str] = if i % 2 == 0 {
                &["fact", "even"]
            } else {
                &["fact"]
            };
            seed.push(ok(b.store(memory(fact, tags)).await, "store"));
        }
        let mut round = 0;

        // At each await point in turn, until one run completes.
        let mut completed = false;
        for polls in 1..=MAX_POLLS {
            round += 1;
            let target = operation.prepare(b, &seed, round).await;
            let outcome = poll_then_drop(operation.start(b, &target, round), polls).await;
            if let Some(result) = outcome {
                ok(result, &format!("{operation:?} (run to completion)"));
                completed = true;
            }
            check_usable(&f, operation, &format!("after {polls} polls"), round).await;
            if completed {
                break;
            }
        }
        assert!(
            completed,
            "{operation:?} did not complete within {MAX_POLLS} wake-ups"
        );

        // At arbitrary moments: polls a few microseconds apart.
        for polls in SPACED_POLLS {
            for gap in SPACED_GAPS_US.map(Duration::from_micros) {
                round += 1;
                let target = operation.prepare(b, &seed, round).await;
                let run = operation.start(b, &target, round);
                if let Some(result) = poll_spaced_then_drop(run, polls, gap).await {
                    ok(result, &format!("{operation:?} (spaced polls)"));
                }
                let when = format!("after {polls} polls {gap:?} apart");
                check_usable(&f, operation, &when, round).await;
            }
        }
    }
}

/// The checks after a dropped operation, each bounded by [`PROMPT`].
async fn check_usable(f: &Fixture, operation: Operation, when: &str, round: usize) {
    let what = format!("after dropping {operation:?} {when}");
    let checks = async {
        for (handle, b) in [("this", f.backend()), ("a second", f.second_handle())] {
            let probe = format!("probe {round} through {handle} handle: {operation:?} {when}");
            let id = b
                .store(memory(&probe, &["probe"]))
                .await
                .unwrap_or_else(|e| panic!("{what}: store on {handle} handle failed: {e}"));
            let hits = b
                .search(&probe, 1)
                .await
                .unwrap_or_else(|e| panic!("{what}: search on {handle} handle failed: {e}"));
            assert_eq!(
                hits.first().map(|h| &h.entry.id),
                Some(&id),
                "{what}: search on {handle} handle does not find a fresh entry first"
            );
        }
        check_consistent(f.backend().as_ref(), &what).await;
        let verdict = f
            .integrity_check()
            .await
            .unwrap_or_else(|e| panic!("{what}: the integrity check failed to run: {e}"));
        assert!(verdict.is_empty(), "{what}: integrity check: {verdict:?}");
    };
    if tokio::time::timeout(PROMPT, checks).await.is_err() {
        panic!(
            "{what}: the store did not answer within {PROMPT:?} (a lock or a transaction \
             outlived the dropped operation)"
        );
    }
}

/// Every listed entry reads back whole, `count` agrees, and each tag lists exactly the
/// entries carrying it: no operation was left half applied.
async fn check_consistent(b: &dyn MemoryBackend, what: &str) {
    let all = ok(b.recent(usize::MAX).await, "recent");
    assert_eq!(
        ok(b.count().await, "count"),
        all.len() as u64,
        "{what}: count disagrees with the listing"
    );
    let mut by_tag: BTreeMap<&Tag, BTreeSet<&MemoryId>> = BTreeMap::new();
    for entry in &all {
        let read = ok(b.get(&entry.id).await, "get");
        assert_eq!(
            read.as_ref().map(|e| (&e.content, &e.tags)),
            Some((&entry.content, &entry.tags)),
            "{what}: entry {} does not read back as listed",
            entry.id
        );
        for tag in &entry.tags {
            by_tag.entry(tag).or_default().insert(&entry.id);
        }
    }
    for (tag, ids) in by_tag {
        let tagged = ok(b.by_tags(std::slice::from_ref(tag)).await, "by_tags");
        let found: BTreeSet<&MemoryId> = tagged.iter().map(|e| &e.id).collect();
        assert_eq!(found, ids, "{what}: tag `{}` lists other entries", tag.0);
    }
}
