//! The agent-shaped run the export tests send: two model calls in a `par` and a tool call a
//! model asked for, under a named run.

use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use agent_op::{FnTool, Response};
use serde_json::json;

/// The spans the run makes at `INFO` (the exporter's default level): root, two chats, two
/// tools.
pub const SPANS: usize = 5;

/// The spans the run makes at `DEBUG`: also the fork and its two branches.
#[allow(dead_code)] // Not every test exports at `DEBUG`.
pub const SPANS_DEBUG: usize = 8;

/// What the program answers.
pub const ANSWER: &str = "two answers and a lookup";

/// The goal the run is given (`Config::goal`).
pub const GOAL: &str = "Ask twice, then look it up.";

/// The program.
pub fn program() -> Op<(), String> {
    let ask = |q: &'static str| {
        let prompt = agent_op::Prompt::default()
            .system("Answer in one word.")
            .user(q);
        op::infer_raw::<()>("small", prompt).map(|_| ())
    };
    op::par(vec![ask("first?"), ask("second?")])
        .then(op::tool_call(agent_op::ToolCall {
            id: "call-1".into(),
            name: "lookup".into(),
            arguments: json!({"q": "x"}),
        }))
        .then(op::tool_call(agent_op::ToolCall {
            id: "call-2".into(),
            name: "broken".into(),
            arguments: json!({}),
        }))
        .map(|_| ANSWER.to_owned())
}

/// A scripted model (11 tokens in, 3 out, $0.0015 per call) and the `lookup` tool, for a
/// run named `name` with [`GOAL`].
pub fn config(name: &str) -> Config {
    Config::new()
        .provider(agent_provider::ScriptedProvider::from_fn(|_, _| {
            Ok(Response::text("ok")
                .with_usage(11, 3)
                .with_cost(agent_op::MicroUsd(1_500)))
        }))
        .tool(FnTool::new(
            "lookup",
            "Looks up",
            json!({"type": "object"}),
            |_: serde_json::Value| async { Ok(json!("found")) },
        ))
        .tool(FnTool::new(
            "broken",
            "Always fails",
            json!({"type": "object"}),
            |_: serde_json::Value| async {
                Err(agent_op::ToolError::failed("the index is offline"))
            },
        ))
        .name(name)
        .goal(GOAL)
}
