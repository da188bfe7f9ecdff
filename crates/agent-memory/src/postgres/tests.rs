//! Tests that look at the server's side of the backend's statements, which the public API
//! cannot show (see `tests/postgres.rs` and the conformance suite for the rest).

#[path = "../../tests/support/postgres.rs"]
#[allow(dead_code)] // the integration tests use the rest of it
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_op::{MemoryBackend, MemoryError, NewMemory};
use sqlx::{Connection, PgConnection};

use super::PostgresBackend;
use super::lease::{Lease, PING_AFTER_IDLE};
use super::retry::statement;
use support::{TestSchema, server_url};

/// A search's statements are planned once, not at every search: each one keeps a generic
/// plan of its prepared statement after PostgreSQL's five custom plans. The vector ranking
/// planned anew every time while its limit was a bound value (0.1 ms of a search), and the
/// keyword read did while its terms came from `unnest` (see `docs/MEMORY.md`). (The recall
/// that looks at the spares, run only when a hit was deleted meanwhile, is not run here.)
#[tokio::test]
async fn search_statements_keep_generic_plans() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    // One connection, so every statement is prepared on the one whose plans are read.
    let store = store_with(url, &schema, 1).await;
    // More entries than a search's candidates, so the index scan is never redone exactly.
    let words = ["harbour", "lantern", "quarry", "meadow", "pylon", "orchard"];
    let memories: Vec<NewMemory> = (0..80)
        .map(|i| memory(&format!("{} {} note {i}", words[i % 6], words[(i / 6) % 6])))
        .collect();
    store.store_batch(memories).await.expect("store");
    for i in 0..12 {
        let query = format!("{} {} memo{i}", words[i % 6], words[(i + 1) % 6]);
        let hits = store.search(&query, 10).await.expect("search");
        assert_eq!(hits.len(), 10);
    }
    let plans: Vec<(String, i64, i64)> = statement!(store, "reading plans", |conn| {
        sqlx::query_as("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
            .fetch_all(&mut *conn)
            .await?
    })
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
    plans_of("recall", "WITH locked AS MATERIALIZED", "chosen");
    store.close().await;
}

/// A store on the test server with `max_connections` connections, in a new schema.
async fn store_with(url: &str, schema: &TestSchema, max_connections: u32) -> PostgresBackend {
    PostgresBackend::builder(url)
        .schema(schema.name())
        .max_connections(max_connections)
        // Far below the 30 s default: an operation starved of a connection fails the test
        // soon.
        .acquire_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect")
}

fn memory(content: &str) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: "test".to_owned(),
        tags: Vec::new(),
    }
}

/// A finished operation's connection serves the next one without going back to the pool.
#[tokio::test]
async fn operations_take_the_connections_earlier_ones_finished_with() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 10).await;
    store
        .store(memory("warm harbour lantern"))
        .await
        .expect("store");
    let before = store.inner.warm.served.load(Ordering::Relaxed);
    for _ in 0..10 {
        store.search("harbour", 5).await.expect("search");
    }
    // Three leases a search (vectors, keywords, recall); the two halves run at once, so a
    // search may take one connection from the pool while the other is warm.
    let served = store.inner.warm.served.load(Ordering::Relaxed) - before;
    assert!(served >= 25, "{served} of 30 leases were served warm");
    store.close().await;
}

/// Every connection checked out, some of them warm: operations waiting for the pool still
/// get one (a warm connection goes to the pool while a lease waits there).
#[tokio::test]
async fn a_pool_of_one_serves_operations_at_once() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 1).await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store.store(memory(&format!("meadow pylon {i}"))).await?;
                store.search("meadow", 3).await?;
                store.count().await
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task").expect("operation");
    }
    assert_eq!(store.count().await.expect("count"), 8);
    store.close().await;
}

/// A warm connection idle for a while is pinged before use, so a connection the server
/// dropped in between costs a new one, not an error.
#[tokio::test]
async fn a_warm_connection_the_server_dropped_is_replaced() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 10).await;
    let (pid,): (i32,) = statement!(store, "reading the backend", |conn| {
        sqlx::query_as("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await?
    })
    .expect("backend pid");
    let mut admin = PgConnection::connect(url).await.expect("admin");
    let (ended,): (bool,) = sqlx::query_as("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .expect("terminate");
    assert!(ended);
    tokio::time::sleep(PING_AFTER_IDLE + Duration::from_millis(100)).await;
    store
        .store(memory("orchard quarry"))
        .await
        .expect("store after the drop");
    assert_eq!(store.count().await.expect("count"), 1);
    store.close().await;
}

/// `close` gives the warm connections back, so it ends, and later operations fail closed.
#[tokio::test]
async fn close_ends_with_connections_warm() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 10).await;
    store.store(memory("lantern")).await.expect("store");
    store.search("lantern", 1).await.expect("search");
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("close ends");
    let after = store.count().await;
    assert!(
        matches!(after, Err(MemoryError::Closed { .. })),
        "{after:?}"
    );
}

