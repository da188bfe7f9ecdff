//! Tools: the [`Tool`] trait, tool definitions, tool errors and the [`ToolSet`] a run permits.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::future::BoxFuture;

/// What a model is told about a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: Value,
}

/// Something a program can call by name with JSON arguments.
///
/// Tools run inside the interpreter's async runtime. A tool that does CPU-heavy or blocking work
/// returns `true` from [`Tool::is_blocking`]; interpreters then run it on a blocking thread
/// (`tokio::task::spawn_blocking`) so it cannot stall other branches or tasks.
pub trait Tool: Send + Sync {
    /// The name programs and models call it by.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON schema of its arguments.
    fn parameters(&self) -> Value;

    /// Runs the tool. A failure is a value ([`ToolError`]) the program can show the model.
    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>>;

    /// Calls the tool knowing the call's [`CallContext`] (its idempotency key). The default
    /// ignores the context and calls [`call`](Tool::call); tools with side effects override
    /// it to hand the key to the service they change, so that a call repeated after a crash
    /// (a durable run resumed while the call was in flight) is recognized there.
    fn call_in(
        &self,
        args: Value,
        context: &CallContext,
    ) -> BoxFuture<'_, Result<Value, ToolError>> {
        let _ = context;
        self.call(args)
    }

    /// Whether the tool blocks the thread it runs on (CPU-heavy work, blocking I/O).
    fn is_blocking(&self) -> bool {
        false
    }

    /// The definition given to models.
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters(),
        }
    }
}

/// Why a tool call failed. A value, not a crash: programs usually feed it back to the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolError {
    /// The kind of failure.
    pub kind: ToolErrorKind,
    /// What went wrong, readable by a model.
    pub message: String,
}

/// The kinds of [`ToolError`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The tool ran and reported a failure.
    Failed,
    /// The tool did not answer within its time limit (an MCP server's call timeout).
    TimedOut,
    /// The tool could not be reached: the server behind it (an MCP server) broke the
    /// connection or the protocol.
    Unavailable,
    /// The arguments did not fit the tool's schema.
    InvalidArguments,
    /// The tool panicked; the interpreter caught it.
    Panicked,
    /// The model was not offered the tool (the context of the branch's last model call
    /// dropped it to fit the budget), so the run refused to call it.
    NotOffered,
    /// The tool is outside the tool scope in force ([`op::with_tools`](crate::op::with_tools)),
    /// so the run refused to call it (a `tool_denied` trace event records the attempt).
    Denied,
}

impl ToolErrorKind {
    /// The kind's name as it is serialized (`failed`, `invalid_arguments`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::Failed => "failed",
            ToolErrorKind::TimedOut => "timed_out",
            ToolErrorKind::Unavailable => "unavailable",
            ToolErrorKind::InvalidArguments => "invalid_arguments",
            ToolErrorKind::Panicked => "panicked",
            ToolErrorKind::NotOffered => "not_offered",
            ToolErrorKind::Denied => "denied",
        }
    }
}

impl fmt::Display for ToolErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ToolErrorKind::Failed => "tool failed",
            ToolErrorKind::TimedOut => "tool timed out",
            ToolErrorKind::Unavailable => "tool unavailable",
            ToolErrorKind::InvalidArguments => "invalid arguments",
            ToolErrorKind::Panicked => "tool panicked",
            ToolErrorKind::NotOffered => "tool not offered",
            ToolErrorKind::Denied => "tool denied",
        })
    }
}

impl ToolError {
    /// The tool ran and failed.
    pub fn failed(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::Failed,
            message: message.into(),
        }
    }

    /// The tool did not answer in time.
    pub fn timed_out(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::TimedOut,
            message: message.into(),
        }
    }

    /// The tool could not be reached (its server broke the connection or the protocol).
    pub fn unavailable(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::Unavailable,
            message: message.into(),
        }
    }

    /// The arguments were wrong.
    pub fn invalid_arguments(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::InvalidArguments,
            message: message.into(),
        }
    }

    /// The tool panicked.
    pub fn panicked(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::Panicked,
            message: message.into(),
        }
    }

    /// The tool is outside the scope in force, so the run refused to call it.
    pub fn denied(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::Denied,
            message: message.into(),
        }
    }

    /// The model was not offered the tool, so the run refused to call it.
    pub fn not_offered(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ToolErrorKind::NotOffered,
            message: message.into(),
        }
    }
}

