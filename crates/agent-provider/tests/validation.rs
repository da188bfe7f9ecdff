//! Requests an API forbids are not sent: they fail at once with
//! `ProviderError::InvalidRequest`, which no layer retries.

mod common;

use std::time::Duration;

use agent_op::{Prompt, Provider, ProviderError, ResponseFormat, ToolDefinition};
use agent_provider::layers::Retry;
use agent_provider::{OllamaClient, OpenAiClient};
use common::{Reply, TestServer};
use serde_json::json;

fn ok_completion() -> Reply {
    Reply::json(
        200,
        &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
    )
}

fn openai(server: &TestServer) -> OpenAiClient {
    OpenAiClient::compatible(format!("{}/v1", server.url()))
        .build()
        .expect("client")
}

fn ollama(server: &TestServer) -> OllamaClient {
    OllamaClient::builder()
        .host(server.url())
        .build()
        .expect("client")
}

fn stops(n: usize) -> Prompt {
    let mut prompt = Prompt::new().user("count");
    prompt.options.stop = (0..n).map(|i| format!("STOP{i}")).collect();
    prompt
}

#[tokio::test]
async fn more_than_four_stop_sequences_are_not_sent_to_an_openai_api() {
    let server = TestServer::always(ok_completion()).await;
    let retrying = Retry::new(openai(&server)).base_delay(Duration::from_millis(1));
    for stream in [false, true] {
        let result = if stream {
            retrying.chat_stream("m", &stops(5), &mut |_| {}).await
        } else {
            retrying.chat("m", &stops(5)).await
        };
        let err = result.unwrap_err();
        assert!(
            matches!(&err, ProviderError::InvalidRequest { message } if message.contains("at most 4")),
            "{err:?}"
        );
        assert!(!err.is_retryable());
    }
    assert!(server.requests().is_empty(), "nothing was sent");

    // Four are allowed; a server that takes more can be allowed more.
    openai(&server).chat("m", &stops(4)).await.unwrap();
    let unlimited = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .max_stop_sequences(None)
        .build()
        .unwrap();
    unlimited.chat("m", &stops(6)).await.unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].json()["stop"].as_array().map(Vec::len), Some(6));
}

#[tokio::test]
async fn ollama_takes_any_number_of_stop_sequences() {
    let line = json!({"message": {"role": "assistant", "content": "ok"}, "done": true, "done_reason": "stop"});
    let server = TestServer::always(Reply::json(200, &line)).await;
    ollama(&server).chat("m", &stops(6)).await.unwrap();
    let request = server.only_request();
    assert_eq!(
        request.json()["options"]["stop"].as_array().map(Vec::len),
        Some(6)
    );
}

#[tokio::test]
async fn tool_parameters_and_output_schemas_must_be_objects() {
    let server = TestServer::always(ok_completion()).await;
    let bad_tool = Prompt::new().user("x").tools(vec![ToolDefinition {
        name: "lookup".into(),
        description: "Looks up".into(),
        parameters: json!("a string, not a schema"),
    }]);
    let bad_schema = Prompt::new()
        .user("x")
        .response_format(ResponseFormat::JsonSchema {
            name: "out".into(),
            schema: json!(["not", "a", "schema"]),
            strict: true,
        });
    for prompt in [&bad_tool, &bad_schema] {
        for err in [
            openai(&server).chat("m", prompt).await.unwrap_err(),
            ollama(&server).chat("m", prompt).await.unwrap_err(),
        ] {
            assert!(
                matches!(&err, ProviderError::InvalidRequest { .. }),
                "{err:?}"
            );
        }
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}
