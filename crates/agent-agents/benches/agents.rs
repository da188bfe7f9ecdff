//! What the typed layer costs.
//!
//! - `agent.parse_typed`: MB/s parsing a 10 kB JSON reply into a derived struct through
//!   [`LlmOutput::parse`]; baseline: `serde_json::from_str` of the same text.
//! - `agent.parse_typed_fenced`: the same reply inside a Markdown code fence after a line of
//!   prose (the extraction path); baseline: `serde_json::from_str` of the bare JSON.
//! - `agent.loop_turn`: µs per turn of [`agent`] (a scripted reply calling one tool, the
//!   tool's result fed back), over 200 turns under the sequential interpreter; baseline: the
//!   same turns written by hand as a loop of `infer_raw` and `tool` with the same model,
//!   tool and message bookkeeping — so the ratio is what the agent layer adds (the toolbox
//!   scope, the `par` of tool calls, typed parsing).
//! - `agent.loop_turn_recording_content`: the same agent loop recording whole prompts and
//!   replies in its trace (the default), against `record_content(false)`.
//! - `agent.loop_turn_10`, `agent.loop_turn_100`, `agent.loop_turn_1000`: µs per turn of
//!   [`agent`] runs of that many turns (the same scripted model and tool, recording content),
//!   1,000 turns per sample, so whether a turn costs more as the conversation grows shows
//!   across the three; baseline: the least a loop of that many turns can do, written by hand
//!   outside the interpreter — ask the scripted model directly, append its reply to the
//!   prompt's messages, call the tool directly and append its result.
//! - `mcp.call`: µs per tool call through [`McpServer`](agent_agents::McpServer) to a local
//!   stdio MCP server (this benchmark's own executable serving a toolbox with
//!   [`ToolboxServer`](agent_agents::ToolboxServer)); baseline: the same tool called in
//!   process, which is the server's own handling time (validation and the function).

use std::hint::black_box;
use std::time::Duration;

