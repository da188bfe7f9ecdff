//! # agent-memory: what an agent keeps across runs
//!
//! Backends for the [`MemoryBackend`](agent_op::MemoryBackend) trait of `agent-op`, so any
//! agent (CLI, service, chat bot) picks its storage without touching agent code, plus the
//! embedders and the context builder that go with them.
//!
//! - Backends:
//!   - [`InMemoryBackend`]: in the process's memory; cosine search. For tests and
//!     short-lived agents.
//!   - [`SqliteBackend`]: one SQLite file (WAL); vector search fused with FTS5 keyword
//!     search; safe for many tasks and processes; survives crashes; its vector copy and
//!     graph are saved beside the file (`<file>.vectors`) so large stores open fast. Opened with
//!     [`SqliteBackend::open`] or configured with [`SqliteBackend::builder`]
//!     ([`SqliteBuilder`]: embedder, clock, [`Durability`], busy timeout, lock retries);
//!     also [`SqliteBackend::store_batch`], [`SqliteBackend::integrity_check`] ([`IntegrityReport`]),
//!     [`SqliteBackend::corrupt_embeddings`], [`SqliteBackend::close`].
//!   - `PostgresBackend` (feature `postgres`): a PostgreSQL database with pgvector, one
//!     schema per store; HNSW vector search (filters inside the index scan) fused with
//!     full-text search; a connection pool; safe for many processes and hosts. Connected
//!     with `PostgresBackend::connect` or configured with `PostgresBackend::builder`
//!     (`PostgresBuilder`: embedder, clock, schema, pool sizes, connect, acquire and
//!     statement timeouts, retries); also `PostgresBackend::store_batch` and `close`; a
//!     server without (the right to create) pgvector fails with a `PgvectorError` cause.
//!   - Ranking constants shared by SQLite and PostgreSQL: [`RRF_K`], [`MIN_CANDIDATES`],
//!     [`MAX_KEYWORD_POSTINGS`].
//!   - All implement [`search_candidates`](agent_op::MemoryBackend::search_candidates)
//!     (hits with their cosine similarity, no recall recorded),
//!     [`record_access`](agent_op::MemoryBackend::record_access) and filtered search
//!     ([`search_with`](agent_op::MemoryBackend::search_with)), and plan prune merges
//!     without holding a lock.
//! - Vector search in the in-memory and SQLite backends is exact below [`AnnConfig::min_entries`] (10,000) and
//!   approximate above: an HNSW graph (usearch, int8) whose candidates are re-scored in f32,
//!   fed by a background thread so inserts never wait, with every not-yet-indexed entry
//!   scored exactly ([`AnnConfig`], `index_status()` → [`IndexStatus`]). Filters
//!   ([`SearchOptions`](agent_op::SearchOptions): tags, creation time, `exact`) apply inside
//!   the search (`search_with`, `search_candidates_with`); `nearest(vector, k, options)` is
//!   vector search alone.
//! - Embedders ([`EmbeddingProvider`](agent_op::EmbeddingProvider)):
//!   - [`HashingEmbedder`]: local and deterministic (feature hashing of words and word
//!     pairs); the default, so semantic recall works offline;
//!   - [`ZeroEmbedder`]: all-zero vectors, for tests;
//!   - `LocalEmbedder` (cargo feature `local-embed`): a sentence-transformers BERT model
//!     such as all-MiniLM-L6-v2, run on the CPU in pure Rust (candle); errors
//!     `LocalModelError`;
//!   - OpenAI and Ollama embedders live in `agent-provider`.
//! - [`build_context`] (or [`build_context_at`] a given time) with a [`ContextWindow`]: the
//!   memories worth putting in a prompt, ranked by a blend of recency and cosine similarity
//!   and cut to a token budget ([`estimate_tokens`]); only the entries it returns count as
//!   recalled. The result is a [`BuiltContext`] of [`ContextEntry`]s.
//! - [`conformance`]: the test suite every backend passes; a new backend plugs into it with
//!   [`memory_conformance_tests!`].
//! - Small pieces: [`Clock`] ([`SystemClock`], [`ManualClock`]), [`tokenize`],
//!   [`MAX_TEXT_BYTES`], [`DEFAULT_DIMENSIONS`].
//!
//! The backends accept and refuse the same inputs: empty content and texts over
//! [`MAX_TEXT_BYTES`] are [`MemoryError::InvalidInput`](agent_op::MemoryError), embedder
//! failures and bad vectors (NaN, wrong dimension) are
//! [`MemoryError::Embedding`](agent_op::MemoryError) and store nothing, unknown ids are
//! `None`/`false` (PostgreSQL also refuses the NUL character, which its text cannot hold).
//! Tags are stored as a sorted set. Times are kept to the microsecond.
//! `docs/MEMORY.md` describes schema, ranking, pruning and guarantees in full.
//!
//! Cargo features:
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `sqlite` | yes | [`SqliteBackend`] (pulls in sqlx with SQLite) |
//! | `postgres` | no | `PostgresBackend` (pulls in sqlx's Postgres driver and rustls; needs a server with the pgvector extension, see `docs/MEMORY.md`) |
//! | `local-embed` | no | `LocalEmbedder`: a sentence-transformers model on the CPU (pulls in candle and tokenizers) |
//!
//! Without either the crate has the in-memory backend, the embedders, `build_context` and the
//! conformance suite.
//!
//! ```
//! use agent_memory::{ContextWindow, InMemoryBackend, build_context};
//! use agent_op::{MemoryBackend, NewMemory};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let memory = InMemoryBackend::new();
//! for fact in ["Ana prefers short answers", "The build server is ci-3", "Ana works in Lisbon"] {
//!     memory.store(NewMemory { content: fact.into(), context: "chat".into(), tags: vec![] }).await?;
//! }
//! let context = build_context(&memory, &ContextWindow::new(50), "Does Ana prefer short answers?").await?;
//! assert_eq!(context.entries[0].entry.content, "Ana prefers short answers");
//! assert!(context.tokens <= 50);
//! # Ok::<(), agent_op::MemoryError>(())
//! # }).unwrap();
//! ```

mod ann;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod backoff;
mod clock;
mod common;
pub mod conformance;
mod context;
mod embed;
mod inmem;
#[cfg(feature = "local-embed")]
mod local_embed;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
mod prune;
mod rank;
#[cfg(feature = "sqlite")]
mod sqlite;
mod text;
mod vector;

pub use ann::{AnnConfig, IndexStatus};
pub use clock::{Clock, ManualClock, SystemClock};
pub use common::MAX_TEXT_BYTES;
pub use context::{
    BuiltContext, ContextEntry, ContextWindow, build_context, build_context_at, estimate_tokens,
};
pub use embed::{DEFAULT_DIMENSIONS, HashingEmbedder, ZeroEmbedder};
pub use inmem::{InMemoryBackend, InMemoryBuilder};
#[cfg(feature = "local-embed")]
pub use local_embed::{DEFAULT_BATCH_SIZE, LocalEmbedder, LocalModelError};
#[cfg(feature = "postgres")]
pub use postgres::{PgvectorError, PostgresBackend, PostgresBuilder};
pub use rank::{MAX_KEYWORD_POSTINGS, MIN_CANDIDATES, RRF_K};
#[cfg(feature = "sqlite")]
pub use sqlite::{Durability, IntegrityProblem, IntegrityReport, SqliteBackend, SqliteBuilder};
pub use text::tokenize;
