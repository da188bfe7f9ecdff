//! MCP against a real third-party server: `@modelcontextprotocol/server-everything` from npm,
//! installed under `target/mcp-everything` on first use.

#![cfg(feature = "mcp")]

use agent_agents::{McpError, McpServer, Toolbox, with_toolbox};
use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use agent_op::{EventType, ToolErrorKind};
use serde_json::json;

#[path = "support/everything.rs"]
mod everything;

use everything::server_everything;

#[path = "support/procs.rs"]
mod procs;

/// server-everything's tools over stdio, needing `mcp.everything` (the toolbox keeps the
/// server running); `None` without npm.
async fn everything_toolbox() -> Option<Toolbox> {
    let entry = server_everything()?.to_string_lossy().into_owned();
    let server = McpServer::spawn("everything", "node", &[entry.as_str(), "stdio"])
        .await
        .unwrap();
    Some(server.toolbox(&["mcp.everything"]).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_of_a_real_mcp_server_are_scoped_toolbox_entries() {
    let Some(toolbox) = everything_toolbox().await else {
        return;
    };
    let names: Vec<&str> = toolbox.names().collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-sum"),
        "{names:?}"
    );
    assert!(toolbox.capabilities().contains("mcp.everything"));
    let sum = toolbox
        .definitions()
        .into_iter()
        .find(|d| d.name == "get-sum")
        .unwrap();
    assert!(
        sum.parameters["properties"]["a"].is_object(),
        "{}",
        sum.parameters
    );

    let config = Config::new().tools(toolbox.tool_set());
    let echo_only = toolbox.narrow("echo-only", &["echo"]).unwrap();
    let inner = echo_only.clone();
    let program: Op<(), _> = with_toolbox(
        &toolbox,
        op::tool("echo", json!({"message": "hello MCP"}))
            .and_then(|echo| {
                op::tool("get-sum", json!({"a": 2, "b": 40})).map(move |sum| (echo, sum))
            })
            .and_then(|first| {
                // Arguments the server's schema refuses: a tool error, not a crash.
                op::tool("get-sum", json!({"a": "two"})).map(move |bad| (first, bad))
            })
            .and_then(move |first| {
                with_toolbox(&inner, op::tool("get-sum", json!({"a": 1, "b": 1})))
                    .map(move |denied| (first, denied))
            }),
    );
    let outcome = agent_interp_par::run(&config, (), program).await.unwrap();
    let (((echo, sum), bad), denied) = outcome.value;
    assert!(echo.unwrap().to_string().contains("hello MCP"));
    assert!(sum.unwrap().to_string().contains("42"));
    let bad = bad.unwrap_err();
    assert_eq!(bad.kind, ToolErrorKind::Failed, "{bad}");
    assert_eq!(denied.unwrap_err().kind, ToolErrorKind::Denied);
    assert_eq!(outcome.trace.events_of(EventType::ToolDenied).count(), 1);

    // A toolbox of the server's tools without the capability cannot be entered inside one
    // that lacks it.
    let plain = Toolbox::new("plain");
    let widening: Op<(), ()> = with_toolbox(&plain, with_toolbox(&echo_only, op::pure(())));
    let error = agent_interp_seq::run(&config, (), widening)
        .await
        .unwrap_err();
    assert!(
        error.kind.to_string().contains("mcp.everything"),
        "{}",
        error.kind
    );
}

/// An image a real MCP server returns reaches the model as a typed image attachment of the
/// tool's message, not as base64 text; the trace records it with its hash and size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_an_mcp_tool_returns_reaches_the_model_as_an_image() {
    let Some(toolbox) = everything_toolbox().await else {
        return;
    };
    let provider = std::sync::Arc::new(agent_provider::ScriptedProvider::new([
        call("c1", "get-tiny-image", json!({})),
        agent_op::Response::text("{\"ok\": true}"),
    ]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(toolbox.tool_set());
    let program = agent_agents::agent::<(), Verdict>("m", &toolbox, "Look at the logo.").run();
    let outcome = agent_interp_par::run(&config, (), program).await.unwrap();
    assert_eq!(outcome.value.unwrap(), Verdict { ok: true });
    let sent = &provider.calls()[1].prompt.messages;
    let answer = sent
        .iter()
        .find(|m| m.role() == "tool")
        .expect("the tool's answer");
    assert!(
        answer.content().contains("Here's the image you requested"),
        "{answer:?}"
    );
    assert!(
        !answer.content().contains("iVBOR"),
        "no base64 in the text: {}",
        answer.content()
    );
    let images: Vec<&agent_op::Image> = answer
        .attachments()
        .iter()
        .filter_map(|a| a.as_image())
        .collect();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].media_type(), "image/png");
    assert!(
        images[0].data().unwrap().starts_with(b"\x89PNG"),
        "the decoded PNG"
    );
    // The trace's copy of the prompt names the same image.
    let traced = outcome
        .trace
        .prompts()
        .nth(1)
        .expect("the second call's prompt");
    let mut file = Vec::new();
    agent_op::trace::jsonl::write_jsonl(&outcome.trace, &mut file).unwrap();
    let text = String::from_utf8(file).unwrap();
    assert!(
        text.contains(images[0].sha256()),
        "the file names the image by hash"
    );
    let back = agent_op::trace::jsonl::read_jsonl(text.as_bytes()).unwrap();
    assert_eq!(back.trace, outcome.trace, "a small image reads back whole");
    assert_eq!(
        traced
            .messages
            .iter()
            .map(|m| m.attachments().len())
            .sum::<usize>(),
        1
    );
}

