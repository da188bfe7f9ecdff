//! Prune while the store is in use: merge planning (O(n²)) holds no lock, so other handles,
//! other tasks and the executor go on meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// Runs `prune` while calling `probe` every 5 ms; returns how long the prune took and the
/// slowest probe that started while it ran.
async fn probe_during(
    prune: impl std::future::Future<Output = Result<agent_op::PruneReport, MemoryError>>
    + Send
    + 'static,
    mut probe: impl FnMut(usize) -> agent_op::BoxFuture<'static, Result<(), MemoryError>>,
) -> (Duration, Duration, usize) {
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let report = prune.await;
        (report, started.elapsed())
    });
    let mut worst = Duration::ZERO;
    let mut probes = 0;
    while !task.is_finished() {
        let t = Instant::now();
        probe(probes)
            .await
            .expect("a probe failed during the prune");
        worst = worst.max(t.elapsed());
        probes += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (report, took) = task.await.expect("prune task");
    report.expect("prune");
    (took, worst, probes)
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
    let (took, worst, probes) = probe_during(prune, |i| {
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
    // of it (4.7 s for 15,000 entries).
    assert!(probes >= 3, "only {probes} stores during a {took:?} prune");
    assert!(
        worst < took / 3,
        "a store on another handle took {worst:?} during a {took:?} prune"
    );
    assert_eq!(
        pruner.count().await.expect("count"),
        (ENTRIES + probes) as u64
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
    // A ticker on the executor, until the prune is over: its worst gap shows whether
    // worker threads were blocked.
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tokio::spawn({
        let done = done.clone();
        async move {
            let mut worst = Duration::ZERO;
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(10)).await;
                worst = worst.max(last.elapsed());
                last = Instant::now();
            }
            worst
        }
    });
    let prune = {
        let backend = backend.clone();
        async move { backend.prune(&MERGE).await }
    };
    let (took, worst, probes) = probe_during(prune, |i| {
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
    done.store(true, Ordering::Relaxed);
    let gap = ticker.await.expect("ticker");
    // Before, prune held the store's lock on an executor thread for all of it: count()
    // waited 4.3 s for 15,000 entries and a 50 ms ticker stalled as long.
    assert!(probes >= 3, "only {probes} probes during a {took:?} prune");
    assert!(
        worst < took / 3,
        "count/store took {worst:?} during a {took:?} prune"
    );
    assert!(
        gap < took / 2,
        "the executor stalled for {gap:?} during a {took:?} prune"
    );
}
