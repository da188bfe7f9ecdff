//! [`OllamaClient`]: the native `/api/chat` client, and its builder.

use std::fmt;
use std::sync::Arc;

use agent_op::{BoxFuture, Cause, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};
use reqwest::Url;
use reqwest::header::AUTHORIZATION;
use serde_json::{Map, Value};

use super::embed::OllamaEmbedder;
use super::stream::{self, NdjsonAssembler, OllamaTimings};
use super::wire::{ChatRequest, KeepAlive};
use crate::error::ConfigError;
use crate::http::{self, HttpOptions, Transport, http_builder_methods};
use crate::pricing::Pricing;
use crate::secret::{self, Secret};

/// Where Ollama listens unless `OLLAMA_HOST` or [`OllamaBuilder::host`] says otherwise.
pub const DEFAULT_OLLAMA_HOST: &str = "http://127.0.0.1:11434";

/// A client of Ollama's native API: `/api/chat` (plain and streamed as NDJSON) as a
/// [`Provider`], and [`OllamaEmbedder`]s for `/api/embed`. Cloning is cheap and clones share
/// connections.
///
/// Beyond [`Provider`], [`OllamaClient::chat_detailed`] and
/// [`OllamaClient::chat_stream_detailed`] also return the durations Ollama reports.
///
/// As with the [`OpenAiClient`](crate::OpenAiClient): a reply that calls tools has
/// [`FinishReason::ToolCalls`](agent_op::FinishReason) unless Ollama said `length`; tool
/// parameters and `format` schemas that are not JSON objects fail with
/// [`ProviderError::InvalidRequest`] without being sent; a streaming request answered with
/// neither NDJSON nor JSON fails with [`ProviderError::Decode`].
///
/// ```no_run
/// use std::time::Duration;
/// use agent_op::{Prompt, Provider};
/// use agent_provider::OllamaClient;
/// use agent_provider::ollama::KeepAlive;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let ollama = OllamaClient::builder() // OLLAMA_HOST, or http://127.0.0.1:11434
///     .num_ctx(8192)
///     .keep_alive(KeepAlive::For(Duration::from_secs(600)))
///     .build()?;
/// let reply = ollama.chat("llama3.2", &Prompt::new().user("Say hi")).await?;
/// let detailed = ollama.chat_detailed("llama3.2", &Prompt::new().user("Again")).await?;
/// println!("{} in {:?}", detailed.response.content, detailed.timings.total);
/// # let _ = reply;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OllamaClient {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    /// The host URL with any user information masked, for showing.
    host: String,
    chat_url: Url,
    embed_url: Url,
    keep_alive: Option<KeepAlive>,
    options: Map<String, Value>,
    pricing: Pricing,
    has_api_key: bool,
}

/// A reply with the durations Ollama reported for it.
#[derive(Clone, Debug, PartialEq)]
pub struct OllamaResponse {
    /// The reply.
    pub response: Response,
    /// Where the time went.
    pub timings: OllamaTimings,
}

/// Configures an [`OllamaClient`]; made by [`OllamaClient::builder`].
#[must_use]
#[derive(Clone)]
pub struct OllamaBuilder {
    host: String,
    api_key: Option<Secret>,
    keep_alive: Option<KeepAlive>,
    options: Map<String, Value>,
    http: HttpOptions,
    pricing: Pricing,
}

impl OllamaClient {
    /// A builder for the server at `OLLAMA_HOST` (default [`DEFAULT_OLLAMA_HOST`]), with no
    /// options, no `keep_alive` (Ollama's default) and no prices (costs unknown).
    pub fn builder() -> OllamaBuilder {
        OllamaBuilder {
            host: std::env::var("OLLAMA_HOST").unwrap_or_default(),
            api_key: None,
            keep_alive: None,
            options: Map::new(),
            http: HttpOptions::default(),
            pricing: Pricing::new(),
        }
    }

