//! Every public async function and future-returning method of this crate runs inside
//! `tokio::spawn`, which needs its future to be `Send + 'static`.
//!
//! A future that holds a borrow of a sqlx executor across an await in a generic position
//! can fail that check with "implementation of `Executor` is not general enough", and only
//! where a caller spawns it: the crate itself compiles either way. So this file spawns each
//! of them (a service opening a store per request does exactly this), and runs them against
//! a temporary SQLite file, the in-memory backend and, with the `postgres` feature and a
//! test server, PostgreSQL. That it compiles is the test; running checks the calls work.

use std::path::PathBuf;
use std::sync::Arc;

use agent_memory::conformance::{self, Fixture};
use agent_memory::{
    ContextWindow, HashingEmbedder, InMemoryBackend, SqliteBackend, ZeroEmbedder, build_context,
    build_context_at,
};
use agent_op::{
    EmbeddingProvider, MemoryBackend, MemoryId, NewMemory, PrunePolicy, SearchOptions, Tag,
};
use tokio::task::JoinHandle;

fn memory(content: &str) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: "spawned".to_owned(),
        tags: vec![Tag::from("t")],
    }
}

/// Waits for a spawned task; a panic inside it fails the test with its message.
async fn joined<T>(task: JoinHandle<T>) -> T {
    match task.await {
        Ok(out) => out,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("a spawned task failed: {e}"),
    }
}

