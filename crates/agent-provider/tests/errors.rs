//! Failures over a real (local) connection: how HTTP errors map to `ProviderError`, what the
//! retry layer does with them, timeouts, broken and oversized bodies, and that the API key
//! never leaks into an error or a `Debug` output.

mod common;

use std::time::{Duration, Instant};

use agent_op::{Prompt, Provider, ProviderError};
use agent_provider::layers::Retry;
use agent_provider::{HttpError, OllamaClient, OpenAiClient};
use common::{Reply, TestServer};
use serde_json::{Value, json};

/// The HTTP status of the answer behind `err`, if a server gave one.
fn status(err: &ProviderError) -> Option<u16> {
    HttpError::of(err).map(|answer| answer.status)
}

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
    assert!(
        matches!(&err, ProviderError::RateLimited { retry_after: Some(wait), message, .. }
            if *wait == Duration::from_millis(250) && message == "slow down"),
        "{err:?}"
    );
    assert_eq!(status(&err), Some(429));
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
        matches!(&err, ProviderError::Refused { retryable: true, message, .. } if message == "bad gateway"),
        "{err:?}"
    );
    let answer = HttpError::of(&err).expect("the HTTP answer");
    assert_eq!((answer.status, answer.body.as_str()), (502, "bad gateway"));
    assert!(!answer.headers.is_empty());
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
        matches!(&err, ProviderError::Authentication { message, .. } if message.contains("Incorrect API key provided: [redacted]")),
        "{err:?}"
    );
    assert_eq!(status(&err), Some(401));
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
        matches!(err, ProviderError::QuotaExhausted { .. }),
        "{err:?}"
    );
    assert_eq!(status(&err), Some(429));
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
        matches!(&err, ProviderError::ContextLengthExceeded { message, .. } if message.contains("128000")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 1);
}

/// `fut`, unless it takes more than a minute: then the test fails instead of hanging.
async fn within_a_minute<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("the client's own timeout should have ended the call long before")
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let server = TestServer::always(Reply::Hang).await;
    let limit = Duration::from_millis(300);
    let openai = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .request_timeout(limit)
        .build()
        .unwrap();
    let err = within_a_minute(openai.chat("m", &prompt()))
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: limit });
    let err = within_a_minute(openai.chat_stream("m", &prompt(), &mut |_| {}))
        .await
        .unwrap_err();
    assert_eq!(err, ProviderError::Timeout { after: limit });

    let ollama = OllamaClient::builder()
        .host(server.url())
        .request_timeout(limit)
        .build()
        .unwrap();
    let err = within_a_minute(ollama.chat("m", &prompt()))
        .await
        .unwrap_err();
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
    let ProviderError::Decode {
        message, excerpt, ..
    } = &err
    else {
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

#[tokio::test]
async fn a_key_echoed_before_a_syntax_error_never_leaks() {
    // The body echoes the key, then breaks right after it, at a different offset each time.
    let server = TestServer::start(|_, n| Reply::Full {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: format!(
            "{{\"choices\": [{{\"echo\": \"{}Bearer {KEY}\" ]]]]",
            "x".repeat(n)
        )
        .into_bytes(),
    })
    .await;
    let client = client(&server);
    for pad in 0..140 {
        let err = client.chat("m", &prompt()).await.unwrap_err();
        assert!(matches!(err, ProviderError::Decode { .. }), "{err:?}");
        for text in [err.to_string(), format!("{err:?}")] {
            for i in 0..=KEY.len() - 8 {
                let piece = &KEY[i..i + 8];
                assert!(!text.contains(piece), "pad {pad}: `{piece}` leaked: {text}");
            }
        }
    }
}

#[tokio::test]
async fn redirects_are_not_followed() {
    // Another server, which must never see the request (nor its credentials).
    let elsewhere = TestServer::always(ok_completion()).await;
    let location = format!("{}/v1/chat/completions", elsewhere.url());
    let server =
        TestServer::always(Reply::text(307, "moved").with_header("location", &location)).await;
    let openai = OpenAiClient::compatible(format!("{}/v1", server.url()))
        .api_key(KEY)
        .secret_header("api-key", "azure-style-key-0123456789")
        .build()
        .unwrap();
    let err = retrying(&server).chat("m", &prompt()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Refused {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(status(&err), Some(307));
    assert!(!err.is_retryable());
    openai
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    let ollama = OllamaClient::builder()
        .host(server.url())
        .api_key("ollama-key-0123456789")
        .build()
        .unwrap();
    let err = ollama.chat("m", &prompt()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Refused { .. }), "{err:?}");
    assert_eq!(status(&err), Some(307));
    assert_eq!(server.requests().len(), 3);
    assert!(
        elsewhere.requests().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.requests()
    );
}

#[tokio::test]
async fn ordinary_headers_are_not_redacted_and_retry_after_survives() {
    const CREDENTIAL: &str = "custom-credential-0123456789";
    const NAMED_KEY: &str = "named-api-key-0123456789";
    // The server echoes every header it received, in its body and in its headers.
    let server = TestServer::start(|request, n| {
        if n > 0 {
            return ok_completion();
        }
        let echoed: Vec<String> = request
            .headers
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        let mut reply = Reply::text(503, &format!("overloaded; got {}", echoed.join(" ")))
            .with_header("retry-after", "1");
        for (name, value) in &request.headers {
            reply = reply.with_header(&format!("x-echo-{name}"), value);
        }
        reply
    })
    .await;
    let client = || {
        OpenAiClient::compatible(format!("{}/v1", server.url()))
            .api_key(KEY)
            .header("x-client-version", "1")
            .header("X-Title", "my-agent-application")
            .header("x-api-key", NAMED_KEY)
            .secret_header("x-custom", CREDENTIAL)
            .build()
            .unwrap()
    };
    let err = client().chat("m", &prompt()).await.unwrap_err();
    let Some(HttpError {
        status: 503,
        body,
        headers,
        ..
    }) = HttpError::of(&err)
    else {
        panic!("expected HTTP 503, got {err:?}");
    };
    // Ordinary values are kept, wherever they appear…
    assert!(body.contains("x-client-version=1"), "{body}");
    assert!(body.contains("x-title=my-agent-application"), "{body}");
    assert!(
        headers.contains(&("retry-after".to_owned(), "1".to_owned())),
        "{headers:?}"
    );
    assert!(
        headers.contains(&("x-echo-x-client-version".to_owned(), "1".to_owned())),
        "{headers:?}"
    );
    assert!(
        !body.contains("[redacted]=") && body.contains("x-custom=[redacted]"),
        "{body}"
    );
    // …credentials are not: the key, a header named like a credential, a secret header.
    let text = format!("{err:?}");
    for secret in [KEY, NAMED_KEY, CREDENTIAL] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert!(body.contains("x-api-key=[redacted]"), "{body}");
    let request = &server.requests()[0];
    assert_eq!(request.header("x-client-version"), Some("1"));
    assert_eq!(request.header("x-custom"), Some(CREDENTIAL));
    assert_eq!(request.header("x-api-key"), Some(NAMED_KEY));

    // Retry reads Retry-After as the server sent it (`1`, like the ordinary header's value):
    // one second, not a backoff of milliseconds.
    let server = TestServer::sequence(vec![
        Reply::text(503, "overloaded 1").with_header("retry-after", "1"),
        ok_completion(),
    ])
    .await;
    let retrying = Retry::new(
        OpenAiClient::compatible(format!("{}/v1", server.url()))
            .header("x-client-version", "1")
            .build()
            .unwrap(),
    )
    .base_delay(Duration::from_millis(1))
    .max_delay(Duration::from_millis(5));
    let started = Instant::now();
    let reply = retrying.chat("m", &prompt()).await.unwrap();
    assert_eq!(reply.content, "ok");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1),
        "Retry-After: 1 was honoured (waited {waited:?})"
    );
}

