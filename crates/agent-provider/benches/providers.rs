//! Benchmarks of the provider clients: the cost of one chat call over a local connection, and
//! the speed of assembling recorded streams from memory.
//!
//! - `provider.openai.roundtrip`: µs per non-streaming chat call to a local server; baseline:
//!   a raw reqwest POST of the same body to the same server and a plain `serde_json` parse of
//!   the reply into a `Value`.
//! - `provider.openai.stream_parse`, `provider.ollama.stream_parse`: MB/s assembling a
//!   recorded ~10 MB stream (SSE of content deltas and tool-call argument fragments; NDJSON of
//!   content and tool-call lines) fed in 16 KiB pieces; baseline: a plain scan of the same bytes
//!   for line breaks (`memchr`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use agent_op::{Delta, Prompt, Provider};
use agent_provider::openai::MaxTokensField;
use agent_provider::{OpenAiClient, ollama, openai};
use common::{Reply, TestServer};
use serde_json::{Value, json};

const STREAM_BYTES: usize = 10 * 1024 * 1024;
const PIECE: usize = 16 * 1024;
const CALLS_PER_ROUND: usize = 200;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A typical short completion, as OpenAI returns it.
fn completion() -> Value {
    json!({
        "id": "chatcmpl-9xYz", "object": "chat.completion", "created": 1_718_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "The capital of France is Paris. It has been the country's capital since the 10th century and is its largest city.", "refusal": null},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 26, "completion_tokens": 27, "total_tokens": 53,
                  "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
        "system_fingerprint": "fp_0ba0d124f1"
    })
}

fn roundtrip(rt: &tokio::runtime::Runtime) {
    let server = rt.block_on(TestServer::always(Reply::json(200, &completion())));
    let url = format!("{}/v1", server.url());
    let client = OpenAiClient::compatible(&url)
        .api_key("sk-bench")
        .max_tokens_field(MaxTokensField::MaxTokens)
        .build()
        .expect("client");
    let prompt = Prompt::new()
        .system("You are a helpful assistant.")
        .user("What is the capital of France?")
        .max_tokens(64);
    // The baseline sends exactly the bytes the client sends.
    let body = rt.block_on(async {
        client
            .chat("gpt-4o-mini", &prompt)
            .await
            .expect("warm-up call");
        server.requests()[0].body.clone()
    });
    let raw = reqwest::Client::new();
    let endpoint = format!("{url}/chat/completions");

    let (subject, baseline) = bench_kit::interleaved(
        15,
        || {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..CALLS_PER_ROUND {
                    let reply = client.chat("gpt-4o-mini", &prompt).await.expect("chat");
                    black_box(reply);
                }
                start.elapsed()
            })
        },
        || {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..CALLS_PER_ROUND {
                    let response = raw
                        .post(&endpoint)
                        .header("content-type", "application/json")
                        .header("accept", "application/json")
                        .header("authorization", "Bearer sk-bench")
                        .body(body.clone())
                        .send()
                        .await
                        .expect("post");
                    let bytes = response.bytes().await.expect("body");
                    let value: Value = serde_json::from_slice(&bytes).expect("json");
                    black_box(value);
                }
                start.elapsed()
            })
        },
    );
    let calls = CALLS_PER_ROUND as f64;
    bench_kit::report(
        "provider.openai.roundtrip",
        bench_kit::median_per(&subject, calls, bench_kit::us),
        "µs/call",
        bench_kit::median_per(&baseline, calls, bench_kit::us),
    );
}

/// Tokens as a model streams them: mostly short ASCII pieces, some multi-byte.
const TOKENS: &[&str] = &[
    " the", " model", "ing", " of", " a", ",", " and", " stream", " to", " data", ".", "\n",
    " café", " naïve", " 世界", " 🎉", " über", " is", " fast", " Rust",
];

