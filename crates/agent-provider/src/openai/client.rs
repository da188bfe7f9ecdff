//! [`OpenAiClient`]: the chat-completions client, and its builder.

use std::fmt;
use std::sync::Arc;

use agent_op::{BoxFuture, Cause, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};
use reqwest::Url;
use reqwest::header::AUTHORIZATION;

use super::embed::OpenAiEmbedder;
use super::stream::{self, SseAssembler};
use super::wire::{ChatCompletion, ChatRequest};
use crate::error::{self, ConfigError};
use crate::http::{self, ExtraHeader, HttpOptions, Transport, http_builder_methods};
use crate::pricing::Pricing;
use crate::request::{self, OPENAI_MAX_STOP_SEQUENCES};
use crate::secret::{self, Secret};

/// OpenAI's API root, used unless `OPENAI_BASE_URL` or [`OpenAiBuilder::base_url`] says
/// otherwise.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Which request field carries [`InferOptions::max_tokens`](agent_op::InferOptions::max_tokens).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`: understood by every OpenAI-compatible server; OpenAI's reasoning models
    /// reject it.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's current name, required by its reasoning models.
    MaxCompletionTokens,
}

/// How a [`ResponseFormat::JsonSchema`](agent_op::ResponseFormat::JsonSchema) goes on the
/// wire.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StructuredOutput {
    /// `{"type": "json_schema", "json_schema": {name, schema, strict}}`: OpenAI's form, also
    /// understood by vLLM, llama.cpp's C++ `llama-server` and LiteLLM.
    #[default]
    JsonSchema,
    /// `{"type": "json_object", "schema": schema}`: the form of llama-cpp-python's server,
    /// which answers the OpenAI form with an error. The name and `strict` are not sent.
    JsonObjectWithSchema,
}

/// A client of the OpenAI chat-completions API and of every server that speaks it (vLLM,
/// llama.cpp's server, LM Studio, OpenRouter, Ollama's `/v1`).
///
/// It implements [`Provider`] (`chat` and streaming `chat_stream`), and makes
/// [`OpenAiEmbedder`]s for `/embeddings`. Cloning is cheap and clones share connections.
///
/// - A reply that calls tools has [`FinishReason::ToolCalls`](agent_op::FinishReason), whatever
///   `finish_reason` the server gave (some say `stop`), unless it said `length` or
///   `content_filter`; the [`OllamaClient`](crate::OllamaClient) follows the same rule.
/// - A request the API forbids (more `stop` sequences than
///   [`max_stop_sequences`](OpenAiBuilder::max_stop_sequences), tool parameters or an output
///   schema that are not JSON objects) is not sent: it fails with
///   [`ProviderError::InvalidRequest`].
/// - A streaming request answered with neither an event stream nor JSON (an HTML page) fails
///   with [`ProviderError::Decode`], which is not retried.
///
/// ```no_run
/// use agent_op::{Prompt, Provider};
/// use agent_provider::OpenAiClient;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // api.openai.com, with the key from OPENAI_API_KEY.
/// let openai = OpenAiClient::builder().build()?;
/// let reply = openai.chat("gpt-4o-mini", &Prompt::new().user("Say hi").max_tokens(20)).await?;
/// println!("{} ({:?})", reply.content, reply.cost);
///
/// // A local vLLM or llama.cpp server.
/// let local = OpenAiClient::compatible("http://127.0.0.1:8000/v1").build()?;
/// let reply = local
///     .chat_stream("qwen2.5-7b", &Prompt::new().user("Count to 3"), &mut |delta| {
///         println!("{delta:?}");
///     })
///     .await?;
/// # let _ = reply;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OpenAiClient {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    /// The base URL with any user information masked, for showing.
    base_url: String,
    chat_url: Url,
    embeddings_url: Url,
    pricing: Pricing,
    max_tokens_field: MaxTokensField,
    structured_output: StructuredOutput,
    stream_options: bool,
    max_stop_sequences: Option<usize>,
    has_api_key: bool,
    organization: Option<String>,
    project: Option<String>,
}