#[tokio::test]
async fn credentials_in_a_base_url_never_show() {
    const PASSWORD: &str = "pa55word-in-the-url";
    let server = TestServer::start(|request, _| {
        // A server that echoes the credentials it rejected.
        let auth = request.header("authorization").unwrap_or_default().to_owned();
        Reply::json(
            401,
            &json!({"error": {"message": format!("bad credentials {auth} ({PASSWORD})"), "code": "invalid_api_key"}}),
        )
        .with_header("x-echo-authorization", &auth)
    })
    .await;
    let port = server.url().rsplit(':').next().unwrap().to_owned();
    let url = format!("http://alice-the-user:{PASSWORD}@127.0.0.1:{port}/v1");
    let builder = OpenAiClient::compatible(url.clone());
    let client = builder.clone().build().unwrap();
    let err = client.chat("m", &prompt()).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::Authentication { .. }),
        "{err:?}"
    );
    assert_eq!(status(&err), Some(401));
    // The credentials went over the wire as Basic authentication…
    let sent = server.only_request();
    assert!(
        sent.header("authorization")
            .is_some_and(|v| v.starts_with("Basic ")),
        "{sent:?}"
    );
    // …and nowhere else.
    let invalid = OpenAiClient::compatible(format!("ftp://alice-the-user:{PASSWORD}@x/"))
        .build()
        .unwrap_err();
    let ollama_builder = OllamaClient::builder().host(url.clone());
    let ollama = ollama_builder.clone().build().unwrap();
    let schemeless =
        OllamaClient::builder().host(format!("alice-the-user:{PASSWORD}@127.0.0.1:{port}"));
    for text in [
        format!("{err:?}"),
        err.to_string(),
        format!("{builder:?}"),
        format!("{client:?}"),
        client.base_url().to_owned(),
        invalid.to_string(),
        format!("{invalid:?}"),
        format!("{ollama_builder:?}"),
        format!("{ollama:?}"),
        ollama.host().to_owned(),
        format!("{schemeless:?}"),
    ] {
        assert!(!text.contains(PASSWORD), "the password leaked into: {text}");
        assert!(
            !text.contains("alice-the-user"),
            "the user leaked into: {text}"
        );
    }
    assert_eq!(
        client.base_url(),
        format!("http://[redacted]@127.0.0.1:{port}/v1")
    );
}

