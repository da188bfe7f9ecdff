//! `build_context`: blending recency and similarity, the threshold, the token budget.

use std::sync::Arc;
use std::time::Duration;

use agent_memory::{
    Clock, ContextWindow, InMemoryBackend, ManualClock, SqliteBackend, build_context,
    build_context_at, estimate_tokens,
};
use agent_op::{
    BoxFuture, MemoryBackend, MemoryEntry, MemoryError, MemoryId, NewMemory, PrunePolicy,
    PruneReport, ScoredMemory, Tag,
};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn memory(content: &str) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: String::new(),
        tags: vec![],
    }
}

async fn store(backend: &dyn MemoryBackend, content: &str) {
    backend.store(memory(content)).await.expect("store");
}

fn backend(clock: &ManualClock) -> InMemoryBackend {
    InMemoryBackend::builder()
        .clock(Arc::new(clock.clone()))
        .build()
        .expect("backend")
}

#[tokio::test]
async fn recency_weight_prefers_new_entries_and_semantic_weight_similar_ones() {
    let clock = ManualClock::at_unix_seconds(1_700_000_000);
    let memory = backend(&clock);
    // Old but a closer match; new but a looser one.
    store(&memory, "Ana drinks green tea every morning").await;
    clock.advance(DAY * 30);
    store(
        &memory,
        "Ana switched to coffee, she now drinks coffee daily at work",
    )
    .await;
    let now = clock.now();
    let query = "what does Ana drink every morning";

    let semantic = ContextWindow {
        recency_weight: 0.0,
        semantic_weight: 1.0,
        ..ContextWindow::new(1000)
    };
    let built = build_context_at(&memory, &semantic, query, now)
        .await
        .expect("context");
    assert_eq!(built.entries.len(), 2);
    assert_eq!(
        built.entries[0].entry.content,
        "Ana drinks green tea every morning"
    );
    assert!(built.entries[0].similarity > built.entries[1].similarity);

    let recent = ContextWindow {
        recency_weight: 1.0,
        semantic_weight: 0.1,
        ..ContextWindow::new(1000)
    };
    let built = build_context_at(&memory, &recent, query, now)
        .await
        .expect("context");
    assert_eq!(
        built.entries[0].entry.content,
        "Ana switched to coffee, she now drinks coffee daily at work"
    );
    // Recency halves every half-life (7 days by default): 30 days old ≈ 0.051.
    let old = &built.entries[1];
    assert!(
        (old.recency - 0.5f32.powf(30.0 / 7.0)).abs() < 1e-4,
        "{}",
        old.recency
    );
    assert!((built.entries[0].recency - 1.0).abs() < 1e-6);
    for e in &built.entries {
        assert!((e.score - (1.0 * e.recency + 0.1 * e.similarity)).abs() < 1e-6);
    }
}

#[tokio::test]
async fn the_threshold_drops_weak_matches() {
    let clock = ManualClock::at_unix_seconds(1_700_000_000);
    let memory = backend(&clock);
    for fact in [
        "The staging deploy needs the VPN",
        "Deploy windows are Tuesday and Thursday",
        "The staging database was migrated to version 14",
    ] {
        store(&memory, fact).await;
    }
    let all = build_context_at(
        &memory,
        &ContextWindow::new(1000),
        "staging deploy VPN",
        clock.now(),
    )
    .await
    .expect("context");
    assert_eq!(all.entries.len(), 3);
    let strict = ContextWindow {
        similarity_threshold: 0.5,
        ..ContextWindow::new(1000)
    };
    let some = build_context_at(&memory, &strict, "staging deploy VPN", clock.now())
        .await
        .expect("context");
    assert_eq!(some.entries.len(), 1);
    assert_eq!(
        some.entries[0].entry.content,
        "The staging deploy needs the VPN"
    );
    assert!(some.entries.iter().all(|e| e.similarity >= 0.5));
}

