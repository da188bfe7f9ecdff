//! The approximate vector index: an HNSW graph (usearch, int8 codes) over the exact store's
//! vectors, fed by a background thread, its candidates re-scored in f32.
//!
//! The write path never waits for the graph: an upsert hands the vector to the indexer
//! thread and returns, and searches exact-score whatever the indexer has not applied yet
//! (the *tail*), so every stored entry is searchable at once. Operations reach the graph in
//! the order they were made; [`Ann::applied`] tells how far it got.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, PoisonError, RwLock, TryLockError};

/// How the approximate index is built and searched ([`InMemoryBuilder::ann`] and
/// [`SqliteBuilder::ann`]).
///
/// Below [`min_entries`](AnnConfig::min_entries) entries a store searches exactly: a scan is
/// then as fast as a graph walk and has recall 1. Above it, vector search walks an HNSW
/// graph of int8-quantized vectors and re-scores the best candidates it found with the exact
/// f32 vectors, so scores are exact cosine similarities and only the choice of candidates is
/// approximate. Two knobs set the work, separately, each with a value for graphs of up to
/// 100,000 vectors and one for 1,000,000 ([`AnnConfig::expansion_search_at`],
/// [`AnnConfig::rescore_at`]):
///
/// - the *walk width* (`expansion_search`): how many candidates the walk keeps while it
///   explores; it decides whether the walk reaches the query's true neighbours at all;
/// - the *re-scored count* (`rescore`): how many of the walk's best (by int8 distance) are
///   scored in f32; it repairs the int8 codes' misordering. The walk is never narrower than
///   the re-scored count.
///
/// `docs/MEMORY.md` has the measured recall and latency.
///
/// [`InMemoryBuilder::ann`]: crate::InMemoryBuilder::ann
/// [`SqliteBuilder::ann`]: crate::SqliteBuilder
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnnConfig {
    /// Stores with fewer entries search exactly (default 10,000); `usize::MAX` never builds
    /// the index.
    pub min_entries: usize,
    /// Graph edges per node (HNSW `M`, default 16).
    pub connectivity: usize,
    /// Candidate list size while inserting (default 128): higher builds slower, finds better
    /// neighbours. On clustered vectors (1,000 clusters, 100,000 vectors) 64 left graphs in
    /// which a few queries in 200 never reached their cluster (recall 0 for them; mean
    /// recall@10 0.96–0.99 from build to build); 128 builds about 3× slower and had none
    /// then. (A later sweep, one build each, found one such query at walk width 40 with 64
    /// and with 128, none at 48.)
    pub expansion_add: usize,
    /// Walk width (candidates kept while searching) for graphs of up to 100,000 vectors
    /// (default 40): higher is slower with better recall. Larger graphs walk wider, up to
    /// [`expansion_search_1m`](AnnConfig::expansion_search_1m) at 1,000,000.
    pub expansion_search: usize,
    /// Walk width at 1,000,000 vectors (default 128; never below `expansion_search`).
    /// Between 100,000 and 1,000,000 vectors the width grows geometrically from
    /// `expansion_search` to this (a power of the size), and on at the same rate beyond.
    /// Measured on clustered vectors at 1,000,000: recall@10 0.88 at width 48, 0.95 at 96,
    /// 0.97 at 128, 0.985 at 200 (32 re-scored); the walk width, not the re-scored count,
    /// is what larger graphs need.
    pub expansion_search_1m: usize,
    /// Candidates re-scored in f32 for graphs of up to 100,000 vectors (default 32; at
    /// least `k`).
    pub rescore: usize,
    /// Candidates re-scored at 1,000,000 vectors (default 32, as at 100,000: with walks 128
    /// to 256 wide, re-scoring 48 or 100 instead of 32 raised recall@10 by 0.004 at most;
    /// never below `rescore`), growing between the two sizes as the walk width does.
    pub rescore_1m: usize,
    /// Threads inserting into the graph while it is first built (default: the machine's
    /// cores, at most 8). Later inserts use one thread.
    pub build_threads: usize,
}

impl Default for AnnConfig {
    fn default() -> AnnConfig {
        AnnConfig {
            min_entries: 10_000,
            connectivity: 16,
            expansion_add: 128,
            expansion_search: 40,
            expansion_search_1m: 128,
            rescore: 32,
            rescore_1m: 32,
            build_threads: std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(8),
        }
    }
}

