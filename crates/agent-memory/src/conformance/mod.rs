//! The conformance suite every [`MemoryBackend`] passes.
//!
//! Each check is an async function taking a [`Factory`], which builds a fresh, empty backend
//! around the embedder and clock the check chooses. A check panics (like `assert!`) when the
//! backend does not behave as the trait and this crate's backends document. To run the whole
//! suite against a backend, invoke [`memory_conformance_tests!`](crate::memory_conformance_tests)
//! in a test file; it generates one `#[tokio::test]` per check (the crate needs `tokio` with
//! the `macros` and `rt-multi-thread` features as a dev-dependency):
//!
//! ```no_run
//! use std::sync::Arc;
//! use agent_memory::InMemoryBackend;
//! use agent_memory::conformance::Fixture;
//!
//! agent_memory::memory_conformance_tests!(|embedder, clock| async move {
//!     let backend = InMemoryBackend::builder().embedder(embedder).clock(clock).build()?;
//!     Ok(Fixture::new(backend))
//! });
//! # fn main() {}
//! ```
//!
//! The checks assume what every backend must provide: ids stable and unique, search best
//! first with finite non-increasing scores, an exact-text query finding its entry first
//! (with the [`HashingEmbedder`]), recalled entries' access stats updated, `recent` newest
//! first (ties: later stored first), access times that never move back,
//! [`search_candidates`](MemoryBackend::search_candidates) recording nothing and
//! [`record_access`](MemoryBackend::record_access) recording exactly what it is given (so a
//! backend must override both trait defaults), `by_tags` requiring every tag, prune
//! semantics as documented on [`PrunePolicy`] and in `docs/MEMORY.md` (identical content
//! merging at `merge_similarity = 1.0` included), the input rules of this crate
//! ([`MAX_TEXT_BYTES`](crate::MAX_TEXT_BYTES), empty content refused, bad vectors refused),
//! concurrent writers all landing, every operation being cancellation-safe (see
//! [`cancellation`]), searches returning `k` hits while entries are stored and deleted
//! beside them (see [`churn`]), and filtered searches finding what exact ones do (see
//! [`recall`]).

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agent_op::{
    BoxFuture, EmbeddingError, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError,
    MemoryId, NewMemory, ProviderError, PrunePolicy, SearchOptions, Tag,
};

use crate::clock::{Clock, ManualClock};
use crate::embed::HashingEmbedder;

pub mod cancellation;
pub mod churn;
pub mod options;
pub mod recall;

pub use cancellation::cancelled_operations_leave_the_store_usable;
pub use churn::{
    BiasedEmbedder, filtered_search_is_complete_under_churn, search_is_complete_under_churn,
};
pub use options::{inverted_time_ranges_find_nothing, search_options_match_an_exact_oracle};
pub use recall::{ClusteredEmbedder, filtered_search_keeps_its_recall};

/// A backend under test, with anything that must live as long as it (a temporary
/// directory, a server handle).
pub struct Fixture {
    backend: Arc<dyn MemoryBackend>,
    second: Option<Arc<dyn MemoryBackend>>,
    integrity: Option<IntegrityCheck>,
    settle: Option<Settle>,
    bulk: Option<BulkStore>,
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

/// Stores many memories at once (see [`Fixture::with_bulk_store`]).
type BulkStore = Box<
    dyn Fn(Vec<NewMemory>) -> BoxFuture<'static, Result<Vec<MemoryId>, MemoryError>> + Send + Sync,
>;

/// Waits for a backend's background work (see [`Fixture::with_settle`]).
type Settle = Box<dyn Fn() -> BoxFuture<'static, Result<(), MemoryError>> + Send + Sync>;

/// A backend's own check of its storage: the problems it found, none when sound.
type IntegrityCheck =
    Box<dyn Fn() -> BoxFuture<'static, Result<Vec<String>, MemoryError>> + Send + Sync>;

impl Fixture {
    /// A fixture owning `backend`.
    pub fn new(backend: impl MemoryBackend + 'static) -> Fixture {
        Fixture {
            backend: Arc::new(backend),
            second: None,
            integrity: None,
            settle: None,
            bulk: None,
            _guard: None,
        }
    }

    /// Keeps `guard` alive (dropped after the backend) as long as the fixture.
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> Fixture {
        self._guard = Some(Box::new(guard));
        self
    }

    /// A second handle on the same store, opened independently of the first (another
    /// connection, another process's view), for the checks that one handle's trouble does
    /// not reach the other. Without one, those checks use the first handle again.
    pub fn with_second_handle(mut self, other: impl MemoryBackend + 'static) -> Fixture {
        self.second = Some(Arc::new(other));
        self
    }

    /// The backend's own check of its storage (for SQLite,
    /// [`SqliteBackend::integrity_check`](crate::SqliteBackend::integrity_check)), run after
    /// every disruptive step of the checks that use it; it answers the problems it found,
    /// and must find none.
    pub fn with_integrity_check<F, Fut>(mut self, check: F) -> Fixture
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<String>, MemoryError>> + Send + 'static,
    {
        self.integrity = Some(Box::new(move || Box::pin(check())));
        self
    }

    /// How to wait until the backend's background work is done — an approximate index
    /// taking in what was stored (for the in-memory and SQLite backends, until
    /// `index_status()` reports nothing pending) — for the checks that measure search
    /// quality rather than searches during indexing. Without it they measure at once.
    pub fn with_settle<F, Fut>(mut self, settle: F) -> Fixture
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), MemoryError>> + Send + 'static,
    {
        self.settle = Some(Box::new(move || Box::pin(settle())));
        self
    }

