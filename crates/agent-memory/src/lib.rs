//! # agent-memory
//!
//! Will hold memory backends (in-memory and SQLite) and embedding providers. Not implemented yet (issue 5): this crate exports nothing.
