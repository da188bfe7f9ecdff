//! The [`Provider`] trait: how interpreters reach a model.

use std::sync::Arc;
use std::time::Duration;

use crate::cost::MicroUsd;
use crate::future::BoxFuture;
use crate::message::{Prompt, Response};

/// A chat model endpoint.
///
/// Implementations live in `agent-provider` (OpenAI-compatible, Ollama, scripted test providers);
/// interpreters depend only on this trait.
pub trait Provider: Send + Sync {
    /// Sends one prompt to `model` and returns the complete reply.
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>>;

    /// The most this call could cost, if the provider knows its prices. Budgets use it to
    /// reserve money before concurrent calls; `None` (the default) makes them reserve
    /// conservatively.
    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        let _ = (model, prompt);
        None
    }
}

impl<P: Provider + ?Sized> Provider for Arc<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        (**self).chat(model, prompt)
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        (**self).max_cost(model, prompt)
    }
}

impl<P: Provider + ?Sized> Provider for Box<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        (**self).chat(model, prompt)
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        (**self).max_cost(model, prompt)
    }
}

/// Why a model call failed.
///
/// Errors never carry API keys: clients redact credentials before building them.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider asked us to slow down; retrying later may succeed.
    #[error("rate limited (HTTP {status}){}: {message}", retry_after_text(.retry_after))]
    RateLimited {
        /// The HTTP status (usually 429).
        status: u16,
        /// How long the provider asked us to wait, from `Retry-After`.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The account has no quota or credit left; retrying will not help.
    #[error("quota exhausted (HTTP {status}): {message}")]
    QuotaExhausted {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The prompt does not fit the model's context window.
    #[error("context length exceeded: {message}")]
    ContextLengthExceeded {
        /// The provider's message.
        message: String,
    },
    /// The credentials were missing, wrong or not allowed to use the model.
    #[error("authentication failed (HTTP {status}): {message}")]
    Authentication {
        /// The HTTP status (401 or 403).
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// Any other unsuccessful HTTP status.
    #[error("HTTP {status}: {body}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The start of the response body.
        body: String,
        /// The response headers (credentials never appear in responses).
        headers: Vec<(String, String)>,
    },
    /// No complete answer arrived in time.
    #[error("timed out after {after:?}")]
    Timeout {
        /// The time limit that passed.
        after: Duration,
    },
    /// The connection failed (DNS, TCP, TLS, reset).
    #[error("transport error: {message}")]
    Transport {
        /// What failed.
        message: String,
    },
    /// The response could not be understood.
    #[error("could not decode response: {message} (near `{excerpt}`)")]
    Decode {
        /// What was wrong.
        message: String,
        /// The offending part of the response.
        excerpt: String,
    },
    /// A test provider received a call it did not expect.
    #[error("unexpected model call: {message}")]
    Unexpected {
        /// What was unexpected.
        message: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

fn retry_after_text(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(", retry after {d:?}"),
        None => String::new(),
    }
}

impl ProviderError {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::RateLimited { .. }
            | ProviderError::Timeout { .. }
            | ProviderError::Transport { .. } => true,
            ProviderError::Http { status, .. } => *status >= 500 || *status == 408,
            _ => false,
        }
    }

    /// How long the provider asked us to wait before retrying, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
