//! [`InMemoryBackend`]: memories in a process's memory, for tests and short-lived agents.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use agent_op::{
    BoxFuture, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError, MemoryId, NewMemory,
    PrunePolicy, PruneReport, ScoredMemory, Tag,
};

use crate::clock::{Clock, SystemClock, age_cutoff, from_micros, now_micros};
use crate::common::{
    check_embedder, cpu, embed_batch_checked, embed_checked, format_id, normalize_tags, parse_id,
    validate_new, validate_query,
};
use crate::embed::HashingEmbedder;
use crate::prune::{MergeCandidate, plan_merges, validate};
use crate::vector::VectorIndex;

/// Memories held in the process's memory; gone when the last clone is dropped.
///
/// Search is exact cosine similarity over every stored vector (an int8-filtered flat scan
/// that returns the same results as a full f32 scan, split across threads for large
/// stores); [`ScoredMemory::score`] is that cosine similarity, in (0, 1] (entries with
/// similarity ≤ 0 are not returned). Vectors take `5 × dimensions + ~50` bytes each. Prune
/// runs under the store's lock (merging is O(n²)). Clones share the same store. All
/// operations are safe to call from many tasks at once.
///
/// ```
/// use agent_memory::InMemoryBackend;
/// use agent_op::{MemoryBackend, NewMemory};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let memory = InMemoryBackend::new();
/// let id = memory
///     .store(NewMemory {
///         content: "The deploy key lives in the ops vault".into(),
///         context: "told by Ana during onboarding".into(),
///         tags: vec!["ops".into()],
///     })
///     .await?;
/// let hits = memory.search("where is the deploy key?", 3).await?;
/// assert_eq!(hits[0].entry.id, id);
/// assert_eq!(hits[0].entry.access_count, 1); // recalled once
/// # Ok::<(), agent_op::MemoryError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct InMemoryBackend {
    shared: Arc<Shared>,
}

struct Shared {
    embedder: Arc<dyn EmbeddingProvider>,
    /// The embedder's dimension when the store was built: every vector must have it.
    dimensions: usize,
    clock: Arc<dyn Clock>,
    state: RwLock<State>,
}

struct State {
    next_id: i64,
    entries: HashMap<i64, Stored>,
    /// (created_at, id) of every entry, for newest-first listings.
    by_time: BTreeSet<(i64, i64)>,
    index: VectorIndex,
}

struct Stored {
    content: String,
    context: String,
    tags: Vec<Tag>,
    created_at: i64,
    accessed_at: i64,
    access_count: u64,
}

impl Stored {
    fn entry(&self, id: i64) -> MemoryEntry {
        MemoryEntry {
            id: format_id(id),
            content: self.content.clone(),
            context: self.context.clone(),
            tags: self.tags.clone(),
            created_at: from_micros(self.created_at),
            accessed_at: from_micros(self.accessed_at),
            access_count: self.access_count,
        }
    }
}

impl State {
    fn insert(&mut self, memory: NewMemory, vector: &[f32], now: i64) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.index.upsert(id, vector);
        self.by_time.insert((now, id));
        self.entries.insert(
            id,
            Stored {
                content: memory.content,
                context: memory.context,
                tags: normalize_tags(memory.tags),
                created_at: now,
                accessed_at: now,
                access_count: 0,
            },
        );
        id
    }

    fn remove(&mut self, id: i64) -> bool {
        match self.entries.remove(&id) {
            Some(stored) => {
                self.by_time.remove(&(stored.created_at, id));
                self.index.remove(id);
                true
            }
            None => false,
        }
    }
}

/// Builds an [`InMemoryBackend`] with a chosen embedder or clock.
pub struct InMemoryBuilder {
    embedder: Arc<dyn EmbeddingProvider>,
    clock: Arc<dyn Clock>,
}

impl InMemoryBuilder {
    /// The embedder (default: [`HashingEmbedder::new`]).
    pub fn embedder(mut self, embedder: Arc<dyn EmbeddingProvider>) -> InMemoryBuilder {
        self.embedder = embedder;
        self
    }

