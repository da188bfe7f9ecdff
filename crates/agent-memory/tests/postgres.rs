//! The PostgreSQL backend beyond the conformance suite: bad input and bad servers (typed
//! errors, never a panic), a database where pgvector cannot be created, a server that goes
//! away mid-query and comes back, texts beyond PostgreSQL's limits, filtered search on a
//! store larger than the HNSW candidate list, and writers in separate pools and in two
//! processes at once.
//!
//! The server: see `support/postgres.rs` (`DATABASE_URL`, else the project's test server;
//! without either every test here returns after one `SKIPPED:` line). The crash test starts
//! a server of its own (`target/pg/crash`), since stopping the shared one would break the
//! tests running beside it.

#[path = "support/postgres.rs"]
#[allow(dead_code)] // each test binary uses its own part of it
mod support;

use std::error::Error as _;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_memory::{PgvectorError, PostgresBackend, PostgresBuilder};
use agent_op::{MemoryBackend, MemoryError, MemoryId, NewMemory, SearchOptions, Tag};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use support::cluster::{Cluster, PgError};
use support::{TestSchema, server_url, skipped, target};

fn memory(content: &str, tags: &[&str]) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: "postgres test".to_owned(),
        tags: tags.iter().map(|t| Tag::from(*t)).collect(),
    }
}

fn builder(url: &str, schema: &TestSchema) -> PostgresBuilder {
    PostgresBackend::builder(url).schema(schema.name())
}

