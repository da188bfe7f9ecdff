//! Helpers shared by the journal crate's integration tests.

pub mod chat;