/// server-everything in its streamable-HTTP mode, on a free port of 127.0.0.1; killed on drop.
struct HttpServer {
    child: tokio::process::Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.child.start_kill().ok();
    }
}

async fn server_everything_http(entry: &std::path::Path) -> HttpServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let preload = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/loopback_only.cjs"
    );
    let child = tokio::process::Command::new("node")
        .arg("--require")
        .arg(preload)
        .arg(entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let server = HttpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "server-everything did not listen on 127.0.0.1:{port} within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_of_a_real_server_over_streamable_http_are_toolbox_entries() {
    let Some(entry) = server_everything() else {
        return;
    };
    let server = server_everything_http(&entry).await;
    let remote = McpServer::connect_http("everything-http", server.url.clone())
        .await
        .unwrap();
    let toolbox = remote.toolbox(&["mcp.everything"]).await.unwrap();
    let names: Vec<&str> = toolbox.names().collect();
    assert!(names.contains(&"get-sum"), "{names:?}");
    let config = Config::new().tools(toolbox.tool_set());
    let program: Op<(), _> = with_toolbox(
        &toolbox,
        op::tool("get-sum", json!({"a": 2, "b": 40})).and_then(|sum| {
            op::tool("echo", json!({"message": "over HTTP"})).map(move |echo| (sum, echo))
        }),
    );
    let outcome = agent_interp_par::run(&config, (), program).await.unwrap();
    let (sum, echo) = outcome.value;
    assert!(sum.unwrap().to_string().contains("42"));
    assert!(echo.unwrap().to_string().contains("over HTTP"));

    // Nothing listens there: a typed error as soon as the connection is refused. Waiting
    // instead until the handshake's timeout (30 s) ran out would be `McpError::Timeout`.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    match McpServer::connect_http("nobody", format!("http://127.0.0.1:{closed}/mcp")).await {
        Err(McpError::Protocol { server, .. }) => assert_eq!(server, "nobody"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_dies_or_never_starts_is_a_typed_error() {
    match McpServer::spawn("missing", "/nonexistent/mcp-server", &[]).await {
        Err(error @ McpError::Spawn { .. }) => {
            // The message names the server and the command that could not be started.
            let text = error.to_string();
            assert!(text.contains("`missing`"), "{text}");
            assert!(text.contains("/nonexistent/mcp-server"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A process that exits at once: the handshake fails.
    match McpServer::spawn("dies", "sh", &["-c", "exit 3"]).await {
        Err(McpError::Protocol { server, .. }) => assert_eq!(server, "dies"),
        other => panic!("{other:?}"),
    }
}

/// A launcher whose server never answers the handshake: when the handshake times out, the
/// launcher and the child it started are both killed (checked by pid), and what the server
/// said on stderr is in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_killed_with_its_children_and_its_stderr_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (pids, log) = (dir.path().join("pids"), dir.path().join("silent.log"));
    let started = agent_agents::McpCommand::new("silent", "sh")
        .args(["-c", &procs::silent_server_script(&pids)])
        .stderr_log(&log)
        .handshake_timeout(std::time::Duration::from_millis(1500))
        .spawn()
        .await;
    match started {
        Err(McpError::Timeout { server, after }) => {
            assert_eq!(server, "silent");
            assert_eq!(after, std::time::Duration::from_millis(1500));
        }
        other => panic!("{other:?}"),
    }
    let pids = procs::read_pids(&pids);
    assert_eq!(pids.len(), 2, "{pids:?}");
    procs::wait_gone(&pids).unwrap_or_else(|left| panic!("still running: {left:?}"));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("silent server starting"), "{logged:?}");
}

/// Dropping the future that is starting a server (what a Ctrl-C during startup does) kills
/// the server and its children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_starting_server_kills_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let mut starting = Box::pin(
        agent_agents::McpCommand::new("silent", "sh")
            .args(["-c", &procs::silent_server_script(&pids)])
            .stderr_log(dir.path().join("silent.log"))
            .handshake_timeout(std::time::Duration::from_secs(600))
            .spawn(),
    );
    let pids_file = pids.clone();
    let written = tokio::task::spawn_blocking(move || procs::read_pids(&pids_file));
    // Polled by reference: the start is still under way after the select.
    let pids = tokio::select! {
        started = &mut starting => panic!("the silent server cannot start: {started:?}"),
        pids = written => pids.unwrap(),
    };
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(
        pids.iter().all(|&p| procs::alive(p)),
        "{pids:?} run while starting"
    );
    drop(starting);
    procs::wait_gone(&pids).unwrap_or_else(|left| panic!("still running: {left:?}"));
}

/// A server started through a launcher (a shell that runs node) runs in its own process
/// group; once the server and its toolbox are dropped, nothing of that group is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_server_leaves_no_process_of_its_group() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/crashing_mcp_server.js"
    );
    // `; exit` keeps the shell from replacing itself with node, and the shell starts a child
    // that, unlike node, does not stop when its stdin closes: three processes in the group.
    let started = agent_agents::McpCommand::new("launched", "sh")
        .args(["-c", "sleep 300 & node \"$0\"; exit", script])
        .spawn()
        .await;
    let server = match started {
        Ok(server) => server,
        Err(McpError::Protocol { .. })
            if std::process::Command::new("node")
                .arg("-v")
                .output()
                .is_err() =>
        {
            eprintln!("SKIPPED: the MCP process-group test needs node");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let toolbox = server.toolbox(&[]).await.unwrap();
    let group = server.process_id().expect("a spawned server has a pid");
    let members = procs::group_members(group);
    assert!(members.len() >= 3, "the shell, sleep and node: {members:?}");
    drop(server);
    assert!(procs::alive(group), "the toolbox still holds the server");
    drop(toolbox);
    procs::wait_gone(&members).unwrap_or_else(|left| panic!("still running: {left:?}"));
    assert_eq!(procs::group_members(group), Vec::<u32>::new());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

#[tokio::test]
async fn a_toolbox_served_over_mcp_works_with_the_sdk_client() {
    let add = agent_agents::tool(
        "add",
        "Adds two integers",
        |x: Add| async move { Ok(x.a + x.b) },
    );
    let toolbox = Toolbox::new("math").with(add);
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let served = tokio::spawn(agent_agents::ToolboxServer::new(toolbox).serve_io(server_io));
    let remote = McpServer::connect("math", client_io).await.unwrap();
    let tools = remote.toolbox(&[]).await.unwrap();
    assert_eq!(tools.names().collect::<Vec<_>>(), ["add"]);
    let schema = &tools.definitions()[0].parameters;
    assert_eq!(schema["required"], json!(["a", "b"]));
    let set = tools.tool_set();
    let add = set.get("add").unwrap();
    assert_eq!(add.call(json!({"a": 2, "b": 40})).await.unwrap(), json!(42));
    // The served tool validates its arguments: a tool-level error over MCP.
    let error = add.call(json!({"a": "two"})).await.unwrap_err();
    assert!(error.message.contains("schema"), "{}", error.message);
    drop(tools);
    drop(set);
    drop(remote);
    // The client went away: the server stops (the minute only bounds a hang).
    tokio::time::timeout(std::time::Duration::from_secs(60), served)
        .await
        .expect("the server stops when the client disconnects")
        .unwrap()
        .ok();
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Verdict {
    ok: bool,
}

/// The fixture server `crashing_mcp_server.js` with calls timing out after `timeout`; `None`
/// (and one `SKIPPED:` line naming the `test`) without node.
async fn crashing_server(test: &str, timeout: std::time::Duration) -> Option<McpServer> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/crashing_mcp_server.js"
    );
    match McpServer::spawn("crashing", "node", &[script]).await {
        Ok(server) => Some(server.timeout(timeout)),
        Err(McpError::Spawn { source, .. }) => {
            eprintln!("SKIPPED: the MCP {test} test needs node ({source})");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> agent_op::Response {
    let mut reply = agent_op::Response::text("");
    reply.tool_calls = vec![agent_op::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args,
    }];
    reply
}

/// A server that dies in the middle of a tool call: the call is a tool error the model is
/// shown, the run goes on, and later calls fail at once instead of hanging.
///
/// Its requests may take 10 minutes: a call waited on until then would say it "did not
/// answer" (checked below), and the run would overrun the minute it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_crashes_mid_call_is_a_tool_error_and_the_run_goes_on() {
    let Some(server) = crashing_server("crash", std::time::Duration::from_secs(600)).await else {
        return;
    };
    let toolbox = server.toolbox(&[]).await.unwrap();
    let provider = std::sync::Arc::new(agent_provider::ScriptedProvider::new([
        call("c1", "crash", json!({})),
        call("c2", "crash", json!({})),
        agent_op::Response::text("{\"ok\": false}"),
    ]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(toolbox.tool_set());
    let program = agent_agents::agent::<(), Verdict>("m", &toolbox, "Try the tool.").run();
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        agent_interp_par::run(&config, (), program),
    )
    .await
    .expect("a dead server must not be waited on until the timeout")
    .unwrap();
    assert_eq!(outcome.value.unwrap(), Verdict { ok: false });
    let results: Vec<_> = outcome
        .trace
        .events
        .iter()
        .filter_map(|e| match &e.event.kind {
            agent_op::EventKind::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| !r.success), "{results:?}");
    // The model was shown both failures, naming the server.
    let last = &provider.calls()[2].prompt.messages;
    let shown: Vec<&str> = last
        .iter()
        .filter(|m| m.role() == "tool")
        .map(|m| m.content())
        .collect();
    assert_eq!(shown.len(), 2, "{last:?}");
    assert!(shown.iter().all(|s| s.contains("crashing")), "{shown:?}");
    assert!(
        shown.iter().all(|s| !s.contains("did not answer")),
        "the calls failed on the dead server, not by running out of time: {shown:?}"
    );
}

/// A call the server never answers fails as timed out, and one its server dies in the
/// middle of as unavailable: the kinds spans carry as `error.type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_or_loses_its_server_says_which() {
    let Some(server) = crashing_server("timeout", std::time::Duration::from_millis(300)).await
    else {
        return;
    };
    let tools = server.toolbox(&[]).await.unwrap().tool_set();
    let hang = tools.get("hang").expect("hang").call(json!({})).await;
    let hang = hang.expect_err("no answer");
    assert_eq!(hang.kind, ToolErrorKind::TimedOut, "{hang}");
    assert_eq!(hang.kind.as_str(), "timed_out");
    assert!(hang.message.contains("did not answer"), "{hang}");
    let crash = tools.get("crash").expect("crash").call(json!({})).await;
    let crash = crash.expect_err("the server died");
    assert_eq!(crash.kind, ToolErrorKind::Unavailable, "{crash}");
    assert!(crash.message.contains("crashing"), "{crash}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Question {
    question: String,
}

/// An agent served as an MCP tool: each call runs the agent program (its own model calls and
/// tools) under an interpreter and answers with its typed result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_served_over_mcp_answers_through_the_sdk_client() {
    let add = agent_agents::tool(
        "add",
        "Adds two integers",
        |x: Add| async move { Ok(x.a + x.b) },
    );
    let math = Toolbox::new("math").with(add);
    let provider = std::sync::Arc::new(agent_provider::ScriptedProvider::new([
        call("c1", "add", json!({"a": 2, "b": 40})),
        agent_op::Response::text("{\"ok\": true}"),
    ]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(math.tool_set());
    let inner = math.clone();
    let solver = agent_agents::tool(
        "solver",
        "Answers arithmetic questions with the math tools",
        move |q: Question| {
            let (config, toolbox) = (config.clone(), inner.clone());
            async move {
                let program = agent_agents::agent::<(), Verdict>("m", &toolbox, q.question).run();
                let outcome = agent_interp_par::run(&config, (), program)
                    .await
                    .map_err(|e| agent_op::ToolError::failed(e.to_string()))?;
                let verdict = outcome
                    .value
                    .map_err(|e| agent_op::ToolError::failed(e.to_string()))?;
                Ok(json!({"ok": verdict.ok, "events": outcome.trace.events.len()}))
            }
        },
    );
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let served = Toolbox::new("agents").with(solver);
    tokio::spawn(agent_agents::ToolboxServer::new(served).serve_io(server_io));
    let remote = McpServer::connect("agents", client_io).await.unwrap();
    let tools = remote.toolbox(&[]).await.unwrap().tool_set();
    let answer = tools
        .get("solver")
        .unwrap()
        .call(json!({"question": "Is 2 + 40 = 42?"}))
        .await
        .unwrap();
    assert_eq!(answer["ok"], json!(true), "{answer}");
    assert!(answer["events"].as_u64().unwrap() > 4, "{answer}");
    // The agent really ran: two model calls, the tool's result fed back.
    let calls = provider.calls();
    assert_eq!(calls.len(), 2);
    assert!(
        calls[1].prompt.messages.iter().any(|m| m.content() == "42"),
        "{:?}",
        calls[1].prompt.messages
    );
}
