//! Ollama's native API.
//!
//! - [`client`](OllamaClient): configuration (host from `OLLAMA_HOST`, `keep_alive`, model
//!   options such as `num_ctx`), `/api/chat` plain and streamed as a
//!   [`Provider`](agent_op::Provider), with the durations Ollama reports;
//! - [`OllamaEmbedder`]: `/api/embed` as an [`EmbeddingProvider`](agent_op::EmbeddingProvider);
//! - [`NdjsonAssembler`], [`assemble_stream`], [`assemble_bytes`]: the NDJSON streaming format,
//!   usable on any bytes, including a recording in memory;
//! - `wire`: the request and response shapes.
//!
//! What is sent: every message role (assistant tool calls with their arguments as objects,
//! tool results with `tool_name` and `tool_call_id`), tools with their JSON schemas, `format`
//! (`"json"` or a JSON schema), `options` (the client's, then the prompt's `temperature`,
//! `num_predict`, `seed`, `stop`), `stream`, and `keep_alive`. Ollama has no `tool_choice`:
//! [`ToolChoice::None`](agent_op::ToolChoice::None) sends no tools and
//! [`ToolChoice::Tool`](agent_op::ToolChoice::Tool) sends only the named one.

mod client;
mod embed;
mod stream;
mod wire;

pub use client::{DEFAULT_OLLAMA_HOST, OllamaBuilder, OllamaClient, OllamaResponse};
pub use embed::OllamaEmbedder;
pub use stream::{NdjsonAssembler, OllamaTimings, assemble_bytes, assemble_stream};

/// The old name of [`NdjsonAssembler`], kept for one release: both clients' assemblers were
/// called `ChunkAssembler`.
#[deprecated(since = "0.2.0", note = "renamed to `NdjsonAssembler`")]
pub type ChunkAssembler = NdjsonAssembler;
pub use wire::KeepAlive;
