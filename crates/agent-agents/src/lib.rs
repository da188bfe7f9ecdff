//! # agent-agents: the typed layer over the effect system
//!
//! The only untyped boundary of an agent should be the model's text. This crate makes the
//! rest typed, as `Op` programs (so both interpreters, traces, budgets, abort and steering
//! apply unchanged):
//!
//! - [`LlmOutput`]: values a model can produce — every `T: Deserialize + JsonSchema`
//!   (schema by schemars), text, numbers, enums of names, [`Lines`] — with a forgiving
//!   parser ([`parse_json`]: code fences, leading prose, bare scalars) and typed
//!   [`ParseError`]s;
//! - [`infer_as`] / [`Structured`]: ask for a `T`, natively (JSON-schema response formats)
//!   when the provider enforces them, with format instructions otherwise, and repair bad
//!   replies progressively (the error, the full format and examples only after a failure);
//!   [`OutputError`] keeps every attempt;
//! - [`tool`] / [`TypedTool`]: a tool from an async function of typed arguments, its schema
//!   generated and arguments validated (`jsonschema`) before it runs; marks for read-only,
//!   blocking, a timeout and the capabilities it needs ([`ToolMarks`]);
//! - [`Toolbox`] / [`with_toolbox`]: tools plus capabilities as one value, and runtime
//!   scopes that only narrow (`op::with_tools` underneath);
//! - [`agent`] / [`Agent`]: the agent loop as a program — model, tools (a reply's calls run
//!   in one `par`), repeat until a typed answer; `max_turns`, repairs, and
//!   [`verified`](Agent::verified) answers that a check program must accept; [`SubAgent`]s
//!   offered as tools, under their own budget and narrower toolbox, nested in the trace;
//! - context middleware ([`ContextLayer`]): [`Truncate`] to a token limit,
//!   [`ElideToolResults`], [`Compact`] (a model-written summary), applied before each turn;
//! - MCP (feature `mcp`, default): [`McpServer`] connects to a server (a child process on
//!   stdio, or a URL over streamable HTTP) and turns its tools into a [`Toolbox`], scoped by
//!   the capabilities you grant them; [`McpCommand`] sets how a child server starts (its
//!   stderr log, its handshake timeout) and kills its whole process group on every way out;
//!   [`ToolboxServer`] serves a toolbox to MCP clients.
//!
//! ```
//! use agent_agents::{infer_as, tool, with_toolbox, Toolbox};
//! use agent_op::op::{self, Op};
//! use agent_op::Prompt;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct City { name: String, country: String }
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Query { city: String }
//!
//! let weather = tool("weather", "Today's weather in a city", |q: Query| async move {
//!     Ok(format!("Sunny in {}", q.city))
//! })
//! .read_only()
//! .needs("net");
//! let toolbox = Toolbox::new("travel").with(weather);
//!
//! let program: Op<(), _> = with_toolbox(
//!     &toolbox,
//!     infer_as::<_, City>("gpt-4o-mini", Prompt::new().user("Which city hosts the Louvre?"))
//!         .and_then(|city| match city {
//!             Ok(city) => op::tool("weather", serde_json::json!({ "city": city.name })),
//!             Err(e) => op::pure(Err(agent_op::ToolError::failed(e.to_string()))),
//!         }),
//! );
//! # let _ = program;
//! ```

mod agent_loop;
mod extract;
mod infer_as;
#[cfg(feature = "mcp")]
mod mcp;
mod middleware;
mod output;
mod tool;
mod toolbox;

pub use agent_loop::{Agent, AgentError, SubAgent, agent};
pub use infer_as::{Ask, Attempt, AttemptError, OutputError, Structured, infer_as};
#[cfg(feature = "mcp")]
pub use mcp::{McpCommand, McpError, McpServer, ToolboxServer, kill_spawned_servers};
pub use middleware::{
    Compact, ContextLayer, ElideToolResults, Truncate, elide_tool_results, truncate,
};
pub use output::{Lines, LlmOutput, OutputFormat, ParseError, parse_json, schema_of};
pub use tool::{ToolMarks, TypedTool, call_context, tool};
pub use toolbox::{Toolbox, ToolboxError, with_toolbox};
