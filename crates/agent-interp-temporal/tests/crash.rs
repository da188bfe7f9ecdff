//! Worker processes killed (SIGKILL) in the middle of a run: the run finishes on the others
//! with the same result as an uninterrupted one, and a model call is only ever repeated when
//! the worker that made it was killed.

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_interp_temporal::{StartOptions, Worker, connect, start};
use agent_op::{Op, Prompt, Response, op};
use agent_provider::ScriptedProvider;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BRANCHES: usize = 50;
const CALLS_PER_BRANCH: usize = 3;

/// 50 branches, each three model calls one after another.
fn fan_out(_: ()) -> Op<(), Vec<String>> {
    op::par(
        (0..BRANCHES)
            .map(|b| {
                op::sequence(
                    (0..CALLS_PER_BRANCH)
                        .map(|c| {
                            op::infer_raw("m", Prompt::new().user(format!("branch {b} call {c}")))
                                .map(|r| r.content)
                        })
                        .collect(),
                )
                .map(|answers| answers.join(","))
            })
            .collect(),
    )
}

/// An OpenAI-compatible chat server that answers `echo: <last message>` after 300 ms, counts
/// the requests in flight and records per prompt which workers sent it (each worker process
/// gets its own base URL, `/w<n>/v1`).
#[derive(Default)]
struct ModelServer {
    in_flight: AtomicU64,
    per_prompt: Mutex<HashMap<String, Vec<u64>>>,
}

impl ModelServer {
    async fn start() -> (Arc<ModelServer>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = Arc::new(ModelServer::default());
        let serving = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serving.clone().serve(stream));
            }
        });
        (server, url)
    }

    async fn serve(self: Arc<Self>, mut stream: TcpStream) {
        let mut buffer = Vec::new();
        loop {
            let Some((worker, body)) = read_request(&mut stream, &mut buffer).await else {
                return;
            };
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let prompt = body["messages"]
                .as_array()
                .and_then(|m| m.last())
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            self.per_prompt
                .lock()
                .unwrap()
                .entry(prompt.clone())
                .or_default()
                .push(worker);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let reply = json!({
                "id": "c", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": format!("echo: {prompt}")}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
            })
            .to_string();
            let written = stream
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                        reply.len()
                    )
                    .as_bytes(),
                )
                .await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if written.is_err() {
                return;
            }
        }
    }
}

/// Reads one request: the worker number from its path (`/w<n>/...`) and its JSON body.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<(u64, Value)> {
    let head_end = loop {
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let worker = head
        .split(' ')
        .nth(1)
        .and_then(|path| path.strip_prefix("/w"))
        .and_then(|path| path.split('/').next())
        .and_then(|n| n.parse().ok())?;
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + 4 + length {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buffer[head_end + 4..head_end + 4 + length]).ok();
    buffer.drain(..head_end + 4 + length);
    Some((worker, body?))
}

const WORKER_ENV: &str = "AGENT_TEMPORAL_CRASH_WORKER";

/// Worker process number `n`: this test binary, running only [`worker_process`], calling the
/// model server at its own base URL.
fn spawn_worker(n: u64, address: &str, queue: &str, server_url: &str) -> Child {
    let model_url = format!("{server_url}/w{n}/v1");
    Command::new(std::env::current_exe().unwrap())
        .args(["worker_process", "--exact", "--ignored", "--nocapture"])
        .env(WORKER_ENV, json!([address, queue, model_url]).to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The body of a worker process (run by [`spawn_worker`]; ignored otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of a_run_survives_its_workers_being_killed"]
async fn worker_process() {
    let setting: Vec<String> =
        serde_json::from_str(&std::env::var(WORKER_ENV).expect("started by spawn_worker")).unwrap();
    let client = connect(&setting[0]).await.unwrap();
    let model = agent_provider::openai::OpenAiClient::compatible(setting[2].as_str())
        .no_api_key()
        .build()
        .unwrap();
    Worker::new(client, setting[1].clone())
        .provider(model)
        .heartbeat_timeout(Duration::from_secs(2))
        // A killed worker's workflows move to another at once (no sticky cache to wait for).
        .max_cached_workflows(0)
        .program("fan_out", fan_out)
        .run(std::future::pending())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_survives_its_workers_being_killed() {
    let Some(address) = support::address("a_run_survives_its_workers_being_killed") else {
        return;
    };
    let (server, server_url) = ModelServer::start().await;
    let queue = support::task_queue("crash");
    let mut workers: Vec<(u64, Child)> = (0..3)
        .map(|n| (n, spawn_worker(n, &address, &queue, &server_url)))
        .collect();
    let mut next_worker = 3;
    let client = connect(&address).await.unwrap();
    let handle = start(&client, "fan_out", (), StartOptions::new(queue.clone()))
        .await
        .unwrap();
    let result = handle.result::<(), Vec<String>>();
    tokio::pin!(result);
    let mut killed = HashSet::new();
    let mut in_flight_at_kills = 0;
    let outcome = loop {
        let wait = Duration::from_millis(fastrand::u64(200..700));
        tokio::select! {
            outcome = &mut result => break outcome,
            () = tokio::time::sleep(wait), if killed.len() < 10 => {
                let victim = fastrand::usize(..workers.len());
                in_flight_at_kills += server.in_flight.load(Ordering::SeqCst);
                let (n, worker) = &mut workers[victim];
                worker.kill().unwrap();
                worker.wait().unwrap();
                killed.insert(*n);
                workers[victim] = (
                    next_worker,
                    spawn_worker(next_worker, &address, &queue, &server_url),
                );
                next_worker += 1;
            }
        }
    };
    let kills = killed.len();
    for (_, mut worker) in workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    let outcome = outcome.unwrap();
    // The same result as an uninterrupted run (a model that answers the same way).
    let echo = ScriptedProvider::from_fn(|_, p| {
        let last = p
            .messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("echo: {last}")).with_usage(1, 1))
    });
    let local = agent_interp_par::run(
        &agent_interp_par::Config::new().provider(echo),
        (),
        fan_out(()),
    )
    .await
    .unwrap();
    assert_eq!(outcome.value, local.value);
    let calls = (BRANCHES * CALLS_PER_BRANCH) as u64;
    let per_prompt = server.per_prompt.lock().unwrap().clone();
    let total: usize = per_prompt.values().map(Vec::len).sum();
    eprintln!(
        "{kills} kills; {total} requests for {calls} calls; {in_flight_at_kills} in flight at the kills"
    );
    assert_eq!(
        per_prompt.len() as u64,
        calls,
        "every call reached the model"
    );
    assert!(kills >= 3, "the run lasted through several kills ({kills})");
    // A call runs again only when its worker died before the server heard how it ended: every
    // request for a prompt but the last came from a worker that was killed. (The count of
    // requests in flight at the kills is no bound: a worker killed after its reply arrived but
    // before it reported the activity's completion repeats a call that was not in flight.)
    for (prompt, senders) in &per_prompt {
        let (_, earlier) = senders
            .split_last()
            .expect("a prompt is recorded when requested");
        assert!(
            earlier.iter().all(|worker| killed.contains(worker)),
            "{prompt:?} was requested by workers {senders:?}; killed: {killed:?}"
        );
    }
}