use agent_agents::LlmOutput;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // read only by the parser
struct Report {
    title: String,
    items: Vec<Item>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Item {
    id: u32,
    name: String,
    score: f64,
    tags: Vec<String>,
    done: bool,
}

fn reply() -> String {
    let mut items = Vec::new();
    let mut i = 0;
    loop {
        items.push(serde_json::json!({
            "id": i, "name": format!("item number {i}"), "score": f64::from(i) * 0.37,
            "tags": ["alpha", "beta"], "done": i % 2 == 0
        }));
        let text = serde_json::json!({"title": "Weekly report", "items": items}).to_string();
        if text.len() >= 10_000 {
            return text;
        }
        i += 1;
    }
}

fn rate(bytes: usize, samples: &[Duration], per: u32) -> f64 {
    bytes as f64 / 1e6 / bench_kit::median_per(samples, f64::from(per), bench_kit::secs)
}

const TURNS: usize = 200;

/// A model calling `echo` on every turn but the last of each run of `turns`, which answers.
fn model(turns: usize) -> agent_provider::ScriptedProvider {
    let n = std::sync::atomic::AtomicUsize::new(0);
    agent_provider::ScriptedProvider::from_fn(move |_, _| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if (i + 1) % turns == 0 {
            Ok(agent_op::Response::text("{\"done\": true}"))
        } else {
            Ok(agent_op::Response::tool_call(
                format!("c{i}"),
                "echo",
                serde_json::json!({"text": "hi"}),
            ))
        }
    })
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Done {
    done: bool,
}

fn by_hand(model: String, messages: agent_op::Messages, left: usize) -> agent_op::Op<(), usize> {
    use agent_op::op;
    let prompt = agent_op::Prompt::from_messages(messages.clone());
    op::infer_raw(model.clone(), prompt).and_then(move |reply| {
        if reply.tool_calls.is_empty() || left == 0 {
            return op::pure(left);
        }
        let call = reply.tool_calls[0].clone();
        let mut messages = messages;
        messages.push(reply.to_message());
        op::tool(call.name.clone(), call.arguments.clone()).and_then(move |result| {
            let text = result
                .map(|v| v.to_string())
                .unwrap_or_else(|e| e.to_string());
            messages.push(agent_op::Message::tool_result(call.id, text));
            by_hand(model, messages, left - 1)
        })
    })
}

/// What the loop benchmarks run on: a current-thread runtime and a toolbox with `echo`.
fn loop_setup() -> (tokio::runtime::Runtime, agent_agents::Toolbox) {
    use agent_agents::{Toolbox, tool};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let echo = tool("echo", "Echoes", |e: Echo| async move { Ok(e.text) });
    (rt, Toolbox::new("echo").with(echo))
}

fn loop_turn() {
    use agent_agents::agent;
    let (rt, toolbox) = loop_setup();
    // The agent's turns, recording whole prompts and replies in the trace or not.
    let run_agent = |content: bool| {
        let config = agent_interp_seq::Config::new()
            .provider(model(TURNS))
            .tools(toolbox.tool_set())
            .record_content(content);
        let program = agent::<(), Done>("m", &toolbox, "go")
            .max_turns(TURNS as u32)
            .run();
        bench_kit::time(|| {
            let outcome = rt.block_on(agent_interp_seq::run(&config, (), program));
            assert!(outcome.expect("runs").value.is_ok());
        })
        .0
    };
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || run_agent(true),
        || {
            let config = agent_interp_seq::Config::new()
                .provider(model(TURNS))
                .tools(toolbox.tool_set());
            let opening = agent_op::Messages::from([
                agent_op::Message::system("Use the tools."),
                agent_op::Message::user("go"),
            ]);
            let program = by_hand("m".into(), opening, TURNS);
            bench_kit::time(|| {
                black_box(
                    rt.block_on(agent_interp_seq::run(&config, (), program))
                        .ok(),
                );
            })
            .0
        },
    );
    bench_kit::report(
        "agent.loop_turn",
        bench_kit::median_per(&subject, TURNS as f64, bench_kit::us),
        "µs/turn",
        bench_kit::median_per(&baseline, TURNS as f64, bench_kit::us),
    );

    // What recording whole prompts and replies in the trace (the default) costs a turn.
    let (with, without) = bench_kit::interleaved(9, || run_agent(true), || run_agent(false));
    bench_kit::report(
        "agent.loop_turn_recording_content",
        bench_kit::median_per(&with, TURNS as f64, bench_kit::us),
        "µs/turn",
        bench_kit::median_per(&without, TURNS as f64, bench_kit::us),
    );
}

/// `agent.loop_turn_{turns}`: 1,000 turns per sample, in runs of `turns`.
fn loop_turns(turns: usize) {
    use agent_agents::agent;
    use agent_op::{Message, Prompt, Provider};
    const PER_SAMPLE: usize = 1_000;
    let runs = PER_SAMPLE / turns;
    let (rt, toolbox) = loop_setup();
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            let config = agent_interp_seq::Config::new()
                .provider(model(turns))
                .tools(toolbox.tool_set());
            let programs: Vec<_> = (0..runs)
                .map(|_| {
                    agent::<(), Done>("m", &toolbox, "go")
                        .max_turns(turns as u32)
                        .run()
                })
                .collect();
            bench_kit::time(|| {
                for program in programs {
                    let outcome = rt.block_on(agent_interp_seq::run(&config, (), program));
                    assert!(outcome.expect("runs").value.is_ok());
                }
            })
            .0
        },
        || {
            let provider = model(turns);
            let tools = toolbox.tool_set();
            let echo = tools.get("echo").expect("echo");
            let prompts: Vec<Prompt> = (0..runs)
                .map(|_| {
                    Prompt::new()
                        .system("Use the tools.")
                        .user("go")
                        .tools(toolbox.definitions())
                })
                .collect();
            bench_kit::time(|| {
                for mut prompt in prompts {
                    let answered = rt.block_on(async {
                        loop {
                            let reply = provider.chat("m", &prompt).await.expect("scripted");
                            prompt.messages.push(reply.to_message());
                            let Some(call) = reply.tool_calls.first() else {
                                return reply.content;
                            };
                            let result = echo.call(call.arguments.clone()).await.expect("echo");
                            prompt
                                .messages
                                .push(Message::tool_output(call.id.clone(), &result));
                        }
                    });
                    black_box(answered);
                }
            })
            .0
        },
    );
    bench_kit::report(
        &format!("agent.loop_turn_{turns}"),
        bench_kit::median_per(&subject, PER_SAMPLE as f64, bench_kit::us),
        "µs/turn",
        bench_kit::median_per(&baseline, PER_SAMPLE as f64, bench_kit::us),
    );
}

