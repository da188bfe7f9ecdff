//! Benchmarks of the server's streams, on 127.0.0.1:
//!
//! - `serve.sse_idle_stream_kib`: memory per idle event stream, 1,000 streams following one
//!   run (KiB of resident memory per stream, client and server both in this process);
//!   baseline: 1,000 idle HTTP requests held open on a plain axum route in the same process
//!   (what any HTTP stream costs);
//! - `serve.sse_delivery_p99`: ms from a trace event's time to its arrival on each of the
//!   1,000 streams (p99); baseline: the same with one stream. The clients of both rows are
//!   plain HTTP/1.1 on raw sockets (see `open_raw`).
//! - `serve.chat_ttft` / `serve.chat_tokens_per_s`: time to first token and tokens per
//!   second of `/v1/chat/completions` with `stream: true`, the agent's model an
//!   OpenAI-compatible server streaming 200 tokens 2 ms apart after a 20 ms first token;
//!   baseline: the same request sent to the model server directly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_engine::Config;
use agent_op::{Prompt, Response, op};
use agent_provider::ScriptedProvider;
use agent_serve::{FnAgent, InvalidInput, Server, message_of};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const STREAMS: usize = 1_000;
const TOKENS: usize = 200;
const TOKEN_GAP: Duration = Duration::from_millis(2);
/// The model server's time to its first token (hosted models take 200 ms and more; this
/// keeps the server's own added time visible in the ratio).
const FIRST_TOKEN: Duration = Duration::from_millis(20);

fn main() {
    let sse = bench_kit::enabled("serve.sse_idle_stream_kib")
        || bench_kit::enabled("serve.sse_delivery_p99");
    let chat =
        bench_kit::enabled("serve.chat_ttft") || bench_kit::enabled("serve.chat_tokens_per_s");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if sse {
        rt.block_on(streams());
    }
    if chat {
        rt.block_on(chat_stream());
    }
}

/// An agent whose model takes `latency` to answer.
fn slow(latency: Duration) -> FnAgent {
    let provider =
        ScriptedProvider::from_fn(|_, _: &Prompt| Ok(Response::text("done"))).with_latency(latency);
    FnAgent::new(Config::new().provider(provider), |request| {
        let (message, _) =
            message_of(request.input).ok_or_else(|| InvalidInput("a message".into()))?;
        Ok(op::infer_raw("m", Prompt::new().user(message)).map(|r| Value::String(r.content)))
    })
}

async fn serve(server: Server) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(server.serve(listener, std::future::pending(), Duration::from_secs(1)));
    base
}

