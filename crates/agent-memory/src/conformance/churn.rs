//! Search under churn: stores and deletes running beside searches never cut a search short.
//!
//! [`search_is_complete_under_churn`] keeps a dozen entries that are never deleted and,
//! around them, writers storing entries and a task deleting them as fast as it can, while
//! three searchers (`search`, `search_with` a tag, `search_candidates`) run. Every entry is
//! similar to every query (see [`BiasedEmbedder`]), and at least `k` entries always match, so
//! every search must return exactly `k` hits: an entry deleted between ranking and reading
//! (or recording) its hit must be replaced by the next one, not leave a hole.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use agent_op::{
    BoxFuture, EmbeddingError, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError,
    MemoryId, SearchOptions, Tag,
};

use super::{Factory, fresh_with, memory, ok};

/// An embedder whose vectors all point roughly the same way: a large first component and
/// 31 small ones drawn from the text's hash, so any two texts have a cosine similarity above
/// 0.5 (every entry is a hit of every query) while their order still depends on the text.
/// Declares 32 dimensions and the model name `biased-32`.
#[derive(Copy, Clone, Debug, Default)]
pub struct BiasedEmbedder;

impl BiasedEmbedder {
    /// The vector of `text`.
    pub fn vector(text: &str) -> Vec<f32> {
        let mut state = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) | 1;
        let mut v = vec![4.0f32; 32];
        for x in v.iter_mut().skip(1) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // In [-0.5, 0.5): 31 × 0.25 < 16, so every dot product stays above 8.
            *x = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        v
    }
}

impl EmbeddingProvider for BiasedEmbedder {
    fn model(&self) -> &str {
        "biased-32"
    }

    fn dimensions(&self) -> usize {
        32
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move { Ok(BiasedEmbedder::vector(text)) })
    }
}

/// Hits asked of every search.
const K: usize = 10;
/// Entries never deleted, all tagged `stay`: more than `K`, so `K` always match.
const KEPT: usize = 12;
/// Writers, and the entries each stores (every other one tagged `stay` too).
const WRITERS: usize = 2;
const PER_WRITER: usize = 150;
/// Searches each searcher makes at least (it goes on while the writers write).
const MIN_SEARCHES: usize = 40;

