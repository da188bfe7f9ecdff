//! The Ollama client against a local server speaking Ollama's documented wire format.

mod common;

use std::time::Duration;

use agent_op::{
    Delta, EmbeddingError, EmbeddingProvider, FinishReason, Message, MicroUsd, Prompt, Provider,
    ProviderError, ResponseFormat, ToolCall, ToolDefinition, Usage,
};
use agent_provider::ollama::{KeepAlive, OllamaTimings};
use agent_provider::{ModelPrice, OllamaClient, Pricing};
use common::{Reply, TestServer, ndjson_lines, pieces};
use serde_json::{Value, json};

fn client(server: &TestServer) -> OllamaClient {
    // Schemeless, as OLLAMA_HOST is usually written.
    OllamaClient::builder()
        .host(server.url().trim_start_matches("http://"))
        .build()
        .expect("client")
}

fn final_line(reason: &str) -> Value {
    json!({
        "model": "llama3.2", "created_at": "2024-07-22T20:33:28.123648Z",
        "message": {"role": "assistant", "content": ""},
        "done": true, "done_reason": reason,
        "total_duration": 885_095_291u64, "load_duration": 3_753_500u64,
        "prompt_eval_count": 122, "prompt_eval_duration": 328_493_000u64,
        "eval_count": 33, "eval_duration": 552_222_000u64,
    })
}

fn content_line(text: &str) -> Value {
    json!({"model": "llama3.2", "created_at": "2024-07-22T20:33:28Z", "message": {"role": "assistant", "content": text}, "done": false})
}

fn expected_timings() -> OllamaTimings {
    OllamaTimings {
        total: Some(Duration::from_nanos(885_095_291)),
        load: Some(Duration::from_nanos(3_753_500)),
        prompt_eval: Some(Duration::from_nanos(328_493_000)),
        eval: Some(Duration::from_nanos(552_222_000)),
    }
}

#[tokio::test]
async fn chat_sends_the_documented_request_and_reads_tool_calls() {
    let mut reply = final_line("stop");
    reply["message"] = json!({"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_current_weather", "arguments": {"format": "celsius", "location": "Paris, FR"}}},
        {"id": "call_xyz", "function": {"index": 1, "name": "get_time", "arguments": {"tz": "CET"}}},
    ]});
    let server = TestServer::always(Reply::json(200, &reply)).await;
    let client = OllamaClient::builder()
        .host(server.url())
        .num_ctx(8192)
        .option("top_k", 20)
        .keep_alive(KeepAlive::For(Duration::from_secs(600)))
        .pricing(Pricing::new().with(
            "llama3.2",
            ModelPrice::per_million(MicroUsd(100_000), MicroUsd(100_000)),
        ))
        .build()
        .unwrap();
    let prompt = Prompt::from_messages(vec![
        Message::system("Be helpful."),
        Message::user("Weather in Paris?"),
        Message::Assistant {
            content: "Checking.".into(),
            tool_calls: vec![ToolCall {
                id: "call_0".into(),
                name: "get_current_weather".into(),
                arguments: json!({"location": "Paris"}),
            }],
        },
        Message::tool_result("call_0", "22C"),
    ])
    .tools(vec![ToolDefinition {
        name: "get_current_weather".into(),
        description: "Get the current weather for a location".into(),
        parameters: json!({"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}),
    }])
    .temperature(0.0)
    .max_tokens(128)
    .seed(101)
    .stop(["user:"])
    .response_format(ResponseFormat::JsonSchema {
        name: "w".into(),
        schema: json!({"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}),
        strict: true,
    });

    let detailed = client.chat_detailed("llama3.2", &prompt).await.unwrap();

    let request = server.only_request();
    assert_eq!(request.path, "/api/chat");
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        request.json(),
        json!({
            "model": "llama3.2",
            "messages": [
                {"role": "system", "content": "Be helpful."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_0", "function": {"name": "get_current_weather", "arguments": {"location": "Paris"}}}
                ]},
                {"role": "tool", "content": "22C", "tool_name": "get_current_weather", "tool_call_id": "call_0"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_current_weather", "description": "Get the current weather for a location",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}],
            "format": {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]},
            "options": {"num_ctx": 8192, "top_k": 20, "temperature": 0.0, "num_predict": 128, "seed": 101, "stop": ["user:"]},
            "stream": false,
            "keep_alive": "600000ms",
        })
    );

    let response = &detailed.response;
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[0].id, "call_0");
    assert_eq!(response.tool_calls[0].name, "get_current_weather");
    assert_eq!(
        response.tool_calls[0].arguments,
        json!({"format": "celsius", "location": "Paris, FR"})
    );
    assert_eq!(response.tool_calls[1].id, "call_xyz");
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: 122,
            output_tokens: 33
        }
    );
    // 155 tokens at $0.10 per million: 15.5 micro-dollars, rounded up.
    assert_eq!(response.cost, Some(MicroUsd(16)));
    assert_eq!(response.model.as_deref(), Some("llama3.2"));
    assert_eq!(detailed.timings, expected_timings());

    // Through the Provider trait, the same reply.
    let plain = client.chat("llama3.2", &prompt).await.unwrap();
    assert_eq!(&plain, response);
}

