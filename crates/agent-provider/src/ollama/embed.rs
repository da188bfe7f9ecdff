//! [`OllamaEmbedder`]: `/api/embed` as an [`EmbeddingProvider`].

use std::fmt;

use agent_op::{BoxFuture, Cause, EmbeddingError, EmbeddingProvider, check_embedding};

use super::client::OllamaClient;
use super::wire::{EmbedRequest, EmbedResponse};
use crate::{error, spans};

/// Embeds text with one Ollama model. Made by [`OllamaClient::embedder`].
///
/// A batch is sent as one request; every returned vector is checked to have the declared
/// dimension and finite components.
///
/// ```no_run
/// use agent_op::EmbeddingProvider;
/// use agent_provider::OllamaClient;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let embedder = OllamaClient::builder().build()?.embedder("nomic-embed-text", 768);
/// let vector = embedder.embed("cats").await?;
/// assert_eq!(vector.len(), 768);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OllamaEmbedder {
    client: OllamaClient,
    model: String,
    dimensions: usize,
    send_dimensions: bool,
}

impl OllamaEmbedder {
    pub(crate) fn new(client: OllamaClient, model: String, dimensions: usize) -> OllamaEmbedder {
        OllamaEmbedder {
            client,
            model,
            dimensions,
            send_dimensions: false,
        }
    }

    /// Sends the `dimensions` parameter, asking the model to truncate its vectors (off by
    /// default).
    pub fn send_dimensions(mut self, send: bool) -> OllamaEmbedder {
        self.send_dimensions = send;
        self
    }

    async fn embed_all(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        spans::embeddings("ollama", &self.model, texts.len(), self.request(texts)).await
    }

    /// The vectors of `texts`, and the input tokens the server counted.
    async fn request(
        &self,
        texts: &[String],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), EmbeddingError> {
        let request = EmbedRequest {
            model: &self.model,
            input: texts,
            keep_alive: self.client.keep_alive(),
            dimensions: self.send_dimensions.then_some(self.dimensions),
        };
        let body =
            serde_json::to_vec(&request).map_err(|e| EmbeddingError::Request(Cause::new(e)))?;
        let transport = self.client.transport();
        let reply = transport
            .post_json(self.client.embed_url(), body, "application/json")
            .await?;
        let body = transport.body(reply).await?;
        let redactor = transport.redactor();
        let parsed: EmbedResponse = serde_json::from_slice(&body)
            .map_err(|e| error::decode("embeddings", &body, e, redactor))?;
        if parsed.embeddings.len() != texts.len() {
            return Err(error::invalid(
                format!(
                    "asked for {} embeddings, got {}",
                    texts.len(),
                    parsed.embeddings.len()
                ),
                &String::from_utf8_lossy(&body),
                redactor,
            )
            .into());
        }
        for vector in &parsed.embeddings {
            check_embedding(vector, self.dimensions)?;
        }
        Ok((parsed.embeddings, parsed.prompt_eval_count))
    }
}

impl EmbeddingProvider for OllamaEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            let mut vectors = self.embed_all(&[text.to_owned()]).await?;
            vectors.pop().ok_or(EmbeddingError::CountMismatch {
                expected: 1,
                got: 0,
            })
        })
    }

    fn embed_batch<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbeddingError>> {
        Box::pin(self.embed_all(texts))
    }
}

impl fmt::Debug for OllamaEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaEmbedder")
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("send_dimensions", &self.send_dimensions)
            .field("client", &self.client)
            .finish()
    }
}
