//! PostgreSQL backend benchmarks, each with a baseline measured in the same run:
//!
//! - `memory.postgres.insert`: `store_batch` of 10,000 entries in batches of 1,000 into a
//!   store with its HNSW index, in entries/s; baseline: the SQLite backend doing the same.
//! - `memory.postgres.insert_single`: 500 single `store` calls on top, in entries/s;
//!   baseline: the SQLite backend doing the same.
//! - `memory.postgres.store_single`: 500 single `store` calls into a store of 10,000 entries
//!   with its HNSW index, in entries/s; baseline: a raw prepared `INSERT` of the same rows
//!   (entry, vector and tags in one statement) on a connection of its own into another store
//!   of the same 10,000 entries (the same tables and indexes), interleaved call by call.
//! - `memory.postgres.bulk_load_100k`: one `store_batch` of 100,000 entries into an empty
//!   store (binary `COPY`, then the HNSW index built again), in entries/s; baseline: a raw
//!   binary `COPY` of the same ids and vectors into a plain table (`id bigint, embedding
//!   vector(384)`) followed by `CREATE INDEX … USING hnsw (embedding vector_cosine_ops)`,
//!   with the same `maintenance_work_mem` and parallel workers, run just before it.
//! - `memory.postgres.search_100k` (`.p99`): p50 (p99) of `search(q, 10)` over 100,000
//!   entries through the HNSW index (hybrid: words and vector, the recall recorded), in ms;
//!   baseline: pgvector's own HNSW top-10 query on the same table (`ORDER BY embedding <=>
//!   $1 LIMIT 10`, the same `hnsw.ef_search`), interleaved query by query, taking turns at
//!   going first.
//! - `memory.postgres.pgvector_direct_100k`: that query's p50; baseline: the store's exact
//!   search (`SearchOptions::exact`: every vector compared), in a loop of its own.
//! - `memory.postgres.recall_100k`: recall@10 of the HNSW vector ranking against the exact
//!   one over the same 100,000 entries (0–1); baseline: the exact ranking's own, 1.
//!
//! Data: clustered 384-dimension vectors, as real embeddings are (uniformly random vectors
//! have no meaningful neighbours): 1,000 random unit centers; each vector is a center plus
//! Gaussian noise (σ = 0.03 per dimension), normalized. Queries are drawn the same way. The
//! "embedder" looks vectors up by text, so no embedding work is timed. Texts are 8–20 words
//! from a 5,000-word Zipf-like vocabulary (keyword search does real work); the recall queries
//! are words found nowhere, so the fused ranking is the vector ranking alone. The searches
//! run on the store `memory.postgres.bulk_load_100k` loaded (loaded the same way, untimed,
//! when that row is not asked for).
//!
//! The server: `DATABASE_URL`, else the project's test server (`xtask/src/pg.rs`), started
//! here and stopped at the end if this started it; without either, one `SKIPPED:` line on
//! stderr and no results.

#[path = "../tests/support/postgres.rs"]
#[allow(dead_code)]
mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_memory::{PostgresBackend, SqliteBackend};
use agent_op::{
    BoxFuture, EmbeddingError, EmbeddingProvider, MemoryBackend, NewMemory, SearchOptions,
};
use sqlx::{Connection, PgConnection};

use support::TestSchema;
use support::cluster::{Cluster, PgError};

const DIMS: usize = 384;
const LARGE: usize = 100_000;
const INSERTED: usize = 10_000;
const SINGLE: usize = 500;
const BATCH: usize = 1_000;
const QUERIES: usize = 200;
const CENTERS: usize = 1_000;
const NOISE: f64 = 0.03;
const VOCABULARY: usize = 5_000;

