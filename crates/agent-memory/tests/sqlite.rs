//! What only the SQLite backend has: the file, its schema, FTS5, the recorded embedder, the
//! change log between handles, and its failure modes.

use std::sync::Arc;

use agent_memory::{Durability, HashingEmbedder, IntegrityProblem, SqliteBackend, ZeroEmbedder};
use agent_op::{MemoryBackend, MemoryError, MemoryId, NewMemory, PrunePolicy, Tag};
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

fn memory(content: &str, tags: &[&str]) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: "test".to_owned(),
        tags: tags.iter().map(|t| Tag::from(*t)).collect(),
    }
}

async fn raw(path: &std::path::Path) -> SqliteConnection {
    SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
        .await
        .expect("raw connection")
}

#[tokio::test]
async fn the_bundled_sqlite_has_fts5() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut conn = SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(dir.path().join("fts.db"))
            .create_if_missing(true),
    )
    .await
    .expect("connect");
    let (used,): (i64,) = sqlx::query_as("SELECT sqlite_compileoption_used('ENABLE_FTS5')")
        .fetch_one(&mut conn)
        .await
        .expect("compile options");
    assert_eq!(used, 1);
    sqlx::query("CREATE VIRTUAL TABLE docs USING fts5(body)")
        .execute(&mut conn)
        .await
        .expect("create an fts5 table");
    for body in ["the quick brown fox", "a lazy dog", "quick thinking"] {
        sqlx::query("INSERT INTO docs (body) VALUES (?1)")
            .bind(body)
            .execute(&mut conn)
            .await
            .expect("insert");
    }
    let hits: Vec<(String,)> =
        sqlx::query_as("SELECT body FROM docs WHERE docs MATCH 'quick' ORDER BY rank, rowid")
            .fetch_all(&mut conn)
            .await
            .expect("match");
    let mut bodies: Vec<String> = hits.into_iter().map(|(b,)| b).collect();
    bodies.sort();
    assert_eq!(bodies, ["quick thinking", "the quick brown fox"]);
}

#[tokio::test]
async fn keyword_search_finds_what_vectors_cannot() {
    // With all-zero vectors only FTS5 can find anything; scores are then at most 0.5 (first
    // in one of two rankings).
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::builder(dir.path().join("m.db"))
        .embedder(Arc::new(ZeroEmbedder::new(8)))
        .open()
        .await
        .expect("open");
    store
        .store(memory("Bananas are rich in potassium", &[]))
        .await
        .expect("store");
    store
        .store(memory("The cafeteria sells apples", &[]))
        .await
        .expect("store");
    let context_only = store
        .store(NewMemory {
            content: "Fruit facts".to_owned(),
            context: "from the potassium chapter".to_owned(),
            tags: vec![],
        })
        .await
        .expect("store");
    let hits = store
        .search("how much POTASSIUM?", 5)
        .await
        .expect("search");
    let contents: Vec<&str> = hits.iter().map(|h| h.entry.content.as_str()).collect();
    assert_eq!(contents, ["Bananas are rich in potassium", "Fruit facts"]);
    assert_eq!(
        hits[1].entry.id, context_only,
        "context is indexed too (weight 0.5)"
    );
    assert!(
        (hits[0].score - 0.5).abs() < 1e-6,
        "score {}",
        hits[0].score
    );
    assert!(hits[1].score < hits[0].score);
    assert!(store.search("pears", 5).await.expect("search").is_empty());
}

#[tokio::test]
async fn an_entry_first_in_both_rankings_scores_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    for fact in [
        "The capital of France is Paris",
        "Bananas are rich in potassium",
        "The staging server restarts at 3am",
    ] {
        store.store(memory(fact, &[])).await.expect("store");
    }
    let hits = store
        .search("Bananas are rich in potassium", 3)
        .await
        .expect("search");
    assert_eq!(hits[0].entry.content, "Bananas are rich in potassium");
    assert!(
        (hits[0].score - 1.0).abs() < 1e-6,
        "score {}",
        hits[0].score
    );
    assert!(hits.iter().all(|h| h.score > 0.0 && h.score <= 1.0));
}

