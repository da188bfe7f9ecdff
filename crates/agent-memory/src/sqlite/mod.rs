//! [`SqliteBackend`]: memories in one SQLite file (WAL, FTS5 keyword index, exact vector
//! search over an in-memory copy of the vectors, fused with reciprocal rank fusion).
//!
//! See `docs/MEMORY.md` for the schema and the reasoning behind each choice.
//!
//! Where things are: `open` (the builder, connections, migrations, refusing foreign files and
//! other embedders), `write` (inserts, deletes, the change log's length), `read` (listings
//! and lookups), `search` (the two rankings, fusion, recording recalls), `prune`, `check`
//! (the integrity check), `cache` (the in-memory vector copy and its sync through the change
//! log) and `retry` (transactions, busy retries and why they are opened the way they are).

mod cache;
mod check;
mod open;
mod prune;
mod read;
pub(crate) mod retry;
mod saved;
mod search;
mod write;

pub use self::check::{IntegrityProblem, IntegrityReport};
pub use self::open::{Durability, SqliteBuilder};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use agent_op::{
    BoxFuture, Candidate, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError, MemoryId,
    NewMemory, PrunePolicy, PruneReport, ScoredMemory, SearchOptions, Tag,
};
use sqlx::Connection;
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use tokio::sync::Mutex;

use self::cache::{VectorCache, read_cache};
use crate::ann::IndexStatus;

/// No restrictions: what `search` and `search_candidates` use.
static UNRESTRICTED: SearchOptions = SearchOptions::new();
use self::retry::{DbError, read_tx};
use crate::clock::Clock;
use crate::common::format_id;
use crate::rank::MAX_KEYWORD_POSTINGS;

/// Memories in one SQLite file, shared safely by any number of handles, tasks and processes.
///
/// - **Storage**: WAL journal, a busy timeout, [`Durability::Normal`] by default, foreign
///   keys on, schema from migrations embedded in the crate. Entries, tags, embeddings
///   (little-endian f32 blobs) and an FTS5 keyword index live in the file, along with the
///   embedder's model name and dimension (opening with another embedder fails with
///   [`MemoryError::EmbedderMismatch`]). All SQL uses bound parameters.
/// - **Search** ([`MemoryBackend::search`]) fuses two rankings by reciprocal rank fusion
///   (k = 60), each of at least [`MIN_CANDIDATES`](crate::MIN_CANDIDATES) (or `2k`) entries:
///   - *vector*: exact cosine similarity over an in-memory copy of every vector (loaded at
///     open, kept current by replaying a change log when a search finds a commit, so writes
///     by other handles and processes are seen); only positive similarities count;
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
    /// The connection that checks whether anything was committed since the last sync (see
    /// [`SqliteBackend::unchanged_since`]); `None` once closed.
    checker: Mutex<Option<SqliteConnection>>,
    /// The one connection this handle writes through; `None` once closed.
    writer: Mutex<Option<SqliteConnection>>,
    embedder: Arc<dyn EmbeddingProvider>,
    /// The dimension recorded in the database (checked against the embedder at open).
    dimensions: usize,
    clock: Arc<dyn Clock>,
    lock_retry: Duration,
    cache: Arc<RwLock<VectorCache>>,
    /// The store's id (`store_meta.store_id`), which names it in the saved vector copy.
    store_id: String,
    /// Set while a background save of the vector copy runs.
    saving: AtomicBool,
    /// Set after this handle writes, cleared when the change log is read: the copy is surely
    /// behind, so a sync reads the log without asking first, and
    /// [`SqliteBackend::on_current_copy`] syncs before reading the copy instead of beside.
    wrote: AtomicBool,
    /// Syncs that read the change log (tests check which searches skip it).
    #[cfg(test)]
    change_log_reads: std::sync::atomic::AtomicU64,
    /// Readings of the copy done again because the database changed while they ran.
    #[cfg(test)]
    repeated_reads: std::sync::atomic::AtomicU64,
    /// Checks for commits made.
    #[cfg(test)]
    checks: std::sync::atomic::AtomicU64,
}