/// Each `MemoryBackend` method of `backend` in a task of its own.
async fn every_trait_method(backend: Arc<dyn MemoryBackend>) {
    let b = backend.clone();
    let id: MemoryId = joined(tokio::spawn(
        async move { b.store(memory("alpha beta")).await },
    ))
    .await
    .expect("store");
    let b = backend.clone();
    let hits = joined(tokio::spawn(async move { b.search("alpha", 3).await }))
        .await
        .expect("search");
    assert_eq!(hits[0].entry.id, id);
    let b = backend.clone();
    joined(tokio::spawn(async move {
        b.search_with("alpha", 3, &SearchOptions::new().tag("t"))
            .await
    }))
    .await
    .expect("search_with");
    let b = backend.clone();
    joined(tokio::spawn(async move {
        b.search_candidates("alpha", 3).await
    }))
    .await
    .expect("search_candidates");
    let b = backend.clone();
    joined(tokio::spawn(async move {
        b.search_candidates_with("alpha", 3, &SearchOptions::new().exact(true))
            .await
    }))
    .await
    .expect("search_candidates_with");
    let b = backend.clone();
    let ids = vec![id.clone()];
    joined(tokio::spawn(async move { b.record_access(&ids).await }))
        .await
        .expect("record_access");
    let b = backend.clone();
    joined(tokio::spawn(async move { b.recent(5).await }))
        .await
        .expect("recent");
    let b = backend.clone();
    joined(tokio::spawn(
        async move { b.by_tags(&[Tag::from("t")]).await },
    ))
    .await
    .expect("by_tags");
    let (b, got) = (backend.clone(), id.clone());
    joined(tokio::spawn(async move { b.get(&got).await }))
        .await
        .expect("get");
    let b = backend.clone();
    joined(tokio::spawn(async move { b.count().await }))
        .await
        .expect("count");
    let b = backend.clone();
    joined(tokio::spawn(async move {
        b.prune(&PrunePolicy::new().max_entries(100).merge_similarity(0.99))
            .await
    }))
    .await
    .expect("prune");
    let b = backend.clone();
    joined(tokio::spawn(async move {
        build_context(b.as_ref(), &ContextWindow::new(100), "alpha").await
    }))
    .await
    .expect("build_context");
    let b = backend.clone();
    joined(tokio::spawn(async move {
        build_context_at(
            b.as_ref(),
            &ContextWindow::new(100),
            "alpha",
            chrono::Utc::now(),
        )
        .await
    }))
    .await
    .expect("build_context_at");
    let b = backend.clone();
    let deleted = joined(tokio::spawn(async move { b.delete(&id).await }))
        .await
        .expect("delete");
    assert!(deleted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_functions_run_in_spawned_tasks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path: PathBuf = dir.path().join("m.db");
    let opened = path.clone();
    let backend = joined(tokio::spawn(
        async move { SqliteBackend::open(&opened).await },
    ))
    .await
    .expect("open");
    let opened = path.clone();
    let built = joined(tokio::spawn(async move {
        SqliteBackend::builder(&opened)
            .embedder(Arc::new(HashingEmbedder::new()))
            .open()
            .await
    }))
    .await
    .expect("builder open");
    every_trait_method(Arc::new(backend.clone())).await;

    let b = backend.clone();
    let ids = joined(tokio::spawn(async move {
        b.store_batch(vec![memory("one"), memory("two")]).await
    }))
    .await
    .expect("store_batch");
    assert_eq!(ids.len(), 2);
    let b = backend.clone();
    let vector = HashingEmbedder::new().embed_now("one");
    joined(tokio::spawn(async move {
        b.nearest(&vector, 2, &SearchOptions::new()).await
    }))
    .await
    .expect("nearest");
    let b = backend.clone();
    joined(tokio::spawn(async move { b.index_status().await }))
        .await
        .expect("index_status");
    let b = backend.clone();
    joined(tokio::spawn(async move { b.corrupt_embeddings().await }))
        .await
        .expect("corrupt_embeddings");
    let b = backend.clone();
    let report = joined(tokio::spawn(async move { b.integrity_check().await }))
        .await
        .expect("integrity_check");
    assert!(report.is_sound(), "{report:?}");
    joined(tokio::spawn(async move { built.close().await })).await;
    joined(tokio::spawn(async move { backend.close().await })).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_functions_and_embedders_run_in_spawned_tasks() {
    let backend = InMemoryBackend::new();
    every_trait_method(Arc::new(backend.clone())).await;
    let b = backend.clone();
    joined(tokio::spawn(async move {
        b.store_batch(vec![memory("one"), memory("two")]).await
    }))
    .await
    .expect("store_batch");
    let b = backend.clone();
    let vector = HashingEmbedder::new().embed_now("one");
    joined(tokio::spawn(async move {
        b.nearest(&vector, 2, &SearchOptions::new()).await
    }))
    .await
    .expect("nearest");

    let embedders: Vec<Arc<dyn EmbeddingProvider>> = vec![
        Arc::new(HashingEmbedder::new()),
        Arc::new(ZeroEmbedder::new(8)),
        Arc::new(conformance::BiasedEmbedder),
        Arc::new(conformance::ClusteredEmbedder),
    ];
    for embedder in embedders {
        let e = embedder.clone();
        joined(tokio::spawn(async move { e.embed("a text").await }))
            .await
            .expect("embed");
        joined(tokio::spawn(async move {
            embedder
                .embed_batch(&["a".to_owned(), "b".to_owned()])
                .await
        }))
        .await
        .expect("embed_batch");
    }
}

/// The conformance suite's public checks and the fixture's methods, spawned (the suite is
/// run inside `#[tokio::test]` functions by the macro, but a backend's own harness may run
/// it in tasks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_functions_run_in_spawned_tasks() {
    let factory = |embedder: Arc<dyn EmbeddingProvider>, clock: Arc<dyn agent_memory::Clock>| async move {
        let backend = InMemoryBackend::builder()
            .embedder(embedder)
            .clock(clock)
            .build()?;
        let bulk = backend.clone();
        Ok(Fixture::new(backend)
            .with_bulk_store(move |memories| {
                let bulk = bulk.clone();
                async move { bulk.store_batch(memories).await }
            })
            .with_settle(|| async { Ok(()) })
            .with_integrity_check(|| async { Ok(Vec::new()) }))
    };
    joined(tokio::spawn(async move {
        conformance::store_and_get(&factory).await;
        conformance::delete_removes_everywhere(&factory).await;
    }))
    .await;
    // Every other check, compiled inside a spawned task (running them all is what
    // `tests/conformance.rs` does).
    let _compiled_only = || {
        tokio::spawn(async move {
            conformance::run_all(&factory).await;
            conformance::search_ranks_exact_text_first(&factory).await;
            conformance::search_updates_access_stats(&factory).await;
            conformance::candidates_are_recalled_only_when_recorded(&factory).await;
            conformance::recent_is_newest_first(&factory).await;
            conformance::by_tags_requires_every_tag(&factory).await;
            conformance::filtered_search_applies_inside_the_search(&factory).await;
            conformance::prune_max_entries_evicts_least_used(&factory).await;
            conformance::prune_max_age_uses_access_time(&factory).await;
            conformance::prune_merges_near_duplicates(&factory).await;
            conformance::prune_merges_identical_copies_at_one(&factory).await;
            conformance::bad_input_is_refused_or_harmless(&factory).await;
            conformance::bad_vectors_are_refused(&factory).await;
            conformance::concurrent_writers_all_land(&factory).await;
            conformance::cancelled_operations_leave_the_store_usable(&factory).await;
            conformance::search_is_complete_under_churn(&factory).await;
            conformance::filtered_search_keeps_its_recall(&factory).await;
        })
    };
    let fixture = joined(tokio::spawn(async move {
        let fixture = agent_memory::conformance::Factory::make(
            &factory,
            Arc::new(HashingEmbedder::new()),
            Arc::new(agent_memory::SystemClock),
        )
        .await
        .expect("fixture");
        fixture.settle().await.expect("settle");
        fixture
            .bulk_store(vec![memory("bulk")])
            .await
            .expect("a bulk store")
            .expect("bulk store");
        fixture.integrity_check().await.expect("integrity");
        fixture
    }))
    .await;
    assert_eq!(fixture.backend().count().await.expect("count"), 1);
    let polled = joined(tokio::spawn(async move {
        let store = fixture.backend().store(memory("polled"));
        conformance::cancellation::poll_then_drop(store, 1_000).await
    }))
    .await;
    assert!(polled.is_some_and(|stored| stored.is_ok()));
    let spaced = joined(tokio::spawn(async {
        conformance::cancellation::poll_spaced_then_drop(
            async { 7 },
            3,
            std::time::Duration::from_micros(10),
        )
        .await
    }))
    .await;
    assert_eq!(spaced, Some(7));
}

#[cfg(feature = "postgres")]
#[path = "support/postgres.rs"]
#[allow(dead_code)] // shared with the other PostgreSQL tests; this one uses a few parts
mod pg_support;

/// With the `postgres` feature: the PostgreSQL backend's own async functions, spawned (and
/// run when a test server is available).
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_functions_run_in_spawned_tasks() {
    use agent_memory::PostgresBackend;

    let Some(url) = pg_support::server_url() else {
        return;
    };
    let schema = pg_support::TestSchema::new(url);
    let name = schema.name().to_owned();
    let backend = joined(tokio::spawn(async move {
        PostgresBackend::builder(url)
            .schema(&name)
            .max_connections(4)
            .connect()
            .await
    }))
    .await
    .expect("connect");
    every_trait_method(Arc::new(backend.clone())).await;
    let b = backend.clone();
    joined(tokio::spawn(async move {
        b.store_batch(vec![memory("one"), memory("two")]).await
    }))
    .await
    .expect("store_batch");
    joined(tokio::spawn(async move { backend.close().await })).await;
    // `connect(url)` uses the default schema: spawned, not run, so it leaves nothing
    // behind on the shared server.
    let _compiled_only = || tokio::spawn(async move { PostgresBackend::connect(url).await });
    drop(schema);
}