/// Stores and deletes racing searches: every `search`, `search_with` (a tag at least `k`
/// entries always carry) and `search_candidates` returns exactly `k` distinct hits, though
/// entries among its best hits are being deleted as it runs.
pub async fn search_is_complete_under_churn(factory: &impl Factory) {
    let (f, _clock) = fresh_with(factory, Arc::new(BiasedEmbedder)).await;
    let backend = f.backend().clone();
    for i in 0..KEPT {
        ok(
            backend
                .store(memory(&format!("kept entry {i}"), &["stay"]))
                .await,
            "store",
        );
    }
    let live: Arc<Mutex<Vec<MemoryId>>> = Arc::default();
    let writing = Arc::new(AtomicUsize::new(WRITERS));
    let deleted = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (b, live, writing) = (backend.clone(), live.clone(), writing.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_WRITER {
                let tags: &[&str] = if i % 2 == 0 { &["stay"] } else { &["churn"] };
                let id = b
                    .store(memory(&format!("writer {w} entry {i}"), tags))
                    .await?;
                live.lock().unwrap_or_else(PoisonError::into_inner).push(id);
                tokio::task::yield_now().await;
            }
            writing.fetch_sub(1, Ordering::AcqRel);
            Ok::<(), MemoryError>(())
        }));
    }
    {
        let (b, live, writing, deleted) = (
            backend.clone(),
            live.clone(),
            writing.clone(),
            deleted.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(7);
            while writing.load(Ordering::Acquire) > 0 {
                let next = {
                    let mut live = live.lock().unwrap_or_else(PoisonError::into_inner);
                    // Keep a few of the newest: they are what searches are finding.
                    (live.len() > 2).then(|| {
                        let at = rng.usize(live.len().saturating_sub(4)..live.len());
                        live.swap_remove(at)
                    })
                };
                if let Some(id) = next {
                    if b.delete(&id).await? {
                        deleted.fetch_add(1, Ordering::AcqRel);
                    }
                }
                tokio::task::yield_now().await;
            }
            Ok(())
        }));
    }
    for searcher in 0..3 {
        let (b, writing, failed) = (backend.clone(), writing.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let stay = SearchOptions::new().tag("stay");
            let mut done = 0;
            while (writing.load(Ordering::Acquire) > 0 || done < MIN_SEARCHES)
                && !failed.load(Ordering::Acquire)
            {
                let query = format!("query {searcher} {done}");
                let (what, ids): (&str, Vec<MemoryId>) = match searcher {
                    0 => (
                        "search",
                        b.search(&query, K)
                            .await?
                            .into_iter()
                            .map(|h| h.entry.id)
                            .collect(),
                    ),
                    1 => (
                        "search_with(tag)",
                        b.search_with(&query, K, &stay)
                            .await?
                            .into_iter()
                            .map(|h| h.entry.id)
                            .collect(),
                    ),
                    _ => (
                        "search_candidates",
                        b.search_candidates(&query, K)
                            .await?
                            .into_iter()
                            .map(|c| c.hit.entry.id)
                            .collect(),
                    ),
                };
                let distinct: HashSet<&MemoryId> = ids.iter().collect();
                if ids.len() != K || distinct.len() != K {
                    failed.store(true, Ordering::Release);
                    panic!(
                        "{what} #{done} returned {} hits ({} distinct) though at least {K} \
                         entries matched throughout: {ids:?}",
                        ids.len(),
                        distinct.len()
                    );
                }
                done += 1;
                tokio::task::yield_now().await;
            }
            Ok(())
        }));
    }
    for task in tasks {
        match task.await {
            Ok(result) => ok(result, "an operation beside the searches"),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a churn task failed: {e}"),
        }
    }
    let stored = KEPT + WRITERS * PER_WRITER;
    let deleted = deleted.load(Ordering::Acquire);
    assert!(deleted > 0, "the deleter never ran beside the writers");
    assert_eq!(
        ok(backend.count().await, "count"),
        (stored - deleted) as u64,
        "every store landed and every delete took"
    );
}

/// Entries stored before the churn starts: with a bulk store, thousands per tag.
const TAGGED_BULK: usize = 16_000;
const TAGGED_FEW: usize = 800;
/// Tags `t0`–`t7`, one per entry.
const TAG_COUNT: usize = 8;
/// How long stores and deletes run beside the searches.
const CHURN_FOR: std::time::Duration = std::time::Duration::from_secs(3);