#[tokio::test]
async fn stop_words_are_left_out_of_keyword_search() {
    // 120 entries share "common"; only one has "special". With zero vectors the keyword
    // ranking is all there is: "common" (in every entry) is a stop word, so only the entry
    // with "special" is found rather than 120 near-zero BM25 matches.
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::builder(dir.path().join("m.db"))
        .embedder(Arc::new(ZeroEmbedder::new(8)))
        .open()
        .await
        .expect("open");
    let filler: Vec<NewMemory> = (0..120)
        .map(|i| memory(&format!("common filler {i}"), &[]))
        .collect();
    store.store_batch(filler).await.expect("store batch");
    let special = store
        .store(memory("common special", &[]))
        .await
        .expect("store");
    let hits = store.search("common special", 50).await.expect("search");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].entry.id, special);
    // Alone, a stop word finds nothing by keyword.
    assert!(store.search("common", 50).await.expect("search").is_empty());
}

#[tokio::test]
async fn another_embedder_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let store = SqliteBackend::open(&path).await.expect("open");
    let id = store.store(memory("kept safe", &[])).await.expect("store");
    store.close().await;

    let smaller = HashingEmbedder::with_dimensions(256).expect("embedder");
    let err = SqliteBackend::builder(&path)
        .embedder(Arc::new(smaller))
        .open()
        .await
        .expect_err("a different dimension must be refused");
    assert_eq!(
        err,
        MemoryError::EmbedderMismatch {
            stored_model: "hashing-v1-384".to_owned(),
            stored_dimensions: 384,
            given_model: "hashing-v1-256".to_owned(),
            given_dimensions: 256,
        }
    );
    assert!(err.to_string().contains("hashing-v1-384"), "{err}");

    let same_size = SqliteBackend::builder(&path)
        .embedder(Arc::new(ZeroEmbedder::new(384)))
        .open()
        .await
        .expect_err("a different model of the same dimension must be refused");
    assert!(
        matches!(same_size, MemoryError::EmbedderMismatch { ref given_model, .. } if given_model == "zero-384")
    );

    let again = SqliteBackend::open(&path)
        .await
        .expect("the right embedder opens it");
    assert_eq!(
        again.get(&id).await.expect("get").map(|e| e.content),
        Some("kept safe".to_owned())
    );
}

#[tokio::test]
async fn everything_survives_closing_and_reopening() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let store = SqliteBackend::builder(&path)
        .durability(Durability::Full)
        .open()
        .await
        .expect("open");
    let id = store
        .store(memory("The VPN config is in the wiki", &["ops", "vpn"]))
        .await
        .expect("store");
    store.search("VPN config", 1).await.expect("search");
    let before = store.get(&id).await.expect("get").expect("entry");
    assert_eq!(before.access_count, 1);
    store.close().await;
    assert!(
        matches!(store.count().await, Err(MemoryError::Closed { .. })),
        "a closed handle refuses work"
    );

    let again = SqliteBackend::open(&path).await.expect("reopen");
    assert_eq!(again.get(&id).await.expect("get"), Some(before));
    assert_eq!(again.count().await.expect("count"), 1);
    let hits = again
        .search("where is the VPN config?", 1)
        .await
        .expect("search");
    assert_eq!(hits[0].entry.id, id);
    assert_eq!(hits[0].entry.access_count, 2);
    assert_eq!(
        again
            .by_tags(&[Tag::from("vpn")])
            .await
            .expect("by_tags")
            .len(),
        1
    );
    assert!(again.integrity_check().await.expect("integrity").is_sound());

    let mut conn = raw(&path).await;
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .expect("journal mode");
    assert_eq!(mode, "wal");
    let (model, dims): (String, String) = sqlx::query_as(
        "SELECT (SELECT value FROM store_meta WHERE key = 'embedding_model'), \
                (SELECT value FROM store_meta WHERE key = 'embedding_dimensions')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("store_meta");
    assert_eq!((model.as_str(), dims.as_str()), ("hashing-v1-384", "384"));
    let (blob_len,): (i64,) = sqlx::query_as("SELECT length(vector) FROM embeddings")
        .fetch_one(&mut conn)
        .await
        .expect("embedding");
    assert_eq!(blob_len, 384 * 4, "vectors are stored as little-endian f32");
}