/// Where a builder takes the API key from.
#[derive(Clone, Debug)]
enum KeySource {
    None,
    Given(Secret),
    Env(String),
}

/// Configures an [`OpenAiClient`]; made by [`OpenAiClient::builder`] or
/// [`OpenAiClient::compatible`].
#[must_use]
#[derive(Clone)]
pub struct OpenAiBuilder {
    base_url: String,
    key: KeySource,
    organization: Option<String>,
    project: Option<String>,
    http: HttpOptions,
    pricing: Pricing,
    max_tokens_field: MaxTokensField,
    structured_output: StructuredOutput,
    stream_options: bool,
    max_stop_sequences: Option<usize>,
}

impl OpenAiClient {
    /// A builder for OpenAI's own API: base URL from `OPENAI_BASE_URL` (default
    /// [`OPENAI_BASE_URL`]), API key from `OPENAI_API_KEY` (required), organization and
    /// project from `OPENAI_ORG_ID` and `OPENAI_PROJECT_ID` if set, OpenAI's list prices
    /// ([`Pricing::openai`]), and `max_completion_tokens`.
    pub fn builder() -> OpenAiBuilder {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        OpenAiBuilder {
            base_url: env("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_BASE_URL.to_owned()),
            key: KeySource::Env("OPENAI_API_KEY".to_owned()),
            organization: env("OPENAI_ORG_ID"),
            project: env("OPENAI_PROJECT_ID"),
            http: HttpOptions::default(),
            pricing: Pricing::openai(),
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            structured_output: StructuredOutput::JsonSchema,
            stream_options: true,
            max_stop_sequences: Some(OPENAI_MAX_STOP_SEQUENCES),
        }
    }

    /// A builder for another server speaking the same API at `base_url` (the URL that
    /// `/chat/completions` is appended to, such as `http://127.0.0.1:8000/v1`): no API key
    /// unless given (an OpenAI key is never sent to another server by default), no prices, and
    /// `max_tokens`.
    pub fn compatible(base_url: impl Into<String>) -> OpenAiBuilder {
        OpenAiBuilder {
            base_url: base_url.into(),
            key: KeySource::None,
            organization: None,
            project: None,
            http: HttpOptions::default(),
            pricing: Pricing::new(),
            max_tokens_field: MaxTokensField::MaxTokens,
            structured_output: StructuredOutput::JsonSchema,
            stream_options: true,
            max_stop_sequences: Some(OPENAI_MAX_STOP_SEQUENCES),
        }
    }

    /// The API root requests go to, with any user information (`user:password@`) replaced
    /// by `[redacted]`.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    /// The prices used for [`Response::cost`] and [`Provider::max_cost`].
    pub fn pricing(&self) -> &Pricing {
        &self.inner.pricing
    }

    /// An embedder for `model`, whose vectors have `dimensions` components.
    pub fn embedder(&self, model: impl Into<String>, dimensions: usize) -> OpenAiEmbedder {
        OpenAiEmbedder::new(self.clone(), model.into(), dimensions)
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    pub(crate) fn embeddings_url(&self) -> &Url {
        &self.inner.embeddings_url
    }

    fn request_body(
        &self,
        model: &str,
        prompt: &Prompt,
        stream: bool,
    ) -> Result<Vec<u8>, ProviderError> {
        request::check_stop_sequences(&prompt.options.stop, self.inner.max_stop_sequences)?;
        let request = ChatRequest::new(model, prompt, self.inner.max_tokens_field, stream)?
            .stream_options(self.inner.stream_options)
            .structured_output(self.inner.structured_output);
        serde_json::to_vec(&request).map_err(|e| {
            ProviderError::other(format!("could not encode the request: {e}"))
                .with_cause(Cause::new(e))
        })
    }

    fn parse_completion(&self, model: &str, body: &[u8]) -> Result<Response, ProviderError> {
        let redactor = self.inner.transport.redactor();
        let completion: ChatCompletion = serde_json::from_slice(body)
            .map_err(|e| error::decode("chat completion", body, e, redactor))?;
        if let Some(err) = &completion.error {
            return Err(error::from_stream_error(
                err,
                &String::from_utf8_lossy(body),
                redactor,
            ));
        }
        let (mut response, usage) = completion.into_response().ok_or_else(|| {
            error::invalid(
                "the completion has no choices",
                &String::from_utf8_lossy(body),
                redactor,
            )
        })?;
        response.cost = usage.and_then(|u| self.inner.pricing.cost(model, u));
        Ok(response)
    }

    async fn complete(&self, model: &str, prompt: &Prompt) -> Result<Response, ProviderError> {
        let body = self.request_body(model, prompt, false)?;
        let transport = &self.inner.transport;
        let reply = transport
            .post_json(&self.inner.chat_url, body, "application/json")
            .await?;
        let body = transport.body(reply).await?;
        self.parse_completion(model, &body)
    }

    async fn stream(
        &self,
        model: &str,
        prompt: &Prompt,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Response, ProviderError> {
        let body = self.request_body(model, prompt, true)?;
        let transport = &self.inner.transport;
        let reply = transport
            .post_json(&self.inner.chat_url, body, "text/event-stream")
            .await?;
        match reply.media_type().as_deref() {
            // Without a type, try the format asked for.
            None | Some("text/event-stream") => {}
            Some("application/json") => {
                // The server answered without streaming; pass the whole reply on as deltas.
                let body = transport.body(reply).await?;
                let response = self.parse_completion(model, &body)?;
                emit_whole(&response, on_delta);
                return Ok(response);
            }
            Some(_) => {
                return Err(transport
                    .unexpected_media_type(reply, "an event stream (`text/event-stream`)")
                    .await);
            }
        }
        let mut assembler = SseAssembler::with_redactor(transport.redactor().clone());
        stream::drive(&mut assembler, transport.stream(reply), on_delta).await?;
        let usage = assembler.usage();
        let mut response = assembler.finish()?;
        response.cost = usage.and_then(|u| self.inner.pricing.cost(model, u));
        Ok(response)
    }
}

/// Passes a complete reply to `on_delta`, as [`Provider::chat_stream`]'s default does.
fn emit_whole(response: &Response, on_delta: &mut (dyn FnMut(Delta) + Send)) {
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
            fragment: crate::json::arguments_text(&call.arguments),
        });
    }
}

