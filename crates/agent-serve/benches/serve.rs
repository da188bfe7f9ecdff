//! Benchmarks of the server, on 127.0.0.1 with an instant scripted model (so what is
//! measured is the server: HTTP, JSON, the store's commits, the run model):
//!
//! - `serve.run_roundtrip_p50` / `_p99`: µs per one-call stateless run over HTTP
//!   (`POST /runs/wait`, one client, keep-alive); baseline: the same durable run started
//!   in-process through the run model (`Runs::start` and `wait`), interleaved;
//! - `serve.runs_per_s`: one-call runs per second through `POST /runs/wait` with 64
//!   concurrent clients, durable store on; baseline: the same runs started in-process by 64
//!   concurrent tasks (ratio = HTTP / in-process: the share the HTTP layer keeps).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_engine::Config;
use agent_op::{Prompt, Response, op};
use agent_provider::ScriptedProvider;
use agent_serve::runs::NewRun;
use agent_serve::{FnAgent, InvalidInput, Server, message_of};
use serde_json::{Value, json};

const ROUNDTRIPS: usize = 2_000;
const CLIENTS: usize = 64;
const THROUGHPUT_RUNS: usize = 6_400;

fn agent() -> FnAgent {
    let provider = ScriptedProvider::from_fn(|_, p: &Prompt| {
        let n = p.messages.last().map_or(0, |m| m.content().len());
        Ok(Response::text(format!("answer {n}")).with_usage(12, 3))
    });
    FnAgent::new(Config::new().provider(provider), |request| {
        let (message, _) =
            message_of(request.input).ok_or_else(|| InvalidInput("a message".into()))?;
        Ok(op::infer_raw("m", Prompt::new().user(message)).map(|r| Value::String(r.content)))
    })
}

fn new_run(i: usize) -> NewRun {
    NewRun::new("bench", json!({"message": format!("question {i}")}))
}

fn main() {
    let roundtrip = bench_kit::enabled("serve.run_roundtrip");
    let throughput = bench_kit::enabled("serve.runs_per_s");
    if !roundtrip && !throughput {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = Server::builder()
            .agent("bench", agent())
            .store(dir.path().join("bench.db"))
            .build()
            .await
            .expect("server");
        let runs = server.runs().clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/runs/wait", listener.local_addr().expect("addr"));
        tokio::spawn(server.serve(listener, std::future::pending(), Duration::from_secs(1)));
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(CLIENTS)
            .build()
            .expect("client");
        let over_http = |i: usize| http_run(client.clone(), url.clone(), i);
        let in_process = |i: usize| direct_run(runs.clone(), i);
        if roundtrip {
            for i in 0..100 {
                over_http(i).await;
                in_process(i).await;
            }
            let (mut http, mut direct) = (Vec::new(), Vec::new());
            for i in 0..ROUNDTRIPS {
                let t = Instant::now();
                over_http(i).await;
                http.push(bench_kit::us(t.elapsed()));
                let t = Instant::now();
                in_process(i).await;
                direct.push(bench_kit::us(t.elapsed()));
            }
            let (http, direct) = (bench_kit::stats(&http), bench_kit::stats(&direct));
            bench_kit::report("serve.run_roundtrip_p50", http.median, "us", direct.median);
            bench_kit::report("serve.run_roundtrip_p99", http.p99, "us", direct.p99);
        }
        if throughput {
            let per_client = THROUGHPUT_RUNS / CLIENTS;
            let measure = |http: bool| {
                let (client, url, runs) = (client.clone(), url.clone(), runs.clone());
                async move {
                    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                    let t = Instant::now();
                    let tasks: Vec<_> = (0..CLIENTS)
                        .map(|_| {
                            let (next, client, url, runs) =
                                (next.clone(), client.clone(), url.clone(), runs.clone());
                            tokio::spawn(async move {
                                for _ in 0..per_client {
                                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    if http {
                                        http_run(client.clone(), url.clone(), i).await;
                                    } else {
                                        direct_run(runs.clone(), i).await;
                                    }
                                }
                            })
                        })
                        .collect();
                    for task in tasks {
                        task.await.expect("client task");
                    }
                    (CLIENTS * per_client) as f64 / t.elapsed().as_secs_f64()
                }
            };
            let direct = measure(false).await;
            let http = measure(true).await;
            bench_kit::report("serve.runs_per_s", http, "runs/s", direct);
        }
    });
}

/// One run over HTTP: `POST /runs/wait`.
async fn http_run(client: reqwest::Client, url: String, i: usize) {
    let response = client
        .post(&url)
        .json(&json!({"assistant_id": "bench", "input": {"message": format!("question {i}")}}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    assert!(body["output"].is_string(), "{body}");
}

/// The same run started in-process.
async fn direct_run(runs: agent_serve::Runs, i: usize) {
    let record = runs
        .start(new_run(i))
        .await
        .expect("start")
        .wait()
        .await
        .expect("wait");
    assert!(record.output.is_some());
}