    /// The clock stamping creation and access times (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> InMemoryBuilder {
        self.clock = clock;
        self
    }

    /// The backend. Fails if the embedder declares zero dimensions.
    pub fn build(self) -> Result<InMemoryBackend, MemoryError> {
        check_embedder(self.embedder.as_ref())?;
        Ok(InMemoryBackend::from_parts(self.embedder, self.clock))
    }
}

impl InMemoryBackend {
    /// An empty store with the default [`HashingEmbedder`] and the system clock.
    pub fn new() -> InMemoryBackend {
        InMemoryBackend::from_parts(Arc::new(HashingEmbedder::new()), Arc::new(SystemClock))
    }

    fn from_parts(embedder: Arc<dyn EmbeddingProvider>, clock: Arc<dyn Clock>) -> InMemoryBackend {
        let dimensions = embedder.dimensions();
        InMemoryBackend {
            shared: Arc::new(Shared {
                embedder,
                dimensions,
                clock,
                state: RwLock::new(State {
                    next_id: 1,
                    entries: HashMap::new(),
                    by_time: BTreeSet::new(),
                    index: VectorIndex::new(dimensions),
                }),
            }),
        }
    }

    /// A builder, to choose the embedder or the clock.
    pub fn builder() -> InMemoryBuilder {
        InMemoryBuilder {
            embedder: Arc::new(HashingEmbedder::new()),
            clock: Arc::new(SystemClock),
        }
    }

    /// The embedder this store uses.
    pub fn embedder(&self) -> &Arc<dyn EmbeddingProvider> {
        &self.shared.embedder
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        // The state is updated only in short sections that cannot panic halfway, so a
        // poisoned lock still guards consistent data.
        self.shared
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.shared
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores many memories at once with one embedding batch
    /// ([`EmbeddingProvider::embed_batch`]); either all are stored or none. Returns the ids
    /// in input order.
    pub async fn store_batch(
        &self,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryId>, MemoryError> {
        for memory in &memories {
            validate_new(memory)?;
        }
        if memories.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = memories.iter().map(|m| m.content.clone()).collect();
        let vectors = embed_batch_checked(
            self.shared.embedder.as_ref(),
            self.shared.dimensions,
            &texts,
        )
        .await?;
        let now = now_micros(self.shared.clock.as_ref());
        let mut state = self.write();
        state.index.reserve(memories.len());
        let mut ids = Vec::with_capacity(memories.len());
        for (memory, vector) in memories.into_iter().zip(&vectors) {
            ids.push(format_id(state.insert(memory, vector, now)));
        }
        Ok(ids)
    }

    async fn store_inner(&self, memory: NewMemory) -> Result<MemoryId, MemoryError> {
        validate_new(&memory)?;
        let vector = embed_checked(
            self.shared.embedder.as_ref(),
            self.shared.dimensions,
            &memory.content,
        )
        .await?;
        let now = now_micros(self.shared.clock.as_ref());
        let id = self.write().insert(memory, &vector, now);
        Ok(format_id(id))
    }

    async fn search_inner(&self, query: &str, k: usize) -> Result<Vec<ScoredMemory>, MemoryError> {
        validate_query(query)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let vector =
            embed_checked(self.shared.embedder.as_ref(), self.shared.dimensions, query).await?;
        let floats = self.read().index.len() * vector.len();
        let this = self.clone();
        let hits = cpu(floats, move || this.read().index.search(&vector, k)).await?;
        let now = now_micros(self.shared.clock.as_ref());
        let mut state = self.write();
        let mut out = Vec::with_capacity(hits.len());
        for hit in hits {
            // Deleted between the scan and now: not a result any more.
            if let Some(stored) = state.entries.get_mut(&hit.id) {
                stored.accessed_at = now;
                stored.access_count = stored.access_count.saturating_add(1);
                out.push(ScoredMemory {
                    entry: stored.entry(hit.id),
                    score: hit.score,
                });
            }
        }
        Ok(out)
    }

    fn prune_now(&self, policy: &PrunePolicy) -> Result<PruneReport, MemoryError> {
        validate(policy)?;
        let now = now_micros(self.shared.clock.as_ref());
        let mut state = self.write();
        let mut report = PruneReport::default();
        if let Some(cutoff) = policy.max_age.and_then(|age| age_cutoff(now, age)) {
            let old: Vec<i64> = state
                .entries
                .iter()
                .filter(|(_, s)| s.accessed_at < cutoff)
                .map(|(id, _)| *id)
                .collect();
            for id in old {
                state.remove(id);
                report.removed += 1;
            }
        }
        if let Some(threshold) = policy.merge_similarity {
            let groups = {
                let candidates = state
                    .entries
                    .iter()
                    .filter_map(|(id, s)| {
                        Some(MergeCandidate {
                            id: *id,
                            created_at: s.created_at,
                            vector: state.index.get(*id)?,
                        })
                    })
                    .collect();
                plan_merges(candidates, threshold)
            };
            for group in groups {
                let mut tags: Vec<Tag> = Vec::new();
                let mut count = 0u64;
                let mut accessed = i64::MIN;
                for id in &group.absorbed {
                    if let Some(s) = state.entries.get(id) {
                        tags.extend(s.tags.iter().cloned());
                        count = count.saturating_add(s.access_count);
                        accessed = accessed.max(s.accessed_at);
                    }
                }
                for id in &group.absorbed {
                    if state.remove(*id) {
                        report.merged += 1;
                    }
                }
                if let Some(keeper) = state.entries.get_mut(&group.keeper) {
                    tags.append(&mut keeper.tags);
                    keeper.tags = normalize_tags(tags);
                    keeper.access_count = keeper.access_count.saturating_add(count);
                    keeper.accessed_at = keeper.accessed_at.max(accessed);
                }
            }
        }
        if let Some(max) = policy.max_entries {
            let len = state.entries.len() as u64;
            if len > max {
                let mut order: Vec<(u64, i64, i64)> = state
                    .entries
                    .iter()
                    .map(|(id, s)| (s.access_count, s.accessed_at, *id))
                    .collect();
                order.sort_unstable();
                // Lossless: at most `len`, which fits in usize.
                let excess = (len - max) as usize;
                for (_, _, id) in order.into_iter().take(excess) {
                    state.remove(id);
                    report.removed += 1;
                }
            }
        }
        Ok(report)
    }
}

impl Default for InMemoryBackend {
    fn default() -> InMemoryBackend {
        InMemoryBackend::new()
    }
}

impl fmt::Debug for InMemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryBackend")
            .field("embedder", &self.shared.embedder.model())
            .field("entries", &self.read().entries.len())
            .finish()
    }
}

