//! [`PostgresBackend`]: memories in a PostgreSQL database with pgvector (an HNSW index for
//! vector search, full-text search for keywords, fused with reciprocal rank fusion).
//!
//! See `docs/MEMORY.md` ("The PostgreSQL backend") for the schema and the reasoning behind
//! each choice.
//!
//! Where things are: `open` (the builder, the pool, migrations, refusing foreign schemas
//! and other embedders), `pgvector` (finding, creating and versioning the extension),
//! `write` (inserts, bulk loads and deletes), `copy` (the binary `COPY` format of bulk
//! loads), `read` (listings and lookups), `search` (the vector ranking, fusion, recording
//! recalls), `keywords` (the full-text ranking from keyword postings, and the SQL of search
//! filters), `prune`, `retry` (errors, transactions and retries of deadlocks and
//! serialization failures) and `lease` (what a dropped operation leaves running, and how
//! the handle waits for it).

mod copy;
mod keywords;
mod lease;
mod open;
mod pgvector;
mod prune;
mod read;
mod retry;
mod search;
#[cfg(test)]
mod tests;
mod write;

pub use self::open::PostgresBuilder;
pub use self::pgvector::PgvectorError;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_op::{
    BoxFuture, Candidate, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError, MemoryId,
    NewMemory, PrunePolicy, PruneReport, ScoredMemory, SearchOptions, Tag,
};
use sqlx::postgres::PgPool;

use self::retry::DbError;
use crate::clock::{Clock, from_micros};
use crate::common::format_id;

/// No restrictions: what `search` and `search_candidates` use.
static UNRESTRICTED: SearchOptions = SearchOptions::new();

/// Memories in a PostgreSQL database with the pgvector extension, shared safely by any
/// number of handles, tasks and processes.
///
/// - **Storage**: one schema per store (default `agent_memory`), created and migrated at
///   [`connect`](PostgresBuilder::connect) with migrations embedded in the crate. Entries
///   and tags in plain tables; each entry's vector (scaled to unit length) in a
///   `vector(dimensions)` column with an HNSW index (`vector_cosine_ops`); a `tsvector`
///   column generated from content and context with a GIN index, and keyword postings
///   (each word's entries with their `ts_rank`, and striped counts) kept by triggers. The
///   embedder's model and dimension are recorded in the schema; connecting with another
///   embedder fails with [`MemoryError::EmbedderMismatch`]. All SQL uses bound parameters.
/// - **Search** ([`MemoryBackend::search`]) fuses two rankings with the same reciprocal
///   rank fusion as [`SqliteBackend`](crate::SqliteBackend) (k = 60, scores in (0, 1]), each
///   of at least [`MIN_CANDIDATES`](crate::MIN_CANDIDATES) (or `2k`) entries:
///   - *vector*: cosine distance through the HNSW index (approximate; `SearchOptions::exact`
///     scans every vector instead); only positive similarities count;
///   - *keyword*: PostgreSQL full-text search over content (weight A) and context (weight
///     B), ranked by `ts_rank` × inverse document frequency read from the postings, for
///     the query's words, each passed as a bound value so no query syntax reaches SQL.
///     Words are used rarest first up to [`MAX_KEYWORD_POSTINGS`](crate::MAX_KEYWORD_POSTINGS)
///     entries ranked in total; words in more than half of the entries are stop words.
///
///   Filtered searches ([`MemoryBackend::search_with`]) apply the filter inside the vector
///   search: with pgvector 0.8 or later the HNSW scan continues until enough entries pass
///   (`hnsw.iterative_scan`); with older pgvector, and whenever the index yields too few,
///   the filtered search scans exactly.
/// - **Writes** are single statements or transactions (a large
///   [`store_batch`](PostgresBackend::store_batch) is binary `COPY` in one transaction,
///   rebuilding the HNSW index when the batch is at least as large as the store); deadlocks and serialization failures
///   are retried with backoff (see [`PostgresBuilder::retry_for`]). Ids come from a
///   sequence and are never reused.
/// - **Prune** plans merges (O(n²)) from a snapshot with no lock held, then applies every
///   rule in one short transaction holding a lock that blocks other writers (not readers),
///   skipping merges whose entries were deleted meanwhile.
/// - **Connections**: a pool (sizes, acquire and statement timeouts in the builder); a
///   connection lost with the server is replaced on the next use.
///
/// Texts may not contain the NUL character (PostgreSQL's `text` cannot hold it):
/// [`MemoryError::InvalidInput`]. Clones share one pool. Needs a Tokio runtime.
///
/// ```no_run
/// use agent_memory::PostgresBackend;
/// use agent_op::{MemoryBackend, NewMemory};
///
/// # async fn example() -> Result<(), agent_op::MemoryError> {
/// let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://localhost/agents".into());
/// let memory = PostgresBackend::connect(&url).await?;
/// let id = memory
///     .store(NewMemory {
///         content: "Staging deploys need the VPN".into(),
///         context: "a failed deploy on Tuesday".into(),
///         tags: vec!["deploy".into()],
///     })
///     .await?;
/// let hits = memory.search("how do I deploy to staging?", 5).await?;
/// assert_eq!(hits[0].entry.id, id);
/// memory.close().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    /// The server, database and schema, for messages (never the password).
    location: String,
    embedder: Arc<dyn EmbeddingProvider>,
    /// The dimension recorded in the store (checked against the embedder at connect).
    dimensions: usize,
    clock: Arc<dyn Clock>,
    /// How long deadlocks and serialization failures are retried.
    retry_for: Duration,
    /// Whether the vectors have an HNSW index (not above pgvector's 2,000 dimensions).
    indexed: bool,
    /// Whether pgvector has iterative index scans (0.8 and later).
    iterative: bool,
    /// Connections of dropped operations still being drained.
    orphans: Arc<lease::Orphans>,
    /// Connections kept from one operation for the next.
    warm: Arc<lease::Warm>,
}