/// A plain HTTP/1.1 client on a raw socket: `GET path`, read until the response's headers
/// are in. The streams are followed with these rather than with reqwest's client, whose
/// per-connection tasks, channels and decoding cost (1,000 of them sharing the two cores
/// with the server they measure) more than the server's own delivery: what is measured is
/// the server, with the cheapest client that speaks HTTP.
async fn open_raw(addr: SocketAddr, path: &str) -> (TcpStream, Vec<u8>) {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    socket.set_nodelay(true).expect("nodelay");
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n");
    socket.write_all(request.as_bytes()).await.expect("request");
    let mut received = Vec::with_capacity(1024);
    while find(&received, b"\r\n\r\n").is_none() {
        let mut chunk = [0u8; 1024];
        let n = socket.read(&mut chunk).await.expect("response");
        assert!(n > 0, "the server closed the stream before its headers");
        received.extend_from_slice(&chunk[..n]);
    }
    assert!(received.starts_with(b"HTTP/1.1 200"), "not a 200");
    (socket, received)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Opens `n` event streams of run `id` and waits until each has its headers; then returns
/// the time each receives the run's `infer_end`, minus that event's own time (ms).
async fn follow(
    addr: SocketAddr,
    id: &str,
    n: usize,
    opened: Arc<tokio::sync::Barrier>,
) -> Vec<tokio::task::JoinHandle<f64>> {
    const MARKER: &[u8] = br#"{"event":"infer_end""#;
    const AT: &[u8] = br#""at":""#;
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let path = format!("/runs/{id}/stream?stream_mode=events");
        let opened = opened.clone();
        tasks.push(tokio::spawn(async move {
            let (mut socket, mut received) = open_raw(addr, &path).await;
            opened.wait().await;
            let mut chunk = [0u8; 4096];
            loop {
                // Only the awaited event's time is read: a thousand clients share the cores
                // with the server they measure.
                if let Some(start) = find(&received, MARKER) {
                    let event = &received[start..];
                    if let Some(at) = find(event, AT) {
                        let value = &event[at + AT.len()..];
                        if let Some(end) = value.iter().position(|b| *b == b'"') {
                            let now = chrono::Utc::now();
                            let at = std::str::from_utf8(&value[..end]).expect("utf-8");
                            let at = chrono::DateTime::parse_from_rfc3339(at).expect("event time");
                            return (now - at.with_timezone(&chrono::Utc))
                                .num_microseconds()
                                .unwrap_or(0) as f64
                                / 1000.0;
                        }
                    }
                } else if received.len() > 256 {
                    // Nothing awaited in what came: keep only a tail the marker could
                    // start in.
                    received.drain(..received.len() - MARKER.len());
                }
                let n = socket.read(&mut chunk).await.expect("stream");
                if n == 0 {
                    return f64::NAN;
                }
                received.extend_from_slice(&chunk[..n]);
            }
        }));
    }
    tasks
}

