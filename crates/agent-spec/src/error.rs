//! What can go wrong reading a spec and building what it describes.

use std::path::PathBuf;

/// A spec that cannot be read, or that cannot build what it describes. The message is one
/// line; [`std::error::Error::source`] holds the cause where there is one apart from the
/// message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec's file could not be read.
    #[error("{path}: {action} failed")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`reading`).
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The spec is wrong: a key it does not know, a value out of range, a file it names
    /// that is missing or unreadable, an output schema that is not a JSON schema. The
    /// message names the spec or the key.
    #[error("{0}")]
    Invalid(String),
    /// The environment lacks something the spec needs: an API key variable, an MCP server
    /// that does not start (the message ends with the end of its stderr log).
    #[error("{0}")]
    Environment(String),
    /// The spec's memory database could not be opened.
    #[error("{path}: {action} failed")]
    Memory {
        /// The database file.
        path: PathBuf,
        /// What was being done (`opening the memory database`).
        action: &'static str,
        /// Why.
        #[source]
        source: agent_op::MemoryError,
    },
}
