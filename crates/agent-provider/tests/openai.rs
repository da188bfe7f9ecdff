//! The OpenAI-compatible client against a local server speaking the documented wire format:
//! what it sends, and what it makes of plain, streamed and embedding replies.

mod common;

use agent_op::{
    Delta, EmbeddingError, EmbeddingProvider, FinishReason, Message, MicroUsd, Prompt, Provider,
    ProviderError, ResponseFormat, ToolCall, ToolChoice, ToolDefinition, Usage,
};
use agent_provider::openai::{MaxTokensField, OPENAI_BASE_URL};
use agent_provider::{ConfigError, ModelPrice, OpenAiClient, Pricing};
use common::{Reply, TestServer, pieces, sse_events};
use serde_json::{Value, json};

fn client(server: &TestServer) -> OpenAiClient {
    OpenAiClient::compatible(format!("{}/v1", server.url()))
        .api_key("sk-test-key")
        .build()
        .expect("client")
}

fn completion(message: Value, finish_reason: &str, usage: Value) -> Value {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": usage,
        "system_fingerprint": "fp_1",
    })
}

/// A prompt using every message role and every option.
fn full_prompt() -> Prompt {
    Prompt::from_messages(vec![
        Message::system("You are terse."),
        Message::user("What is 2+3, and the weather in Oslo?"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "add".into(),
                    arguments: json!({"a": 2, "b": 3}),
                },
                ToolCall {
                    id: "call_w".into(),
                    name: "weather".into(),
                    arguments: json!({"city": "Oslo"}),
                },
            ],
        },
        Message::tool_result("call_a", "5"),
        Message::tool_result("call_w", "{\"sky\":\"rain\"}"),
    ])
    .tools(vec![
        ToolDefinition {
            name: "add".into(),
            description: "Adds two integers".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
        },
        ToolDefinition {
            name: "weather".into(),
            description: "Current weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
    ])
    .temperature(0.25)
    .max_tokens(300)
    .stop(["END"])
    .seed(42)
    .response_format(ResponseFormat::JsonSchema {
        name: "answer".into(),
        schema: json!({"type": "object", "properties": {"sum": {"type": "integer"}}}),
        strict: true,
    })
    .tool_choice(ToolChoice::Auto)
}

fn full_prompt_wire(max_tokens_field: &str) -> Value {
    let mut body = json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+3, and the weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}},
                {"id": "call_w", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_a", "content": "5"},
            {"role": "tool", "tool_call_id": "call_w", "content": "{\"sky\":\"rain\"}"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "add", "description": "Adds two integers",
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
            {"type": "function", "function": {"name": "weather", "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
        ],
        "tool_choice": "auto",
        "temperature": 0.25,
        "stop": ["END"],
        "seed": 42,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object", "properties": {"sum": {"type": "integer"}}}, "strict": true}},
    });
    body[max_tokens_field] = json!(300);
    body
}

#[tokio::test]
async fn chat_sends_the_documented_request_and_reads_the_reply() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "{\"sum\":5}", "refusal": null}),
            "stop",
            json!({"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128}),
        ),
    ))
    .await;
    let client = OpenAiClient::compatible(format!("{}/v1/", server.url()))
        .api_key("sk-test-key")
        .organization("org-1")
        .project("proj-1")
        .header("x-extra", "yes")
        .pricing(Pricing::openai())
        .max_tokens_field(MaxTokensField::MaxCompletionTokens)
        .build()
        .unwrap();

    let reply = client.chat("gpt-4o-mini", &full_prompt()).await.unwrap();

    let request = server.only_request();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-key"));
    assert_eq!(request.header("openai-organization"), Some("org-1"));
    assert_eq!(request.header("openai-project"), Some("proj-1"));
    assert_eq!(request.header("x-extra"), Some("yes"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.json(), full_prompt_wire("max_completion_tokens"));

    assert_eq!(reply.content, "{\"sum\":5}");
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 120,
            output_tokens: 8
        }
    );
    // gpt-4o-mini: $0.15 / $0.60 per million tokens → 18 + 4.8 micro-dollars, rounded up.
    assert_eq!(reply.cost, Some(MicroUsd(23)));
    // The model that answered, as the server names it.
    assert_eq!(reply.model.as_deref(), Some("gpt-4o-mini-2024-07-18"));
}

