//! [`OpenAiEmbedder`]: `/embeddings` as an [`EmbeddingProvider`].

use std::fmt;

use agent_op::{BoxFuture, Cause, EmbeddingError, EmbeddingProvider, check_embedding};

use super::client::OpenAiClient;
use super::wire::{EmbeddingsRequest, EmbeddingsResponse};
use crate::{error, spans};

/// The most inputs OpenAI accepts in one embeddings request.
pub const MAX_BATCH: usize = 2048;

/// Embeds text with one model of an OpenAI-compatible `/embeddings` endpoint. Made by
/// [`OpenAiClient::embedder`].
///
/// Batches are sent as one request per [`batch_size`](OpenAiEmbedder::batch_size) texts;
/// every returned vector is checked to have the declared dimension and finite components.
///
/// ```no_run
/// use agent_op::EmbeddingProvider;
/// use agent_provider::OpenAiClient;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let embedder = OpenAiClient::builder().build()?.embedder("text-embedding-3-small", 1536);
/// let vectors = embedder.embed_batch(&["cats".to_owned(), "dogs".to_owned()]).await?;
/// assert_eq!(vectors.len(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OpenAiEmbedder {
    client: OpenAiClient,
    model: String,
    dimensions: usize,
    send_dimensions: bool,
    batch_size: usize,
}

impl OpenAiEmbedder {
    pub(crate) fn new(client: OpenAiClient, model: String, dimensions: usize) -> OpenAiEmbedder {
        OpenAiEmbedder {
            client,
            model,
            dimensions,
            send_dimensions: false,
            batch_size: MAX_BATCH,
        }
    }

    /// Sends the `dimensions` parameter, asking models that support it (OpenAI's
    /// `text-embedding-3-*`) to shorten their vectors. Off by default: servers that do not
    /// support it reject it.
    pub fn send_dimensions(mut self, send: bool) -> OpenAiEmbedder {
        self.send_dimensions = send;
        self
    }

    /// The most texts sent in one request (default and maximum [`MAX_BATCH`]; at least 1).
    pub fn batch_size(mut self, size: usize) -> OpenAiEmbedder {
        self.batch_size = size.clamp(1, MAX_BATCH);
        self
    }

    async fn embed_chunk(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        spans::embeddings("openai", &self.model, texts.len(), self.request(texts)).await
    }

    /// The vectors of `texts`, and the input tokens the server counted.
    async fn request(
        &self,
        texts: &[String],
    ) -> Result<(Vec<Vec<f32>>, Option<u64>), EmbeddingError> {
        let request = EmbeddingsRequest {
            model: &self.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.send_dimensions.then_some(self.dimensions),
        };
        let body =
            serde_json::to_vec(&request).map_err(|e| EmbeddingError::Request(Cause::new(e)))?;
        let transport = self.client.transport();
        let reply = transport
            .post_json(self.client.embeddings_url(), body, "application/json")
            .await?;
        let body = transport.body(reply).await?;
        let redactor = transport.redactor();
        let parsed: EmbeddingsResponse = serde_json::from_slice(&body)
            .map_err(|e| error::decode("embeddings", &body, e, redactor))?;
        let mut data = parsed.data;
        data.sort_by_key(|d| d.index);
        let in_order = data.iter().enumerate().all(|(i, d)| d.index == i);
        if data.len() != texts.len() || !in_order {
            return Err(error::invalid(
                format!(
                    "asked for {} embeddings, got {} (indices must be 0..{})",
                    texts.len(),
                    data.len(),
                    texts.len()
                ),
                &String::from_utf8_lossy(&body),
                redactor,
            )
            .into());
        }
        let mut vectors = Vec::with_capacity(data.len());
        for d in data {
            check_embedding(&d.embedding, self.dimensions)?;
            vectors.push(d.embedding);
        }
        Ok((vectors, parsed.usage.map(|u| u.prompt_tokens)))
    }
}

impl EmbeddingProvider for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            let mut vectors = self.embed_chunk(&[text.to_owned()]).await?;
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
        Box::pin(async move {
            let mut vectors = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(self.batch_size) {
                vectors.extend(self.embed_chunk(chunk).await?);
            }
            Ok(vectors)
        })
    }
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("send_dimensions", &self.send_dimensions)
            .field("batch_size", &self.batch_size)
            .field("client", &self.client)
            .finish()
    }
}
