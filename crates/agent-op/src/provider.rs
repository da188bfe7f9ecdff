//! The [`Provider`] trait: how interpreters reach a model.

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::cost::MicroUsd;
use crate::future::BoxFuture;
use crate::message::{Prompt, Response};

pub use crate::provider_error::ProviderError;

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

    /// Whether this provider makes `model`'s reply follow a
    /// [`ResponseFormat::JsonSchema`](crate::ResponseFormat::JsonSchema) (structured output),
    /// so typed output can rely on it instead of format instructions in the prompt. `false`
    /// (the default) when unknown.
    fn supports_json_schema(&self, model: &str) -> bool {
        let _ = model;
        false
    }

    /// The provider's name as telemetry reports it (`gen_ai.provider.name`: `openai`,
    /// `ollama`, …); `unknown` by default.
    fn name(&self) -> &str {
        "unknown"
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

    fn supports_json_schema(&self, model: &str) -> bool {
        (**self).supports_json_schema(model)
    }

    fn name(&self) -> &str {
        (**self).name()
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

    fn supports_json_schema(&self, model: &str) -> bool {
        (**self).supports_json_schema(model)
    }

    fn name(&self) -> &str {
        (**self).name()
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
