//! Failures over a real (local) connection: how HTTP errors map to `ProviderError`, what the
//! retry layer does with them, timeouts, broken and oversized bodies, and that the API key
//! never leaks into an error or a `Debug` output.

mod common;

use std::time::{Duration, Instant};

use agent_op::{Prompt, Provider, ProviderError};
use agent_provider::layers::Retry;
use agent_provider::{OllamaClient, OpenAiClient};
use common::{Reply, TestServer};
use serde_json::{Value, json};

const KEY: &str = "sk-proj-THIS-IS-THE-SECRET-KEY-0123456789";

fn client(server: &TestServer) -> OpenAiClient {
    OpenAiClient::compatible(format!("{}/v1", server.url()))
        .api_key(KEY)
        .build()
        .expect("client")
}

fn retrying(server: &TestServer) -> Retry<OpenAiClient> {
    Retry::new(client(server))
        .max_attempts(4)
        .base_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(5))
}

fn ok_completion() -> Reply {
    Reply::json(
        200,
        &json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }),
    )
}

fn openai_error(status: u16, message: &str, kind: &str, code: Value) -> Reply {
    Reply::json(
        status,
        &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}

fn prompt() -> Prompt {
    Prompt::new().user("hi")
}

#[tokio::test]
async fn rate_limited_with_retry_after_then_success() {
    let server = TestServer::sequence(vec![
        openai_error(
            429,
            "Rate limit reached for requests",
            "requests",
            json!("rate_limit_exceeded"),
        )
        .with_header("retry-after", "1"),
        ok_completion(),
    ])
    .await;
    let started = Instant::now();
    let reply = retrying(&server).chat("m", &prompt()).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(reply.content, "ok");
    assert_eq!(server.requests().len(), 2);
    assert!(
        waited >= Duration::from_secs(1),
        "Retry-After: 1 was honoured (waited {waited:?})"
    );

    // Without the retry layer the error says how long to wait.
    let server = TestServer::always(
        openai_error(429, "slow down", "requests", json!("rate_limit_exceeded"))
            .with_header("retry-after-ms", "250"),
    )
    .await;
    let err = client(&server).chat("m", &prompt()).await.unwrap_err();
    assert_eq!(
        err,
        ProviderError::RateLimited {
            status: 429,
            retry_after: Some(Duration::from_millis(250)),
            message: "slow down".into()
        }
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn server_errors_are_retried() {
    let server = TestServer::sequence(vec![
        Reply::text(500, "internal error"),
        Reply::json(503, &json!({"error": {"message": "overloaded"}})),
        ok_completion(),
    ])
    .await;
    let reply = retrying(&server).chat("m", &prompt()).await.unwrap();
    assert_eq!(reply.content, "ok");
    assert_eq!(server.requests().len(), 3);

    // Attempts are bounded: the last error comes back.
    let server = TestServer::always(Reply::text(502, "bad gateway")).await;
    let err = retrying(&server).chat("m", &prompt()).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Http { status: 502, body, headers } if body == "bad gateway" && !headers.is_empty()),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_never_shows_the_key() {
    // Some servers echo the credentials they rejected, in the body and in headers.
    let server = TestServer::always(
        openai_error(
            401,
            &format!("Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com/account/api-keys."),
            "invalid_request_error",
            json!("invalid_api_key"),
        )
        .with_header("x-echo-authorization", &format!("Bearer {KEY}")),
    )
    .await;
    let provider = retrying(&server);
    let err = provider.chat("m", &prompt()).await.unwrap_err();

    assert!(
        matches!(&err, ProviderError::Authentication { status: 401, message } if message.contains("Incorrect API key provided: [redacted]")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1, "a 401 is not retried");
    // The key went over the wire…
    assert_eq!(
        server.only_request().header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    // …and nowhere else.
    for text in [
        format!("{err:?}"),
        err.to_string(),
        format!("{provider:?}"),
        format!("{:?}", client(&server)),
        format!("{:?}", OpenAiClient::compatible("http://x/v1").api_key(KEY)),
    ] {
        assert!(!text.contains(KEY), "the key leaked into: {text}");
        assert!(
            !text.contains("THIS-IS-THE-SECRET"),
            "part of the key leaked into: {text}"
        );
    }

    // A 5xx whose body and headers echo the key: redacted too.
    let server = TestServer::always(
        Reply::text(500, &format!("upstream rejected {KEY}"))
            .with_header("x-debug", &format!("Bearer {KEY}")),
    )
    .await;
    let err = client(&server).chat("m", &prompt()).await.unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("[redacted]") && !text.contains(KEY), "{text}");
}

#[tokio::test]
async fn quota_and_context_errors_are_not_retried() {
    let server = TestServer::always(openai_error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
        json!("insufficient_quota"),
    ))
    .await;
    let err = retrying(&server).chat("m", &prompt()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::QuotaExhausted { status: 429, .. }),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);

    let server = TestServer::always(openai_error(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        "invalid_request_error",
        json!("context_length_exceeded"),
    ))
    .await;
    let err = retrying(&server).chat("m", &prompt()).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::ContextLengthExceeded { message } if message.contains("128000")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let server = TestServer::always(Reply::Hang).await;
    let limit = Duration::from_millis(300);
    let openai = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .request_timeout(limit)
        .build()
        .unwrap();
    let started = Instant::now();
    let err = openai.chat("m", &prompt()).await.unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: limit });
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = openai
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: limit });

    let ollama = OllamaClient::builder()
        .host(server.url())
        .request_timeout(limit)
        .build()
        .unwrap();
    let err = ollama.chat("m", &prompt()).await.unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: limit });
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_stream_that_stalls_times_out() {
    let line = b"{\"message\":{\"content\":\"a\"},\"done\":false}\n".to_vec();
    let server =
        TestServer::always(Reply::ndjson(vec![line.clone(), line]).paced(Duration::from_secs(3)))
            .await;
    let read_limit = Duration::from_millis(300);
    let ollama = OllamaClient::builder()
        .host(server.url())
        .read_timeout(read_limit)
        .build()
        .unwrap();
    let err = ollama
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: read_limit });

    // The request timeout covers the whole stream too.
    let total = Duration::from_millis(600);
    let server = TestServer::always(
        Reply::ndjson(vec![b"{\"done\":false}\n".to_vec(); 10]).paced(Duration::from_millis(100)),
    )
    .await;
    let ollama = OllamaClient::builder()
        .host(server.url())
        .request_timeout(total)
        .build()
        .unwrap();
    let err = ollama
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: total });
}