impl MemoryBackend for InMemoryBackend {
    fn store(&self, memory: NewMemory) -> BoxFuture<'_, Result<MemoryId, MemoryError>> {
        Box::pin(self.store_inner(memory))
    }

    fn search<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        Box::pin(self.search_inner(query, k))
    }

    fn recent(&self, n: usize) -> BoxFuture<'_, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            let state = self.read();
            Ok(state
                .by_time
                .iter()
                .rev()
                .take(n)
                .filter_map(|(_, id)| Some(state.entries.get(id)?.entry(*id)))
                .collect())
        })
    }

    fn by_tags<'a>(
        &'a self,
        tags: &'a [Tag],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            let wanted: HashSet<&Tag> = tags.iter().collect();
            let state = self.read();
            Ok(state
                .by_time
                .iter()
                .rev()
                .filter_map(|(_, id)| {
                    let stored = state.entries.get(id)?;
                    let has = stored.tags.iter().filter(|t| wanted.contains(t)).count();
                    (has == wanted.len()).then(|| stored.entry(*id))
                })
                .collect())
        })
    }

    fn prune<'a>(
        &'a self,
        policy: &'a PrunePolicy,
    ) -> BoxFuture<'a, Result<PruneReport, MemoryError>> {
        Box::pin(async move { self.prune_now(policy) })
    }

    fn delete<'a>(&'a self, id: &'a MemoryId) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            Ok(match parse_id(id) {
                Some(n) => self.write().remove(n),
                None => false,
            })
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a MemoryId,
    ) -> BoxFuture<'a, Result<Option<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            let Some(n) = parse_id(id) else {
                return Ok(None);
            };
            Ok(self.read().entries.get(&n).map(|s| s.entry(n)))
        })
    }

    fn count(&self) -> BoxFuture<'_, Result<u64, MemoryError>> {
        Box::pin(async move { Ok(self.read().entries.len() as u64) })
    }
}
