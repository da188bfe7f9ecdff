//! Tests that look at the server's side of the backend's statements, which the public API
//! cannot show (see `tests/postgres.rs` and the conformance suite for the rest).

#[path = "../../tests/support/postgres.rs"]
#[allow(dead_code)] // the integration tests use the rest of it
mod support;

use agent_op::{MemoryBackend, NewMemory};

use super::PostgresBackend;
use support::{TestSchema, server_url};

/// A search's statements are planned once, not at every search: each one keeps a generic
/// plan of its prepared statement after PostgreSQL's five custom plans. The vector ranking
/// planned anew every time while its limit was a bound value (0.1 ms of a search), and the
/// keyword read did while its terms came from `unnest` (see `docs/MEMORY.md`).
#[tokio::test]
async fn search_statements_keep_generic_plans() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    // One connection, so every statement is prepared on the one whose plans are read.
    let store = PostgresBackend::builder(url)
        .schema(schema.name())
        .max_connections(1)
        .connect()
        .await
        .expect("connect");
    // More entries than a search's candidates, so the index scan is never redone exactly.
    let words = ["harbour", "lantern", "quarry", "meadow", "pylon", "orchard"];
    let memories: Vec<NewMemory> = (0..80)
        .map(|i| NewMemory {
            content: format!("{} {} note {i}", words[i % 6], words[(i / 6) % 6]),
            context: "test".to_owned(),
            tags: Vec::new(),
        })
        .collect();
    store.store_batch(memories).await.expect("store");
    for i in 0..12 {
        let query = format!("{} {} memo{i}", words[i % 6], words[(i + 1) % 6]);
        let hits = store.search(&query, 10).await.expect("search");
        assert_eq!(hits.len(), 10);
    }
    let plans: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            .fetch_all(&store.inner.pool)
            .await
            .expect("prepared statements");
    let plans_of = |what: &str, starts: &str, excludes: &str| {
        let found: Vec<&(String, i64, i64)> = plans
            .iter()
            .filter(|(sql, ..)| sql.starts_with(starts) && !sql.contains(excludes))
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{what}: one prepared statement, got {plans:?}"
        );
        let (_, generic, custom) = found[0];
        assert!(
            *generic >= 7 && *custom <= 5,
            "{what}: {generic} generic and {custom} custom plans in 12 searches"
        );
    };
    plans_of("vector ranking", "SELECT v.entry_id", "+ 0");
    plans_of("keyword read", "WITH t AS MATERIALIZED", "\u{0}");
    plans_of("recall", "WITH locked AS MATERIALIZED", "\u{0}");
    store.close().await;
}
