//! The OpenAI-compatible client against real servers: llama-cpp-python's server and the
//! LiteLLM proxy in front of it, serving a tiny random-weight model.
//!
//! Run with `cargo xtask interop`, which installs and starts both servers on 127.0.0.1 and
//! passes their addresses in `EFFECT_AGENTS_INTEROP_*` variables. The tests are ignored by a
//! plain `cargo test`. The model's words are noise: what is checked is the wire format, both
//! ways, on the plain and the streaming code paths. Grammar-constrained sampling (forced tool
//! calls, JSON schemas) makes the model's JSON well-formed whatever its weights.

use std::time::Duration;

use agent_op::{
    Delta, FinishReason, Message, Prompt, Provider, ProviderError, ResponseFormat, ToolChoice,
    ToolDefinition,
};
use agent_provider::OpenAiClient;
use agent_provider::openai::StructuredOutput;
use serde_json::{Value, json};

const MODEL: &str = "tiny";

/// One server under test.
struct Server {
    name: &'static str,
    base_url: String,
    key: Option<String>,
}

impl Server {
    fn client(
        &self,
        configure: impl FnOnce(
            agent_provider::openai::OpenAiBuilder,
        ) -> agent_provider::openai::OpenAiBuilder,
    ) -> OpenAiClient {
        let mut builder = OpenAiClient::compatible(&self.base_url)
            .request_timeout(Duration::from_secs(120))
            // llama-cpp-python answers the OpenAI form of a JSON schema with an error.
            .structured_output(StructuredOutput::JsonObjectWithSchema);
        if let Some(key) = &self.key {
            builder = builder.api_key(key);
        }
        configure(builder).build().expect("a valid client")
    }

    fn plain(&self) -> OpenAiClient {
        self.client(|b| b)
    }
}

/// The servers `cargo xtask interop` started.
fn servers() -> Vec<Server> {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: these tests need real servers; run `cargo xtask interop`")
        })
    };
    vec![
        Server {
            name: "llama-cpp-python",
            base_url: var("EFFECT_AGENTS_INTEROP_LLAMA_URL"),
            key: None,
        },
        Server {
            name: "LiteLLM",
            base_url: var("EFFECT_AGENTS_INTEROP_LITELLM_URL"),
            key: Some(var("EFFECT_AGENTS_INTEROP_LITELLM_KEY")),
        },
    ]
}

/// Calls `client` plainly or streaming; a streamed reply's text deltas must add up to its
/// content.
async fn call(
    client: &OpenAiClient,
    prompt: &Prompt,
    stream: bool,
) -> Result<agent_op::Response, ProviderError> {
    if !stream {
        return client.chat(MODEL, prompt).await;
    }
    let mut text = String::new();
    let mut on_delta = |delta: Delta| {
        if let Delta::Text(piece) = delta {
            text.push_str(&piece);
        }
    };
    let response = client.chat_stream(MODEL, prompt, &mut on_delta).await?;
    assert_eq!(text, response.content, "the deltas add up to the reply");
    Ok(response)
}

fn add_tool() -> ToolDefinition {
    ToolDefinition {
        name: "add".into(),
        description: "Adds one to a number".into(),
        parameters: json!({
            "type": "object",
            "properties": {"big": {"type": "boolean"}},
            "required": ["big"],
        }),
    }
}

#[tokio::test]
#[ignore = "needs real servers: run `cargo xtask interop`"]
async fn replies_plain_and_streamed() {
    for server in servers() {
        let client = server.plain();
        for stream in [false, true] {
            let prompt = Prompt::new()
                .system("Be brief.")
                .user("Hello?")
                .max_tokens(8);
            let reply = call(&client, &prompt, stream)
                .await
                .unwrap_or_else(|e| panic!("{} (stream {stream}): {e}", server.name));
            assert!(
                matches!(
                    reply.finish_reason,
                    FinishReason::Stop | FinishReason::Length
                ),
                "{}: {:?}",
                server.name,
                reply.finish_reason
            );
            assert!(reply.tool_calls.is_empty());
            if !stream {
                assert!(
                    reply.usage.input_tokens > 0,
                    "{}: {:?}",
                    server.name,
                    reply.usage
                );
                // Not bounded by max_tokens: llama-cpp-python also counts the byte tokens of
                // a character it cut short.
                assert!(reply.usage.output_tokens > 0, "{:?}", reply.usage);
            }
        }
    }
}

