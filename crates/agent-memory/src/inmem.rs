//! [`InMemoryBackend`]: memories in a process's memory, for tests and short-lived agents.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use agent_op::{
    BoxFuture, Candidate, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError, MemoryId,
    NewMemory, PrunePolicy, PruneReport, ScoredMemory, SearchOptions, Tag,
};

use crate::ann::{AnnConfig, IndexStatus};
use crate::clock::{Clock, SystemClock, age_cutoff, ceil_micros, from_micros, now_micros};
use crate::common::{
    check_embedder, cpu, distinct_ids, embed_batch_checked, embed_checked, format_id,
    normalize_tags, parse_id, validate_new, validate_query,
};
use crate::embed::HashingEmbedder;
use crate::prune::{COPY_CHUNK, MergeGroup, MergeSet, plan_work, validate};
use crate::vector::{Hit, Restriction, VectorIndex};

/// Memories held in the process's memory; gone when the last clone is dropped.
///
/// Search ranks by cosine similarity: below [`AnnConfig::min_entries`] entries (and with
/// [`SearchOptions::exact`]) by an exact scan of every stored vector (int8-filtered, the
/// same results as a full f32 scan, split across threads for large stores), above it
/// through an approximate HNSW graph whose candidates are re-scored exactly (see
/// [`AnnConfig`]). [`ScoredMemory::score`] is the cosine similarity, in (0, 1] (entries with
/// similarity ≤ 0 are not returned). Vectors take `5 × dimensions + ~50` bytes each, plus
/// about `dimensions + 150` for the graph.
///
/// Prune holds the store's lock only to apply its rules: merge planning (O(n²)) works on a
/// copy of the vectors (`4 × dimensions` bytes per entry while it runs, taken a chunk at a
/// time under the read lock), and both the copy and the planning run on Tokio's blocking
/// pool when large, so the executor and the other operations go on meanwhile; entries
/// deleted in the meantime are skipped when the merges are applied. Clones share the same
/// store. All operations are safe to call from many tasks at once.
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
    /// (created_at, id) of every entry, for newest-first listings and time-restricted
    /// searches.
    by_time: BTreeSet<(i64, i64)>,
    /// The entries carrying each tag, for tag-restricted searches.
    tagged: HashMap<Tag, HashSet<i64>>,
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
    /// Records a recall at `now`; the access time never moves back (a clock set back, or a
    /// `now` read before waiting for the lock).
    fn record_access(&mut self, now: i64) {
        self.accessed_at = self.accessed_at.max(now);
        self.access_count = self.access_count.saturating_add(1);
    }

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

/// Entries of the rarest tag checked against the whole filter to estimate how many pass.
const ADMIT_SAMPLE: usize = 256;

/// What the in-memory indexes tell about the entries a filter admits.
enum Admitted {
    /// All of them.
    Listed(Vec<i64>),
    /// About this many.
    About(usize),
    /// Nothing.
    Unknown,
}

/// No restrictions: what `search` and `search_candidates` use.
static UNRESTRICTED: SearchOptions = SearchOptions::new();

/// [`SearchOptions`]' restrictions in the store's own units (µs), checked against stored
/// entries during the vector scan.
struct Filter<'a> {
    tags: &'a [Tag],
    after: Option<i64>,
    before: Option<i64>,
}

impl<'a> Filter<'a> {
    fn new(options: &'a SearchOptions) -> Filter<'a> {
        Filter {
            tags: &options.tags,
            after: options.created_after.map(ceil_micros),
            before: options.created_before.map(ceil_micros),
        }
    }

    /// Whether the time bounds leave no instant: `created_after` at or past
    /// `created_before` (an inverted or empty range admits nothing).
    fn is_empty_range(&self) -> bool {
        matches!((self.after, self.before), (Some(after), Some(before)) if after >= before)
    }

    fn admits(&self, stored: &Stored) -> bool {
        self.after.is_none_or(|t| stored.created_at >= t)
            && self.before.is_none_or(|t| stored.created_at < t)
            && self.tags.iter().all(|tag| stored.tags.contains(tag))
    }
}

impl State {
    fn insert(&mut self, memory: NewMemory, vector: &[f32], now: i64) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.index.upsert(id, vector);
        self.by_time.insert((now, id));
        let tags = normalize_tags(memory.tags);
        for tag in &tags {
            self.tagged.entry(tag.clone()).or_default().insert(id);
        }
        self.entries.insert(
            id,
            Stored {
                content: memory.content,
                context: memory.context,
                tags,
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
                for tag in &stored.tags {
                    if let Some(ids) = self.tagged.get_mut(tag) {
                        ids.remove(&id);
                        if ids.is_empty() {
                            self.tagged.remove(tag);
                        }
                    }
                }
                self.index.remove(id);
                true
            }
            None => false,
        }
    }

