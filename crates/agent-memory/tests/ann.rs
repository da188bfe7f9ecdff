//! The approximate index through the backends: filtered and exact search on large stores,
//! the SQLite handle's saved vector copy (used when it verifies, discarded when it does
//! not), and searches staying correct whatever the copy's state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_memory::{AnnConfig, InMemoryBackend, SqliteBackend};
use agent_op::{
    BoxFuture, EmbeddingError, EmbeddingProvider, MemoryBackend, MemoryId, NewMemory, SearchOptions,
};

const D: usize = 64;
const N: usize = 4_000;

/// Maps the text `v<i>` to the i-th of a fixed set of clustered vectors.
struct Table(Vec<Vec<f32>>);

impl EmbeddingProvider for Table {
    fn model(&self) -> &str {
        "table-64"
    }

    fn dimensions(&self) -> usize {
        D
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            text.strip_prefix('v')
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| self.0.get(i).cloned())
                .ok_or_else(|| EmbeddingError::Other(format!("no vector for {text:?}")))
        })
    }
}

fn table() -> Arc<Table> {
    Arc::new(Table(bench_kit::clustered_vectors(
        11,
        N + 200,
        D,
        50,
        0.05,
    )))
}

fn entry(i: usize) -> NewMemory {
    NewMemory {
        content: format!("v{i}"),
        context: String::new(),
        tags: vec![if i % 10 == 0 { "tenth" } else { "rest" }.into()],
    }
}

fn config() -> AnnConfig {
    AnnConfig::new().min_entries(1_000)
}

async fn open(path: &std::path::Path, embedder: Arc<Table>) -> SqliteBackend {
    SqliteBackend::builder(path)
        .embedder(embedder)
        .ann(config())
        .open()
        .await
        .expect("open")
}

async fn fill(backend: &SqliteBackend, range: std::ops::Range<usize>) {
    let batch: Vec<NewMemory> = range.map(entry).collect();
    for chunk in batch.chunks(1_000) {
        backend.store_batch(chunk.to_vec()).await.expect("store");
    }
}

