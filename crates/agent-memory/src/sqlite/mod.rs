//! [`SqliteBackend`]: memories in one SQLite file (WAL, FTS5 keyword index, exact vector
//! search over an in-memory copy of the vectors, fused with reciprocal rank fusion).
//!
//! See `docs/MEMORY.md` for the schema and the reasoning behind each choice.

mod cache;
pub(crate) mod retry;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use agent_op::{
    BoxFuture, Candidate, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError, MemoryId,
    NewMemory, PrunePolicy, PruneReport, ScoredMemory, Tag,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::Mutex;

use self::cache::{VectorCache, read_cache};
use self::retry::{Backoff, DbError, read_tx, write_tx};
use crate::clock::{Clock, SystemClock, age_cutoff, from_micros, now_micros};
use crate::common::{
    check_embedder, cpu, distinct_ids, embed_batch_checked, embed_checked, format_id,
    normalize_tags, parse_id, validate_new, validate_query,
};
use crate::embed::HashingEmbedder;
use crate::prune::{MergeGroup, plan_work, validate};
use crate::rank::fuse;
use crate::text::{fts_match, fts_terms};
use crate::vector::{cosine, to_blob, unit};

/// The schema migrations, embedded from `crates/agent-memory/migrations`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Each of the vector and keyword searches ranks at least this many candidates (or `2k` if
/// larger) before fusion.
pub const MIN_CANDIDATES: usize = 50;

/// Keyword search reads at most this many postings (term × entry pairs): the query's terms
/// are taken rarest first while their document counts fit. See [`SqliteBackend`].
pub const MAX_KEYWORD_POSTINGS: u64 = 5_000;

/// A term must be in more entries than this (and in more than half of them) to be treated
/// as a stop word by keyword search.
const STOP_WORD_MIN_DOCS: u64 = 50;

/// Rows per multi-row `INSERT` statement when storing.
const ROWS_PER_INSERT: usize = 500;

/// Change-log rows kept when the log is trimmed; older rows go (handles further behind
/// reload every vector). Prune trims it; so does any write that finds it holding more than
/// twice this many rows.
const KEEP_CHANGES: i64 = 10_000;

/// `store_meta` keys.
const META_MODEL: &str = "embedding_model";
const META_DIMENSIONS: &str = "embedding_dimensions";
const META_CHANGES_FLOOR: &str = "changes_floor";

/// How hard SQLite works to make a commit survive a crash.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous = NORMAL` (the default). In WAL mode a commit is durable against the
    /// process crashing or being killed (SIGKILL) at any moment — the commit is in the
    /// operating system's hands once `store` returns — and the database is never corrupted.
    /// A power loss or OS crash may roll back the last commits (never corrupt the file).
    /// Commits need no `fsync`, which makes them fast.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is `fsync`ed before it returns, so commits also
    /// survive power loss, at the cost of one `fsync` per write.
    Full,
}

/// Options for opening a [`SqliteBackend`]; made by [`SqliteBackend::builder`].
pub struct SqliteBuilder {
    path: PathBuf,
    embedder: Arc<dyn EmbeddingProvider>,
    clock: Arc<dyn Clock>,
    durability: Durability,
    busy_timeout: Duration,
    lock_retry: Duration,
    read_connections: u32,
    create_if_missing: bool,
}

impl SqliteBuilder {
    /// The embedder (default: [`HashingEmbedder::new`]). Its model name and dimension are
    /// recorded when the database is created; opening the database later with a different
    /// one fails with [`MemoryError::EmbedderMismatch`].
    pub fn embedder(mut self, embedder: Arc<dyn EmbeddingProvider>) -> SqliteBuilder {
        self.embedder = embedder;
        self
    }

    /// The clock stamping creation and access times (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> SqliteBuilder {
        self.clock = clock;
        self
    }

    /// Commit durability (default [`Durability::Normal`]).
    pub fn durability(mut self, durability: Durability) -> SqliteBuilder {
        self.durability = durability;
        self
    }

    /// How long one SQLite call waits for a lock held by another connection before it
    /// reports "busy" (default 5 s; at most `i32::MAX` milliseconds).
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteBuilder {
        self.busy_timeout = timeout.min(Duration::from_millis(i32::MAX as u64));
        self
    }

    /// How long an operation keeps retrying, with backoff, after SQLite reports "busy"
    /// (default 60 s). Only after this does a lock error reach the caller.
    pub fn lock_retry(mut self, limit: Duration) -> SqliteBuilder {
        self.lock_retry = limit;
        self
    }

    /// The most connections used for reads at once (default 4, at least 1). Writes use one
    /// more connection of their own.
    pub fn read_connections(mut self, n: u32) -> SqliteBuilder {
        self.read_connections = n.max(1);
        self
    }

    /// Whether to create the file if it does not exist (default `true`).
    pub fn create_if_missing(mut self, create: bool) -> SqliteBuilder {
        self.create_if_missing = create;
        self
    }

    /// Opens (or creates) the database: sets WAL mode, applies the embedded migrations,
    /// checks the recorded embedder, and loads every vector into memory for search.
    ///
    /// A stored vector that cannot be used (wrong size, NaN or infinite values) does not make
    /// the store unopenable: its entry is left out of vector search and listed by
    /// [`SqliteBackend::corrupt_embeddings`] and [`SqliteBackend::integrity_check`].
    ///
    /// Errors: [`MemoryError::EmbedderMismatch`] if the database was built with another
    /// embedder model or dimension; [`MemoryError::InvalidInput`] for an embedder with zero
    /// dimensions; [`MemoryError::Storage`] if the file cannot be opened, is not a database,
    /// is some other program's database (it has tables but not this crate's schema: refused
    /// before anything is written to it), or was migrated by a newer version of this crate.
    pub async fn open(self) -> Result<SqliteBackend, MemoryError> {
        check_embedder(self.embedder.as_ref())?;
        let path = self.path.clone();
        let fail = |what: &str, e: DbError| storage(&path, what, e);

        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(self.create_if_missing)
            .foreign_keys(true)
            .busy_timeout(self.busy_timeout)
            .synchronous(match self.durability {
                Durability::Normal => SqliteSynchronous::Normal,
                Durability::Full => SqliteSynchronous::Full,
            });

        // Nothing below may touch a file that is some other program's database.
        refuse_foreign(&options, self.lock_retry)
            .await
            .map_err(|e| fail("opening the database", e))?;

        // Switching a new database to WAL takes a lock that SQLite's busy timeout does not
        // wait for, so the writer connection (which does it) is opened under retries.
        let writer_options = options.clone().journal_mode(SqliteJournalMode::Wal);
        let mut backoff = Backoff::new(self.lock_retry);
        let mut writer = loop {
            let attempt = writer_options.connect().await.map_err(DbError::from);
            let busy = matches!(&attempt, Err(e) if e.is_busy());
            if busy && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| fail("opening the database", e))?;
        };

        // Two processes creating the same database race on the first migration; the loser
        // fails (busy, or "already applied"), waits, and finds the migration applied.
        let mut backoff = Backoff::new(self.lock_retry);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let attempt = MIGRATOR
                .run_direct(&mut writer)
                .await
                .map_err(DbError::from);
            // Busy: retry until the deadline. A failed statement (the race above): a few
            // times. A refused migration history (e.g. from a newer version): never.
            let retry = matches!(&attempt, Err(e) if e.is_busy()
                || (attempts < 5 && matches!(e, DbError::Sql(_))));
            if attempt.is_ok() || !(retry && backoff.wait().await) {
                attempt.map_err(|e| fail("migrating the schema", e))?;
                break;
            }
        }

        check_recorded_embedder(&mut writer, self.embedder.as_ref(), self.lock_retry)
            .await
            .map_err(|e| match e {
                Recorded::Mismatch(e) => e,
                Recorded::Db(e) => fail("checking the recorded embedder", e),
            })?;

        let readers = SqlitePoolOptions::new()
            .max_connections(self.read_connections)
            .min_connections(0)
            .acquire_timeout(self.lock_retry.max(Duration::from_secs(30)))
            .connect_with(options)
            .await
            .map_err(|e| fail("opening read connections", e.into()))?;

        let backend = SqliteBackend {
            inner: Arc::new(Inner {
                path: self.path,
                readers,
                writer: Mutex::new(Some(writer)),
                cache: Arc::new(RwLock::new(VectorCache::new(self.embedder.dimensions()))),
                dimensions: self.embedder.dimensions(),
                embedder: self.embedder,
                clock: self.clock,
                lock_retry: self.lock_retry,
            }),
        };
        backend.sync().await?;
        Ok(backend)
    }
}