/// `cause`'s error of type `E`, if the storage layer's error is one.
fn cause_of<E: std::error::Error + 'static>(error: &MemoryError) -> Option<&E> {
    error.source()?.downcast_ref::<E>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_urls_and_schema_names_are_invalid_input() {
    for url in [
        "",
        "not a url",
        "mysql://localhost/db",
        "postgres://host:notaport/db",
    ] {
        let result = PostgresBackend::connect(url).await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "{url:?}: {result:?}"
        );
    }
    for schema in [
        "",
        "Public",
        "pg_catalog",
        "x\"; DROP SCHEMA public; --",
        "1st",
    ] {
        let result = PostgresBackend::builder("postgres://localhost/db")
            .schema(schema)
            .connect()
            .await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "{schema:?}: {result:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_fails_fast_with_a_storage_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let start = Instant::now();
    let result = PostgresBackend::connect(&format!("postgres://postgres@127.0.0.1:{port}/x")).await;
    let elapsed = start.elapsed();
    let error = result.expect_err("nothing listens there");
    assert!(
        matches!(&error, MemoryError::Storage { operation, .. } if operation == "connecting"),
        "{error:?}"
    );
    assert!(cause_of::<sqlx::Error>(&error).is_some(), "{error:?}");
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );
    // Only catches retrying for minutes against a port nothing listens on.
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_embedder_is_refused() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema).connect().await.expect("connect");
    store.store(memory("kept", &[])).await.expect("store");
    store.close().await;
    let shorter = agent_memory::HashingEmbedder::with_dimensions(64).expect("embedder");
    let other_model = agent_memory::ZeroEmbedder::new(agent_memory::DEFAULT_DIMENSIONS);
    for embedder in [
        Arc::new(shorter) as Arc<dyn agent_op::EmbeddingProvider>,
        Arc::new(other_model),
    ] {
        let result = builder(url, &schema).embedder(embedder).connect().await;
        assert!(
            matches!(
                &result,
                Err(MemoryError::EmbedderMismatch { stored_model, stored_dimensions: 384, .. })
                    if stored_model == "hashing-v1-384"
            ),
            "{result:?}"
        );
    }
    let again = builder(url, &schema).connect().await.expect("reconnect");
    assert_eq!(again.count().await.expect("count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_are_invalid_input() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema).connect().await.expect("connect");
    let mut in_context = memory("fine", &[]);
    in_context.context = "a\0b".into();
    for bad in [memory("a\0b", &[]), memory("fine", &["t\0"]), in_context] {
        let result = store.store(bad.clone()).await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "{result:?}"
        );
        let result = store.store_batch(vec![memory("ok", &[]), bad]).await;
        assert!(
            matches!(result, Err(MemoryError::InvalidInput(_))),
            "{result:?}"
        );
    }
    assert_eq!(store.count().await.expect("count"), 0, "nothing was stored");
    store.store(memory("tagged", &["t"])).await.expect("store");
    assert!(
        store
            .by_tags(&[Tag::from("t\0")])
            .await
            .expect("by_tags")
            .is_empty()
    );
    let filter = SearchOptions::new().tag("t\0");
    assert!(
        store
            .search_with("tagged", 5, &filter)
            .await
            .expect("search")
            .is_empty()
    );
    assert_eq!(store.search("tagged\0", 5).await.expect("search").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_other_tables_is_refused_untouched() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let name = schema.name();
    for sql in [
        format!("CREATE SCHEMA \"{name}\""),
        format!("CREATE TABLE \"{name}\".customers (id int PRIMARY KEY, name text)"),
        format!("INSERT INTO \"{name}\".customers VALUES (1, 'Ana')"),
    ] {
        sqlx::query(&sql).execute(&mut admin).await.expect("setup");
    }
    let result = builder(url, &schema).connect().await;
    assert!(
        matches!(&result, Err(MemoryError::UnexpectedData { found, .. }) if found.contains("customers")),
        "{result:?}"
    );
    let tables: Vec<(String,)> =
        sqlx::query_as("SELECT tablename::text FROM pg_tables WHERE schemaname = $1")
            .bind(name)
            .fetch_all(&mut admin)
            .await
            .expect("tables");
    assert_eq!(tables, [("customers".to_owned(),)], "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_cannot_create_pgvector_gets_an_error_naming_it() {
    let Some(url) = server_url() else { return };
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let (superuser,): (bool,) =
        sqlx::query_as("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            .fetch_one(&mut admin)
            .await
            .expect("role");
    if !superuser {
        eprintln!("note: the pgvector privilege test needs a superuser in DATABASE_URL; not run");
        return;
    }
    // A database of its own, owned by a role that is no superuser: pgvector is not a trusted
    // extension, so that role cannot create it there.
    let name = format!("memory_noext_{}", std::process::id());
    let password = format!("pw{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("DROP ROLE IF EXISTS {name}"),
        format!("CREATE ROLE {name} LOGIN PASSWORD '{password}'"),
        format!("CREATE DATABASE {name} OWNER {name}"),
    ] {
        sqlx::query(&sql).execute(&mut admin).await.expect("setup");
    }
    let options = PgConnectOptions::from_str(url).expect("url");
    let role_url = format!(
        "postgres://{name}:{password}@{}:{}/{name}",
        options.get_host(),
        options.get_port()
    );
    let error = PostgresBackend::connect(&role_url)
        .await
        .expect_err("no pgvector there");
    let message = error.to_string();
    assert!(
        matches!(&error, MemoryError::Storage { .. })
            && message.contains("pgvector")
            && message.contains("`vector`"),
        "{error:?}"
    );
    assert!(
        matches!(cause_of::<PgvectorError>(&error), Some(PgvectorError::CannotCreate { database, .. }) if *database == name),
        "{error:?}"
    );
    assert!(
        !message.contains(&password),
        "the password leaked: {message}"
    );

    // Once a superuser created it there, the same role connects.
    let admin_db = format!(
        "{}/{name}",
        url.rsplit_once('/').map_or(url, |(base, _)| base)
    );
    let mut there = PgConnection::connect(&admin_db).await.expect("connect");
    sqlx::query("CREATE EXTENSION vector")
        .execute(&mut there)
        .await
        .expect("create");
    there.close().await.expect("close");
    let store = PostgresBackend::connect(&role_url)
        .await
        .expect("connect as the role");
    store.store(memory("works now", &[])).await.expect("store");
    store.close().await;
    for sql in [
        format!("DROP DATABASE {name} WITH (FORCE)"),
        format!("DROP ROLE {name}"),
    ] {
        sqlx::query(&sql)
            .execute(&mut admin)
            .await
            .expect("cleanup");
    }
}

/// Stops a cluster when dropped, however the test ends.
struct StopOnDrop(Cluster);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Err(e) = self.0.stop() {
            eprintln!("stopping the crash test's server: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_mid_query_is_a_storage_error_and_the_pool_recovers() {
    // The shared server is not stopped: other tests use it. This one has its own.
    if server_url().is_none() {
        return;
    }
    let cluster = Cluster::named(&target(), "crash");
    let started = match tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.start()
    })
    .await
    .expect("start task")
    {
        Ok(started) => started,
        Err(PgError::Unavailable(why)) => return skipped(&why),
        Err(PgError::Failed(why)) => panic!("starting the crash test's server: {why}"),
    };
    let stop = StopOnDrop(cluster.clone());
    let url = started.url.clone();
    let schema = TestSchema::new(&url);
    let store = builder(&url, &schema)
        .acquire_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect");
    store
        .store(memory("before the crash", &[]))
        .await
        .expect("store");

    // A writer storing batches in a loop, until the server goes away under it.
    let writer = tokio::spawn({
        let store = store.clone();
        async move {
            let batch: Vec<NewMemory> = (0..200)
                .map(|i| memory(&format!("entry {i} written while the server dies"), &["w"]))
                .collect();
            let mut stored = 0;
            loop {
                match store.store_batch(batch.clone()).await {
                    Ok(ids) => stored += ids.len(),
                    Err(e) => return (stored, e),
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let crashed = tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.crash()
    })
    .await
    .expect("crash task");
    assert!(matches!(crashed, Ok(true)), "{crashed:?}");
    let (stored, error) = tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("the writer saw the crash within 60 s")
        .expect("the writer did not panic");
    assert!(stored > 0, "the writer wrote before the crash");
    assert!(matches!(error, MemoryError::Storage { .. }), "{error:?}");

    // While it is down: typed errors, promptly.
    let start = Instant::now();
    let down = store.count().await;
    assert!(matches!(down, Err(MemoryError::Storage { .. })), "{down:?}");
    // Only catches an operation waiting out the outage instead of failing.
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );

    // Back up (on the same port): the next operations succeed on fresh connections.
    let restarted = tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.start()
    })
    .await
    .expect("restart task")
    .expect("restart");
    assert_eq!(restarted.url, url, "the server came back on the same port");
    let count = store.count().await.expect("count after the restart");
    assert!(count >= 1, "{count}");
    let id = store
        .store(memory("after the restart", &[]))
        .await
        .expect("store");
    // Exact: the writer's thousands of near-identical entries can hide this one from an
    // HNSW walk (the fused ranking then ties, and the lower id wins), which is the index's
    // recall, not the restart's doing.
    let exact = SearchOptions::new().exact(true);
    let hits = store
        .search_with("after the restart", 1, &exact)
        .await
        .expect("search");
    assert_eq!(hits[0].entry.id, id);
    store.close().await;
    drop(schema);
    drop(stop);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn texts_beyond_the_tsvector_limit_are_stored_and_searchable() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema).connect().await.expect("connect");
    // ~1.6 MB of distinct words: more than a tsvector's 1 MB of lexemes.
    let content: String = (0..200_000).map(|i| format!("w{i}x ")).collect();
    let id = store
        .store(memory(&content, &["big"]))
        .await
        .expect("store");
    assert_eq!(
        store.get(&id).await.expect("get").expect("there").content,
        content
    );
    let hits = store.search("w17x", 5).await.expect("search");
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_search_over_more_entries_than_the_candidate_list() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema).connect().await.expect("connect");
    // 1,500 entries, every tenth tagged: a filter admitting 150 among 1,500 candidates for a
    // top 10 (the HNSW scan keeps 100 candidates per pass).
    let memories: Vec<NewMemory> = (0..1_500)
        .map(|i| {
            let tags: &[&str] = if i % 10 == 0 { &["ops"] } else { &["other"] };
            memory(
                &format!("runbook {i}: rotate key {} on host {}", i % 37, i % 53),
                tags,
            )
        })
        .collect();
    store.store_batch(memories).await.expect("store");
    let ops = SearchOptions::new().tag("ops");
    let exact = SearchOptions::new().tag("ops").exact(true);
    let mut found = 0;
    for q in 0..20 {
        let query = format!("rotate key {} on host {}", q % 37, q * 7 % 53);
        let approximate = store
            .search_candidates_with(&query, 10, &ops)
            .await
            .expect("search");
        let reference = store
            .search_candidates_with(&query, 10, &exact)
            .await
            .expect("search");
        assert_eq!(approximate.len(), 10);
        assert!(
            approximate
                .iter()
                .all(|c| c.hit.entry.tags == [Tag::from("ops")])
        );
        found += approximate
            .iter()
            .filter(|c| reference.iter().any(|r| r.hit.entry.id == c.hit.entry.id))
            .count();
    }
    let recall = found as f64 / 200.0;
    assert!(recall >= 0.9, "filtered recall@10 {recall}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_with_pools_of_their_own_write_and_recall_at_once() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let first = builder(url, &schema).connect().await.expect("connect");
    let shared: Vec<MemoryId> = first
        .store_batch(
            (0..10)
                .map(|i| memory(&format!("shared fact {i}"), &["shared"]))
                .collect(),
        )
        .await
        .expect("store");
    const HANDLES: usize = 6;
    const ROUNDS: usize = 15;
    let mut tasks = Vec::new();
    for h in 0..HANDLES {
        let store = builder(url, &schema)
            .max_connections(3)
            .connect()
            .await
            .expect("connect");
        let mut ids = shared.clone();
        if h % 2 == 1 {
            // Opposite lock orders from different handles: deadlocks unless rows are locked
            // in one order (or the deadlock is retried).
            ids.reverse();
        }
        tasks.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                store
                    .store(memory(
                        &format!("handle {h} round {r}"),
                        &[&format!("h{h}")],
                    ))
                    .await?;
                store.record_access(&ids).await?;
                if r % 5 == 0 {
                    store
                        .prune(&agent_op::PrunePolicy::new().max_entries(100_000))
                        .await?;
                    store.search("shared fact", 3).await?;
                }
            }
            Ok::<_, MemoryError>(())
        }));
    }
    for task in tasks {
        task.await
            .expect("no panic")
            .expect("no error reaches a writer");
    }
    assert_eq!(
        first.count().await.expect("count"),
        (10 + HANDLES * ROUNDS) as u64
    );
    for id in &shared {
        let entry = first.get(id).await.expect("get").expect("there");
        // Every record_access counts; searches may have recalled it too.
        assert!(entry.access_count >= (HANDLES * ROUNDS) as u64, "{entry:?}");
    }
    for h in 0..HANDLES {
        let tagged = first
            .by_tags(&[Tag::from(format!("h{h}"))])
            .await
            .expect("by_tags");
        assert_eq!(tagged.len(), ROUNDS);
    }
}