#[tokio::test]
async fn compatible_servers_get_max_tokens_and_no_key_by_default() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "hi"}),
            "stop",
            json!(null),
        ),
    ))
    .await;
    let client = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .build()
        .unwrap();
    let reply = client.chat("gpt-4o-mini", &full_prompt()).await.unwrap();
    let request = server.only_request();
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.json(), full_prompt_wire("max_tokens"));
    assert_eq!(reply.content, "hi");
    assert_eq!(
        reply.cost, None,
        "no prices, no usage: cost unknown, not zero"
    );
}

#[tokio::test]
async fn parallel_tool_calls_with_string_or_object_arguments() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}},
                {"id": "call_3", "type": "function", "function": {"name": "noop", "arguments": ""}},
            ]}),
            "tool_calls",
            json!({"prompt_tokens": 10, "completion_tokens": 30}),
        ),
    ))
    .await;
    let reply = client(&server)
        .chat("unpriced-model", &Prompt::new().user("go"))
        .await
        .unwrap();
    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    assert_eq!(reply.content, "");
    let calls: Vec<(&str, &str, &Value)> = reply
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_1", "add", &json!({"a": 1, "b": 2})),
            ("call_2", "weather", &json!({"city": "Oslo"})),
            ("call_3", "noop", &json!({})),
        ]
    );
    assert_eq!(reply.cost, None, "unknown model: cost absent");
}

#[tokio::test]
async fn structured_output_and_tool_choice_shapes() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "{}"}),
            "stop",
            json!(null),
        ),
    ))
    .await;
    let client = client(&server);
    let mut prompt = Prompt::new()
        .user("x")
        .response_format(ResponseFormat::JsonObject)
        .tools(vec![ToolDefinition {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type": "object"}),
        }]);
    prompt.options.tool_choice = Some(ToolChoice::Tool("add".into()));
    client.chat("m", &prompt).await.unwrap();
    prompt.options.tool_choice = Some(ToolChoice::Required);
    prompt.options.response_format = Some(ResponseFormat::Text);
    client.chat("m", &prompt).await.unwrap();
    // Without tools, no `tool_choice` is sent (OpenAI rejects one).
    prompt.tools = Default::default();
    client.chat("m", &prompt).await.unwrap();
    let requests = server.requests();
    assert!(requests[2].json().get("tool_choice").is_none());
    assert!(requests[2].json().get("tools").is_none());
    assert_eq!(
        requests[0].json()["tool_choice"],
        json!({"type": "function", "function": {"name": "add"}})
    );
    assert_eq!(
        requests[0].json()["response_format"],
        json!({"type": "json_object"})
    );
    assert_eq!(requests[1].json()["tool_choice"], json!("required"));
    assert_eq!(
        requests[1].json()["response_format"],
        json!({"type": "text"})
    );
}

fn chunk(delta: Value, finish_reason: Value) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
    })
}

fn usage_chunk(prompt: u64, completion: u64) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini",
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    })
}