#[tokio::test]
async fn handles_see_each_others_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let a = SqliteBackend::open(&path).await.expect("open a");
    let b = SqliteBackend::open(&path).await.expect("open b");
    assert!(
        b.search("quarterly report deadline", 3)
            .await
            .expect("search")
            .is_empty()
    );
    let id = a
        .store(memory("The quarterly report deadline is Friday", &[]))
        .await
        .expect("store");
    let hits = b
        .search("quarterly report deadline", 3)
        .await
        .expect("search");
    assert_eq!(
        hits.first().map(|h| &h.entry.id),
        Some(&id),
        "b sees a's insert"
    );
    assert!(a.delete(&id).await.expect("delete"));
    assert!(
        b.search("quarterly report deadline", 3)
            .await
            .expect("search")
            .is_empty(),
        "b sees a's delete"
    );

    let x = b
        .store(memory("Lunch is served at noon", &["food"]))
        .await
        .expect("store");
    let y = b
        .store(memory("lunch is served at noon!", &["canteen"]))
        .await
        .expect("store");
    let report = b
        .prune(&PrunePolicy::new().merge_similarity(0.99))
        .await
        .expect("prune");
    assert_eq!(report.merged, 1);
    let hits = a.search("lunch served noon", 5).await.expect("search");
    assert_eq!(
        hits.iter().map(|h| &h.entry.id).collect::<Vec<_>>(),
        [&x],
        "a sees b's merge"
    );
    assert_eq!(
        hits[0].entry.tags,
        [Tag::from("canteen"), Tag::from("food")]
    );
    assert_eq!(a.get(&y).await.expect("get"), None);
}

#[tokio::test]
async fn a_trimmed_change_log_makes_handles_reload() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let a = SqliteBackend::open(&path).await.expect("open a");
    let b = SqliteBackend::open(&path).await.expect("open b");
    a.search("warm up", 1).await.expect("search");
    let old = b
        .store(memory("Old news about the harbour", &[]))
        .await
        .expect("store");
    let new = b
        .store(memory("Fresh news about the harbour", &[]))
        .await
        .expect("store");
    assert!(b.delete(&old).await.expect("delete"));
    // Simulate a prune by another process that trimmed the log past a's position.
    let mut conn = raw(&path).await;
    sqlx::query("DELETE FROM changes")
        .execute(&mut conn)
        .await
        .expect("trim");
    sqlx::query(
        "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('changes_floor', '1000000')",
    )
    .execute(&mut conn)
    .await
    .expect("floor");
    let hits = a.search("news about the harbour", 5).await.expect("search");
    assert_eq!(hits.iter().map(|h| &h.entry.id).collect::<Vec<_>>(), [&new]);
}