/// Memories in one SQLite file, shared safely by any number of handles, tasks and processes.
///
/// - **Storage**: WAL journal, a busy timeout, [`Durability::Normal`] by default, foreign
///   keys on, schema from migrations embedded in the crate. Entries, tags, embeddings
///   (little-endian f32 blobs) and an FTS5 keyword index live in the file, along with the
///   embedder's model name and dimension (opening with another embedder fails with
///   [`MemoryError::EmbedderMismatch`]). All SQL uses bound parameters.
/// - **Search** ([`MemoryBackend::search`]) fuses two rankings by reciprocal rank fusion
///   (k = 60), each of at least [`MIN_CANDIDATES`] (or `2k`) entries:
///   - *vector*: exact cosine similarity over an in-memory copy of every vector (loaded at
///     open, kept current by replaying a change log before each search, so writes by other
///     handles and processes are seen); only positive similarities count;
///   - *keyword*: FTS5 BM25 over content and context (context weighted 0.5) for the query's
///     words, each quoted so FTS5 and SQL syntax in the query is searched as text. Words are
///     used rarest first up to [`MAX_KEYWORD_POSTINGS`] entries scored in total; words in
///     more than half of the entries are stop words. A query with no words skips it.
///
///   [`ScoredMemory::score`] is the fused score divided by its maximum, in (0, 1]: 1 is
///   first in both rankings, 0.5 first in one and absent from the other (for a query with no
///   words, 1 is first in the vector ranking). The two searches run concurrently.
/// - **Memory cost**: the vector copy holds each vector as f32 and as int8 (the int8 copy
///   makes the exact scan faster; see `docs/MEMORY.md`): `5 × dimensions + ~50` bytes per
///   entry, about 1.9 KiB at 384 dimensions or 190 MiB for 100,000 entries. Peaks: twice
///   that while the copy is reloaded (at open, or after falling behind the trimmed change
///   log), plus `4 × dimensions` bytes per entry while a merge prune plans.
/// - **Prune** plans merges (O(n²)) on a read snapshot with no transaction open, then
///   applies every rule in one short write transaction that skips merges whose entries were
///   deleted meanwhile: other handles and processes keep writing while it plans.
/// - **Damaged vectors** (wrong size, NaN; never written by this crate) are left out of
///   vector search and reported by [`SqliteBackend::corrupt_embeddings`] and
///   [`SqliteBackend::integrity_check`]; the rest of the entry works as usual. A file that is
///   another program's database is refused before anything is written to it.
/// - **Locking**: writes of one handle are serialized; between handles and processes,
///   `BEGIN IMMEDIATE`, SQLite's busy timeout and retries with backoff keep "database is
///   locked" from reaching callers (see [`SqliteBuilder::lock_retry`]).
///
/// Clones share one set of connections. Needs a Tokio runtime with timers enabled.
///
/// ```
/// use agent_memory::SqliteBackend;
/// use agent_op::{MemoryBackend, NewMemory};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("memory.db");
/// let memory = SqliteBackend::open(&path).await?;
/// let id = memory
///     .store(NewMemory {
///         content: "Staging deploys need the VPN".into(),
///         context: "a failed deploy on Tuesday".into(),
///         tags: vec!["deploy".into(), "ops".into()],
///     })
///     .await?;
/// let hits = memory.search("how do I deploy to staging?", 5).await?;
/// assert_eq!(hits[0].entry.id, id);
/// assert_eq!(memory.by_tags(&["ops".into()]).await?.len(), 1);
/// memory.close().await;
///
/// // Reopened later (or by another process): everything is still there.
/// let again = SqliteBackend::open(&path).await?;
/// assert_eq!(again.count().await?, 1);
/// # Ok::<(), agent_op::MemoryError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteBackend {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    readers: SqlitePool,
    /// The one connection this handle writes through; `None` once closed.
    writer: Mutex<Option<SqliteConnection>>,
    embedder: Arc<dyn EmbeddingProvider>,
    /// The dimension recorded in the database (checked against the embedder at open).
    dimensions: usize,
    clock: Arc<dyn Clock>,
    lock_retry: Duration,
    cache: Arc<RwLock<VectorCache>>,
}

/// An entry row: id, content, context, created_at, accessed_at, access_count.
type EntryRow = (i64, String, String, i64, i64, i64);

/// A memory ready to insert: validated, tags normalized, vector encoded.
struct PreparedRow {
    content: String,
    context: String,
    tags: Vec<String>,
    vector: Vec<u8>,
}

