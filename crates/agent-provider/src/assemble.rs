//! What the OpenAI (SSE) and Ollama (NDJSON) stream assemblers share: running one over a
//! stream already in memory, such as a recorded one.

use std::future::Future;

use agent_op::{ProviderError, Response};
use futures_util::{FutureExt, Stream};

/// `chunks` as a body stream that never fails.
pub(crate) fn body<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> impl Stream<Item = Result<&'a [u8], ProviderError>> {
    futures_util::stream::iter(chunks.into_iter().map(Ok))
}

/// The result of an assembly over a [`body`] in memory. Such a body is always ready, so the
/// assembly completes on its first poll; were it ever to wait, that is an error, not a block.
pub(crate) fn in_memory(
    assembly: impl Future<Output = Result<Response, ProviderError>>,
) -> Result<Response, ProviderError> {
    assembly.now_or_never().unwrap_or_else(|| {
        Err(ProviderError::other(
            "an in-memory stream unexpectedly waited",
        ))
    })
}
