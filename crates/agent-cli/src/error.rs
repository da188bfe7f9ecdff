//! What can go wrong on the command line, and the exit code each kind of failure gives.

use std::path::PathBuf;

/// A failure of an `agent` command. Each variant maps to one documented exit code
/// ([`CliError::exit_code`]); the message is one line, and [`std::error::Error::source`]
/// holds the cause chain `main` prints under it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// A file the command needs could not be read or written.
    #[error("{path}: {action} failed")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`reading`, `writing`).
        action: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A trace file is not a readable JSONL trace.
    #[error("{path}: not a readable trace{}", lenient_hint(source))]
    Trace {
        /// The file.
        path: PathBuf,
        /// What the reader found, with the line number.
        #[source]
        source: agent_op::trace::jsonl::JsonlError,
    },
    /// The input given is wrong: a spec with an unknown key, a bad filter, a missing file.
    #[error("{0}")]
    Invalid(String),
    /// The environment lacks something the command needs (an API key variable, an MCP
    /// server).
    #[error("{0}")]
    Environment(String),
    /// The agent ran and failed (or was stopped by its budget).
    #[error("the run failed: {0}")]
    Run(String),
    /// Ctrl-C (or SIGTERM, SIGHUP) stopped the run; its trace was still written.
    #[error("aborted ({by}); the trace so far is in {trace}")]
    Aborted {
        /// Where the trace is.
        trace: PathBuf,
        /// The signal: `Ctrl-C`, `SIGTERM` or `SIGHUP`.
        by: &'static str,
    },
    /// Ctrl-C (or SIGTERM, SIGHUP; named here) stopped the command before a run started (MCP
    /// servers started so far were killed).
    #[error("aborted ({0}) before the run started")]
    Interrupted(&'static str),
    /// A journal could not be read.
    #[error("{path}: not a readable journal")]
    Journal {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: agent_op::journal::JournalError,
    },
    /// A memory database operation failed.
    #[error("{path}: {action} failed")]
    Memory {
        /// The database file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// Why.
        #[source]
        source: agent_op::MemoryError,
    },
}

/// What to try when a trace has a bad line: the commands' `--lenient` reads what comes before.
fn lenient_hint(error: &agent_op::trace::jsonl::JsonlError) -> &'static str {
    match error {
        agent_op::trace::jsonl::JsonlError::Malformed { .. } => {
            " (--lenient reads the events before the bad line)"
        }
        _ => "",
    }
}

/// A spec's failure as the command's: each kind keeps its exit code and message.
impl From<agent_spec::SpecError> for CliError {
    fn from(error: agent_spec::SpecError) -> CliError {
        use agent_spec::SpecError;
        match error {
            SpecError::Io {
                path,
                action,
                source,
            } => CliError::Io {
                path,
                action,
                source,
            },
            SpecError::Invalid(message) => CliError::Invalid(message),
            SpecError::Environment(message) => CliError::Environment(message),
            SpecError::Memory {
                path,
                action,
                source,
            } => CliError::Memory {
                path,
                action,
                source,
            },
            // A kind added later: a spec that cannot be used, as the others.
            other => CliError::Invalid(other.to_string()),
        }
    }
}

impl CliError {
    /// The process exit code: 1 the run failed (also when its model server cannot be
    /// reached), 3 invalid input (a file, a spec, a flag value), 4 the environment (a missing
    /// API key variable, an MCP server that does not start), 130 aborted by Ctrl-C, SIGTERM
    /// or SIGHUP. (2 is clap's, for a command line it cannot parse.)
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Run(_) => 1,
            CliError::Io { .. }
            | CliError::Trace { .. }
            | CliError::Invalid(_)
            | CliError::Memory { .. } => 3,
            // Held by a running process.
            CliError::Journal {
                source: agent_op::journal::JournalError::Locked { .. },
                ..
            } => 4,
            CliError::Journal { .. } => 3,
            CliError::Environment(_) => 4,
            CliError::Aborted { .. } | CliError::Interrupted(_) => 130,
        }
    }
}
