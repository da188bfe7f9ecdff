//! The OpenAI chat-completions API, as served by OpenAI and by vLLM, llama.cpp's server,
//! LM Studio, OpenRouter and Ollama's `/v1`.
//!
//! - [`client`](OpenAiClient): configuration, `/chat/completions` (plain and streamed) as a
//!   [`Provider`](agent_op::Provider);
//! - [`OpenAiEmbedder`]: `/embeddings` as an [`EmbeddingProvider`](agent_op::EmbeddingProvider);
//! - [`SseAssembler`], [`assemble_stream`], [`assemble_bytes`]: the streaming format
//!   (server-sent events), usable on any bytes, including a recording in memory;
//! - `wire`: the request and response shapes.
//!
//! What is sent: every message role (assistant tool calls with their JSON arguments as text,
//! tool results with their call id), tools with their JSON schemas, `tool_choice`,
//! `temperature`, `max_tokens` or `max_completion_tokens` ([`MaxTokensField`]), `stop`, `seed`,
//! `response_format` (`text`, `json_object`, `json_schema`), and when streaming `stream: true`
//! with `stream_options: {"include_usage": true}`.

mod client;
mod embed;
mod stream;
mod wire;

pub use client::{MaxTokensField, OPENAI_BASE_URL, OpenAiBuilder, OpenAiClient, StructuredOutput};
pub use embed::{MAX_BATCH, OpenAiEmbedder};
pub use stream::{SseAssembler, assemble_bytes, assemble_stream};

/// The old name of [`SseAssembler`], kept for one release: both clients' assemblers were
/// called `ChunkAssembler`.
#[deprecated(since = "0.2.0", note = "renamed to `SseAssembler`")]
pub type ChunkAssembler = SseAssembler;
