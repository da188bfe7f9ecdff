//! `agent serve` as a process: killed (SIGKILL) while a run's model call is in flight and
//! started again on its store, the run continues from its journal with no committed call
//! made again, and a stream reconnected with `Last-Event-ID` sees every event once; stopped
//! with SIGTERM, it exits within its grace and the next server finishes the run. Its chat
//! page in headless Chromium, `agent chat` in a pseudo-terminal, and a planted provider
//! key that must appear nowhere. (One binary: each test file links the whole CLI again.)

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An OpenAI-compatible model server that counts its calls: the first answer breaks the
/// spec's schema (so the program asks again, saying why), the second satisfies it. While `hold` is set,
/// second calls never answer.
struct Model {
    first: AtomicU64,
    second: AtomicU64,
    hold: AtomicBool,
    /// The `Authorization` header of the last request.
    authorization: std::sync::Mutex<String>,
    /// Calls of the chat test's agent (whose goal says CHAT), held while `hold_chat`.
    chat: AtomicU64,
    hold_chat: AtomicBool,
}

impl Model {
    async fn start() -> (Arc<Model>, String) {
        let model = Arc::new(Model {
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
            hold: AtomicBool::new(true),
            authorization: std::sync::Mutex::default(),
            chat: AtomicU64::new(0),
            hold_chat: AtomicBool::new(false),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let serving = model.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serving.clone().serve(stream));
            }
        });
        (model, url)
    }

    async fn serve(self: Arc<Self>, mut stream: TcpStream) {
        let Some((headers, body)) = read_request(&mut stream).await else {
            return;
        };
        if let Some(value) = headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("authorization")
                .then(|| v.trim().to_owned())
        }) {
            *self.authorization.lock().unwrap() = value;
        }
        // The spec's program gives the refused answer back with the reason.
        let prompt = body["messages"].to_string();
        let again = prompt.contains("does not satisfy");
        let chat_reply;
        let content = if prompt.contains("CHAT") {
            let n = self.chat.fetch_add(1, Ordering::SeqCst) + 1;
            while self.hold_chat.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let memory = if prompt.contains("Earlier in this conversation") {
                "remembers"
            } else {
                "fresh"
            };
            chat_reply = format!("turn {n} {memory}");
            chat_reply.as_str()
        } else if again {
            self.second.fetch_add(1, Ordering::SeqCst);
            while self.hold.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r#"{"title": "resumed"}"#
        } else {
            self.first.fetch_add(1, Ordering::SeqCst);
            r#"{"nope": 1}"#
        };
        let reply = if body["stream"] == true {
            let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": content}, "finish_reason": null}]});
            let last = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}});
            let body = format!("data: {chunk}\n\ndata: {last}\n\ndata: [DONE]\n\n");
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        } else {
            let body = json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
            .to_string();
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
        };
        let _ = stream.write_all(reply.as_bytes()).await;
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<(String, Value)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buffer);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                let headers = text[..end].to_owned();
                let body = serde_json::from_slice(&buffer[end + 4..end + 4 + length]).ok()?;
                return Some((headers, body));
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_server(spec: &std::path::Path, store: &std::path::Path, port: u16) -> Child {
    start_server_with(spec, store, port, Stdio::null(), &[])
}