#[tokio::test]
async fn the_token_budget_is_filled_greedily() {
    let clock = ManualClock::at_unix_seconds(1_700_000_000);
    let memory = backend(&clock);
    let long = format!(
        "Project Falcon notes: {}",
        "details about project falcon ".repeat(20)
    );
    store(&memory, &long).await;
    store(&memory, "Project Falcon ships in May").await;
    store(&memory, "Falcon owner: Priya").await;
    let query = "project falcon notes details";
    let long_tokens = estimate_tokens(&format!("- {long}\n"));
    assert!(long_tokens > 100);

    // The long note ranks first but does not fit 40 tokens; the two short ones do.
    let window = ContextWindow {
        recency_weight: 0.0,
        ..ContextWindow::new(40)
    };
    let built = build_context_at(&memory, &window, query, clock.now())
        .await
        .expect("context");
    let contents: Vec<&str> = built
        .entries
        .iter()
        .map(|e| e.entry.content.as_str())
        .collect();
    assert_eq!(contents.len(), 2, "{contents:?}");
    assert!(!contents.contains(&long.as_str()));
    assert!(built.tokens <= 40);
    assert_eq!(
        built.tokens,
        built.entries.iter().map(|e| e.tokens).sum::<usize>()
    );
    // Each line is rounded up on its own, so the total is a slight overestimate.
    assert!(estimate_tokens(&built.text()) <= built.tokens);
    assert!(built.text().lines().all(|l| l.starts_with("- ")));

    // With room for everything, the long note comes first.
    let roomy = ContextWindow {
        recency_weight: 0.0,
        ..ContextWindow::new(10_000)
    };
    let built = build_context_at(&memory, &roomy, query, clock.now())
        .await
        .expect("context");
    assert_eq!(built.entries.len(), 3);
    assert_eq!(built.entries[0].entry.content, long);

    let none = build_context_at(&memory, &ContextWindow::new(0), query, clock.now())
        .await
        .expect("context");
    assert!(none.entries.is_empty() && none.tokens == 0 && none.text().is_empty());
}

#[tokio::test]
async fn invalid_windows_are_refused() {
    let memory = InMemoryBackend::new();
    let bad = [
        ContextWindow {
            recency_weight: -1.0,
            ..ContextWindow::new(10)
        },
        ContextWindow {
            semantic_weight: f32::NAN,
            ..ContextWindow::new(10)
        },
        ContextWindow {
            similarity_threshold: f32::NAN,
            ..ContextWindow::new(10)
        },
        ContextWindow {
            recency_half_life: Duration::ZERO,
            ..ContextWindow::new(10)
        },
    ];
    for window in bad {
        let result = build_context(&memory, &window, "anything").await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "{window:?} gave {result:?}"
        );
    }
}

#[tokio::test]
async fn works_over_sqlite_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    for fact in [
        "Ana prefers short answers",
        "The build server is ci-3",
        "Ana works in Lisbon",
    ] {
        store.store(memory(fact)).await.expect("store");
    }
    let built = build_context(
        &store,
        &ContextWindow::new(30),
        "Does Ana prefer short answers?",
    )
    .await
    .expect("context");
    assert_eq!(built.entries[0].entry.content, "Ana prefers short answers");
    assert!(
        built
            .entries
            .iter()
            .all(|e| e.similarity > 0.0 && e.similarity <= 1.0)
    );
    assert!(built.tokens <= 30);
}