#[tokio::test]
async fn files_that_are_not_memory_stores_are_clear_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x42u8; 8192]).expect("write");
    let err = SqliteBackend::open(&garbage)
        .await
        .expect_err("garbage opened");
    match &err {
        MemoryError::Storage {
            location, cause, ..
        } => {
            assert!(
                location
                    .as_deref()
                    .is_some_and(|l| l.ends_with("garbage.db")),
                "{location:?}"
            );
            // The database's own error, typed, through `source()` as well.
            assert!(cause.downcast_ref::<sqlx::Error>().is_some(), "{cause:?}");
            let source = std::error::Error::source(&err).expect("a source");
            let sql = source.downcast_ref::<sqlx::Error>().expect("an sqlx error");
            assert!(sql.to_string().contains("not a database"), "{sql}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }

    let missing = dir.path().join("missing.db");
    let err = SqliteBackend::builder(&missing)
        .create_if_missing(false)
        .open()
        .await
        .expect_err("a missing file opened");
    assert!(matches!(err, MemoryError::Storage { .. }), "{err:?}");
    assert!(!missing.exists());

    // A store migrated by a newer version of this crate is refused, not misread.
    let newer = dir.path().join("newer.db");
    SqliteBackend::open(&newer)
        .await
        .expect("create")
        .close()
        .await;
    let mut conn = raw(&newer).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99, 'from the future', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .expect("fake a newer migration");
    let err = SqliteBackend::open(&newer)
        .await
        .expect_err("a newer schema opened");
    assert!(err.to_string().contains("migration 99"), "{err}");
}

#[tokio::test]
async fn corrupt_vectors_are_skipped_and_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let store = SqliteBackend::open(&path).await.expect("open");
    let short = store
        .store(memory("alpha particles decay quickly", &["physics"]))
        .await
        .expect("store");
    let nan = store
        .store(memory("beta rays bend in magnetic fields", &[]))
        .await
        .expect("store");
    let fine = store
        .store(memory("gamma rays pass through walls", &[]))
        .await
        .expect("store");
    store.close().await;
    // Damage from outside: a blob of the wrong size, and one with a NaN in it.
    let mut conn = raw(&path).await;
    sqlx::query("UPDATE embeddings SET vector = x'0000' WHERE entry_id = ?1")
        .bind(short.0.parse::<i64>().expect("id"))
        .execute(&mut conn)
        .await
        .expect("corrupt");
    let mut with_nan = vec![0u8; 384 * 4];
    with_nan[..4].copy_from_slice(&f32::NAN.to_le_bytes());
    sqlx::query("UPDATE embeddings SET vector = ?1 WHERE entry_id = ?2")
        .bind(&with_nan)
        .bind(nan.0.parse::<i64>().expect("id"))
        .execute(&mut conn)
        .await
        .expect("corrupt");

    // One bad row used to make the store unopenable.
    let store = SqliteBackend::open(&path)
        .await
        .expect("open with bad vectors");
    assert_eq!(
        store.corrupt_embeddings().await.expect("corrupt"),
        [short.clone(), nan.clone()]
    );
    let report = store.integrity_check().await.expect("integrity");
    assert_eq!(
        report.problems,
        [
            IntegrityProblem::UnusableEmbedding {
                id: short.clone(),
                why: "2 bytes, expected 1536 (384 f32 values)".to_owned(),
            },
            IntegrityProblem::UnusableEmbedding {
                id: nan.clone(),
                why: "NaN or infinite values".to_owned(),
            },
        ],
        "{report}"
    );
    // Everything else about the entries is intact.
    let entry = store.get(&short).await.expect("get").expect("entry");
    assert_eq!(entry.content, "alpha particles decay quickly");
    assert_eq!(entry.tags, [Tag::from("physics")]);
    assert_eq!(store.count().await.expect("count"), 3);
    assert_eq!(store.recent(10).await.expect("recent").len(), 3);
    // Keyword search still finds it; vector search does not: first by keyword only is a
    // fused score of 0.5 (first in both rankings would be 1).
    let hits = store
        .search("alpha particles decay quickly", 3)
        .await
        .expect("search");
    assert_eq!(hits[0].entry.id, short);
    assert!((hits[0].score - 0.5).abs() < 1e-6, "{hits:?}");
    let candidates = store
        .search_candidates("alpha particles decay quickly", 3)
        .await
        .expect("candidates");
    assert_eq!(candidates[0].hit.entry.id, short);
    assert_eq!(
        candidates[0].similarity, None,
        "no similarity without a usable vector"
    );
    let hits = store
        .search("gamma rays pass through walls", 3)
        .await
        .expect("search");
    assert_eq!(hits[0].entry.id, fine);
    assert!((hits[0].score - 1.0).abs() < 1e-6, "{hits:?}");
    // Prune works around them.
    store
        .prune(&PrunePolicy::new().merge_similarity(0.5))
        .await
        .expect("prune");
    assert_eq!(store.count().await.expect("count"), 3);

    // Damage done while the store is open is found by the next sync.
    sqlx::query("UPDATE embeddings SET vector = x'00' WHERE entry_id = ?1")
        .bind(fine.0.parse::<i64>().expect("id"))
        .execute(&mut conn)
        .await
        .expect("corrupt");
    assert_eq!(
        store.corrupt_embeddings().await.expect("corrupt"),
        [short.clone(), nan.clone(), fine.clone()]
    );
    // Deleting a damaged entry clears it.
    assert!(store.delete(&short).await.expect("delete"));
    assert_eq!(
        store.corrupt_embeddings().await.expect("corrupt"),
        [nan.clone(), fine.clone()]
    );
    // An entry without any vector row is reported too.
    sqlx::query("DELETE FROM embeddings WHERE entry_id = ?1")
        .bind(nan.0.parse::<i64>().expect("id"))
        .execute(&mut conn)
        .await
        .expect("remove a vector");
    let report = store.integrity_check().await.expect("integrity");
    assert!(
        report
            .problems
            .contains(&IntegrityProblem::MissingEmbedding { id: nan.clone() }),
        "{report}"
    );
    assert!(
        report
            .to_string()
            .contains(&format!("entry {nan} has no embedding"))
    );
}

#[tokio::test]
async fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("app.db");
    let mut conn = SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true),
    )
    .await
    .expect("create");
    for sql in [
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
        "CREATE TABLE entries (id INTEGER PRIMARY KEY, title TEXT)",
        "INSERT INTO users (name) VALUES ('ana')",
    ] {
        sqlx::query(sql)
            .execute(&mut conn)
            .await
            .expect("app schema");
    }
    conn.close().await.expect("close");
    let before = std::fs::read(&path).expect("read");

    let err = SqliteBackend::open(&path)
        .await
        .expect_err("another program's database was opened");
    let message = err.to_string();
    assert!(
        matches!(err, MemoryError::UnexpectedData { .. })
            && message.contains("app.db")
            && message.contains("not an agent-memory store")
            && message.contains("entries, users"),
        "{message}"
    );
    // Nothing was changed: not the journal mode, not the tables, not a byte.
    assert_eq!(std::fs::read(&path).expect("read"), before);
    assert!(!dir.path().join("app.db-wal").exists());
    let mut conn = raw(&path).await;
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .expect("journal mode");
    assert_eq!(mode, "delete");
    let tables: Vec<(String,)> =
        sqlx::query_as("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .fetch_all(&mut conn)
            .await
            .expect("tables");
    assert_eq!(
        tables.into_iter().map(|(t,)| t).collect::<Vec<_>>(),
        ["entries", "users"]
    );

    // A database that uses sqlx migrations of its own is refused too.
    let other = dir.path().join("other.db");
    let mut conn = SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(&other)
            .create_if_missing(true),
    )
    .await
    .expect("create");
    sqlx::query(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, \
         checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .expect("migrations table");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (1, 'their schema', 1, x'0102', 0)",
    )
    .execute(&mut conn)
    .await
    .expect("their migration");
    conn.close().await.expect("close");
    let err = SqliteBackend::open(&other)
        .await
        .expect_err("a foreign sqlx database was opened");
    assert!(
        err.to_string().contains("not an agent-memory store"),
        "{err}"
    );

    // An empty file, and one whose creation stopped after the migrations table, open.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").expect("write");
    SqliteBackend::open(&empty)
        .await
        .expect("an empty file opens")
        .close()
        .await;
    let interrupted = dir.path().join("interrupted.db");
    let mut conn = SqliteConnection::connect_with(
        &SqliteConnectOptions::new()
            .filename(&interrupted)
            .create_if_missing(true),
    )
    .await
    .expect("create");
    sqlx::query(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL, \
         checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .expect("migrations table");
    conn.close().await.expect("close");
    let store = SqliteBackend::open(&interrupted)
        .await
        .expect("an interrupted creation completes");
    store.store(memory("fine", &[])).await.expect("store");
}

