//! [`Retry`]: sends a failed call again, with capped exponential backoff and full jitter.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use crate::HttpError;
use agent_op::{BoxFuture, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};
use tokio::time::Instant;

/// Retries calls that failed with a retryable error ([`ProviderError::is_retryable`]: rate
/// limits, timeouts, transport failures, 408 and 5xx).
///
/// - **Backoff**: before retry *n* it waits a random time between zero and
///   `min(max_delay, base_delay × 2ⁿ⁻¹)` ("full jitter"), so clients that failed together do
///   not retry together.
/// - **Retry-After**: when the server said how long to wait (`Retry-After`, `retry-after-ms`,
///   on a 429 or any 5xx), it waits exactly that long instead. A wait longer than
///   [`max_retry_after`](Retry::max_retry_after) (default 60 s) is not attempted: the error
///   is returned at once.
/// - **Bounds**: at most [`max_attempts`](Retry::max_attempts) calls in all (default 3), and
///   nothing after the [`deadline`](Retry::deadline) (measured from the first call): no retry
///   starts (or waits) past it, and an attempt still running when it passes is cancelled and
///   the call fails with [`ProviderError::Timeout`] (`after` is the deadline).
/// - **Never retried**: authentication failures, exhausted quota, context length exceeded,
///   a response that could not be decoded, other 4xx.
/// - **Streaming**: a streamed call is retried only if it failed *before* its first delta
///   reached the caller. Once a delta was delivered, a retry would deliver the reply's start
///   twice, so the error is returned instead.
///
/// - **Cost**: a failed attempt may still be billed (a timeout or a cut stream after the
///   server generated tokens, a 200 that could not be decoded), so
///   [`max_cost`](Provider::max_cost) is the inner bound times `max_attempts`.
///
/// Waits use tokio's clock, so tests with a paused clock run instantly.
///
/// ```
/// use std::time::Duration;
/// use agent_provider::ScriptedProvider;
/// use agent_provider::layers::Retry;
///
/// let provider = Retry::new(ScriptedProvider::new([]))
///     .max_attempts(5)
///     .base_delay(Duration::from_millis(200))
///     .max_delay(Duration::from_secs(10))
///     .deadline(Duration::from_secs(60));
/// # let _ = provider;
/// ```
pub struct Retry<P> {
    inner: P,
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    max_retry_after: Duration,
    deadline: Option<Duration>,
    rng: Mutex<fastrand::Rng>,
}

impl<P> Retry<P> {
    /// Retries `inner`'s failed calls: 3 attempts in all, backoff from 500 ms capped at 30 s,
    /// Retry-After honoured up to 60 s, no deadline.
    pub fn new(inner: P) -> Retry<P> {
        Retry {
            inner,
            max_attempts: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
            deadline: None,
            rng: Mutex::new(fastrand::Rng::new()),
        }
    }

    /// The most calls made in all, the first included (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Retry<P> {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The backoff before the first retry, doubled for each further one.
    pub fn base_delay(mut self, delay: Duration) -> Retry<P> {
        self.base_delay = delay;
        self
    }

    /// The longest backoff.
    pub fn max_delay(mut self, delay: Duration) -> Retry<P> {
        self.max_delay = delay;
        self
    }

    /// The longest server-requested wait that is honoured; a longer one ends the retries.
    pub fn max_retry_after(mut self, wait: Duration) -> Retry<P> {
        self.max_retry_after = wait;
        self
    }

    /// The most time the whole call may take, from its first attempt: no retry starts later,
    /// and an attempt still running then is cancelled ([`ProviderError::Timeout`]).
    pub fn deadline(mut self, deadline: Duration) -> Retry<P> {
        self.deadline = Some(deadline);
        self
    }