/// The toolbox both sides of `mcp.call` use.
fn echo_box() -> agent_agents::Toolbox {
    let echo = agent_agents::tool("echo", "Echoes", |e: Echo| async move { Ok(e.text) });
    agent_agents::Toolbox::new("bench").with(echo)
}

const SERVE: &str = "__serve_mcp_on_stdio__";

fn mcp_call() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    const CALLS: u32 = 300;
    let args = serde_json::json!({"text": "hello"});
    let exe = std::env::current_exe().expect("this executable");
    let server = rt
        .block_on(agent_agents::McpServer::spawn("bench", exe, &[SERVE]))
        .expect("the MCP server starts");
    let remote = rt.block_on(server.toolbox(&[])).expect("tools").tool_set();
    let remote = remote.get("echo").expect("echo").clone();
    let local = echo_box().tool_set();
    let local = local.get("echo").expect("echo").clone();
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            bench_kit::time(|| {
                for _ in 0..CALLS {
                    black_box(rt.block_on(remote.call(args.clone())).expect("call"));
                }
            })
            .0
        },
        || {
            bench_kit::time(|| {
                for _ in 0..CALLS {
                    black_box(rt.block_on(local.call(args.clone())).expect("call"));
                }
            })
            .0
        },
    );
    bench_kit::report(
        "mcp.call",
        bench_kit::median_per(&subject, f64::from(CALLS), bench_kit::us),
        "µs/call",
        bench_kit::median_per(&baseline, f64::from(CALLS), bench_kit::us),
    );
}

fn main() {
    if std::env::args().any(|a| a == SERVE) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Serve until the benchmark disconnects.
        let _ = rt.block_on(agent_agents::ToolboxServer::new(echo_box()).serve_stdio());
        return;
    }
    if bench_kit::enabled("mcp.call") {
        mcp_call();
    }
    if bench_kit::enabled("agent.loop_turn")
        || bench_kit::enabled("agent.loop_turn_recording_content")
    {
        loop_turn();
    }
    for turns in [10, 100, 1_000] {
        if bench_kit::enabled(&format!("agent.loop_turn_{turns}")) {
            loop_turns(turns);
        }
    }
    let json = reply();
    let fenced = format!("Here is the report you asked for:\n```json\n{json}\n```\n");
    const PER: u32 = 200;
    for (name, text) in [
        ("agent.parse_typed", &json),
        ("agent.parse_typed_fenced", &fenced),
    ] {
        if !bench_kit::enabled(name) {
            continue;
        }
        assert!(Report::parse(text).is_ok());
        let (subject, baseline) = bench_kit::interleaved(
            15,
            || {
                bench_kit::time(|| {
                    for _ in 0..PER {
                        black_box(Report::parse(black_box(text)).ok());
                    }
                })
                .0
            },
            || {
                bench_kit::time(|| {
                    for _ in 0..PER {
                        black_box(serde_json::from_str::<Report>(black_box(&json)).ok());
                    }
                })
                .0
            },
        );
        bench_kit::report(
            name,
            rate(json.len(), &subject, PER),
            "MB/s",
            rate(json.len(), &baseline, PER),
        );
    }
}
