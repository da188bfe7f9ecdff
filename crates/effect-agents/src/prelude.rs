//! What most agent programs need, in one `use effect_agents::prelude::*;`.
//!
//! The DSL's vocabulary ([`Op`], the [`op`](mod@crate::op) module and the `op!` macro, [`Prompt`],
//! [`ContextRequest`], [`Response`]), running a program ([`run`], [`Config`], [`RunError`]), JSON for tool
//! arguments and schemas ([`json!`](crate::serde_json::json), [`Value`]), a scripted model
//! for trying things offline ([`ScriptedProvider`]), and the traits whose methods programs
//! call ([`Merge`], [`Provider`], [`Tool`], [`MemoryBackend`], [`ProviderExt`]); with the
//! `agents` feature, the typed layer's `infer_as`, `tool`, `Toolbox` and `with_toolbox`. The
//! operations themselves stay behind `op::` (`op::infer_raw`, `op::tool`, `op::par`…), so
//! the prelude does not claim short names like `get` or `check`.

pub use crate::provider::ProviderExt;
pub use crate::{
    Config, ContextRequest, FnTool, MemoryBackend, Merge, Op, Prompt, Provider, Response, RunError,
    ScriptedProvider, Tool, ToolError, op, run,
};
#[cfg(feature = "agents")]
pub use agent_agents::{Toolbox, infer_as, tool, with_toolbox};
pub use serde_json::{Value, json};
