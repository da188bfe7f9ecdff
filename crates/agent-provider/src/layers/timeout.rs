//! [`Timeout`]: bounds the time of every call.

use std::time::Duration;

use agent_op::{BoxFuture, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};

/// Fails any call that takes longer than a limit with [`ProviderError::Timeout`], dropping
/// (and so cancelling) the call in flight. For a streamed call the limit covers the whole
/// stream.
///
/// Waits use tokio's clock, so tests with a paused clock run instantly.
///
/// ```
/// use std::time::Duration;
/// use agent_provider::ScriptedProvider;
/// use agent_provider::layers::Timeout;
///
/// let provider = Timeout::new(ScriptedProvider::new([]), Duration::from_secs(30));
/// # let _ = provider;
/// ```
#[derive(Clone, Debug)]
pub struct Timeout<P> {
    inner: P,
    limit: Duration,
}

impl<P> Timeout<P> {
    /// Bounds every call of `inner` by `limit`.
    pub fn new(inner: P, limit: Duration) -> Timeout<P> {
        Timeout { inner, limit }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped provider, unwrapped.
    pub fn into_inner(self) -> P {
        self.inner
    }

    async fn bounded(
        &self,
        call: BoxFuture<'_, Result<Response, ProviderError>>,
    ) -> Result<Response, ProviderError> {
        tokio::time::timeout(self.limit, call)
            .await
            .unwrap_or(Err(ProviderError::Timeout { after: self.limit }))
    }
}

impl<P: Provider> Provider for Timeout<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.bounded(self.inner.chat(model, prompt)))
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.bounded(self.inner.chat_stream(model, prompt, on_delta)))
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
