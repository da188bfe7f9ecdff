//! Memory benchmarks: SQLite insert throughput, top-10 search latency of both backends at
//! 10,000 and 100,000 entries, `build_context` over 100,000 entries, and hydrating an
//! `op::infer` context whose semantic source recalls from the same 100,000 entries
//! (`prompt.hydrate_semantic_100k`, reported here beside the search it is built on), each
//! with a baseline measured in the same run.
//!
//! Vectors are 384-dimension unit vectors, precomputed: the embedder used here only looks
//! them up by text, so no embedding work is timed. Texts are 8–20 words drawn from a
//! 5,000-word vocabulary with a Zipf-like distribution (a few words are everywhere, like
//! stop words in real text), so keyword search does real work.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_memory::{
    AnnConfig, ContextWindow, InMemoryBackend, IndexStatus, SqliteBackend, build_context,
};
use agent_op::{
    BoxFuture, EmbeddingError, EmbeddingProvider, MemoryBackend, MemoryId, NewMemory, SearchOptions,
};
use sqlx::Connection;

const DIMS: usize = 384;
const LARGE: usize = 100_000;
/// Entries of the `--large` figures.
const HUGE: usize = 1_000_000;
const SMALL: usize = 10_000;
const BATCH: usize = 1_000;
const QUERIES: usize = 200;
const VOCABULARY: usize = 5_000;
/// Clusters of the generated vectors, and the per-component noise around their centers.
const CLUSTERS: usize = 1_000;
const NOISE: f32 = 0.03;

