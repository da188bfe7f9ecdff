//! # agent-memory: what an agent keeps across runs
//!
//! Backends for the [`MemoryBackend`](agent_op::MemoryBackend) trait of `agent-op`, so any
//! agent (CLI, service, chat bot) picks its storage without touching agent code, plus the
//! embedders and the context builder that go with them.
//!
//! - Backends:
//!   - [`InMemoryBackend`]: in the process's memory; exact cosine search. For tests and
//!     short-lived agents.
//!   - [`SqliteBackend`]: one SQLite file (WAL); exact vector search fused with FTS5 keyword
//!     search; safe for many tasks and processes; survives crashes. Opened with
//!     [`SqliteBackend::open`] or configured with [`SqliteBackend::builder`]
//!     ([`SqliteBuilder`]: embedder, clock, [`Durability`], busy timeout, lock retries);
//!     also [`SqliteBackend::store_batch`], [`SqliteBackend::integrity_check`] ([`IntegrityReport`]),
//!     [`SqliteBackend::corrupt_embeddings`], [`SqliteBackend::close`]. Ranking constants:
//!     [`RRF_K`], [`MIN_CANDIDATES`], [`MAX_KEYWORD_POSTINGS`].
//!   - Both implement [`search_candidates`](agent_op::MemoryBackend::search_candidates)
//!     (hits with their cosine similarity, no recall recorded) and
//!     [`record_access`](agent_op::MemoryBackend::record_access), and plan prune merges
//!     without holding a lock.
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
//! Both backends accept and refuse the same inputs: empty content and texts over
//! [`MAX_TEXT_BYTES`] are [`MemoryError::InvalidInput`](agent_op::MemoryError), embedder
//! failures and bad vectors (NaN, wrong dimension) are
//! [`MemoryError::Embedding`](agent_op::MemoryError) and store nothing, unknown ids are
//! `None`/`false`. Tags are stored as a sorted set. Times are kept to the microsecond.
//! `docs/MEMORY.md` describes schema, ranking, pruning and guarantees in full.
//!
//! Cargo features: `sqlite` (default) builds [`SqliteBackend`] and pulls in sqlx; without it the
//! crate has the in-memory backend, the embedders, `build_context` and the conformance suite.
//! `local-embed` (off by default) builds `LocalEmbedder` and pulls in candle and tokenizers.
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

mod clock;
mod common;
pub mod conformance;
mod context;
mod embed;
mod inmem;
#[cfg(feature = "local-embed")]
mod local_embed;
mod prune;
mod rank;
#[cfg(feature = "sqlite")]
mod sqlite;
mod text;
mod vector;

pub use clock::{Clock, ManualClock, SystemClock};
pub use common::MAX_TEXT_BYTES;
pub use context::{
    BuiltContext, ContextEntry, ContextWindow, build_context, build_context_at, estimate_tokens,
};
pub use embed::{DEFAULT_DIMENSIONS, HashingEmbedder, ZeroEmbedder};
pub use inmem::{InMemoryBackend, InMemoryBuilder};
#[cfg(feature = "local-embed")]
pub use local_embed::{DEFAULT_BATCH_SIZE, LocalEmbedder, LocalModelError};
pub use rank::RRF_K;
#[cfg(feature = "sqlite")]
pub use sqlite::{
    Durability, IntegrityProblem, IntegrityReport, MAX_KEYWORD_POSTINGS, MIN_CANDIDATES,
    SqliteBackend, SqliteBuilder,
};
pub use text::tokenize;