/// A deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn gaussian(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }

    /// A Zipf-like word index: rank r has weight about 1/r.
    fn word(&mut self) -> usize {
        let x = (VOCABULARY as f64).powf(self.unit());
        (x as usize).clamp(1, VOCABULARY) - 1
    }

    fn sentence(&mut self, min: usize, max: usize) -> String {
        let n = min + (self.next() as usize) % (max - min + 1);
        (0..n)
            .map(|_| format!("w{}", self.word()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn normalized(v: Vec<f64>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.into_iter().map(|x| (x / norm) as f32).collect()
}

/// Clustered unit vectors: a random center plus noise, normalized.
struct Clusters {
    centers: Vec<Vec<f64>>,
}

impl Clusters {
    fn new(rng: &mut Rng) -> Clusters {
        let centers = (0..CENTERS)
            .map(|_| {
                let v = normalized((0..DIMS).map(|_| rng.gaussian()).collect());
                v.into_iter().map(f64::from).collect()
            })
            .collect();
        Clusters { centers }
    }

    fn draw(&self, rng: &mut Rng) -> Vec<f32> {
        let center = &self.centers[(rng.next() as usize) % CENTERS];
        normalized(center.iter().map(|c| c + NOISE * rng.gaussian()).collect())
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
    /// Hybrid queries (words and a vector).
    queries: Vec<String>,
    /// The same vectors under words no entry holds: only the vector ranking counts.
    vector_queries: Vec<String>,
    embedder: Arc<Precomputed>,
}

fn data() -> Data {
    let mut rng = Rng(0x5eed_0014);
    let clusters = Clusters::new(&mut rng);
    let mut vectors = HashMap::with_capacity(LARGE + 2 * QUERIES);
    let mut memories = Vec::with_capacity(LARGE);
    for i in 0..LARGE {
        // The index keeps every content distinct.
        let content = format!("{} n{i}", rng.sentence(8, 20));
        vectors.insert(content.clone(), clusters.draw(&mut rng));
        memories.push(NewMemory {
            content,
            context: rng.sentence(3, 6),
            tags: vec![format!("t{}", i % 20).into()],
        });
    }
    let mut queries = Vec::with_capacity(QUERIES);
    let mut vector_queries = Vec::with_capacity(QUERIES);
    for q in 0..QUERIES {
        let vector = clusters.draw(&mut rng);
        let query = format!("{} q{q}", rng.sentence(3, 8));
        let only_vector = format!("zq{q}");
        vectors.insert(query.clone(), vector.clone());
        vectors.insert(only_vector.clone(), vector);
        queries.push(query);
        vector_queries.push(only_vector);
    }
    Data {
        memories,
        queries,
        vector_queries,
        embedder: Arc::new(Precomputed { vectors }),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The server: `DATABASE_URL`, else the test server (and whether this started it).
fn server() -> Option<(String, Option<Cluster>)> {
    if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        return Some((url, None));
    }
    let cluster = Cluster::main(&support::target());
    match cluster.start() {
        Ok(started) if started.already_running => Some((started.url, None)),
        Ok(started) => Some((started.url, Some(cluster))),
        Err(PgError::Unavailable(why)) => {
            eprintln!(
                "SKIPPED: Postgres benchmarks need a PostgreSQL server with pgvector \
                 (DATABASE_URL, or a wheel from PyPI ({}), or Debian's postgresql with \
                 pgvector): {why}",
                support::cluster::WHEELS.map(|w| w.package).join(", ")
            );
            None
        }
        Err(PgError::Failed(why)) => panic!("starting the PostgreSQL test server: {why}"),
    }
}

/// Stops the server this started, however the run ends.
struct StopOnDrop(Option<Cluster>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(cluster) = self.0.take() {
            if let Err(e) = cluster.stop() {
                eprintln!("stopping the PostgreSQL test server: {e}");
            }
        }
    }
}

fn per_second(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn main() {
    let on = bench_kit::enabled;
    let names = [
        "memory.postgres.insert",
        "memory.postgres.insert_single",
        "memory.postgres.store_single",
        "memory.postgres.bulk_load_100k",
        "memory.postgres.search_100k",
        "memory.postgres.pgvector_direct_100k",
        "memory.postgres.recall_100k",
    ];
    if !names.iter().any(|n| on(n)) {
        return;
    }
    let Some((url, started)) = server() else {
        return;
    };
    let _stop = StopOnDrop(started);
    let rt = runtime();
    let data = data();
    let embedder: Arc<dyn EmbeddingProvider> = data.embedder.clone();

    if on("memory.postgres.insert") || on("memory.postgres.insert_single") {
        insert(&rt, &url, &data, embedder.clone());
    }
    if on("memory.postgres.store_single") {
        store_single(&rt, &url, &data, embedder.clone());
    }
    if on("memory.postgres.bulk_load_100k")
        || on("memory.postgres.search_100k")
        || on("memory.postgres.pgvector_direct_100k")
        || on("memory.postgres.recall_100k")
    {
        search(&rt, &url, &data, embedder);
    }
}

/// Single stores into an indexed store, against raw prepared inserts into an equal one.
fn store_single(
    rt: &tokio::runtime::Runtime,
    url: &str,
    data: &Data,
    embedder: Arc<dyn EmbeddingProvider>,
) {
    let preload = &data.memories[..INSERTED];
    let singles = &data.memories[INSERTED..INSERTED + SINGLE];
    let (subject_schema, baseline_schema) = (TestSchema::new(url), TestSchema::new(url));
    rt.block_on(async {
        let open = |schema: &TestSchema| {
            PostgresBackend::builder(url)
                .schema(schema.name())
                .embedder(embedder.clone())
                .connect()
        };
        let subject = open(&subject_schema).await.expect("connect");
        let twin = open(&baseline_schema).await.expect("connect");
        subject
            .store_batch(preload.to_vec())
            .await
            .expect("preload");
        twin.store_batch(preload.to_vec()).await.expect("preload");
        twin.close().await;
        let mut raw = PgConnection::connect(url).await.expect("connect");
        sqlx::query(&format!(
            "SELECT set_config('search_path', '\"{}\", public', false)",
            baseline_schema.name()
        ))
        .execute(&mut raw)
        .await
        .expect("search_path");
        // The same row as the store writes: entry, vector and tags, prepared once (sqlx
        // caches the statement on the connection).
        let insert = "WITH e AS ( \
                 INSERT INTO entries (content, context, created_at, accessed_at) \
                 VALUES ($1, $2, $3, $3) RETURNING id), \
             v AS (INSERT INTO embeddings (entry_id, embedding) \
                 SELECT id, $4::real[]::vector FROM e), \
             t AS (INSERT INTO entry_tags (entry_id, tag) \
                 SELECT e.id, u.tag FROM e, unnest($5::text[]) AS u(tag)) \
             SELECT id FROM e";
        let (mut subject_time, mut baseline_time) = (Duration::ZERO, Duration::ZERO);
        for memory in singles {
            let start = Instant::now();
            subject.store(memory.clone()).await.expect("store");
            subject_time += start.elapsed();
            let start = Instant::now();
            let vector = data.embedder.vectors.get(&memory.content).expect("vector");
            let tags: Vec<&str> = memory.tags.iter().map(|t| t.0.as_str()).collect();
            let now = chrono::Utc::now().timestamp_micros();
            let _: (i64,) = sqlx::query_as(insert)
                .bind(&memory.content)
                .bind(&memory.context)
                .bind(now)
                .bind(vector)
                .bind(&tags)
                .fetch_one(&mut raw)
                .await
                .expect("raw insert");
            baseline_time += start.elapsed();
        }
        bench_kit::report(
            "memory.postgres.store_single",
            per_second(SINGLE, subject_time),
            "entries/s",
            per_second(SINGLE, baseline_time),
        );
        subject.close().await;
        raw.close().await.expect("close");
    });
}

/// Rows of (bigint, vector) in PostgreSQL's binary COPY format, without the stream's
/// header and trailer.
fn copy_rows(rows: &[(i64, &[f32])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, vector) in rows {
        out.extend_from_slice(&2i16.to_be_bytes());
        out.extend_from_slice(&8i32.to_be_bytes());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&(4 + 4 * vector.len() as i32).to_be_bytes());
        out.extend_from_slice(&(vector.len() as i16).to_be_bytes());
        out.extend_from_slice(&0i16.to_be_bytes());
        for x in *vector {
            out.extend_from_slice(&x.to_be_bytes());
        }
    }
    out
}

/// pgvector alone: a binary COPY of the vectors into a plain table, then its HNSW index;
/// entries/s.
async fn raw_bulk_load(url: &str, data: &Data, schema: &str) -> f64 {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("SET search_path = \"{schema}\", public"),
        format!("CREATE TABLE raw_vectors (id bigint PRIMARY KEY, embedding vector({DIMS}))"),
        // What the store's load asks for on this server (see `build_index` in write.rs).
        "SET maintenance_work_mem = '1GB'".to_owned(),
        "SET max_parallel_maintenance_workers = 2".to_owned(),
    ] {
        sqlx::query(&sql).execute(&mut conn).await.expect("setup");
    }
    let start = Instant::now();
    let rows: Vec<(i64, &[f32])> = data
        .memories
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let vector = data.embedder.vectors.get(&m.content).expect("vector");
            (i as i64 + 1, vector.as_slice())
        })
        .collect();
    let mut copy = conn
        .copy_in_raw("COPY raw_vectors (id, embedding) FROM STDIN (FORMAT binary)")
        .await
        .expect("copy");
    // The header: signature, flags, extension length.
    let mut header = b"PGCOPY\n\xff\r\n\0".to_vec();
    header.extend_from_slice(&[0; 8]);
    copy.send(header).await.expect("send");
    for chunk in rows.chunks(1_000) {
        copy.send(copy_rows(chunk)).await.expect("send");
    }
    copy.send(&(-1i16).to_be_bytes()[..]).await.expect("send");
    copy.finish().await.expect("finish");
    sqlx::query("CREATE INDEX ON raw_vectors USING hnsw (embedding vector_cosine_ops)")
        .execute(&mut conn)
        .await
        .expect("index");
    let took = start.elapsed();
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .expect("drop");
    let _ = conn.close().await;
    per_second(LARGE, took)
}

/// Inserts into an indexed store, against SQLite doing the same.
fn insert(
    rt: &tokio::runtime::Runtime,
    url: &str,
    data: &Data,
    embedder: Arc<dyn EmbeddingProvider>,
) {
    let dir = tempfile::tempdir().expect("temp dir");
    let batches = &data.memories[..INSERTED];
    let singles = &data.memories[INSERTED..INSERTED + SINGLE];
    let schema = TestSchema::new(url);
    rt.block_on(async {
        let sqlite = SqliteBackend::builder(dir.path().join("insert.db"))
            .embedder(embedder.clone())
            .open()
            .await
            .expect("open sqlite");
        let postgres = PostgresBackend::builder(url)
            .schema(schema.name())
            .embedder(embedder)
            .connect()
            .await
            .expect("connect");

        let start = Instant::now();
        for chunk in batches.chunks(BATCH) {
            sqlite
                .store_batch(chunk.to_vec())
                .await
                .expect("sqlite batch");
        }
        let sqlite_batches = start.elapsed();
        let start = Instant::now();
        for chunk in batches.chunks(BATCH) {
            postgres
                .store_batch(chunk.to_vec())
                .await
                .expect("postgres batch");
        }
        let postgres_batches = start.elapsed();
        bench_kit::report(
            "memory.postgres.insert",
            per_second(INSERTED, postgres_batches),
            "entries/s",
            per_second(INSERTED, sqlite_batches),
        );

        let start = Instant::now();
        for memory in singles {
            sqlite.store(memory.clone()).await.expect("sqlite store");
        }
        let sqlite_single = start.elapsed();
        let start = Instant::now();
        for memory in singles {
            postgres
                .store(memory.clone())
                .await
                .expect("postgres store");
        }
        let postgres_single = start.elapsed();
        bench_kit::report(
            "memory.postgres.insert_single",
            per_second(SINGLE, postgres_single),
            "entries/s",
            per_second(SINGLE, sqlite_single),
        );
        sqlite.close().await;
        postgres.close().await;
    });
}

/// Runs `sql` on a connection of its own.
async fn admin(url: &str, sql: &str) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query(sql).execute(&mut conn).await.expect(sql);
    let _ = conn.close().await;
}