#[tokio::test]
async fn streamed_chat_assembles_text_and_reads_the_usage_chunk() {
    let events = vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Grüß "}), Value::Null),
        chunk(json!({"content": "dich, 世界 "}), json!("")),
        chunk(json!({"content": "🎉"}), Value::Null),
        chunk(json!({}), json!("stop")),
        usage_chunk(21, 6),
    ];
    // 7-byte pieces: the network splits inside lines and inside UTF-8 characters.
    let server = TestServer::always(Reply::sse(pieces(&sse_events(&events), 7))).await;
    let client = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .pricing(Pricing::new().with(
            "gpt-4o-mini",
            ModelPrice::per_million(MicroUsd(1_000_000), MicroUsd(2_000_000)),
        ))
        .build()
        .unwrap();
    let mut deltas = Vec::new();
    let reply = client
        .chat_stream("gpt-4o-mini", &Prompt::new().user("greet"), &mut |d| {
            deltas.push(d)
        })
        .await
        .unwrap();

    let request = server.only_request();
    assert_eq!(request.header("accept"), Some("text/event-stream"));
    assert_eq!(
        request.json(),
        json!({
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "greet"}],
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
    assert_eq!(reply.content, "Grüß dich, 世界 🎉");
    assert_eq!(
        deltas,
        [
            Delta::Text("Grüß ".into()),
            Delta::Text("dich, 世界 ".into()),
            Delta::Text("🎉".into())
        ]
    );
    assert_eq!(
        reply.model.as_deref(),
        Some("gpt-4o-mini"),
        "from the chunks"
    );
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(reply.usage.total(), 27);
    assert_eq!(reply.cost, Some(MicroUsd(21 + 12)));
}

#[tokio::test]
async fn tool_calls_split_across_many_chunks_and_run_in_parallel() {
    let args_a = r#"{"city": "Zürich", "unit": "celsius"}"#;
    let args_b = r#"{"query": "population of Zürich"}"#;
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_A", "type": "function", "function": {"name": "weather", "arguments": ""}},
        ]}),
        Value::Null,
    )];
    // Interleave the two calls' argument fragments, 3 characters at a time.
    let frag = |s: &str| -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        chars.chunks(3).map(|c| c.iter().collect()).collect()
    };
    let (fa, fb) = (frag(args_a), frag(args_b));
    events.push(chunk(
        json!({"tool_calls": [{"index": 1, "id": "call_B", "type": "function", "function": {"name": "search", "arguments": ""}}]}),
        Value::Null,
    ));
    for i in 0..fa.len().max(fb.len()) {
        if let Some(f) = fa.get(i) {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}),
                Value::Null,
            ));
        }
        if let Some(f) = fb.get(i) {
            events.push(chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": f}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), json!("tool_calls")));
    events.push(usage_chunk(50, 40));
    let body = sse_events(&events);
    assert!(events.len() > 20, "many chunks");
    let server = TestServer::always(Reply::sse(pieces(&body, 13))).await;

    let mut deltas = Vec::new();
    let reply = client(&server)
        .chat_stream("m", &Prompt::new().user("go"), &mut |d| deltas.push(d))
        .await
        .unwrap();

    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(
        (
            reply.tool_calls[0].id.as_str(),
            reply.tool_calls[0].name.as_str()
        ),
        ("call_A", "weather")
    );
    assert_eq!(
        reply.tool_calls[0].arguments,
        json!({"city": "Zürich", "unit": "celsius"})
    );
    assert_eq!(
        (
            reply.tool_calls[1].id.as_str(),
            reply.tool_calls[1].name.as_str()
        ),
        ("call_B", "search")
    );
    assert_eq!(
        reply.tool_calls[1].arguments,
        json!({"query": "population of Zürich"})
    );
    // The deltas say the same thing: headers for each call, and the argument text per call.
    assert_eq!(
        deltas[0],
        Delta::ToolCall {
            index: 0,
            id: Some("call_A".into()),
            name: Some("weather".into())
        }
    );
    assert_eq!(
        deltas[1],
        Delta::ToolCall {
            index: 1,
            id: Some("call_B".into()),
            name: Some("search".into())
        }
    );
    for (index, args) in [(0, args_a), (1, args_b)] {
        let text: String = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::ToolCallArguments { index: i, fragment } if *i == index => {
                    Some(fragment.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(text, args);
    }
}

#[tokio::test]
async fn parallel_tool_calls_all_at_index_0_stay_apart() {
    // Ollama's /v1 sends every parallel call whole, each with index 0.
    let events = vec![
        chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"role": "assistant", "content": "", "tool_calls": [{"index": 0, "id": "call_b", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\":\"b.txt\",\"text\":\"hi\"}"}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
    ];
    let server = TestServer::always(Reply::sse(vec![sse_events(&events)])).await;
    let reply = client(&server)
        .chat_stream("llama3.2", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        reply.tool_calls,
        [
            ToolCall {
                id: "call_a".into(),
                name: "read_file".into(),
                arguments: json!({"path": "a.txt"}),
            },
            ToolCall {
                id: "call_b".into(),
                name: "write_file".into(),
                arguments: json!({"path": "b.txt", "text": "hi"}),
            },
        ]
    );
}

#[tokio::test]
async fn stream_options_can_be_left_out_and_done_may_end_the_body() {
    // The body ends right after `data: [DONE]`, without the blank line.
    let mut body = sse_events(&[chunk(json!({"content": "hi"}), json!("stop"))]);
    body.truncate(body.len() - 2);
    assert!(body.ends_with(b"data: [DONE]"));
    let server = TestServer::always(Reply::sse(vec![body])).await;
    let client = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .stream_options(false)
        .build()
        .unwrap();
    let reply = client
        .chat_stream("m", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(reply.content, "hi");
    let request = server.only_request().json();
    assert_eq!(request["stream"], json!(true));
    assert!(request.get("stream_options").is_none(), "{request}");
}

#[tokio::test]
async fn a_stream_without_done_is_an_error_not_a_partial_reply() {
    let events = [
        chunk(json!({"content": "Hello"}), Value::Null),
        chunk(json!({}), json!("stop")),
    ];
    let mut body = Vec::new();
    for e in &events {
        body.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }
    // Ends cleanly, but without the usage chunk and `[DONE]`.
    let server = TestServer::always(Reply::sse(vec![body.clone()])).await;
    let mut deltas = Vec::new();
    let err = client(&server)
        .chat_stream("m", &Prompt::new().user("x"), &mut |d| deltas.push(d))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Transport { message, .. } if message.contains("[DONE]")),
        "{err:?}"
    );
    assert_eq!(
        deltas,
        [Delta::Text("Hello".into())],
        "what arrived was still delivered"
    );

    // The connection is cut in the middle of the body.
    let server = TestServer::always(Reply::sse(pieces(&body, 10)).truncated()).await;
    let err = client(&server)
        .chat_stream("m", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn an_error_inside_the_stream_fails_the_call() {
    let body = format!(
        "data: {}\n\ndata: {}\n\n",
        chunk(json!({"content": "par"}), Value::Null),
        json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}})
    );
    let server = TestServer::always(Reply::sse(vec![body.into_bytes()])).await;
    let err = client(&server)
        .chat_stream("m", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::RateLimited { .. }), "{err:?}");
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_delivered_as_deltas() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "whole"}),
            "stop",
            json!({"prompt_tokens": 1, "completion_tokens": 1}),
        ),
    ))
    .await;
    let mut deltas = Vec::new();
    let reply = client(&server)
        .chat_stream("m", &Prompt::new().user("x"), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(reply.content, "whole");
    assert_eq!(deltas, [Delta::Text("whole".into())]);
}

