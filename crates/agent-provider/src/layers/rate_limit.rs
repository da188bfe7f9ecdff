//! [`RateLimit`]: spaces calls out to a rate.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_op::{BoxFuture, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};
use tokio::time::Instant;

/// Starts at most `requests` calls per `period`, evenly spaced, with an optional burst; a call
/// over the rate waits its turn. Clones share the rate.
///
/// It is a generic cell rate algorithm: each call reserves the next free slot, so waiting
/// calls are served in arrival order. A call cancelled while waiting keeps its slot (the rate
/// errs on the slow side).
///
/// Waits use tokio's clock, so tests with a paused clock run instantly.
///
/// ```
/// use std::time::Duration;
/// use agent_provider::ScriptedProvider;
/// use agent_provider::layers::RateLimit;
///
/// // 500 requests per minute, up to 10 at once after a quiet spell.
/// let provider = RateLimit::new(ScriptedProvider::new([]), 500, Duration::from_secs(60)).burst(10);
/// # let _ = provider;
/// ```
#[derive(Clone, Debug)]
pub struct RateLimit<P> {
    inner: P,
    interval: Duration,
    burst: u32,
    /// The theoretical arrival time of the next call.
    next: Arc<Mutex<Option<Instant>>>,
}

impl<P> RateLimit<P> {
    /// At most `requests` (at least 1) calls of `inner` per `period`, one at a time.
    pub fn new(inner: P, requests: u32, period: Duration) -> RateLimit<P> {
        RateLimit {
            inner,
            interval: period / requests.max(1),
            burst: 1,
            next: Arc::new(Mutex::new(None)),
        }
    }

    /// Lets up to `burst` (at least 1) calls start at once after a quiet spell.
    pub fn burst(mut self, burst: u32) -> RateLimit<P> {
        self.burst = burst.max(1);
        self
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Reserves the next slot and returns how long to wait for it.
    fn reserve(&self) -> Duration {
        let now = Instant::now();
        let tolerance = self.interval.saturating_mul(self.burst - 1);
        // The state is one instant; a panic elsewhere cannot leave it inconsistent.
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let slot = next.map_or(now, |t| t.max(now));
        // An interval too long to add to a clock reading is as good as a year.
        const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
        *next = slot
            .checked_add(self.interval)
            .or_else(|| slot.checked_add(YEAR))
            .or(Some(slot));
        slot.saturating_duration_since(now)
            .saturating_sub(tolerance)
    }

    async fn paced<'a>(
        &'a self,
        call: impl FnOnce() -> BoxFuture<'a, Result<Response, ProviderError>>,
    ) -> Result<Response, ProviderError> {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        call().await
    }
}

impl<P: Provider> Provider for RateLimit<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.paced(move || self.inner.chat(model, prompt)))
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.paced(move || self.inner.chat_stream(model, prompt, on_delta)))
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