    /// Applies planned merges; returns how many entries were absorbed. A group whose keeper
    /// is gone (deleted while the merges were planned) is skipped, as are absorbed entries
    /// that are gone.
    fn apply_merges(&mut self, groups: Vec<MergeGroup>) -> u64 {
        let mut merged = 0;
        for group in groups {
            if !self.entries.contains_key(&group.keeper) {
                continue;
            }
            let mut tags: Vec<Tag> = Vec::new();
            let mut count = 0u64;
            let mut accessed = i64::MIN;
            for id in &group.absorbed {
                if let Some(s) = self.entries.get(id) {
                    tags.extend(s.tags.iter().cloned());
                    count = count.saturating_add(s.access_count);
                    accessed = accessed.max(s.accessed_at);
                }
            }
            for id in &group.absorbed {
                if self.remove(*id) {
                    merged += 1;
                }
            }
            if let Some(keeper) = self.entries.get_mut(&group.keeper) {
                tags.append(&mut keeper.tags);
                keeper.tags = normalize_tags(tags);
                for tag in &keeper.tags {
                    self.tagged
                        .entry(tag.clone())
                        .or_default()
                        .insert(group.keeper);
                }
                keeper.access_count = keeper.access_count.saturating_add(count);
                keeper.accessed_at = keeper.accessed_at.max(accessed);
            }
        }
        merged
    }

    /// The best `k` hits by cosine similarity among the entries `options` admits (no recall
    /// recorded).
    fn hits(&self, vector: &[f32], k: usize, options: &SearchOptions) -> Vec<Hit> {
        if options.is_unrestricted() {
            return self
                .index
                .search_where(vector, k, &Restriction::all(), options.exact);
        }
        let filter = Filter::new(options);
        if filter.is_empty_range() {
            return Vec::new();
        }
        let admit = |id: i64| self.entries.get(&id).is_some_and(|s| filter.admits(s));
        match self.admitted(&filter, &admit) {
            Admitted::Listed(ids) => self.index.search_where(
                vector,
                k,
                &Restriction::listed(&admit, &ids),
                options.exact,
            ),
            Admitted::About(n) => self.index.search_where(
                vector,
                k,
                &Restriction::estimated(&admit, n),
                options.exact,
            ),
            Admitted::Unknown => {
                self.index
                    .search_where(vector, k, &Restriction::admitted_by(&admit), options.exact)
            }
        }
    }