fn start_server_with(
    spec: &std::path::Path,
    store: &std::path::Path,
    port: u16,
    stderr: Stdio,
    env: &[(&str, &str)],
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .envs(env.iter().copied())
        .arg("serve")
        .arg(spec)
        .arg("--store")
        .arg(store)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--grace")
        .arg("1")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

async fn ready(client: &reqwest::Client, base: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            if r.status() == 200 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("agent serve did not start");
}

/// Reads SSE events (id, data) from `response` into `into` until it ends.
async fn read_events(
    mut response: reqwest::Response,
    into: Arc<std::sync::Mutex<Vec<(u64, Value)>>>,
) {
    let mut pending = String::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let block: String = pending.drain(..end + 2).collect();
            let mut id = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            if let (Some(id), Ok(data)) = (id, serde_json::from_str(&data)) {
                into.lock().unwrap().push((id, data));
            }
        }
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_resumes_its_run_with_no_committed_call_made_again() {
    let (model, url) = Model::start().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("typed.toml");
    std::fs::write(
        &spec,
        format!(
            r#"[model]
provider = "openai"
name = "m"
base_url = "{url}"
api_key_env = ""

[agent]
name = "typed"
goal = "Give a title."

[output]
type = "json"
schema = {{ type = "object", required = ["title"], properties = {{ title = {{ type = "string" }} }} }}
"#
        ),
    )
    .unwrap();
    let store = dir.path().join("serve.db");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    let mut first = Killed(start_server(&spec, &store, port));
    ready(&client, &base).await;
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"assistant_id": "typed", "input": {"message": "A title, please."}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stream = client
        .get(format!("{base}/runs/{run_id}/stream?stream_mode=events"))
        .send()
        .await
        .unwrap();
    let reader = tokio::spawn(read_events(stream, events.clone()));

    // The second model call is in flight (the first answer is committed): kill.
    let start = Instant::now();
    while model.second.load(Ordering::SeqCst) == 0 {
        if start.elapsed() > Duration::from_secs(30) {
            let run: Value = client
                .get(format!("{base}/runs/{run_id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            panic!(
                "no second call ({} first calls); the run: {run}",
                model.first.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), reader).await;
    let before = events.lock().unwrap().clone();
    assert!(!before.is_empty(), "events were streamed before the kill");
    let last = before.last().unwrap().0;

    model.hold.store(false, Ordering::SeqCst);
    let _second = Killed(start_server(&spec, &store, port));
    ready(&client, &base).await;
    let after = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stream = client
        .get(format!("{base}/runs/{run_id}/stream?stream_mode=events"))
        .header("last-event-id", last.to_string())
        .send()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), read_events(stream, after.clone()))
        .await
        .unwrap();
    let after = after.lock().unwrap().clone();

    let done: Value = client
        .get(format!("{base}/runs/{run_id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "success", "{done}");
    let joined: Value = client
        .get(format!("{base}/runs/{run_id}/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(joined["output"]["title"], "resumed", "{joined}");

    // The committed first call was not made again; the one in flight was.
    assert_eq!(model.first.load(Ordering::SeqCst), 1);
    assert_eq!(model.second.load(Ordering::SeqCst), 2);

    // Every event once, in order, across the two connections.
    let all: Vec<(u64, Value)> = before.into_iter().chain(after).collect();
    let ids: Vec<u64> = all.iter().map(|(id, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let kinds: Vec<String> = all
        .iter()
        .filter_map(|(_, e)| e["event"].as_str().map(str::to_owned))
        .collect();
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("infer_end"), 2, "{kinds:?}");
    assert_eq!(count("run_end"), 1, "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_within_the_grace_and_the_next_server_finishes_the_run() {
    let (model, url) = Model::start().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("typed.toml");
    std::fs::write(
        &spec,
        format!(
            "[model]\nprovider = \"openai\"\nname = \"m\"\nbase_url = \"{url}\"\napi_key_env = \"\"\n\n[agent]\nname = \"typed\"\ngoal = \"Give a title.\"\n\n[output]\ntype = \"json\"\nschema = {{ type = \"object\", required = [\"title\"], properties = {{ title = {{ type = \"string\" }} }} }}\n"
        ),
    )
    .unwrap();
    let store = dir.path().join("serve.db");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut first = Killed(start_server(&spec, &store, port));
    ready(&client, &base).await;
    let run: Value = client
        .post(format!("{base}/runs"))
        .json(&json!({"assistant_id": "typed", "input": "A title, please."}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    while model.second.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopping = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &first.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    loop {
        if first.0.try_wait().unwrap().is_some() {
            break;
        }
        // --grace 1: a second to finish, then the run is stopped at its next commit.
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "agent serve did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    model.hold.store(false, Ordering::SeqCst);
    let _second = Killed(start_server(&spec, &store, port));
    ready(&client, &base).await;
    let joined: Value = client
        .get(format!("{base}/runs/{run_id}/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(joined["output"]["title"], "resumed", "{joined}");
    assert_eq!(model.first.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_provider_key_appears_in_no_response_event_trace_store_or_log() {
    const PLANTED: &str = "sk-planted-7f3a9c1e5b2d4f6a8c0e";
    let (model, url) = Model::start().await;
    model.hold.store(false, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("typed.toml");
    std::fs::write(
        &spec,
        format!(
            "[model]\nprovider = \"openai\"\nname = \"m\"\nbase_url = \"{url}\"\napi_key_env = \"PLANTED_PROVIDER_KEY\"\n\n[agent]\nname = \"typed\"\ngoal = \"Give a title.\"\n\n[output]\ntype = \"json\"\nschema = {{ type = \"object\", required = [\"title\"], properties = {{ title = {{ type = \"string\" }} }} }}\n"
        ),
    )
    .unwrap();
    let store = dir.path().join("serve.db");
    let log = dir.path().join("serve.log");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut server = Killed(start_server_with(
        &spec,
        &store,
        port,
        Stdio::from(std::fs::File::create(&log).unwrap()),
        &[("PLANTED_PROVIDER_KEY", PLANTED), ("RUST_LOG", "trace")],
    ));
    ready(&client, &base).await;
    let mut seen = String::new();
    let response = client
        .post(format!("{base}/runs/stream"))
        .json(&json!({"assistant_id": "typed", "input": "A title.",
            "stream_mode": ["values", "updates", "messages-tuple", "events", "custom", "debug"]}))
        .send()
        .await
        .unwrap();
    let location = response.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_owned();
    seen.push_str(&format!("{:?}", response.headers()));
    seen.push_str(&response.text().await.unwrap());
    for path in [
        location.clone(),
        format!("{location}/join"),
        format!("{location}/trace"),
        "/assistants/typed".into(),
        "/assistants/typed/schemas".into(),
        "/v1/models".into(),
    ] {
        let response = client.get(format!("{base}{path}")).send().await.unwrap();
        seen.push_str(&format!("{:?}", response.headers()));
        seen.push_str(&response.text().await.unwrap());
    }
    let chat = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "typed", "messages": [{"role": "user", "content": "A title."}], "stream": true}))
        .send()
        .await
        .unwrap();
    seen.push_str(&chat.text().await.unwrap());
    assert!(seen.contains("resumed"), "the runs answered: {seen:.2000}");
    // The key was in use: the model server received it.
    assert!(model.authorization.lock().unwrap().contains(PLANTED));

    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let log = std::fs::read(&log).unwrap();
    let mut stored = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("serve.db")
        {
            stored.extend(std::fs::read(path).unwrap());
        }
    }
    for (what, bytes) in [
        ("responses", seen.as_bytes()),
        ("the log", &log[..]),
        ("the store", &stored[..]),
    ] {
        assert!(
            !bytes
                .windows(PLANTED.len())
                .any(|w| w == PLANTED.as_bytes()),
            "the provider key is in {what}"
        );
    }
}

/// A tmux session on a server of its own (a pseudo-terminal the test types into), killed at
/// the end.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-S", "-200", "-t", "chat"])
    }

    async fn wait_for(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "`{text}` never showed; the screen:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        self.run(&args);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_chat_streams_turns_remembers_them_and_ctrl_c_stops_a_turn_not_the_chat() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED: the chat test needs tmux for a pseudo-terminal");
        return;
    }
    let (model, url) = Model::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("chat.toml"),
        format!(
            "[model]\nprovider = \"openai\"\nname = \"m\"\nbase_url = \"{url}\"\napi_key_env = \"\"\n\n[agent]\nname = \"helper\"\ngoal = \"CHAT with the user.\"\n"
        ),
    )
    .unwrap();
    let tmux = Tmux {
        socket: format!("agent-chat-test-{}", std::process::id()),
    };
    let command = format!(
        "cd {} && {} chat chat.toml --trace turn.jsonl; echo CHAT-ENDED; sleep 30",
        dir.path().display(),
        env!("CARGO_BIN_EXE_agent")
    );
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "chat",
        "-x",
        "200",
        "-y",
        "50",
        &command,
    ]);
    tmux.wait_for("Chatting with helper").await;

    tmux.keys(&["hello", "Enter"]);
    tmux.wait_for("turn 1 fresh").await;
    tmux.keys(&["again", "Enter"]);
    tmux.wait_for("turn 2 remembers").await;
    tmux.keys(&["/cost", "Enter"]);
    tmux.wait_for("this session: 2 model calls").await;

    // A turn that hangs: Ctrl-C stops it, and the chat goes on.
    model.hold_chat.store(true, Ordering::SeqCst);
    tmux.keys(&["slow", "Enter"]);
    let start = Instant::now();
    while model.chat.load(Ordering::SeqCst) < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the third turn never called"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tmux.keys(&["C-c"]);
    tmux.wait_for("(stopped)").await;
    model.hold_chat.store(false, Ordering::SeqCst);

    tmux.keys(&["/reset", "Enter"]);
    tmux.wait_for("(a new conversation)").await;
    tmux.keys(&["after", "Enter"]);
    tmux.wait_for("turn 4 fresh").await;
    tmux.keys(&["/trace", "Enter"]);
    tmux.wait_for("turn.jsonl").await;
    let trace = std::fs::read_to_string(dir.path().join("turn.jsonl")).unwrap();
    assert!(trace.contains("infer_end"), "{trace}");

    tmux.keys(&["C-d"]);
    let screen = tmux.wait_for("CHAT-ENDED").await;
    assert!(screen.contains("this session: 4 model calls"), "{screen}");
    // Each answer once on the screen (streamed, not printed again).
    assert_eq!(screen.matches("turn 1 fresh").count(), 1, "{screen}");
}

/// `agent serve`'s chat page in headless Chromium: a message typed and sent, the answer
/// streamed into the page, the turn's tool call with its arguments and result, its cost,
/// and the link to its trace.
#[test]
fn a_message_sent_in_the_chat_page_streams_its_answer_and_shows_its_tool_call() {
    let chromium = match support::chromium::find_or_install() {
        Ok(chromium) => chromium,
        Err(why) => {
            eprintln!("SKIPPED: the chat page test needs Chromium: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    std::fs::write(
        dir.path().join("notes/notes.md"),
        "Budgets are enforced by the runtime.",
    )
    .unwrap();
    let spec = dir.path().join("notes.toml");
    std::fs::write(
        &spec,
        r#"[model]
provider = "scripted"
name = "m"
replies = [
  { calls = [{ tool = "read_file", args = { path = "notes.md" } }] },
  "The notes say budgets are enforced by the runtime.",
]

[agent]
name = "notes"
goal = "Answer from the notes."

[tools.read_file]
root = "notes"
"#,
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _server = Killed(
        Command::new(env!("CARGO_BIN_EXE_agent"))
            .arg("serve")
            .arg(&spec)
            .arg("--store")
            .arg(dir.path().join("serve.db"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "agent serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/chat.mjs");
    let out = chromium
        .drive_url(
            &script,
            &format!("http://127.0.0.1:{port}/"),
            &["notes", "What do the notes say?"],
        )
        .unwrap();
    let Some(out) = out else {
        eprintln!("SKIPPED: the chat page test needs Node to drive Chromium");
        return;
    };
    let page: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(page["user"], "What do the notes say?", "{page}");
    assert_eq!(page["error"], false, "{page}");
    assert_eq!(
        page["answer"], "The notes say budgets are enforced by the runtime.",
        "{page}"
    );
    let tools = page["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{page}");
    assert!(
        tools[0]["name"].as_str().unwrap().contains("read_file"),
        "{page}"
    );
    assert!(
        tools[0]["args"].as_str().unwrap().contains("notes.md"),
        "{page}"
    );
    assert!(
        tools[0]["result"]
            .as_str()
            .unwrap()
            .contains("Budgets are enforced"),
        "{page}"
    );
    assert!(
        page["cost"].as_str().unwrap().contains("2 model calls"),
        "{page}"
    );
    assert_eq!(page["trace"], true, "{page}");
    // The answer was on the page before the turn was done (streamed, not only at the end).
    assert!(!page["seen"].as_array().unwrap().is_empty(), "{page}");
}
