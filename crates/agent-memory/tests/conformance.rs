//! The shared conformance suite, instantiated for every backend of this crate (PostgreSQL
//! with the `postgres` feature).

use std::time::Duration;

use agent_memory::{InMemoryBackend, SqliteBackend};
use agent_op::MemoryError;

/// Until the in-memory backend's graph holds every entry.
async fn indexed(backend: InMemoryBackend) -> Result<(), MemoryError> {
    while backend.index_status().pending > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Until the SQLite handle's graph holds every entry.
async fn sqlite_indexed(backend: SqliteBackend) -> Result<(), MemoryError> {
    while backend.index_status().await?.pending > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

mod in_memory {
    use agent_memory::InMemoryBackend;
    use agent_memory::conformance::Fixture;

    agent_memory::memory_conformance_tests!(|embedder, clock| async move {
        let backend = InMemoryBackend::builder()
            .embedder(embedder)
            .clock(clock)
            .build()?;
        // A clone shares the store: the in-memory backend's "second handle".
        let bulk = backend.clone();
        Ok(Fixture::new(backend.clone())
            .with_second_handle(backend.clone())
            .with_bulk_store(move |memories| {
                let bulk = bulk.clone();
                async move { bulk.store_batch(memories).await }
            })
            .with_settle(move || super::indexed(backend.clone())))
    });
}

mod sqlite {
    use std::sync::Arc;

    use agent_memory::conformance::Fixture;
    use agent_memory::{Clock, SqliteBackend};
    use agent_op::{EmbeddingProvider, MemoryError};

    agent_memory::memory_conformance_tests!(
        |embedder: Arc<dyn EmbeddingProvider>, clock: Arc<dyn Clock>| async move {
            let dir = tempfile::tempdir()
                .map_err(|e| MemoryError::storage("creating a temp dir", None, e))?;
            let path = dir.path().join("memory.db");
            let backend = SqliteBackend::builder(&path)
                .embedder(embedder.clone())
                .clock(clock.clone())
                .open()
                .await?;
            // Its own connections and its own pool: what another process would see.
            let second = SqliteBackend::builder(&path)
                .embedder(embedder)
                .clock(clock)
                .open()
                .await?;
            let checked = backend.clone();
            let (settled, bulk) = (backend.clone(), backend.clone());
            Ok(Fixture::new(backend)
                .with_second_handle(second)
                .with_settle(move || super::sqlite_indexed(settled.clone()))
                .with_bulk_store(move |memories| {
                    let bulk = bulk.clone();
                    async move { bulk.store_batch(memories).await }
                })
                .with_integrity_check(move || {
                    let checked = checked.clone();
                    async move {
                        let report = checked.integrity_check().await?;
                        Ok(report.problems.iter().map(ToString::to_string).collect())
                    }
                })
                .with_guard(dir))
        }
    );
}

/// Both backends again with the approximate index from the first entry on, so every check
/// also holds when searches walk the graph (and its not-yet-indexed tail).
mod in_memory_with_graph {
    use agent_memory::conformance::Fixture;
    use agent_memory::{AnnConfig, InMemoryBackend};

    agent_memory::memory_conformance_tests!(|embedder, clock| async move {
        let backend = InMemoryBackend::builder()
            .embedder(embedder)
            .clock(clock)
            .ann(AnnConfig::new().min_entries(1))
            .build()?;
        let bulk = backend.clone();
        Ok(Fixture::new(backend.clone())
            .with_second_handle(backend.clone())
            .with_bulk_store(move |memories| {
                let bulk = bulk.clone();
                async move { bulk.store_batch(memories).await }
            })
            .with_settle(move || super::indexed(backend.clone())))
    });
}

mod sqlite_with_graph {
    use std::sync::Arc;

    use agent_memory::conformance::Fixture;
    use agent_memory::{AnnConfig, Clock, SqliteBackend};
    use agent_op::{EmbeddingProvider, MemoryError};

    agent_memory::memory_conformance_tests!(
        |embedder: Arc<dyn EmbeddingProvider>, clock: Arc<dyn Clock>| async move {
            let dir = tempfile::tempdir()
                .map_err(|e| MemoryError::storage("creating a temp dir", None, e))?;
            let path = dir.path().join("memory.db");
            let open = |embedder, clock| {
                SqliteBackend::builder(&path)
                    .embedder(embedder)
                    .clock(clock)
                    .ann(AnnConfig::new().min_entries(1))
                    .open()
            };
            let backend = open(embedder.clone(), clock.clone()).await?;
            let second = open(embedder, clock).await?;
            let (settled, bulk) = (backend.clone(), backend.clone());
            Ok(Fixture::new(backend)
                .with_second_handle(second)
                .with_settle(move || super::sqlite_indexed(settled.clone()))
                .with_bulk_store(move |memories| {
                    let bulk = bulk.clone();
                    async move { bulk.store_batch(memories).await }
                })
                .with_guard(dir))
        }
    );
}

#[cfg(feature = "postgres")]
#[path = "support/postgres.rs"]
mod pg_support;

/// Each test gets a schema of its own on the test server (see `support/postgres.rs`), and
/// two handles with their own pools on it.
#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;

    use agent_memory::conformance::Fixture;
    use agent_memory::{Clock, PostgresBackend};
    use agent_op::EmbeddingProvider;

    use super::pg_support::{TestSchema, problems, server_url};

    agent_memory::memory_conformance_tests!({
        let Some(url) = server_url() else {
            return;
        };
        move |embedder: Arc<dyn EmbeddingProvider>, clock: Arc<dyn Clock>| async move {
            let schema = TestSchema::new(url);
            let open = || {
                PostgresBackend::builder(url)
                    .schema(schema.name())
                    .embedder(embedder.clone())
                    .clock(clock.clone())
                    .max_connections(4)
                    .connect()
            };
            let backend = open().await?;
            // Its own pool: what another process would see.
            let second = open().await?;
            let name = schema.name().to_owned();
            Ok(Fixture::new(backend)
                .with_second_handle(second)
                .with_integrity_check(move || {
                    let name = name.clone();
                    async move { problems(url, &name).await }
                })
                .with_guard(schema))
        }
    });
}