    /// How to store many memories at once (for SQLite, `store_batch`), for the checks that
    /// need a large store: with it they store tens of thousands of entries, without it a
    /// few thousand one at a time.
    pub fn with_bulk_store<F, Fut>(mut self, store: F) -> Fixture
    where
        F: Fn(Vec<NewMemory>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<MemoryId>, MemoryError>> + Send + 'static,
    {
        self.bulk = Some(Box::new(move |memories| Box::pin(store(memories))));
        self
    }

    /// Stores `memories` with the fixture's bulk store; `None` when it has none.
    pub async fn bulk_store(
        &self,
        memories: Vec<NewMemory>,
    ) -> Option<Result<Vec<MemoryId>, MemoryError>> {
        match &self.bulk {
            Some(store) => Some(store(memories).await),
            None => None,
        }
    }

    /// Stores `memories` with the fixture's bulk store, or one at a time without one;
    /// returns their ids in order.
    pub async fn store_many(&self, memories: Vec<NewMemory>) -> Result<Vec<MemoryId>, MemoryError> {
        if let Some(store) = &self.bulk {
            return store(memories).await;
        }
        let mut ids = Vec::with_capacity(memories.len());
        for memory in memories {
            ids.push(self.backend.store(memory).await?);
        }
        Ok(ids)
    }

    /// Whether the fixture can store many memories at once.
    pub fn has_bulk_store(&self) -> bool {
        self.bulk.is_some()
    }

    /// Waits until the backend's background work is done (at once without
    /// [`with_settle`](Fixture::with_settle)).
    pub async fn settle(&self) -> Result<(), MemoryError> {
        match &self.settle {
            Some(settle) => settle().await,
            None => Ok(()),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn MemoryBackend> {
        &self.backend
    }

    /// The second handle (the first one when the fixture has no other).
    pub fn second_handle(&self) -> &Arc<dyn MemoryBackend> {
        self.second.as_ref().unwrap_or(&self.backend)
    }

    /// Runs the backend's integrity check: the problems it found (none when the fixture has
    /// no check).
    pub async fn integrity_check(&self) -> Result<Vec<String>, MemoryError> {
        match &self.integrity {
            Some(check) => check().await,
            None => Ok(Vec::new()),
        }
    }
}

/// Builds a fresh, empty backend using the given embedder and clock. Implemented for every
/// `Fn(Arc<dyn EmbeddingProvider>, Arc<dyn Clock>) -> impl Future<Output = Result<Fixture,
/// MemoryError>>`.
pub trait Factory: Send + Sync {
    /// A new, empty backend.
    fn make(
        &self,
        embedder: Arc<dyn EmbeddingProvider>,
        clock: Arc<dyn Clock>,
    ) -> BoxFuture<'static, Result<Fixture, MemoryError>>;
}

impl<F, Fut> Factory for F
where
    F: Fn(Arc<dyn EmbeddingProvider>, Arc<dyn Clock>) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Fixture, MemoryError>> + Send + 'static,
{
    fn make(
        &self,
        embedder: Arc<dyn EmbeddingProvider>,
        clock: Arc<dyn Clock>,
    ) -> BoxFuture<'static, Result<Fixture, MemoryError>> {
        Box::pin(self(embedder, clock))
    }
}

/// What a [`FaultyEmbedder`] does wrong.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Puts a NaN in every vector.
    NaN,
    /// Returns vectors one longer than it declares.
    WrongDimension,
    /// Fails every call with a provider error.
    Fails,
}

/// An embedder that misbehaves in one chosen way (for bad-input checks). Declares 16
/// dimensions and the model name `faulty-16`.
#[derive(Clone, Debug)]
pub struct FaultyEmbedder {
    fault: Fault,
    inner: HashingEmbedder,
}

impl FaultyEmbedder {
    /// An embedder with `fault`.
    pub fn new(fault: Fault) -> FaultyEmbedder {
        FaultyEmbedder {
            fault,
            inner: HashingEmbedder::with_dimensions(16)
                .unwrap_or_else(|_| unreachable!("16 dimensions are valid")),
        }
    }
}

impl EmbeddingProvider for FaultyEmbedder {
    fn model(&self) -> &str {
        "faulty-16"
    }

    fn dimensions(&self) -> usize {
        16
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            let mut v = self.inner.embed_now(text);
            match self.fault {
                Fault::NaN => v[3] = f32::NAN,
                Fault::WrongDimension => v.push(0.5),
                Fault::Fails => {
                    return Err(EmbeddingError::Provider(ProviderError::transport(
                        "embedding server down (test)",
                    )));
                }
            }
            Ok(v)
        })
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

const T0: i64 = 1_700_000_000;

async fn fresh(factory: &impl Factory) -> (Fixture, ManualClock) {
    fresh_with(factory, Arc::new(HashingEmbedder::new())).await
}

async fn fresh_with(
    factory: &impl Factory,
    embedder: Arc<dyn EmbeddingProvider>,
) -> (Fixture, ManualClock) {
    let clock = ManualClock::at_unix_seconds(T0);
    let fixture = factory
        .make(embedder, Arc::new(clock.clone()))
        .await
        .unwrap_or_else(|e| panic!("the factory failed to build a backend: {e}"));
    (fixture, clock)
}

fn memory(content: &str, tags: &[&str]) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: format!("learned while testing `{content}`"),
        tags: tags.iter().map(|t| Tag::from(*t)).collect(),
    }
}

/// Waits for the fixture's background indexing, at most two minutes.
async fn settled(f: &Fixture) {
    ok(
        tokio::time::timeout(Duration::from_secs(120), f.settle())
            .await
            .unwrap_or_else(|_| panic!("the backend's indexing did not settle in 120 s")),
        "waiting for the index",
    );
}

