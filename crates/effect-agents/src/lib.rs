//! # effect-agents: LLM agents as programs that are data
//!
//! An agent is a value of [`Op<S, A>`](Op): a program over state `S` returning `A`, built
//! from inert operations (call a model, call a tool, read and write state, run branches in
//! parallel or race them, checkpoint, budget, time out, remember and recall). Interpreters
//! give programs meaning, and every run yields a structured [`Trace`].
//!
//! This crate is the front door: it re-exports the workspace's crates under short paths,
//! each backend behind a cargo feature. Services that want fewer dependencies can depend on
//! the underlying crates one by one instead (`agent-op`, `agent-interp-seq`,
//! `agent-interp-par`, `agent-engine`, `agent-provider`, `agent-memory`); the types are the
//! same.
//!
//! ```
//! use effect_agents::prelude::*;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let model = ScriptedProvider::new([Response::text("Lisbon")]);
//! let program: Op<(), String> =
//!     op::infer_raw("any-model", Prompt::new().user("Capital of Portugal?")).map(|r| r.content);
//! let outcome = run(&Config::new().provider(model), (), program).await?;
//! assert_eq!(outcome.value, "Lisbon");
//! # Ok::<(), RunError>(())
//! # }).unwrap();
//! ```
//!
//! ## What is where
//!
//! - The DSL: [`Op`], the [`op`](mod@op) module of constructors and the [`op!`] macro; [`Prompt`],
//!   [`Message`], [`Response`] and the other message types; [`Budget`], [`Merge`] (trait and
//!   `#[derive(Merge)]`) and the CRDT state types in [`crdt`]; the ready-made agent loop in
//!   [`agent`].
//! - Running: [`run`] (the sequential interpreter, the reference semantics), [`Config`],
//!   [`Outcome`], [`RunError`]; [`par::run`] runs the same programs with `par` branches at
//!   once and `race` really racing (feature `par`). [`seq`] and [`par`] hold the rest of each
//!   interpreter; [`engine`] the engine they share (schedulers, subscribers, spans).
//! - Traces: [`Trace`] and the [`trace`] module (events, ids, checkpoints, JSONL).
//! - Plug-in points, as traits: [`Provider`], [`Tool`], [`MemoryBackend`],
//!   [`EmbeddingProvider`].
//! - [`provider`]: model clients ([`provider::openai`], [`provider::ollama`]), layers (retry,
//!   timeout, rate limit, fallback), cassettes, pricing, and [`ScriptedProvider`] for tests.
//! - [`memory`]: memory backends ([`memory::InMemoryBackend`], [`memory::sqlite`],
//!   `memory::postgres` with feature `postgres`),
//!   embedders, [`memory::build_context`] and the backend conformance suite.
//! - [`context`]: what `op::infer` asks for ([`ContextRequest`]) and the report the trace
//!   records for it; [`prompt`]: the context sources, the pipeline and the Prompt IR —
//!   sections compiled into a prompt under a token budget.
//! - [`agents`]: typed model output ([`agents::infer_as`]), typed tools ([`agents::tool`]) and
//!   capability-scoped toolboxes ([`agents::Toolbox`]).
//! - Telemetry: every run, model call, tool call, memory operation, branch and scope is a
//!   `tracing` span named per the OpenTelemetry GenAI conventions; feature `otel` exports
//!   them over OTLP (`effect_agents::otel::init("service")`).
//! - [`journal`]: durable runs and replay — [`seq::run_durable`] commits every
//!   nondeterministic result before the program sees it, [`seq::resume`] continues after a
//!   crash without paying twice, [`seq::replay`] re-runs a journal with no calls at all (and
//!   says where a changed program diverged); backends: a JSON Lines file, SQLite, PostgreSQL
//!   (the same functions are in [`par`]).
//! - [`prelude`]: what most programs need, in one `use`.
//!
//! ## Cargo features
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `par` | yes | [`par`], the concurrent interpreter |
//! | `ollama` | yes | [`provider::ollama`], the Ollama client and embedder |
//! | `openai` | no | [`provider::openai`], the OpenAI-compatible client and embedder |
//! | `agents` | yes | [`agents`], typed output, typed tools and toolboxes (pulls in schemars and jsonschema) |
//! | `serve` | no | `effect_agents::serve`: agents behind HTTP (the Agent Protocol, OpenAI's chat API, a durable store, keys) as an axum `Router` (pulls in axum) |
//! | `otel` | no | `effect_agents::otel`: OTLP export of the runtime's `tracing` spans (HTTP/protobuf and gRPC; pulls in opentelemetry and tonic) |
//! | `sqlite` | yes | [`memory::sqlite`], the SQLite memory backend (pulls in sqlx) |
//! | `postgres` | no | `effect_agents::memory::postgres`, the PostgreSQL + pgvector memory backend (pulls in sqlx's Postgres driver and rustls) |
//! | `local-embed` | no | `memory::LocalEmbedder`: a sentence-transformers BERT model (all-MiniLM-L6-v2, say) run on the CPU in pure Rust (pulls in candle and tokenizers) |
//! | `journal` | yes | [`journal`], the journals of durable runs and replays: JSON Lines, SQLite (with `sqlite`), PostgreSQL (with `postgres`) |
//! | `temporal` | no | `effect_agents::temporal`: programs as durable Temporal workflows, effects as activities on many machines (pulls in the Temporal SDK; needs Rust 1.92) |
//! | `prompt` | yes | [`prompt`], the Prompt IR, token counting (pulls in bpe-openai) and the default context pipeline of `op::infer` |
//!
//! `#[derive(Merge)]` and [`op!`] work through this crate alone: a crate depending only on
//! `effect-agents` (not on `agent-op`) can use both.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Lets `#[derive(Merge)]` inside this crate's own tests and examples name `::effect_agents`.
extern crate self as effect_agents;