#[tokio::test]
async fn malformed_json_is_a_decode_error_that_shows_where() {
    let server = TestServer::always(Reply::Full {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop",}]}"#
            .to_vec(),
    })
    .await;
    let err = retrying(&server).chat("m", &prompt()).await.unwrap_err();
    let ProviderError::Decode { message, excerpt } = &err else {
        panic!("expected Decode, got {err:?}");
    };
    assert!(message.starts_with("chat completion:"), "{message}");
    assert!(excerpt.contains(r#""stop",}"#), "{excerpt}");
    assert!(!err.is_retryable());
    assert_eq!(server.requests().len(), 1, "a bad 200 is not retried");

    // A well-formed document of the wrong shape, and one without choices.
    let server = TestServer::sequence(vec![
        Reply::json(200, &json!({"choices": "nope"})),
        Reply::json(200, &json!({"choices": []})),
    ])
    .await;
    let client = client(&server);
    for _ in 0..2 {
        let err = client.chat("m", &prompt()).await.unwrap_err();
        assert!(matches!(err, ProviderError::Decode { .. }), "{err:?}");
    }

    // Ollama's reply, too.
    let server = TestServer::always(Reply::text(200, "{\"message\": {\"content\": }")).await;
    let ollama = OllamaClient::builder().host(server.url()).build().unwrap();
    let err = ollama.chat("m", &prompt()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn a_10_mb_response_is_read_whole_and_a_limit_applies() {
    let unit = "Lorem ipsum dolor sit amet — ünïcødé ✓ 你好. ";
    let content = unit.repeat(10 * 1024 * 1024 / unit.len() + 1);
    assert!(content.len() >= 10 * 1024 * 1024);
    let body = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2_000_000},
    });
    let server = TestServer::always(Reply::json(200, &body)).await;
    let reply = client(&server).chat("m", &prompt()).await.unwrap();
    assert_eq!(reply.content.len(), content.len());
    assert!(reply.content == content);

    let limited = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .max_response_bytes(1024 * 1024)
        .build()
        .unwrap();
    let err = limited.chat("m", &prompt()).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Decode { message, .. } if message.contains("limit of 1048576 bytes")),
        "{err:?}"
    );

    // The limit also bounds a stream.
    let line = format!(
        "{}\n",
        json!({"message": {"content": "x".repeat(1000)}, "done": false})
    );
    let server = TestServer::always(Reply::ndjson(vec![line.into_bytes(); 2000])).await;
    let ollama = OllamaClient::builder()
        .host(server.url())
        .max_response_bytes(100_000)
        .build()
        .unwrap();
    let err = ollama
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn broken_connections_are_transport_errors() {
    // The body is shorter than its Content-Length.
    let server = TestServer::always(Reply::ShortBody {
        status: 200,
        promised: 1000,
        body: br#"{"choices": ["#.to_vec(),
    })
    .await;
    let err = client(&server).chat("m", &prompt()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Transport { .. }), "{err:?}");
    assert!(err.is_retryable());

    // Nobody listens on the port.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = OpenAiClient::compatible(format!("http://127.0.0.1:{port}/v1"))
        .api_key(KEY)
        .build()
        .unwrap();
    let err = client.chat("m", &prompt()).await.unwrap_err();
    assert!(matches!(&err, ProviderError::Transport { .. }), "{err:?}");
    assert!(
        !err.to_string().contains("127.0.0.1"),
        "URLs are left out of transport errors: {err}"
    );
}