fn ok<T>(result: Result<T, MemoryError>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what} failed: {e}"))
}

async fn store(b: &dyn MemoryBackend, content: &str, tags: &[&str]) -> MemoryId {
    ok(b.store(memory(content, tags)).await, "store")
}

async fn get(b: &dyn MemoryBackend, id: &MemoryId) -> MemoryEntry {
    ok(b.get(id).await, "get").unwrap_or_else(|| panic!("entry {id} is missing"))
}

fn contents(entries: &[MemoryEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.content.as_str()).collect()
}

const FACTS: [&str; 6] = [
    "The capital of France is Paris",
    "Rust ownership rules prevent data races at compile time",
    "Bananas are rich in potassium",
    "The staging server restarts every night at 3am",
    "Ana prefers concise answers with code examples",
    "The quarterly report is due on the first Monday of April",
];

// ---------------------------------------------------------------------------------------
// Checks

/// Store then get: every field round-trips, tags become a sorted set, times come from the
/// clock, `get` is not an access, ids are distinct, `count` follows.
pub async fn store_and_get(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    assert_eq!(ok(b.count().await, "count"), 0, "a new backend is empty");
    let id = ok(
        b.store(NewMemory {
            content: "Deploys go through the blue pipeline".to_owned(),
            context: "told by the on-call engineer".to_owned(),
            tags: vec!["ops".into(), "deploy".into(), "ops".into()],
        })
        .await,
        "store",
    );
    clock.advance(Duration::from_secs(5));
    let other = store(b, "Lunch is at noon", &[]).await;
    assert_ne!(id, other, "ids are unique");
    let entry = get(b, &id).await;
    assert_eq!(entry.id, id);
    assert_eq!(entry.content, "Deploys go through the blue pipeline");
    assert_eq!(entry.context, "told by the on-call engineer");
    assert_eq!(entry.tags, vec![Tag::from("deploy"), Tag::from("ops")]);
    assert_eq!(
        entry.created_at.timestamp(),
        T0,
        "created_at is the clock's time"
    );
    assert_eq!(entry.accessed_at, entry.created_at);
    assert_eq!(entry.access_count, 0);
    assert_eq!(get(b, &id).await, entry, "get does not count as an access");
    assert_eq!(get(b, &other).await.created_at.timestamp(), T0 + 5);
    assert_eq!(ok(b.count().await, "count"), 2);
}

/// Search: an exact-text query finds its entry first, results are best first with finite
/// scores, `k` bounds the results, `k = 0` returns nothing.
pub async fn search_ranks_exact_text_first(factory: &impl Factory) {
    let (f, _clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let mut ids = Vec::new();
    for fact in FACTS {
        ids.push(store(b, fact, &[]).await);
    }
    for (fact, id) in FACTS.iter().zip(&ids) {
        let hits = ok(b.search(fact, 3).await, "search");
        assert!(!hits.is_empty(), "no hit for the exact text {fact:?}");
        assert!(hits.len() <= 3, "k = 3 returned {}", hits.len());
        assert_eq!(&hits[0].entry.id, id, "{fact:?} is not its own best match");
        for pair in hits.windows(2) {
            assert!(pair[0].score.is_finite() && pair[1].score.is_finite());
            assert!(pair[0].score >= pair[1].score, "results are not best first");
        }
    }
    let hits = ok(
        b.search("what is the capital city of France?", 2).await,
        "search",
    );
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&ids[0]));
    assert!(ok(b.search("capital of France", 0).await, "search").is_empty());
}

/// Recall updates access time and count of the returned entries (and only those), and the
/// returned entries already show the update.
pub async fn search_updates_access_stats(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let paris = store(b, FACTS[0], &[]).await;
    let bananas = store(b, FACTS[2], &[]).await;
    clock.advance(Duration::from_secs(60));
    let hits = ok(b.search("capital of France Paris", 1).await, "search");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].entry.id, paris);
    assert_eq!(hits[0].entry.access_count, 1);
    assert_eq!(hits[0].entry.accessed_at.timestamp(), T0 + 60);
    let stored = get(b, &paris).await;
    assert_eq!(stored.access_count, 1);
    assert_eq!(stored.accessed_at.timestamp(), T0 + 60);
    assert_eq!(
        stored.created_at.timestamp(),
        T0,
        "recall does not change created_at"
    );
    clock.advance(Duration::from_secs(60));
    ok(b.search("capital of France Paris", 1).await, "search");
    assert_eq!(get(b, &paris).await.access_count, 2);
    let untouched = get(b, &bananas).await;
    assert_eq!(
        untouched.access_count, 0,
        "an entry not returned was not recalled"
    );
    assert_eq!(untouched.accessed_at.timestamp(), T0);
    // A clock that went back (or a recall that waited for a lock after reading it) never
    // moves an access time back.
    clock.set(chrono::DateTime::from_timestamp(T0 + 30, 0).unwrap_or_default());
    let hits = ok(b.search("capital of France Paris", 1).await, "search");
    assert_eq!(hits[0].entry.access_count, 3);
    assert_eq!(
        hits[0].entry.accessed_at.timestamp(),
        T0 + 120,
        "the access time moved back"
    );
    assert_eq!(get(b, &paris).await.accessed_at.timestamp(), T0 + 120);
}