impl AnnConfig {
    /// The defaults.
    pub fn new() -> AnnConfig {
        AnnConfig::default()
    }

    /// Never build an index: every search is exact.
    pub fn disabled() -> AnnConfig {
        AnnConfig {
            min_entries: usize::MAX,
            ..AnnConfig::default()
        }
    }

    /// Search exactly below `n` entries.
    pub fn min_entries(mut self, n: usize) -> AnnConfig {
        self.min_entries = n;
        self
    }

    /// Walk width for graphs of up to 100,000 vectors.
    pub fn expansion_search(mut self, n: usize) -> AnnConfig {
        self.expansion_search = n.max(1);
        self
    }

    /// Walk width at 1,000,000 vectors.
    pub fn expansion_search_1m(mut self, n: usize) -> AnnConfig {
        self.expansion_search_1m = n.max(1);
        self
    }

    /// Candidates re-scored in f32 for graphs of up to 100,000 vectors.
    pub fn rescore(mut self, n: usize) -> AnnConfig {
        self.rescore = n.max(1);
        self
    }

    /// Candidates re-scored in f32 at 1,000,000 vectors.
    pub fn rescore_1m(mut self, n: usize) -> AnnConfig {
        self.rescore_1m = n.max(1);
        self
    }

    /// The walk width a graph of `size` vectors searches with: `expansion_search` up to
    /// 100,000 vectors, growing geometrically to `expansion_search_1m` at 1,000,000.
    pub fn expansion_search_at(&self, size: usize) -> usize {
        grown(self.expansion_search, self.expansion_search_1m, size)
    }

    /// Candidates a search for the top `k` re-scores in a graph of `size` vectors: at least
    /// `k`; otherwise `rescore` up to 100,000 vectors, growing geometrically to `rescore_1m`
    /// at 1,000,000.
    pub fn rescore_at(&self, size: usize, k: usize) -> usize {
        k.max(grown(self.rescore, self.rescore_1m, size))
    }
}

/// `small` (the value up to 100,000 vectors) grown towards `large` (at 1,000,000, at least
/// `small`) for a graph of `size`: `small × (large / small)^log10(size / 100,000)`.
fn grown(small: usize, large: usize, size: usize) -> usize {
    let small = small.max(1);
    if size <= 100_000 {
        return small;
    }
    let decades = (size as f64 / 100_000.0).log10();
    let ratio = large.max(small) as f64 / small as f64;
    (small as f64 * ratio.powf(decades)).round() as usize
}

/// How far a store's approximate index has got ([`InMemoryBackend::index_status`]).
///
/// [`InMemoryBackend::index_status`]: crate::InMemoryBackend::index_status
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexStatus {
    /// Whether the store has an approximate index (it has at least
    /// [`AnnConfig::min_entries`] entries).
    pub enabled: bool,
    /// Vectors in the graph.
    pub indexed: usize,
    /// Vectors stored but not in the graph yet; searches score them exactly.
    pub pending: usize,
    /// Why the index stopped, if it did (searches are then exact).
    pub failed: Option<&'static str>,
}

/// Searches that can walk the graph at the same time.
const SEARCH_THREADS: usize = 64;

/// One change for the graph.
enum Job {
    Add(i64, Vec<f32>),
    Remove(i64),
}

/// State shared by the handle and its indexer thread.
struct Shared {
    /// Searches take the read lock; every change (adds, removals, growing the capacity)
    /// the write lock. usearch allows adds concurrent with searches, but a search meeting
    /// a node that is being removed or re-added crashed (SIGSEGV in the distance kernel,
    /// seen in the conformance suite), so changes never overlap a search. Builder threads
    /// add concurrently with each other under one write guard.
    graph: RwLock<usearch::Index>,
    /// Vectors in the graph, as of the last change (readable while a change holds the lock).
    size: AtomicUsize,
    /// Jobs applied so far (a job's number is its position in the order sent).
    applied: AtomicU64,
    /// Set when usearch reported an error; the handle then searches exactly.
    failed: AtomicBool,
    /// Set when the handle is dropped: the indexer stops, even mid-batch.
    closed: AtomicBool,
    config: AnnConfig,
}

/// The approximate index of one vector store.
pub(crate) struct Ann {
    shared: Arc<Shared>,
    jobs: Sender<Vec<Job>>,
    /// Jobs sent so far.
    sent: u64,
}