const CHILD_ENV: &str = "AGENT_MEMORY_PG_CHILD";
const CHILD_URL_ENV: &str = "AGENT_MEMORY_PG_CHILD_URL";
const CHILD_SCHEMA_ENV: &str = "AGENT_MEMORY_PG_CHILD_SCHEMA";
const PER_PROCESS: usize = 150;

/// Two more OS processes (this test binary again, running [`child_writer`]) write into one
/// store at once, each from two tasks, searching now and then: every entry lands, with its
/// own id, and each process's search finds the other's entries.
#[test]
fn two_processes_write_at_once() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Created first, so the children only open it.
    rt.block_on(async {
        builder(url, &schema)
            .connect()
            .await
            .expect("connect")
            .close()
            .await;
    });
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--ignored", "--nocapture"])
                .env(CHILD_ENV, name)
                .env(CHILD_URL_ENV, url)
                .env(CHILD_SCHEMA_ENV, schema.name())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for mut child in children {
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let output = child.wait_with_output().expect("output");
                assert!(
                    status.success(),
                    "child failed: {}\n{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("a child did not finish within 120 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    rt.block_on(async {
        let store = builder(url, &schema).connect().await.expect("connect");
        assert_eq!(store.count().await.expect("count"), 2 * PER_PROCESS as u64);
        for name in ["a", "b"] {
            let tagged = store.by_tags(&[Tag::from(name)]).await.expect("by_tags");
            assert_eq!(tagged.len(), PER_PROCESS, "process {name}");
        }
        store.close().await;
    });
}

/// The writer process of [`two_processes_write_at_once`]; does nothing when run otherwise.
#[test]
#[ignore = "run by two_processes_write_at_once in a child process"]
fn child_writer() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    let url = std::env::var(CHILD_URL_ENV).expect("url");
    let schema = std::env::var(CHILD_SCHEMA_ENV).expect("schema");
    let other = if name == "a" { "b" } else { "a" };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = PostgresBackend::builder(&url)
            .schema(&schema)
            .connect()
            .await
            .expect("connect");
        let tasks: Vec<_> = (0..2)
            .map(|t| {
                let store = store.clone();
                let name = name.clone();
                tokio::spawn(async move {
                    for i in 0..PER_PROCESS / 2 {
                        let content = format!("process {name} task {t} entry {i}");
                        store
                            .store(memory(&content, &[&name]))
                            .await
                            .expect("store");
                        if i % 10 == 0 {
                            store.search(&content, 3).await.expect("search");
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        // The other process may still be writing: its entries show up by the end.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let theirs = store.by_tags(&[Tag::from(other)]).await.expect("by_tags");
            if theirs.len() == PER_PROCESS {
                let hits = store
                    .search_with(
                        &format!("process {other} task 1 entry 7"),
                        1,
                        &SearchOptions::new().tag(other),
                    )
                    .await
                    .expect("search");
                assert_eq!(hits.len(), 1, "finds the other process's entries");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the other process's entries never appeared"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("done");
    });
}

/// Large enough for `store_batch`'s `COPY` path, and for rebuilding the HNSW index when
/// loaded into a store no larger than it (see `REBUILD_MIN_ROWS` in `src/postgres/write.rs`).
const BULK: usize = 2_000;

/// Distinct memories with 0–2 tags (some repeated, to be normalized) and varied contexts.
fn bulk_memories(n: usize, prefix: &str) -> Vec<NewMemory> {
    (0..n)
        .map(|i| {
            let tags: Vec<Tag> = match i % 4 {
                0 => Vec::new(),
                1 => vec![Tag::from(format!("g{}", i % 7))],
                2 => vec![Tag::from("both"), Tag::from(format!("g{}", i % 5))],
                _ => vec![Tag::from("Dup"), Tag::from("dup")],
            };
            NewMemory {
                content: format!(
                    "{prefix} {i}: rotate key {} on host {} before the {} deploy",
                    i % 37,
                    i % 53,
                    ["staging", "production", "canary"][i % 3]
                ),
                context: format!("ticket {} — ünïcode ✓", i % 11),
                tags,
            }
        })
        .collect()
}

/// The OID of the store's HNSW index, if it exists (and is valid).
async fn hnsw_index(admin: &mut PgConnection, schema: &str) -> Option<u32> {
    let row: Option<(sqlx::postgres::types::Oid,)> = sqlx::query_as(
        "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_index i ON i.indexrelid = c.oid \
         WHERE n.nspname = $1 AND c.relname = 'embeddings_hnsw' AND i.indisvalid",
    )
    .bind(schema)
    .fetch_optional(&mut *admin)
    .await
    .expect("index lookup");
    row.map(|(oid,)| oid.0)
}

/// Row counts of the store's three tables.
async fn table_counts(admin: &mut PgConnection, schema: &str) -> (i64, i64, i64) {
    sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM \"{schema}\".entries), \
                (SELECT count(*) FROM \"{schema}\".embeddings), \
                (SELECT count(*) FROM \"{schema}\".entry_tags)"
    ))
    .fetch_one(&mut *admin)
    .await
    .expect("counts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_loaded_by_copy_equals_the_same_batch_stored_one_by_one() {
    let Some(url) = server_url() else { return };
    let clock = Arc::new(agent_memory::ManualClock::at_unix_seconds(1_700_000_000));
    let (bulk_schema, single_schema) = (TestSchema::new(url), TestSchema::new(url));
    let open = |schema: &TestSchema| builder(url, schema).clock(clock.clone()).connect();
    let bulk = open(&bulk_schema).await.expect("connect");
    let single = open(&single_schema).await.expect("connect");
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let memories = bulk_memories(BULK, "runbook");

    let before = hnsw_index(&mut admin, bulk_schema.name()).await;
    assert!(before.is_some(), "a new store has its index");
    let bulk_ids = bulk.store_batch(memories.clone()).await.expect("bulk load");
    let after = hnsw_index(&mut admin, bulk_schema.name()).await;
    assert!(
        after.is_some() && after != before,
        "the load into an empty store built the index again: {before:?} → {after:?}"
    );
    let mut single_ids = Vec::new();
    for memory in &memories {
        single_ids.push(single.store(memory.clone()).await.expect("store"));
    }
    assert_eq!(bulk_ids, single_ids, "the same ids, in input order");
    assert_eq!(bulk_ids.first(), Some(&MemoryId::from("1")));

    // Everything stored alike: texts, normalized tags, times, access counts.
    let listed = bulk.recent(usize::MAX).await.expect("recent");
    assert_eq!(listed.len(), BULK);
    assert_eq!(listed, single.recent(usize::MAX).await.expect("recent"));
    assert_eq!(
        bulk.by_tags(&[Tag::from("both")]).await.expect("by_tags"),
        single.by_tags(&[Tag::from("both")]).await.expect("by_tags")
    );
    assert_eq!(
        table_counts(&mut admin, bulk_schema.name()).await,
        table_counts(&mut admin, single_schema.name()).await
    );
    assert!(
        support::problems(url, bulk_schema.name())
            .await
            .expect("check")
            .is_empty()
    );

    // The same rankings and scores (exact vector search: the two HNSW graphs differ, built
    // at once or grown one by one), and the index finds each entry by its own text.
    let exact = SearchOptions::new().exact(true);
    for i in (0..BULK).step_by(97) {
        let query = &memories[i].content;
        let from_bulk = bulk
            .search_candidates_with(query, 10, &exact)
            .await
            .expect("search");
        let from_single = single
            .search_candidates_with(query, 10, &exact)
            .await
            .expect("search");
        assert_eq!(from_bulk.len(), 10);
        assert_eq!(from_bulk, from_single, "query {i}");
    }
    for i in (0..BULK).step_by(97) {
        let query = &memories[i].content;
        let hits = bulk.search(query, 5).await.expect("indexed search");
        assert_eq!(hits[0].entry.id, bulk_ids[i], "query {i}");
        assert_eq!(hits[0].entry.content, *query);
    }

    // A second batch as large as the store: rebuilt again, over old and new vectors.
    let more = bulk_memories(BULK, "checklist");
    let more_ids = bulk.store_batch(more.clone()).await.expect("second load");
    assert_eq!(more_ids.first(), Some(&MemoryId((BULK + 1).to_string())));
    let again = hnsw_index(&mut admin, bulk_schema.name()).await;
    assert!(again.is_some() && again != after, "rebuilt again");
    assert_eq!(bulk.count().await.expect("count"), 2 * BULK as u64);
    for i in [0, BULK / 2, BULK - 1] {
        let hits = bulk.search(&more[i].content, 3).await.expect("search");
        assert_eq!(hits[0].entry.id, more_ids[i]);
        let hits = bulk.search(&memories[i].content, 3).await.expect("search");
        assert_eq!(hits[0].entry.id, bulk_ids[i]);
    }

    // A batch smaller than the store goes into the existing index.
    let small = bulk_memories(COPY_ONLY, "note");
    let small_ids = bulk.store_batch(small.clone()).await.expect("third load");
    assert_eq!(hnsw_index(&mut admin, bulk_schema.name()).await, again);
    let hits = bulk.search(&small[5].content, 3).await.expect("search");
    assert_eq!(hits[0].entry.id, small_ids[5]);
    admin.close().await.expect("close");
}

/// A `COPY` batch smaller than the store it goes into (which keeps its index).
const COPY_ONLY: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_copy_leaves_nothing_half_written() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let name = schema.name();
    let store = builder(url, &schema).connect().await.expect("connect");
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let kept = store
        .store_batch(bulk_memories(1_500, "kept"))
        .await
        .expect("first load");
    let index = hnsw_index(&mut admin, name).await;
    let counts = table_counts(&mut admin, name).await;
    let unchanged = |what: &'static str| {
        let (store, name, index, counts) = (store.clone(), name.to_owned(), index, counts);
        async move {
            let mut admin = PgConnection::connect(url).await.expect("connect");
            assert_eq!(table_counts(&mut admin, &name).await, counts, "{what}");
            assert_eq!(hnsw_index(&mut admin, &name).await, index, "{what}");
            assert_eq!(store.count().await.expect("count"), 1_500, "{what}");
            let probe = &bulk_memories(1_500, "kept")[700].content;
            let hits = store.search(probe, 1).await.expect("search");
            assert_eq!(hits[0].entry.id, MemoryId::from("701"), "{what}");
            admin.close().await.expect("close");
        }
    };

    // A row the server refuses in the last COPY (the tags), after the entries and vectors
    // were copied and the index dropped: all of it rolls back.
    sqlx::query(&format!(
        "ALTER TABLE \"{name}\".entry_tags ADD CONSTRAINT poison CHECK (tag <> 'poison')"
    ))
    .execute(&mut admin)
    .await
    .expect("constraint");
    let mut batch = bulk_memories(BULK, "refused");
    batch[BULK - 1].tags.push(Tag::from("poison"));
    let error = store.store_batch(batch).await.expect_err("a refused tag");
    assert!(matches!(error, MemoryError::Storage { .. }), "{error:?}");
    let cause = cause_of::<sqlx::Error>(&error).and_then(|e| e.as_database_error());
    assert_eq!(
        cause.and_then(|e| e.code()).as_deref(),
        Some("23514"),
        "{error:?}"
    );
    unchanged("after a refused row").await;
    sqlx::query(&format!(
        "ALTER TABLE \"{name}\".entry_tags DROP CONSTRAINT poison"
    ))
    .execute(&mut admin)
    .await
    .expect("constraint");

    // The connection killed in the middle of the load (blocked on the tags' table, so the
    // entries and vectors were already copied).
    let mut locker = PgConnection::connect(url).await.expect("connect");
    let (locker_pid,): (i32,) = sqlx::query_as("SELECT pg_backend_pid()")
        .fetch_one(&mut locker)
        .await
        .expect("pid");
    sqlx::query("BEGIN")
        .execute(&mut locker)
        .await
        .expect("begin");
    sqlx::query(&format!(
        "LOCK TABLE \"{name}\".entry_tags IN ACCESS EXCLUSIVE MODE"
    ))
    .execute(&mut locker)
    .await
    .expect("lock");
    let load = tokio::spawn({
        let store = store.clone();
        async move { store.store_batch(bulk_memories(BULK, "killed")).await }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let victim = loop {
        let blocked: Option<(i32,)> = sqlx::query_as(
            "SELECT pid FROM pg_stat_activity \
             WHERE query LIKE 'COPY entry_tags%' AND $1 = ANY(pg_blocking_pids(pid))",
        )
        .bind(locker_pid)
        .fetch_optional(&mut admin)
        .await
        .expect("activity");
        if let Some((pid,)) = blocked {
            break pid;
        }
        // A safety net against hanging forever, not a timing check.
        assert!(Instant::now() < deadline, "the load never reached the tags");
        assert!(!load.is_finished(), "the load ended before it was killed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (killed,): (bool,) = sqlx::query_as("SELECT pg_terminate_backend($1)")
        .bind(victim)
        .fetch_one(&mut admin)
        .await
        .expect("terminate");
    assert!(killed);
    let error = load
        .await
        .expect("no panic")
        .expect_err("its connection died");
    assert!(matches!(error, MemoryError::Storage { .. }), "{error:?}");
    sqlx::query("ROLLBACK")
        .execute(&mut locker)
        .await
        .expect("rollback");
    locker.close().await.expect("close");
    unchanged("after a killed connection").await;
    assert!(
        support::problems(url, name)
            .await
            .expect("check")
            .is_empty()
    );

    // Loads work again, with ids after every id drawn by the failed ones.
    let ids = store
        .store_batch(bulk_memories(BULK, "later"))
        .await
        .expect("a later load");
    assert!(ids.iter().all(|id| !kept.contains(id)));
    assert_eq!(store.count().await.expect("count"), (1_500 + BULK) as u64);
    admin.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_the_server_finds_the_wrong_dimension_for_stores_nothing() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let name = schema.name();
    let store = builder(url, &schema).connect().await.expect("connect");
    let mut admin = PgConnection::connect(url).await.expect("connect");
    // The column now takes 383 dimensions; the store still embeds 384. The server refuses
    // the first vector of the COPY, after the entries were copied.
    sqlx::query(&format!(
        "ALTER TABLE \"{name}\".embeddings ALTER COLUMN embedding TYPE vector(383)"
    ))
    .execute(&mut admin)
    .await
    .expect("alter");
    let error = store
        .store_batch(bulk_memories(BULK, "mismatch"))
        .await
        .expect_err("wrong dimension");
    assert!(matches!(error, MemoryError::Storage { .. }), "{error:?}");
    assert!(
        format!("{:?}", error.source()).contains("383"),
        "the cause names the dimension: {error:?}"
    );
    assert_eq!(table_counts(&mut admin, name).await, (0, 0, 0));
    assert!(hnsw_index(&mut admin, name).await.is_some(), "index kept");
    sqlx::query(&format!(
        "ALTER TABLE \"{name}\".embeddings ALTER COLUMN embedding TYPE vector(384)"
    ))
    .execute(&mut admin)
    .await
    .expect("alter back");
    let ids = store
        .store_batch(bulk_memories(BULK, "fine"))
        .await
        .expect("load");
    assert_eq!(ids.len(), BULK);
    assert_eq!(table_counts(&mut admin, name).await.0, BULK as i64);
    admin.close().await.expect("close");
}

/// The store's keyword postings, document counts and count of entries against its
/// entries' own search documents (see `support::problems`), after `stage`.
async fn assert_keywords_sound(url: &str, schema: &TestSchema, stage: &str) {
    let found = support::problems(url, schema.name())
        .await
        .expect("checking the store");
    assert!(found.is_empty(), "after {stage}: {found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyword_postings_follow_every_write() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema).connect().await.expect("connect");
    assert_keywords_sound(url, &schema, "opening an empty store").await;

    let loaded = store
        .store_batch(bulk_memories(COPY_ONLY + 200, "load"))
        .await
        .expect("copy load");
    assert_keywords_sound(url, &schema, "a load by COPY").await;
    store
        .store_batch(bulk_memories(20, "batch"))
        .await
        .expect("batch");
    let quoted = store
        .store(memory(
            r#"it's a\b o'neil "x" foo:bar a*b http://x.y/z?q=1"#,
            &[],
        ))
        .await
        .expect("store");
    let phrase = store
        .store(memory("the gauge read x²y at noon", &["gauge"]))
        .await
        .expect("store");
    for _ in 0..3 {
        store
            .store(memory("a duplicate note about the boiler", &[]))
            .await
            .expect("store");
    }
    assert_keywords_sound(url, &schema, "single stores and a small batch").await;

    for id in loaded.iter().step_by(7) {
        assert!(store.delete(id).await.expect("delete"));
    }
    assert!(store.delete(&quoted).await.expect("delete"));
    assert_keywords_sound(url, &schema, "deletes").await;

    let report = store
        .prune(&agent_op::PrunePolicy::new().merge_similarity(0.9999))
        .await
        .expect("prune by merging");
    assert!(report.merged >= 2, "{report:?}");
    let report = store
        .prune(&agent_op::PrunePolicy::new().max_entries(900))
        .await
        .expect("prune by count");
    assert!(report.removed > 0, "{report:?}");
    assert_keywords_sound(url, &schema, "prunes").await;
    assert_eq!(store.count().await.expect("count"), 900);
    // Words of deleted entries that no entry holds any more have no counts left after a
    // prune (the deleted `o'neil` entry held the only `neil`).
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let (zero, neil): (i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM (SELECT lexeme FROM \"{0}\".keyword_docs \
             GROUP BY lexeme HAVING sum(docs) = 0) z), \
             (SELECT count(*) FROM \"{0}\".keyword_docs WHERE lexeme = 'neil')",
        schema.name()
    ))
    .fetch_one(&mut admin)
    .await
    .expect("counts");
    assert_eq!((zero, neil), (0, 0));
    admin.close().await.expect("close");

    // A term PostgreSQL's parser splits into a phrase (`x`, `y`) is counted and ranked
    // through the entries' documents; a word is ranked from the postings.
    let hits = store
        .search_candidates_with("x²y", 5, &SearchOptions::new().tag("gauge"))
        .await
        .expect("phrase search");
    assert_eq!(hits.first().map(|c| &c.hit.entry.id), Some(&phrase));
    let hits = store.search("gauge noon", 3).await.expect("word search");
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&phrase));
    // Two terms of one lexeme: each counted and scored, as over the documents.
    let hits = store.search("Gauge gauge", 3).await.expect("word search");
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&phrase));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_from_before_keyword_postings_gets_them_when_opened() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema).connect().await.expect("connect");
    let ids = store
        .store_batch(bulk_memories(50, "old"))
        .await
        .expect("store");
    store.close().await;

    // Back to version 1 of the schema, entries kept.
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let s = format!("\"{}\"", schema.name());
    for statement in [
        format!("DROP TRIGGER entries_keywords_added ON {s}.entries"),
        format!("DROP TRIGGER entries_keywords_removed ON {s}.entries"),
        format!("DROP TABLE {s}.keyword_postings, {s}.keyword_docs, {s}.keyword_totals"),
        format!(
            "DROP FUNCTION {s}.memory_keywords_changed(), {s}.memory_keyword_rank(tsvector, text), \
             {s}.memory_single_lexeme(text), {s}.memory_lexeme_query(text), \
             {s}.memory_keyword_stripe()"
        ),
        format!("DROP FUNCTION {s}.memory_search_terms(text[])"),
        format!("DELETE FROM {s}._sqlx_migrations WHERE version IN (2, 3)"),
    ] {
        sqlx::query(&statement)
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let (left,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'keyword%'",
    )
    .bind(schema.name())
    .fetch_one(&mut admin)
    .await
    .expect("tables");
    assert_eq!(left, 0);
    admin.close().await.expect("close");

    let store = builder(url, &schema).connect().await.expect("reopen");
    assert_keywords_sound(url, &schema, "the migration").await;
    let hits = store.search("old 17: rotate", 1).await.expect("search");
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&ids[17]));
    store
        .store(memory("stored after the upgrade", &[]))
        .await
        .expect("store");
    assert_keywords_sound(url, &schema, "a store after the migration").await;
    store.close().await;
}

/// An embedder whose every vector is zero: a search's vector ranking is then empty (an
/// all-zero query is similar to nothing), so its hits are the keyword ranking alone.
struct Zeros;

impl agent_op::EmbeddingProvider for Zeros {
    fn model(&self) -> &str {
        "zeros-4"
    }

    fn dimensions(&self) -> usize {
        4
    }

    fn embed<'a>(
        &'a self,
        _text: &'a str,
    ) -> agent_op::BoxFuture<'a, Result<Vec<f32>, agent_op::EmbeddingError>> {
        Box::pin(async { Ok(vec![0.0; 4]) })
    }
}