/// [`search_candidates`](MemoryBackend::search_candidates) returns what `search` would, with
/// the cosine similarity, and records nothing; [`record_access`](MemoryBackend::record_access)
/// records a recall of exactly the entries given (each once, unknown ids skipped, the access
/// time never moving back) and returns them updated.
pub async fn candidates_are_recalled_only_when_recorded(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let mut ids = Vec::new();
    for fact in FACTS {
        ids.push(store(b, fact, &[]).await);
    }
    clock.advance(Duration::from_secs(60));
    let candidates = ok(b.search_candidates(FACTS[1], 3).await, "search_candidates");
    assert!(!candidates.is_empty() && candidates.len() <= 3);
    let first = &candidates[0];
    assert_eq!(first.hit.entry.id, ids[1], "the exact text comes first");
    let similarity = first
        .similarity
        .unwrap_or_else(|| panic!("no similarity for the exact text"));
    assert!(
        similarity > 0.999 && similarity <= 1.0,
        "exact text similarity {similarity}"
    );
    for c in &candidates {
        assert_eq!(
            c.hit.entry.access_count, 0,
            "search_candidates recorded a recall"
        );
        if let Some(s) = c.similarity {
            assert!((-1.0..=1.0).contains(&s), "similarity {s}");
        }
    }
    for id in &ids {
        let entry = get(b, id).await;
        assert_eq!(entry.access_count, 0, "search_candidates recorded a recall");
        assert_eq!(entry.accessed_at.timestamp(), T0);
    }
    let search = ok(b.search(FACTS[1], 3).await, "search");
    assert_eq!(
        search.iter().map(|h| &h.entry.id).collect::<Vec<_>>(),
        candidates
            .iter()
            .map(|c| &c.hit.entry.id)
            .collect::<Vec<_>>(),
        "search_candidates returns what search does"
    );
    let searched: Vec<MemoryId> = search.iter().map(|h| h.entry.id.clone()).collect();

    clock.advance(Duration::from_secs(60));
    let asked = [
        ids[4].clone(),
        MemoryId::from("999999"),
        ids[2].clone(),
        ids[4].clone(),
        MemoryId::from("not-an-id"),
    ];
    let recorded = ok(b.record_access(&asked).await, "record_access");
    assert_eq!(
        recorded.iter().map(|e| &e.id).collect::<Vec<_>>(),
        [&ids[4], &ids[2]],
        "each known id once, in order"
    );
    for entry in &recorded {
        assert_eq!(entry.access_count, 1, "{}", entry.id);
        assert_eq!(entry.accessed_at.timestamp(), T0 + 120);
        assert_eq!(
            &get(b, &entry.id).await,
            entry,
            "the returned entry is as stored"
        );
    }
    for id in &ids {
        let entry = get(b, id).await;
        let want = u64::from(searched.contains(id)) + u64::from(*id == ids[4] || *id == ids[2]);
        assert_eq!(entry.access_count, want, "{id}");
    }
    clock.set(chrono::DateTime::from_timestamp(T0, 0).unwrap_or_default());
    let again = ok(
        b.record_access(std::slice::from_ref(&ids[4])).await,
        "record_access",
    );
    assert_eq!(again[0].access_count, 2);
    assert_eq!(
        again[0].accessed_at.timestamp(),
        T0 + 120,
        "the access time moved back"
    );
    assert!(ok(b.record_access(&[]).await, "record_access").is_empty());
}

/// `recent(n)`: the `n` newest entries, newest first; ties in time go to the later stored.
pub async fn recent_is_newest_first(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    for fact in &FACTS[..4] {
        store(b, fact, &[]).await;
        clock.advance(Duration::from_secs(1));
    }
    let recent = ok(b.recent(3).await, "recent");
    assert_eq!(contents(&recent), [FACTS[3], FACTS[2], FACTS[1]]);
    assert_eq!(ok(b.recent(100).await, "recent").len(), 4);
    assert!(ok(b.recent(0).await, "recent").is_empty());
    // Same timestamp: the one stored later is newer.
    store(b, FACTS[4], &[]).await;
    store(b, FACTS[5], &[]).await;
    let recent = ok(b.recent(2).await, "recent");
    assert_eq!(contents(&recent), [FACTS[5], FACTS[4]]);
    // Recall does not reorder: `recent` is by storage time.
    ok(b.search(FACTS[0], 1).await, "search");
    assert_eq!(
        ok(b.recent(6).await, "recent")
            .last()
            .map(|e| e.content.as_str()),
        Some(FACTS[0])
    );
}

/// `by_tags`: entries carrying every given tag, newest first; duplicates in the query do not
/// matter; no tags means every entry; unknown tags match nothing.
pub async fn by_tags_requires_every_tag(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let a = store(b, "only a", &["a"]).await;
    clock.advance(Duration::from_secs(1));
    let ab = store(b, "a and b", &["a", "b"]).await;
    clock.advance(Duration::from_secs(1));
    let bc = store(b, "b and c", &["b", "c"]).await;
    let ids = |entries: Vec<MemoryEntry>| entries.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let tags = |t: &[&str]| t.iter().map(|s| Tag::from(*s)).collect::<Vec<_>>();
    assert_eq!(
        ids(ok(b.by_tags(&tags(&["a"])).await, "by_tags")),
        [ab.clone(), a.clone()]
    );
    assert_eq!(
        ids(ok(b.by_tags(&tags(&["a", "b"])).await, "by_tags")),
        std::slice::from_ref(&ab)
    );
    assert_eq!(
        ids(ok(b.by_tags(&tags(&["b", "a", "b"])).await, "by_tags")),
        std::slice::from_ref(&ab)
    );
    assert_eq!(
        ids(ok(b.by_tags(&tags(&["b"])).await, "by_tags")),
        [bc.clone(), ab.clone()]
    );
    assert!(ok(b.by_tags(&tags(&["a", "c"])).await, "by_tags").is_empty());
    assert!(ok(b.by_tags(&tags(&["zzz"])).await, "by_tags").is_empty());
    assert_eq!(ids(ok(b.by_tags(&[]).await, "by_tags")), [bc, ab, a]);
    // Tags are compared exactly (case-sensitive).
    assert!(ok(b.by_tags(&tags(&["A"])).await, "by_tags").is_empty());
}

