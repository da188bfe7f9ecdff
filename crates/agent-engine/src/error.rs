//! Why a run failed: [`RunError`] (what went wrong, plus everything recorded up to then).

use std::fmt;

use agent_op::context::ContextError;
use agent_op::journal::{Divergence, JournalError};
use agent_op::{Cause, Checkpoint, MemoryError, ProviderError, Trace, TraceId};

/// What stopped a run.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The abort token was cancelled.
    Aborted,
    /// The program called a tool the run does not permit.
    UnknownTool {
        /// The name called.
        name: String,
        /// The names the run permits.
        permitted: Vec<String>,
    },
    /// A model call failed.
    Provider {
        /// The model called.
        model: String,
        /// What failed.
        error: ProviderError,
    },
    /// The program called a model but the config has no provider.
    NoProvider,
    /// The context of an `infer` call could not be built: a source failed, or its critical
    /// sections do not fit the budget.
    Context {
        /// The model it was for.
        model: String,
        /// What failed.
        error: Box<ContextError>,
    },
    /// A `with_tools` scope grants a tool or capability its enclosing scope does not: scopes
    /// only narrow. (Boxed: errors travel through every frame of a deep fork nest.)
    ScopeWidens(Box<ScopeWidening>),
    /// The program called `infer` but the config has no context pipeline (and this crate
    /// was built without its `prompt` feature, which provides a default).
    NoContextPipeline,
    /// A memory operation failed.
    Memory(MemoryError),
    /// The program uses memory but the config has no memory backend.
    NoMemoryBackend,
    /// A `race` had no branches.
    EmptyRace,
    /// A checkpoint could not serialize the state.
    Checkpoint {
        /// The checkpoint's name.
        name: String,
        /// The serializer's error (a `serde_json::Error`), also [`source`](std::error::Error::source).
        cause: Cause,
    },
    /// The program failed itself (`op::fail`).
    Program(String),
    /// A branch of a `par` (or every branch of a `race`) failed; this is the error of the
    /// first failing branch in declaration order.
    ///
    /// Nested forks nest these; the message names only the innermost failing branch (whose
    /// id is the whole path, `run.0.3`) and the [`root_cause`](ErrorKind::root_cause), once.
    Branch {
        /// The branch.
        id: TraceId,
        /// Its error.
        error: Box<ErrorKind>,
    },
    /// The program's own code panicked (a closure given to `map`, `and_then` or `modify`, a
    /// `Merge` implementation, a provider). Tool panics are not this: they become tool errors.
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// Forks nested deeper than the interpreter allows (each level uses some of the stack of
    /// the task running the program).
    ForksTooDeep {
        /// The deepest nesting allowed.
        max: usize,
    },
    /// Replaying a journal, the program asked something other than what the journal
    /// recorded at that position, or asked at a position the journal lacks (a journal from
    /// another program, a changed prompt, a truncated journal). Reported as the run's error
    /// wherever it happened, never wrapped in [`Branch`](ErrorKind::Branch), and no `race`
    /// recovers from it. Boxed: errors travel through every frame of a deep fork nest.
    Divergence(Box<Divergence>),
    /// The run's journal could not be read or written, or holds an entry that does not fit
    /// the program (a damaged or foreign journal); the result it was committing was not
    /// shown to the program. Reported like a [`Divergence`](ErrorKind::Divergence).
    Journal(Box<JournalError>),
    /// `resume_from` was given a checkpoint its journal has no marker of (another run's
    /// checkpoint, or a journal cut before it).
    CheckpointNotJournaled {
        /// The checkpoint's name.
        name: String,
    },
    /// The interpreter broke one of its own invariants (a bug; please report it).
    Internal(String),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Aborted => f.write_str("the run was aborted"),
            ErrorKind::UnknownTool { name, permitted } => write!(
                f,
                "unknown tool `{name}` (permitted: {})",
                permitted_list(permitted)
            ),
            ErrorKind::Provider { model, error } => {
                write!(f, "model call to `{model}` failed: {error}")
            }
            ErrorKind::NoProvider => {
                f.write_str("the program calls a model but no provider is configured")
            }
            ErrorKind::Context { model, error } => {
                write!(f, "building the context for `{model}` failed: {error}")
            }
            ErrorKind::ScopeWidens(widening) => {
                let ScopeWidening {
                    scope,
                    enclosing,
                    tools,
                    capabilities,
                } = &**widening;
                write!(
                    f,
                    "tool scope `{scope}` asks for more than {enclosing} grants:"
                )?;
                if !tools.is_empty() {
                    write!(f, " tools {}", tools.join(", "))?;
                }
                if !capabilities.is_empty() {
                    if !tools.is_empty() {
                        f.write_str(";")?;
                    }
                    write!(f, " capabilities {}", capabilities.join(", "))?;
                }
                Ok(())
            }
            ErrorKind::NoContextPipeline => f.write_str(
                "the program calls `infer` but no context pipeline is configured \
                 (set one with Config::context_pipeline)",
            ),
            ErrorKind::Memory(error) => write!(f, "memory operation failed: {error}"),
            ErrorKind::NoMemoryBackend => {
                f.write_str("the program uses memory but no memory backend is configured")
            }
            ErrorKind::EmptyRace => {
                f.write_str("race with no branches: there is nothing to wait for")
            }
            ErrorKind::Checkpoint { name, cause } => write!(
                f,
                "checkpoint `{name}`: the state could not be serialized: {cause}"
            ),
            ErrorKind::Program(message) => f.write_str(message),
            // `branch <innermost id> failed: <root cause>`, however deep the wrappers go.
            ErrorKind::Branch { id, .. } => {
                let mut id = id;
                let mut kind = self;
                while let ErrorKind::Branch { id: inner, error } = kind {
                    id = inner;
                    kind = error;
                }
                write!(f, "branch {id} failed: {kind}")
            }
            ErrorKind::Panicked { message } => write!(f, "the program panicked: {message}"),
            ErrorKind::ForksTooDeep { max } => write!(f, "forks nested more than {max} deep"),
            ErrorKind::Divergence(divergence) => write!(f, "{divergence}"),
            ErrorKind::Journal(error) => write!(f, "the run's journal failed: {error}"),
            ErrorKind::CheckpointNotJournaled { name } => write!(
                f,
                "the journal has no marker of checkpoint `{name}`: it was not taken by the \
                 durable run of this journal"
            ),
            ErrorKind::Internal(message) => write!(f, "internal interpreter error: {message}"),
        }
    }
}