/// A recorded SSE stream of about `STREAM_BYTES`: content deltas, then tool calls whose
/// arguments arrive in small fragments, then the finish and usage chunks and `[DONE]`.
fn recorded_sse() -> Vec<u8> {
    let mut out = String::with_capacity(STREAM_BYTES + 4096);
    let head = r#"{"id":"chatcmpl-9xYz","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":"#;
    let tail = r#","logprobs":null,"finish_reason":null}]}"#;
    let mut i = 0usize;
    let mut call = 0u32;
    while out.len() < STREAM_BYTES {
        let delta = if i % 50 < 40 {
            json!({"content": TOKENS[i % TOKENS.len()]})
        } else if i % 50 == 40 {
            call += 1;
            json!({"tool_calls": [{"index": call - 1, "id": format!("call_{call}"), "type": "function", "function": {"name": "search", "arguments": ""}}]})
        } else {
            // Nine fragments of `{"query": "capital of Françe", "limit": 10}`.
            let fragment = [
                "{\"query\"",
                ": \"",
                "capital ",
                "of Fr",
                "ançe",
                "\", \"",
                "limit\"",
                ": ",
                "10}",
            ][i % 50 - 41];
            json!({"tool_calls": [{"index": call - 1, "function": {"arguments": fragment}}]})
        };
        out.push_str("data: ");
        out.push_str(head);
        out.push_str(&delta.to_string());
        out.push_str(tail);
        out.push_str("\n\n");
        i += 1;
    }
    out.push_str(&format!(
        "data: {head}{{}},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}}]}}\n\n"
    ));
    out.push_str("data: {\"id\":\"chatcmpl-9xYz\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":26,\"completion_tokens\":900000,\"total_tokens\":900026}}\n\n");
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

/// A recorded NDJSON `/api/chat` stream of about `STREAM_BYTES`: content lines, a tool-call
/// line now and then, and the final line with counts and durations.
fn recorded_ndjson() -> Vec<u8> {
    let mut out = String::with_capacity(STREAM_BYTES + 4096);
    let mut i = 0usize;
    while out.len() < STREAM_BYTES {
        let message = if i % 100 == 99 {
            json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"index": 0, "name": "search", "arguments": {"query": "capital of France", "limit": 10}}}]})
        } else {
            json!({"role": "assistant", "content": TOKENS[i % TOKENS.len()]})
        };
        let line = json!({"model": "llama3.2", "created_at": "2024-07-22T20:33:28.123648Z", "message": message, "done": false});
        out.push_str(&line.to_string());
        out.push('\n');
        i += 1;
    }
    out.push_str(&json!({"model": "llama3.2", "created_at": "2024-07-22T20:33:28.123648Z", "message": {"role": "assistant", "content": ""},
        "done": true, "done_reason": "stop", "total_duration": 4_883_583_458u64, "load_duration": 1_334_875u64,
        "prompt_eval_count": 26, "prompt_eval_duration": 342_546_000u64, "eval_count": 282, "eval_duration": 4_535_599_000u64}).to_string());
    out.push('\n');
    out.into_bytes()
}

fn stream_parse(
    name: &str,
    bytes: &[u8],
    assemble: impl Fn(&[u8], &mut dyn FnMut(Delta)) -> usize,
) {
    let mb = bytes.len() as f64 / 1e6;
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            let start = Instant::now();
            let mut deltas = 0usize;
            let calls = assemble(bytes, &mut |d| {
                deltas += 1;
                black_box(d);
            });
            let elapsed = start.elapsed();
            assert!(deltas > 10_000 && calls > 0);
            elapsed
        },
        || {
            let start = Instant::now();
            let lines = bytes
                .chunks(PIECE)
                .map(|piece| memchr::memchr_iter(b'\n', piece).count())
                .sum::<usize>();
            black_box(lines);
            start.elapsed()
        },
    );
    let mbps = |samples: &[Duration]| mb / bench_kit::median_per(samples, 1.0, bench_kit::secs);
    bench_kit::report(name, mbps(&subject), "MB/s", mbps(&baseline));
}

fn main() {
    if bench_kit::enabled("provider.openai.roundtrip") {
        roundtrip(&runtime());
    }
    if bench_kit::enabled("provider.openai.stream_parse") {
        let bytes = recorded_sse();
        stream_parse("provider.openai.stream_parse", &bytes, |bytes, on_delta| {
            let response =
                openai::assemble_bytes(bytes.chunks(PIECE), on_delta).expect("assembles");
            response.tool_calls.len()
        });
    }
    if bench_kit::enabled("provider.ollama.stream_parse") {
        let bytes = recorded_ndjson();
        stream_parse("provider.ollama.stream_parse", &bytes, |bytes, on_delta| {
            let response =
                ollama::assemble_bytes(bytes.chunks(PIECE), on_delta).expect("assembles");
            response.tool_calls.len()
        });
    }
}