/// Filtered search (`search_with`, `search_candidates_with`): the restrictions apply inside
/// the search, so the best admitted entries come back even when many better entries are
/// excluded; tags must all be present; `created_after` is inclusive and `created_before`
/// exclusive; `exact` gives (nearly) the same hits as the default on a small store; only returned
/// entries count as recalled, and `search_candidates_with` records nothing.
pub async fn filtered_search_applies_inside_the_search(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    // 120 close matches without the tag, then 3 weaker ones with it, each a second apart.
    for i in 0..120 {
        store(
            b,
            &format!("the deploy key rotation runbook, copy {i}"),
            &["noise"],
        )
        .await;
        clock.advance(Duration::from_secs(1));
    }
    let t_first = clock.now();
    let first = store(b, "deploy notes for the ops team", &["ops", "team"]).await;
    clock.advance(Duration::from_secs(1));
    let second = store(b, "the ops key list", &["ops"]).await;
    clock.advance(Duration::from_secs(1));
    let t_third = clock.now();
    let third = store(b, "ops rotation calendar", &["ops", "team"]).await;
    let query = "the deploy key rotation runbook";

    let ids = |hits: Vec<agent_op::ScoredMemory>| {
        let mut ids: Vec<MemoryId> = hits.into_iter().map(|h| h.entry.id).collect();
        ids.sort();
        ids
    };
    let sorted = |mut v: Vec<MemoryId>| {
        v.sort();
        v
    };
    let ops = SearchOptions::new().tag("ops");
    let hits = ok(b.search_with(query, 10, &ops).await, "search_with");
    assert!(
        hits.iter()
            .all(|h| h.entry.tags.contains(&Tag::from("ops"))),
        "every hit carries the tag"
    );
    assert_eq!(
        ids(hits),
        sorted(vec![first.clone(), second.clone(), third.clone()]),
        "the filter applies inside the search: all 3 tagged entries, though 120 untagged ones match better"
    );
    assert_eq!(
        get(b, &second).await.access_count,
        1,
        "returned hits are recalled"
    );
    assert_eq!(
        get(b, &MemoryId::from("1")).await.access_count,
        0,
        "excluded entries are not recalled"
    );

    let both = SearchOptions::new().tag("team").tag("ops");
    assert_eq!(
        ids(ok(b.search_with(query, 10, &both).await, "search_with")),
        sorted(vec![first.clone(), third.clone()]),
        "every tag must be present"
    );
    let one = ok(b.search_with(query, 1, &both).await, "search_with");
    assert_eq!(one.len(), 1, "k bounds filtered results");

    let window = SearchOptions::new()
        .created_after(t_first)
        .created_before(t_third);
    assert_eq!(
        ids(ok(b.search_with(query, 10, &window).await, "search_with")),
        sorted(vec![first.clone(), second.clone()]),
        "created_after is inclusive, created_before exclusive"
    );
    let none = SearchOptions::new()
        .tag("ops")
        .created_after(clock.now() + chrono::Duration::seconds(1));
    assert!(ok(b.search_with(query, 10, &none).await, "search_with").is_empty());
    assert!(
        ok(
            b.search_with(query, 10, &SearchOptions::new().tag("nope"))
                .await,
            "search_with"
        )
        .is_empty(),
        "an unknown tag admits nothing"
    );

    let before = get(b, &first).await.access_count;
    let candidates = ok(
        b.search_candidates_with(query, 10, &ops).await,
        "search_candidates_with",
    );
    assert_eq!(candidates.len(), 3);
    assert_eq!(
        get(b, &first).await.access_count,
        before,
        "search_candidates_with records nothing"
    );

    let default = ok(
        b.search_candidates_with(query, 5, &SearchOptions::new())
            .await,
        "search_candidates_with",
    );
    let exact = ok(
        b.search_candidates_with(query, 5, &SearchOptions::new().exact(true))
            .await,
        "search_candidates_with",
    );
    let hit_ids =
        |c: &[agent_op::Candidate]| c.iter().map(|c| c.hit.entry.id.clone()).collect::<Vec<_>>();
    assert_eq!((default.len(), exact.len()), (5, 5));
    // Backends search small stores exactly by default, so both agree; a backend configured
    // to walk an approximate index even here may trade a hit or two among 120 near-copies.
    let (default, exact) = (hit_ids(&default), hit_ids(&exact));
    let shared = exact.iter().filter(|id| default.contains(id)).count();
    assert!(
        shared >= 3,
        "exact and default search share {shared} of 5 hits: {default:?} vs {exact:?}"
    );
}