#[tokio::test]
async fn embeddings_are_ordered_by_index_and_checked() {
    let server = TestServer::start(|request, _| {
        let inputs = request.json()["input"].as_array().unwrap().len();
        // Answer out of order, to check that the client sorts by index.
        let data: Vec<Value> = (0..inputs)
            .rev()
            .map(|i| json!({"object": "embedding", "index": i, "embedding": [i as f32, 0.5, -1.0]}))
            .collect();
        Reply::json(
            200,
            &json!({"object": "list", "data": data, "model": "text-embedding-3-small", "usage": {"prompt_tokens": 3, "total_tokens": 3}}),
        )
    })
    .await;
    let client = client(&server);
    let embedder = client.embedder("text-embedding-3-small", 3).batch_size(2);
    assert_eq!(embedder.model(), "text-embedding-3-small");
    assert_eq!(embedder.dimensions(), 3);
    let texts: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    let vectors = embedder.embed_batch(&texts).await.unwrap();
    assert_eq!(
        vectors,
        [
            vec![0.0, 0.5, -1.0],
            vec![1.0, 0.5, -1.0],
            vec![0.0, 0.5, -1.0]
        ]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "batches of two");
    assert_eq!(requests[0].path, "/v1/embeddings");
    assert_eq!(
        requests[0].json(),
        json!({"model": "text-embedding-3-small", "input": ["a", "b"], "encoding_format": "float"})
    );
    assert_eq!(requests[1].json()["input"], json!(["c"]));

    let one = embedder.embed("d").await.unwrap();
    assert_eq!(one, vec![0.0, 0.5, -1.0]);

    let with_dims = client
        .embedder("text-embedding-3-small", 3)
        .send_dimensions(true);
    with_dims.embed("e").await.unwrap();
    assert_eq!(server.requests()[3].json()["dimensions"], json!(3));

    let wrong = client.embedder("text-embedding-3-small", 1536);
    let err = wrong.embed("f").await.unwrap_err();
    assert_eq!(
        err,
        EmbeddingError::DimensionMismatch {
            expected: 1536,
            got: 3
        }
    );
}