#[tokio::test]
async fn streamed_chat_assembles_ndjson_with_tool_calls() {
    let mut tool_line = content_line("");
    tool_line["message"]["tool_calls"] = json!([
        {"function": {"index": 0, "name": "search", "arguments": {"q": "Zürich 🏔"}}},
        {"function": {"index": 1, "name": "search", "arguments": {"q": "Genève"}}},
    ]);
    let body = ndjson_lines(&[
        content_line("Let me "),
        content_line("look ünd "),
        content_line("see. "),
        tool_line,
        final_line("stop"),
    ]);
    // 5-byte pieces split lines and UTF-8 characters.
    let server = TestServer::always(Reply::ndjson(pieces(&body, 5))).await;
    let client = client(&server);
    let mut deltas = Vec::new();
    let detailed = client
        .chat_stream_detailed("llama3.2", &Prompt::new().user("find"), &mut |d| {
            deltas.push(d)
        })
        .await
        .unwrap();

    let request = server.only_request();
    assert_eq!(request.header("accept"), Some("application/x-ndjson"));
    assert_eq!(
        request.json(),
        json!({"model": "llama3.2", "messages": [{"role": "user", "content": "find"}], "stream": true})
    );
    let response = detailed.response;
    assert_eq!(response.content, "Let me look ünd see. ");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        response
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.arguments.clone()))
            .collect::<Vec<_>>(),
        [
            ("call_0", json!({"q": "Zürich 🏔"})),
            ("call_1", json!({"q": "Genève"}))
        ]
    );
    assert_eq!(response.usage.total(), 155);
    assert_eq!(response.cost, None, "no prices: cost unknown");
    assert_eq!(detailed.timings, expected_timings());
    assert_eq!(
        deltas,
        [
            Delta::Text("Let me ".into()),
            Delta::Text("look ünd ".into()),
            Delta::Text("see. ".into()),
            Delta::ToolCall {
                index: 0,
                id: Some("call_0".into()),
                name: Some("search".into())
            },
            Delta::ToolCallArguments {
                index: 0,
                fragment: r#"{"q":"Zürich 🏔"}"#.into()
            },
            Delta::ToolCall {
                index: 1,
                id: Some("call_1".into()),
                name: Some("search".into())
            },
            Delta::ToolCallArguments {
                index: 1,
                fragment: r#"{"q":"Genève"}"#.into()
            },
        ]
    );

    // Through the Provider trait.
    let reply = client
        .chat_stream("llama3.2", &Prompt::new().user("find"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(reply.content, "Let me look ünd see. ");
}

#[tokio::test]
async fn a_stream_cut_before_done_is_an_error() {
    let body = ndjson_lines(&[content_line("partial "), content_line("reply")]);
    let server = TestServer::always(Reply::ndjson(vec![body.clone()])).await;
    let mut deltas = Vec::new();
    let err = client(&server)
        .chat_stream("llama3.2", &Prompt::new().user("x"), &mut |d| {
            deltas.push(d)
        })
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Transport { .. }), "{err:?}");
    assert_eq!(deltas.len(), 2, "what arrived was still delivered");

    let server = TestServer::always(Reply::ndjson(pieces(&body, 9)).truncated()).await;
    let err = client(&server)
        .chat_stream("llama3.2", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Transport { .. }), "{err:?}");
}