#[tokio::test]
async fn the_threshold_uses_true_similarity_on_both_backends() {
    // The query shares only common words ("the", "on") with one fact. On SQLite its keyword
    // match used to make it first in the fused ranking — score 0.5 to 1 — so it passed any
    // threshold; its cosine similarity to the query is what the threshold must see.
    let facts = [
        "Our cat sleeps the whole afternoon on the sofa",
        "Quarterly taxes are due in April",
        "Bananas are rich in potassium",
    ];
    let query = "is the printer on floor two fixed yet";
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    let memory = InMemoryBackend::new();
    for fact in facts {
        store(&sqlite, fact).await;
        store(&memory, fact).await;
    }
    // The fused rank score of the weak match is high: the old threshold test passed it.
    let hits = sqlite.search(query, 5).await.expect("search");
    assert!(hits[0].score >= 0.5, "{hits:?}");
    let strict = ContextWindow {
        similarity_threshold: 0.3,
        ..ContextWindow::new(200)
    };
    let loose = ContextWindow::new(200);
    for (name, backend) in [
        ("sqlite", &sqlite as &dyn MemoryBackend),
        ("in-memory", &memory as &dyn MemoryBackend),
    ] {
        let built = build_context(backend, &strict, query)
            .await
            .expect("context");
        assert!(built.entries.is_empty(), "{name}: {:?}", built.entries);
        let built = build_context(backend, &loose, query)
            .await
            .expect("context");
        let weak = built
            .entries
            .iter()
            .find(|e| e.entry.content == facts[0])
            .unwrap_or_else(|| panic!("{name}: the weak match is a candidate"));
        assert!(
            weak.similarity > 0.0 && weak.similarity < 0.3,
            "{name}: similarity {}",
            weak.similarity
        );
    }
    // The same entry scores the same similarity on both backends.
    let similarity = |built: &agent_memory::BuiltContext| {
        built
            .entries
            .iter()
            .find(|e| e.entry.content == facts[0])
            .map(|e| e.similarity)
    };
    let a = build_context(&sqlite, &loose, query)
        .await
        .expect("context");
    let b = build_context(&memory, &loose, query)
        .await
        .expect("context");
    let (a, b) = (similarity(&a), similarity(&b));
    assert!(
        a.zip(b).is_some_and(|(a, b)| (a - b).abs() < 1e-6),
        "{a:?} vs {b:?}"
    );
}

#[tokio::test]
async fn only_the_chosen_entries_count_as_recalled() {
    let clock = ManualClock::at_unix_seconds(1_700_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = SqliteBackend::builder(dir.path().join("m.db"))
        .clock(Arc::new(clock.clone()))
        .open()
        .await
        .expect("open");
    let memory = backend(&clock);
    let facts = [
        "The staging deploy needs the VPN",
        "Deploy windows are Tuesday and Thursday",
        "The staging database was migrated to version 14",
        "Bananas are rich in potassium",
    ];
    for fact in facts {
        store(&sqlite, fact).await;
        store(&memory, fact).await;
    }
    clock.advance(DAY);
    for (name, backend) in [
        ("sqlite", &sqlite as &dyn MemoryBackend),
        ("in-memory", &memory as &dyn MemoryBackend),
    ] {
        // The threshold drops some candidates, the budget another.
        let candidates = backend
            .search_candidates("staging deploy VPN", 50)
            .await
            .expect("candidates");
        let passing = candidates
            .iter()
            .filter(|c| c.similarity.is_some_and(|s| s >= 0.18))
            .count();
        assert!(
            passing >= 2 && passing < candidates.len(),
            "{name}: {passing} of {} pass: {:?}",
            candidates.len(),
            candidates
                .iter()
                .map(|c| (c.hit.entry.content.as_str(), c.similarity))
                .collect::<Vec<_>>()
        );
        let window = ContextWindow {
            similarity_threshold: 0.18,
            ..ContextWindow::new(12)
        };
        let built = build_context_at(backend, &window, "staging deploy VPN", clock.now())
            .await
            .expect("context");
        assert_eq!(built.entries.len(), 1, "{name}: {:?}", built.entries);
        let chosen = &built.entries[0].entry;
        assert_eq!(chosen.content, facts[0]);
        assert_eq!(
            chosen.access_count, 1,
            "{name}: the result shows the recall"
        );
        assert_eq!(chosen.accessed_at, clock.now());
        for entry in backend.recent(10).await.expect("recent") {
            let want = u64::from(entry.content == facts[0]);
            assert_eq!(
                entry.access_count, want,
                "{name}: {:?} was recalled {} times",
                entry.content, entry.access_count
            );
            if want == 0 {
                assert_eq!(entry.accessed_at, entry.created_at, "{name}");
            }
        }
    }
}

#[tokio::test]
async fn entries_without_a_usable_vector_never_pass_a_positive_threshold() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let sqlite = SqliteBackend::open(&path).await.expect("open");
    let damaged = sqlite
        .store(memory("alpha particles decay quickly"))
        .await
        .expect("store");
    store(&sqlite, "gamma rays pass through walls").await;
    sqlite.close().await;
    // Damage from outside: a vector of the wrong size.
    let mut conn = sqlx::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
    )
    .await
    .expect("raw connection");
    sqlx::query("UPDATE embeddings SET vector = x'0000' WHERE entry_id = ?1")
        .bind(damaged.0.parse::<i64>().expect("id"))
        .execute(&mut conn)
        .await
        .expect("damage");
    conn.close().await.expect("close");
    let sqlite = SqliteBackend::open(&path).await.expect("open");
    let query = "alpha particles decay quickly";
    // Found by keyword only: a fused rank score of 0.5, which used to stand in for the
    // similarity and pass the threshold.
    let candidates = sqlite
        .search_candidates(query, 10)
        .await
        .expect("candidates");
    assert_eq!(candidates[0].hit.entry.id, damaged);
    assert_eq!(candidates[0].similarity, None);
    assert!(candidates[0].hit.score >= 0.3, "{candidates:?}");
    let strict = ContextWindow {
        similarity_threshold: 0.3,
        ..ContextWindow::new(200)
    };
    let built = build_context(&sqlite, &strict, query)
        .await
        .expect("context");
    assert!(
        built.entries.iter().all(|e| e.entry.id != damaged),
        "{:?}",
        built.entries
    );
    // A threshold ≤ 0 keeps it, ranked with its search score in place of the similarity.
    let built = build_context(&sqlite, &ContextWindow::new(200), query)
        .await
        .expect("context");
    let kept = built
        .entries
        .iter()
        .find(|e| e.entry.id == damaged)
        .expect("kept under the default threshold");
    assert_eq!(kept.similarity, kept.search_score);
}