async fn streams() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::builder()
        .agent("slow", slow(Duration::from_secs(4)))
        .store(dir.path().join("streams.db"))
        .build()
        .await
        .expect("server");
    let base = serve(server).await;
    let addr: SocketAddr = base.trim_start_matches("http://").parse().expect("address");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let start = |client: reqwest::Client, base: String| async move {
        let run: Value = client
            .post(format!("{base}/runs"))
            .json(&json!({"assistant_id": "slow", "input": "wait"}))
            .send()
            .await
            .expect("run")
            .json()
            .await
            .expect("json");
        run["run_id"].as_str().expect("run id").to_owned()
    };

    // One stream: the delivery baseline.
    let id = start(client.clone(), base.clone()).await;
    let one = follow(addr, &id, 1, Arc::new(tokio::sync::Barrier::new(1))).await;
    let mut alone = Vec::new();
    for task in one {
        alone.push(task.await.expect("stream"));
    }

    // A thousand.
    let id = start(client.clone(), base.clone()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = bench_kit::rss_bytes().unwrap_or(0);
    let opened = Arc::new(tokio::sync::Barrier::new(STREAMS + 1));
    let tasks = follow(addr, &id, STREAMS, opened.clone()).await;
    opened.wait().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = bench_kit::rss_bytes().unwrap_or(0);
    let mut delays = Vec::new();
    for task in tasks {
        delays.push(task.await.expect("stream"));
    }
    let per_stream_kib = after.saturating_sub(before) as f64 / STREAMS as f64 / 1024.0;

    // Baseline: as many plain HTTP requests held open, on a route that answers with a body
    // that never ends.
    let app = axum::Router::new().route(
        "/hold",
        axum::routing::get(|| async {
            let body = futures_util::stream::pending::<Result<Vec<u8>, std::io::Error>>();
            axum::body::Body::from_stream(body)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let hold = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let plain_before = bench_kit::rss_bytes().unwrap_or(0);
    let mut held = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        held.push(open_raw(hold, "/hold").await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let plain_after = bench_kit::rss_bytes().unwrap_or(0);
    let plain_kib = plain_after.saturating_sub(plain_before) as f64 / STREAMS as f64 / 1024.0;
    drop(held);

    bench_kit::report(
        "serve.sse_idle_stream_kib",
        per_stream_kib,
        "KiB",
        plain_kib,
    );
    let delays: Vec<f64> = delays.into_iter().filter(|d| d.is_finite()).collect();
    assert_eq!(delays.len(), STREAMS, "every stream got the event");
    let p99 = bench_kit::stats(&delays).p99;
    let alone = bench_kit::stats(&alone).median;
    bench_kit::report("serve.sse_delivery_p99", p99, "ms", alone);
}

/// An OpenAI-compatible model server streaming `TOKENS` tokens `TOKEN_GAP` apart.
async fn model_server() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            let chunks = futures_util::stream::unfold(0usize, |i| async move {
                if i > TOKENS + 1 {
                    return None;
                }
                tokio::time::sleep(if i == 0 { FIRST_TOKEN } else { TOKEN_GAP }).await;
                let line = if i < TOKENS {
                    let chunk = json!({"id": "m", "object": "chat.completion.chunk", "created": 1, "model": "m",
                        "choices": [{"index": 0, "delta": {"content": format!("t{i} ")}, "finish_reason": null}]});
                    format!("data: {chunk}\n\n")
                } else if i == TOKENS {
                    let chunk = json!({"id": "m", "object": "chat.completion.chunk", "created": 1, "model": "m",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": TOKENS, "total_tokens": TOKENS + 5}});
                    format!("data: {chunk}\n\n")
                } else {
                    "data: [DONE]\n\n".to_owned()
                };
                Some((Ok::<_, std::io::Error>(line.into_bytes()), i + 1))
            });
            (
                [("content-type", "text/event-stream")],
                axum::body::Body::from_stream(chunks),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/v1", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Time to the first content token and tokens per second after it, of a streamed chat
/// completion at `url`.
async fn measure(client: &reqwest::Client, url: &str, model: &str) -> (f64, f64) {
    let start = Instant::now();
    let response = client
        .post(url)
        .json(&json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "go"}]}))
        .send()
        .await
        .expect("chat");
    let mut body = response.bytes_stream();
    let mut pending = String::new();
    let (mut first, mut tokens) = (None, 0usize);
    while let Some(Ok(chunk)) = body.next().await {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let block: String = pending.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let Ok(data) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if data["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| t.starts_with('t'))
            {
                tokens += 1;
                first.get_or_insert_with(|| start.elapsed());
            }
        }
    }
    let first = first.expect("a token");
    let rest = start.elapsed().saturating_sub(first);
    assert_eq!(tokens, TOKENS);
    (
        bench_kit::ms(first),
        (tokens - 1) as f64 / rest.as_secs_f64(),
    )
}

async fn chat_stream() {
    let model = model_server().await;
    let provider = agent_provider::OpenAiClient::builder()
        .base_url(model.clone())
        .no_api_key()
        .build()
        .expect("provider");
    let agent = FnAgent::new(Config::new().provider(provider), |request| {
        let (message, _) =
            message_of(request.input).ok_or_else(|| InvalidInput("a message".into()))?;
        Ok(op::infer_raw("m", Prompt::new().user(message)).map(|r| Value::String(r.content)))
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::builder()
        .agent("streamer", agent)
        .store(dir.path().join("chat.db"))
        .build()
        .await
        .expect("server");
    let base = serve(server).await;
    let client = reqwest::Client::new();
    let ours_url = format!("{base}/v1/chat/completions");
    let theirs_url = format!("{model}/chat/completions");
    let (mut ttft, mut rate, mut ttft_direct, mut rate_direct) = (vec![], vec![], vec![], vec![]);
    for round in 0..11 {
        let (t, r) = measure(&client, &ours_url, "streamer").await;
        let (td, rd) = measure(&client, &theirs_url, "m").await;
        if round > 0 {
            ttft.push(t);
            rate.push(r);
            ttft_direct.push(td);
            rate_direct.push(rd);
        }
    }
    let median = |v: &[f64]| bench_kit::stats(v).median;
    bench_kit::report("serve.chat_ttft", median(&ttft), "ms", median(&ttft_direct));
    bench_kit::report(
        "serve.chat_tokens_per_s",
        median(&rate),
        "tokens/s",
        median(&rate_direct),
    );
}
