//! `tracing` spans for the embedding clients' requests: `embeddings {model}`, named and
//! attributed per the OpenTelemetry GenAI semantic conventions like the interpreters' `chat`
//! spans. They nest under the caller's current span — in a run, the memory operation whose
//! store or search asked for the vectors.
//!
//! With no subscriber interested, a span is one cached interest check; its name is only
//! formatted on enabled spans.

use std::future::Future;

use agent_op::EmbeddingError;
use tracing::field::Empty;
use tracing::{Instrument, Span};

/// The `tracing` target of the spans (the interpreters' target, so one filter keeps both).
const TARGET: &str = "effect_agents";

/// Runs `request`, one embeddings request of `inputs` texts to `model` at `provider`
/// (returning the vectors and the input tokens the server counted), inside its span.
pub(crate) async fn embeddings(
    provider: &'static str,
    model: &str,
    inputs: usize,
    request: impl Future<Output = Result<(Vec<Vec<f32>>, Option<u64>), EmbeddingError>>,
) -> Result<Vec<Vec<f32>>, EmbeddingError> {
    let span = embeddings_span(provider, model, inputs);
    let result = request.instrument(span.clone()).await;
    ended(&span, &result);
    result.map(|(vectors, _)| vectors)
}

/// The span of one embeddings request of `inputs` texts to `model` at `provider`.
fn embeddings_span(provider: &'static str, model: &str, inputs: usize) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "embeddings",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "embeddings",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        effect_agents.embeddings.inputs = i64::try_from(inputs).unwrap_or(i64::MAX),
        error.type = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("embeddings {model}"));
    }
    span
}

/// Records how the request ended: the input tokens the server reported, or the failure.
fn ended<T>(span: &Span, result: &Result<(T, Option<u64>), EmbeddingError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok((_, Some(tokens))) => {
            span.record(
                "gen_ai.usage.input_tokens",
                i64::try_from(*tokens).unwrap_or(i64::MAX),
            );
        }
        Ok((_, None)) => {}
        Err(error) => {
            let kind = match error {
                EmbeddingError::Provider(e) => e.kind_name(),
                _ => "embedding",
            };
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
    }
}
