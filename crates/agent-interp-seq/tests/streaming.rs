//! Streaming through the interpreter: subscribers that ask for deltas get the model's reply
//! piece by piece, from a real streaming client; nothing of it is stored in the trace.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_interp_seq::{Config, Subscriber, run};
use agent_op::{
    BoxFuture, Delta, Event, EventType, Op, Prompt, Provider, ProviderError, Response, TraceId, op,
};
use agent_provider::OpenAiClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Collects every delta it is given.
#[derive(Clone, Default)]
struct Deltas(Arc<Mutex<Vec<(TraceId, Delta)>>>);

impl Subscriber for Deltas {
    fn on_event(&self, _trace_id: &TraceId, _event: &Event) {}

    fn wants_deltas(&self) -> bool {
        true
    }

    fn on_delta(&self, trace_id: &TraceId, delta: &Delta) {
        self.0
            .lock()
            .unwrap()
            .push((trace_id.clone(), delta.clone()));
    }
}

/// Serves one chat-completions request on 127.0.0.1 with an SSE stream of `pieces`, a pause
/// between each, then the usage chunk and `[DONE]`.
async fn sse_server(pieces: &'static [&'static str]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // Read the headers and the body (Content-Length) before answering.
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request);
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    assert!(
                        text.contains("\"stream\":true"),
                        "a streaming request: {text}"
                    );
                    break;
                }
            }
        }
        socket
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        for piece in pieces {
            let chunk = serde_json::json!({
                "id": "c1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]
            });
            socket
                .write_all(format!("data: {chunk}\n\n").as_bytes())
                .await
                .unwrap();
            socket.flush().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let stop = serde_json::json!({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let usage = serde_json::json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}});
        socket
            .write_all(format!("data: {stop}\n\ndata: {usage}\n\ndata: [DONE]\n\n").as_bytes())
            .await
            .unwrap();
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn a_delta_subscriber_gets_the_reply_as_it_streams_from_a_real_client() {
    let base = sse_server(&["Hel", "lo, ", "world"]).await;
    let client = OpenAiClient::compatible(base).build().unwrap();
    let deltas = Deltas::default();
    let config = Config::new()
        .provider(client)
        .subscribe(deltas.clone())
        .trace_id("calm-owl-0020");
    let program: Op<(), String> =
        op::infer_raw("m", Prompt::new().user("greet")).map(|r| r.content);
    let outcome = run(&config, (), program).await.unwrap();
    assert_eq!(outcome.value, "Hello, world");
    let deltas = deltas.0.lock().unwrap().clone();
    let text: Vec<String> = deltas
        .iter()
        .filter_map(|(_, d)| match d {
            Delta::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(text.concat(), "Hello, world");
    assert!(text.len() >= 2, "the reply arrived in pieces: {text:?}");
    assert!(
        deltas
            .iter()
            .all(|(id, _)| id == &TraceId::from("calm-owl-0020"))
    );
    // Deltas are not stored in the trace; the final InferEnd is.
    let types: Vec<EventType> = outcome
        .trace
        .events
        .iter()
        .map(|e| e.event.event_type())
        .collect();
    assert_eq!(
        types,
        vec![
            EventType::InferStart,
            EventType::InferEnd,
            EventType::RunEnd
        ]
    );
    assert_eq!(outcome.trace.total_tokens().total(), 8);
}

/// Records which call the interpreter used.
#[derive(Clone, Default)]
struct Which(Arc<Mutex<Vec<&'static str>>>);

impl Provider for Which {
    fn chat<'a>(
        &'a self,
        _m: &'a str,
        _p: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        self.0.lock().unwrap().push("chat");
        Box::pin(async { Ok(Response::text("plain")) })
    }

    fn chat_stream<'a>(
        &'a self,
        _m: &'a str,
        p: &'a Prompt,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        self.0.lock().unwrap().push("stream");
        Box::pin(async move {
            let text = p
                .messages
                .last()
                .map(|m| m.content().to_owned())
                .unwrap_or_default();
            on_delta(Delta::Text(text.clone()));
            Ok(Response::text(text))
        })
    }
}

#[tokio::test]
async fn interpreters_stream_only_when_a_subscriber_asks_and_tag_deltas_with_the_branch() {
    let which = Which::default();
    let program =
        || -> Op<(), String> { op::infer_raw("m", Prompt::new().user("x")).map(|r| r.content) };
    run(
        &Config::new()
            .provider(which.clone())
            .subscribe(|_: &TraceId, _: &Event| {}),
        (),
        program(),
    )
    .await
    .unwrap();
    assert_eq!(*which.0.lock().unwrap(), vec!["chat"]);

    let which = Which::default();
    let deltas = Deltas::default();
    let config = Config::new()
        .provider(which.clone())
        .subscribe(deltas.clone())
        .trace_id("calm-owl-0021");
    let ask = |q: &'static str| -> Op<(), String> {
        op::infer_raw("m", Prompt::new().user(q)).map(|r| r.content)
    };
    let outcome = run(&config, (), op::par(vec![ask("left"), ask("right")]))
        .await
        .unwrap();
    assert_eq!(outcome.value, ["left", "right"]);
    assert_eq!(*which.0.lock().unwrap(), vec!["stream", "stream"]);
    let root = TraceId::from("calm-owl-0021");
    assert_eq!(
        *deltas.0.lock().unwrap(),
        vec![
            (root.child(0), Delta::Text("left".into())),
            (root.child(1), Delta::Text("right".into())),
        ]
    );
}