/// `delete`: `true` once, then `false`; the entry is gone from get, search, recent, tags and
/// count; ids the backend never issued are `false`/`None`, not errors.
pub async fn delete_removes_everywhere(factory: &impl Factory) {
    let (f, _clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let keep = store(b, FACTS[1], &["x"]).await;
    let gone = store(b, FACTS[0], &["x"]).await;
    assert!(ok(b.delete(&gone).await, "delete"));
    assert!(
        !ok(b.delete(&gone).await, "delete"),
        "a second delete finds nothing"
    );
    assert_eq!(ok(b.get(&gone).await, "get"), None);
    assert_eq!(ok(b.count().await, "count"), 1);
    let hits = ok(b.search(FACTS[0], 5).await, "search");
    assert!(
        hits.iter().all(|h| h.entry.id != gone),
        "a deleted entry was recalled"
    );
    assert_eq!(contents(&ok(b.recent(5).await, "recent")), [FACTS[1]]);
    let tagged = ok(b.by_tags(&[Tag::from("x")]).await, "by_tags");
    assert_eq!(tagged.iter().map(|e| &e.id).collect::<Vec<_>>(), [&keep]);
    for unknown in [
        "",
        "0",
        "-1",
        "999999",
        "not-an-id",
        "1; DROP TABLE entries",
        "99999999999999999999999",
    ] {
        let id = MemoryId::from(unknown);
        assert_eq!(
            ok(b.get(&id).await, "get of an unknown id"),
            None,
            "{unknown:?}"
        );
        assert!(
            !ok(b.delete(&id).await, "delete of an unknown id"),
            "{unknown:?}"
        );
    }
    assert_eq!(ok(b.count().await, "count"), 1);
}

/// `max_entries`: evicts the least recalled first, then the longest unused, down to the
/// limit; reports how many were removed.
pub async fn prune_max_entries_evicts_least_used(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let mut ids = Vec::new();
    for fact in &FACTS[..5] {
        ids.push(store(b, fact, &[]).await);
        clock.advance(Duration::from_secs(10));
    }
    // Recall FACTS[0] twice and FACTS[3] once; then touch nothing else.
    for query in [FACTS[0], FACTS[0], FACTS[3]] {
        let hits = ok(b.search(query, 1).await, "search");
        assert_eq!(hits.len(), 1);
        clock.advance(Duration::from_secs(1));
    }
    let report = ok(b.prune(&PrunePolicy::new().max_entries(3)).await, "prune");
    assert_eq!((report.removed, report.merged), (2, 0));
    // Never recalled: FACTS[1], [2], [4]; the two accessed longest ago ([1], [2]) go.
    let mut left: Vec<String> = ok(b.recent(10).await, "recent")
        .into_iter()
        .map(|e| e.content)
        .collect();
    left.sort();
    let mut want = vec![
        FACTS[0].to_owned(),
        FACTS[3].to_owned(),
        FACTS[4].to_owned(),
    ];
    want.sort();
    assert_eq!(left, want);
    let none = ok(b.prune(&PrunePolicy::new().max_entries(3)).await, "prune");
    assert_eq!(
        (none.removed, none.merged),
        (0, 0),
        "already within the limit"
    );
    let all = ok(b.prune(&PrunePolicy::new().max_entries(0)).await, "prune");
    assert_eq!(all.removed, 3);
    assert_eq!(ok(b.count().await, "count"), 0);
}

/// `max_age`: removes entries not accessed for longer than the age; a recall keeps an old
/// entry alive.
pub async fn prune_max_age_uses_access_time(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let old = store(b, FACTS[0], &[]).await;
    let old_but_recalled = store(b, FACTS[2], &[]).await;
    clock.advance(Duration::from_secs(7200));
    let hits = ok(b.search(FACTS[2], 1).await, "search");
    assert_eq!(hits[0].entry.id, old_but_recalled);
    let new = store(b, FACTS[1], &[]).await;
    clock.advance(Duration::from_secs(1800));
    let report = ok(
        b.prune(&PrunePolicy::new().max_age(Duration::from_secs(3600)))
            .await,
        "prune",
    );
    assert_eq!((report.removed, report.merged), (1, 0));
    assert_eq!(ok(b.get(&old).await, "get"), None);
    assert!(ok(b.get(&old_but_recalled).await, "get").is_some());
    assert!(ok(b.get(&new).await, "get").is_some());
    // An age beyond any representable time removes nothing.
    let report = ok(
        b.prune(&PrunePolicy::new().max_age(Duration::MAX)).await,
        "prune",
    );
    assert_eq!(report.removed, 0);
}

/// `merge_similarity`: near-duplicates fold into the oldest: tags united, access counts
/// added, the latest access time kept, the newer entries deleted. Thresholds outside (0, 1]
/// are refused.
pub async fn prune_merges_near_duplicates(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let first = store(b, "The team meeting is at noon on Friday", &["calendar"]).await;
    clock.advance(Duration::from_secs(10));
    let dup = store(
        b,
        "the team meeting is at noon on friday!",
        &["team", "calendar"],
    )
    .await;
    clock.advance(Duration::from_secs(10));
    let other = store(b, FACTS[2], &[]).await;
    clock.advance(Duration::from_secs(10));
    // Recall the duplicate (only) twice.
    for _ in 0..2 {
        let hits = ok(
            b.search("the team meeting is at noon on friday!", 2).await,
            "search",
        );
        assert!(hits.iter().any(|h| h.entry.id == dup));
    }
    let before_first = get(b, &first).await;
    let before_dup = get(b, &dup).await;
    clock.advance(Duration::from_secs(10));
    let report = ok(
        b.prune(&PrunePolicy::new().merge_similarity(0.95)).await,
        "prune",
    );
    assert_eq!((report.removed, report.merged), (0, 1));
    assert_eq!(
        ok(b.get(&dup).await, "get"),
        None,
        "the newer duplicate is gone"
    );
    let kept = get(b, &first).await;
    assert_eq!(
        kept.content, "The team meeting is at noon on Friday",
        "the older one stays"
    );
    assert_eq!(kept.tags, vec![Tag::from("calendar"), Tag::from("team")]);
    assert_eq!(
        kept.access_count,
        before_first.access_count + before_dup.access_count
    );
    assert_eq!(
        kept.accessed_at,
        before_first.accessed_at.max(before_dup.accessed_at)
    );
    assert_eq!(kept.created_at, before_first.created_at);
    assert!(ok(b.get(&other).await, "get").is_some());
    assert_eq!(ok(b.count().await, "count"), 2);
    let hits = ok(b.search("team meeting friday", 5).await, "search");
    assert!(
        hits.iter().all(|h| h.entry.id != dup),
        "a merged entry was recalled"
    );
    for bad in [0.0, -0.1, 1.5, f32::NAN] {
        let result = b.prune(&PrunePolicy::new().merge_similarity(bad)).await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "merge_similarity {bad} was not refused: {result:?}"
        );
    }
    assert_eq!(
        ok(b.count().await, "count"),
        2,
        "a refused prune changes nothing"
    );
    let nothing = ok(b.prune(&PrunePolicy::default()).await, "prune");
    assert_eq!((nothing.removed, nothing.merged), (0, 0));
}

