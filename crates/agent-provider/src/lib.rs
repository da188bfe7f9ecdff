//! # agent-provider: model providers
//!
//! Implementations of [`Provider`](agent_op::Provider) and
//! [`EmbeddingProvider`](agent_op::EmbeddingProvider) for the APIs people run, plus what makes
//! them dependable and testable:
//!
//! - [`openai`]: [`OpenAiClient`] for the chat-completions API (OpenAI, vLLM, llama.cpp's
//!   server, LM Studio, OpenRouter, Ollama's `/v1`): plain and streamed (SSE) chat, tools,
//!   structured output, and [`OpenAiEmbedder`] for `/embeddings`;
//! - [`ollama`]: [`OllamaClient`] for Ollama's native `/api/chat` (plain and streamed NDJSON,
//!   tools, `format`, options, `keep_alive`, reported durations) and [`OllamaEmbedder`] for
//!   `/api/embed`;
//! - [`layers`]: [`Retry`](layers::Retry), [`Timeout`](layers::Timeout),
//!   [`ConcurrencyLimit`](layers::ConcurrencyLimit), [`RateLimit`](layers::RateLimit) and
//!   [`Fallback`](layers::Fallback), which wrap any provider;
//! - [`cassette`]: [`RecordingProvider`](cassette::RecordingProvider) and
//!   [`ReplayProvider`](cassette::ReplayProvider), to record calls once and replay them in
//!   tests without a network;
//! - [`Pricing`]: model prices in integer micro-dollars, for
//!   [`Response::cost`](agent_op::Response::cost) and
//!   [`Provider::max_cost`](agent_op::Provider::max_cost);
//! - [`ScriptedProvider`]: answers from a script, for unit tests of programs.
//!
//! ## Cargo features
//!
//! - `openai` (default): the [`openai`] module, with `reqwest`;
//! - `ollama` (default): the [`ollama`] module, with `reqwest`.
//!
//! Without either, the crate has no HTTP dependency: the layers, cassettes, pricing and the
//! scripted provider work with any [`Provider`](agent_op::Provider).
//!
//! Internals: `http` (one configured `reqwest` client per provider: connect and request timeouts on
//! by default, bounded bodies), `error` (the HTTP → [`ProviderError`] mapping both clients share;
//! see `docs/PROVIDERS.md` for the table), `secret` (API keys never appear in `Debug` output,
//! errors or cassettes), `json` (shared wire helpers), `request` (the tool and schema shapes both
//! APIs share, and the checks a request passes before it is sent), `assemble` (running either
//! stream assembler over a body in memory).
//!
//! ```no_run
//! use std::time::Duration;
//! use agent_op::{Prompt, Provider};
//! use agent_provider::layers::ProviderExt;
//! use agent_provider::{OllamaClient, OpenAiClient};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let openai = OpenAiClient::builder().build()?; // OPENAI_API_KEY
//! let local = OllamaClient::builder().build()?; // OLLAMA_HOST or 127.0.0.1:11434
//! let model = openai
//!     .with_retry()
//!     .with_fallback(local)
//!     .secondary_model("llama3.2")
//!     .with_timeout(Duration::from_secs(120));
//! let reply = model.chat("gpt-4o-mini", &Prompt::new().user("Hello!")).await?;
//! println!("{}", reply.content);
//! # Ok(())
//! # }
//! ```
//!
//! [`ProviderError`]: agent_op::ProviderError

#![cfg_attr(docsrs, feature(doc_cfg))]

// The HTTP plumbing both clients share, compiled with either.
#[cfg(any(feature = "openai", feature = "ollama"))]
mod assemble;
pub mod cassette;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod error;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod http;
mod http_error;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod json;
pub mod layers;
#[cfg(feature = "ollama")]
#[cfg_attr(docsrs, doc(cfg(feature = "ollama")))]
pub mod ollama;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai;
mod pricing;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod reply;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod request;
mod scripted;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod secret;
#[cfg(any(feature = "openai", feature = "ollama"))]
mod spans;

#[cfg(any(feature = "openai", feature = "ollama"))]
pub use error::ConfigError;
#[cfg(any(feature = "openai", feature = "ollama"))]
pub use http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT};
pub use http_error::HttpError;
#[cfg(feature = "ollama")]
pub use ollama::{OllamaClient, OllamaEmbedder};
#[cfg(feature = "openai")]
pub use openai::{OpenAiClient, OpenAiEmbedder};
pub use pricing::{ModelPrice, Pricing};
pub use scripted::{RecordedCall, ScriptReport, ScriptedProvider};
