//! Layers: providers that wrap any [`Provider`] to make it resilient.
//!
//! | layer | does |
//! |---|---|
//! | [`Retry`] | retries retryable failures: capped exponential backoff with full jitter, Retry-After honoured, bounded attempts and deadline |
//! | [`Timeout`] | fails calls that take too long with [`ProviderError::Timeout`](agent_op::ProviderError::Timeout) |
//! | [`ConcurrencyLimit`] | lets at most *n* calls run at once |
//! | [`RateLimit`] | starts at most *n* calls per period |
//! | [`Fallback`] | calls a second provider when the first fails |
//!
//! Every layer is itself a [`Provider`] and forwards `chat`, `chat_stream` and `max_cost`, so
//! layers stack. Since a failed attempt may still be billed, [`Retry`]'s `max_cost` is the
//! inner bound times its attempts and [`Fallback`]'s the sum of both bounds. The order
//! matters, outermost first:
//!
//! ```
//! use std::time::Duration;
//! use agent_provider::ScriptedProvider;
//! use agent_provider::layers::ProviderExt;
//!
//! let model = ScriptedProvider::new([]);
//! let provider = model
//!     .with_timeout(Duration::from_secs(60))     // each attempt gets 60 s
//!     .with_rate_limit(60, Duration::from_secs(60)) // each attempt counts against the rate
//!     .with_retry()                              // attempts are retried…
//!     .with_concurrency_limit(4)                 // …while holding one of 4 slots
//!     .with_timeout(Duration::from_secs(300));   // and the whole call gets 5 min
//! # let _ = provider;
//! ```

mod concurrency;
mod fallback;
mod rate_limit;
mod retry;
mod timeout;

use std::time::Duration;

use agent_op::Provider;

pub use concurrency::ConcurrencyLimit;
pub use fallback::Fallback;
pub use rate_limit::RateLimit;
pub use retry::Retry;
pub use timeout::Timeout;

/// Wraps any provider in a layer, reading outwards: `p.with_retry().with_timeout(d)` is a
/// timeout around retries around `p`.
pub trait ProviderExt: Provider + Sized {
    /// Wraps in [`Retry`] with its defaults (configure it further with its setters).
    fn with_retry(self) -> Retry<Self> {
        Retry::new(self)
    }

    /// Wraps in a [`Timeout`] of `limit`.
    fn with_timeout(self, limit: Duration) -> Timeout<Self> {
        Timeout::new(self, limit)
    }

    /// Wraps in a [`ConcurrencyLimit`] of `max` calls at once.
    fn with_concurrency_limit(self, max: usize) -> ConcurrencyLimit<Self> {
        ConcurrencyLimit::new(self, max)
    }

    /// Wraps in a [`RateLimit`] of `requests` per `period`.
    fn with_rate_limit(self, requests: u32, period: Duration) -> RateLimit<Self> {
        RateLimit::new(self, requests, period)
    }

    /// Wraps in a [`Fallback`] to `secondary`.
    fn with_fallback<Q: Provider>(self, secondary: Q) -> Fallback<Self, Q> {
        Fallback::new(self, secondary)
    }
}

impl<P: Provider> ProviderExt for P {}
