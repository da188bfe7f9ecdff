//! The embedding clients' `embeddings {model}` spans: GenAI names and attributes, usage,
//! failures, and nesting under the caller's span.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agent_op::EmbeddingProvider;
use agent_provider::{OllamaClient, OpenAiClient};
use common::{Reply, TestServer};
use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Instrument, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A closed span: its name, its parent's name and its fields as text.
#[derive(Debug, Clone)]
struct Closed {
    name: String,
    parent: Option<String>,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// Collects every span as it closes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Closed>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            self.0.lock().unwrap().push(Closed {
                name: span.name().to_owned(),
                parent: span.parent().map(|p| p.name().to_owned()),
                fields,
            });
        }
    }
}

impl Capture {
    /// A capture, the current thread's subscriber until the guard drops.
    fn install() -> (Capture, tracing::subscriber::DefaultGuard) {
        let capture = Capture::default();
        let guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
        (capture, guard)
    }

    fn embeddings(&self) -> Vec<Closed> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|s| s.name == "embeddings")
            .cloned()
            .collect()
    }
}

fn field<'a>(span: &'a Closed, name: &str) -> Option<&'a str> {
    span.fields.get(name).map(String::as_str)
}

#[tokio::test]
async fn openai_embedding_requests_are_genai_spans_under_the_callers_span() {
    let server = TestServer::start(|request, _| {
        let inputs = request.json()["input"].as_array().unwrap().len();
        let data: Vec<Value> = (0..inputs)
            .map(|i| json!({"object": "embedding", "index": i, "embedding": [1.0, 0.0]}))
            .collect();
        Reply::json(
            200,
            &json!({"object": "list", "data": data, "usage": {"prompt_tokens": inputs * 4, "total_tokens": inputs * 4}}),
        )
    })
    .await;
    let (capture, _guard) = Capture::install();
    let embedder = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .api_key("sk-test-key")
        .build()
        .unwrap()
        .embedder("text-embedding-3-small", 2)
        .batch_size(2);
    let texts: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    embedder
        .embed_batch(&texts)
        .instrument(tracing::info_span!("memory"))
        .await
        .unwrap();

    let spans = capture.embeddings();
    assert_eq!(spans.len(), 2, "one span per request: {spans:#?}");
    for (span, inputs) in spans.iter().zip(["2", "1"]) {
        assert_eq!(span.parent.as_deref(), Some("memory"));
        assert_eq!(
            field(span, "otel.name"),
            Some("embeddings text-embedding-3-small")
        );
        assert_eq!(field(span, "gen_ai.operation.name"), Some("embeddings"));
        assert_eq!(field(span, "gen_ai.provider.name"), Some("openai"));
        assert_eq!(
            field(span, "gen_ai.request.model"),
            Some("text-embedding-3-small")
        );
        assert_eq!(field(span, "effect_agents.embeddings.inputs"), Some(inputs));
        let tokens = (inputs.parse::<u64>().unwrap() * 4).to_string();
        assert_eq!(
            field(span, "gen_ai.usage.input_tokens"),
            Some(tokens.as_str())
        );
        assert_eq!(field(span, "error.type"), None);
        assert!(
            !span.fields.values().any(|v| v.contains("sk-test-key")),
            "no credential on a span: {span:?}"
        );
    }
}

#[tokio::test]
async fn a_failed_embedding_request_marks_its_span() {
    let server =
        TestServer::start(|_, _| Reply::json(401, &json!({"error": {"message": "no"}}))).await;
    let (capture, _guard) = Capture::install();
    let embedder = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .api_key("sk-test-key")
        .build()
        .unwrap()
        .embedder("text-embedding-3-small", 2);
    assert!(embedder.embed("a").await.is_err());
    let spans = capture.embeddings();
    assert_eq!(spans.len(), 1);
    assert_eq!(field(&spans[0], "error.type"), Some("authentication"));
    assert_eq!(field(&spans[0], "otel.status_code"), Some("ERROR"));
    assert_eq!(field(&spans[0], "gen_ai.usage.input_tokens"), None);
}

#[tokio::test]
async fn ollama_embedding_requests_are_genai_spans_with_their_token_count() {
    let server = TestServer::start(|request, _| {
        let inputs = request.json()["input"].as_array().unwrap().len();
        let embeddings: Vec<Value> = (0..inputs).map(|_| json!([1.0, 0.0])).collect();
        Reply::json(
            200,
            &json!({"model": "nomic-embed-text", "embeddings": embeddings, "prompt_eval_count": 8}),
        )
    })
    .await;
    let (capture, _guard) = Capture::install();
    let embedder = OllamaClient::builder()
        .host(server.url())
        .build()
        .unwrap()
        .embedder("nomic-embed-text", 2);
    let texts: Vec<String> = ["a", "b"].map(String::from).to_vec();
    embedder.embed_batch(&texts).await.unwrap();
    let spans = capture.embeddings();
    assert_eq!(spans.len(), 1);
    assert_eq!(
        field(&spans[0], "otel.name"),
        Some("embeddings nomic-embed-text")
    );
    assert_eq!(field(&spans[0], "gen_ai.provider.name"), Some("ollama"));
    assert_eq!(field(&spans[0], "gen_ai.usage.input_tokens"), Some("8"));
    assert_eq!(
        field(&spans[0], "effect_agents.embeddings.inputs"),
        Some("2")
    );
    assert_eq!(spans[0].parent, None);
}
