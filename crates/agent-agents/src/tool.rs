//! Typed tools: a Rust function with typed arguments and output, its JSON schema generated,
//! arguments validated before it runs.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use agent_op::{BoxFuture, CallContext, Tool, ToolError};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::output::schema_of;

/// How a tool affects the world, and how it must be run. Set with [`TypedTool`]'s builder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolMarks {
    /// It only reads: safe to retry, safe to run in parallel with others.
    pub read_only: bool,
    /// It blocks its thread (CPU work, blocking I/O): run off the async workers.
    pub blocking: bool,
    /// The agent loop asks for approval on the steering channel before each call
    /// ([`Agent::approval_timeout`](crate::Agent::approval_timeout)).
    pub needs_approval: bool,
    /// The longest a call may take; a call still running then is a tool error.
    pub timeout: Option<Duration>,
    /// The capabilities it needs (`fs.read`, `net`, …), checked by [`Toolbox`](crate::Toolbox).
    pub capabilities: Vec<String>,
}

type Handler<A, O> = dyn Fn(A) -> BoxFuture<'static, Result<O, ToolError>> + Send + Sync;

/// A tool made from an async Rust function of typed arguments: build one with [`tool`].
///
/// Its parameters are the JSON schema of `A` (schemars). Arguments a model sends are checked
/// against that schema first (the `jsonschema` crate): arguments that do not fit are a
/// [`ToolError`] of kind `InvalidArguments` carrying every validation message, and the
/// function does not run. The output is serialized to JSON.
pub struct TypedTool<A, O> {
    name: String,
    description: String,
    schema: Value,
    /// `None` if the schema did not compile (never seen: schemars writes valid schemas);
    /// the arguments are then only checked by deserializing them.
    validator: Option<Arc<jsonschema::Validator>>,
    handler: Arc<Handler<A, O>>,
    marks: ToolMarks,
    _types: PhantomData<fn(A) -> O>,
}

/// A typed tool named `name`, described by `description`, running `f`.
///
/// ```
/// use agent_agents::tool;
/// use agent_op::{Tool, ToolError};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add {
///     /// The first addend.
///     a: i64,
///     /// The second addend.
///     b: i64,
/// }
///
/// let add = tool("add", "Adds two integers", |args: Add| async move {
///     args.a.checked_add(args.b).ok_or_else(|| ToolError::failed("overflow"))
/// })
/// .read_only();
/// assert_eq!(add.parameters()["required"], serde_json::json!(["a", "b"]));
/// ```
pub fn tool<A, O, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    f: F,
) -> TypedTool<A, O>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    let schema = schema_of::<A>();
    let validator = jsonschema::validator_for(&schema).ok().map(Arc::new);
    TypedTool {
        name: name.into(),
        description: description.into(),
        schema,
        validator,
        handler: Arc::new(move |args| Box::pin(f(args))),
        marks: ToolMarks::default(),
        _types: PhantomData,
    }
}

impl<A, O> TypedTool<A, O> {
    /// Marks it read-only.
    pub fn read_only(mut self) -> Self {
        self.marks.read_only = true;
        self
    }

    /// Marks it blocking: interpreters run it on a blocking thread.
    pub fn blocking(mut self) -> Self {
        self.marks.blocking = true;
        self
    }

    /// Makes the agent loop ask for approval before each call: it records an
    /// `approval_requested` event and waits on the steering channel for `approve` (or
    /// `approve <call id>`); any other message denies the call, and no answer in time is a
    /// tool error. Calls made with `op::tool` directly are not held.
    pub fn needs_approval(mut self) -> Self {
        self.marks.needs_approval = true;
        self
    }

    /// Bounds each call by `limit`: a call still running is stopped and is a tool error.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.marks.timeout = Some(limit);
        self
    }

    /// Declares a capability it needs (`fs.read`, `fs.write:./out`, `net`, `shell`, …).
    pub fn needs(mut self, capability: impl Into<String>) -> Self {
        self.marks.capabilities.push(capability.into());
        self
    }

    /// Its marks.
    pub fn marks(&self) -> &ToolMarks {
        &self.marks
    }
}

impl<A, O> fmt::Debug for TypedTool<A, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedTool")
            .field("name", &self.name)
            .field("marks", &self.marks)
            .finish_non_exhaustive()
    }
}

/// Checks `args` against `validator`: every message, joined, if they do not fit.
fn check_args(validator: &jsonschema::Validator, args: &Value) -> Result<(), ToolError> {
    let errors: Vec<String> = validator
        .iter_errors(args)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("{at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ToolError::invalid_arguments(format!(
            "the arguments do not fit the tool's schema: {}",
            errors.join("; ")
        )))
    }
}

/// Typed arguments from a model's JSON: checked against the schema's `validator` first (when
/// there is one), then deserialized. Either failure is an `InvalidArguments` tool error.
pub(crate) fn parse_args<A: DeserializeOwned>(
    validator: Option<&jsonschema::Validator>,
    args: Value,
) -> Result<A, ToolError> {
    if let Some(validator) = validator {
        check_args(validator, &args)?;
    }
    serde_json::from_value(args)
        .map_err(|e| ToolError::invalid_arguments(format!("the arguments do not fit: {e}")))
}

tokio::task_local! {
    static CALL: CallContext;
}

/// Inside a typed tool's function, the context of the call running now: its idempotency key
/// (`<branch id>/<effect>`, the same when a resumed durable run repeats the call), to
/// hand to the service a side-effecting tool changes. `None` outside a tool call (and in
/// tasks the function spawns, which do not inherit it).
///
/// ```
/// use agent_agents::{call_context, tool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Charge { cents: u64 }
///
/// let charge = tool("charge", "Charges the card", |c: Charge| async move {
///     let key = call_context().map(|c| c.idempotency_key).unwrap_or_default();
///     Ok::<_, agent_op::ToolError>(format!("charged {} with key {key}", c.cents))
/// });
/// # let _ = charge;
/// ```
pub fn call_context() -> Option<CallContext> {
    CALL.try_with(Clone::clone).ok()
}

impl<A, O> Tool for TypedTool<A, O>
where
    A: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn is_blocking(&self) -> bool {
        self.marks.blocking
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let args: A = parse_args(self.validator.as_deref(), args)?;
            let run = (self.handler)(args);
            let output = match self.marks.timeout {
                Some(limit) => match tokio::time::timeout(limit, run).await {
                    Ok(output) => output?,
                    Err(_) => {
                        return Err(ToolError::failed(format!(
                            "the tool `{}` did not finish within {limit:?}",
                            self.name
                        )));
                    }
                },
                None => run.await?,
            };
            serde_json::to_value(output).map_err(|e| {
                ToolError::failed(format!("the tool's output could not be serialized: {e}"))
            })
        })
    }

    /// Runs [`call`](Tool::call) with `context` readable through [`call_context`].
    fn call_in(
        &self,
        args: Value,
        context: &CallContext,
    ) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(CALL.scope(context.clone(), self.call(args)))
    }
}