    /// What the tag and time indexes tell about the entries `filter` admits: the list of
    /// them when it is short enough to be worth scoring one by one
    /// ([`VectorIndex::list_limit`]), else an estimate when the filter has tags (from
    /// the rarest tag's entries and a sample of them), else nothing (the vector index then
    /// samples).
    fn admitted(&self, filter: &Filter<'_>, admit: &dyn Fn(i64) -> bool) -> Admitted {
        if !filter.tags.is_empty() {
            let mut rarest: Option<&HashSet<i64>> = None;
            for tag in filter.tags {
                let Some(ids) = self.tagged.get(tag) else {
                    // A tag no entry carries admits nothing.
                    return Admitted::Listed(Vec::new());
                };
                if rarest.is_none_or(|r| ids.len() < r.len()) {
                    rarest = Some(ids);
                }
            }
            let rarest = rarest.map_or(0, HashSet::len);
            let ids = filter
                .tags
                .iter()
                .filter_map(|tag| self.tagged.get(tag))
                .find(|ids| ids.len() == rarest)
                .into_iter()
                .flatten();
            if rarest <= self.index.list_limit() {
                let whole =
                    filter.tags.len() == 1 && filter.after.is_none() && filter.before.is_none();
                return Admitted::Listed(if whole {
                    // The tag's entries are exactly what the filter admits.
                    ids.copied().collect()
                } else {
                    ids.copied().filter(|id| admit(*id)).collect()
                });
            }
            // The hash set's order is unrelated to the entries' vectors and times.
            let sampled = rarest.min(ADMIT_SAMPLE);
            let passed = ids.take(sampled).filter(|id| admit(**id)).count();
            return Admitted::About(passed * rarest / sampled.max(1));
        }
        if filter.after.is_none() && filter.before.is_none() {
            return Admitted::Unknown;
        }
        let from = Bound::Included((filter.after.unwrap_or(i64::MIN), i64::MIN));
        let to = match filter.before {
            Some(before) => Bound::Excluded((before, i64::MIN)),
            None => Bound::Unbounded,
        };
        // Listed only if it is short: counting a long range would cost what it saves.
        let limit = self.index.list_limit();
        let ids: Vec<i64> = self
            .by_time
            .range((from, to))
            .take(limit + 1)
            .map(|(_, id)| *id)
            .collect();
        if ids.len() <= limit {
            Admitted::Listed(ids)
        } else {
            Admitted::Unknown
        }
    }

    /// Records a recall at `now` of every hit still stored; returns them, in order.
    fn recall(&mut self, hits: &[Hit], now: i64) -> Vec<ScoredMemory> {
        hits.iter()
            .filter_map(|hit| {
                let stored = self.entries.get_mut(&hit.id)?;
                stored.record_access(now);
                Some(ScoredMemory {
                    entry: stored.entry(hit.id),
                    score: hit.score,
                })
            })
            .collect()
    }

    /// The hits still stored, as candidates: the score is the cosine similarity.
    fn candidates(&self, hits: &[Hit]) -> Vec<Candidate> {
        hits.iter()
            .filter_map(|hit| {
                let stored = self.entries.get(&hit.id)?;
                Some(Candidate {
                    hit: ScoredMemory {
                        entry: stored.entry(hit.id),
                        score: hit.score,
                    },
                    similarity: Some(hit.score),
                })
            })
            .collect()
    }

    /// Every entry's id and creation time, oldest first (the order merge planning visits
    /// them in).
    fn merge_entries(&self) -> Vec<(i64, i64)> {
        self.by_time
            .iter()
            .map(|&(created, id)| (id, created))
            .collect()
    }
}

/// Builds an [`InMemoryBackend`] with a chosen embedder or clock.
pub struct InMemoryBuilder {
    embedder: Arc<dyn EmbeddingProvider>,
    clock: Arc<dyn Clock>,
    ann: AnnConfig,
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

    /// How the approximate vector index is built and searched (default
    /// [`AnnConfig::default`]: from 10,000 entries on; [`AnnConfig::disabled`] keeps every
    /// search exact).
    pub fn ann(mut self, config: AnnConfig) -> InMemoryBuilder {
        self.ann = config;
        self
    }

    /// The backend. Fails if the embedder declares zero dimensions.
    pub fn build(self) -> Result<InMemoryBackend, MemoryError> {
        check_embedder(self.embedder.as_ref())?;
        Ok(InMemoryBackend::from_parts(
            self.embedder,
            self.clock,
            self.ann,
        ))
    }
}

impl InMemoryBackend {
    /// An empty store with the default [`HashingEmbedder`] and the system clock.
    pub fn new() -> InMemoryBackend {
        InMemoryBackend::from_parts(
            Arc::new(HashingEmbedder::new()),
            Arc::new(SystemClock),
            AnnConfig::default(),
        )
    }