pub mod memory;
pub mod prelude;
pub mod provider;

/// The engine every interpreter shares (`agent-engine`): [`Engine`](engine::Engine) runs a
/// program with a branch [`Scheduler`](engine::Scheduler), which is all an interpreter adds.
pub mod engine {
    pub use agent_engine::*;
}

/// The sequential interpreter (`agent-interp-seq`): the reference semantics. Its `run` is
/// re-exported as [`run`].
pub mod seq {
    pub use agent_interp_seq::*;
}

/// The concurrent interpreter (`agent-interp-par`): the same programs, with `par` branches
/// run at once and `race` branches racing (losers cancelled).
#[cfg(feature = "par")]
#[cfg_attr(docsrs, doc(cfg(feature = "par")))]
pub mod par {
    pub use agent_interp_par::*;
}

/// The Temporal interpreter (`agent-interp-temporal`): the same programs as durable Temporal
/// workflows, with model, tool and memory calls as activities on workers across machines
/// (see `docs/DISTRIBUTED.md`).
#[cfg(feature = "temporal")]
#[cfg_attr(docsrs, doc(cfg(feature = "temporal")))]
pub mod temporal {
    pub use agent_interp_temporal::*;
}

/// The Prompt IR (`agent-prompt`): context sources and the [`Pipeline`](agent_prompt::Pipeline)
/// `op::infer` runs, labeled, budgeted sections compiled into a prompt under a token budget,
/// with a report of what was kept, shrunk and dropped.
#[cfg(feature = "prompt")]
#[cfg_attr(docsrs, doc(cfg(feature = "prompt")))]
pub mod prompt {
    pub use agent_prompt::*;
}

/// The typed layer (`agent-agents`): typed model output with progressive repairs
/// ([`infer_as`](agent_agents::infer_as)), typed tools validated against their schema
/// ([`tool`](agent_agents::tool)), and capability-scoped toolboxes
/// ([`Toolbox`](agent_agents::Toolbox), [`with_toolbox`](agent_agents::with_toolbox)).
#[cfg(feature = "agents")]
#[cfg_attr(docsrs, doc(cfg(feature = "agents")))]
pub mod agents {
    pub use agent_agents::*;
}

/// Agents behind HTTP (`agent-serve`): a [`Server`](agent_serve::Server) of named agents
/// whose [`router`](agent_serve::Server::router) a service mounts beside its own routes.
#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub mod serve {
    pub use agent_serve::*;
}

/// OpenTelemetry export (`agent-otel`): [`init`](agent_otel::init) sends the runtime's
/// `tracing` spans (GenAI semantic conventions) to the OTLP backend the standard
/// `OTEL_EXPORTER_OTLP_*` variables name.
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel {
    pub use agent_otel::*;
}

/// Journals (`agent-journal`): where durable runs commit their nondeterministic results and
/// replays read them. Run with a journal through [`seq::run_durable`], [`seq::resume`],
/// [`seq::replay`], [`seq::replay_then_live`] and [`seq::resume_from`] (or their [`par`]
/// twins).
#[cfg(feature = "journal")]
#[cfg_attr(docsrs, doc(cfg(feature = "journal")))]
pub mod journal {
    pub use agent_journal::*;
    pub use agent_op::journal::{Divergence, Recorded, Request, diff_requests};
}

pub use agent_op::{agent, context, crdt, message, op, trace};

pub use agent_interp_seq::{
    CancellationToken, Config, ErrorKind, JsonlSubscriber, Outcome, RunError, SteeringQueue,
    Subscriber, run, run_agent,
};
pub use agent_op::{
    BoxFuture, Budget, Candidate, Checkpoint, ContextRequest, Delta, EmbeddingError,
    EmbeddingProvider, Event, EventKind, EventType, Exhausted, FinishReason, FnTool, InferOptions,
    MemoryBackend, MemoryEntry, MemoryError, MemoryId, Merge, Message, MicroUsd, NewMemory, Op,
    Prompt, Provider, ProviderError, PrunePolicy, PruneReport, Resource, Response, ResponseFormat,
    ScoredMemory, SearchOptions, Steering, Tag, TimedOut, Timestamp, Tool, ToolCall, ToolChoice,
    ToolDefinition, ToolError, ToolErrorKind, ToolSet, Trace, TraceEntry, TraceId, Usage,
};
pub use agent_provider::ScriptedProvider;

/// The serialization crates this API speaks (states are `serde` types, tool arguments and
/// schemas are `serde_json` values), re-exported so a crate can name them through this one.
pub use {serde, serde_json};

/// Compiles the code in this crate's README (the crates.io page) as doc tests, so it cannot
/// drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
