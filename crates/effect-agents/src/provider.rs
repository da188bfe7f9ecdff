//! Model providers (`agent-provider`): the clients, the layers that wrap any
//! [`Provider`](crate::Provider), record/replay cassettes, pricing, and a scripted provider
//! for tests.
//!
//! ```no_run
//! # #[cfg(feature = "ollama")]
//! # fn demo() -> Result<(), effect_agents::provider::ConfigError> {
//! use std::time::Duration;
//! use effect_agents::provider::ProviderExt;
//! use effect_agents::provider::ollama::OllamaClient;
//!
//! let model = OllamaClient::builder()
//!     .build()? // OLLAMA_HOST or 127.0.0.1:11434
//!     .with_retry()
//!     .with_timeout(Duration::from_secs(120));
//! # let _ = model;
//! # Ok(())
//! # }
//! ```

pub use agent_provider::layers::ProviderExt;
/// Settings and errors the HTTP clients share.
#[cfg(any(feature = "openai", feature = "ollama"))]
pub use agent_provider::{
    ConfigError, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT,
};
pub use agent_provider::{
    HttpError, ModelPrice, Pricing, RecordedCall, ScriptReport, ScriptedProvider, cassette, layers,
};

/// The OpenAI-compatible chat-completions client and the `/embeddings` embedder (OpenAI,
/// vLLM, llama.cpp's server, LM Studio, OpenRouter, Ollama's `/v1`).
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod openai {
    pub use agent_provider::openai::*;
}

/// The client for Ollama's native `/api/chat` and the `/api/embed` embedder.
#[cfg(feature = "ollama")]
#[cfg_attr(docsrs, doc(cfg(feature = "ollama")))]
pub mod ollama {
    pub use agent_provider::ollama::*;
}