/// A backend that keeps the trait's default `search_candidates` and `record_access`: it
/// reports no similarity for any candidate.
struct DefaultCandidates(InMemoryBackend);

impl MemoryBackend for DefaultCandidates {
    fn store(&self, memory: NewMemory) -> BoxFuture<'_, Result<MemoryId, MemoryError>> {
        self.0.store(memory)
    }
    fn search<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        self.0.search(query, k)
    }
    fn recent(&self, n: usize) -> BoxFuture<'_, Result<Vec<MemoryEntry>, MemoryError>> {
        self.0.recent(n)
    }
    fn by_tags<'a>(
        &'a self,
        tags: &'a [Tag],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        self.0.by_tags(tags)
    }
    fn prune<'a>(
        &'a self,
        policy: &'a PrunePolicy,
    ) -> BoxFuture<'a, Result<PruneReport, MemoryError>> {
        self.0.prune(policy)
    }
    fn delete<'a>(&'a self, id: &'a MemoryId) -> BoxFuture<'a, Result<bool, MemoryError>> {
        self.0.delete(id)
    }
    fn get<'a>(
        &'a self,
        id: &'a MemoryId,
    ) -> BoxFuture<'a, Result<Option<MemoryEntry>, MemoryError>> {
        self.0.get(id)
    }
    fn count(&self) -> BoxFuture<'_, Result<u64, MemoryError>> {
        self.0.count()
    }
}

#[tokio::test]
async fn a_backend_without_similarities_works_with_a_threshold_of_at_most_zero() {
    let clock = ManualClock::at_unix_seconds(1_700_000_000);
    let memory = DefaultCandidates(backend(&clock));
    for fact in [
        "The staging deploy needs the VPN",
        "Deploy windows are Tuesday and Thursday",
        "Bananas are rich in potassium",
    ] {
        store(&memory, fact).await;
    }
    let query = "staging deploy VPN";
    // The default window (threshold 0): every hit, ranked with its search score in place
    // of the similarity.
    let window = ContextWindow {
        recency_weight: 0.0,
        ..ContextWindow::new(1000)
    };
    let built = build_context_at(&memory, &window, query, clock.now())
        .await
        .expect("context");
    assert_eq!(built.entries.len(), 2, "{:?}", built.entries);
    assert_eq!(
        built.entries[0].entry.content,
        "The staging deploy needs the VPN"
    );
    for e in &built.entries {
        assert_eq!(e.similarity, e.search_score);
        assert!((e.score - 0.7 * e.search_score).abs() < 1e-6);
    }
    // A positive threshold cannot be checked without similarities: nothing passes, and
    // nothing more is recalled than the default search already recorded.
    let strict = ContextWindow {
        similarity_threshold: 0.1,
        ..window
    };
    let built = build_context_at(&memory, &strict, query, clock.now())
        .await
        .expect("context");
    assert!(built.entries.is_empty(), "{:?}", built.entries);
}