/// The keyword ranking of `terms` computed the way it was before postings existed: every
/// term's document count through the GIN index, the terms rarest first (a store this small
/// has no stop words and stays within the budget), and `ts_rank × idf` summed over the
/// terms in SQL. Entry ids, best first, ties by id.
async fn ranking_over_documents(
    admin: &mut PgConnection,
    schema: &str,
    terms: &[&str],
) -> Vec<i64> {
    let s = format!("\"{schema}\"");
    let mut counted = Vec::new();
    for term in terms {
        let (docs,): (i64,) = sqlx::query_as(&format!(
            "SELECT count(*) FROM {s}.entries WHERE search @@ phraseto_tsquery('simple', $1)"
        ))
        .bind(term)
        .fetch_one(&mut *admin)
        .await
        .expect("count");
        if docs > 0 {
            counted.push((docs, term.to_string()));
        }
    }
    counted.sort_by_key(|(docs, _)| *docs);
    let (all,): (i64,) = sqlx::query_as(&format!("SELECT count(*) FROM {s}.entries"))
        .fetch_one(&mut *admin)
        .await
        .expect("count");
    let idf: Vec<f64> = counted
        .iter()
        .map(|(docs, _)| {
            let (n, all) = (*docs as f64, all as f64);
            (1.0 + (all - n + 0.5) / (n + 0.5)).ln()
        })
        .collect();
    let chosen: Vec<String> = counted.into_iter().map(|(_, term)| term).collect();
    let rows: Vec<(i64,)> = sqlx::query_as(&format!(
        "WITH q AS MATERIALIZED ( \
             SELECT phraseto_tsquery('simple', w.term) AS query, w.idf \
             FROM unnest($1::text[], $2::float8[]) AS w(term, idf)) \
         SELECT e.id FROM {s}.entries e \
         WHERE e.search @@ (SELECT {s}.memory_any_query(query) FROM q) \
         ORDER BY (SELECT sum(q.idf * ts_rank('{{0.1, 0.2, 0.5, 1.0}}', e.search, q.query, 1)) \
             FROM q) DESC, e.id"
    ))
    .bind(&chosen)
    .bind(&idf)
    .fetch_all(&mut *admin)
    .await
    .expect("ranking");
    rows.into_iter().map(|(id,)| id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyword_ranking_from_postings_equals_ts_rank_over_documents() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = builder(url, &schema)
        .embedder(Arc::new(Zeros))
        .connect()
        .await
        .expect("connect");
    // Few words, often repeated, in content and context: entries share several query words
    // at different weights and lengths, and some tie exactly.
    let words = ["amber", "basil", "cedar", "dune", "ember", "fjord", "grove"];
    let mut seed = 0x2545_f491_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut memories = Vec::new();
    for _ in 0..45 {
        let (content_len, context_len) = (2 + next(6), next(4));
        let mut sentence = |len: usize| {
            (0..len)
                .map(|_| words[next(words.len())])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (content, context) = (sentence(content_len), sentence(context_len));
        memories.push(NewMemory {
            content,
            context,
            tags: Vec::new(),
        });
    }
    store.store_batch(memories).await.expect("store");
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let queries: [&[&str]; 5] = [
        &["amber", "basil", "cedar"],
        &["dune", "ember", "fjord", "grove", "amber"],
        &["cedar", "Cedar", "grove"],
        &["basil", "nowhere", "fjord", "ember"],
        &["grove"],
    ];
    for terms in queries {
        let expected = ranking_over_documents(&mut admin, schema.name(), terms).await;
        let k = expected.len().min(20);
        assert!(
            k >= 5,
            "{terms:?} matches too little to compare: {expected:?}"
        );
        let hits = store
            .search_candidates(&terms.join(" "), k)
            .await
            .expect("search");
        let ids: Vec<i64> = hits
            .iter()
            .map(|c| c.hit.entry.id.0.parse().expect("numeric id"))
            .collect();
        assert_eq!(ids, expected[..k], "{terms:?}");
    }
    admin.close().await.expect("close");
    store.close().await;
}