#[tokio::test]
async fn errors_inside_streams_are_retryable_server_errors() {
    // OpenAI's mid-stream failure: an error object without a status.
    let failing = format!(
        "data: {}\n\ndata: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
        json!({"error": {"message": "The server had an error while processing your request. Sorry about that!", "type": "server_error", "param": null, "code": null}}),
    );
    let good = common::sse_events(&[
        json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}),
    ]);
    let server = TestServer::sequence(vec![
        Reply::sse(vec![failing.clone().into_bytes()]),
        Reply::sse(vec![good]),
    ])
    .await;
    let err = client(&server)
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::Refused { retryable: true, message, .. } if message.contains("server had an error")),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(!err.to_string().contains("HTTP 200"), "{err}");
    // The retry layer sends it again.
    let server = TestServer::sequence(vec![
        Reply::sse(vec![failing.into_bytes()]),
        Reply::sse(vec![common::sse_events(&[
            json!({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}),
        ])]),
    ])
    .await;
    let mut deltas = Vec::new();
    let reply = retrying(&server)
        .chat_stream("m", &prompt(), &mut |d| deltas.push(d))
        .await
        .unwrap();
    assert_eq!(reply.content, "ok");
    assert_eq!(server.requests().len(), 2);

    // Ollama's: an `{"error": "…"}` line.
    let failing = common::ndjson_lines(&[
        json!({"error": "an error was encountered while running the model: unexpected EOF"}),
    ]);
    let good = common::ndjson_lines(&[
        json!({"message": {"role": "assistant", "content": "ok"}, "done": true, "done_reason": "stop"}),
    ]);
    let server = TestServer::sequence(vec![
        Reply::ndjson(vec![failing]),
        Reply::ndjson(vec![good]),
    ])
    .await;
    let ollama = OllamaClient::builder().host(server.url()).build().unwrap();
    let err = ollama
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProviderError::Refused {
                retryable: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let reply = Retry::new(ollama)
        .base_delay(Duration::from_millis(1))
        .chat_stream("m", &prompt(), &mut |_| {})
        .await;
    assert_eq!(reply.unwrap().content, "ok");

    // Classified by what they say: a rate limit inside an Ollama stream, a quota error.
    let server = TestServer::always(Reply::ndjson(vec![common::ndjson_lines(&[
        json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
    ])]))
    .await;
    let err = OllamaClient::builder()
        .host(server.url())
        .build()
        .unwrap()
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::RateLimited { .. }), "{err:?}");
    let server = TestServer::always(Reply::sse(vec![
        format!(
            "data: {}\n\n",
            json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}})
        )
        .into_bytes(),
    ]))
    .await;
    let err = client(&server)
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::QuotaExhausted { .. }),
        "{err:?}"
    );
}

/// A login page, as a captive portal or an authenticating proxy answers any request.
fn login_page() -> Reply {
    Reply::Full {
        status: 200,
        headers: vec![("content-type".into(), "text/html; charset=utf-8".into())],
        body: b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Please sign in to continue</body></html>".to_vec(),
    }
}

#[tokio::test]
async fn a_page_answering_a_stream_is_a_decode_error_not_a_cut_stream() {
    for client in ["openai", "ollama"] {
        let server = TestServer::always(login_page()).await;
        let provider: Box<dyn Provider> = match client {
            "openai" => Box::new(retrying(&server)),
            _ => Box::new(
                Retry::new(OllamaClient::builder().host(server.url()).build().unwrap())
                    .base_delay(Duration::from_millis(1)),
            ),
        };
        let err = provider
            .chat_stream("m", &prompt(), &mut |_| {})
            .await
            .unwrap_err();
        let ProviderError::Decode {
            message, excerpt, ..
        } = &err
        else {
            panic!("{client}: expected Decode, got {err:?}");
        };
        assert!(message.contains("`text/html`"), "{client}: {message}");
        assert!(excerpt.contains("Please sign in"), "{client}: {excerpt}");
        assert!(!err.is_retryable());
        assert_eq!(server.requests().len(), 1, "{client}: not retried");
    }
}

#[tokio::test]
async fn streams_without_a_content_type_are_still_read() {
    let sse = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let server = TestServer::always(Reply::Full {
        status: 200,
        headers: Vec::new(),
        body: sse.to_vec(),
    })
    .await;
    let reply = client(&server)
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(reply.content, "hi");

    let line = b"{\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},\"done\":true,\"done_reason\":\"stop\"}\n";
    let server = TestServer::always(Reply::Full {
        status: 200,
        headers: Vec::new(),
        body: line.to_vec(),
    })
    .await;
    let ollama = OllamaClient::builder().host(server.url()).build().unwrap();
    let reply = ollama
        .chat_stream("m", &prompt(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(reply.content, "hi");
}