impl Ann {
    /// A new, empty index for unit vectors of `dimensions`, with its indexer thread.
    pub(crate) fn new(dimensions: usize, config: &AnnConfig) -> Option<Ann> {
        let options = usearch::IndexOptions {
            dimensions,
            metric: usearch::MetricKind::Cos,
            quantization: usearch::ScalarKind::I8,
            connectivity: config.connectivity,
            expansion_add: config.expansion_add,
            expansion_search: config.expansion_search,
            multi: false,
        };
        Ann::start(usearch::Index::new(&options).ok()?, config)
    }

    #[cfg(feature = "sqlite")]
    /// An index holding the graph `bytes` (from [`graph_bytes`](Ann::graph_bytes)) for unit
    /// vectors of `dimensions`; `None` if they do not hold such a graph.
    pub(crate) fn restore(dimensions: usize, config: &AnnConfig, bytes: &[u8]) -> Option<Ann> {
        let graph = usearch::Index::restore_from_buffer(bytes).ok()?;
        if graph.dimensions() != dimensions || graph.scalar_kind() != usearch::ScalarKind::I8 {
            return None;
        }
        graph.change_expansion_search(config.expansion_search_at(graph.size()));
        graph.change_expansion_add(config.expansion_add);
        let capacity = graph.size().max(1024);
        graph
            .reserve_capacity_and_threads(capacity, config.build_threads.max(1) + SEARCH_THREADS)
            .ok()?;
        Ann::start(graph, config)
    }

    #[cfg(feature = "sqlite")]
    /// The graph, serialized; `None` if usearch cannot.
    pub(crate) fn graph_bytes(&self) -> Option<Vec<u8>> {
        if !self.usable() {
            return None;
        }
        let graph = read(&self.shared.graph);
        let mut bytes = vec![0u8; graph.serialized_length()];
        graph.save_to_buffer(&mut bytes).ok()?;
        Some(bytes)
    }

    fn start(graph: usearch::Index, config: &AnnConfig) -> Option<Ann> {
        let shared = Arc::new(Shared {
            size: AtomicUsize::new(graph.size()),
            graph: RwLock::new(graph),
            applied: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            config: config.clone(),
        });
        let (jobs, receiver) = mpsc::channel();
        let worker = shared.clone();
        std::thread::Builder::new()
            .name("agent-memory-ann".into())
            .spawn(move || index_jobs(&worker, &receiver))
            .ok()?;
        Some(Ann {
            shared,
            jobs,
            sent: 0,
        })
    }

    /// Queues vectors (unit length) for the graph; returns the job number of the first (the
    /// i-th vector is job `first + i`, applied once [`applied`](Ann::applied) reaches it).
    pub(crate) fn add_all(&mut self, vectors: Vec<(i64, Vec<f32>)>) -> u64 {
        let first = self.sent + 1;
        let jobs: Vec<Job> = vectors
            .into_iter()
            .map(|(id, vector)| Job::Add(id, vector))
            .collect();
        self.send(jobs);
        first
    }

    /// Queues the removal of `id` from the graph; returns its job number.
    pub(crate) fn remove(&mut self, id: i64) -> u64 {
        self.send(vec![Job::Remove(id)]);
        self.sent
    }

    fn send(&mut self, jobs: Vec<Job>) {
        self.sent += jobs.len() as u64;
        // The thread only ends when this sender is dropped or usearch failed (then
        // `failed` is set and searches no longer use the graph).
        if self.jobs.send(jobs).is_err() {
            self.shared.failed.store(true, Ordering::Release);
        }
    }

    /// Jobs applied so far.
    pub(crate) fn applied(&self) -> u64 {
        self.shared.applied.load(Ordering::Acquire)
    }

    /// Whether the graph can be used.
    pub(crate) fn usable(&self) -> bool {
        !self.shared.failed.load(Ordering::Acquire)
    }

    /// Vectors in the graph.
    pub(crate) fn size(&self) -> usize {
        self.shared.size.load(Ordering::Acquire)
    }