/// The lower layer's error, when one caused this: the [`ProviderError`], the
/// [`MemoryError`], the serializer's error of a checkpoint. A [`Branch`](ErrorKind::Branch)
/// has the source of its root cause.
impl std::error::Error for ErrorKind {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.root_cause() {
            ErrorKind::Provider { error, .. } => Some(error),
            ErrorKind::Memory(error) => Some(error),
            ErrorKind::Context { error, .. } => Some(&**error),
            ErrorKind::Checkpoint { cause, .. } => Some(cause.get_ref()),
            ErrorKind::Divergence(divergence) => Some(&**divergence),
            ErrorKind::Journal(error) => Some(&**error),
            _ => None,
        }
    }
}

/// What a widening `with_tools` scope asked for: see [`ErrorKind::ScopeWidens`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeWidening {
    /// The scope entered.
    pub scope: String,
    /// The scope around it (or "the run's config").
    pub enclosing: String,
    /// Tools it names that the enclosing scope lacks.
    pub tools: Vec<String>,
    /// Capabilities it grants that the enclosing scope lacks.
    pub capabilities: Vec<String>,
}

fn permitted_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

impl ErrorKind {
    /// A short, stable name of the kind of failure (`provider`, `unknown_tool`, …), as
    /// telemetry's `error.type` wants it; a failed branch is named after its own failure.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ErrorKind::Aborted => "aborted",
            ErrorKind::UnknownTool { .. } => "unknown_tool",
            ErrorKind::Provider { error, .. } => error.kind_name(),
            ErrorKind::NoProvider => "no_provider",
            ErrorKind::Context { .. } => "context",
            ErrorKind::ScopeWidens(_) => "scope_widens",
            ErrorKind::NoContextPipeline => "no_context_pipeline",
            ErrorKind::Memory(_) => "memory",
            ErrorKind::NoMemoryBackend => "no_memory_backend",
            ErrorKind::EmptyRace => "empty_race",
            ErrorKind::Checkpoint { .. } => "checkpoint",
            ErrorKind::Program(_) => "program",
            ErrorKind::Branch { error, .. } => error.kind_name(),
            ErrorKind::Panicked { .. } => "panicked",
            ErrorKind::ForksTooDeep { .. } => "forks_too_deep",
            ErrorKind::Divergence(_) => "divergence",
            ErrorKind::Journal(_) => "journal",
            ErrorKind::CheckpointNotJournaled { .. } => "checkpoint_not_journaled",
            ErrorKind::Internal(_) => "internal",
        }
    }

    /// The [`Divergence`] that stopped a replay, wherever in the run it happened (it is
    /// reported as the run's error, not wrapped in [`Branch`](ErrorKind::Branch); this looks
    /// through wrappers all the same).
    pub fn divergence(&self) -> Option<&Divergence> {
        match self.root_cause() {
            ErrorKind::Divergence(divergence) => Some(divergence),
            _ => None,
        }
    }

    /// The [`JournalError`] that stopped the run, wherever in the run it happened (reported
    /// like a [`divergence`](ErrorKind::divergence)).
    pub fn journal_error(&self) -> Option<&JournalError> {
        match self.root_cause() {
            ErrorKind::Journal(error) => Some(error),
            _ => None,
        }
    }

    /// Whether this failure concerns the run as a whole rather than the branch where it
    /// surfaced: a divergence from the journal, or a journal that could not be read or
    /// written. No `race` recovers from one, and forks pass it on as it is (not wrapped in
    /// `Branch`), so `ErrorKind::Divergence` matches a divergence in any branch.
    pub fn fails_run(&self) -> bool {
        matches!(self, ErrorKind::Divergence(_) | ErrorKind::Journal(_))
    }

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
///
/// Its [`source`](std::error::Error::source) is the [`ErrorKind`]'s: the provider, memory or
/// serializer error behind the failure, when there is one.
#[derive(Clone, Debug)]
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

    /// The divergence that stopped this replay, wherever it happened: see
    /// [`ErrorKind::divergence`].
    pub fn divergence(&self) -> Option<&Divergence> {
        self.kind.divergence()
    }

    /// The journal failure that stopped this run, wherever it happened: see
    /// [`ErrorKind::journal_error`].
    pub fn journal_error(&self) -> Option<&JournalError> {
        self.kind.journal_error()
    }

    /// What the run's model calls used before it failed, discarded branches apart. See
    /// [`Trace::spend`](agent_op::Trace::spend).
    pub fn spend(&self) -> agent_op::Spend {
        self.trace.spend()
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.kind, f)
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.kind)
    }
}
