//! Why a run failed: [`RunError`] (what went wrong, plus everything recorded up to then).

use agent_op::{Checkpoint, MemoryError, ProviderError, Trace, TraceId};

/// What stopped a run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The abort token was cancelled.
    #[error("the run was aborted")]
    Aborted,
    /// The program called a tool the run does not permit.
    #[error("unknown tool `{name}` (permitted: {})", permitted_list(.permitted))]
    UnknownTool {
        /// The name called.
        name: String,
        /// The names the run permits.
        permitted: Vec<String>,
    },
    /// A model call failed.
    #[error("model call to `{model}` failed: {error}")]
    Provider {
        /// The model called.
        model: String,
        /// What failed.
        error: ProviderError,
    },
    /// The program called a model but the config has no provider.
    #[error("the program calls a model but no provider is configured")]
    NoProvider,
    /// A memory operation failed.
    #[error("memory operation failed: {0}")]
    Memory(MemoryError),
    /// The program uses memory but the config has no memory backend.
    #[error("the program uses memory but no memory backend is configured")]
    NoMemoryBackend,
    /// A `race` had no branches.
    #[error("race with no branches: there is nothing to wait for")]
    EmptyRace,
    /// A checkpoint could not serialize the state.
    #[error("checkpoint `{name}`: the state could not be serialized: {message}")]
    Checkpoint {
        /// The checkpoint's name.
        name: String,
        /// The serializer's error.
        message: String,
    },
    /// The program failed itself (`op::fail`).
    #[error("{0}")]
    Program(String),
    /// A branch of a `par` (or every branch of a `race`) failed; this is the error of the
    /// first failing branch in declaration order.
    ///
    /// Nested forks nest these; the message names only the innermost failing branch (whose
    /// id is the whole path, `run.0.3`) and the [`root_cause`](ErrorKind::root_cause), once.
    #[error("{}", branch_message(id, error))]
    Branch {
        /// The branch.
        id: TraceId,
        /// Its error.
        error: Box<ErrorKind>,
    },
    /// The program's own code panicked (a closure given to `map`, `and_then` or `modify`, a
    /// `Merge` implementation, a provider). Tool panics are not this: they become tool errors.
    #[error("the program panicked: {message}")]
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// Forks nested deeper than the interpreter allows (each level uses some of the stack of
    /// the task running the program).
    #[error("forks nested more than {max} deep")]
    ForksTooDeep {
        /// The deepest nesting allowed.
        max: usize,
    },
    /// The interpreter broke one of its own invariants (a bug; please report it).
    #[error("internal interpreter error: {0}")]
    Internal(String),
}

/// `branch <innermost id> failed: <root cause>`, however deep the `Branch` wrappers go.
fn branch_message(id: &TraceId, error: &ErrorKind) -> String {
    let (mut id, mut error) = (id, error);
    while let ErrorKind::Branch {
        id: inner,
        error: deeper,
    } = error
    {
        id = inner;
        error = deeper;
    }
    format!("branch {id} failed: {error}")
}

fn permitted_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

impl ErrorKind {
    /// The error itself, looking through `Branch` wrappers.
    pub fn root_cause(&self) -> &ErrorKind {
        let mut kind = self;
        while let ErrorKind::Branch { error, .. } = kind {
            kind = error;
        }
        kind
    }
}

/// A failed run: what went wrong, and the trace and checkpoints up to that point (nothing
/// recorded is lost).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{kind}")]
pub struct RunError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Everything that happened before.
    pub trace: Trace,
    /// Checkpoints taken before.
    pub checkpoints: Vec<Checkpoint>,
}

impl RunError {
    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// What the run's model calls used before it failed, discarded branches apart. See
    /// [`Trace::spend`](agent_op::Trace::spend).
    pub fn spend(&self) -> agent_op::Spend {
        self.trace.spend()
    }
}