/// Exact copies merge at `merge_similarity = 1.0` (cosine similarity 1, whatever the f32
/// rounding of the vectors), into the oldest copy.
pub async fn prune_merges_identical_copies_at_one(factory: &impl Factory) {
    let (f, clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    let texts: Vec<String> = (0..150)
        .map(|i| {
            format!(
                "note {i}: the build {} failed on runner {} after {} minutes",
                i * 7,
                i % 13,
                i % 37
            )
        })
        .chain(FACTS.iter().map(|f| (*f).to_owned()))
        .collect();
    let mut originals = Vec::new();
    for text in &texts {
        originals.push(store(b, text, &[]).await);
    }
    clock.advance(Duration::from_secs(1));
    for text in &texts {
        store(b, text, &[]).await;
    }
    let report = ok(
        b.prune(&PrunePolicy::new().merge_similarity(1.0)).await,
        "prune",
    );
    assert_eq!(
        (report.removed, report.merged),
        (0, texts.len() as u64),
        "every copy merges into its original"
    );
    assert_eq!(ok(b.count().await, "count"), texts.len() as u64);
    for id in &originals {
        get(b, id).await;
    }
}

/// Bad input: empty and oversized content are refused, 1 MB content round-trips and is
/// found, queries full of SQL and FTS syntax are plain text, queries without words find
/// nothing; nothing of it disturbs the store.
pub async fn bad_input_is_refused_or_harmless(factory: &impl Factory) {
    let (f, _clock) = fresh(factory).await;
    let b = f.backend().as_ref();
    for empty in ["", "   \n\t "] {
        let result = b.store(memory(empty, &[])).await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "empty content {empty:?} was not refused: {result:?}"
        );
    }
    let too_big = "x".repeat(crate::MAX_TEXT_BYTES + 1);
    let result = b.store(memory(&too_big, &[])).await;
    assert!(
        matches!(result, Err(MemoryError::InvalidInput(_))),
        "oversized content: {result:?}"
    );
    let mut big_context = memory("small content", &[]);
    big_context.context = too_big;
    let result = b.store(big_context).await;
    assert!(
        matches!(result, Err(MemoryError::InvalidInput(_))),
        "oversized context: {result:?}"
    );
    assert_eq!(ok(b.count().await, "count"), 0);

    // 1 MB of text (words, so it is indexed) round-trips exactly.
    let mut big = String::with_capacity(1 << 20);
    let mut i = 0u64;
    while big.len() < (1 << 20) - 16 {
        big.push_str(&format!("word{} ", i % 5000));
        i += 1;
    }
    big.push_str("zanzibar");
    let big_id = store(b, &big, &["big"]).await;
    assert_eq!(get(b, &big_id).await.content, big);

    let sql = "Robert'); DROP TABLE entries; -- said \"hi\" * NEAR(x y) OR title:z ^a";
    let sql_id = store(b, sql, &["'; DROP TABLE entry_tags; --", "\"quoted\""]).await;
    let stored = get(b, &sql_id).await;
    assert_eq!(
        stored.content, sql,
        "text with SQL in it is stored verbatim"
    );
    assert!(
        stored
            .tags
            .contains(&Tag::from("'; DROP TABLE entry_tags; --"))
    );
    let near = store(b, "We meet NEAR the station", &[]).await;

    let hostile = [
        "\"",
        "\"\"\"",
        "*",
        "NEAR",
        "NEAR(a b, 2)",
        "'; DROP TABLE entries; --",
        "\" OR 1=1 --",
        "content:anything",
        "a AND (b OR",
        "^start -minus +plus {col}",
        "NOT",
        "\u{0}\u{1}\u{7f}",
        "%_\\",
    ];
    for query in hostile {
        let hits = b.search(query, 5).await;
        assert!(hits.is_ok(), "query {query:?} failed: {hits:?}");
    }
    let hits = ok(b.search("NEAR", 5).await, "search");
    assert!(
        hits.iter().any(|h| h.entry.id == near),
        "the word NEAR is searched as a word"
    );
    let hits = ok(b.search("'; DROP TABLE entries; --", 5).await, "search");
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&sql_id));
    let hits = ok(b.search("zanzibar", 5).await, "search");
    assert!(
        hits.iter().any(|h| h.entry.id == big_id),
        "the 1 MB entry is searchable"
    );
    let everything = ok(
        b.search("word1 word2 zanzibar NEAR", usize::MAX).await,
        "search",
    );
    assert!(
        !everything.is_empty() && everything.len() <= 3,
        "k = usize::MAX"
    );
    for wordless in ["", "   ", "*** ??? !!!"] {
        assert!(
            ok(b.search(wordless, 5).await, "search").is_empty(),
            "{wordless:?} found something"
        );
    }
    let huge_query = "q ".repeat(crate::MAX_TEXT_BYTES);
    let result = b.search(&huge_query, 5).await;
    assert!(
        matches!(result, Err(MemoryError::InvalidInput(_))),
        "oversized query: {result:?}"
    );
    assert_eq!(
        ok(b.count().await, "count"),
        3,
        "hostile queries changed nothing"
    );
    assert_eq!(ok(b.by_tags(&[Tag::from("big")]).await, "by_tags").len(), 1);
}