/// Search latency and recall over 100,000 entries.
fn search(
    rt: &tokio::runtime::Runtime,
    url: &str,
    data: &Data,
    embedder: Arc<dyn EmbeddingProvider>,
) {
    let schema = TestSchema::new(url);
    let name = schema.name().to_owned();
    let open = || {
        PostgresBackend::builder(url)
            .schema(&name)
            .embedder(embedder.clone())
            .statement_timeout(None)
            .connect()
    };
    let store = rt.block_on(async {
        let baseline = if bench_kit::enabled("memory.postgres.bulk_load_100k") {
            Some(raw_bulk_load(url, data, &format!("{name}_raw")).await)
        } else {
            None
        };
        // One batch into an empty store: COPY, then the HNSW index built over it all.
        let store = open().await.expect("connect");
        let all = data.memories.clone();
        let start = Instant::now();
        store.store_batch(all).await.expect("load");
        let took = start.elapsed();
        eprintln!("loaded {LARGE} entries with store_batch in {took:?}");
        if let Some(baseline) = baseline {
            bench_kit::report(
                "memory.postgres.bulk_load_100k",
                per_second(LARGE, took),
                "entries/s",
                baseline,
            );
        }
        admin(
            url,
            &format!("ANALYZE \"{name}\".entries, \"{name}\".embeddings"),
        )
        .await;
        store
    });

    if bench_kit::enabled("memory.postgres.search_100k")
        || bench_kit::enabled("memory.postgres.pgvector_direct_100k")
    {
        // The baseline: pgvector's HNSW top 10 on the same table, asked directly on a
        // connection of its own with the backend's `hnsw.ef_search`, prepared once.
        let mut raw = rt.block_on(async {
            let mut conn = PgConnection::connect(url).await.expect("connect");
            sqlx::query(&format!(
                "SELECT set_config('search_path', '\"{name}\", public', false), \
                        set_config('hnsw.ef_search', '100', false)"
            ))
            .execute(&mut conn)
            .await
            .expect("settings");
            conn
        });
        let direct = |conn: &mut PgConnection, q: &str| {
            let vector = data.embedder.vectors.get(q).expect("query vector");
            rt.block_on(
                sqlx::query_as::<_, (i64,)>(
                    "SELECT entry_id FROM embeddings \
                     ORDER BY embedding <=> $1::real[]::vector LIMIT 10",
                )
                .bind(vector)
                .fetch_all(&mut *conn),
            )
            .expect("pgvector query")
        };
        let exact = SearchOptions::new().exact(true);
        for q in data.queries.iter().take(5) {
            rt.block_on(store.search(q, 10)).expect("warm-up");
            rt.block_on(store.search_with(q, 10, &exact))
                .expect("warm-up");
            direct(&mut raw, q);
        }
        // Each query is asked of the store and of pgvector back to back, the two taking turns
        // at going first: the second finds the first's walk of the graph in the CPU caches,
        // so a fixed order would favour whichever always came second.
        let mut subject = Vec::with_capacity(QUERIES);
        let mut baseline = Vec::with_capacity(QUERIES);
        for (i, q) in data.queries.iter().enumerate() {
            let mut store_search = || {
                let start = Instant::now();
                let hits = rt.block_on(store.search(q, 10)).expect("search");
                subject.push(bench_kit::ms(start.elapsed()));
                assert_eq!(hits.len(), 10);
            };
            let mut pgvector_search = || {
                let start = Instant::now();
                let rows = direct(&mut raw, q);
                baseline.push(bench_kit::ms(start.elapsed()));
                assert_eq!(rows.len(), 10);
            };
            if i % 2 == 0 {
                store_search();
                pgvector_search();
            } else {
                pgvector_search();
                store_search();
            }
        }
        // The exact scans on their own: each one streams every vector through the caches,
        // which would leave the next search of the loop above cold.
        let mut exact_scan = Vec::with_capacity(QUERIES);
        for q in &data.queries {
            let start = Instant::now();
            let hits = rt
                .block_on(store.search_with(q, 10, &exact))
                .expect("exact search");
            exact_scan.push(bench_kit::ms(start.elapsed()));
            assert_eq!(hits.len(), 10);
        }
        let s = bench_kit::stats(&subject);
        let b = bench_kit::stats(&baseline);
        let e = bench_kit::stats(&exact_scan);
        bench_kit::report("memory.postgres.search_100k", s.median, "ms", b.median);
        bench_kit::report("memory.postgres.search_100k.p99", s.p99, "ms", b.p99);
        bench_kit::report(
            "memory.postgres.pgvector_direct_100k",
            b.median,
            "ms",
            e.median,
        );
        rt.block_on(raw.close()).expect("close");
    }

    if bench_kit::enabled("memory.postgres.recall_100k") {
        let exact = SearchOptions::new().exact(true);
        let default = SearchOptions::new();
        let mut found = 0usize;
        for q in &data.vector_queries {
            let ids = |options: &SearchOptions| {
                rt.block_on(store.search_candidates_with(q, 10, options))
                    .expect("search")
                    .into_iter()
                    .map(|c| c.hit.entry.id)
                    .collect::<Vec<_>>()
            };
            let truth = ids(&exact);
            assert_eq!(truth.len(), 10);
            found += ids(&default).iter().filter(|id| truth.contains(id)).count();
        }
        let recall = found as f64 / (10 * QUERIES) as f64;
        bench_kit::report("memory.postgres.recall_100k", recall, "recall@10", 1.0);
    }
    rt.block_on(store.close());
    drop(schema);
}
