//! # agent-spec: agents described in TOML
//!
//! The spec file `agent run` reads, as a library, and everything a spec builds, so that any
//! program (the `agent` command line, a server answering requests) runs the same agent from
//! the same file. The repository's `docs/SPEC.md` describes every key.
//!
//! ```no_run
//! # async fn demo() -> Result<(), agent_spec::SpecError> {
//! use agent_spec::{Input, Spec};
//!
//! let spec = Spec::read("research.toml".as_ref())?;
//! let provider = agent_spec::provider(&spec.model, spec.dir(), None)?;
//! let tools = agent_spec::toolbox(&spec, spec.dir(), "research".as_ref()).await?;
//! let memory = agent_spec::memory(&spec, spec.dir()).await?;
//! let program = agent_spec::program_for(&spec, &tools.toolbox, &Input::message("Why?"))?;
//! // Run `program` with an interpreter configured with `provider`, `memory` and
//! // `tools.toolbox.tool_set()`.
//! # let _ = (provider, memory, program);
//! # Ok(())
//! # }
//! ```
//!
//! - [`Spec`] and its tables ([`ModelSpec`], [`AgentSpec`], [`ToolsSpec`], [`BudgetSpec`],
//!   [`MemorySpec`], [`OutputSpec`], …): [`Spec::read`] parses a file and checks it (every
//!   table refuses keys it does not know), and remembers where it came from
//!   ([`Spec::dir`], [`Spec::name`]); [`Spec::input_schema`] and [`Spec::output_schema`]
//!   describe a served agent's request and answer;
//! - [`provider`]: the model `[model]` names (OpenAI-compatible, Ollama, a cassette,
//!   scripted replies), optionally recorded to a cassette;
//! - [`toolbox`]: the built-in tools ([`tools`]: `read_file`, `http_get`) and the tools of
//!   the spec's MCP servers, which it starts, as one toolbox ([`SpecTools`]);
//! - [`memory`]: the SQLite memory `[memory]` names;
//! - [`program`] and [`program_for`]: the agent program, for the spec's goal or for one
//!   message of a conversation ([`Input`], [`Turn`]), under the spec's [`budget`];
//! - [`SpecError`]: what can go wrong, each kind a variant.

mod error;
mod memory;
mod program;
mod provider;
mod spec;
mod toolbox;
pub mod tools;

pub use error::SpecError;
pub use memory::memory;
pub use program::{Input, Role, Turn, budget, program, program_for};
pub use provider::provider;
pub use spec::{
    AgentSpec, BudgetSpec, HttpGetSpec, McpSpec, MemorySpec, ModelSpec, OutputKind, OutputSpec,
    ReadFileSpec, Reply, ScriptedCall, Spec, ToolsSpec, file_name,
};
pub use toolbox::{SpecTools, toolbox};