/// Embedders that fail or return NaN or wrong-length vectors: a clear
/// [`MemoryError::Embedding`], and nothing is stored.
pub async fn bad_vectors_are_refused(factory: &impl Factory) {
    for fault in [Fault::NaN, Fault::WrongDimension, Fault::Fails] {
        let (f, _clock) = fresh_with(factory, Arc::new(FaultyEmbedder::new(fault))).await;
        let b = f.backend().as_ref();
        let stored = b.store(memory("anything at all", &["t"])).await;
        let expected = |e: &MemoryError| {
            matches!(
                (fault, e),
                (
                    Fault::NaN,
                    MemoryError::Embedding(EmbeddingError::NonFinite)
                ) | (
                    Fault::WrongDimension,
                    MemoryError::Embedding(EmbeddingError::DimensionMismatch {
                        expected: 16,
                        got: 17,
                    }),
                ) | (
                    Fault::Fails,
                    MemoryError::Embedding(EmbeddingError::Provider(_))
                )
            )
        };
        match &stored {
            Err(e) if expected(e) => {}
            other => panic!("{fault:?}: store gave {other:?}"),
        }
        match b.search("anything", 3).await {
            Err(e) if expected(&e) => {}
            other => panic!("{fault:?}: search gave {other:?}"),
        }
        assert_eq!(
            ok(b.count().await, "count"),
            0,
            "{fault:?}: something was stored"
        );
        assert!(ok(b.recent(5).await, "recent").is_empty());
    }
}

/// 8 tasks storing at once: every entry lands with its own id.
pub async fn concurrent_writers_all_land(factory: &impl Factory) {
    let (f, _clock) = fresh(factory).await;
    let backend = f.backend().clone();
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let b = backend.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..25 {
                    let content = format!("task {t} fact {i}: the sky is blue number {i}");
                    ids.push(b.store(memory(&content, &[&format!("task{t}")])).await?);
                    if i % 8 == 0 {
                        b.search(&content, 3).await?;
                    }
                }
                Ok::<_, MemoryError>(ids)
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        let ids = ok(
            task.await
                .unwrap_or_else(|e| panic!("writer task panicked: {e}")),
            "concurrent store",
        );
        all.extend(ids);
    }
    assert_eq!(all.len(), 200);
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 200, "ids are unique");
    assert_eq!(ok(backend.count().await, "count"), 200);
    for id in &all {
        get(backend.as_ref(), id).await;
    }
    for t in 0..8 {
        let tagged = ok(
            backend.by_tags(&[Tag::from(format!("task{t}"))]).await,
            "by_tags",
        );
        assert_eq!(tagged.len(), 25);
    }
}

/// Runs every check in turn (for backends tested outside `#[tokio::test]`).
pub async fn run_all(factory: &impl Factory) {
    store_and_get(factory).await;
    search_ranks_exact_text_first(factory).await;
    search_updates_access_stats(factory).await;
    recent_is_newest_first(factory).await;
    by_tags_requires_every_tag(factory).await;
    filtered_search_applies_inside_the_search(factory).await;
    delete_removes_everywhere(factory).await;
    prune_max_entries_evicts_least_used(factory).await;
    prune_max_age_uses_access_time(factory).await;
    prune_merges_near_duplicates(factory).await;
    prune_merges_identical_copies_at_one(factory).await;
    candidates_are_recalled_only_when_recorded(factory).await;
    bad_input_is_refused_or_harmless(factory).await;
    bad_vectors_are_refused(factory).await;
    concurrent_writers_all_land(factory).await;
    cancelled_operations_leave_the_store_usable(factory).await;
    search_is_complete_under_churn(factory).await;
    filtered_search_is_complete_under_churn(factory).await;
    filtered_search_keeps_its_recall(factory).await;
    search_options_match_an_exact_oracle(factory).await;
    inverted_time_ranges_find_nothing(factory).await;
}

/// Generates one `#[tokio::test]` per conformance check for the backends `$factory` builds
/// (see [`conformance`](crate::conformance)). Invoke it once per backend, each in its own
/// module.
#[macro_export]
macro_rules! memory_conformance_tests {
    ($factory:expr) => {
        $crate::memory_conformance_tests!(@tests $factory;
            store_and_get,
            search_ranks_exact_text_first,
            search_updates_access_stats,
            recent_is_newest_first,
            by_tags_requires_every_tag,
            filtered_search_applies_inside_the_search,
            delete_removes_everywhere,
            prune_max_entries_evicts_least_used,
            prune_max_age_uses_access_time,
            prune_merges_near_duplicates,
            prune_merges_identical_copies_at_one,
            candidates_are_recalled_only_when_recorded,
            bad_input_is_refused_or_harmless,
            bad_vectors_are_refused,
            concurrent_writers_all_land,
            cancelled_operations_leave_the_store_usable,
            search_is_complete_under_churn,
            filtered_search_is_complete_under_churn,
            filtered_search_keeps_its_recall,
            search_options_match_an_exact_oracle,
            inverted_time_ranges_find_nothing,
        );
    };
    (@tests $factory:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let factory = $factory;
                $crate::conformance::$check(&factory).await;
            }
        )*
    };
}