#[tokio::test]
async fn the_change_log_stays_bounded_without_prune() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let embedder = Arc::new(ZeroEmbedder::new(4));
    let writer = SqliteBackend::builder(&path)
        .embedder(embedder.clone())
        .open()
        .await
        .expect("open");
    let idle = SqliteBackend::builder(&path)
        .embedder(embedder)
        .open()
        .await
        .expect("open");
    idle.search("warm up", 1).await.expect("search");
    let mut ids = Vec::new();
    for batch in 0..9 {
        let memories = (0..2_500)
            .map(|i| memory(&format!("note {batch} {i} kept"), &[]))
            .collect();
        ids.extend(writer.store_batch(memories).await.expect("store"));
    }
    let last = writer
        .store(memory("the newest note", &[]))
        .await
        .expect("store");
    assert!(writer.delete(&ids[0]).await.expect("delete"));
    let mut conn = raw(&path).await;
    let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM changes")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert!(
        rows <= 20_000,
        "{rows} change-log rows after 22,502 changes"
    );
    let (floor,): (String,) =
        sqlx::query_as("SELECT value FROM store_meta WHERE key = 'changes_floor'")
            .fetch_one(&mut conn)
            .await
            .expect("floor");
    assert!(floor.parse::<i64>().expect("number") > 0);
    // The idle handle fell behind the floor: it reloads and sees everything.
    let hits = idle.search("newest", 5).await.expect("search");
    assert_eq!(hits.first().map(|h| &h.entry.id), Some(&last));
    assert_eq!(idle.count().await.expect("count"), 22_500);
}

