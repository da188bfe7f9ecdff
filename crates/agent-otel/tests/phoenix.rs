//! Export to a real backend: Arize Phoenix (PyPI `arize-phoenix`, installed into a virtualenv
//! under `target/` on first use), which ingests OTLP over HTTP and gRPC and stores LLM spans.
//! The test starts it on free ports of 127.0.0.1, exports an agent run both ways, and reads
//! the spans back through Phoenix's REST API. Without Python or the package index it says so
//! in one line and stops.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_otel::{Otel, Protocol};
use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt;

#[path = "support/run.rs"]
mod run;

use run::{SPANS, config, program};

/// The virtualenv's Python with Phoenix installed, installing it if missing; `None` (said in
/// one line) when it cannot be had.
fn phoenix_python() -> Option<PathBuf> {
    bench_kit::python::PHOENIX.python()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Phoenix server on 127.0.0.1, stopped when dropped (also when the test fails).
struct Phoenix {
    child: Child,
    http: u16,
    grpc: u16,
    _work: tempfile::TempDir,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Phoenix {
    fn start(python: &Path) -> Phoenix {
        let work = tempfile::tempdir().unwrap();
        let (http, grpc) = (free_port(), free_port());
        let launcher =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/phoenix_loopback.py");
        let log = std::fs::File::create(work.path().join("phoenix.log")).unwrap();
        let child = Command::new(python)
            .arg(launcher)
            .env("PHOENIX_WORKING_DIR", work.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", http.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("DO_NOT_TRACK", "1")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("Phoenix starts");
        Phoenix {
            child,
            http,
            grpc,
            _work: work,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._work.path().join("phoenix.log")).unwrap_or_default()
    }

    async fn wait_ready(&mut self, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let up = client
                .get(format!("{}/v1/projects", self.url()))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if up {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("Phoenix exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "Phoenix did not start:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The spans of the default project named `root` and their descendants, waiting up to a
    /// minute for `count` of them (Phoenix ingests in the background).
    async fn spans(&self, client: &reqwest::Client, trace_of: &str, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = client
                .get(format!(
                    "{}/v1/projects/default/spans?limit=1000",
                    self.url()
                ))
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let all = answer["data"].as_array().cloned().unwrap_or_default();
            let root_trace = all
                .iter()
                .find(|s| s["name"] == trace_of)
                .map(|s| s["context"]["trace_id"].clone());
            let spans: Vec<Value> = match root_trace {
                Some(trace) => all
                    .into_iter()
                    .filter(|s| s["context"]["trace_id"] == trace)
                    .collect(),
                None => Vec::new(),
            };
            if spans.len() >= count || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn check(spans: &[Value], root_name: &str) {
    let root = spans.iter().find(|s| s["name"] == root_name).unwrap();
    assert!(root["parent_id"].is_null(), "{root}");
    let attrs = |s: &Value| s["attributes"].clone();
    assert_eq!(
        attrs(root)["gen_ai.operation.name"],
        "invoke_agent",
        "{root}"
    );
    let chats: Vec<&Value> = spans.iter().filter(|s| s["name"] == "chat small").collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for chat in chats {
        let a = attrs(chat);
        assert_eq!(a["gen_ai.request.model"], "small", "{chat}");
        assert_eq!(a["gen_ai.provider.name"], "scripted");
        assert_eq!(a["gen_ai.usage.input_tokens"], 11);
        // agent → chat: the fork and branch spans are below the exporter's default level.
        assert_eq!(chat["parent_id"], root["context"]["span_id"], "{chat}");
    }
    // The agent span: what the run spent, and (content is exported) its goal and answer.
    let a = attrs(root);
    assert_eq!(a["gen_ai.usage.input_tokens"], 22, "{root}");
    assert_eq!(a["effect_agents.cost.usd"], 0.003, "{root}");
    // Phoenix shows the goal as the agent's input message and the answer as its output
    // message (it drops an output message without the conventions' `finish_reason`).
    assert_eq!(a["llm.input_messages.0.message.role"], "user", "{root}");
    assert_eq!(
        a["llm.input_messages.0.message.content"],
        run::GOAL,
        "{root}"
    );
    assert_eq!(
        a["llm.output_messages.0.message.role"], "assistant",
        "{root}"
    );
    assert_eq!(
        a["llm.output_messages.0.message.content"],
        run::ANSWER,
        "{root}"
    );
    let tool = spans
        .iter()
        .find(|s| s["name"] == "execute_tool lookup")
        .unwrap();
    assert_eq!(attrs(tool)["gen_ai.tool.call.id"], "call-1", "{tool}");
    assert_eq!(tool["parent_id"], root["context"]["span_id"], "{tool}");
    // Phoenix reads the GenAI conventions' messages into its own LLM message attributes
    // (what its UI shows): the instructions, then the question; the reply.
    let mut questions = Vec::new();
    for chat in spans.iter().filter(|s| s["name"] == "chat small") {
        let a = attrs(chat);
        assert_eq!(a["llm.input_messages.0.message.role"], "system", "{chat}");
        assert_eq!(
            a["llm.input_messages.0.message.content"], "Answer in one word.",
            "{chat}"
        );
        assert_eq!(a["llm.input_messages.1.message.role"], "user", "{chat}");
        questions.push(a["llm.input_messages.1.message.content"].clone());
        assert!(
            a.get("llm.input_messages.2.message.role").is_none(),
            "the instructions appear once: {chat}"
        );
        assert_eq!(
            a["llm.output_messages.0.message.role"], "assistant",
            "{chat}"
        );
        assert_eq!(a["llm.output_messages.0.message.content"], "ok", "{chat}");
    }
    questions.sort_by_key(|q| q.to_string());
    assert_eq!(questions, ["first?", "second?"]);
    // A failed tool's span carries the error's text and kind.
    let broken = spans
        .iter()
        .find(|s| s["name"] == "execute_tool broken")
        .unwrap();
    assert_eq!(broken["status_code"], "ERROR", "{broken}");
    assert_eq!(broken["status_message"], "the index is offline", "{broken}");
    assert_eq!(attrs(broken)["error.type"], "failed", "{broken}");
}

fn export(
    (layer, guard): (
        impl tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
        agent_otel::OtelGuard,
    ),
    name: &str,
) {
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        let run = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let config = config(name).export_content(true);
        run.block_on(agent_interp_par::run(&config, (), program()))
            .unwrap();
    });
    guard.shutdown().unwrap();
}

#[test]
fn spans_reach_phoenix_over_http_and_grpc() {
    let Some(python) = phoenix_python() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Generous: a query of the span store is not retried (see `spans`).
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut phoenix = Phoenix::start(&python);
    rt.block_on(phoenix.wait_ready(&client));

    let http = Otel::new("phoenix-http")
        .endpoint(phoenix.url())
        .build()
        .unwrap();
    export(http, "over-http");
    let spans = rt.block_on(phoenix.spans(&client, "invoke_agent over-http", SPANS));
    assert_eq!(spans.len(), SPANS, "{spans:#?}\n{}", phoenix.log());
    check(&spans, "invoke_agent over-http");

    // tonic's channel lives on the runtime it is built in.
    let grpc = {
        let _entered = rt.enter();
        Otel::new("phoenix-grpc")
            .protocol(Protocol::Grpc)
            .endpoint(format!("http://127.0.0.1:{}", phoenix.grpc))
            .build()
            .unwrap()
    };
    export(grpc, "over-grpc");
    let spans = rt.block_on(phoenix.spans(&client, "invoke_agent over-grpc", SPANS));
    assert_eq!(spans.len(), SPANS, "{spans:#?}\n{}", phoenix.log());
    check(&spans, "invoke_agent over-grpc");
}
