//! Unit tests of the SQLite backend's internals.

use super::prune::apply_merges;
use super::retry::write_tx;
use super::search::candidate_similarities;
use super::*;
use crate::clock::now_micros;
use crate::common::parse_id;
use crate::prune::MergeGroup;
use crate::vector::unit;

fn memory(content: &str) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: String::new(),
        tags: vec![Tag::from(content)],
    }
}

/// Two handles on one new database file in `dir`, and the file's path.
async fn two_handles(dir: &tempfile::TempDir) -> (PathBuf, SqliteBackend, SqliteBackend) {
    let path = dir.path().join("m.db");
    let store = SqliteBackend::open(&path).await.expect("open");
    let other = SqliteBackend::open(&path).await.expect("open");
    (path, store, other)
}

/// The value of one of a handle's test-only counters.
fn count(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(std::sync::atomic::Ordering::Relaxed)
}

/// The ids of `nearest`'s hits, in order.
fn ids(hits: Vec<(MemoryId, f32)>) -> Vec<MemoryId> {
    hits.into_iter().map(|h| h.0).collect()
}

#[tokio::test]
async fn similarities_of_entries_the_copy_lacks_are_read_from_the_snapshot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, store, other) = two_handles(&dir).await;
    let old = store
        .store(memory("the deploy key is in the vault"))
        .await
        .expect("store");
    store.sync().await.expect("sync");
    // Stored by another handle after this handle's copy was synced: the copy lacks it,
    // as it did when the keyword search (a newer snapshot) found such an entry.
    let new = other
        .store(memory("the deploy needs the VPN"))
        .await
        .expect("store");
    let dimensions = store.inner.dimensions;
    let query = unit(&store.inner.embedder.embed("deploy").await.expect("embed"));
    let ids = [parse_id(&old).expect("id"), parse_id(&new).expect("id")];
    assert!(
        read_cache(&store.inner.cache)
            .similarity(&query, ids[1])
            .is_none()
    );
    let cache = &store.inner.cache;
    let read = read_tx!(store, "test", |conn| {
        candidate_similarities(&mut *conn, cache, dimensions, &query, &ids).await?
    })
    .expect("similarities");
    // The same values the copy gives once it has both.
    store.sync().await.expect("sync");
    for id in ids {
        let want = read_cache(cache)
            .similarity(&query, id)
            .expect("in the copy");
        assert!(want > 0.0);
        assert_eq!(read.get(&id), Some(&want), "entry {id}");
    }

    // A damaged vector has no similarity. (An empty copy: both are read from the file.)
    sqlx::query("UPDATE embeddings SET vector = x'00' WHERE entry_id = ?1")
        .bind(ids[1])
        .execute(&mut *store.inner.writer.lock().await.as_mut().expect("open"))
        .await
        .expect("damage");
    let empty = RwLock::new(VectorCache::new(dimensions, crate::AnnConfig::default()));
    let read = read_tx!(store, "test", |conn| {
        candidate_similarities(&mut *conn, &empty, dimensions, &query, &ids).await?
    })
    .expect("similarities");
    assert!(
        read.contains_key(&ids[0]) && !read.contains_key(&ids[1]),
        "{read:?}"
    );
}

#[tokio::test]
async fn the_merge_copy_spans_its_chunks_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    let n = 2 * crate::prune::COPY_CHUNK + 500;
    let ids = store
        .store_batch((0..n).map(|i| memory(&format!("fact {}", i % 2))).collect())
        .await
        .expect("store");
    store.sync().await.expect("sync");
    let mut entries: Vec<(i64, i64)> = ids
        .iter()
        .map(|id| (parse_id(id).expect("id"), 0))
        .collect();
    // An id the copy does not hold (deleted, say), at a chunk boundary, is left out.
    entries.insert(crate::prune::COPY_CHUNK, (i64::MAX, 0));
    let set = cache::merge_set(&store.inner.cache, &entries);
    assert_eq!(set.len(), n);
    let plan = set.plan(1.0);
    let n0 = |i: usize| parse_id(&ids[i]).expect("id");
    let sizes: Vec<(i64, usize)> = plan.iter().map(|g| (g.keeper, g.absorbed.len())).collect();
    assert_eq!(sizes, [(n0(0), n.div_ceil(2) - 1), (n0(1), n / 2 - 1)]);
}

