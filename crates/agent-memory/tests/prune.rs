//! Prune while the store is in use: merge planning (O(n²)) holds no lock, so other handles,
//! other tasks and the executor go on meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_memory::{HashingEmbedder, InMemoryBackend, SqliteBackend};
use agent_op::{EmbeddingProvider, MemoryBackend, MemoryError, NewMemory, PrunePolicy};

/// Entries to merge-check: a few thousand distinct facts make planning take a while (n² / 2
/// comparisons), while applying the (few) merges is quick.
const ENTRIES: usize = 1500;

fn memory(content: String) -> NewMemory {
    NewMemory {
        content,
        context: String::new(),
        tags: vec![],
    }
}

fn facts() -> Vec<NewMemory> {
    (0..ENTRIES)
        .map(|i| {
            memory(format!(
                "fact number {i} about item {} in group {}",
                i * 31 % 977,
                i % 89
            ))
        })
        .collect()
}

/// Small vectors keep the test quick in debug builds; planning is still quadratic.
fn embedder() -> Arc<dyn EmbeddingProvider> {
    Arc::new(HashingEmbedder::with_dimensions(32).expect("embedder"))
}

const MERGE: PrunePolicy = PrunePolicy::new().merge_similarity(0.98);

/// Runs `prune` while calling `probe` over and over; returns how many probes completed
/// while the prune was still running, and how many ran in all. A prune holding the lock the probes need for all of
/// its planning lets at most one through (the one waiting when it lets go); these tests
/// count probes, never compare durations.
async fn probes_during(
    prune: impl std::future::Future<Output = Result<agent_op::PruneReport, MemoryError>>
    + Send
    + 'static,
    mut probe: impl FnMut(usize) -> agent_op::BoxFuture<'static, Result<(), MemoryError>>,
) -> (usize, usize) {
    let task = tokio::spawn(prune);
    let (mut during, mut calls) = (0, 0);
    while !task.is_finished() {
        probe(calls).await.expect("a probe failed during the prune");
        calls += 1;
        if !task.is_finished() {
            during += 1;
        }
        tokio::task::yield_now().await;
    }
    task.await.expect("prune task").expect("prune");
    (during, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_merge_planning_does_not_hold_the_write_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let pruner = SqliteBackend::builder(&path)
        .embedder(embedder())
        .open()
        .await
        .expect("open");
    pruner.store_batch(facts()).await.expect("store batch");
    // Another handle, as another process would have, waiting at most 10 ms inside SQLite
    // per attempt.
    let other = SqliteBackend::builder(&path)
        .embedder(embedder())
        .busy_timeout(Duration::from_millis(10))
        .open()
        .await
        .expect("open");
    let prune = {
        let pruner = pruner.clone();
        async move { pruner.prune(&MERGE).await }
    };
    let (probes, calls) = probes_during(prune, |i| {
        let other = other.clone();
        Box::pin(async move {
            other
                .store(memory(format!(
                    "written by another handle during prune {i}"
                )))
                .await?;
            Ok(())
        })
    })
    .await;
    // Before, the write lock was held for the whole prune: the first store waited for all
    // of it (4.7 s for 15,000 entries), so at most one store finished during a prune.
    assert!(
        probes >= 3,
        "only {probes} stores finished during the prune"
    );
    assert_eq!(
        pruner.count().await.expect("count"),
        (ENTRIES + calls) as u64
    );
    assert!(
        pruner
            .integrity_check()
            .await
            .expect("integrity")
            .is_sound()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_merge_planning_does_not_block_the_store_or_the_executor() {
    let backend = InMemoryBackend::builder()
        .embedder(embedder())
        .build()
        .expect("backend");
    backend.store_batch(facts()).await.expect("store batch");
    // A ticker on the executor, until the prune is over: how often it ticked shows whether
    // worker threads were free meanwhile.
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tokio::spawn({
        let done = done.clone();
        async move {
            let mut ticks = 0usize;
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1)).await;
                ticks += 1;
            }
            ticks
        }
    });
    let prune = {
        let backend = backend.clone();
        let done = done.clone();
        async move {
            let report = backend.prune(&MERGE).await;
            done.store(true, Ordering::Relaxed);
            report
        }
    };
    let (probes, _) = probes_during(prune, |i| {
        let backend = backend.clone();
        Box::pin(async move {
            backend.count().await?;
            if i % 4 == 0 {
                backend
                    .store(memory(format!("stored during prune {i}")))
                    .await?;
            }
            Ok(())
        })
    })
    .await;
    let ticks = ticker.await.expect("ticker");
    // Before, prune held the store's lock on an executor thread for all of it: count()
    // waited 4.3 s for 15,000 entries and a 50 ms ticker stalled as long.
    assert!(
        probes >= 3,
        "only {probes} count/store probes finished during the prune"
    );
    assert!(
        ticks >= 3,
        "the executor ticked only {ticks} times during the prune"
    );
}
