//! [`ContextPipeline`]: how an interpreter turns a [`ContextRequest`] into a [`Prompt`].

use std::any::Any;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

use super::report::ContextReport;
use super::request::ContextRequest;
use crate::cause::Cause;
use crate::future::BoxFuture;
use crate::memory::MemoryBackend;
use crate::message::Prompt;
use crate::tool::ToolDefinition;
use crate::trace::Timestamp;

/// Hydrates a [`ContextRequest`] into sections and compiles them into a [`Prompt`] under the
/// request's budget: what [`op::infer`](crate::op::infer) runs before calling the model.
///
/// Interpreters hold one in their configuration and know nothing of the sources behind it;
/// `agent-prompt` provides the standard one (`agent_prompt::Pipeline`).
///
/// [`prepare`](ContextPipeline::prepare) is called with the program's state borrowed: it reads
/// what it needs from it *before* returning, and the future it returns owns everything it
/// uses, so it can run concurrently with other branches.
pub trait ContextPipeline: Send + Sync {
    /// Starts preparing the context for one model call.
    fn prepare(
        &self,
        input: ContextInput<'_>,
    ) -> BoxFuture<'static, Result<PreparedContext, ContextError>>;
}

/// What a [`ContextPipeline`] is given for one model call.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct ContextInput<'a> {
    /// The model to be called.
    pub model: &'a str,
    /// What the program asked for.
    pub request: &'a ContextRequest,
    /// The program's state (downcast it to the program's state type).
    pub state: &'a (dyn Any + Send),
    /// The run's memory backend, if it has one.
    pub memory: Option<&'a Arc<dyn MemoryBackend>>,
    /// The tools the run permits, which the prompt may offer.
    pub tools: &'a [ToolDefinition],
    /// Whether the interpreter runs branches concurrently (then sources may run
    /// concurrently too; the result must not depend on it).
    pub concurrent: bool,
    /// The time of the call: recency is measured from it.
    pub now: Timestamp,
}

impl<'a> ContextInput<'a> {
    /// The input for a call of `model` with `request` from a program in `state`, with no
    /// memory and no tools, run sequentially.
    pub fn new(
        model: &'a str,
        request: &'a ContextRequest,
        state: &'a (dyn Any + Send),
        now: Timestamp,
    ) -> ContextInput<'a> {
        ContextInput {
            model,
            request,
            state,
            memory: None,
            tools: &[],
            concurrent: false,
            now,
        }
    }

    /// With the run's memory backend.
    pub fn with_memory(mut self, memory: Option<&'a Arc<dyn MemoryBackend>>) -> Self {
        self.memory = memory;
        self
    }

    /// With the tools the run permits.
    pub fn with_tools(mut self, tools: &'a [ToolDefinition]) -> Self {
        self.tools = tools;
        self
    }

    /// Whether sources may run concurrently.
    pub fn with_concurrency(mut self, concurrent: bool) -> Self {
        self.concurrent = concurrent;
        self
    }

    /// The state as an `S`, if it is one.
    pub fn state<S: 'static>(&self) -> Option<&'a S> {
        let state: &'a dyn Any = self.state;
        state.downcast_ref::<S>()
    }
}

impl fmt::Debug for ContextInput<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextInput")
            .field("model", &self.model)
            .field("request", &self.request)
            .field("memory", &self.memory.is_some())
            .field("tools", &self.tools.len())
            .field("concurrent", &self.concurrent)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// A prepared context: the prompt to send and the report the trace records.
#[non_exhaustive]
pub struct PreparedContext {
    /// What to send to the model.
    pub prompt: Prompt,
    /// What hydration and compilation did.
    pub report: ContextReport,
    /// A summary to make before the prompt is final: the interpreter calls the model for it
    /// (a model call like any other: traced, inside the run's budget) and gives its text to
    /// [`Summarize::resume`].
    pub summarize: Option<Summarize>,
}

impl PreparedContext {
    /// A context ready to send.
    pub fn new(prompt: Prompt, report: ContextReport) -> PreparedContext {
        PreparedContext {
            prompt,
            report,
            summarize: None,
        }
    }

    /// A context that wants `summarize` done first.
    pub fn with_summary(mut self, summarize: Summarize) -> PreparedContext {
        self.summarize = Some(summarize);
        self
    }
}

impl fmt::Debug for PreparedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedContext")
            .field("prompt", &self.prompt)
            .field("report", &self.report)
            .field("summarize", &self.summarize)
            .finish()
    }
}

/// Finishes a context once a summary is made; see [`Summarize`].
pub type ResumeFn =
    Box<dyn FnOnce(String) -> Result<PreparedContext, ContextError> + Send + 'static>;

/// A model call a pipeline needs before its prompt is final (to summarize sections that did
/// not fit instead of dropping them).
#[non_exhaustive]
pub struct Summarize {
    /// The model to ask.
    pub model: String,
    /// The summarization prompt.
    pub prompt: Prompt,
    /// Builds the final context from the summary's text. A context it returns that wants
    /// another summary is sent as it is: one summary per call.
    pub resume: ResumeFn,
}

impl Summarize {
    /// A summary of `prompt` by `model`, finished by `resume`.
    pub fn new(
        model: impl Into<String>,
        prompt: Prompt,
        resume: impl FnOnce(String) -> Result<PreparedContext, ContextError> + Send + 'static,
    ) -> Summarize {
        Summarize {
            model: model.into(),
            prompt,
            resume: Box::new(resume),
        }
    }
}

impl fmt::Debug for Summarize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Summarize")
            .field("model", &self.model)
            .field("prompt", &self.prompt)
            .finish_non_exhaustive()
    }
}

/// Why a context could not be prepared.
///
/// [`Error::source`] returns the underlying error where there is one (a
/// `MemoryError`, an `io::Error`, `agent_prompt::PromptError`…).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ContextError {
    /// A source that is not optional failed.
    Source {
        /// The source's name.
        name: String,
        /// What went wrong.
        message: String,
        /// The underlying error.
        cause: Option<Cause>,
    },
    /// The hydrated sections could not be compiled under the budget.
    Compile {
        /// What went wrong.
        message: String,
        /// The underlying error.
        cause: Option<Cause>,
    },
}

impl ContextError {
    /// The source `name` failed with `error`.
    pub fn source_failed(
        name: impl Into<String>,
        error: impl Error + Send + Sync + 'static,
    ) -> ContextError {
        ContextError::Source {
            name: name.into(),
            message: error.to_string(),
            cause: Some(Cause::new(error)),
        }
    }

    /// The source `name` failed, saying `message`.
    pub fn source_message(name: impl Into<String>, message: impl Into<String>) -> ContextError {
        ContextError::Source {
            name: name.into(),
            message: message.into(),
            cause: None,
        }
    }

    /// Compilation failed with `error`.
    pub fn compile(error: impl Error + Send + Sync + 'static) -> ContextError {
        ContextError::Compile {
            message: error.to_string(),
            cause: Some(Cause::new(error)),
        }
    }

    /// The underlying error, if any.
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            ContextError::Source { cause, .. } | ContextError::Compile { cause, .. } => {
                cause.as_ref()
            }
        }
    }
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContextError::Source { name, message, .. } => {
                write!(f, "context source `{name}` failed: {message}")
            }
            ContextError::Compile { message, .. } => {
                write!(f, "the context could not be compiled: {message}")
            }
        }
    }
}

impl Error for ContextError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause().map(|c| c.get_ref() as &(dyn Error + 'static))
    }
}
