//! What the server's tests share: agents with a scripted model, and a server on 127.0.0.1.

use std::time::Duration;

use agent_engine::Config;
use agent_op::{Message, Prompt, Response, op};
use agent_provider::ScriptedProvider;
use agent_serve::{FnAgent, InvalidInput, Keys, Server, ServerBuilder, message_of};
use serde_json::Value;

/// An agent whose model answers `echo: <message> (<n> messages)`: the count shows the
/// history the run was given.
pub fn echo() -> FnAgent {
    echo_after(Duration::ZERO)
}

/// [`echo`] whose model takes `latency` to answer.
pub fn echo_after(latency: Duration) -> FnAgent {
    let provider = ScriptedProvider::from_fn(|_, prompt: &Prompt| {
        let messages: Vec<&Message> = prompt.messages.iter().collect();
        let last = messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("echo: {last} ({} messages)", messages.len())).with_usage(12, 3))
    })
    .with_latency(latency);
    FnAgent::new(Config::new().provider(provider), |request| {
        let (message, earlier) =
            message_of(request.input).ok_or_else(|| InvalidInput("a message is needed".into()))?;
        let mut prompt = Prompt::new();
        for turn in request.history.iter().chain(&earlier) {
            prompt = match turn.role.as_str() {
                "assistant" => prompt.message(Message::assistant(turn.content.clone())),
                "system" => prompt.system(turn.content.clone()),
                _ => prompt.user(turn.content.clone()),
            };
        }
        let prompt = prompt.user(message);
        Ok(op::infer_raw("echo-model", prompt).map(|r| Value::String(r.content)))
    })
    .description("Echoes what it is told")
}

pub struct Running {
    pub base: String,
    pub client: reqwest::Client,
    _dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn start(keys: Option<Keys>) -> Running {
    start_with(keys, |builder| builder).await
}

/// [`start`], with the builder changed by `configure` before the server is built.
pub async fn start_with(
    keys: Option<Keys>,
    configure: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut builder = Server::builder()
        .agent("echo", echo())
        .agent("slow", echo_after(Duration::from_millis(1500)))
        .agent("approver", approver())
        .agent("tooler", tooler())
        .store(dir.path().join("serve.db"));
    if let Some(keys) = keys {
        builder = builder.keys(keys);
    }
    let server = configure(builder).build().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(
        listener,
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(1),
    ));
    Running {
        base,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap(),
        _dir: dir,
        stop: Some(stop),
    }
}

impl Running {
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The SSE events of a response body: (id, event, data).
    pub async fn events(
        &self,
        request: reqwest::RequestBuilder,
    ) -> (
        reqwest::header::HeaderMap,
        Vec<(Option<String>, String, String)>,
    ) {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        (headers, parse_sse(&text))
    }
}

pub fn parse_sse(text: &str) -> Vec<(Option<String>, String, String)> {
    let mut events = Vec::new();
    for block in text.split("\n\n") {
        let (mut id, mut event, mut data) = (None, "message".to_owned(), Vec::new());
        let mut any = false;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.trim().to_owned());
                any = true;
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_owned();
                any = true;
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                any = true;
            }
        }
        if any {
            events.push((id, event, data.join("\n")));
        }
    }
    events
}

/// An agent that asks a person to approve a `delete` call and answers with what it was
/// told: `approved: <answer>`.
/// An agent that looks its message up with the tool `lookup` (which answers `<message> is
/// known`), then has its model answer `found: <what the tool said>`.
pub fn tooler() -> FnAgent {
    let provider = ScriptedProvider::from_fn(|_, prompt: &Prompt| {
        let last = prompt
            .messages
            .iter()
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("found: {last}")).with_usage(20, 4))
    });
    let lookup = agent_op::FnTool::new(
        "lookup",
        "Looks a thing up",
        serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        |args: Value| async move {
            Ok(Value::String(format!(
                "{} is known",
                args["q"].as_str().unwrap_or_default()
            )))
        },
    );
    FnAgent::new(Config::new().provider(provider).tool(lookup), |request| {
        let (message, _) =
            message_of(request.input).ok_or_else(|| InvalidInput("a message is needed".into()))?;
        Ok(
            op::tool("lookup", serde_json::json!({"q": message})).and_then(|found| {
                let found = match found {
                    Ok(Value::String(text)) => text,
                    Ok(other) => other.to_string(),
                    Err(error) => error.to_string(),
                };
                op::infer_raw("tool-model", Prompt::new().user(found))
                    .map(|r| Value::String(r.content))
            }),
        )
    })
    .description("Looks its message up with a tool")
}

pub fn approver() -> FnAgent {
    FnAgent::new(Config::new(), |_request| {
        let ask = agent_op::EventKind::custom(
            "approval_requested",
            serde_json::json!({"tool": "delete", "call_id": "call_1", "args": {"path": "x"}}),
        );
        Ok(op::emit(ask)
            .then(op::wait_steering(Duration::from_secs(60)))
            .map(|answer| {
                Value::String(match answer {
                    Some(steering) => format!("approved: {}", steering.message),
                    None => "no answer".into(),
                })
            }))
    })
}