    /// Candidates an unrestricted search for the top `k` takes from the graph and re-scores
    /// ([`AnnConfig::rescore_at`] for the graph's size). The walk itself is as wide as the
    /// graph's current [`AnnConfig::expansion_search_at`] (set by the indexer as the graph
    /// grows), or as this count if that is larger.
    pub(crate) fn wanted(&self, k: usize) -> usize {
        self.shared.config.rescore_at(self.size(), k)
    }

    /// How much wider the graph walks now than at 100,000 vectors or fewer (1 up to there):
    /// the walk width at the graph's size over [`AnnConfig::expansion_search`].
    pub(crate) fn widening(&self) -> f64 {
        let config = &self.shared.config;
        config.expansion_search_at(self.size()) as f64 / config.expansion_search.max(1) as f64
    }

    /// Up to `count` keys near the unit vector `query` among those `admit` accepts (every
    /// key the graph holds when `admit` is `None`), best first by the graph's (quantized)
    /// distance; `None` if the graph failed or is being changed right now (the caller then
    /// scans exactly rather than wait for the change).
    pub(crate) fn candidates(
        &self,
        query: &[f32],
        count: usize,
        admit: Option<&dyn Fn(i64) -> bool>,
    ) -> Option<Vec<i64>> {
        if !self.usable() {
            return None;
        }
        let graph = match self.shared.graph.try_read() {
            Ok(graph) => graph,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // Without a filter usearch walks with no call back into Rust per node visited.
        let matches = match admit {
            None => graph.search(query, count.max(1)),
            Some(admit) => graph.filtered_search(query, count.max(1), |key: u64| {
                i64::try_from(key).is_ok_and(admit)
            }),
        }
        .ok()?;
        Some(
            matches
                .keys
                .into_iter()
                .filter_map(|key| i64::try_from(key).ok())
                .collect(),
        )
    }
}

impl Drop for Ann {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

#[cfg(feature = "sqlite")]
fn read(graph: &RwLock<usearch::Index>) -> std::sync::RwLockReadGuard<'_, usearch::Index> {
    // Nothing panics while holding the lock; a poisoned lock still guards a whole graph.
    graph.read().unwrap_or_else(PoisonError::into_inner)
}

fn write(graph: &RwLock<usearch::Index>) -> std::sync::RwLockWriteGuard<'_, usearch::Index> {
    graph.write().unwrap_or_else(PoisonError::into_inner)
}

/// The indexer thread: applies job batches in order until the handle is dropped.
fn index_jobs(shared: &Shared, receiver: &Receiver<Vec<Job>>) {
    while let Ok(mut batch) = receiver.recv() {
        // Take what else is waiting, so a burst of single stores becomes one batch.
        while batch.len() < 65_536 {
            match receiver.try_recv() {
                Ok(more) => batch.extend(more),
                Err(_) => break,
            }
        }
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        if shared.failed.load(Ordering::Acquire) || apply(shared, batch).is_err() {
            shared.failed.store(true, Ordering::Release);
            return;
        }
    }
}

/// Applies one batch; the applied count advances as each chunk lands.
fn apply(shared: &Shared, batch: Vec<Job>) -> Result<(), ()> {
    let adds = batch.iter().filter(|j| matches!(j, Job::Add(..))).count();
    {
        let graph = write(&shared.graph);
        let needed = graph.size() + adds;
        // usearch keeps a context per concurrent caller: the builders plus searches from
        // any number of executor and blocking-pool threads (a search finding none free
        // falls back to the exact scan).
        let threads = shared.config.build_threads.max(1) + SEARCH_THREADS;
        if needed > graph.capacity() {
            let capacity = needed.max(graph.capacity().saturating_mul(2)).max(1024);
            graph
                .reserve_capacity_and_threads(capacity, threads)
                .map_err(|_| ())?;
        }
    }
    // Large batches (the first build) are inserted by several threads in big chunks:
    // searches meanwhile scan exactly, as they do anyway while the tail is that long.
    // Small batches go in small chunks, so a search finds the graph free again soon.
    let threads = if adds >= 4_096 {
        shared.config.build_threads.max(1)
    } else {
        1
    };
    let chunk_len = if threads > 1 { 16_384 } else { 64 };
    for chunk in batch.chunks(chunk_len) {
        if shared.closed.load(Ordering::Acquire) {
            return Err(());
        }
        let graph = write(&shared.graph);
        let ok = if threads > 1 && independent(chunk) {
            let per = chunk.len().div_ceil(threads).max(1);
            let graph: &usearch::Index = &graph;
            std::thread::scope(|scope| {
                let workers: Vec<_> = chunk
                    .chunks(per)
                    .map(|part| scope.spawn(move || apply_part(graph, &shared.closed, part)))
                    .collect();
                workers
                    .into_iter()
                    .all(|w| w.join().unwrap_or(Err(())).is_ok())
            })
        } else {
            apply_part(&graph, &shared.closed, chunk).is_ok()
        };
        let size = graph.size();
        // The walk width follows the graph's size; set here, under the write guard, since
        // usearch reads it unsynchronized during searches.
        graph.change_expansion_search(shared.config.expansion_search_at(size));
        shared.size.store(size, Ordering::Release);
        drop(graph);
        if !ok {
            return Err(());
        }
        shared
            .applied
            .fetch_add(chunk.len() as u64, Ordering::AcqRel);
    }
    Ok(())
}