/// A deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A Zipf-like word index: rank r has weight about 1/r.
    fn word(&mut self) -> usize {
        let x = (VOCABULARY as f64).powf(self.unit());
        (x as usize).min(VOCABULARY) - 1
    }

    fn sentence(&mut self, min: usize, max: usize) -> String {
        let n = min + (self.next() as usize) % (max - min + 1);
        (0..n)
            .map(|_| format!("w{}", self.word()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// An "embedder" that returns precomputed vectors by text.
struct Precomputed {
    vectors: HashMap<String, Vec<f32>>,
}

impl EmbeddingProvider for Precomputed {
    fn model(&self) -> &str {
        "precomputed-384"
    }

    fn dimensions(&self) -> usize {
        DIMS
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            self.vectors
                .get(text)
                .cloned()
                .ok_or_else(|| EmbeddingError::Other(format!("no precomputed vector for {text:?}")))
        })
    }
}

struct Data {
    memories: Vec<NewMemory>,
    vectors: Vec<Vec<f32>>,
    queries: Vec<String>,
    embedder: Arc<Precomputed>,
}

fn data(n: usize, seed: u64) -> Data {
    let mut rng = Rng(seed);
    let mut memories = Vec::with_capacity(n);
    let mut vectors = Vec::with_capacity(n);
    let mut map = HashMap::with_capacity(n + QUERIES);
    // Vectors with structure (1,000 clusters), as real embeddings have: on uniformly random
    // vectors nearest neighbours mean nothing and no approximate index finds them.
    let mut clustered =
        bench_kit::clustered_vectors(seed, n + QUERIES, DIMS, CLUSTERS, NOISE).into_iter();
    for i in 0..n {
        // The index keeps every content distinct.
        let content = format!("{} n{i}", rng.sentence(8, 20));
        let vector = clustered.next().expect("generated");
        map.insert(content.clone(), vector.clone());
        memories.push(NewMemory {
            content,
            context: rng.sentence(3, 6),
            tags: vec![format!("t{}", i % 20).into()],
        });
        vectors.push(vector);
    }
    let mut queries = Vec::with_capacity(QUERIES);
    for q in 0..QUERIES {
        let query = format!("{} q{q}", rng.sentence(3, 8));
        map.insert(query.clone(), clustered.next().expect("generated"));
        queries.push(query);
    }
    Data {
        memories,
        vectors,
        queries,
        embedder: Arc::new(Precomputed { vectors: map }),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn fill_sqlite(path: &std::path::Path, data: &Data) -> (SqliteBackend, Duration) {
    let backend = SqliteBackend::builder(path)
        .embedder(data.embedder.clone())
        .open()
        .await
        .expect("open sqlite");
    let start = Instant::now();
    for chunk in data.memories.chunks(BATCH) {
        backend
            .store_batch(chunk.to_vec())
            .await
            .expect("store batch");
    }
    (backend, start.elapsed())
}

/// Baseline: the same rows (content, context, times, tags as text, vector blob) inserted with
/// plain sqlx statements (one per row, as most code would) into one table without indexes,
/// in one transaction, same pragmas.
async fn raw_insert(path: &std::path::Path, data: &Data) -> Duration {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("connect");
    sqlx::query(
        "CREATE TABLE rows (id INTEGER PRIMARY KEY, content TEXT, context TEXT, \
         created_at INTEGER, accessed_at INTEGER, access_count INTEGER, tags TEXT, vector BLOB)",
    )
    .execute(&mut conn)
    .await
    .expect("create");
    let blobs: Vec<Vec<u8>> = data
        .vectors
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let start = Instant::now();
    let mut tx = conn.begin().await.expect("begin");
    for (m, blob) in data.memories.iter().zip(&blobs) {
        sqlx::query(
            "INSERT INTO rows (content, context, created_at, accessed_at, access_count, tags, vector) \
             VALUES (?1, ?2, ?3, ?3, 0, ?4, ?5)",
        )
        .bind(&m.content)
        .bind(&m.context)
        .bind(1_700_000_000_000_000i64)
        .bind(&m.tags[0].0)
        .bind(blob)
        .execute(&mut *tx)
        .await
        .expect("insert");
    }
    tx.commit().await.expect("commit");
    start.elapsed()
}

/// Baseline search: a plain exact scan over one `Vec<f32>`: every dot product, then the top 10.
fn plain_scan(matrix: &[f32], query: &[f32]) -> Vec<(f32, usize)> {
    let mut scores: Vec<(f32, usize)> = matrix
        .chunks_exact(DIMS)
        .enumerate()
        .map(|(i, row)| (row.iter().zip(query).map(|(a, b)| a * b).sum(), i))
        .collect();
    let k = 10.min(scores.len());
    scores.select_nth_unstable_by(k - 1, |a, b| b.0.total_cmp(&a.0));
    scores.truncate(k);
    scores.sort_by(|a, b| b.0.total_cmp(&a.0));
    scores
}

/// Times every query against `backend` and the plain scan alternately; returns (subject,
/// baseline) latencies in ms.
fn search_latencies(
    rt: &tokio::runtime::Runtime,
    backend: &dyn MemoryBackend,
    data: &Data,
) -> (Vec<f64>, Vec<f64>) {
    let matrix: Vec<f32> = data.vectors.iter().flatten().copied().collect();
    let query_vectors: Vec<&Vec<f32>> = data
        .queries
        .iter()
        .map(|q| data.embedder.vectors.get(q).expect("query vector"))
        .collect();
    // Warm-up (page cache, statement caches).
    for q in data.queries.iter().take(5) {
        rt.block_on(backend.search(q, 10)).expect("search");
    }
    let mut subject = Vec::with_capacity(QUERIES);
    let mut baseline = Vec::with_capacity(QUERIES);
    for (q, v) in data.queries.iter().zip(&query_vectors) {
        let start = Instant::now();
        let hits = rt.block_on(backend.search(q, 10)).expect("search");
        subject.push(bench_kit::ms(start.elapsed()));
        assert_eq!(hits.len(), 10);
        let start = Instant::now();
        black_box(plain_scan(&matrix, v));
        baseline.push(bench_kit::ms(start.elapsed()));
    }
    (subject, baseline)
}

/// Times `build_context` (50 candidates with their similarity, then a recall of the chosen
/// ones) against what it used to cost: one `search` of 50 candidates, recording a recall of
/// all of them. Returns (subject, baseline) latencies in ms.
fn build_context_latencies(
    rt: &tokio::runtime::Runtime,
    backend: &dyn MemoryBackend,
    data: &Data,
) -> (Vec<f64>, Vec<f64>) {
    let window = ContextWindow::new(500);
    let mut subject = Vec::with_capacity(QUERIES);
    let mut baseline = Vec::with_capacity(QUERIES);
    for q in &data.queries {
        let start = Instant::now();
        let built = rt
            .block_on(build_context(backend, &window, q))
            .expect("build_context");
        subject.push(bench_kit::ms(start.elapsed()));
        assert!(!built.entries.is_empty());
        let start = Instant::now();
        black_box(
            rt.block_on(backend.search(q, window.candidates))
                .expect("search"),
        );
        baseline.push(bench_kit::ms(start.elapsed()));
    }
    (subject, baseline)
}

/// Times preparing the context of an `op::infer` call (agent-prompt's pipeline: a static
/// rules section and semantic recall of 10 entries, counted and compiled into an 8k budget
/// for gpt-4o, the sent entries' access recorded) against the top-10 `search` it is built on.
fn hydrate_latencies(
    rt: &tokio::runtime::Runtime,
    backend: Arc<SqliteBackend>,
    data: &Data,
) -> (Vec<f64>, Vec<f64>) {
    use agent_op::context::{ContextInput, ContextPipeline, ContextRequest, ContextStrategy};
    use agent_prompt::{Pipeline, Semantic, Static};

    let memory: Arc<dyn MemoryBackend> = backend.clone();
    let pipeline = Pipeline::new()
        .source(Static::text(
            "rules",
            "## Rules",
            "Answer from the memories below.",
        ))
        .source(Semantic::new());
    let strategy = ContextStrategy {
        semantic_limit: 10,
        semantic_threshold: -1.0,
        ..ContextStrategy::default()
    };
    let prepare = |query: &str| {
        let request = ContextRequest::new(query).with_strategy(strategy.clone());
        let input = ContextInput::new("gpt-4o", &request, &(), chrono::Utc::now())
            .with_memory(Some(&memory));
        let prepared = rt.block_on(pipeline.prepare(input)).expect("prepare");
        assert_eq!(prepared.report.sources[1].sections, 10);
        prepared
    };
    for q in data.queries.iter().take(5) {
        black_box(prepare(q));
    }
    let mut subject = Vec::with_capacity(QUERIES);
    let mut baseline = Vec::with_capacity(QUERIES);
    for q in &data.queries {
        let start = Instant::now();
        black_box(prepare(q));
        subject.push(bench_kit::ms(start.elapsed()));
        let start = Instant::now();
        black_box(rt.block_on(backend.search(q, 10)).expect("search"));
        baseline.push(bench_kit::ms(start.elapsed()));
    }
    (subject, baseline)
}

/// The ceiling of the backends' approximate search: usearch called directly on the same
/// vectors, with the settings the backends use ([`AnnConfig`]'s defaults for that many
/// vectors: an int8 cosine graph walked `expansion_search_at(size)` wide, its
/// `rescore_at(size, 10)` best candidates re-scored in f32 for the top 10), and nothing
/// around it: no lock, no id map, no async, no pending tail.
struct Direct {
    graph: usearch::Index,
    /// The unit vectors, row `i` holding key `i`.
    vectors: Vec<f32>,
    rescore: usize,
}

impl Direct {
    /// The graph of `vectors`, built on every core as the backends build theirs.
    fn build(vectors: &[Vec<f32>]) -> Direct {
        let config = AnnConfig::default();
        let options = usearch::IndexOptions {
            dimensions: DIMS,
            metric: usearch::MetricKind::Cos,
            quantization: usearch::ScalarKind::I8,
            connectivity: config.connectivity,
            expansion_add: config.expansion_add,
            expansion_search: config.expansion_search_at(vectors.len()),
            multi: false,
        };
        let graph = usearch::Index::new(&options).expect("usearch index");
        let threads = config.build_threads.max(1);
        graph
            .reserve_capacity_and_threads(vectors.len(), threads)
            .expect("usearch reserve");
        let unit: Vec<f32> = vectors
            .iter()
            .flat_map(|v| {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter().map(move |x| x / norm)
            })
            .collect();
        let rows: Vec<(usize, &[f32])> = unit.chunks_exact(DIMS).enumerate().collect();
        let per = rows.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for part in rows.chunks(per) {
                let graph = &graph;
                scope.spawn(move || {
                    for (key, row) in part {
                        graph.add(*key as u64, row).expect("usearch add");
                    }
                });
            }
        });
        Direct {
            graph,
            vectors: unit,
            rescore: config.rescore_at(vectors.len(), 10),
        }
    }

    /// The top 10 rows for the unit `query`: the graph's `rescore` candidates, scored in f32.
    fn nearest(&self, query: &[f32]) -> Vec<usize> {
        let found = self
            .graph
            .search(query, self.rescore)
            .expect("usearch search");
        let mut scored: Vec<(f32, usize)> = found
            .keys
            .iter()
            .map(|&key| {
                let row = key as usize;
                let v = &self.vectors[row * DIMS..(row + 1) * DIMS];
                (v.iter().zip(query).map(|(a, b)| a * b).sum(), row)
            })
            .collect();
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
        scored.truncate(10);
        scored.into_iter().map(|(_, row)| row).collect()
    }
}

/// `memory.sqlite.sync_unchanged`: what a handle pays to learn that nothing was committed
/// since it last looked, as hybrid and filtered searches do before searching; an
/// approximate `nearest` does it beside the walk. P50 µs of [`SqliteBackend::index_status`]
/// on a store nobody writes, which is that check and a read of the copy's counts. Baseline:
/// one statement on a plain sqlx connection to the same file (the round trip to the
/// connection's thread the check cannot avoid).
fn sync_unchanged(rt: &tokio::runtime::Runtime, dir: &std::path::Path) {
    const CALLS: usize = 3_000;
    let path = dir.join("quiet.db");
    let store = rt
        .block_on(SqliteBackend::open(&path))
        .expect("open the quiet store");
    for i in 0..100 {
        let memory = NewMemory {
            content: format!("quiet fact {i}"),
            context: String::new(),
            tags: Vec::new(),
        };
        rt.block_on(store.store(memory)).expect("store");
    }
    let mut plain_conn = rt
        .block_on(sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
        ))
        .expect("plain connection");
    let (mut check, mut plain) = (Vec::with_capacity(CALLS), Vec::with_capacity(CALLS));
    // Alternating blocks, so both see the same machine load.
    for _ in 0..CALLS / 100 {
        for _ in 0..100 {
            let start = Instant::now();
            black_box(rt.block_on(store.index_status()).expect("index status"));
            check.push(start.elapsed().as_secs_f64() * 1e6);
        }
        for _ in 0..100 {
            let start = Instant::now();
            let row: (i64,) = rt
                .block_on(sqlx::query_as("SELECT 1").fetch_one(&mut plain_conn))
                .expect("plain statement");
            black_box(row);
            plain.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    bench_kit::report(
        "memory.sqlite.sync_unchanged",
        bench_kit::stats(&check).median,
        "us",
        bench_kit::stats(&plain).median,
    );
    rt.block_on(plain_conn.close()).expect("close");
    rt.block_on(store.close());
}

/// A backend's `nearest(vector, 10, exact)`.
type Nearest<'a> = dyn Fn(&[f32], bool) -> Vec<(MemoryId, f32)> + 'a;

/// `nearest(vector, 10, options)` on the store under test.
type NearestWith<'a> = dyn Fn(&[f32], &SearchOptions) -> Vec<(MemoryId, f32)> + 'a;

/// Approximate vector search on a store, in blocks of queries:
/// `{prefix}.ann_search_{size}` (p50 ms), its p99 row, the `_after_scan` row (the first
/// query after an exact scan), and `{prefix}.ann_recall_{size}` (recall@10 against exact
/// search), after the background indexer has taken in every vector
/// (`{prefix}.ann_build_{size}` when `stored_in` is given: seconds from the last store until
/// the graph holds everything; baseline: the time the stores took).
///
/// With `direct`, each query is also answered by usearch called directly ([`Direct`]), right
/// after the store answered it: the search rows' baseline is that, and
/// `memory.usearch_direct_{size}` (with `report_direct`) reports it against exact search, with
/// its recall. Without, the baseline is exact search on the store.
fn ann_figures(
    prefix: &str,
    size: &str,
    data: &Data,
    stored_in: Option<Duration>,
    status: &dyn Fn() -> IndexStatus,
    nearest: &Nearest<'_>,
    direct: Option<(&Direct, bool)>,
) {
    let start = Instant::now();
    loop {
        let now = status();
        if now.failed.is_some() {
            eprintln!("{prefix}: the approximate index failed: {now:?}");
            return;
        }
        if now.enabled && now.pending == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let built = start.elapsed();
    if let Some(stored_in) = stored_in {
        bench_kit::report(
            &format!("{prefix}.ann_build_{size}"),
            built.as_secs_f64(),
            "s",
            stored_in.as_secs_f64(),
        );
    }
    let queries: Vec<&Vec<f32>> = data
        .queries
        .iter()
        .map(|q| data.embedder.vectors.get(q).expect("query vector"))
        .collect();
    for q in queries.iter().take(10) {
        black_box(nearest(q, false));
        black_box(nearest(q, true));
        if let Some((direct, _)) = direct {
            black_box(direct.nearest(q));
        }
    }
    // Blocks of queries, approximate then exact, so both see the same machine load, while
    // approximate searches follow each other as in a service answering queries (one right
    // after a full scan finds the graph evicted from the caches: reported apart).
    const BLOCK: usize = 20;
    let mut ann = Vec::new();
    let mut exact = Vec::new();
    let mut after_scan = Vec::new();
    let mut recall = 0.0;
    let mut usearch = Vec::new();
    let mut usearch_after_scan = Vec::new();
    let mut usearch_recall = 0.0;
    let ids = |hits: Vec<(MemoryId, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
    for block in queries.chunks(BLOCK) {
        let mut got = Vec::with_capacity(block.len());
        let mut got_direct = Vec::with_capacity(block.len());
        // The store's block, then usearch's: interleaved query by query, each graph walk
        // would find the other graph in the caches instead of its own.
        for (i, q) in block.iter().enumerate() {
            let start = Instant::now();
            got.push(nearest(q, false));
            let took = bench_kit::ms(start.elapsed());
            if i == 0 {
                after_scan.push(took);
            } else {
                ann.push(took);
            }
        }
        if let Some((direct, _)) = direct {
            // A scan between the two blocks, so usearch's first query also finds its graph
            // evicted, as the store's did.
            black_box(plain_scan(&direct.vectors, block[0]));
            for (i, q) in block.iter().enumerate() {
                let start = Instant::now();
                got_direct.push(direct.nearest(q));
                let took = bench_kit::ms(start.elapsed());
                if i == 0 {
                    usearch_after_scan.push(took);
                } else {
                    usearch.push(took);
                }
            }
        }
        for (q, got) in block.iter().zip(got) {
            let start = Instant::now();
            let truth = nearest(q, true);
            exact.push(bench_kit::ms(start.elapsed()));
            recall += bench_kit::recall_at(&ids(truth), &ids(got));
        }
        if let Some((direct, _)) = direct {
            for (q, got) in block.iter().zip(got_direct) {
                let truth: Vec<usize> = plain_scan(&direct.vectors, q)
                    .into_iter()
                    .map(|(_, row)| row)
                    .collect();
                usearch_recall += bench_kit::recall_at(&truth, &got);
            }
        }
    }
    let (a, e) = (bench_kit::stats(&ann), bench_kit::stats(&exact));
    let (base, base_p99, base_after_scan) = match direct {
        Some(_) => {
            let u = bench_kit::stats(&usearch);
            (
                u.median,
                u.p99,
                bench_kit::stats(&usearch_after_scan).median,
            )
        }
        None => (e.median, e.p99, e.median),
    };
    bench_kit::report(
        &format!("{prefix}.ann_search_{size}_after_scan"),
        bench_kit::stats(&after_scan).median,
        "ms",
        base_after_scan,
    );
    bench_kit::report(&format!("{prefix}.ann_search_{size}"), a.median, "ms", base);
    bench_kit::report(
        &format!("{prefix}.ann_search_{size}_p99"),
        a.p99,
        "ms",
        base_p99,
    );
    bench_kit::report(
        &format!("{prefix}.ann_recall_{size}"),
        recall / queries.len() as f64,
        "recall@10",
        1.0,
    );
    if let Some((_, true)) = direct {
        bench_kit::report(
            &format!("memory.usearch_direct_{size}"),
            base,
            "ms",
            e.median,
        );
        bench_kit::report(
            &format!("memory.usearch_direct_recall_{size}"),
            usearch_recall / queries.len() as f64,
            "recall@10",
            1.0,
        );
    }
}

/// Filtered approximate search (`{prefix}.ann_filtered_search_{size}`, `_p99`,
/// `ann_filtered_recall_{size}`, `_min`): `nearest(v, 10)` restricted to one tag (each query
/// its own of the 20, so each admits 5 % of the entries), against the same search with
/// `SearchOptions::exact`, in blocks as in [`ann_figures`]. Recall is of the exact filtered
/// top 10; `_min` is the worst query's.
fn ann_filtered_figures(prefix: &str, size: &str, data: &Data, nearest: &NearestWith<'_>) {
    let queries: Vec<(&Vec<f32>, SearchOptions)> = data
        .queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let vector = data.embedder.vectors.get(q).expect("query vector");
            (vector, SearchOptions::new().tag(format!("t{}", i % 20)))
        })
        .collect();
    for (v, options) in queries.iter().take(10) {
        black_box(nearest(v, options));
        black_box(nearest(v, &options.clone().exact(true)));
    }
    const BLOCK: usize = 20;
    let (mut ann, mut exact, mut recalls) = (Vec::new(), Vec::new(), Vec::new());
    let ids = |hits: Vec<(MemoryId, f32)>| hits.into_iter().map(|h| h.0).collect::<Vec<_>>();
    for block in queries.chunks(BLOCK) {
        let mut got = Vec::with_capacity(block.len());
        for (v, options) in block {
            let start = Instant::now();
            got.push(nearest(v, options));
            ann.push(bench_kit::ms(start.elapsed()));
        }
        for ((v, options), got) in block.iter().zip(got) {
            let exact_options = options.clone().exact(true);
            let start = Instant::now();
            let truth = nearest(v, &exact_options);
            exact.push(bench_kit::ms(start.elapsed()));
            recalls.push(bench_kit::recall_at(&ids(truth), &ids(got)));
        }
    }
    let (a, e) = (bench_kit::stats(&ann), bench_kit::stats(&exact));
    bench_kit::report(
        &format!("{prefix}.ann_filtered_search_{size}"),
        a.median,
        "ms",
        e.median,
    );
    bench_kit::report(
        &format!("{prefix}.ann_filtered_search_{size}_p99"),
        a.p99,
        "ms",
        e.p99,
    );
    bench_kit::report(
        &format!("{prefix}.ann_filtered_recall_{size}"),
        recalls.iter().sum::<f64>() / recalls.len() as f64,
        "recall@10",
        1.0,
    );
    bench_kit::report(
        &format!("{prefix}.ann_filtered_recall_{size}_min"),
        recalls.iter().copied().fold(1.0, f64::min),
        "recall@10",
        1.0,
    );
}

fn report_search(name: &str, subject: &[f64], baseline: &[f64]) {
    let s = bench_kit::stats(subject);
    let b = bench_kit::stats(baseline);
    bench_kit::report(name, s.median, "ms", b.median);
    bench_kit::report(&format!("{name}.p99"), s.p99, "ms", b.p99);
}

/// The measured alternative to the in-memory vector copy: load every vector from SQLite
/// for each query (one prepared statement) and scan them in Rust.
fn sql_scan_latencies(
    rt: &tokio::runtime::Runtime,
    path: &std::path::Path,
    data: &Data,
) -> Vec<f64> {
    rt.block_on(async {
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("connect");
        let mut out = Vec::new();
        for q in data.queries.iter().take(20) {
            let v = data.embedder.vectors.get(q).expect("query vector");
            let start = Instant::now();
            let rows: Vec<(i64, Vec<u8>)> =
                sqlx::query_as("SELECT entry_id, vector FROM embeddings")
                    .fetch_all(&mut conn)
                    .await
                    .expect("scan");
            let mut best: Vec<(f32, i64)> = rows
                .iter()
                .map(|(id, blob)| {
                    let dot: f32 = blob
                        .chunks_exact(4)
                        .zip(v)
                        .map(|(b, x)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * x)
                        .sum();
                    (dot, *id)
                })
                .collect();
            best.select_nth_unstable_by(9, |a, b| b.0.total_cmp(&a.0));
            black_box(&best[..10]);
            out.push(bench_kit::ms(start.elapsed()));
        }
        out
    })
}

fn main() {
    let on = bench_kit::enabled;
    let sqlite_large = [
        "memory.sqlite.insert",
        "memory.sqlite.ann_search_100k",
        "memory.sqlite.open_100k",
        "memory.sqlite.search_100k",
        "memory.sqlite.build_context_100k",
        "prompt.hydrate_semantic_100k",
    ];
    let need_sqlite_large = sqlite_large.iter().any(|n| on(n)) || on("memory.sqlite.ann_");
    let inmem_ann = on("memory.inmem.ann_") || on("memory.usearch_direct");
    let need_large = need_sqlite_large || on("memory.inmem.search_100k") || inmem_ann;
    let need_small = on("memory.sqlite.search_10k")
        || on("memory.inmem.search_10k")
        || on("memory.sqlite.prune_merge_5k");
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    if on("memory.sqlite.sync_unchanged") {
        sync_unchanged(&rt, dir.path());
    }
    million(&rt, dir.path());
    if !need_large && !need_small {
        return;
    }
    let large = if need_large {
        data(LARGE, 0x5eed_0001)
    } else {
        data(0, 1)
    };
    let small = if need_small {
        data(SMALL, 0x5eed_0002)
    } else {
        data(0, 2)
    };

    // usearch on the same vectors, for the approximate search rows' baseline.
    let direct = (on("memory.sqlite.ann_") || inmem_ann).then(|| Direct::build(&large.vectors));

    if need_sqlite_large {
        // The baseline runs before and after the subject; the faster run counts (insert
        // timings on a shared machine vary by 2x from run to run).
        let raw_before = rt.block_on(raw_insert(&dir.path().join("raw1.db"), &large));
        let (backend, took) = rt.block_on(fill_sqlite(&dir.path().join("large.db"), &large));
        let raw_after = rt.block_on(raw_insert(&dir.path().join("raw2.db"), &large));
        let raw = raw_before.min(raw_after);
        if on("memory.sqlite.insert") {
            bench_kit::report(
                "memory.sqlite.insert",
                LARGE as f64 / took.as_secs_f64(),
                "entries/s",
                LARGE as f64 / raw.as_secs_f64(),
            );
        }
        // Opening loads every vector into memory: what that costs at 100k.
        rt.block_on(backend.close());
        let start = Instant::now();
        let backend = rt
            .block_on(
                SqliteBackend::builder(dir.path().join("large.db"))
                    .embedder(large.embedder.clone())
                    .open(),
            )
            .expect("reopen");
        let open_ms = bench_kit::ms(start.elapsed());
        if on("memory.sqlite.open_100k") {
            // Baseline: reading the same vectors with one plain query.
            let read_ms =
                sql_scan_latencies(&rt, &dir.path().join("large.db"), &small_slice(&large));
            bench_kit::report(
                "memory.sqlite.open_100k",
                open_ms,
                "ms",
                bench_kit::stats(&read_ms).median,
            );
        }
        if on("memory.sqlite.ann_") {
            ann_figures(
                "memory.sqlite",
                "100k",
                &large,
                // The reopened handle's graph came back with the saved copy (see
                // `memory.sqlite.open_100k`); the in-memory row times a build.
                None,
                &|| rt.block_on(backend.index_status()).expect("index status"),
                &|v, exact| {
                    let options = SearchOptions::new().exact(exact);
                    rt.block_on(backend.nearest(v, 10, &options))
                        .expect("nearest")
                },
                direct.as_ref().map(|d| (d, false)),
            );
            ann_filtered_figures("memory.sqlite", "100k", &large, &|v, options| {
                rt.block_on(backend.nearest(v, 10, options))
                    .expect("nearest")
            });
        }
        if on("memory.sqlite.search_100k") {
            let (s, b) = search_latencies(&rt, &backend, &large);
            report_search("memory.sqlite.search_100k", &s, &b);
            let scan = sql_scan_latencies(&rt, &dir.path().join("large.db"), &large);
            bench_kit::report(
                "memory.sqlite.search_100k.sql_scan_alternative",
                bench_kit::stats(&scan).median,
                "ms",
                bench_kit::stats(&b).median,
            );
        }
        if on("memory.sqlite.build_context_100k") {
            let (s, b) = build_context_latencies(&rt, &backend, &large);
            report_search("memory.sqlite.build_context_100k", &s, &b);
        }
        let backend = if on("prompt.hydrate_semantic_100k") {
            let shared = Arc::new(backend);
            let (s, b) = hydrate_latencies(&rt, shared.clone(), &large);
            report_search("prompt.hydrate_semantic_100k", &s, &b);
            match Arc::try_unwrap(shared) {
                Ok(backend) => backend,
                Err(_) => panic!("hydration keeps no handle on the backend"),
            }
        } else {
            backend
        };
        rt.block_on(backend.close());
    }
    if on("memory.sqlite.search_10k") {
        let (backend, _) = rt.block_on(fill_sqlite(&dir.path().join("small.db"), &small));
        let (s, b) = search_latencies(&rt, &backend, &small);
        report_search("memory.sqlite.search_10k", &s, &b);
        rt.block_on(backend.close());
    }
    if on("memory.sqlite.prune_merge_5k") {
        prune_merge(&rt, &dir.path().join("prune.db"), &small);
    }
    for (name, data) in [
        ("memory.inmem.search_100k", &large),
        ("memory.inmem.search_10k", &small),
    ] {
        let ann = name.ends_with("100k") && inmem_ann;
        if !on(name) && !ann {
            continue;
        }
        let backend = InMemoryBackend::builder()
            .embedder(data.embedder.clone())
            .build()
            .expect("in-memory backend");
        let start = Instant::now();
        for chunk in data.memories.chunks(BATCH) {
            rt.block_on(backend.store_batch(chunk.to_vec()))
                .expect("store");
        }
        let stored_in = start.elapsed();
        if ann {
            ann_figures(
                "memory.inmem",
                "100k",
                data,
                Some(stored_in),
                &|| backend.index_status(),
                &|v, exact| {
                    let options = SearchOptions::new().exact(exact);
                    rt.block_on(backend.nearest(v, 10, &options))
                        .expect("nearest")
                },
                direct.as_ref().map(|d| (d, true)),
            );
            ann_filtered_figures("memory.inmem", "100k", data, &|v, options| {
                rt.block_on(backend.nearest(v, 10, options))
                    .expect("nearest")
            });
        }
        if on(name) {
            let (s, b) = search_latencies(&rt, &backend, data);
            report_search(name, &s, &b);
        }
    }
}

/// The 1,000,000-entry figures (`cargo xtask bench --large`): approximate search on both
/// backends, graph build time, and the in-memory backend's resident memory.
fn million(rt: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let on = bench_kit::enabled;
    let (inmem, sqlite) = (
        on("memory.inmem.ann_search_1m"),
        on("memory.sqlite.ann_search_1m"),
    );
    if !bench_kit::large() || !(inmem || sqlite) {
        return;
    }
    let huge = data(HUGE, 0x5eed_0003);
    // usearch on the same vectors, the approximate search rows' baseline as at 100,000.
    let direct = Direct::build(&huge.vectors);
    if inmem {
        let before = bench_kit::rss_bytes();
        let backend = InMemoryBackend::builder()
            .embedder(huge.embedder.clone())
            .build()
            .expect("in-memory backend");
        let start = Instant::now();
        for chunk in huge.memories.chunks(BATCH) {
            rt.block_on(backend.store_batch(chunk.to_vec()))
                .expect("store");
        }
        let stored_in = start.elapsed();
        ann_figures(
            "memory.inmem",
            "1m",
            &huge,
            Some(stored_in),
            &|| backend.index_status(),
            &|v, exact| {
                let options = SearchOptions::new().exact(exact);
                rt.block_on(backend.nearest(v, 10, &options))
                    .expect("nearest")
            },
            Some((&direct, true)),
        );
        if let (Some(before), Some(after)) = (before, bench_kit::rss_bytes()) {
            // Baseline: the f32 vectors alone.
            bench_kit::report(
                "memory.inmem.rss_1m",
                after.saturating_sub(before) as f64 / (1 << 20) as f64,
                "MiB",
                (HUGE * DIMS * 4) as f64 / (1 << 20) as f64,
            );
        }
    }
    if sqlite {
        let (backend, took) = rt.block_on(fill_sqlite(&dir.join("huge.db"), &huge));
        ann_figures(
            "memory.sqlite",
            "1m",
            &huge,
            Some(took),
            &|| rt.block_on(backend.index_status()).expect("index status"),
            &|v, exact| {
                let options = SearchOptions::new().exact(exact);
                rt.block_on(backend.nearest(v, 10, &options))
                    .expect("nearest")
            },
            Some((&direct, !inmem)),
        );
        rt.block_on(backend.close());
    }
}

/// Prune with near-duplicate merging over 5,000 entries (the O(n²) rule); baseline: every
/// pairwise similarity with a plain single-threaded scan. (Random vectors: nothing merges;
/// the time is the comparisons.)
fn prune_merge(rt: &tokio::runtime::Runtime, path: &std::path::Path, data: &Data) {
    const N: usize = 5_000;
    let backend = rt
        .block_on(
            SqliteBackend::builder(path)
                .embedder(data.embedder.clone())
                .open(),
        )
        .expect("open");
    rt.block_on(backend.store_batch(data.memories[..N].to_vec()))
        .expect("store");
    let policy = agent_op::PrunePolicy::new().merge_similarity(0.95);
    let start = Instant::now();
    let report = rt.block_on(backend.prune(&policy)).expect("prune");
    let took = bench_kit::ms(start.elapsed());
    assert_eq!(report.merged, 0);
    let vectors = &data.vectors[..N];
    let start = Instant::now();
    let mut similar = 0usize;
    for i in 0..N {
        for j in i + 1..N {
            let s: f32 = vectors[i].iter().zip(&vectors[j]).map(|(a, b)| a * b).sum();
            if s >= 0.95 {
                similar += 1;
            }
        }
    }
    black_box(similar);
    let baseline = bench_kit::ms(start.elapsed());
    bench_kit::report("memory.sqlite.prune_merge_5k", took, "ms", baseline);
    rt.block_on(backend.close());
}

/// The same data with only its first queries (for a quick read-everything baseline).
fn small_slice(data: &Data) -> Data {
    Data {
        memories: Vec::new(),
        vectors: Vec::new(),
        queries: data.queries.iter().take(3).cloned().collect(),
        embedder: data.embedder.clone(),
    }
}