impl PreparedRow {
    fn new(memory: NewMemory, vector: &[f32]) -> PreparedRow {
        PreparedRow {
            content: memory.content,
            context: memory.context,
            tags: normalize_tags(memory.tags)
                .into_iter()
                .map(|t| t.0)
                .collect(),
            vector: to_blob(vector),
        }
    }
}

impl SqliteBackend {
    /// Opens (or creates) the database at `path` with the default [`HashingEmbedder`] and
    /// options. See [`SqliteBuilder::open`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteBackend, MemoryError> {
        SqliteBackend::builder(path).open().await
    }

    /// Options for opening the database at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteBuilder {
        SqliteBuilder {
            path: path.as_ref().to_path_buf(),
            embedder: Arc::new(HashingEmbedder::new()),
            clock: Arc::new(SystemClock),
            durability: Durability::default(),
            busy_timeout: Duration::from_secs(5),
            lock_retry: Duration::from_secs(60),
            read_connections: 4,
            create_if_missing: true,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The embedder this store uses.
    pub fn embedder(&self) -> &Arc<dyn EmbeddingProvider> {
        &self.inner.embedder
    }

    /// Stores many memories at once: one embedding batch
    /// ([`EmbeddingProvider::embed_batch`]) and one transaction, so either all are stored or
    /// none. Returns the ids in input order.
    pub async fn store_batch(
        &self,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryId>, MemoryError> {
        for memory in &memories {
            validate_new(memory)?;
        }
        if memories.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = memories.iter().map(|m| m.content.clone()).collect();
        let vectors =
            embed_batch_checked(self.inner.embedder.as_ref(), self.inner.dimensions, &texts)
                .await?;
        let rows: Vec<PreparedRow> = memories
            .into_iter()
            .zip(&vectors)
            .map(|(m, v)| PreparedRow::new(m, v))
            .collect();
        let now = now_micros(self.inner.clock.as_ref());
        let ids = write_tx!(self, "storing memories", |conn| {
            insert(&mut *conn, &rows, now).await?
        })?;
        Ok(ids.into_iter().map(format_id).collect())
    }

    /// Closes the connections (checkpointing the WAL when they are the last ones to the
    /// file). Later operations on this handle or its clones fail with
    /// [`MemoryError::Storage`]. Dropping every clone also closes the connections, in the
    /// background.
    pub async fn close(&self) {
        if let Some(writer) = self.inner.writer.lock().await.take() {
            // Nothing useful to do if closing fails: the connection is gone either way.
            let _ = writer.close().await;
        }
        self.inner.readers.close().await;
    }

    /// Checks the file: runs `PRAGMA integrity_check` (which includes the FTS5 index) and
    /// checks every stored vector (the store's dimension, finite values) and that every entry
    /// has one. Returns `"ok"` for a sound store, else the findings, one per line: SQLite's,
    /// then `the embedding of entry N is unusable: …` and `entry N has no embedding`.
    ///
    /// The check runs on a new connection, closed afterwards: in SQLite 3.46 the FTS5 part of
    /// the check reuses the index structure a connection cached during an earlier
    /// transaction without first checking it is current, so on a pooled connection it can
    /// report "malformed inverted index" for a sound file another connection has written to
    /// since. (Queries are not affected: FTS5 revalidates its cache when a query starts.)
    pub async fn integrity_check(&self) -> Result<String, MemoryError> {
        let inner = &self.inner;
        let options = SqliteConnectOptions::new()
            .filename(&inner.path)
            .busy_timeout(Duration::from_secs(5));
        let mut backoff = Backoff::new(inner.lock_retry);
        let dimensions = inner.dimensions;
        let lines = loop {
            let attempt: Result<Vec<String>, DbError> = async {
                let mut conn = options.connect().await?;
                let rows: Vec<(String,)> = sqlx::query_as("PRAGMA integrity_check")
                    .fetch_all(&mut conn)
                    .await?;
                let mut lines: Vec<String> = rows
                    .into_iter()
                    .map(|(line,)| line)
                    .filter(|line| line != "ok")
                    .collect();
                lines.extend(check_embeddings(&mut conn, dimensions).await?);
                conn.close().await?;
                Ok(lines)
            }
            .await;
            let busy = matches!(&attempt, Err(e) if e.is_busy());
            if busy && backoff.wait().await {
                continue;
            }
            break attempt.map_err(|e| storage(&inner.path, "checking integrity", e))?;
        };
        if lines.is_empty() {
            return Ok("ok".to_owned());
        }
        Ok(lines.join("\n"))
    }

    /// The entries whose stored vector is unusable (wrong size, NaN or infinite values —
    /// damage from outside this crate), ascending. They are left out of vector search; their
    /// other data is intact and keyword search, `get`, listings, recall and prune work on
    /// them as usual. Read from this handle's vector copy after bringing it up to date; see
    /// [`integrity_check`](SqliteBackend::integrity_check) for a check of the file itself.
    pub async fn corrupt_embeddings(&self) -> Result<Vec<MemoryId>, MemoryError> {
        self.sync().await?;
        Ok(read_cache(&self.inner.cache)
            .corrupt()
            .into_iter()
            .map(format_id)
            .collect())
    }

    /// Brings the vector cache up to date with the database.
    async fn sync(&self) -> Result<(), MemoryError> {
        let cache = &self.inner.cache;
        read_tx!(self, "loading vectors", |conn| {
            cache::sync(&mut *conn, cache).await?
        })
    }

    async fn store_inner(&self, memory: NewMemory) -> Result<MemoryId, MemoryError> {
        validate_new(&memory)?;
        let vector = embed_checked(
            self.inner.embedder.as_ref(),
            self.inner.dimensions,
            &memory.content,
        )
        .await?;
        let row = PreparedRow::new(memory, &vector);
        let now = now_micros(self.inner.clock.as_ref());
        let ids = write_tx!(self, "storing a memory", |conn| {
            insert(&mut *conn, std::slice::from_ref(&row), now).await?
        })?;
        ids.into_iter()
            .next()
            .map(format_id)
            .ok_or_else(|| MemoryError::Storage("storing a memory: no id was assigned".to_owned()))
    }

    /// The fused ranking for `query`: the best `k` entry ids with their scores, best first,
    /// and the query's unit vector. Records nothing.
    async fn rank(&self, query: &str, k: usize) -> Result<Ranking, MemoryError> {
        validate_query(query)?;
        if k == 0 {
            return Ok(Ranking::default());
        }
        let vector =
            embed_checked(self.inner.embedder.as_ref(), self.inner.dimensions, query).await?;
        let query_unit = unit(&vector);
        self.sync().await?;
        let candidates = k.saturating_mul(2).max(MIN_CANDIDATES);

        // The vector scan (CPU, off the executor when large) and the keyword search (on
        // SQLite's connection thread) run at the same time.
        let entries = read_cache(&self.inner.cache).len();
        let cache = self.inner.cache.clone();
        let vector_scan = cpu(entries * vector.len(), move || {
            read_cache(&cache)
                .search(&vector, candidates)
                .into_iter()
                .map(|hit| hit.id)
                .collect::<Vec<i64>>()
        });
        let terms = fts_terms(query);
        let keywords = async {
            if terms.is_empty() {
                return Ok(Vec::new());
            }
            let limit = i64::try_from(candidates).unwrap_or(i64::MAX);
            read_tx!(self, "searching keywords", |conn| {
                keyword_search(&mut *conn, &terms, entries as u64, limit).await?
            })
        };
        let (vector_hits, keyword_hits) = tokio::join!(vector_scan, keywords);
        let (vector_hits, keyword_hits) = (vector_hits?, keyword_hits?);

        let fused = if terms.is_empty() {
            fuse(&[&vector_hits], k)
        } else {
            fuse(&[&vector_hits, &keyword_hits], k)
        };
        Ok(Ranking { fused, query_unit })
    }

    async fn search_inner(&self, query: &str, k: usize) -> Result<Vec<ScoredMemory>, MemoryError> {
        let ranking = self.rank(query, k).await?;
        if ranking.fused.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ranking.fused.iter().map(|(id, _)| *id).collect();
        let mut by_id = self.recall(&ids).await?;
        Ok(ranking
            .fused
            .into_iter()
            .filter_map(|(id, score)| {
                // Deleted since it was ranked: not a result any more.
                let entry = by_id.remove(&id)?;
                Some(ScoredMemory { entry, score })
            })
            .collect())
    }

    async fn search_candidates_inner(
        &self,
        query: &str,
        k: usize,
    ) -> Result<Vec<Candidate>, MemoryError> {
        let ranking = self.rank(query, k).await?;
        if ranking.fused.is_empty() {
            return Ok(Vec::new());
        }
        let ids_json = json_ids(&ranking.fused.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        let (cache, dimensions) = (&self.inner.cache, self.inner.dimensions);
        let query_unit = &ranking.query_unit;
        let (found, mut similarities) = read_tx!(self, "reading search candidates", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT id, content, context, created_at, accessed_at, access_count \
                 FROM entries WHERE id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids_json)
            .fetch_all(&mut *conn)
            .await?;
            let ids: Vec<i64> = rows.iter().map(|row| row.0).collect();
            let similarities =
                candidate_similarities(&mut *conn, cache, dimensions, query_unit, &ids).await?;
            (with_tags(&mut *conn, rows).await?, similarities)
        })?;
        let mut by_id: HashMap<MemoryId, MemoryEntry> =
            found.into_iter().map(|e| (e.id.clone(), e)).collect();
        Ok(ranking
            .fused
            .into_iter()
            .filter_map(|(id, score)| {
                let entry = by_id.remove(&format_id(id))?;
                Some(Candidate {
                    hit: ScoredMemory { entry, score },
                    similarity: similarities.remove(&id),
                })
            })
            .collect())
    }

    /// Records a recall of the entries `ids` (access time now — never moved back — and count
    /// + 1) in one write transaction; returns the updated entries that still exist.
    async fn recall(&self, ids: &[i64]) -> Result<HashMap<i64, MemoryEntry>, MemoryError> {
        let ids_json = json_ids(ids);
        let now = now_micros(self.inner.clock.as_ref());
        let recalled = write_tx!(self, "recording a recall", |conn| {
            // `max`: `now` was read before waiting for the lock, and other processes' clocks
            // may be behind; an access time never moves back.
            let rows: Vec<EntryRow> = sqlx::query_as(
                "UPDATE entries SET accessed_at = max(accessed_at, ?1), \
                     access_count = access_count + 1 \
                 WHERE id IN (SELECT value FROM json_each(?2)) \
                 RETURNING id, content, context, created_at, accessed_at, access_count",
            )
            .bind(now)
            .bind(&ids_json)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })?;
        Ok(recalled
            .into_iter()
            .filter_map(|e| Some((parse_id(&e.id)?, e)))
            .collect())
    }

    async fn record_access_inner(&self, ids: &[MemoryId]) -> Result<Vec<MemoryEntry>, MemoryError> {
        let rows = distinct_ids(ids);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut by_id = self.recall(&rows).await?;
        Ok(rows.iter().filter_map(|n| by_id.remove(n)).collect())
    }

    async fn recent_inner(&self, n: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        read_tx!(self, "listing recent memories", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT id, content, context, created_at, accessed_at, access_count \
                 FROM entries ORDER BY created_at DESC, id DESC LIMIT ?1",
            )
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })
    }

    async fn by_tags_inner(&self, tags: &[Tag]) -> Result<Vec<MemoryEntry>, MemoryError> {
        let wanted: Vec<String> = normalize_tags(tags.to_vec())
            .into_iter()
            .map(|t| t.0)
            .collect();
        if wanted.is_empty() {
            return self.recent_inner(usize::MAX).await;
        }
        let tags_json = json_strings(&wanted);
        let need = i64::try_from(wanted.len()).unwrap_or(i64::MAX);
        read_tx!(self, "listing memories by tag", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT e.id, e.content, e.context, e.created_at, e.accessed_at, e.access_count \
                 FROM entries e JOIN ( \
                     SELECT entry_id FROM entry_tags \
                     WHERE tag IN (SELECT value FROM json_each(?1)) \
                     GROUP BY entry_id HAVING count(*) = ?2 \
                 ) m ON m.entry_id = e.id \
                 ORDER BY e.created_at DESC, e.id DESC",
            )
            .bind(&tags_json)
            .bind(need)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })
    }

    async fn delete_inner(&self, id: &MemoryId) -> Result<bool, MemoryError> {
        let Some(n) = parse_id(id) else {
            return Ok(false);
        };
        write_tx!(self, "deleting a memory", |conn| {
            let done = sqlx::query("DELETE FROM entries WHERE id = ?1")
                .bind(n)
                .execute(&mut *conn)
                .await?;
            trim_change_log_if_long(&mut *conn).await?;
            done.rows_affected() > 0
        })
    }

    async fn get_inner(&self, id: &MemoryId) -> Result<Option<MemoryEntry>, MemoryError> {
        let Some(n) = parse_id(id) else {
            return Ok(None);
        };
        let found = read_tx!(self, "reading a memory", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT id, content, context, created_at, accessed_at, access_count \
                 FROM entries WHERE id = ?1",
            )
            .bind(n)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })?;
        Ok(found.into_iter().next())
    }

    async fn count_inner(&self) -> Result<u64, MemoryError> {
        let count = read_tx!(self, "counting memories", |conn| {
            let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM entries")
                .fetch_one(&mut *conn)
                .await?;
            count
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn prune_inner(&self, policy: &PrunePolicy) -> Result<PruneReport, MemoryError> {
        validate(policy)?;
        let now = now_micros(self.inner.clock.as_ref());
        let cutoff = policy.max_age.and_then(|age| age_cutoff(now, age));
        // Merges are planned first, on a read snapshot and outside any write transaction
        // (planning is O(n²)); the write transaction below only applies them.
        let merges = match policy.merge_similarity {
            Some(threshold) => self.plan_merges(threshold, cutoff).await?,
            None => Vec::new(),
        };
        write_tx!(self, "pruning", |conn| {
            let mut report = PruneReport::default();
            if let Some(cutoff) = cutoff {
                let done = sqlx::query("DELETE FROM entries WHERE accessed_at < ?1")
                    .bind(cutoff)
                    .execute(&mut *conn)
                    .await?;
                report.removed += done.rows_affected();
            }
            report.merged += apply_merges(&mut *conn, &merges).await?;
            if let Some(max) = policy.max_entries {
                let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM entries")
                    .fetch_one(&mut *conn)
                    .await?;
                let max = i64::try_from(max).unwrap_or(i64::MAX);
                if count > max {
                    let done = sqlx::query(
                        "DELETE FROM entries WHERE id IN (SELECT id FROM entries \
                         ORDER BY access_count, accessed_at, id LIMIT ?1)",
                    )
                    .bind(count - max)
                    .execute(&mut *conn)
                    .await?;
                    report.removed += done.rows_affected();
                }
            }
            trim_change_log(&mut *conn).await?;
            report
        })
    }

    /// Plans the merge rule on a read snapshot: the entries the age rule (`cutoff`) keeps,
    /// with the vectors of this handle's copy (brought up to date in the same snapshot).
    /// Copying the vectors (O(n · dimensions)) and comparing them (O(n²)) both run on the
    /// blocking pool when large, holding the copy's lock only a chunk at a time while copying
    /// and no lock while comparing.
    async fn plan_merges(
        &self,
        threshold: f32,
        cutoff: Option<i64>,
    ) -> Result<Vec<MergeGroup>, MemoryError> {
        let cache = &self.inner.cache;
        let entries = read_tx!(self, "planning merges", |conn| {
            cache::sync(&mut *conn, cache).await?;
            let rows: Vec<(i64, i64)> =
                // Oldest first: the order planning visits them in.
                sqlx::query_as(
                    "SELECT id, created_at FROM entries WHERE accessed_at >= ?1 \
                     ORDER BY created_at, id",
                )
                    .bind(cutoff.unwrap_or(i64::MIN))
                    .fetch_all(&mut *conn)
                    .await?;
            rows
        })?;
        // The copy is read after the transaction, and other tasks may sync it meanwhile;
        // it still holds the snapshot's vector of every entry listed that was not deleted
        // since. The copy was synced in the snapshot, so it had them all; later syncs only
        // add entries (not listed, so ignored), drop deleted ones (planning without them is
        // what applying the plan would do anyway: it skips merges of deleted entries), or
        // reload the same vectors — a stored vector never changes and ids are never reused.
        let cache = Arc::clone(cache);
        let work = plan_work(entries.len(), self.inner.dimensions);
        cpu(work, move || {
            cache::merge_set(&cache, &entries).plan(threshold)
        })
        .await
    }
}

/// A fused search ranking: entry ids with scores, best first, and the query's unit vector.
#[derive(Default)]
struct Ranking {
    fused: Vec<(i64, f32)>,
    query_unit: Vec<f32>,
}

impl fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.inner.path)
            .field("embedder", &self.inner.embedder.model())
            .finish_non_exhaustive()
    }
}

