//! [`ScriptedProvider`]: a provider that answers from a script, for testing programs without a
//! model.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_op::{BoxFuture, PREVIEW_CHARS, Prompt, Provider, ProviderError, Response, preview};

type Responder = dyn Fn(&str, &Prompt) -> Result<Response, ProviderError> + Send + Sync;

/// A provider that answers from a queue of scripted replies or from a function, and records
/// every call so tests can assert on what the program sent.
///
/// A call with nothing left in the queue fails with [`ProviderError::Unexpected`] and is
/// reported by [`ScriptedProvider::verify`], as are replies never consumed. Clones share the
/// script, so keep one to inspect after handing the provider to a run.
///
/// ```
/// use agent_op::{Prompt, Provider, Response};
/// use agent_provider::ScriptedProvider;
///
/// # tokio_test_block_on(async {
/// let provider = ScriptedProvider::new([Response::text("4")]);
/// let reply = provider.chat("m", &Prompt::new().user("2+2?")).await.unwrap();
/// assert_eq!(reply.content, "4");
/// assert!(provider.verify().is_ok());
/// # });
/// # fn tokio_test_block_on(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Clone)]
pub struct ScriptedProvider {
    inner: Arc<Mutex<Script>>,
    responder: Option<Arc<Responder>>,
    latency: Duration,
    json_schema: bool,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Result<Response, ProviderError>>,
    calls: Vec<RecordedCall>,
    unexpected: Vec<String>,
}

/// A call a [`ScriptedProvider`] received.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedCall {
    /// The model asked for.
    pub model: String,
    /// The prompt sent.
    pub prompt: Prompt,
}

/// What went wrong with a script: calls it did not expect, replies it never gave.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.unexpected_calls, *.unconsumed))]
pub struct ScriptReport {
    /// One line per unexpected call.
    pub unexpected_calls: Vec<String>,
    /// How many scripted replies were never consumed.
    pub unconsumed: usize,
}

fn describe(unexpected: &[String], unconsumed: usize) -> String {
    let mut parts = Vec::new();
    if !unexpected.is_empty() {
        parts.push(format!(
            "{} unexpected call(s): {}",
            unexpected.len(),
            unexpected.join("; ")
        ));
    }
    if unconsumed > 0 {
        parts.push(format!("{unconsumed} scripted reply(ies) never consumed"));
    }
    parts.join(", ")
}

impl ScriptedProvider {
    /// Claims to enforce JSON-schema response formats
    /// ([`Provider::supports_json_schema`]), as OpenAI's and Ollama's clients do, so typed
    /// output sends the schema natively instead of format instructions.
    pub fn with_json_schema(mut self) -> ScriptedProvider {
        self.json_schema = true;
        self
    }

    /// Answers calls with `responses`, in order.
    pub fn new(responses: impl IntoIterator<Item = Response>) -> ScriptedProvider {
        ScriptedProvider::from_results(responses.into_iter().map(Ok))
    }

    /// Answers calls with `results` in order; an `Err` makes that call fail.
    pub fn from_results(
        results: impl IntoIterator<Item = Result<Response, ProviderError>>,
    ) -> ScriptedProvider {
        ScriptedProvider {
            inner: Arc::new(Mutex::new(Script {
                queue: results.into_iter().collect(),
                ..Script::default()
            })),
            responder: None,
            latency: Duration::ZERO,
            json_schema: false,
        }
    }

    /// Answers every call with `f(model, prompt)`: a deterministic provider for tests where
    /// the reply depends on the request.
    pub fn from_fn(
        f: impl Fn(&str, &Prompt) -> Result<Response, ProviderError> + Send + Sync + 'static,
    ) -> ScriptedProvider {
        ScriptedProvider {
            inner: Arc::new(Mutex::new(Script::default())),
            responder: Some(Arc::new(f)),
            latency: Duration::ZERO,
            json_schema: false,
        }
    }

    /// Makes every call take `latency` (on tokio's clock, so paused-clock tests stay instant).
    pub fn with_latency(mut self, latency: Duration) -> ScriptedProvider {
        self.latency = latency;
        self
    }

    /// Queues one more reply.
    pub fn push(&self, response: Response) {
        self.lock().queue.push_back(Ok(response));
    }

    /// Queues one more failure.
    pub fn push_error(&self, error: ProviderError) {
        self.lock().queue.push_back(Err(error));
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // The script only holds plain collections; a panic cannot leave them inconsistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call received so far, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.lock().calls.clone()
    }

    /// How many scripted replies are left.
    pub fn remaining(&self) -> usize {
        self.lock().queue.len()
    }

    /// `Ok` if every call was expected and every scripted reply consumed.
    pub fn verify(&self) -> Result<(), ScriptReport> {
        let script = self.lock();
        if script.unexpected.is_empty() && script.queue.is_empty() {
            Ok(())
        } else {
            Err(ScriptReport {
                unexpected_calls: script.unexpected.clone(),
                unconsumed: script.queue.len(),
            })
        }
    }

    fn answer(&self, model: &str, prompt: &Prompt) -> Result<Response, ProviderError> {
        let mut script = self.lock();
        script.calls.push(RecordedCall {
            model: model.to_owned(),
            prompt: prompt.clone(),
        });
        let call_no = script.calls.len();
        if let Some(responder) = &self.responder {
            drop(script);
            return responder(model, prompt);
        }
        match script.queue.pop_front() {
            Some(result) => result,
            None => {
                let last = prompt
                    .messages
                    .last()
                    .map(|m| preview(m.content(), PREVIEW_CHARS))
                    .unwrap_or_default();
                let message = format!(
                    "call #{call_no} to `{model}` has no scripted reply (last message: {last:?})"
                );
                script.unexpected.push(message.clone());
                Err(ProviderError::Unexpected { message })
            }
        }
    }
}

impl Provider for ScriptedProvider {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            if !self.latency.is_zero() {
                tokio::time::sleep(self.latency).await;
            }
            self.answer(model, prompt)
        })
    }

    fn supports_json_schema(&self, _model: &str) -> bool {
        self.json_schema
    }

    fn name(&self) -> &str {
        "scripted"
    }
}

impl fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let script = self.lock();
        f.debug_struct("ScriptedProvider")
            .field("remaining", &script.queue.len())
            .field("calls", &script.calls.len())
            .field("unexpected", &script.unexpected.len())
            .field("responder", &self.responder.is_some())
            .field("latency", &self.latency)
            .finish()
    }
}