    /// The server's root URL, with any user information (`user:password@`) replaced by
    /// `[redacted]`.
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// An embedder for `model`, whose vectors have `dimensions` components.
    pub fn embedder(&self, model: impl Into<String>, dimensions: usize) -> OllamaEmbedder {
        OllamaEmbedder::new(self.clone(), model.into(), dimensions)
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    pub(crate) fn embed_url(&self) -> &Url {
        &self.inner.embed_url
    }

    pub(crate) fn keep_alive(&self) -> Option<KeepAlive> {
        self.inner.keep_alive
    }

    fn request_body(
        &self,
        model: &str,
        prompt: &Prompt,
        stream: bool,
    ) -> Result<Vec<u8>, ProviderError> {
        let inner = &self.inner;
        let request = ChatRequest::new(model, prompt, &inner.options, inner.keep_alive, stream)?;
        serde_json::to_vec(&request).map_err(|e| {
            ProviderError::other(format!("could not encode the request: {e}"))
                .with_cause(Cause::new(e))
        })
    }

    fn finish(
        &self,
        model: &str,
        assembler: NdjsonAssembler,
    ) -> Result<OllamaResponse, ProviderError> {
        let usage = assembler.usage();
        let timings = assembler.timings();
        let mut response = assembler.finish()?;
        response.cost = usage.and_then(|u| self.inner.pricing.cost(model, u));
        Ok(OllamaResponse { response, timings })
    }

    /// Like [`Provider::chat`], also returning the durations Ollama reported.
    pub async fn chat_detailed(
        &self,
        model: &str,
        prompt: &Prompt,
    ) -> Result<OllamaResponse, ProviderError> {
        let body = self.request_body(model, prompt, false)?;
        let transport = &self.inner.transport;
        let reply = transport
            .post_json(&self.inner.chat_url, body, "application/json")
            .await?;
        let body = transport.body(reply).await?;
        let mut assembler = NdjsonAssembler::with_redactor(transport.redactor().clone());
        // The whole reply is one chat object; its deltas are not wanted.
        assembler.push_line(&body, &mut |_| {})?;
        self.finish(model, assembler)
    }

    /// Like [`Provider::chat_stream`], also returning the durations Ollama reported.
    pub async fn chat_stream_detailed(
        &self,
        model: &str,
        prompt: &Prompt,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<OllamaResponse, ProviderError> {
        let body = self.request_body(model, prompt, true)?;
        let transport = &self.inner.transport;
        let reply = transport
            .post_json(&self.inner.chat_url, body, "application/x-ndjson")
            .await?;
        // Ollama streams `application/x-ndjson`; a whole reply (`application/json`) is one
        // line. Without a type, try NDJSON.
        if !matches!(
            reply.media_type().as_deref(),
            None | Some("application/x-ndjson" | "application/json")
        ) {
            return Err(transport
                .unexpected_media_type(reply, "NDJSON (`application/x-ndjson`)")
                .await);
        }
        let mut assembler = NdjsonAssembler::with_redactor(transport.redactor().clone());
        stream::drive(&mut assembler, transport.stream(reply), on_delta).await?;
        self.finish(model, assembler)
    }
}

impl Provider for OllamaClient {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move { Ok(self.chat_detailed(model, prompt).await?.response) })
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            Ok(self
                .chat_stream_detailed(model, prompt, on_delta)
                .await?
                .response)
        })
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        self.inner.pricing.max_cost(model, prompt)
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        let _ = model;
        true
    }

    fn name(&self) -> &str {
        "ollama"
    }
}

impl fmt::Debug for OllamaClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("OllamaClient")
            .field("host", &inner.host)
            .field(
                "api_key",
                &inner.has_api_key.then_some(crate::secret::REDACTED),
            )
            .field("keep_alive", &inner.keep_alive)
            .field("options", &inner.options)
            .field("priced_models", &inner.pricing.models().count())
            .field("http", inner.transport.options())
            .finish()
    }
}