#[tokio::test]
async fn embeddings_missing_from_the_reply_are_an_error() {
    let server = TestServer::always(Reply::json(
        200,
        &json!({"data": [{"index": 0, "embedding": [1.0]}]}),
    ))
    .await;
    let err = client(&server)
        .embedder("e", 1)
        .embed_batch(&["a".to_owned(), "b".to_owned()])
        .await
        .unwrap_err();
    assert!(
        matches!(err, EmbeddingError::Provider(ProviderError::Decode { .. })),
        "{err:?}"
    );
}

#[test]
fn configuration_errors() {
    let err = OpenAiClient::compatible("http://127.0.0.1:1/v1")
        .api_key_from_env("AGENT_PROVIDER_TEST_UNSET_VARIABLE")
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::MissingApiKey { .. }), "{err}");
    let err = OpenAiClient::compatible("localhost:8000")
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::InvalidUrl { .. }), "{err}");
    let client = OpenAiClient::compatible("http://127.0.0.1:8000/v1")
        .build()
        .unwrap();
    assert_eq!(client.base_url(), "http://127.0.0.1:8000/v1");
    assert!(client.pricing().models().next().is_none());
    // OpenAI's own defaults, whatever OPENAI_BASE_URL says in this environment.
    let openai = OpenAiClient::builder()
        .base_url(OPENAI_BASE_URL)
        .api_key("k")
        .build()
        .unwrap();
    assert_eq!(openai.base_url(), OPENAI_BASE_URL);
    assert!(openai.pricing().get("gpt-4o").is_some());
}

#[tokio::test]
async fn max_cost_bounds_a_call_from_prices_and_max_tokens() {
    let client = OpenAiClient::compatible("http://127.0.0.1:1/v1")
        .pricing(Pricing::openai())
        .build()
        .unwrap();
    let prompt = Prompt::new().user("0123456789").max_tokens(1000);
    // ≤ 83 (the prompt as JSON) + 24 input tokens at $2.50/M (268 µ$) and ≤ 1000 output
    // tokens at $10/M (10 000 µ$).
    assert_eq!(
        serde_json::to_string(&prompt).unwrap().len(),
        83,
        "the prompt as JSON"
    );
    assert_eq!(client.max_cost("gpt-4o", &prompt), Some(MicroUsd(10_268)));
    assert_eq!(client.max_cost("local-model", &prompt), None);
    assert_eq!(
        client.max_cost("gpt-4o", &Prompt::new().user("x")),
        None,
        "no max_tokens: unbounded"
    );
}

/// Where `needle` first occurs in the request body's text.
fn position(body: &[u8], needle: &str) -> usize {
    let text = std::str::from_utf8(body).expect("UTF-8 body");
    text.find(needle)
        .unwrap_or_else(|| panic!("`{needle}` not in {text}"))
}