async fn wait_indexed(backend: &SqliteBackend) {
    let start = Instant::now();
    loop {
        let status = backend.index_status().await.expect("status");
        if status.enabled && status.pending == 0 {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn nearest(backend: &SqliteBackend, table: &Table, q: usize, exact: bool) -> Vec<MemoryId> {
    backend
        .nearest(&table.0[q], 10, &SearchOptions::new().exact(exact))
        .await
        .expect("nearest")
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// Recall@10 of approximate against exact search over 50 held-out queries.
async fn recall(backend: &SqliteBackend, table: &Table) -> f64 {
    let mut total = 0.0;
    for q in N..N + 50 {
        let exact = nearest(backend, table, q, true).await;
        let got = nearest(backend, table, q, false).await;
        total += bench_kit::recall_at(&exact, &got);
    }
    total / 50.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_copy_opens_with_its_graph_and_searches_like_the_table() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let table = table();
    let backend = open(&path, table.clone()).await;
    fill(&backend, 0..N).await;
    wait_indexed(&backend).await;
    let before = recall(&backend, &table).await;
    assert!(before >= 0.95, "recall@10 {before}");
    backend.close().await;
    assert!(
        dir.path().join("m.db.vectors").exists(),
        "close saves the copy"
    );

    let reopened = open(&path, table.clone()).await;
    let status = reopened.index_status().await.expect("status");
    assert!(
        status.enabled && status.pending == 0 && status.indexed == N,
        "the graph comes back with the copy: {status:?}"
    );
    let after = recall(&reopened, &table).await;
    assert!(after >= 0.95, "recall@10 after reopening {after}");
    reopened.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_copy_catches_up_from_the_change_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let table = table();
    let backend = open(&path, table.clone()).await;
    fill(&backend, 0..N - 100).await;
    wait_indexed(&backend).await;
    backend.close().await;
    let saved = std::fs::read(dir.path().join("m.db.vectors")).expect("saved copy");

    // More changes, then the old copy put back: as if the process died before saving.
    let backend = open(&path, table.clone()).await;
    fill(&backend, N - 100..N).await;
    let gone = MemoryId::from("7");
    assert!(backend.delete(&gone).await.expect("delete"));
    backend.close().await;
    std::fs::write(dir.path().join("m.db.vectors"), &saved).expect("restore old copy");

    let reopened = open(&path, table.clone()).await;
    let newest = nearest(&reopened, &table, N - 1, false).await;
    assert_eq!(
        newest[0],
        MemoryId::from(N.to_string().as_str()),
        "entries stored after the save are found"
    );
    let deleted = nearest(&reopened, &table, 6, false).await;
    assert!(
        !deleted.contains(&gone),
        "entries deleted after the save are not"
    );
    assert!(recall(&reopened, &table).await >= 0.95);
    reopened.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_that_do_not_verify_are_discarded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let table = table();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    for (path, range) in [(&a, 0..1_500), (&b, 1_500..3_000)] {
        let backend = open(path, table.clone()).await;
        fill(&backend, range).await;
        backend.close().await;
    }
    let copy_of = |p: &std::path::Path| {
        let mut name = p.file_name().expect("name").to_os_string();
        name.push(".vectors");
        p.with_file_name(name)
    };

    // Another store's copy.
    std::fs::copy(copy_of(&b), copy_of(&a)).expect("copy");
    let backend = open(&a, table.clone()).await;
    assert!(!copy_of(&a).exists(), "another store's copy is removed");
    let hits = nearest(&backend, &table, 2_000, true).await;
    assert!(
        hits.iter()
            .all(|id| id.0.parse::<usize>().is_ok_and(|n| n <= 1_500)),
        "and never searched"
    );
    backend.close().await;

    // A damaged copy (one byte flipped).
    let mut bytes = std::fs::read(copy_of(&a)).expect("saved");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(copy_of(&a), &bytes).expect("damage");
    let backend = open(&a, table.clone()).await;
    assert_eq!(
        nearest(&backend, &table, 5, true).await[0],
        MemoryId::from("6")
    );
    backend.close().await;

    // A truncated copy (a disk that filled up while another program copied it).
    let bytes = std::fs::read(copy_of(&a)).expect("saved");
    std::fs::write(copy_of(&a), &bytes[..bytes.len() / 3]).expect("truncate");
    let backend = open(&a, table.clone()).await;
    assert_eq!(
        nearest(&backend, &table, 5, true).await[0],
        MemoryId::from("6")
    );
    assert_eq!(backend.count().await.expect("count"), 1_500);
    backend.close().await;

    // A database put back to an older state under a newer copy.
    let old_db = std::fs::read(&b).expect("db");
    let backend = open(&b, table.clone()).await;
    fill(&backend, 3_000..3_200).await;
    backend.close().await;
    std::fs::write(&b, &old_db).expect("roll back");
    let _ = std::fs::remove_file(dir.path().join("b.db-wal"));
    let backend = open(&b, table.clone()).await;
    assert_eq!(backend.count().await.expect("count"), 1_500);
    let hits = nearest(&backend, &table, 3_100, true).await;
    assert!(
        hits.iter()
            .all(|id| id.0.parse::<usize>().is_ok_and(|n| n <= 3_000)),
        "entries the database does not hold are never returned: {hits:?}"
    );
    backend.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_and_exact_search_on_a_large_in_memory_store() {
    let table = table();
    let backend = InMemoryBackend::builder()
        .embedder(table.clone())
        .ann(config())
        .build()
        .expect("backend");
    let batch: Vec<NewMemory> = (0..N).map(entry).collect();
    backend.store_batch(batch).await.expect("store");
    let start = Instant::now();
    while backend.index_status().pending > 0 || !backend.index_status().enabled {
        assert!(start.elapsed() < Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let tenth = SearchOptions::new().tag("tenth");
    for q in N..N + 20 {
        let text = format!("v{q}");
        let hits = backend
            .search_with(&text, 10, &tenth)
            .await
            .expect("search");
        assert_eq!(
            hits.len(),
            10,
            "ten admitted hits, not the top ten filtered"
        );
        assert!(
            hits.iter()
                .all(|h| h.entry.tags.iter().any(|t| t.0 == "tenth"))
        );
        let exact = backend
            .search_with(&text, 10, &tenth.clone().exact(true))
            .await
            .expect("exact");
        let ids =
            |h: &[agent_op::ScoredMemory]| h.iter().map(|h| h.entry.id.clone()).collect::<Vec<_>>();
        assert!(bench_kit::recall_at(&ids(&exact), &ids(&hits)) >= 0.8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearest_refuses_bad_vectors_on_both_backends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let table = table();
    let sqlite = open(&dir.path().join("m.db"), table.clone()).await;
    let memory = InMemoryBackend::builder()
        .embedder(table.clone())
        .build()
        .expect("backend");
    sqlite.store(entry(1)).await.expect("store");
    memory.store(entry(1)).await.expect("store");
    let mut nan = table.0[1].clone();
    nan[3] = f32::NAN;
    let mut inf = table.0[1].clone();
    inf[0] = f32::INFINITY;
    let short = table.0[1][..D - 1].to_vec();
    let any = SearchOptions::new();
    for bad in [&nan, &inf, &short] {
        let e = sqlite.nearest(bad, 3, &any).await.expect_err("refused");
        assert!(matches!(e, agent_op::MemoryError::Embedding(_)), "{e}");
        let e = memory.nearest(bad, 3, &any).await.expect_err("refused");
        assert!(matches!(e, agent_op::MemoryError::Embedding(_)), "{e}");
    }
    // The zero vector is valid and matches nothing; k = 0 asks for nothing.
    let zero = vec![0.0; D];
    assert!(
        sqlite
            .nearest(&zero, 3, &any)
            .await
            .expect("zero")
            .is_empty()
    );
    assert!(
        memory
            .nearest(&table.0[1], 0, &any)
            .await
            .expect("k = 0")
            .is_empty()
    );
    sqlite.close().await;
}