impl MemoryBackend for SqliteBackend {
    fn store(&self, memory: NewMemory) -> BoxFuture<'_, Result<MemoryId, MemoryError>> {
        Box::pin(self.store_inner(memory))
    }

    fn search<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        Box::pin(self.search_inner(query, k))
    }

    fn recent(&self, n: usize) -> BoxFuture<'_, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(self.recent_inner(n))
    }

    fn by_tags<'a>(
        &'a self,
        tags: &'a [Tag],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(self.by_tags_inner(tags))
    }

    fn prune<'a>(
        &'a self,
        policy: &'a PrunePolicy,
    ) -> BoxFuture<'a, Result<PruneReport, MemoryError>> {
        Box::pin(self.prune_inner(policy))
    }

    fn delete<'a>(&'a self, id: &'a MemoryId) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(self.delete_inner(id))
    }

    fn get<'a>(
        &'a self,
        id: &'a MemoryId,
    ) -> BoxFuture<'a, Result<Option<MemoryEntry>, MemoryError>> {
        Box::pin(self.get_inner(id))
    }

    fn count(&self) -> BoxFuture<'_, Result<u64, MemoryError>> {
        Box::pin(self.count_inner())
    }

    /// The hits of [`search`](MemoryBackend::search) (same order, same fused scores),
    /// unrecorded, each with the cosine similarity of the query's vector and the entry's:
    /// from the vector copy, or read from the file for an entry the copy does not hold yet
    /// (stored by another handle while the search ran). `None` only for an entry whose
    /// stored vector is unusable (see [`SqliteBackend::corrupt_embeddings`]).
    fn search_candidates<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        Box::pin(self.search_candidates_inner(query, k))
    }

    fn record_access<'a>(
        &'a self,
        ids: &'a [MemoryId],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(self.record_access_inner(ids))
    }
}