/// Whether the jobs of `chunk` may be applied in any order, by several threads at once: adds
/// of distinct keys only. A batch gathers whatever was queued, so a key stored and removed
/// (or stored twice) shortly after can be in one chunk; applied out of order by two threads,
/// its removal would be lost and the graph would keep it.
fn independent(chunk: &[Job]) -> bool {
    let mut keys = std::collections::HashSet::with_capacity(chunk.len());
    chunk.iter().all(|job| match job {
        Job::Add(id, _) => keys.insert(*id),
        Job::Remove(_) => false,
    })
}

/// Applies `part` to `graph`, which the caller holds exclusively (with other builders of
/// the same batch, for adds of distinct keys); stops early once the handle is closed.
fn apply_part(graph: &usearch::Index, closed: &AtomicBool, part: &[Job]) -> Result<(), ()> {
    for (i, job) in part.iter().enumerate() {
        if i % 256 == 0 && closed.load(Ordering::Acquire) {
            return Err(());
        }
        match job {
            Job::Add(id, vector) => {
                let key = u64::try_from(*id).map_err(|_| ())?;
                // A vector stored again (a replayed change) replaces the old one.
                if graph.contains(key) {
                    let _ = graph.remove(key);
                }
                graph.add(key, vector).map_err(|_| ())?;
            }
            Job::Remove(id) => {
                if let Ok(key) = u64::try_from(*id) {
                    // A key the graph never got (removed before it was indexed) is fine.
                    let _ = graph.remove(key);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use bench_kit::{clustered_vectors, recall_at};

    use super::AnnConfig;
    use crate::vector::{Restriction, VectorIndex};

    const D: usize = 64;

    fn built(n: usize) -> (VectorIndex, Vec<Vec<f32>>) {
        let vectors = clustered_vectors(7, n + 100, D, 60, 0.05);
        let mut index = VectorIndex::with_ann(D, AnnConfig::new().min_entries(1_000));
        for (i, v) in vectors[..n].iter().enumerate() {
            index.upsert(i as i64 + 1, v);
        }
        wait_indexed(&index);
        (index, vectors[n..].to_vec())
    }

    fn wait_indexed(index: &VectorIndex) {
        let start = Instant::now();
        while index.status().pending > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the graph did not take in the rows: {:?}",
                index.status()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn ids(hits: &[crate::vector::Hit]) -> Vec<i64> {
        hits.iter().map(|h| h.id).collect()
    }

    #[test]
    fn walk_width_and_rescored_count_grow_apart_with_the_graph() {
        let config = AnnConfig::new()
            .expansion_search(40)
            .expansion_search_1m(160)
            .rescore(32)
            .rescore_1m(48);
        for size in [0, 10_000, 100_000] {
            assert_eq!(config.expansion_search_at(size), 40);
            assert_eq!(config.rescore_at(size, 10), 32);
        }
        assert_eq!(config.rescore_at(100_000, 50), 50, "never fewer than k");
        assert_eq!(config.expansion_search_at(1_000_000), 160);
        assert_eq!(config.rescore_at(1_000_000, 10), 48);
        // Geometric in between: √10 × 100,000 vectors is half way (in decades).
        assert_eq!(config.expansion_search_at(316_228), 80);
        assert_eq!(config.expansion_search_at(10_000_000), 640);
        // A 1m value below the 100k one is taken as the 100k one.
        let flat = AnnConfig::new()
            .expansion_search(200)
            .expansion_search_1m(100);
        assert_eq!(flat.expansion_search_at(1_000_000), 200);
    }

    #[test]
    fn a_large_batch_removes_what_it_adds_in_order() {
        // Adds and removals of the same keys in one batch big enough for several builder
        // threads: every removal lands after its add.
        let config = AnnConfig::new().min_entries(1);
        let config = AnnConfig {
            build_threads: 4,
            ..config
        };
        let ann = super::Ann::new(D, &config).expect("usearch");
        let vectors = clustered_vectors(3, 6_000, D, 30, 0.05);
        let mut batch: Vec<super::Job> = vectors
            .into_iter()
            .enumerate()
            .map(|(i, v)| super::Job::Add(i as i64 + 1, v))
            .collect();
        batch.extend((1..=6_000).step_by(3).map(super::Job::Remove));
        super::apply(&ann.shared, batch).expect("applied");
        let graph = ann.shared.graph.read().expect("graph");
        assert_eq!(graph.size(), 4_000);
        for id in (1..=6_000u64).step_by(3) {
            assert!(!graph.contains(id), "{id} was removed but is in the graph");
        }
    }

    #[test]
    fn small_stores_have_no_graph_and_large_ones_build_it() {
        let mut index = VectorIndex::with_ann(D, AnnConfig::new().min_entries(1_000));
        for (i, v) in clustered_vectors(1, 999, D, 10, 0.05).iter().enumerate() {
            index.upsert(i as i64 + 1, v);
        }
        assert!(!index.status().enabled);
        index.upsert(5_000, &clustered_vectors(2, 1, D, 10, 0.05)[0]);
        assert!(index.status().enabled);
        wait_indexed(&index);
        let status = index.status();
        assert_eq!(
            (status.indexed, status.pending, status.failed),
            (1_000, 0, None)
        );
    }

    #[test]
    fn approximate_search_finds_the_exact_neighbours_with_exact_scores() {
        let (index, queries) = built(6_000);
        let mut recall = 0.0;
        for q in &queries {
            let exact = index.search_where(q, 10, &Restriction::all(), true);
            let approximate = index.search_where(q, 10, &Restriction::all(), false);
            assert_eq!(approximate.len(), 10);
            for hit in &approximate {
                if let Some(same) = exact.iter().find(|e| e.id == hit.id) {
                    assert_eq!(same.score, hit.score, "scores are exact cosines");
                }
            }
            recall += recall_at(&ids(&exact), &ids(&approximate));
        }
        let recall = recall / queries.len() as f64;
        assert!(recall >= 0.95, "recall@10 {recall}");
    }

    #[test]
    fn new_rows_are_found_at_once_and_removed_rows_never() {
        let (mut index, queries) = built(3_000);
        for (i, q) in queries.iter().take(20).enumerate() {
            let id = 100_000 + i as i64;
            index.upsert(id, q);
            let hits = index.search_where(q, 5, &Restriction::all(), false);
            assert_eq!(hits[0].id, id, "a row stored a moment ago is found first");
            index.remove(id);
            let hits = index.search_where(q, 5, &Restriction::all(), false);
            assert!(
                hits.iter().all(|h| h.id != id),
                "a removed row is never returned"
            );
            assert_eq!(hits.len(), 5);
        }
    }

    #[test]
    fn filters_apply_inside_the_graph_walk() {
        let (index, queries) = built(6_000);
        let admit = |id: i64| id % 20 == 0;
        let mut recall = 0.0;
        for q in &queries {
            let exact = index.search_where(q, 10, &Restriction::admitted_by(&admit), true);
            let filtered = index.search_where(q, 10, &Restriction::admitted_by(&admit), false);
            assert_eq!(
                filtered.len(),
                10,
                "10 admitted hits, not the top 10 cut down"
            );
            assert!(filtered.iter().all(|h| admit(h.id)));
            recall += recall_at(&ids(&exact), &ids(&filtered));
        }
        let recall = recall / queries.len() as f64;
        assert!(recall >= 0.9, "filtered recall@10 {recall}");
        // A filter admitting almost nothing still finds what it admits (exact fallback).
        let one = |id: i64| id == 4_321;
        let hits = index.search_where(&queries[0], 10, &Restriction::admitted_by(&one), false);
        assert_eq!(ids(&hits), vec![4_321]);
    }
}