/// How long [`SqliteBackend::close`] waits for the background indexer before saving.
const CLOSE_WAIT: Duration = Duration::from_secs(30);
/// Unsaved changes (at least, and at least a quarter of the entries) that start a save.
const SAVE_AFTER_CHANGES: u64 = 10_000;

/// An entry row: id, content, context, created_at, accessed_at, access_count.
type EntryRow = (i64, String, String, i64, i64, i64);

impl SqliteBackend {
    /// Opens (or creates) the database at `path` with the default [`HashingEmbedder`](crate::HashingEmbedder) and
    /// options. See [`SqliteBuilder::open`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteBackend, MemoryError> {
        SqliteBackend::builder(path).open().await
    }

    /// Options for opening the database at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteBuilder {
        SqliteBuilder::new(path.as_ref().to_path_buf())
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The embedder this store uses.
    pub fn embedder(&self) -> &Arc<dyn EmbeddingProvider> {
        &self.inner.embedder
    }

    /// Saves the handle's vector copy beside the database (`<file>.vectors`, so the next
    /// open is fast; it first brings the copy up to date and waits up to 30 s for the
    /// background indexer, so the graph is saved too), then closes the connections
    /// (checkpointing the WAL when they are the last ones to the file). Later operations on
    /// this handle or its clones fail with [`MemoryError::Storage`]. Dropping every clone
    /// also closes the connections, in the background, without saving.
    pub async fn close(&self) {
        // The copy is saved up to date, with the graph when it can be: sync, then wait (a
        // while) for the background indexer. A failed sync only makes the saved copy older.
        let _ = self.sync().await;
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        while read_cache(&self.inner.cache).status().pending > 0
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A copy that cannot be saved costs only time at the next open.
        let _ = self.save_vectors().await;
        if let Some(writer) = self.inner.writer.lock().await.take() {
            // Nothing useful to do if closing fails: the connection is gone either way.
            let _ = writer.close().await;
        }
        if let Some(checker) = self.inner.checker.lock().await.take() {
            let _ = checker.close().await;
        }
        crate::pool::close(&self.inner.readers).await;
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

    /// How far this handle's approximate vector index has got, after bringing its vector
    /// copy up to date: whether it has one, how many vectors are in it and how many wait for
    /// the background indexer (searches score those exactly meanwhile).
    pub async fn index_status(&self) -> Result<IndexStatus, MemoryError> {
        self.sync().await?;
        Ok(read_cache(&self.inner.cache).status())
    }

    /// Brings the vector cache up to date with the database: one statement when nothing
    /// was committed since the last time (see [`cache::unchanged_since`]), else the change
    /// log's new rows in one read transaction (at once after this handle's own write, when
    /// the copy is behind for sure).
    async fn sync(&self) -> Result<(), MemoryError> {
        if self.inner.wrote.load(Ordering::Acquire) {
            return self.sync_from_log().await;
        }
        let cursor = read_cache(&self.inner.cache).cursor();
        if self.unchanged_since(cursor).await {
            // The graph may have caught up since: a save can be due without a change.
            self.save_in_background_if_due();
            return Ok(());
        }
        self.sync_from_log().await
    }

    /// Applies the change log's rows after the copy's position, in one read transaction
    /// (every vector again when the copy fell below the log's floor).
    async fn sync_from_log(&self) -> Result<(), MemoryError> {
        self.inner.wrote.store(false, Ordering::Release);
        #[cfg(test)]
        self.inner
            .change_log_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cache = &self.inner.cache;
        read_tx!(self, "loading vectors", |conn| {
            cache::sync(&mut *conn, cache).await?
        })?;
        self.save_in_background_if_due();
        Ok(())
    }

    /// Runs `read`, a reading of the vector copy alone (no statement of its own, done here),
    /// on a copy as new as the database was when this was called. The check that nothing
    /// was committed since runs on the checking connection's thread while `read` runs here
    /// (it is polled first, so its statement is sent before `read` starts): an unchanged
    /// store costs one reading, not a round trip and then a reading. When the check finds a
    /// commit, the log is applied and `read` runs again; after this handle's own write, when
    /// the copy is behind for sure, the log is applied first.
    async fn on_current_copy<T, F>(&self, read: impl Fn() -> F) -> Result<T, MemoryError>
    where
        F: std::future::Future<Output = Result<T, MemoryError>>,
    {
        if self.inner.wrote.load(Ordering::Acquire) {
            self.sync().await?;
            return read().await;
        }
        // Read before the check: the check then proves the copy held every commit made
        // before this call (the copy only moves forward).
        let cursor = read_cache(&self.inner.cache).cursor();
        // `join` polls in order: the check first.
        let (unchanged, result) =
            futures_util::future::join(self.unchanged_since(cursor), read()).await;
        if unchanged {
            self.save_in_background_if_due();
            return result;
        }
        #[cfg(test)]
        self.inner
            .repeated_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.sync_from_log().await?;
        read().await
    }

    /// Records that this handle wrote (see [`Inner::wrote`]).
    fn note_write(&self) {
        self.inner.wrote.store(true, Ordering::Release);
    }

    /// Whether the change log is still at `cursor` (nothing was committed since the copy
    /// was there). Any failure answers no: the full sync then retries and reports it.
    async fn unchanged_since(&self, cursor: i64) -> bool {
        if cursor < 0 {
            return false;
        }
        #[cfg(test)]
        self.inner
            .checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A connection of its own: a pooled one costs a round trip more to its thread (the
        // pool pings each connection given back). While another check holds it (until the
        // reading beside that check is done), or when it fails, a pooled one serves.
        if let Ok(mut checker) = self.inner.checker.try_lock() {
            let Some(conn) = checker.as_mut() else {
                // Closed.
                return false;
            };
            if let Ok(unchanged) = cache::unchanged_since(conn, cursor).await {
                return unchanged;
            }
        }
        let Ok(mut conn) = self.inner.readers.acquire().await else {
            return false;
        };
        matches!(cache::unchanged_since(&mut conn, cursor).await, Ok(true))
    }

    /// Starts a save of the vector copy when many changes are unsaved and the graph has
    /// caught up, so a handle that is never closed still leaves a recent copy.
    fn save_in_background_if_due(&self) {
        let due = {
            let copy = read_cache(&self.inner.cache);
            copy.unsaved >= SAVE_AFTER_CHANGES.max(copy.len() as u64 / 4)
                && copy.status().pending == 0
        };
        if !due || self.inner.saving.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.saving.store(false, Ordering::Release);
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            // Best effort: a failed save is retried after the next batch of changes.
            let _ = this.save_vectors().await;
            this.inner.saving.store(false, Ordering::Release);
        });
    }
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
        Box::pin(self.search_inner(query, k, &UNRESTRICTED))
    }

    fn search_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        Box::pin(self.search_inner(query, k, options))
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
        Box::pin(self.search_candidates_inner(query, k, &UNRESTRICTED))
    }

    fn search_candidates_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        Box::pin(self.search_candidates_inner(query, k, options))
    }

    fn record_access<'a>(
        &'a self,
        ids: &'a [MemoryId],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(self.record_access_inner(ids))
    }
}

/// The [`MemoryError`] for `e`, met while doing `what` on the file at `path`: the sqlx,
/// migration or JSON error itself is kept as the cause.
pub(crate) fn storage(path: &Path, what: &str, e: DbError) -> MemoryError {
    let location = Some(path.display().to_string());
    match e {
        DbError::Closed | DbError::Sql(sqlx::Error::PoolClosed) => MemoryError::Closed { location },
        DbError::Sql(e) => MemoryError::storage(what, location, e),
        DbError::Migrate(e) => MemoryError::storage(what, location, e),
        DbError::Encode(e) => MemoryError::storage(what, location, e),
        DbError::Corrupt(found) => MemoryError::UnexpectedData {
            operation: what.to_owned(),
            location,
            found,
        },
        DbError::Memory(e) => e,
    }
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
mod tests;