#[tokio::test]
async fn ids_are_never_reused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    let first = store.store(memory("one", &[])).await.expect("store");
    let second = store.store(memory("two", &[])).await.expect("store");
    assert!(store.delete(&second).await.expect("delete"));
    let third = store.store(memory("three", &[])).await.expect("store");
    assert_ne!(third, second);
    let batch = store
        .store_batch(vec![memory("four", &["b"]), memory("five", &["b"])])
        .await
        .expect("batch");
    let mut all = vec![first, second, third];
    all.extend(batch.iter().cloned());
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len());
    assert_eq!(
        store
            .by_tags(&[Tag::from("b")])
            .await
            .expect("by_tags")
            .len(),
        2
    );
    assert_eq!(
        store.store_batch(Vec::new()).await.expect("empty batch"),
        Vec::<MemoryId>::new()
    );
    let err = store
        .store_batch(vec![memory("fine", &[]), memory("", &[])])
        .await
        .expect_err("a batch with an empty memory");
    assert!(matches!(err, MemoryError::InvalidInput(_)));
    assert_eq!(
        store.count().await.expect("count"),
        4,
        "a refused batch stores nothing"
    );
}

#[tokio::test]
async fn record_access_takes_long_id_lists_in_linear_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::open(dir.path().join("m.db"))
        .await
        .expect("open");
    let a = store.store(memory("first", &[])).await.expect("store");
    let b = store.store(memory("second", &[])).await.expect("store");
    // 200,000 distinct ids (almost all unknown), each real one listed twice. Deduplicating
    // with `Vec::contains` took quadratic time: minutes for this list.
    let mut ids: Vec<MemoryId> = vec![b.clone(), a.clone()];
    ids.extend((1_000..201_000).map(|n| MemoryId(n.to_string())));
    ids.extend([a.clone(), b.clone()]);
    let started = std::time::Instant::now();
    let recalled = store.record_access(&ids).await.expect("record");
    let took = started.elapsed();
    let got: Vec<(&MemoryId, u64)> = recalled.iter().map(|e| (&e.id, e.access_count)).collect();
    assert_eq!(
        got,
        [(&b, 1), (&a, 1)],
        "in the order of the list, each once"
    );
    // Only catches the quadratic deduplication (minutes), not a slow machine.
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
}