/// `MemoryError::Storage` naming the operation and the file.
pub(crate) fn storage(path: &Path, what: &str, e: DbError) -> MemoryError {
    MemoryError::Storage(format!("{what} ({}): {e}", path.display()))
}

/// Inserts prepared memories (entries, embeddings, tags) with multi-row statements; returns
/// their row ids in order. Must run in the write transaction: ids are assigned here, after
/// the largest ever used (so ids are never reused, as with `AUTOINCREMENT`).
async fn insert(
    conn: &mut SqliteConnection,
    rows: &[PreparedRow],
    now: i64,
) -> Result<Vec<i64>, DbError> {
    let (first,): (i64,) = sqlx::query_as(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'entries'), 0), \
                    coalesce((SELECT max(id) FROM entries), 0)) + 1",
    )
    .fetch_one(&mut *conn)
    .await?;
    let ids: Vec<i64> = (first..).take(rows.len()).collect();
    let mut tag_pairs: Vec<(i64, &str)> = Vec::new();
    for (chunk, chunk_ids) in rows
        .chunks(ROWS_PER_INSERT)
        .zip(ids.chunks(ROWS_PER_INSERT))
    {
        let sql = Bulk::Entries.sql(chunk.len());
        let mut query = sqlx::query(&sql);
        for (row, id) in chunk.iter().zip(chunk_ids) {
            query = query
                .bind(*id)
                .bind(&row.content)
                .bind(&row.context)
                .bind(now)
                .bind(now);
        }
        query.execute(&mut *conn).await?;

        let sql = Bulk::Embeddings.sql(chunk.len());
        let mut query = sqlx::query(&sql);
        for (row, id) in chunk.iter().zip(chunk_ids) {
            query = query.bind(*id).bind(&row.vector);
        }
        query.execute(&mut *conn).await?;

        for (row, id) in chunk.iter().zip(chunk_ids) {
            tag_pairs.extend(row.tags.iter().map(|t| (*id, t.as_str())));
        }
    }
    if !tag_pairs.is_empty() {
        // Tags are user text: they travel as one bound JSON document, never as SQL.
        let json = serde_json::to_string(&tag_pairs)
            .map_err(|e| DbError::Other(format!("encoding tags: {e}")))?;
        sqlx::query(
            "INSERT INTO entry_tags (entry_id, tag) SELECT value ->> 0, value ->> 1 FROM json_each(?1)",
        )
        .bind(json)
        .execute(&mut *conn)
        .await?;
    }
    trim_change_log_if_long(&mut *conn).await?;
    Ok(ids)
}