/// Tag-filtered searches while entries are stored (in batches and one by one) and deleted:
/// every `search_with` and `search_candidates_with` for a tag that thousands of live
/// entries carry returns `k` distinct hits, each carrying the tag.
///
/// Half of the entries stored first are never deleted, so every tag keeps at least
/// `TAGGED_FEW / 16` entries (a thousand with a bulk store); the deleter takes the other
/// half and whatever the writers store, at random, as fast as it can.
pub async fn filtered_search_is_complete_under_churn(factory: &impl Factory) {
    let (f, _clock) = fresh_with(factory, Arc::new(BiasedEmbedder)).await;
    let backend = f.backend().clone();
    let tagged = |i: usize| {
        let tag = format!("t{}", i % TAG_COUNT);
        memory(&format!("entry {i} of {tag}"), &[tag.as_str()])
    };
    let first = if f.has_bulk_store() {
        TAGGED_BULK
    } else {
        TAGGED_FEW
    };
    let mut deletable = Vec::new();
    for chunk in (0..first).collect::<Vec<_>>().chunks(1_000) {
        let memories: Vec<_> = chunk.iter().map(|i| tagged(*i)).collect();
        let ids = ok(f.store_many(memories).await, "store");
        // Every other entry stays: entry i and i + 1 differ in tag, so each tag keeps half.
        deletable.extend(ids.into_iter().skip(1).step_by(2));
    }
    let live: Arc<Mutex<Vec<MemoryId>>> = Arc::new(Mutex::new(deletable));
    let running = Arc::new(AtomicBool::new(true));
    let failed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    {
        let (b, live, running) = (backend.clone(), live.clone(), running.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = first + 10_000_000;
            while running.load(Ordering::Acquire) {
                let id = b.store(tagged(i)).await?;
                i += 1;
                live.lock().unwrap_or_else(PoisonError::into_inner).push(id);
                tokio::task::yield_now().await;
            }
            Ok::<(), MemoryError>(())
        }));
    }
    {
        let running = running.clone();
        tasks.push(deleter(backend.clone(), live.clone(), 8, move || {
            running.load(Ordering::Acquire)
        }));
    }
    let searches = Arc::new(AtomicUsize::new(0));
    for searcher in 0..3usize {
        let (b, running, failed, searches) = (
            backend.clone(),
            running.clone(),
            failed.clone(),
            searches.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut q = 0usize;
            while (running.load(Ordering::Acquire) || q < MIN_SEARCHES)
                && !failed.load(Ordering::Acquire)
            {
                let tag = Tag::from(format!("t{}", q % TAG_COUNT));
                let options = SearchOptions::new().tag(tag.clone());
                let query = format!("query {searcher} {q}");
                let (what, hits): (&str, Vec<MemoryEntry>) = if searcher == 2 {
                    (
                        "search_candidates_with",
                        b.search_candidates_with(&query, K, &options)
                            .await?
                            .into_iter()
                            .map(|c| c.hit.entry)
                            .collect(),
                    )
                } else {
                    (
                        "search_with",
                        b.search_with(&query, K, &options)
                            .await?
                            .into_iter()
                            .map(|h| h.entry)
                            .collect(),
                    )
                };
                let distinct: HashSet<&MemoryId> = hits.iter().map(|e| &e.id).collect();
                let carrying = hits.iter().filter(|e| e.tags.contains(&tag)).count();
                if hits.len() != K || distinct.len() != K || carrying != K {
                    failed.store(true, Ordering::Release);
                    panic!(
                        "{what}({query:?}, {K}, tag {tag}) #{q} returned {} hits ({} distinct, \
                         {carrying} carrying the tag) though thousands of entries carry it",
                        hits.len(),
                        distinct.len()
                    );
                }
                q += 1;
                searches.fetch_add(1, Ordering::AcqRel);
                tokio::task::yield_now().await;
            }
            Ok(())
        }));
    }
    // This task stores batches of 100 until the time is up.
    let until = tokio::time::Instant::now() + CHURN_FOR;
    let mut next = first + 20_000_000;
    let mut stored = Ok(());
    while tokio::time::Instant::now() < until && !failed.load(Ordering::Acquire) {
        let memories: Vec<_> = (next..next + 100).map(tagged).collect();
        next += 100;
        let ids = f.store_many(memories).await;
        match ids {
            Ok(ids) => live
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(ids),
            Err(e) => {
                stored = Err(e);
                break;
            }
        }
        tokio::task::yield_now().await;
    }
    running.store(false, Ordering::Release);
    for task in tasks {
        match task.await {
            Ok(result) => ok(result, "an operation beside the searches"),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a churn task failed: {e}"),
        }
    }
    ok(stored, "storing a batch beside the searches");
    assert!(searches.load(Ordering::Acquire) >= 3 * MIN_SEARCHES);
}

/// A task deleting entries of `live`, picked at random (from `seed`), as fast as it can
/// while `going` says so.
pub(super) fn deleter(
    b: Arc<dyn MemoryBackend>,
    live: Arc<Mutex<Vec<MemoryId>>>,
    seed: u64,
    going: impl Fn() -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), MemoryError>> {
    tokio::spawn(async move {
        let mut rng = fastrand::Rng::with_seed(seed);
        while going() {
            let next = {
                let mut live = live.lock().unwrap_or_else(PoisonError::into_inner);
                (!live.is_empty()).then(|| {
                    let at = rng.usize(..live.len());
                    live.swap_remove(at)
                })
            };
            if let Some(id) = next {
                b.delete(&id).await?;
            }
            tokio::task::yield_now().await;
        }
        Ok(())
    })
}
