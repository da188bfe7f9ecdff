//! # agent-op: agents as programs that are data
//!
//! An agent is a value of [`Op<S, A>`]: a program over state `S` returning `A`, built from inert
//! operations (call a model, call a tool, read and write state, run branches in parallel or
//! race them, checkpoint, budget, time out, remember and recall). Interpreters
//! (`agent-interp-seq`, `agent-interp-par`) give programs meaning and record every run as a
//! structured [`Trace`].
//!
//! This crate holds data and traits: no network, no async runtime, no threads. Its only I/O
//! is the JSONL file helpers of [`trace::jsonl`] (writing, reading and appending trace
//! files), so every crate that records or reads traces shares one implementation.
//!
//! - [`op`](mod@op): the DSL ([`Op`], its constructors, loops) and the [`op!`] do-notation macro;
//! - [`agent`]: a ready-made conversational agent loop ([`agent::react`]);
//! - [`interp`]: for interpreter authors, the erased program tree interpreters walk;
//! - [`message`]: messages, prompts and model responses; [`attachment`]: their non-text
//!   parts (images);
//! - [`context`]: what [`op::infer`] asks for ([`ContextRequest`]), the
//!   [`ContextPipeline`] that builds its prompt, and the [`ContextReport`](context::ContextReport) traced for it;
//! - [`trace`]: events, trace ids, traces and their queries, checkpoints, JSONL;
//! - [`journal`]: the journal of a run's nondeterministic results (entries keyed by
//!   position, request fingerprints and summaries), the [`Journal`](journal::Journal) trait
//!   its backends implement (in `agent-journal`), and the [`Divergence`](journal::Divergence)
//!   a replay reports; [`op::now`] and [`op::random`] read the clock and draw randomness
//!   through it;
//! - [`crdt`]: merge-able state types (counters, registers, sets, a log, a map) for `par`,
//!   and `#[derive(Merge)]` for structs of them;
//! - the effect-handler traits interpreters call: [`Provider`], [`Tool`], [`MemoryBackend`],
//!   [`EmbeddingProvider`];
//! - [`Budget`], [`Merge`], [`Steering`], [`MicroUsd`].
//!
//! ```
//! use agent_op::{op, Budget, Prompt};
//! use agent_op::op::{checkpoint, infer_raw, limit, modify, pure, tool, Op};
//! use serde_json::json;
//!
//! #[derive(Clone, Default, serde::Serialize)]
//! struct Notes { lines: Vec<String> }
//!
//! let program: Op<Notes, String> = op! {
//!     let reply <- infer_raw("small-model", Prompt::new().user("Plan a trip"));
//!     let weather <- tool("weather", json!({"city": "Oslo"}));
//!     modify(move |n: &mut Notes| n.lines.push(reply.content));
//!     checkpoint("planned");
//!     let guarded <- limit(Budget::new().calls(1), infer_raw("small-model", Prompt::new().user("Summarize")));
//!     pure(format!("weather ok: {}, summary ok: {}", weather.is_ok(), guarded.is_ok()))
//! };
//! # let _ = program;
//! ```

// Lets `#[derive(Merge)]`, which names `::agent_op::Merge`, work inside this crate too.
extern crate self as agent_op;

pub mod agent;
pub mod attachment;
mod budget;
mod cause;
pub mod context;
mod cost;
pub mod crdt;
mod future;
pub mod interp;
pub mod journal;
mod macros;
mod memory;
mod merge;
pub mod message;
mod messages;
pub mod op;
mod preview;
mod provider;
mod provider_error;
mod serde_util;
mod steering;
mod tool;
pub mod trace;

/// `#[derive(Merge)]`: merges a struct field by field (see [`crdt`] for an example).
#[cfg(feature = "derive")]
pub use agent_op_derive::Merge;
pub use attachment::{Attachment, Image};
pub use budget::{Budget, Exhausted, Resource, TimedOut};
pub use cause::Cause;
pub use context::{ContextPipeline, ContextRequest};
pub use cost::MicroUsd;
pub use future::BoxFuture;
pub use memory::{
    Candidate, EmbeddingError, EmbeddingProvider, MemoryBackend, MemoryEntry, MemoryError,
    MemoryId, NewMemory, PrunePolicy, PruneReport, ScoredMemory, SearchOptions, Tag,
    check_embedding, content_hash,
};
pub use merge::Merge;
pub use message::{
    FinishReason, InferOptions, Message, Messages, Prompt, Response, ResponseFormat, ToolCall,
    ToolChoice, Usage,
};
pub use op::Op;
pub use preview::{PREVIEW_CHARS, difference_excerpts, preview};
pub use provider::{Delta, Provider, ProviderError};
pub use steering::Steering;
pub use tool::{
    CallContext, FnTool, Tool, ToolDefinition, ToolError, ToolErrorKind, ToolScope, ToolSet,
};
pub use trace::{
    Checkpoint, Event, EventKind, EventType, RunEnd, RunOutcome, Spend, SpendPart, Timestamp,
    Trace, TraceEntry, TraceId,
};