/// The tables filled with multi-row `INSERT` statements.
#[derive(Copy, Clone)]
enum Bulk {
    Entries,
    Embeddings,
}

impl Bulk {
    /// The `INSERT` of `n` rows into this table. Only the count shapes the SQL; values are
    /// always bound. The full-size statement ([`ROWS_PER_INSERT`] rows) is built once.
    fn sql(self, n: usize) -> std::borrow::Cow<'static, str> {
        static ENTRIES: OnceLock<String> = OnceLock::new();
        static EMBEDDINGS: OnceLock<String> = OnceLock::new();
        let (prefix, row, full) = match self {
            Bulk::Entries => (
                "INSERT INTO entries (id, content, context, created_at, accessed_at, access_count) VALUES ",
                "(?, ?, ?, ?, ?, 0)",
                &ENTRIES,
            ),
            Bulk::Embeddings => (
                "INSERT INTO embeddings (entry_id, vector) VALUES ",
                "(?, ?)",
                &EMBEDDINGS,
            ),
        };
        let build = |n: usize| {
            let mut sql = String::with_capacity(prefix.len() + n * (row.len() + 2));
            sql.push_str(prefix);
            for i in 0..n {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(row);
            }
            sql
        };
        if n == ROWS_PER_INSERT {
            std::borrow::Cow::Borrowed(full.get_or_init(|| build(n)).as_str())
        } else {
            std::borrow::Cow::Owned(build(n))
        }
    }
}

