//! The [`Provider`] trait: how interpreters reach a model.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

    /// Like [`Provider::chat`], but passes the reply to `on_delta` piece by piece as it
    /// arrives, and still returns the complete reply. A stream that ends before the reply is
    /// complete is an error, never a partial success.
    ///
    /// The default calls `chat` and passes the whole reply as one delta; clients of streaming
    /// APIs override it.
    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let response = self.chat(model, prompt).await?;
            if !response.content.is_empty() {
                on_delta(Delta::Text(response.content.clone()));
            }
            for (index, call) in response.tool_calls.iter().enumerate() {
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                on_delta(Delta::ToolCall {
                    index,
                    id: Some(call.id.clone()),
                    name: Some(call.name.clone()),
                });
                on_delta(Delta::ToolCallArguments {
                    index,
                    fragment: call.arguments.to_string(),
                });
            }
            Ok(response)
        })
    }

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

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        (**self).chat_stream(model, prompt, on_delta)
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

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        (**self).chat_stream(model, prompt, on_delta)
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        (**self).max_cost(model, prompt)
    }
}

/// A piece of a reply, as a streaming call receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Delta {
    /// Text appended to the reply.
    Text(String),
    /// A tool call starts (or more of its header arrives): its position among the reply's
    /// tool calls, and its id and name once known.
    ToolCall {
        /// The call's position in the reply's `tool_calls`.
        index: u32,
        /// The provider's id for the call, when this piece carries it.
        id: Option<String>,
        /// The tool's name, when this piece carries it.
        name: Option<String>,
    },
    /// More of a tool call's JSON arguments, as text.
    ToolCallArguments {
        /// The call's position in the reply's `tool_calls`.
        index: u32,
        /// The next piece of the arguments' JSON text.
        fragment: String,
    },
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
    /// The request breaks a rule of the provider's API (too many stop sequences, a tool whose
    /// parameters are not a JSON schema object, …), so it was not sent: sending it again will
    /// not help, the prompt has to change.
    #[error("invalid request: {message}")]
    InvalidRequest {
        /// Which rule the request breaks.
        message: String,
    },
    /// A test provider received a call it did not expect.
    #[error("unexpected model call: {message}")]
    Unexpected {
        /// What was unexpected.
        message: String,
    },
    /// Every provider of a fallback chain failed: their errors, in the order they were
    /// tried (never nested: a chain of chains is one flat list).
    #[error("{}", all_failed_text(.errors))]
    AllFailed {
        /// Each provider's error, the first one tried first.
        errors: Vec<ProviderError>,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

fn all_failed_text(errors: &[ProviderError]) -> String {
    let mut text = format!("all {} providers failed", errors.len());
    for (i, error) in errors.iter().enumerate() {
        text.push_str(&format!("; ({}) {error}", i + 1));
    }
    text
}

fn retry_after_text(retry_after: &Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(", retry after {d:?}"),
        None => String::new(),
    }
}

impl ProviderError {
    /// Whether the same request may succeed if sent again later.
    ///
    /// Retryable: [`RateLimited`](ProviderError::RateLimited),
    /// [`Timeout`](ProviderError::Timeout), [`Transport`](ProviderError::Transport), and
    /// [`Http`](ProviderError::Http) with status 408 or 5xx, and
    /// [`AllFailed`](ProviderError::AllFailed) if the last provider's error is. Everything
    /// else is not — in
    /// particular [`InvalidRequest`](ProviderError::InvalidRequest) and
    /// [`Decode`](ProviderError::Decode).
    pub fn is_retryable(&self) -> bool {
        match self {
            // What the caller does next depends on the last provider tried.
            ProviderError::AllFailed { errors } => errors.last().is_some_and(Self::is_retryable),
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
            ProviderError::AllFailed { errors } => errors.last().and_then(Self::retry_after),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_request_is_not_retried() {
        let err = ProviderError::InvalidRequest {
            message: "5 stop sequences; the API allows at most 4".into(),
        };
        assert!(!err.is_retryable());
        assert_eq!(err.retry_after(), None);
        assert_eq!(
            err.to_string(),
            "invalid request: 5 stop sequences; the API allows at most 4"
        );
    }
}