/// A forced tool call comes back as a tool call (plain and streamed: LiteLLM repeats the
/// name and id in every chunk), and the turn after it, which sends the assistant's tool-call
/// message back, is accepted. That second turn is what `"content": null` broke (500).
#[tokio::test]
#[ignore = "needs real servers: run `cargo xtask interop`"]
async fn a_tool_loop_runs_two_turns() {
    for server in servers() {
        let client = server.plain();
        for stream in [false, true] {
            let mut prompt = Prompt::new()
                .user("Add one to a big number.")
                .tools(vec![add_tool()])
                .max_tokens(48);
            prompt.options.tool_choice = Some(ToolChoice::Tool("add".into()));
            let first = call(&client, &prompt, stream)
                .await
                .unwrap_or_else(|e| panic!("{} (stream {stream}): {e}", server.name));
            assert_eq!(
                first.finish_reason,
                FinishReason::ToolCalls,
                "{}",
                server.name
            );
            assert_eq!(first.tool_calls.len(), 1, "{}: {first:?}", server.name);
            let tool_call = &first.tool_calls[0];
            assert_eq!(tool_call.name, "add");
            assert!(
                tool_call.arguments["big"].is_boolean(),
                "{}: {:?}",
                server.name,
                tool_call.arguments
            );
            assert!(first.content.is_empty(), "{first:?}");

            let mut next = prompt.clone();
            next.options.tool_choice = None;
            next.options.max_tokens = Some(8);
            next.messages.push(first.to_message());
            next.messages.push(Message::tool_result(
                tool_call.id.clone(),
                "{\"result\": 43}",
            ));
            call(&client, &next, stream).await.unwrap_or_else(|e| {
                panic!(
                    "{} (stream {stream}): the turn after a tool call: {e}",
                    server.name
                )
            });
        }
    }
}

/// Both servers refuse an assistant message whose content is null, which is why the client
/// sends `""`: this is what makes the test above able to fail.
#[tokio::test]
#[ignore = "needs real servers: run `cargo xtask interop`"]
async fn the_servers_refuse_null_content() {
    let http = reqwest::Client::new();
    for server in servers() {
        let body = json!({
            "model": MODEL,
            "max_tokens": 4,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "2"},
            ],
        });
        let mut request = http
            .post(format!("{}/chat/completions", server.base_url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .timeout(Duration::from_secs(60));
        if let Some(key) = &server.key {
            request = request.bearer_auth(key);
        }
        let status = request.send().await.expect("the server answers").status();
        assert_eq!(status.as_u16(), 500, "{}", server.name);
    }
}

/// Structured output comes back in the order the schema was written, both ways round: the
/// schema reaches the server's grammar with its keys in order (they were sorted).
#[tokio::test]
#[ignore = "needs real servers: run `cargo xtask interop`"]
async fn structured_output_follows_the_schema_as_written() {
    for server in servers() {
        let client = server.plain();
        for (first, second) in [("reasoning", "answer"), ("answer", "reasoning")] {
            let mut properties = serde_json::Map::new();
            for key in [first, second] {
                let schema = if key == "answer" {
                    json!({"type": "integer"})
                } else {
                    // Not a free string: the servers' grammar lets control characters into
                    // strings, which no JSON parser accepts.
                    json!({"type": "string", "enum": ["sum", "guess"]})
                };
                properties.insert(key.to_owned(), schema);
            }
            for stream in [false, true] {
                let prompt = Prompt::new()
                    .user("What is 2 + 3?")
                    .max_tokens(64)
                    .response_format(ResponseFormat::JsonSchema {
                        name: "answer".into(),
                        schema: json!({
                            "type": "object",
                            "properties": properties,
                            "required": [first, second],
                        }),
                        strict: true,
                    });
                let reply = call(&client, &prompt, stream)
                    .await
                    .unwrap_or_else(|e| panic!("{} (stream {stream}): {e}", server.name));
                let value: Value = serde_json::from_str(&reply.content).unwrap_or_else(|e| {
                    panic!(
                        "{}: {e}: {:?} ({:?})",
                        server.name, reply.content, reply.finish_reason
                    )
                });
                assert!(value["answer"].is_number(), "{value}");
                assert!(value["reasoning"].is_string(), "{value}");
                let at = |key: &str| reply.content.find(&format!("\"{key}\"")).unwrap();
                assert!(
                    at(first) < at(second),
                    "{}: `{first}` should come first: {}",
                    server.name,
                    reply.content
                );
            }
        }
    }
}

/// More than four stop sequences are refused before sending (OpenAI's limit); a client told
/// the server takes more sends them, and the server accepts them.
#[tokio::test]
#[ignore = "needs real servers: run `cargo xtask interop`"]
async fn stop_sequences_past_the_limit() {
    for server in servers() {
        let mut prompt = Prompt::new().user("Count.").max_tokens(4);
        prompt.options.stop = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let refused = server.plain().chat(MODEL, &prompt).await.unwrap_err();
        assert!(
            matches!(refused, ProviderError::InvalidRequest { .. }),
            "{refused:?}"
        );
        let lifted = server.client(|b| b.max_stop_sequences(None));
        lifted
            .chat(MODEL, &prompt)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", server.name));
    }
}