/// `store_batch`, which only this backend has, put through the conformance suite's
/// cancellation treatment: dropped after each of its await points in turn and at arbitrary
/// moments, it leaves the batch all stored or not at all, and both this handle and a second
/// one working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_store_batch_leaves_the_store_usable() {
    use agent_memory::conformance::cancellation::{poll_spaced_then_drop, poll_then_drop};
    use std::time::Duration;

    // How long the checks after a drop may take: only catches a hang (a lock left held).
    const HANG: Duration = Duration::from_secs(60);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let backend = SqliteBackend::open(&path).await.expect("open");
    let second = SqliteBackend::open(&path).await.expect("second handle");
    let batch = |round: usize| -> Vec<NewMemory> {
        (0..50)
            .map(|i| memory(&format!("batch {round} entry {i}"), &["batch"]))
            .collect()
    };
    let check = |round: usize, how: String| {
        let (backend, second) = (backend.clone(), second.clone());
        async move {
            for (name, b) in [("this", &backend), ("a second", &second)] {
                b.store(memory(&format!("probe {round} {name}"), &[]))
                    .await
                    .unwrap_or_else(|e| panic!("{how}: store on {name} handle: {e}"));
            }
            let landed = backend
                .search(&format!("batch {round} entry"), 100)
                .await
                .expect("search")
                .iter()
                .filter(|h| {
                    h.entry
                        .content
                        .starts_with(&format!("batch {round} entry "))
                })
                .count();
            assert!(
                landed == 0 || landed == 50,
                "{how}: {landed} of 50 batch entries landed"
            );
            assert!(
                backend.integrity_check().await.expect("check").is_sound(),
                "{how}"
            );
        }
    };
    let mut round = 0;
    for polls in 1.. {
        round += 1;
        let done = poll_then_drop(backend.store_batch(batch(round)), polls).await;
        let check = check(round, format!("dropped after {polls} polls"));
        tokio::time::timeout(HANG, check)
            .await
            .expect("the store answers");
        if let Some(result) = done {
            result.expect("store_batch");
            break;
        }
        assert!(polls < 5_000, "store_batch never completed");
    }
    for polls in [1, 2, 3, 5, 8] {
        for gap in [10, 60, 250, 1_000] {
            round += 1;
            let gap = Duration::from_micros(gap);
            let run = backend.store_batch(batch(round));
            if let Some(result) = poll_spaced_then_drop(run, polls, gap).await {
                result.expect("store_batch");
            }
            let check = check(round, format!("dropped after {polls} polls {gap:?} apart"));
            tokio::time::timeout(HANG, check)
                .await
                .expect("the store answers");
        }
    }
}

/// A schema damaged into bytes that are not UTF-8: SQLite's message quotes them, and sqlx
/// takes that message as UTF-8 unchecked. Opening fails with an error that can be shown.
#[tokio::test]
async fn a_schema_damaged_into_invalid_text_is_an_error_that_can_be_shown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.db");
    let store = SqliteBackend::open(&path).await.expect("open");
    store.store(memory("kept", &[])).await.expect("store");
    store.close().await;
    let mut bytes = std::fs::read(&path).unwrap();
    let statement = b"CREATE TABLE entries";
    let at = bytes
        .windows(statement.len())
        .position(|w| w == statement)
        .expect("the schema is in the file");
    // `CREATE TABLE entries (` → `CREATE TABLE entries \xff`: a token SQLite cannot read.
    bytes[at + statement.len() + 1] = 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let error = SqliteBackend::open(&path)
        .await
        .expect_err("a damaged schema");
    let shown = error.to_string();
    assert!(shown.contains('\u{fffd}'), "{shown}");
}
