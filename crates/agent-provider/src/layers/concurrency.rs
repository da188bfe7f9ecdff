//! [`ConcurrencyLimit`]: bounds how many calls run at once.

use std::sync::Arc;

use agent_op::{BoxFuture, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};
use tokio::sync::Semaphore;

/// Lets at most `max` calls run at once; further calls wait (in arrival order) for one to
/// finish. Clones share the limit.
///
/// ```
/// use agent_provider::ScriptedProvider;
/// use agent_provider::layers::ConcurrencyLimit;
///
/// let provider = ConcurrencyLimit::new(ScriptedProvider::new([]), 8);
/// assert_eq!(provider.available(), 8);
/// ```
#[derive(Clone, Debug)]
pub struct ConcurrencyLimit<P> {
    inner: P,
    permits: Arc<Semaphore>,
}

impl<P> ConcurrencyLimit<P> {
    /// Lets at most `max` (at least 1) calls of `inner` run at once.
    pub fn new(inner: P, max: usize) -> ConcurrencyLimit<P> {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        ConcurrencyLimit {
            inner,
            permits: Arc::new(Semaphore::new(max)),
        }
    }

    /// How many more calls could start now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    async fn limited<'a>(
        &'a self,
        call: impl FnOnce() -> BoxFuture<'a, Result<Response, ProviderError>>,
    ) -> Result<Response, ProviderError> {
        let _permit = self.permits.acquire().await.map_err(|_| {
            // The semaphore is never closed; this cannot happen.
            ProviderError::other("the concurrency limit was closed")
        })?;
        call().await
    }
}

impl<P: Provider> Provider for ConcurrencyLimit<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.limited(move || self.inner.chat(model, prompt)))
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.limited(move || self.inner.chat_stream(model, prompt, on_delta)))
    }

    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        self.inner.max_cost(model, prompt)
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        self.inner.supports_json_schema(model)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}
