//! # agent-journal: where a run's journal is kept
//!
//! A journal holds every nondeterministic result of a run (see [`agent_op::journal`]): the
//! interpreters write it during `run_durable` and read it in `replay` and `resume`. This
//! crate holds its backends, all behind [`Journal`]:
//!
//! - [`MemoryJournal`]: entries in memory, for tests and journals that travel with a run;
//! - [`JsonlJournal`]: a JSON Lines file — append-only, fsync per entry or never, a last
//!   line torn by a crash dropped on open;
//! - [`SqliteJournal`] (feature `sqlite`, on by default): one row per entry, the default for
//!   durable runs;
//! - `PostgresJournal` (feature `postgres`): for runs whose workers live on several
//!   machines.
//!
//! Every backend refuses a second writer ([`JournalError::Locked`]), reads only the format
//! version it writes ([`JournalError::UnsupportedVersion`] names both), and makes an append
//! durable before it returns. Appends from concurrent branches are committed together
//! (group commit), so a wide `par` pays for a few commits, not one per branch.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod group;
mod jsonl;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod row;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use agent_op::journal::{
    Entry, EntryKind, JOURNAL_VERSION, Journal, JournalError, Key, Sealed, fingerprint,
};
pub use jsonl::{Fsync, JsonlJournal};
pub use memory::MemoryJournal;
#[cfg(feature = "postgres")]
pub use postgres::PostgresJournal;
#[cfg(feature = "sqlite")]
pub use sqlite::{Durability, SqliteJournal};