/// An entry row: id, content, context, created_at, accessed_at, access_count, tags.
type EntryRow = (i64, String, String, i64, i64, i64, Vec<String>);

/// The columns of an [`EntryRow`], read from `entries e`.
const ENTRY_COLUMNS: &str = "e.id, e.content, e.context, e.created_at, e.accessed_at, \
     e.access_count, ARRAY(SELECT t.tag FROM entry_tags t WHERE t.entry_id = e.id) AS tags";

impl PostgresBackend {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`)
    /// with the default [`HashingEmbedder`](crate::HashingEmbedder) and options, creating
    /// the store on first use. See [`PostgresBuilder::connect`].
    pub async fn connect(url: &str) -> Result<PostgresBackend, MemoryError> {
        PostgresBackend::builder(url).connect().await
    }

    /// Options for connecting to the database at `url`.
    pub fn builder(url: &str) -> PostgresBuilder {
        PostgresBuilder::new(url)
    }

    /// The server, database and schema this handle uses, e.g.
    /// `postgres://agent@db:5432/app (schema agent_memory)`; never the password.
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// The embedder this store uses.
    pub fn embedder(&self) -> &Arc<dyn EmbeddingProvider> {
        &self.inner.embedder
    }

    /// Closes the pool's connections. Later operations on this handle or its clones fail
    /// with [`MemoryError::Closed`]. Dropping every clone also closes them, in the
    /// background.
    pub async fn close(&self) {
        self.inner.warm.close();
        crate::pool::close(&self.inner.pool).await;
    }

    /// The [`MemoryError`] for `e`, met while doing `what`.
    fn error(&self, what: &str, e: DbError) -> MemoryError {
        storage(&self.inner.location, what, e)
    }
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("location", &self.inner.location)
            .field("embedder", &self.inner.embedder.model())
            .finish_non_exhaustive()
    }
}

impl MemoryBackend for PostgresBackend {
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
    /// unrecorded, each with the cosine similarity of the query's vector and the entry's,
    /// computed by pgvector (0 when either is all zero).
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

/// The [`MemoryError`] for `e`, met while doing `what` on the store at `location`: the sqlx
/// or migration error itself is kept as the cause.
pub(crate) fn storage(location: &str, what: &str, e: DbError) -> MemoryError {
    let location = Some(location.to_owned());
    match e {
        DbError::Sql(sqlx::Error::PoolClosed) => MemoryError::Closed { location },
        DbError::Sql(e) => MemoryError::storage(what, location, e),
        DbError::Migrate(e) => MemoryError::storage(what, location, e),
        DbError::Pgvector(e) => MemoryError::storage(what, location, e),
        DbError::TooLarge(e) => MemoryError::InvalidInput(e.to_string()),
        DbError::Corrupt(found) => MemoryError::UnexpectedData {
            operation: what.to_owned(),
            location,
            found,
        },
    }
}

/// Turns entry rows into entries (tags sorted as a set).
fn entries(rows: Vec<EntryRow>) -> Vec<MemoryEntry> {
    rows.into_iter().map(entry).collect()
}

fn entry((id, content, context, created, accessed, count, mut tags): EntryRow) -> MemoryEntry {
    tags.sort();
    tags.dedup();
    MemoryEntry {
        id: format_id(id),
        content,
        context,
        tags: tags.into_iter().map(Tag).collect(),
        created_at: from_micros(created),
        accessed_at: from_micros(accessed),
        access_count: u64::try_from(count).unwrap_or(0),
    }
}