/// What a tool call knows about itself besides its arguments (see [`Tool::call_in`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallContext {
    /// `<branch id>/<effect>` (`calm-owl-1234.1/0`: the first journaled effect of the run's
    /// second branch): the call's position in its run, the same every time the run is
    /// replayed or resumed (a durable run keeps its id in its journal), different for every
    /// call of the run.
    pub idempotency_key: String,
}

impl CallContext {
    /// A context with `idempotency_key`.
    pub fn new(idempotency_key: impl Into<String>) -> CallContext {
        CallContext {
            idempotency_key: idempotency_key.into(),
        }
    }
}

/// A tool made from a name, a description, a schema and an async function.
///
/// ```
/// use agent_op::{FnTool, Tool, ToolError};
/// use serde_json::{json, Value};
///
/// let add = FnTool::new("add", "Adds a and b", json!({"type": "object"}), |args: Value| async move {
///     let a = args["a"].as_i64().ok_or_else(|| ToolError::invalid_arguments("a must be an integer"))?;
///     let b = args["b"].as_i64().ok_or_else(|| ToolError::invalid_arguments("b must be an integer"))?;
///     Ok(json!(a + b))
/// });
/// assert_eq!(add.name(), "add");
/// ```
pub struct FnTool<F> {
    name: String,
    description: String,
    parameters: Value,
    blocking: bool,
    f: F,
}

impl<F> FnTool<F> {
    /// A tool that runs `f` (an async function of the JSON arguments).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: F,
    ) -> FnTool<F> {
        FnTool {
            name: name.into(),
            description: description.into(),
            parameters,
            blocking: false,
            f,
        }
    }

    /// Marks the tool as blocking (see [`Tool::is_blocking`]).
    pub fn blocking(mut self) -> FnTool<F> {
        self.blocking = true;
        self
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin((self.f)(args))
    }

    fn is_blocking(&self) -> bool {
        self.blocking
    }
}

/// The tools a run may call, by name. A program calling any other name fails the run: tool
/// permissions are enforced by the interpreter, not by the prompt. Cloning is cheap (the set is
/// shared until changed).
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Arc<BTreeMap<String, Arc<dyn Tool>>>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> ToolSet {
        ToolSet::default()
    }

    /// Adds a tool, replacing any tool of the same name.
    pub fn with(mut self, tool: impl Tool + 'static) -> ToolSet {
        self.insert(Arc::new(tool));
        self
    }

    /// Adds a shared tool, replacing any tool of the same name.
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        Arc::make_mut(&mut self.tools).insert(tool.name().to_owned(), tool);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The definitions of every tool, sorted by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.values().map(|t| t.definition()).collect()
    }

    /// The tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}

impl<T: Tool + 'static> FromIterator<T> for ToolSet {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> ToolSet {
        let mut set = ToolSet::new();
        for tool in iter {
            set.insert(Arc::new(tool));
        }
        set
    }
}

/// The tools, and the capabilities they need, that a part of a program may use: the payload
/// of [`op::with_tools`](crate::op::with_tools).
///
/// Inside the scope, `op::tool` calls only its tools (using the scope's implementations),
/// `op::tool_definitions` and `op::infer` offer only them, and any other name is refused
/// with [`ToolErrorKind::Denied`] and a `tool_denied` trace event. Scopes nest and only
/// narrow: a scope naming a tool or capability the enclosing scope lacks fails the run as it
/// is entered. The run's [`ToolSet`] is the outermost scope (with every capability).
#[derive(Clone, Debug, Default)]
pub struct ToolScope {
    /// A name for the scope, in errors and the trace.
    pub name: String,
    /// The tools in scope.
    pub tools: ToolSet,
    /// The capabilities granted (`fs.read`, `net`, …): a nested scope may only grant a
    /// subset.
    pub capabilities: std::collections::BTreeSet<String>,
}

impl ToolScope {
    /// A scope named `name` with `tools` and no capabilities.
    pub fn new(name: impl Into<String>, tools: ToolSet) -> ToolScope {
        ToolScope {
            name: name.into(),
            tools,
            capabilities: Default::default(),
        }
    }

    /// Grants `capability`.
    pub fn grant(mut self, capability: impl Into<String>) -> ToolScope {
        self.capabilities.insert(capability.into());
        self
    }
}