/// Ollama's reading of `OLLAMA_HOST`: `host`, `host:port`, or a URL; no scheme means `http`
/// and port 11434; an unspecified address (`0.0.0.0`, `::`) means this machine.
pub(crate) fn parse_host(host: &str) -> Result<Url, ConfigError> {
    let host = host.trim();
    if host.is_empty() {
        return http::parse_base_url(DEFAULT_OLLAMA_HOST);
    }
    let (mut url, schemeless) = match host.contains("://") {
        true => (http::parse_base_url(host)?, false),
        false => (http::parse_base_url(&format!("http://{host}"))?, true),
    };
    let invalid = |reason: &str| ConfigError::InvalidUrl {
        url: secret::mask_userinfo(host),
        reason: reason.to_owned(),
    };
    if schemeless && url.port().is_none() {
        url.set_port(Some(11434))
            .map_err(|()| invalid("cannot set the port"))?;
    }
    let loopback = match url.host_str() {
        Some("0.0.0.0") => Some("127.0.0.1"),
        Some("[::]") => Some("[::1]"),
        _ => None,
    };
    if let Some(loopback) = loopback {
        url.set_host(Some(loopback))
            .map_err(|e| invalid(&e.to_string()))?;
    }
    Ok(url)
}

impl OllamaBuilder {
    /// The server: a URL (`http://gpu-box:11434`) or `host[:port]` as `OLLAMA_HOST` accepts.
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = host.into();
        self
    }

    /// Sends `Authorization: Bearer <key>` (for a server behind an authenticating proxy, or
    /// ollama.com).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(Secret::new(key));
        self
    }

    /// How long the model stays loaded after each request.
    pub fn keep_alive(mut self, keep_alive: KeepAlive) -> Self {
        self.keep_alive = Some(keep_alive);
        self
    }

    /// The context window, in tokens (`num_ctx`).
    pub fn num_ctx(self, tokens: u32) -> Self {
        self.option("num_ctx", tokens)
    }

    /// Any model option of Ollama's `options` (`top_k`, `repeat_penalty`, `num_gpu`, …).
    /// A prompt's own `temperature`, `max_tokens` (`num_predict`), `seed` and `stop` take
    /// precedence.
    pub fn option(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options.insert(name.into(), value.into());
        self
    }

    /// The prices used for costs (none by default: costs are unknown).
    pub fn pricing(mut self, pricing: Pricing) -> Self {
        self.pricing = pricing;
        self
    }

    http_builder_methods!();

    /// Builds the client.
    pub fn build(self) -> Result<OllamaClient, ConfigError> {
        let host = parse_host(&self.host)?;
        let auth = self
            .api_key
            .map(|k| (AUTHORIZATION, Secret::new(format!("Bearer {}", k.expose()))));
        let has_api_key = auth.is_some();
        let transport = Transport::new(&self.http, auth, &host)?;
        Ok(OllamaClient {
            inner: Arc::new(Inner {
                transport,
                chat_url: http::endpoint(&host, "api/chat")?,
                embed_url: http::endpoint(&host, "api/embed")?,
                host: secret::mask_userinfo(host.as_str()),
                keep_alive: self.keep_alive,
                options: self.options,
                pricing: self.pricing,
                has_api_key,
            }),
        })
    }
}

impl fmt::Debug for OllamaBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaBuilder")
            .field("host", &secret::mask_userinfo(&self.host))
            .field("api_key", &self.api_key)
            .field("keep_alive", &self.keep_alive)
            .field("options", &self.options)
            .field("http", &self.http)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_as_ollama_reads_them() {
        for (given, url) in [
            ("", "http://127.0.0.1:11434/"),
            ("localhost", "http://localhost:11434/"),
            ("example.com:8080", "http://example.com:8080/"),
            ("0.0.0.0", "http://127.0.0.1:11434/"),
            ("[::]:9999", "http://[::1]:9999/"),
            ("http://gpu-box", "http://gpu-box/"),
            (
                "https://ollama.example/proxy",
                "https://ollama.example/proxy",
            ),
        ] {
            assert_eq!(parse_host(given).unwrap().as_str(), url, "{given}");
        }
        assert!(parse_host("ftp://x").is_err());
    }
}
