//! Memory (`agent-memory`): backends for [`MemoryBackend`](crate::MemoryBackend), local
//! embedders (with feature `local-embed`, `LocalEmbedder`: a sentence-transformers model such
//! as all-MiniLM-L6-v2 run on the CPU), prompt-context building, and the conformance suite
//! every backend passes.
//!
//! ```
//! use effect_agents::MemoryBackend;
//! use effect_agents::memory::{ContextWindow, InMemoryBackend, build_context};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let memory = InMemoryBackend::new();
//! memory.store(effect_agents::NewMemory {
//!     content: "Ana prefers short answers".into(),
//!     context: "chat".into(),
//!     tags: vec![],
//! }).await?;
//! let context = build_context(&memory, &ContextWindow::new(50), "How should I answer Ana?").await?;
//! assert_eq!(context.entries.len(), 1);
//! # Ok::<(), effect_agents::MemoryError>(())
//! # }).unwrap();
//! ```

pub use agent_memory::{
    AnnConfig, BuiltContext, Clock, ContextEntry, ContextWindow, DEFAULT_DIMENSIONS,
    HashingEmbedder, InMemoryBackend, InMemoryBuilder, IndexStatus, MAX_KEYWORD_POSTINGS,
    MAX_TEXT_BYTES, MIN_CANDIDATES, ManualClock, RRF_K, SystemClock, ZeroEmbedder, build_context,
    build_context_at, conformance, estimate_tokens, tokenize,
};
#[cfg(feature = "local-embed")]
#[cfg_attr(docsrs, doc(cfg(feature = "local-embed")))]
pub use agent_memory::{DEFAULT_BATCH_SIZE, LocalEmbedder, LocalModelError};

/// The SQLite backend: memories in one file (WAL, FTS5 keyword search fused with vector
/// search — exact on small stores, an approximate index on large ones), safe for many tasks
/// and processes.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite {
    pub use agent_memory::{
        Durability, IntegrityProblem, IntegrityReport, MAX_KEYWORD_POSTINGS, MIN_CANDIDATES,
        SqliteBackend, SqliteBuilder,
    };
}

/// The PostgreSQL backend: memories in a PostgreSQL database with the pgvector extension
/// (HNSW vector search fused with full-text search), shared by any number of processes.
/// See `docs/MEMORY.md` for the server requirements.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use agent_memory::{PgvectorError, PostgresBackend, PostgresBuilder};
}