/// The last handle dropped outside any runtime, warm connections, an unfinished lease and
/// all, does not panic (sqlx spawns a task for every connection given back), with its
/// runtime alive or gone.
#[test]
fn a_handle_dropped_outside_a_runtime_gives_its_connections_back() {
    let Some(url) = server_url() else { return };
    for runtime_gone in [false, true] {
        let schema = TestSchema::new(url);
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let store = rt.block_on(async {
            let store = PostgresBackend::builder(url)
                .schema(schema.name())
                .min_connections(1)
                .connect()
                .await
                .expect("connect");
            store.store(memory("pylon")).await.expect("store");
            store.search("pylon", 1).await.expect("search");
            store
        });
        // And an operation's lease, unfinished, as a future dropped there leaves it.
        let inner = &store.inner;
        let lease = rt
            .block_on(Lease::acquire(&inner.pool, &inner.orphans, &inner.warm))
            .expect("lease");
        if runtime_gone {
            drop(rt);
            drop(lease);
            drop(store);
        } else {
            drop(lease);
            drop(store);
            drop(rt);
        }
    }
}

/// An operation that finishes while `close` runs gives its connection back instead of
/// keeping it warm (where nothing would ever close it).
#[tokio::test]
async fn close_ends_while_an_operation_finishes() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 10).await;
    let slow = tokio::spawn({
        let store = store.clone();
        async move {
            statement!(store, "sleeping", |conn| {
                sqlx::query("SELECT pg_sleep(0.5)")
                    .execute(&mut *conn)
                    .await?
            })
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("close ends");
    slow.await
        .expect("task")
        .expect("the statement in flight ends");
    assert_eq!(
        store.inner.warm.len(),
        0,
        "a connection kept warm after close"
    );
}

/// When the warm connection used last has been idle for a while, it is pinged and used,
/// and the others go back to the pool.
#[tokio::test]
async fn idle_warm_connections_beyond_the_one_reused_go_back_to_the_pool() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 10).await;
    // Three leases held at once, then finished: three connections warm.
    let inner = &store.inner;
    let mut leases = Vec::new();
    for _ in 0..3 {
        let lease = Lease::acquire(&inner.pool, &inner.orphans, &inner.warm)
            .await
            .expect("lease");
        leases.push(lease);
    }
    leases.into_iter().for_each(Lease::finish);
    let warm = inner.warm.len();
    assert_eq!(warm, 3);
    tokio::time::sleep(PING_AFTER_IDLE + Duration::from_millis(100)).await;
    store.count().await.expect("count");
    assert_eq!(store.inner.warm.len(), 1);
    // The others are back in the pool once its ping of each has answered.
    let start = std::time::Instant::now();
    while store.inner.pool.num_idle() < warm - 1 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never back in the pool"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.close().await;
}

/// A recall records the first `k` ranked entries still stored: when one of them was deleted
/// since the ranking, the spares take its place, and when too few are left nothing is
/// recorded (the search ranks again), unless it is the last attempt.
#[tokio::test]
async fn a_recall_passes_over_entries_deleted_since_the_ranking() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let store = store_with(url, &schema, 10).await;
    let ids = store
        .store_batch(["a", "b", "c", "d"].map(memory).to_vec())
        .await
        .expect("store");
    let n: Vec<i64> = ids
        .iter()
        .map(|id| id.to_string().parse().expect("numeric id"))
        .collect();
    store.delete(&ids[1]).await.expect("delete");
    let ranked: Vec<(i64, f32)> = n.iter().map(|&id| (id, 0.5)).collect();
    let recalled = |hits: Vec<agent_op::ScoredMemory>| -> Vec<(i64, u64)> {
        hits.iter()
            .map(|h| {
                (
                    h.entry.id.to_string().parse().expect("id"),
                    h.entry.access_count,
                )
            })
            .collect()
    };
    // The head (a, b) lost b: a and c are recorded, in ranking order.
    let hits = store
        .recall_ranked(&ranked, 2, false)
        .await
        .expect("recall")
        .expect("enough left");
    assert_eq!(recalled(hits), [(n[0], 1), (n[2], 1)]);
    // All four wanted, three left: nothing recorded, unless it is the last attempt.
    assert!(
        store
            .recall_ranked(&ranked, 4, false)
            .await
            .expect("recall")
            .is_none()
    );
    let mut counts = Vec::new();
    for id in [&ids[0], &ids[2], &ids[3]] {
        let entry = store.get(id).await.expect("get").expect("stored");
        counts.push(entry.access_count);
    }
    assert_eq!(counts, [1, 1, 0]);
    let hits = store
        .recall_ranked(&ranked, 4, true)
        .await
        .expect("recall")
        .expect("the last attempt takes what is left");
    assert_eq!(recalled(hits), [(n[0], 2), (n[2], 2), (n[3], 1)]);
    // The head whole: just those, without the spares.
    let hits = store
        .recall_ranked(&ranked[2..], 1, false)
        .await
        .expect("recall")
        .expect("whole");
    assert_eq!(recalled(hits), [(n[2], 3)]);
    store.close().await;
}

