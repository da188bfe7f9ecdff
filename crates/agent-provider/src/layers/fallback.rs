//! [`Fallback`]: calls a second provider when the first fails.

use std::fmt;
use std::sync::Arc;

use agent_op::{BoxFuture, Delta, MicroUsd, Prompt, Provider, ProviderError, Response};

type Predicate = dyn Fn(&ProviderError) -> bool + Send + Sync;

/// Sends each call to a primary provider and, if it fails, to a secondary one (optionally
/// under another model name, since providers name models differently).
///
/// By default every error falls back; [`Fallback::when`] narrows that. When both fail, the
/// call fails with [`ProviderError::AllFailed`]: every provider's error, typed, in the order
/// they were tried (chains of fallbacks give one flat list); its
/// [`is_retryable`](ProviderError::is_retryable) and
/// [`retry_after`](ProviderError::retry_after) are the last provider's. A streamed call falls back only if the primary failed before delivering its first
/// delta: the caller has otherwise seen part of a reply already.
///
/// [`max_cost`](Provider::max_cost) is the sum of both bounds: the primary may bill for a
/// call that then fails (a timeout or a cut stream after tokens were generated).
///
/// ```
/// use agent_op::ProviderError;
/// use agent_provider::ScriptedProvider;
/// use agent_provider::layers::Fallback;
///
/// let provider = Fallback::new(ScriptedProvider::new([]), ScriptedProvider::new([]))
///     .secondary_model("llama3.2")
///     .when(|e: &ProviderError| e.is_retryable());
/// # let _ = provider;
/// ```
#[derive(Clone)]
pub struct Fallback<P, Q> {
    primary: P,
    secondary: Q,
    secondary_model: Option<String>,
    when: Option<Arc<Predicate>>,
}

impl<P, Q> Fallback<P, Q> {
    /// Falls back from `primary` to `secondary` on any error.
    pub fn new(primary: P, secondary: Q) -> Fallback<P, Q> {
        Fallback {
            primary,
            secondary,
            secondary_model: None,
            when: None,
        }
    }

    /// Calls the secondary provider with this model instead of the requested one.
    pub fn secondary_model(mut self, model: impl Into<String>) -> Fallback<P, Q> {
        self.secondary_model = Some(model.into());
        self
    }

    /// Falls back only on errors for which `predicate` is true.
    pub fn when(
        mut self,
        predicate: impl Fn(&ProviderError) -> bool + Send + Sync + 'static,
    ) -> Fallback<P, Q> {
        self.when = Some(Arc::new(predicate));
        self
    }

    /// The primary provider.
    pub fn primary(&self) -> &P {
        &self.primary
    }

    /// The secondary provider.
    pub fn secondary(&self) -> &Q {
        &self.secondary
    }

    fn falls_back(&self, err: &ProviderError) -> bool {
        self.when.as_ref().is_none_or(|p| p(err))
    }

    fn second_model<'a>(&'a self, model: &'a str) -> &'a str {
        self.secondary_model.as_deref().unwrap_or(model)
    }
}

impl<P: Provider, Q: Provider> Provider for Fallback<P, Q> {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            match self.primary.chat(model, prompt).await {
                Err(first) if self.falls_back(&first) => self
                    .secondary
                    .chat(self.second_model(model), prompt)
                    .await
                    .map_err(|second| both_failed(first, second)),
                result => result,
            }
        })
    }

    fn chat_stream<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let mut delivered = false;
            let mut tracking = |delta: Delta| {
                delivered = true;
                on_delta(delta);
            };
            let result = self.primary.chat_stream(model, prompt, &mut tracking).await;
            match result {
                Err(first) if !delivered && self.falls_back(&first) => {
                    let model = self.second_model(model);
                    self.secondary
                        .chat_stream(model, prompt, on_delta)
                        .await
                        .map_err(|second| both_failed(first, second))
                }
                result => result,
            }
        })
    }

    /// The sum of the two providers' bounds, if both know one: the primary may bill for an
    /// attempt that failed before the secondary is called.
    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        let primary = self.primary.max_cost(model, prompt)?;
        let secondary = self.secondary.max_cost(self.second_model(model), prompt)?;
        Some(primary.saturating_add(secondary))
    }

    fn supports_json_schema(&self, model: &str) -> bool {
        // Either may answer: only a schema both enforce is enforced.
        self.primary.supports_json_schema(model)
            && self
                .secondary
                .supports_json_schema(self.second_model(model))
    }

    fn name(&self) -> &str {
        self.primary.name()
    }
}

/// Both errors, in the order tried, as one flat [`ProviderError::AllFailed`] list (a
/// fallback inside a fallback adds its own list, not a nested one).
fn both_failed(primary: ProviderError, secondary: ProviderError) -> ProviderError {
    let mut errors = Vec::new();
    for error in [primary, secondary] {
        match error {
            ProviderError::AllFailed { errors: inner } => errors.extend(inner),
            other => errors.push(other),
        }
    }
    ProviderError::AllFailed { errors }
}

impl<P: fmt::Debug, Q: fmt::Debug> fmt::Debug for Fallback<P, Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("primary", &self.primary)
            .field("secondary", &self.secondary)
            .field("secondary_model", &self.secondary_model)
            .field("when", &self.when.as_ref().map(|_| "<predicate>"))
            .finish()
    }
}