    /// Seeds the jitter, for reproducible tests.
    pub fn jitter_seed(self, seed: u64) -> Retry<P> {
        Retry {
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            ..self
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped provider, unwrapped.
    pub fn into_inner(self) -> P {
        self.inner
    }

    /// The randomised backoff before retry number `retry` (1 for the first retry).
    fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        let cap = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        // A poisoned lock only means another call panicked mid-draw; the generator is fine.
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        Duration::from_nanos(rng.u64(0..=cap_nanos))
    }

    /// How long to wait before retry number `retry` after `err`, or `None` to give up.
    fn wait_before(&self, retry: u32, err: &ProviderError, started: Instant) -> Option<Duration> {
        let wait = match requested_wait(err) {
            Some(wait) if wait > self.max_retry_after => return None,
            Some(wait) => wait,
            None => self.backoff(retry),
        };
        match self.deadline {
            Some(deadline) if started.elapsed().saturating_add(wait) >= deadline => None,
            _ => Some(wait),
        }
    }
}

/// The wait a server asked for: [`ProviderError::retry_after`], or a `Retry-After` header
/// kept on an HTTP error (a 503, say).
fn requested_wait(err: &ProviderError) -> Option<Duration> {
    if let Some(wait) = err.retry_after() {
        return Some(wait);
    }
    HttpError::of(err)?.retry_after()
}

impl<P: Provider> Retry<P> {
    /// Runs one attempt, cancelling it when the deadline (if any) passes.
    async fn bounded(
        &self,
        started: Instant,
        call: BoxFuture<'_, Result<Response, ProviderError>>,
    ) -> Result<Response, ProviderError> {
        let Some(deadline) = self.deadline else {
            return call.await;
        };
        let left = deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(ProviderError::Timeout { after: deadline });
        }
        tokio::time::timeout(left, call)
            .await
            .unwrap_or(Err(ProviderError::Timeout { after: deadline }))
    }

    async fn call(
        &self,
        model: &str,
        prompt: &Prompt,
        mut on_delta: Option<&mut (dyn FnMut(Delta) + Send)>,
    ) -> Result<Response, ProviderError> {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let mut delivered = false;
            let result = match on_delta.as_deref_mut() {
                None => self.bounded(started, self.inner.chat(model, prompt)).await,
                Some(on_delta) => {
                    let mut tracking = |delta: Delta| {
                        delivered = true;
                        on_delta(delta);
                    };
                    let call = self.inner.chat_stream(model, prompt, &mut tracking);
                    self.bounded(started, call).await
                }
            };
            let err = match result {
                Ok(response) => return Ok(response),
                Err(err) => err,
            };
            if delivered || !err.is_retryable() || attempt >= self.max_attempts {
                return Err(err);
            }
            let Some(wait) = self.wait_before(attempt, &err, started) else {
                return Err(err);
            };
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

impl<P: Provider> Provider for Retry<P> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.call(model, prompt, None))
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(self.call(model, prompt, Some(on_delta)))
    }

    /// The inner provider's bound for one call, times `max_attempts`: a failed attempt may
    /// be billed too (a timeout or a cut stream after tokens were generated, an undecodable
    /// 200).
    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        let one = self.inner.max_cost(model, prompt)?;
        Some(MicroUsd(one.0.saturating_mul(u64::from(self.max_attempts))))
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        self.inner.supports_json_schema(model)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

impl<P: Clone> Clone for Retry<P> {
    fn clone(&self) -> Retry<P> {
        let rng = self.rng.lock().unwrap_or_else(|e| e.into_inner()).fork();
        Retry {
            inner: self.inner.clone(),
            max_attempts: self.max_attempts,
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            max_retry_after: self.max_retry_after,
            deadline: self.deadline,
            rng: Mutex::new(rng),
        }
    }
}

impl<P: fmt::Debug> fmt::Debug for Retry<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("max_retry_after", &self.max_retry_after)
            .field("deadline", &self.deadline)
            .field("inner", &self.inner)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScriptedProvider;

    #[test]
    fn backoff_is_capped_full_jitter() {
        let retry = Retry::new(ScriptedProvider::new([]))
            .base_delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(1000))
            .jitter_seed(7);
        for (n, cap) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let draws: Vec<Duration> = (0..200).map(|_| retry.backoff(n)).collect();
            let cap = Duration::from_millis(cap);
            assert!(draws.iter().all(|d| *d <= cap), "retry {n}");
            // Spread over the whole range, not clustered at the cap.
            assert!(draws.iter().any(|d| *d < cap / 4), "retry {n}");
            assert!(draws.iter().any(|d| *d > cap * 3 / 4), "retry {n}");
        }
    }

    #[test]
    fn requested_waits_come_from_errors_and_headers() {
        let limited = ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(3)),
            message: String::new(),
            cause: None,
        };
        assert_eq!(requested_wait(&limited), Some(Duration::from_secs(3)));
        let answer = HttpError::new(503, vec![("retry-after".into(), "2".into())], "");
        let unavailable = ProviderError::Refused {
            message: String::new(),
            retryable: true,
            cause: Some(agent_op::Cause::new(answer)),
        };
        assert_eq!(requested_wait(&unavailable), Some(Duration::from_secs(2)));
        assert_eq!(
            requested_wait(&ProviderError::Timeout {
                after: Duration::from_secs(1)
            }),
            None
        );
    }
}
