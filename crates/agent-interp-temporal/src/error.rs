//! [`TemporalError`]: what can go wrong between a program and a Temporal cluster.

use std::time::Duration;

/// What went wrong running a program on Temporal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemporalError {
    /// The server could not be reached (or refused the connection).
    #[error("cannot connect to the Temporal server at {address}: {message}")]
    Connect {
        /// The address tried.
        address: String,
        /// The client's error.
        message: String,
    },
    /// The server did not answer in time.
    #[error("the Temporal server at {address} did not answer within {after:?}")]
    Unreachable {
        /// The address tried.
        address: String,
        /// How long the call waited.
        after: Duration,
    },
    /// No worker of the task queue has a program of that name.
    #[error("no worker on task queue `{task_queue}` runs a program named `{program}`: {message}")]
    UnknownProgram {
        /// The program asked for.
        program: String,
        /// The task queue it was started on.
        task_queue: String,
        /// What the worker said.
        message: String,
    },
    /// The program's input did not decode into its input type.
    #[error("the input does not fit program `{program}`: {message}")]
    BadInput {
        /// The program.
        program: String,
        /// The decoding error.
        message: String,
    },
    /// The program ran and failed: `kind` is the engine's `ErrorKind::kind_name`
    /// (`exhausted`, `provider`, `unknown_tool`, …).
    #[error("program `{program}` failed ({kind}): {message}")]
    Run {
        /// The program.
        program: String,
        /// The kind of failure.
        kind: String,
        /// The failure, with its causes.
        message: String,
    },
    /// The workflow's history does not fit the program any more: the program was changed
    /// between the run and its replay (Temporal's non-determinism error). `message` names
    /// the history event where they part.
    #[error("program `{program}` diverged from its recorded history: {message}")]
    Divergence {
        /// The program.
        program: String,
        /// The workflow.
        workflow_id: String,
        /// Temporal's description, naming the history event.
        message: String,
    },
    /// The workflow was cancelled, terminated or timed out outside the program.
    #[error("program `{program}` was stopped: {message}")]
    Stopped {
        /// The program.
        program: String,
        /// How.
        message: String,
    },
    /// A call to the server failed.
    #[error("{operation} failed: {message}")]
    Server {
        /// What was asked.
        operation: &'static str,
        /// The server's or client's error.
        message: String,
    },
    /// A worker could not be set up or failed while running.
    #[error("the worker failed: {0}")]
    Worker(String),
    /// A value did not (de)serialize: an input, a result, a query's answer.
    #[error("{what} does not (de)serialize: {source}")]
    Codec {
        /// What did not.
        what: &'static str,
        /// serde's error.
        #[source]
        source: serde_json::Error,
    },
}