impl Provider for OpenAiClient {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.complete(model, prompt))
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.stream(model, prompt, on_delta))
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        self.inner.pricing.max_cost(model, prompt)
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        let _ = model;
        true
    }

    fn name(&self) -> &str {
        "openai"
    }
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("OpenAiClient")
            .field("base_url", &inner.base_url)
            .field(
                "api_key",
                &inner.has_api_key.then_some(crate::secret::REDACTED),
            )
            .field("organization", &inner.organization)
            .field("project", &inner.project)
            .field("max_tokens_field", &inner.max_tokens_field)
            .field("stream_options", &inner.stream_options)
            .field("max_stop_sequences", &inner.max_stop_sequences)
            .field("priced_models", &inner.pricing.models().count())
            .field("http", inner.transport.options())
            .finish()
    }
}

impl OpenAiBuilder {
    /// The API root (`/chat/completions` and `/embeddings` are appended to it).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The API key, sent as `Authorization: Bearer <key>`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.key = KeySource::Given(Secret::new(key));
        self
    }

    /// Reads the API key from the environment variable `var` when the client is built
    /// (building fails if it is not set).
    pub fn api_key_from_env(mut self, var: impl Into<String>) -> Self {
        self.key = KeySource::Env(var.into());
        self
    }

    /// Sends no API key (local servers).
    pub fn no_api_key(mut self) -> Self {
        self.key = KeySource::None;
        self
    }

    /// Sends `OpenAI-Organization`.
    pub fn organization(mut self, organization: impl Into<String>) -> Self {
        self.organization = Some(organization.into());
        self
    }

    /// Sends `OpenAI-Project`.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// The prices used for costs (replacing the default table; extend
    /// [`Pricing::openai`] to keep OpenAI's).
    pub fn pricing(mut self, pricing: Pricing) -> Self {
        self.pricing = pricing;
        self
    }

    /// Which field carries the reply's token limit.
    pub fn max_tokens_field(mut self, field: MaxTokensField) -> Self {
        self.max_tokens_field = field;
        self
    }

    /// How JSON-schema response formats are sent (default [`StructuredOutput::JsonSchema`],
    /// OpenAI's form).
    pub fn structured_output(mut self, style: StructuredOutput) -> Self {
        self.structured_output = style;
        self
    }

    /// The most `stop` sequences a request may carry (default 4, the limit of OpenAI's API);
    /// a prompt with more fails with
    /// [`ProviderError::InvalidRequest`](agent_op::ProviderError::InvalidRequest) without
    /// being sent. `None` lifts the limit, for servers that accept more (vLLM, llama.cpp).
    pub fn max_stop_sequences(mut self, max: Option<usize>) -> Self {
        self.max_stop_sequences = max;
        self
    }

    /// Whether streamed requests carry `"stream_options": {"include_usage": true}` (default
    /// on), which asks for the final chunk with the token usage. Some servers reject unknown
    /// fields: turn it off for them. Without it, a server that reports no usage in its stream
    /// gives replies with zero usage and no cost.
    pub fn stream_options(mut self, send: bool) -> Self {
        self.stream_options = send;
        self
    }

    http_builder_methods!();

    /// Builds the client.
    pub fn build(self) -> Result<OpenAiClient, ConfigError> {
        let key = match self.key {
            KeySource::None => None,
            KeySource::Given(key) => Some(key),
            KeySource::Env(var) => match std::env::var(&var) {
                Ok(key) if !key.is_empty() => Some(Secret::new(key)),
                _ => return Err(ConfigError::MissingApiKey { var }),
            },
        };
        let base_url = http::parse_base_url(&self.base_url)?;
        let mut options = self.http;
        // Identifiers, not credentials: sent as ordinary headers (see `OpenAiBuilder::header`).
        if let Some(org) = &self.organization {
            options
                .headers
                .push(ExtraHeader::new("OpenAI-Organization", org.clone()));
        }
        if let Some(project) = &self.project {
            options
                .headers
                .push(ExtraHeader::new("OpenAI-Project", project.clone()));
        }
        let auth = key.map(|k| (AUTHORIZATION, Secret::new(format!("Bearer {}", k.expose()))));
        let has_api_key = auth.is_some();
        let transport = Transport::new(&options, auth, &base_url)?;
        Ok(OpenAiClient {
            inner: Arc::new(Inner {
                transport,
                chat_url: http::endpoint(&base_url, "chat/completions")?,
                embeddings_url: http::endpoint(&base_url, "embeddings")?,
                base_url: secret::mask_userinfo(base_url.as_str()),
                pricing: self.pricing,
                max_tokens_field: self.max_tokens_field,
                structured_output: self.structured_output,
                stream_options: self.stream_options,
                max_stop_sequences: self.max_stop_sequences,
                has_api_key,
                organization: self.organization,
                project: self.project,
            }),
        })
    }
}

impl fmt::Debug for OpenAiBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = match &self.key {
            KeySource::None => "none".to_owned(),
            KeySource::Given(_) => crate::secret::REDACTED.to_owned(),
            KeySource::Env(var) => format!("from ${var}"),
        };
        f.debug_struct("OpenAiBuilder")
            .field("base_url", &secret::mask_userinfo(&self.base_url))
            .field("api_key", &key)
            .field("organization", &self.organization)
            .field("project", &self.project)
            .field("max_tokens_field", &self.max_tokens_field)
            .field("structured_output", &self.structured_output)
            .field("stream_options", &self.stream_options)
            .field("max_stop_sequences", &self.max_stop_sequences)
            .field("http", &self.http)
            .finish()
    }
}