/// A caller that gives up on an operation the server never answers (a partition: the
/// connection stays open, nothing comes back) leaves a drain waiting for that answer; the
/// drain gives the connection up at the statement timeout plus its grace, so the handle's
/// next operation runs on a new connection instead of waiting for ever behind it.
#[tokio::test]
async fn an_operation_given_up_on_a_silent_server_frees_the_handle_in_time() {
    let Some(url) = server_url() else { return };
    let relay = Relay::start(url).await;
    let schema = TestSchema::new(url);
    let store = PostgresBackend::builder(&relay.url)
        .schema(schema.name())
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .statement_timeout(Some(Duration::from_secs(1)))
        .connect()
        .await
        .expect("connect");
    store
        .store(memory("before the partition"))
        .await
        .expect("store");
    relay.silence_open_connections();
    let gave_up = tokio::time::timeout(Duration::from_millis(300), store.count()).await;
    assert!(gave_up.is_err(), "a silenced connection answered");
    // Far above the drain's 1 s + 5 s, far below for ever.
    let count = tokio::time::timeout(Duration::from_secs(60), store.count())
        .await
        .expect("the drain of the silenced connection still holds the handle")
        .expect("count");
    assert_eq!(count, 1);
    store.close().await;
}

/// A TCP relay to the test server whose open connections can be silenced: from then on it
/// forwards nothing either way but keeps their sockets open, as a network partition looks
/// to both ends. Connections opened later are relayed.
struct Relay {
    url: String,
    silenced_below: Arc<AtomicU64>,
    next: Arc<AtomicU64>,
}

impl Relay {
    async fn start(server_url: &str) -> Relay {
        let (before, rest) = server_url.split_once("@").expect("a URL with a user");
        let (address, path) = rest.split_once('/').expect("a URL with a database");
        let server: std::net::SocketAddr = address.parse().expect("host:port");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!(
            "{before}@{}/{path}",
            listener.local_addr().expect("address")
        );
        let silenced_below = Arc::new(AtomicU64::new(0));
        let next = Arc::new(AtomicU64::new(0));
        let (silenced, counter) = (silenced_below.clone(), next.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = counter.fetch_add(1, Ordering::SeqCst);
                let Ok(upstream) = tokio::net::TcpStream::connect(server).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = upstream.into_split();
                for (from, to) in [(client_read, server_write), (server_read, client_write)] {
                    tokio::spawn(forward(from, to, id, silenced.clone()));
                }
            }
        });
        Relay {
            url,
            silenced_below,
            next,
        }
    }

    fn silence_open_connections(&self) {
        self.silenced_below
            .store(self.next.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until connection `id` is silenced; then holds both for ever.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: u64,
    silenced_below: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if id < silenced_below.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A bulk load runs however long its batch takes: under a statement timeout no statement of
/// a load could meet (1 ms), a 1,200-entry load (keyword postings, the index built again)
/// still lands whole.
#[tokio::test]
async fn a_bulk_load_is_not_cut_off_by_the_statement_timeout() {
    let Some(url) = server_url() else { return };
    let schema = TestSchema::new(url);
    let strict = PostgresBackend::builder(url)
        .schema(schema.name())
        .statement_timeout(Some(Duration::from_millis(1)))
        .connect()
        .await
        .expect("connect");
    let batch: Vec<NewMemory> = (0..1_200)
        .map(|i| memory(&format!("entry {i} about harbours, lanterns and quarries")))
        .collect();
    let ids = strict.store_batch(batch).await.expect("the load");
    assert_eq!(ids.len(), 1_200);
    strict.close().await;
    let store = store_with(url, &schema, 2).await;
    assert_eq!(store.count().await.expect("count"), 1_200);
    store.close().await;
}