#[tokio::test]
async fn merges_skip_entries_deleted_after_planning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, store, other) = two_handles(&dir).await;
    let ids = store
        .store_batch(vec![
            memory("the same fact"),
            memory("the same fact"),
            memory("the same fact"),
            memory("another fact"),
            memory("another fact"),
            memory("a third fact"),
            memory("a third fact"),
        ])
        .await
        .expect("store");
    let plan = store.plan_merges(1.0, None).await.expect("plan");
    let n = |i: usize| parse_id(&ids[i]).expect("id");
    assert_eq!(
        plan,
        [
            MergeGroup {
                keeper: n(0),
                absorbed: vec![n(1), n(2)]
            },
            MergeGroup {
                keeper: n(3),
                absorbed: vec![n(4)]
            },
            MergeGroup {
                keeper: n(5),
                absorbed: vec![n(6)]
            },
        ]
    );
    // Meanwhile another handle deletes a keeper and an absorbed entry.
    assert!(other.delete(&ids[0]).await.expect("delete"));
    assert!(other.delete(&ids[4]).await.expect("delete"));
    let merged = write_tx!(store, "applying", |conn| {
        apply_merges(&mut *conn, &plan).await?
    })
    .expect("apply");
    // Only the untouched group merged; nothing failed, nothing came back.
    assert_eq!(merged, 1);
    let left: Vec<MemoryId> = store
        .recent(10)
        .await
        .expect("recent")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(
        left,
        [
            ids[5].clone(),
            ids[3].clone(),
            ids[2].clone(),
            ids[1].clone()
        ]
    );
    assert!(store.integrity_check().await.expect("integrity").is_sound());
}

/// A search that follows no commit reads no change log (its high-water mark is unchanged);
/// every commit, by this handle, another one, or a plain connection, is seen by the next,
/// also after a checkpoint has emptied the write-ahead log. After this handle's own write
/// the copy is synced before the search; after another's, the search that ran beside the
/// check is done again.
#[tokio::test]
async fn searches_read_the_change_log_only_after_a_commit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (path, store, other) = two_handles(&dir).await;
    let reads = || count(&store.inner.change_log_reads);
    let repeated = || count(&store.inner.repeated_reads);
    let checks = || count(&store.inner.checks);
    let query = store.inner.embedder.embed("deploy").await.expect("embed");
    let nearest = || store.nearest(&query, 10, &UNRESTRICTED);

    let first = store
        .store(memory("deploy with the VPN"))
        .await
        .expect("store");
    let checked = checks();
    assert_eq!(
        ids(nearest().await.expect("search")),
        std::slice::from_ref(&first)
    );
    assert_eq!(
        checks(),
        checked,
        "after its own write a handle reads the log unasked"
    );
    let before = reads();
    for _ in 0..3 {
        assert_eq!(
            ids(nearest().await.expect("search")),
            std::slice::from_ref(&first)
        );
    }
    assert_eq!(reads(), before, "nothing was committed: no change log read");
    assert_eq!(repeated(), 0, "this handle's own write is synced first");

    let second = other.store(memory("deploy at noon")).await.expect("store");
    let found = ids(nearest().await.expect("search"));
    assert!(
        found.contains(&second),
        "another handle's commit is seen: {found:?}"
    );
    assert_eq!(reads(), before + 1);
    assert_eq!(
        repeated(),
        1,
        "another handle's write is found by the check"
    );

    // After a checkpoint that empties the WAL, a commit restarts it: still seen.
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("connect");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .expect("checkpoint");
    nearest().await.expect("search");
    let settled = reads();
    nearest().await.expect("search");
    assert_eq!(reads(), settled);
    sqlx::query("DELETE FROM entries WHERE id = ?1")
        .bind(parse_id(&first).expect("id"))
        .execute(&mut conn)
        .await
        .expect("delete");
    let found = ids(nearest().await.expect("search"));
    assert!(
        !found.contains(&first),
        "a plain connection's delete is seen: {found:?}"
    );
    assert_eq!(reads(), settled + 1);
    assert_eq!(
        repeated(),
        2,
        "a plain connection's write is found by the check"
    );
    conn.close().await.expect("close");

    // A hybrid search after the handle's own write reads the log unasked too.
    let later = store.store(memory("deploy later")).await.expect("store");
    let checked = checks();
    let hybrid = store.search("deploy", 10).await.expect("search");
    assert!(hybrid.iter().any(|hit| hit.entry.id == later), "{hybrid:?}");
    assert_eq!(checks(), checked, "a hybrid search after its own write");
}

/// While another search's check holds the handle's checking connection, a pooled one
/// checks: a commit is still seen, and a store without one still reads no change log.
#[tokio::test]
async fn a_search_checks_on_a_pooled_connection_while_the_checker_is_busy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, store, other) = two_handles(&dir).await;
    let query = store.inner.embedder.embed("deploy").await.expect("embed");
    let first = store
        .store(memory("deploy with the VPN"))
        .await
        .expect("store");
    store
        .nearest(&query, 10, &UNRESTRICTED)
        .await
        .expect("search");
    let busy = store.inner.checker.lock().await;
    let reads = || count(&store.inner.change_log_reads);
    let before = reads();
    let found = ids(store
        .nearest(&query, 10, &UNRESTRICTED)
        .await
        .expect("search"));
    assert_eq!(found, std::slice::from_ref(&first));
    assert_eq!(reads(), before, "nothing was committed: no change log read");
    let second = other.store(memory("deploy at noon")).await.expect("store");
    let found = ids(store
        .nearest(&query, 10, &UNRESTRICTED)
        .await
        .expect("search"));
    assert!(found.contains(&second), "{found:?}");
    drop(busy);
}

