//! # agent-interp-par
//!
//! Will hold the concurrent interpreter (tokio branch scheduler, CRDT state merge). Not implemented yet (issue 3): this crate exports nothing.