#[tokio::test]
async fn a_message_that_only_calls_tools_is_sent_with_empty_content() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "5"}),
            "stop",
            json!({}),
        ),
    ))
    .await;
    let prompt = Prompt::from_messages(vec![
        Message::user("2+3?"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_a".into(),
                name: "add".into(),
                arguments: json!({"a": 2, "b": 3}),
            }],
        },
        Message::tool_result("call_a", "5"),
    ]);
    client(&server).chat("m", &prompt).await.unwrap();
    let body = server.only_request().json();
    // `null` breaks chat templates that read `content` as text (llama.cpp's server answers
    // 500); `""` is accepted everywhere.
    assert_eq!(body["messages"][1]["content"], json!(""));
    assert_eq!(body["messages"][1]["tool_calls"][0]["id"], json!("call_a"));
}

#[tokio::test]
async fn schemas_keep_their_key_order_on_the_wire() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "{}"}),
            "stop",
            json!({}),
        ),
    ))
    .await;
    // Written reasoning first: a model fills the fields in the order the schema gives them.
    let schema = json!({
        "type": "object",
        "properties": {"reasoning": {"type": "string"}, "answer": {"type": "integer"}},
        "required": ["reasoning", "answer"],
    });
    let prompt = Prompt::new()
        .user("2+3?")
        .tools(vec![ToolDefinition {
            name: "submit".into(),
            description: "Submits".into(),
            parameters: json!({"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}}),
        }])
        .response_format(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema,
            strict: true,
        });
    client(&server).chat("m", &prompt).await.unwrap();
    let body = server.only_request().body;
    assert!(position(&body, "\"zeta\"") < position(&body, "\"alpha\""));
    let format = position(&body, "\"response_format\"");
    let text = &body[format..];
    assert!(position(text, "\"reasoning\"") < position(text, "\"answer\":{"));
    assert!(
        position(text, "\"properties\"") < position(text, "\"required\""),
        "the schema's own keys keep their order too"
    );
}

#[tokio::test]
async fn a_tool_without_parameters_is_sent_an_empty_object_schema() {
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "ok"}),
            "stop",
            json!({}),
        ),
    ))
    .await;
    let prompt = Prompt::new().user("time?").tools(vec![ToolDefinition {
        name: "now".into(),
        description: "The time".into(),
        parameters: Value::Null,
    }]);
    client(&server).chat("m", &prompt).await.unwrap();
    assert_eq!(
        server.only_request().json()["tools"][0]["function"]["parameters"],
        json!({"type": "object", "properties": {}})
    );
}

#[tokio::test]
async fn tool_calls_finish_with_tool_calls_whatever_the_server_says() {
    let call =
        json!({"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}});
    for (said, expected) in [
        ("stop", FinishReason::ToolCalls),
        ("tool_calls", FinishReason::ToolCalls),
        ("length", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
    ] {
        // Plain.
        let server = TestServer::always(Reply::json(
            200,
            &completion(
                json!({"role": "assistant", "content": null, "tool_calls": [call]}),
                said,
                json!({}),
            ),
        ))
        .await;
        let reply = client(&server)
            .chat("m", &Prompt::new().user("time?"))
            .await
            .unwrap();
        assert_eq!(reply.finish_reason, expected, "plain, {said}");

        // Streamed.
        let body = sse_events(&[
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "now", "arguments": ""}}]}),
                json!(null),
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                json!(null),
            ),
            chunk(json!({}), json!(said)),
        ]);
        let server = TestServer::always(Reply::sse(pieces(&body, 40))).await;
        let reply = client(&server)
            .chat_stream("m", &Prompt::new().user("time?"), &mut |_| {})
            .await
            .unwrap();
        assert_eq!(reply.finish_reason, expected, "streamed, {said}");
        assert_eq!(reply.tool_calls[0].name, "now");
    }
    // Without tool calls, the reason said stands.
    let server = TestServer::always(Reply::json(
        200,
        &completion(
            json!({"role": "assistant", "content": "x"}),
            "length",
            json!({}),
        ),
    ))
    .await;
    let reply = client(&server)
        .chat("m", &Prompt::new().user("x"))
        .await
        .unwrap();
    assert_eq!(reply.finish_reason, FinishReason::Length);
}
