//! MCP against a real third-party server: `@modelcontextprotocol/server-everything` from npm,
//! installed under `target/mcp-everything` on first use.

#![cfg(feature = "mcp")]

use std::path::PathBuf;
use std::process::Command;

use agent_agents::{McpError, McpServer, Toolbox, with_toolbox};
use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use agent_op::{EventType, ToolErrorKind};
use serde_json::json;

const PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The server's entry point, installed if missing; `None` (said in one line) without npm.
fn server_everything() -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("mcp-everything");
    let entry = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if entry.exists() {
        return Some(entry);
    }
    let installed = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&dir)
        .arg(PACKAGE)
        .status();
    match installed {
        Ok(status) if status.success() && entry.exists() => Some(entry),
        Ok(status) => panic!("npm install {PACKAGE} failed: {status}"),
        Err(e) => {
            eprintln!("SKIPPED: MCP tests need npm to install {PACKAGE} ({e})");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_of_a_real_mcp_server_are_scoped_toolbox_entries() {
    let Some(entry) = server_everything() else {
        return;
    };
    let entry = entry.to_string_lossy().into_owned();
    let server = McpServer::spawn("everything", "node", &[entry.as_str(), "stdio"])
        .await
        .unwrap();
    let toolbox = server.toolbox(&["mcp.everything"]).await.unwrap();
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

#[tokio::test]
async fn a_server_that_dies_or_never_starts_is_a_typed_error() {
    match McpServer::spawn("missing", "/nonexistent/mcp-server", &[]).await {
        Err(McpError::Spawn { server, .. }) => assert_eq!(server, "missing"),
        other => panic!("{other:?}"),
    }
    // A process that exits at once: the handshake fails.
    match McpServer::spawn("dies", "sh", &["-c", "exit 3"]).await {
        Err(McpError::Protocol { server, .. }) => assert_eq!(server, "dies"),
        other => panic!("{other:?}"),
    }
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
    // The client went away: the server stops.
    tokio::time::timeout(std::time::Duration::from_secs(5), served)
        .await
        .expect("the server stops when the client disconnects")
        .unwrap()
        .ok();
}