/// A search dropped after its first poll, usually with its check in flight (its statement
/// sent, the answer not taken), leaves the checking connection usable: the next search's
/// check answers for the database as it is then. (Under load the connection's thread may
/// answer within that first poll, so not every round drops a check in flight; every round
/// checks that the next search sees the commit made after the drop.)
#[tokio::test]
async fn a_search_dropped_during_its_check_leaves_the_checker_usable() {
    use futures_util::FutureExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, store, other) = two_handles(&dir).await;
    let query = store.inner.embedder.embed("deploy").await.expect("embed");
    store
        .store(memory("deploy with the VPN"))
        .await
        .expect("store");
    store
        .nearest(&query, 100, &UNRESTRICTED)
        .await
        .expect("search");
    for round in 0..20 {
        drop(store.nearest(&query, 100, &UNRESTRICTED).now_or_never());
        let new = other
            .store(memory(&format!("deploy round {round}")))
            .await
            .expect("store");
        let found = ids(store
            .nearest(&query, 100, &UNRESTRICTED)
            .await
            .expect("search"));
        assert!(found.contains(&new), "round {round}: {found:?}");
    }
}

#[tokio::test]
async fn a_search_records_its_recall_in_one_statement_only_when_every_hit_is_stored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    let tagged = NewMemory {
        content: "alpha".to_owned(),
        context: String::new(),
        tags: vec![Tag::from("zeta"), Tag::from("beta")],
    };
    let a = store.store(tagged).await.expect("store");
    let b = store.store(memory("bravo")).await.expect("store");
    let c = store.store(memory("charlie")).await.expect("store");
    let n = |id: &MemoryId| parse_id(id).expect("id");
    let access = |id: MemoryId| {
        let store = &store;
        async move {
            store
                .get(&id)
                .await
                .expect("get")
                .expect("stored")
                .access_count
        }
    };
    let now = now_micros(store.inner.clock.as_ref());

    // One of the best two is gone: nothing is recorded, so the transaction that picks a
    // spare in its place records each hit once.
    assert!(store.delete(&b).await.expect("delete"));
    let ranked = [(n(&a), 0.9), (n(&b), 0.8), (n(&c), 0.7)];
    assert!(
        store
            .recall_best(&ranked, 2, now)
            .await
            .expect("recall")
            .is_none()
    );
    assert_eq!(access(a.clone()).await, 0);
    assert_eq!(access(c.clone()).await, 0);

    // Both stored: returned in rank order with their scores and sorted tags, recorded once;
    // the spare is not.
    let stored = store.store(memory("bravo again")).await.expect("store");
    let ranked = [(n(&c), 0.9), (n(&a), 0.8), (n(&stored), 0.7)];
    let hits = store
        .recall_best(&ranked, 2, now)
        .await
        .expect("recall")
        .expect("every hit stored");
    let got: Vec<(MemoryId, f32, u64)> = hits
        .iter()
        .map(|h| (h.entry.id.clone(), h.score, h.entry.access_count))
        .collect();
    assert_eq!(got, vec![(c.clone(), 0.9, 1), (a.clone(), 0.8, 1)]);
    assert_eq!(
        hits[1].entry.tags,
        vec![Tag::from("beta"), Tag::from("zeta")]
    );
    assert!(hits[0].entry.tags.iter().any(|t| t.0 == "charlie"));
    assert_eq!(access(stored).await, 0);

    // Fewer ranked than asked for: all of them, if all are stored.
    let hits = store
        .recall_best(&ranked[..1], 10, now)
        .await
        .expect("recall")
        .expect("stored");
    assert_eq!(hits.len(), 1);
    assert_eq!(access(c).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_leaves_no_connection_open_even_one_being_given_back_as_it_starts() {
    // A close right after a read races the read's connection being given back (see
    // `pool::close`); left open, it kept the WAL and a reopened file shared its stale view
    // of it (`ann.rs`'s rolled-back database failed with SQLITE_IOERR_SHORT_READ).
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    for round in 0..100 {
        let store = SqliteBackend::open(&path).await.expect("open");
        store.store(memory("kept")).await.expect("store");
        assert!(store.count().await.expect("count") > 0);
        store.close().await;
        assert_eq!(
            store.inner.readers.size(),
            0,
            "round {round}: a reader is open"
        );
        assert!(
            !std::path::Path::new(&wal).exists(),
            "round {round}: the WAL outlived the handle's close"
        );
    }
}