    fn from_parts(
        embedder: Arc<dyn EmbeddingProvider>,
        clock: Arc<dyn Clock>,
        ann: AnnConfig,
    ) -> InMemoryBackend {
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
                    tagged: HashMap::new(),
                    index: VectorIndex::with_ann(dimensions, ann),
                }),
            }),
        }
    }

    /// A builder, to choose the embedder or the clock.
    pub fn builder() -> InMemoryBuilder {
        InMemoryBuilder {
            embedder: Arc::new(HashingEmbedder::new()),
            clock: Arc::new(SystemClock),
            ann: AnnConfig::default(),
        }
    }

    /// How far the approximate vector index has got: whether the store has one, how many
    /// vectors are in it and how many wait for the background indexer (searches score those
    /// exactly meanwhile).
    pub fn index_status(&self) -> IndexStatus {
        self.read().index.status()
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

    /// A copy of the vectors of every entry, for merge planning, oldest first (so planning
    /// reads the copy front to back). Takes the read lock for [`COPY_CHUNK`] entries at a
    /// time, so writers wait for one chunk, not the whole O(n · dimensions) copy; entries
    /// deleted between chunks are left out, entries stored meanwhile are not considered.
    /// Run it off the async executor when large.
    fn merge_set(&self) -> MergeSet {
        let entries = self.read().merge_entries();
        let mut set = MergeSet::with_capacity(self.shared.dimensions, entries.len());
        for chunk in entries.chunks(COPY_CHUNK) {
            let state = self.read();
            for &(id, created_at) in chunk {
                if let Some(vector) = state.index.get(id) {
                    set.push(id, created_at, vector);
                }
            }
        }
        set
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

    /// The `k` entries whose vectors are nearest `vector` (cosine similarity, best first)
    /// among those `options` admits, with their similarity — vector search alone, for a
    /// caller that already has the query's embedding: no embedding call, no recall recorded.
    /// `vector` must have the store's dimension and finite values
    /// ([`MemoryError::Embedding`] otherwise).
    pub async fn nearest(
        &self,
        vector: &[f32],
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<(MemoryId, f32)>, MemoryError> {
        agent_op::check_embedding(vector, self.shared.dimensions)?;
        let hits = self.rank_vector(vector.to_vec(), k, options).await?;
        Ok(hits
            .into_iter()
            .map(|h| (format_id(h.id), h.score))
            .collect())
    }

    async fn rank_vector(
        &self,
        vector: Vec<f32>,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<Hit>, MemoryError> {
        if k == 0 {
            return Ok(Vec::new());
        }
        let floats = self.read().index.search_cost(options.exact);
        let this = self.clone();
        let options = options.clone();
        cpu(floats, move || this.read().hits(&vector, k, &options)).await
    }

    /// Runs `work` on the state under the write lock, off the executor when `floats` (the
    /// vector data a search touches) is large.
    async fn locked<T: Send + 'static>(
        &self,
        floats: usize,
        work: impl FnOnce(&mut State) -> T + Send + 'static,
    ) -> Result<T, MemoryError> {
        let this = self.clone();
        cpu(floats, move || work(&mut this.write())).await
    }

    async fn search_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<ScoredMemory>, MemoryError> {
        validate_query(query)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let vector =
            embed_checked(self.shared.embedder.as_ref(), self.shared.dimensions, query).await?;
        let hits = self.rank_vector(vector.clone(), k, options).await?;
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_micros(self.shared.clock.as_ref());
        {
            let mut state = self.write();
            if hits.iter().all(|hit| state.entries.contains_key(&hit.id)) {
                return Ok(state.recall(&hits, now));
            }
        }
        // An entry among the hits was deleted between the scan and now: its place belongs
        // to the next best entry. Ranked again and recorded under one write lock, so nothing
        // can be deleted in between (rare: only a delete racing this search gets here).
        let floats = self.read().index.search_cost(options.exact);
        let options = options.clone();
        self.locked(floats, move |state| {
            let hits = state.hits(&vector, k, &options);
            state.recall(&hits, now)
        })
        .await
    }

    async fn search_candidates_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<Candidate>, MemoryError> {
        validate_query(query)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let vector =
            embed_checked(self.shared.embedder.as_ref(), self.shared.dimensions, query).await?;
        let hits = self.rank_vector(vector.clone(), k, options).await?;
        {
            let state = self.read();
            if hits.iter().all(|hit| state.entries.contains_key(&hit.id)) {
                return Ok(state.candidates(&hits));
            }
        }
        // As in `search_inner`: a hit deleted meanwhile gives way to the next best entry,
        // ranked again and read under one lock.
        let floats = self.read().index.search_cost(options.exact);
        let this = self.clone();
        let options = options.clone();
        cpu(floats, move || {
            let state = this.read();
            state.candidates(&state.hits(&vector, k, &options))
        })
        .await
    }

    fn record_access_now(&self, ids: &[MemoryId]) -> Vec<MemoryEntry> {
        let now = now_micros(self.shared.clock.as_ref());
        let rows = distinct_ids(ids);
        let mut state = self.write();
        rows.into_iter()
            .filter_map(|n| {
                let stored = state.entries.get_mut(&n)?;
                stored.record_access(now);
                Some(stored.entry(n))
            })
            .collect()
    }

    async fn prune_inner(&self, policy: &PrunePolicy) -> Result<PruneReport, MemoryError> {
        validate(policy)?;
        let now = now_micros(self.shared.clock.as_ref());
        let mut report = PruneReport::default();
        if let Some(cutoff) = policy.max_age.and_then(|age| age_cutoff(now, age)) {
            let mut state = self.write();
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
            // Copied and planned off the executor when large (the copy alone is 150 MB at
            // 100,000 × 384), and planned outside the lock.
            let work = plan_work(self.read().entries.len(), self.shared.dimensions);
            let this = self.clone();
            let groups = cpu(work, move || this.merge_set().plan(threshold)).await?;
            report.merged += self.write().apply_merges(groups);
        }
        if let Some(max) = policy.max_entries {
            let mut state = self.write();
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
        Box::pin(self.search_inner(query, k, &UNRESTRICTED))
    }

    fn search_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        Box::pin(self.search_inner(query, k, options))
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
        Box::pin(self.prune_inner(policy))
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

    /// The hits of [`search`](MemoryBackend::search), unrecorded; the similarity is the score
    /// (the cosine similarity).
    fn search_candidates<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        Box::pin(self.search_candidates_inner(query, k, &UNRESTRICTED))
    }

    fn search_candidates_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        Box::pin(self.search_candidates_inner(query, k, options))
    }

    fn record_access<'a>(
        &'a self,
        ids: &'a [MemoryId],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move { Ok(self.record_access_now(ids)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_merge_copy_spans_its_chunks_whole() {
        let backend = InMemoryBackend::new();
        let kinds = ["alpha rays", "beta decay", "gamma bursts"];
        let n = 2 * COPY_CHUNK + 500;
        let memories = (0..n)
            .map(|i| NewMemory {
                content: kinds[i % 3].to_owned(),
                context: String::new(),
                tags: vec![],
            })
            .collect();
        backend.store_batch(memories).await.expect("store");
        let set = backend.merge_set();
        assert_eq!(set.len(), n);
        // Every entry copied once, oldest first, across the chunk boundaries.
        let plan = set.plan(1.0);
        let sizes: Vec<(i64, usize)> = plan.iter().map(|g| (g.keeper, g.absorbed.len())).collect();
        let per_kind = |k: usize| (n - k).div_ceil(3) - 1;
        assert_eq!(
            sizes,
            [(1, per_kind(0)), (2, per_kind(1)), (3, per_kind(2))]
        );
        assert!(
            plan.iter()
                .all(|g| g.absorbed.windows(2).all(|w| w[0] < w[1]))
        );
    }

    #[tokio::test]
    async fn merges_skip_entries_deleted_after_planning() {
        let backend = InMemoryBackend::new();
        let memory = |content: &str| NewMemory {
            content: content.to_owned(),
            context: String::new(),
            tags: vec![],
        };
        let ids = backend
            .store_batch(vec![
                memory("the same fact"),
                memory("the same fact"),
                memory("the same fact"),
                memory("another fact"),
                memory("another fact"),
            ])
            .await
            .expect("store");
        let set = backend.merge_set();
        let plan = set.plan(1.0);
        assert_eq!(plan.len(), 2);
        // Deleted while the plan was made: the keeper of one group, an absorbed entry of
        // the other.
        assert!(backend.delete(&ids[0]).await.expect("delete"));
        assert!(backend.delete(&ids[4]).await.expect("delete"));
        assert_eq!(backend.write().apply_merges(plan), 0);
        assert_eq!(backend.count().await.expect("count"), 3);
    }
}