#[tokio::test]
async fn errors_in_the_stream_and_before_it() {
    let body = ndjson_lines(&[
        content_line("so far"),
        json!({"error": "an error was encountered while running the model: out of memory"}),
    ]);
    let server = TestServer::always(Reply::ndjson(vec![body])).await;
    let err = client(&server)
        .chat_stream("llama3.2", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Refused { message, .. } if message.contains("out of memory")),
        "{err:?}"
    );

    let server = TestServer::always(Reply::json(
        404,
        &json!({"error": "model 'nope' not found"}),
    ))
    .await;
    let err = client(&server)
        .chat("nope", &Prompt::new().user("x"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Refused { retryable: false, message, .. } if message.contains("not found")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn embed_sends_a_batch_and_checks_vectors() {
    let server = TestServer::start(|request, _| {
        let n = request.json()["input"].as_array().map_or(0, Vec::len);
        let embeddings: Vec<Value> = (0..n).map(|i| json!([i as f32, 1.0])).collect();
        Reply::json(
            200,
            &json!({"model": "nomic-embed-text", "embeddings": embeddings, "total_duration": 14_143_917u64, "prompt_eval_count": 8}),
        )
    })
    .await;
    let client = OllamaClient::builder()
        .host(server.url())
        .keep_alive(KeepAlive::Forever)
        .build()
        .unwrap();
    let embedder = client.embedder("nomic-embed-text", 2);
    let texts = vec![
        "why is the sky blue?".to_owned(),
        "why is grass green?".to_owned(),
    ];
    let vectors = embedder.embed_batch(&texts).await.unwrap();
    assert_eq!(vectors, [vec![0.0, 1.0], vec![1.0, 1.0]]);
    let request = server.only_request();
    assert_eq!(request.path, "/api/embed");
    assert_eq!(
        request.json(),
        json!({"model": "nomic-embed-text", "input": texts, "keep_alive": -1})
    );
    assert_eq!(
        embedder.embed_batch(&[]).await.unwrap(),
        Vec::<Vec<f32>>::new()
    );
    assert_eq!(server.requests().len(), 1, "an empty batch sends nothing");

    let err = client
        .embedder("nomic-embed-text", 768)
        .embed("x")
        .await
        .unwrap_err();
    assert_eq!(
        err,
        EmbeddingError::DimensionMismatch {
            expected: 768,
            got: 2
        }
    );
    client
        .embedder("nomic-embed-text", 2)
        .send_dimensions(true)
        .embed("x")
        .await
        .unwrap();
    assert_eq!(server.requests()[2].json()["dimensions"], json!(2));
}

#[tokio::test]
async fn non_finite_embeddings_are_rejected() {
    // JSON has no NaN; a huge number overflows f32 to infinity.
    let server = TestServer::always(Reply::json(200, &json!({"embeddings": [[1.0, 1e300]]}))).await;
    let err = client(&server)
        .embedder("e", 2)
        .embed("x")
        .await
        .unwrap_err();
    assert_eq!(err, EmbeddingError::NonFinite);
}

#[tokio::test]
async fn an_api_key_is_sent_when_configured() {
    let server = TestServer::always(Reply::json(200, &final_line("stop"))).await;
    let client = OllamaClient::builder()
        .host(server.url())
        .api_key("ollama-secret")
        .build()
        .unwrap();
    client.chat("m", &Prompt::new().user("x")).await.unwrap();
    assert_eq!(
        server.only_request().header("authorization"),
        Some("Bearer ollama-secret")
    );
    assert!(!format!("{client:?}").contains("ollama-secret"));
}

#[tokio::test]
async fn null_content_a_last_line_without_newline_and_tiny_keep_alives() {
    // A tool-calling reply with `"content": null`, whose final line has no newline.
    let mut body = ndjson_lines(&[
        json!({"model": "m", "message": {"role": "assistant", "content": null, "tool_calls": [
            {"function": {"name": "f", "arguments": {"x": 1}}}
        ]}, "done": false}),
        final_line("stop"),
    ]);
    assert_eq!(body.pop(), Some(b'\n'));
    let server = TestServer::always(Reply::ndjson(pieces(&body, 11))).await;
    let client = OllamaClient::builder()
        .host(server.url())
        .keep_alive(KeepAlive::For(Duration::from_micros(10)))
        .build()
        .unwrap();
    let reply = client
        .chat_stream("m", &Prompt::new().user("x"), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(reply.content, "");
    assert_eq!(reply.tool_calls[0].arguments, json!({"x": 1}));
    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    // 10 µs is not "0ms", which would unload the model at once.
    assert_eq!(server.only_request().json()["keep_alive"], json!("1ms"));

    // The non-streamed reply, with `"content": null`.
    let mut whole = final_line("stop");
    whole["message"]["content"] = Value::Null;
    let server = TestServer::always(Reply::json(200, &whole)).await;
    let reply = OllamaClient::builder()
        .host(server.url())
        .keep_alive(KeepAlive::For(Duration::from_secs(400 * 365 * 24 * 3600)))
        .build()
        .unwrap()
        .chat("m", &Prompt::new().user("x"))
        .await
        .unwrap();
    assert_eq!(reply.content, "");
    // Longer than Go's time.Duration holds: forever.
    assert_eq!(server.only_request().json()["keep_alive"], json!(-1));
}

#[tokio::test]
async fn a_tool_without_parameters_is_sent_an_empty_object_schema() {
    let server = TestServer::always(Reply::json(200, &final_line("stop"))).await;
    let prompt = Prompt::new().user("time?").tools(vec![ToolDefinition {
        name: "now".into(),
        description: "The time".into(),
        parameters: Value::Null,
    }]);
    client(&server).chat("llama3.2", &prompt).await.unwrap();
    assert_eq!(
        server.only_request().json()["tools"][0]["function"]["parameters"],
        json!({"type": "object", "properties": {}})
    );
}

#[tokio::test]
async fn format_and_tool_schemas_keep_their_key_order() {
    let server = TestServer::always(Reply::json(200, &final_line("stop"))).await;
    let prompt = Prompt::new()
        .user("2+3?")
        .tools(vec![ToolDefinition {
            name: "submit".into(),
            description: "Submits".into(),
            parameters: json!({"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}}),
        }])
        .response_format(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({
                "type": "object",
                "properties": {"reasoning": {"type": "string"}, "answer": {"type": "integer"}},
                "required": ["reasoning", "answer"],
            }),
            strict: false,
        });
    client(&server).chat("llama3.2", &prompt).await.unwrap();
    let text = String::from_utf8(server.only_request().body).unwrap();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` not in {text}"))
    };
    assert!(at("\"zeta\"") < at("\"alpha\""), "{text}");
    assert!(at("\"reasoning\"") < at("\"answer\""), "{text}");
}

#[tokio::test]
async fn tool_calls_finish_with_tool_calls_unless_cut_by_length() {
    for (said, expected) in [
        ("stop", FinishReason::ToolCalls),
        ("length", FinishReason::Length),
        ("unload", FinishReason::ToolCalls),
    ] {
        let mut line = final_line(said);
        line["message"]["tool_calls"] = json!([{"function": {"name": "now", "arguments": {}}}]);
        let server = TestServer::always(Reply::ndjson(vec![ndjson_lines(&[line])])).await;
        let reply = client(&server)
            .chat_stream("llama3.2", &Prompt::new().user("time?"), &mut |_| {})
            .await
            .unwrap();
        assert_eq!(reply.finish_reason, expected, "{said}");
    }
}