/// The keyword ranking: entry ids best first by BM25 (content weight 1, context 0.5), at
/// most `limit`.
///
/// Which terms are searched: BM25 must score every entry a term occurs in, so each term's
/// document count is probed first (counting stops at [`MAX_KEYWORD_POSTINGS`] + 1). Terms
/// are then taken rarest first while their counts add up to at most
/// [`MAX_KEYWORD_POSTINGS`]; a term in more than half of the `entries` (and more than
/// [`STOP_WORD_MIN_DOCS`]) is a stop word and skipped — BM25 gives it no weight. In small
/// stores every other term is used; in large ones, common words are left to vector search.
async fn keyword_search(
    conn: &mut SqliteConnection,
    terms: &[String],
    entries: u64,
    limit: i64,
) -> Result<Vec<i64>, DbError> {
    let cap = i64::try_from(MAX_KEYWORD_POSTINGS + 1).unwrap_or(i64::MAX);
    let cap_param = terms.len() + 1;
    let sql = (1..=terms.len())
        .map(|i| {
            format!(
                "SELECT {i}, count(*) FROM (SELECT 1 FROM entries_fts \
                 WHERE entries_fts MATCH ?{i} LIMIT ?{cap_param})"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut probe = sqlx::query_as::<_, (i64, i64)>(&sql);
    for term in terms {
        probe = probe.bind(fts_match(&[term.as_str()]));
    }
    let counts = probe.bind(cap).fetch_all(&mut *conn).await?;
    let mut ranked: Vec<(u64, &str)> = counts
        .into_iter()
        .filter_map(|(i, docs)| {
            let term = terms.get(usize::try_from(i - 1).ok()?)?;
            Some((u64::try_from(docs).unwrap_or(0), term.as_str()))
        })
        .filter(|(docs, _)| *docs <= STOP_WORD_MIN_DOCS || docs.saturating_mul(2) <= entries)
        .collect();
    ranked.sort_by_key(|(docs, _)| *docs);
    let mut budget = MAX_KEYWORD_POSTINGS;
    let mut chosen = Vec::new();
    for (docs, term) in ranked {
        if docs == 0 {
            continue;
        }
        if docs > budget {
            break;
        }
        budget -= docs;
        chosen.push(term);
    }
    let Some(expr) = fts_match(&chosen) else {
        return Ok(Vec::new());
    };
    let rows: Vec<(i64,)> = sqlx::query_as(
        "SELECT rowid FROM entries_fts WHERE entries_fts MATCH ?1 \
         ORDER BY bm25(entries_fts, 1.0, 0.5), rowid LIMIT ?2",
    )
    .bind(expr)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// Turns entry rows into entries, loading their tags (sorted).
async fn with_tags(
    conn: &mut SqliteConnection,
    rows: Vec<EntryRow>,
) -> Result<Vec<MemoryEntry>, DbError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let tag_rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT entry_id, tag FROM entry_tags \
         WHERE entry_id IN (SELECT value FROM json_each(?1)) ORDER BY entry_id, tag",
    )
    .bind(json_ids(&ids))
    .fetch_all(&mut *conn)
    .await?;
    let mut tags: HashMap<i64, Vec<Tag>> = HashMap::new();
    for (id, tag) in tag_rows {
        tags.entry(id).or_default().push(Tag(tag));
    }
    Ok(rows
        .into_iter()
        .map(
            |(id, content, context, created, accessed, count)| MemoryEntry {
                id: format_id(id),
                content,
                context,
                tags: tags.remove(&id).unwrap_or_default(),
                created_at: from_micros(created),
                accessed_at: from_micros(accessed),
                access_count: u64::try_from(count).unwrap_or(0),
            },
        )
        .collect())
}

/// The cosine similarity of the unit vector `query` and the vector of each of `ids` that has
/// a usable one. `conn` must be in the read transaction the ids were read in.
///
/// Most come from the vector copy. An id the copy lacks — stored by another handle after the
/// copy was last synced (the keyword search reads a newer snapshot than the sync), or
/// removed from it by a later sync — has its vector read from `conn`'s snapshot and decoded
/// here, so a usable vector is never missed. Taking some from the copy and some from the
/// file is consistent because a stored vector never changes and ids are never reused. Ids
/// left out have no usable vector (damaged, see [`cache::decode`]).
async fn candidate_similarities(
    conn: &mut SqliteConnection,
    cache: &RwLock<VectorCache>,
    dimensions: usize,
    query: &[f32],
    ids: &[i64],
) -> Result<HashMap<i64, f32>, DbError> {
    let mut found = HashMap::with_capacity(ids.len());
    let mut missing = Vec::new();
    {
        // A few dot products: cheap enough to do under the lock on the executor.
        let copy = read_cache(cache);
        for &id in ids {
            match copy.similarity(query, id) {
                Some(similarity) => {
                    found.insert(id, similarity);
                }
                None => missing.push(id),
            }
        }
    }
    if missing.is_empty() {
        return Ok(found);
    }
    let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings \
         WHERE entry_id IN (SELECT value FROM json_each(?1))",
    )
    .bind(json_ids(&missing))
    .fetch_all(&mut *conn)
    .await?;
    for (id, blob) in rows {
        if let Ok(vector) = cache::decode(&blob, dimensions) {
            // As the copy holds it: scaled to unit length.
            found.insert(id, cosine(query, &unit(&vector)));
        }
    }
    Ok(found)
}

/// Applies planned merges inside the prune transaction; returns how many entries were
/// absorbed. The plan was made on an earlier snapshot, so it is checked first: a pair whose
/// keeper or absorbed entry is gone (deleted, or merged by another handle meanwhile) is
/// skipped. A few set-based statements over a temporary table, whatever the number of
/// groups, keep the write lock short.
async fn apply_merges(conn: &mut SqliteConnection, groups: &[MergeGroup]) -> Result<u64, DbError> {
    let pairs: Vec<[i64; 2]> = groups
        .iter()
        .flat_map(|g| g.absorbed.iter().map(move |a| [g.keeper, *a]))
        .collect();
    if pairs.is_empty() {
        return Ok(0);
    }
    let pairs = serde_json::to_string(&pairs)
        .map_err(|e| DbError::Other(format!("encoding the merge plan: {e}")))?;
    for sql in [
        "CREATE TEMP TABLE IF NOT EXISTS prune_merges \
             (absorbed INTEGER PRIMARY KEY, keeper INTEGER NOT NULL)",
        "CREATE INDEX IF NOT EXISTS temp.prune_merges_by_keeper ON prune_merges (keeper)",
        "DELETE FROM temp.prune_merges",
    ] {
        sqlx::query(sql).execute(&mut *conn).await?;
    }
    sqlx::query(
        "INSERT INTO temp.prune_merges (keeper, absorbed) \
         SELECT value ->> 0, value ->> 1 FROM json_each(?1)",
    )
    .bind(pairs)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "DELETE FROM temp.prune_merges \
         WHERE keeper NOT IN (SELECT id FROM main.entries) \
            OR absorbed NOT IN (SELECT id FROM main.entries)",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE main.entries SET \
             access_count = access_count + (SELECT coalesce(sum(e.access_count), 0) \
                 FROM temp.prune_merges m JOIN main.entries e ON e.id = m.absorbed \
                 WHERE m.keeper = entries.id), \
             accessed_at = max(accessed_at, (SELECT coalesce(max(e.accessed_at), 0) \
                 FROM temp.prune_merges m JOIN main.entries e ON e.id = m.absorbed \
                 WHERE m.keeper = entries.id)) \
         WHERE id IN (SELECT keeper FROM temp.prune_merges)",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT OR IGNORE INTO main.entry_tags (entry_id, tag) \
         SELECT m.keeper, t.tag FROM temp.prune_merges m \
         JOIN main.entry_tags t ON t.entry_id = m.absorbed",
    )
    .execute(&mut *conn)
    .await?;
    let done = sqlx::query(
        "DELETE FROM main.entries WHERE id IN (SELECT absorbed FROM temp.prune_merges)",
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM temp.prune_merges")
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}

/// Trims the change log when it holds more than twice [`KEEP_CHANGES`] rows (two indexed
/// look-ups otherwise). Run by every write that adds to the log, so the log stays bounded
/// even if prune never runs.
async fn trim_change_log_if_long(conn: &mut SqliteConnection) -> Result<(), DbError> {
    let (first, last): (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT (SELECT min(seq) FROM changes), (SELECT max(seq) FROM changes)")
            .fetch_one(&mut *conn)
            .await?;
    if let (Some(first), Some(last)) = (first, last) {
        if last - first >= 2 * KEEP_CHANGES {
            trim_change_log(conn).await?;
        }
    }
    Ok(())
}

/// Checks every stored vector (size, finite values) and that every entry has one; the
/// findings of [`SqliteBackend::integrity_check`] beyond SQLite's own.
async fn check_embeddings(
    conn: &mut SqliteConnection,
    dimensions: usize,
) -> Result<Vec<String>, DbError> {
    let mut findings = Vec::new();
    let mut rows = sqlx::query_as::<_, (i64, Vec<u8>)>(
        "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings ORDER BY entry_id",
    )
    .fetch(&mut *conn);
    while let Some((id, blob)) = futures_util::TryStreamExt::try_next(&mut rows).await? {
        if let Err(why) = cache::decode(&blob, dimensions) {
            findings.push(format!("the embedding of entry {id} is unusable: {why}"));
        }
    }
    drop(rows);
    let missing: Vec<(i64,)> = sqlx::query_as(
        "SELECT id FROM entries WHERE id NOT IN (SELECT entry_id FROM embeddings) ORDER BY id",
    )
    .fetch_all(&mut *conn)
    .await?;
    findings.extend(
        missing
            .into_iter()
            .map(|(id,)| format!("entry {id} has no embedding")),
    );
    Ok(findings)
}

/// Refuses a file that is some other program's database — it has tables, but not this
/// crate's migration history — before anything writes to it (switching it to WAL, creating
/// the migrations table). A new or empty file passes, and so does one where creating the
/// store was interrupted (only an empty `_sqlx_migrations` table).
async fn refuse_foreign(
    options: &SqliteConnectOptions,
    lock_retry: Duration,
) -> Result<(), DbError> {
    let mut backoff = Backoff::new(lock_retry);
    loop {
        let attempt: Result<(), DbError> = async {
            let mut conn = options.connect().await?;
            let verdict = check_ours(&mut conn).await;
            // Read-only: nothing to lose if closing fails.
            let _ = conn.close().await;
            verdict
        }
        .await;
        let busy = matches!(&attempt, Err(e) if e.is_busy());
        if busy && backoff.wait().await {
            continue;
        }
        return attempt;
    }
}

/// See [`refuse_foreign`].
async fn check_ours(conn: &mut SqliteConnection) -> Result<(), DbError> {
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT name FROM sqlite_schema WHERE type = 'table' \
         AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let names: Vec<&str> = tables.iter().map(|(name,)| name.as_str()).collect();
    if names.is_empty() {
        return Ok(());
    }
    if names.contains(&"_sqlx_migrations") {
        let applied: Vec<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations")
                .fetch_all(&mut *conn)
                .await?;
        if applied.is_empty() && names == ["_sqlx_migrations"] {
            return Ok(());
        }
        let ours = MIGRATOR.iter().next().is_some_and(|first| {
            applied.iter().any(|(version, checksum)| {
                *version == first.version && *checksum == *first.checksum
            })
        });
        if ours {
            return Ok(());
        }
    }
    const SHOWN: usize = 8;
    let mut shown = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        shown.push_str(&format!(", … ({} tables)", names.len()));
    }
    Err(DbError::Other(format!(
        "this file is not an agent-memory store: it holds other tables ({shown}) and not this \
         crate's schema; refusing to modify it (nothing was changed)"
    )))
}

/// Drops change-log rows more than [`KEEP_CHANGES`] behind the newest and raises the floor.
async fn trim_change_log(conn: &mut SqliteConnection) -> Result<(), DbError> {
    let (last,): (i64,) = sqlx::query_as("SELECT coalesce(max(seq), 0) FROM changes")
        .fetch_one(&mut *conn)
        .await?;
    let floor = last - KEEP_CHANGES;
    if floor <= 0 {
        return Ok(());
    }
    sqlx::query("DELETE FROM changes WHERE seq <= ?1")
        .bind(floor)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "INSERT INTO store_meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(META_CHANGES_FLOOR)
    .bind(floor.to_string())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

enum Recorded {
    Mismatch(MemoryError),
    Db(DbError),
}

impl From<sqlx::Error> for Recorded {
    fn from(e: sqlx::Error) -> Recorded {
        Recorded::Db(e.into())
    }
}

/// Records the embedder in a new database, or checks it against the recorded one.
async fn check_recorded_embedder(
    writer: &mut SqliteConnection,
    embedder: &dyn EmbeddingProvider,
    lock_retry: Duration,
) -> Result<(), Recorded> {
    let model = embedder.model().to_owned();
    let dimensions = embedder.dimensions();
    let mut backoff = Backoff::new(lock_retry);
    let (stored_model, stored_dimensions) = loop {
        let attempt: Result<(String, String), DbError> = async {
            let mut tx = retry::begin_immediate(writer).await?;
            for (key, value) in [
                (META_MODEL, model.clone()),
                (META_DIMENSIONS, dimensions.to_string()),
            ] {
                sqlx::query("INSERT OR IGNORE INTO store_meta (key, value) VALUES (?1, ?2)")
                    .bind(key)
                    .bind(value)
                    .execute(&mut *tx)
                    .await?;
            }
            let rows: Vec<(String, String)> =
                sqlx::query_as("SELECT key, value FROM store_meta WHERE key IN (?1, ?2)")
                    .bind(META_MODEL)
                    .bind(META_DIMENSIONS)
                    .fetch_all(&mut *tx)
                    .await?;
            tx.commit().await?;
            let get = |key: &str| {
                rows.iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| DbError::Corrupt(format!("store_meta.{key} is missing")))
            };
            Ok((get(META_MODEL)?, get(META_DIMENSIONS)?))
        }
        .await;
        let busy = matches!(&attempt, Err(e) if e.is_busy());
        if busy && backoff.wait().await {
            continue;
        }
        break attempt.map_err(Recorded::Db)?;
    };
    let parsed_dimensions = stored_dimensions.parse::<usize>().map_err(|_| {
        Recorded::Db(DbError::Corrupt(format!(
            "store_meta.{META_DIMENSIONS} is {stored_dimensions:?}"
        )))
    })?;
    if stored_model != model || parsed_dimensions != dimensions {
        return Err(Recorded::Mismatch(MemoryError::EmbedderMismatch {
            stored_model,
            stored_dimensions: parsed_dimensions,
            given_model: model,
            given_dimensions: dimensions,
        }));
    }
    Ok(())
}

/// A JSON array of integers, for `json_each(?)` (the ids are ours, never user text).
fn json_ids(ids: &[i64]) -> String {
    let mut out = String::with_capacity(ids.len() * 8 + 2);
    out.push('[');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&id.to_string());
    }
    out.push(']');
    out
}

/// A JSON array of strings, for `json_each(?)`, bound as a parameter.
fn json_strings(items: &[String]) -> String {
    // Serializing a list of strings cannot fail.
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(content: &str) -> NewMemory {
        NewMemory {
            content: content.to_owned(),
            context: String::new(),
            tags: vec![Tag::from(content)],
        }
    }

    #[tokio::test]
    async fn similarities_of_entries_the_copy_lacks_are_read_from_the_snapshot() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("m.db");
        let store = SqliteBackend::open(&path).await.expect("open");
        let other = SqliteBackend::open(&path).await.expect("open");
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
        let empty = RwLock::new(VectorCache::new(dimensions));
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
        let path = dir.path().join("m.db");
        let store = SqliteBackend::open(&path).await.expect("open");
        let other = SqliteBackend::open(&path).await.expect("open");
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
        assert_eq!(store.integrity_check().await.expect("integrity"), "ok");
    }
}
