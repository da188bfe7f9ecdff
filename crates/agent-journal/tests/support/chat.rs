//! What the kill tests share: a 100-call program, the answers of a deterministic model, and
//! an OpenAI-compatible chat server on 127.0.0.1 that serves them and counts requests.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_interp_seq::Config;
use agent_op::{Op, Prompt, Response, op};
use agent_provider::ScriptedProvider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The program's model calls.
pub const CALLS: u64 = 100;

/// The model's answer to a prompt: a pure function of the last message, so an uninterrupted
/// run can be computed without the server.
pub fn answer(last: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in last.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:06}", h % 1_000_000)
}

/// 100 calls, each asking about the previous answer: a resumed run that repeated or skipped
/// a call would end differently.
pub fn program() -> Op<(), String> {
    op::loop_fn((0u64, String::from("start")), |(i, last)| {
        if i == CALLS {
            return op::pure(std::ops::ControlFlow::Break(last));
        }
        op::infer_raw("m", Prompt::new().user(format!("step {i} after {last}")))
            .map(move |r| std::ops::ControlFlow::Continue((i + 1, r.content)))
    })
}

/// An OpenAI-compatible chat server on 127.0.0.1 that answers after `latency` and counts
/// the requests it received.
pub async fn server(latency: Duration, requests: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(serve(socket, latency, requests.clone()));
        }
    });
    format!("http://{addr}/v1")
}

async fn serve(mut socket: TcpStream, latency: Duration, requests: Arc<AtomicUsize>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        // One request: headers, then a Content-Length body.
        let (head_end, length) = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                break (end + 4, length);
            }
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        while buffer.len() < head_end + length {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: serde_json::Value =
            serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or_default();
        buffer.drain(..head_end + length);
        requests.fetch_add(1, Ordering::SeqCst);
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        tokio::time::sleep(latency).await;
        let reply = serde_json::json!({
            "id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer(&last)}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        })
        .to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
            reply.len()
        );
        if socket.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// What an uninterrupted run returns, computed with the same answers and no server.
pub async fn expected() -> String {
    let provider = ScriptedProvider::from_fn(|_, p: &Prompt| {
        let last = p
            .messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(answer(&last)))
    });
    agent_interp_seq::run(&Config::new().provider(provider), (), program())
        .await
        .expect("the uninterrupted run")
        .value
}

/// The variable naming the chat server's URL for a child process.
const CHILD_URL: &str = "EFFECT_AGENTS_KILL_TEST_URL";

/// Starts this test binary again as a child process running only the ignored test
/// `test`, with `journal_var` set to `journal` and the chat server at `url`.
pub fn spawn_child(
    test: &str,
    journal_var: &str,
    journal: impl AsRef<std::ffi::OsStr>,
    url: &str,
) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(journal_var, journal)
        .env(CHILD_URL, url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the child process starts")
}

/// The child's side: with the journal `journal_var` names (opened by `open`), resumes (or
/// starts) the durable run of the program against the chat server, and prints its result.
pub fn run_child<F, Fut>(journal_var: &str, trace_id: &str, open: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Arc<dyn agent_op::journal::Journal>>,
{
    let (Ok(journal), Ok(url)) = (std::env::var(journal_var), std::env::var(CHILD_URL)) else {
        panic!("run by a kill test, with {journal_var} and {CHILD_URL} set");
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let journal = open(journal).await;
        let client = agent_provider::OpenAiClient::compatible(url)
            .build()
            .expect("client");
        let config = Config::new().provider(client).trace_id(trace_id);
        let outcome = agent_interp_seq::resume(&config, journal, (), program())
            .await
            .expect("the resumed run");
        println!("RESULT {}", outcome.value);
    });
}

/// Waits for a child left to finish; checks it succeeded and returns the result it printed.
pub fn finish(mut child: std::process::Child) -> String {
    use std::io::Read;
    let status = child.wait().expect("wait");
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).expect("stdout");
    }
    if let Some(mut stderr) = child.stderr.take() {
        stderr.read_to_string(&mut err).expect("stderr");
    }
    assert!(status.success(), "the final run failed: {out}\n{err}");
    // libtest prints the test's name on the same line.
    out.lines()
        .find_map(|l| l.split("RESULT ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no result in: {out}"))
        .to_owned()
}
