//! The `tracing` spans of a run: GenAI names and attributes, the parent/child shape (branches
//! as siblings under their fork), the link to the JSONL trace, and contents only on opt-in.
//! The same program gives the same span tree under both interpreters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use agent_op::{Budget, EventType, FnTool, Response, ToolError, Trace};
use agent_provider::ScriptedProvider;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// One span as the capturing layer saw it.
#[derive(Clone, Debug, Default)]
struct Captured {
    name: String,
    parent: Option<u64>,
    fields: HashMap<String, String>,
    closed: bool,
}

impl Captured {
    fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    fn otel_name(&self) -> &str {
        self.field("otel.name").unwrap_or(&self.name)
    }
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<(u64, Captured)>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut span = Captured {
            name: attrs.metadata().name().to_owned(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64()),
            ..Captured::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.spans.lock().unwrap().push((id.into_u64(), span));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, span)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        if let Some((_, span)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            span.closed = true;
        }
    }
}

/// The run: a `par` of three model + tool branches inside a `limit`, a `race` whose second
/// branch loses, a failing tool, a recall and a checkpoint.
fn program() -> Op<(), ()> {
    let branch = |city: &'static str| {
        op::infer_raw::<()>(
            "small",
            agent_op::Prompt::default()
                .system("Answer in one word.")
                .user(format!("weather in {city}?")),
        )
        .then(op::tool("weather", json!({"city": city})))
        .map(|_| ())
    };
    let fanned = op::limit(
        Budget::new().calls(10),
        op::par(vec![branch("Oslo"), branch("Rome"), branch("Lima")]),
    );
    // The first branch decides; the second's outcome is discarded.
    let raced = op::race(vec![op::pure(1u32), op::pure(2u32)]);
    fanned
        .then(raced)
        .then(op::tool_call(agent_op::ToolCall {
            id: "call-7".into(),
            name: "broken".into(),
            arguments: json!({}),
        }))
        .then(op::recall("weather", 3))
        .then(op::checkpoint("done"))
}

fn config() -> Config {
    let provider = ScriptedProvider::from_fn(|_, _| {
        let mut reply = Response::text("sunny").with_usage(7, 2);
        reply.cost = Some(agent_op::MicroUsd(1_500));
        // The provider names the model that answered more precisely than the request did.
        reply.model = Some("small-2026-11".into());
        Ok(reply)
    });
    Config::new()
        .provider(provider)
        .tool(FnTool::new(
            "weather",
            "Weather",
            json!({"type": "object"}),
            |args: serde_json::Value| async move { Ok(json!(format!("sun in {}", args["city"]))) },
        ))
        .tool(FnTool::new(
            "broken",
            "Fails",
            json!({"type": "object"}),
            |_: serde_json::Value| async move { Err(ToolError::failed("no luck")) },
        ))
        .memory(agent_memory::InMemoryBackend::new())
        .name("forecaster")
        .trace_id("span-test-0001")
}

/// Runs the program under a capturing subscriber and returns the spans and the trace.
fn capture(parallel: bool, config: Config) -> (Vec<(u64, Captured)>, Trace) {
    capture_at(
        parallel,
        config,
        tracing_subscriber::filter::LevelFilter::TRACE,
    )
}

/// Like [`capture`], with only the spans at `level` and above recorded.
fn capture_at(
    parallel: bool,
    config: Config,
    level: tracing_subscriber::filter::LevelFilter,
) -> (Vec<(u64, Captured)>, Trace) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone().with_filter(level));
    let trace = tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let outcome = if parallel {
                agent_interp_par::run(&config, (), program()).await
            } else {
                agent_interp_seq::run(&config, (), program()).await
            };
            outcome.unwrap().trace
        })
    });
    let spans = capture.spans.lock().unwrap().clone();
    (spans, trace)
}

fn by_id(spans: &[(u64, Captured)]) -> HashMap<u64, &Captured> {
    spans.iter().map(|(id, s)| (*id, s)).collect()
}

/// The span tree as indented otel names, children in creation order.
fn shape(spans: &[(u64, Captured)]) -> Vec<String> {
    fn walk(spans: &[(u64, Captured)], parent: Option<u64>, depth: usize, out: &mut Vec<String>) {
        for (id, span) in spans.iter().filter(|(_, s)| s.parent == parent) {
            out.push(format!("{}{}", "  ".repeat(depth), span.otel_name()));
            walk(spans, Some(*id), depth + 1, out);
        }
    }
    let mut out = Vec::new();
    walk(spans, None, 0, &mut out);
    out
}

#[test]
fn a_run_is_a_tree_of_genai_spans_linked_to_its_trace() {
    let (spans, trace) = capture(true, config());
    let index = by_id(&spans);
    assert!(spans.iter().all(|(_, s)| s.closed), "every span is closed");

    let (root_id, root) = spans.iter().find(|(_, s)| s.parent.is_none()).unwrap();
    assert_eq!(root.name, "invoke_agent");
    assert_eq!(root.otel_name(), "invoke_agent forecaster");
    assert_eq!(root.field("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(root.field("gen_ai.agent.name"), Some("forecaster"));
    assert_eq!(root.field("effect_agents.trace_id"), Some("span-test-0001"));

    // Three model calls, each under its own branch, the branches siblings under one fork
    // inside the limit scope, itself under the run.
    let chats: Vec<&Captured> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "chat")
        .collect();
    assert_eq!(chats.len(), 3);
    let branches: Vec<u64> = chats.iter().map(|c| c.parent.unwrap()).collect();
    let forks: Vec<u64> = branches.iter().map(|b| index[b].parent.unwrap()).collect();
    assert!(branches.iter().all(|b| index[b].name == "branch"));
    assert_eq!(
        branches
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3
    );
    assert!(forks.iter().all(|f| *f == forks[0]), "siblings of one fork");
    let fork = index[&forks[0]];
    assert_eq!(fork.otel_name(), "par");
    assert_eq!(fork.field("effect_agents.fork.branches"), Some("3"));
    let limit = index[&fork.parent.unwrap()];
    assert_eq!(limit.otel_name(), "limit");
    assert_eq!(limit.parent, Some(*root_id));

    let chat = chats[0];
    assert_eq!(chat.otel_name(), "chat small");
    assert_eq!(chat.field("gen_ai.operation.name"), Some("chat"));
    assert_eq!(chat.field("gen_ai.provider.name"), Some("scripted"));
    assert_eq!(chat.field("gen_ai.request.model"), Some("small"));
    assert_eq!(chat.field("gen_ai.response.model"), Some("small-2026-11"));
    assert_eq!(chat.field("gen_ai.usage.input_tokens"), Some("7"));
    assert_eq!(chat.field("gen_ai.usage.output_tokens"), Some("2"));
    assert_eq!(
        chat.field("gen_ai.response.finish_reasons"),
        Some("[\"stop\"]")
    );
    // Contents are off by default.
    assert_eq!(chat.field("gen_ai.input.messages"), None);
    assert_eq!(chat.field("gen_ai.output.messages"), None);

    // The span names the events it covers: in its branch, `infer_start` .. `infer_end`.
    let branch = index[&chat.parent.unwrap()];
    let branch_id = branch.field("effect_agents.trace_id").unwrap();
    let events: Vec<&str> = trace
        .events
        .iter()
        .filter(|e| e.trace_id.as_str() == branch_id)
        .map(|e| e.event.event_type().as_str())
        .collect();
    let first: usize = chat
        .field("effect_agents.event.first")
        .unwrap()
        .parse()
        .unwrap();
    let last: usize = chat
        .field("effect_agents.event.last")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!((events[first], events[last]), ("infer_start", "infer_end"));

    let tools: Vec<&Captured> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.name == "execute_tool")
        .collect();
    assert_eq!(tools.len(), 4);
    let weather = tools
        .iter()
        .find(|t| t.field("gen_ai.tool.name") == Some("weather"))
        .unwrap();
    assert_eq!(weather.otel_name(), "execute_tool weather");
    assert_eq!(weather.field("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(weather.field("error.type"), None);
    assert_eq!(weather.field("gen_ai.tool.call.arguments"), None);
    let broken = tools
        .iter()
        .find(|t| t.field("gen_ai.tool.name") == Some("broken"))
        .unwrap();
    assert_eq!(broken.field("error.type"), Some("failed"));
    assert_eq!(broken.field("gen_ai.tool.call.id"), Some("call-7"));
    assert!(trace.events.iter().any(|e| matches!(&e.event.kind,
        agent_op::EventKind::ToolCall(c) if c.call_id.as_deref() == Some("call-7"))));
    assert_eq!(broken.field("otel.status_code"), Some("ERROR"));
    // The error's own text, which receivers show as the span's status message.
    assert_eq!(broken.field("otel.status_description"), Some("no luck"));
    assert_eq!(broken.parent, Some(*root_id));

    // The race: its losing branch is marked cancelled.
    let race = spans
        .iter()
        .find(|(_, s)| s.otel_name() == "race")
        .map(|(id, _)| *id)
        .unwrap();
    let raced: Vec<&Captured> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.parent == Some(race))
        .collect();
    assert_eq!(raced.len(), 2);
    assert_eq!(raced[0].field("effect_agents.cancelled"), None);
    assert_eq!(raced[1].field("effect_agents.cancelled"), Some("true"));
    assert_eq!(index[&race].field("effect_agents.fork.winner"), Some("0"));
    // Branches that recorded nothing claim no events.
    assert_eq!(raced[0].field("effect_agents.event.first"), None);
    // The run covers its own events, first to last.
    let own = trace
        .events
        .iter()
        .filter(|e| e.trace_id.as_str() == "span-test-0001")
        // The run's end is recorded once its span has closed.
        .filter(|e| e.event.event_type() != EventType::RunEnd)
        .count();
    assert_eq!(root.field("effect_agents.event.first"), Some("0"));
    assert_eq!(
        root.field("effect_agents.event.last"),
        Some((own - 1).to_string().as_str())
    );

    let recall = spans
        .iter()
        .find(|(_, s)| s.otel_name() == "recall")
        .unwrap();
    assert_eq!(recall.1.field("effect_agents.memory.results"), Some("0"));
    assert!(
        spans.iter().any(|(_, s)| s.name == "checkpoint"
            && s.field("effect_agents.checkpoint.name") == Some("done"))
    );
}

#[test]
fn at_info_level_calls_nest_under_the_agent_without_the_scaffolding() {
    for parallel in [true, false] {
        let (spans, _) = capture_at(
            parallel,
            config(),
            tracing_subscriber::filter::LevelFilter::INFO,
        );
        // No fork, branch or scope spans; every call directly under the run, which is
        // what a receiver at its default level shows.
        let tree = shape(&spans);
        assert_eq!(tree[0], "invoke_agent forecaster", "{tree:#?}");
        assert!(tree.len() > 5, "{tree:#?}");
        for line in &tree[1..] {
            assert!(
                line.starts_with("  ") && !line.starts_with("   "),
                "{tree:#?}"
            );
            let name = line.trim();
            assert!(
                ["chat", "execute_tool", "recall", "checkpoint"]
                    .iter()
                    .any(|kind| name.starts_with(kind)),
                "{tree:#?}"
            );
        }
    }
}

#[test]
fn both_interpreters_give_the_same_span_tree() {
    let (par, _) = capture(true, config());
    let (seq, _) = capture(false, config());
    let par_shape = shape(&par);
    let seq_shape = shape(&seq);
    // The sequential interpreter never starts the race's losing branch's work, but both
    // open its span; the trees match line for line.
    assert_eq!(par_shape, seq_shape, "{par_shape:#?}");
}

#[test]
fn the_agent_span_carries_what_the_run_spent_and_its_answer() {
    for export in [false, true] {
        let (spans, trace) = capture(true, config().export_content(export));
        let root = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.name == "invoke_agent")
            .unwrap();
        let spent = trace.spend().total();
        assert!(spent.calls > 0);
        assert_eq!(
            root.field("gen_ai.usage.input_tokens"),
            Some(spent.tokens.input_tokens.to_string().as_str())
        );
        assert_eq!(
            root.field("gen_ai.usage.output_tokens"),
            Some(spent.tokens.output_tokens.to_string().as_str())
        );
        let cost: f64 = root
            .field("effect_agents.cost.usd")
            .unwrap()
            .parse()
            .unwrap();
        assert!((cost - spent.calls as f64 * 0.0015).abs() < 1e-9, "{cost}");
        // Each call's own cost is on its chat span.
        let chat = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.name == "chat")
            .unwrap();
        assert_eq!(chat.field("effect_agents.cost.usd"), Some("0.0015"));
        // The answer (this program's is `()`) only when contents are exported.
        let answer = root.field("gen_ai.output.messages");
        match export {
            true => assert!(answer.unwrap().contains(r#""content":"()""#), "{answer:?}"),
            false => assert_eq!(answer, None),
        }
    }
}

/// With content exported and `Config::goal` set, the agent span shows the run's question and
/// its whole answer (not the event's 200-character preview).
#[test]
fn the_agent_span_carries_the_goal_and_the_whole_answer() {
    let answer = "a long answer ".repeat(40);
    for export in [false, true] {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        let config = Config::new()
            .goal("What is the long answer?")
            .export_content(export);
        let expected = answer.clone();
        tracing::subscriber::with_default(subscriber, || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let value = rt
                .block_on(agent_interp_par::run(
                    &config,
                    (),
                    op::pure::<(), String>(expected),
                ))
                .unwrap()
                .value;
            assert_eq!(value.len(), 560);
        });
        let spans = capture.spans.lock().unwrap().clone();
        let root = spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.name == "invoke_agent")
            .unwrap();
        let (input, output) = (
            root.field("gen_ai.input.messages"),
            root.field("gen_ai.output.messages"),
        );
        if !export {
            assert_eq!((input, output), (None, None));
            continue;
        }
        let input: serde_json::Value = serde_json::from_str(input.unwrap()).unwrap();
        assert_eq!(
            input,
            serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": "What is the long answer?"}]}])
        );
        let output: serde_json::Value = serde_json::from_str(output.unwrap()).unwrap();
        // An output message as the conventions define it: `finish_reason` is required.
        assert_eq!(
            output,
            serde_json::json!([{
                "role": "assistant",
                "parts": [{"type": "text", "content": answer}],
                "finish_reason": "stop",
            }])
        );
    }
}

#[test]
fn message_contents_are_recorded_only_on_opt_in() {
    let (spans, _) = capture(false, config().export_content(true));
    let chat = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == "chat")
        .unwrap();
    // The GenAI conventions' shape: a role and typed parts per message.
    let input: serde_json::Value =
        serde_json::from_str(chat.field("gen_ai.input.messages").unwrap()).unwrap();
    // The leading system message is the instructions, recorded apart, not twice.
    assert_eq!(input.as_array().unwrap().len(), 1, "{input}");
    assert_eq!(input[0]["role"], "user", "{input}");
    assert_eq!(input[0]["parts"][0]["type"], "text", "{input}");
    assert!(
        input[0]["parts"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("weather in"),
        "{input}"
    );
    let instructions: serde_json::Value =
        serde_json::from_str(chat.field("gen_ai.system_instructions").unwrap()).unwrap();
    assert_eq!(
        instructions,
        serde_json::json!([{"type": "text", "content": "Answer in one word."}])
    );
    let output: serde_json::Value =
        serde_json::from_str(chat.field("gen_ai.output.messages").unwrap()).unwrap();
    assert_eq!(
        output,
        serde_json::json!([{
            "role": "assistant",
            "parts": [{"type": "text", "content": "sunny"}],
            "finish_reason": "stop",
        }])
    );
    let weather = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.field("gen_ai.tool.name") == Some("weather"))
        .unwrap();
    assert!(
        weather
            .field("gen_ai.tool.call.arguments")
            .unwrap()
            .contains("city")
    );
    assert!(
        weather
            .field("gen_ai.tool.call.result")
            .unwrap()
            .contains("sun in")
    );
}

#[test]
fn the_trace_is_the_same_with_or_without_a_subscriber() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let plain = rt
        .block_on(agent_interp_par::run(&config(), (), program()))
        .unwrap();
    let (_, traced) = capture(true, config());
    assert_eq!(plain.trace.canonical(), traced.canonical());
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Rain {
    rain: bool,
}

/// A sub-agent offered as a tool: `execute_tool {name}` for the model's call, with the
/// sub-agent's `invoke_agent {name}` inside it and the sub-agent's model calls inside that.
/// Runs a boss agent whose sub-agent `forecaster` (answering the call `b1`) has `calls`
/// model calls of budget; returns the spans.
fn sub_agent_run(calls: u64) -> Vec<(u64, Captured)> {
    use agent_agents::{SubAgent, Toolbox, agent};

    let provider = ScriptedProvider::from_fn(|model, prompt| {
        let asked = prompt.messages.len();
        Ok(match (model, asked) {
            ("boss", 2) => Response::tool_call("b1", "forecaster", json!({"city": "Oslo"})),
            _ => Response::text("{\"rain\": true}"),
        })
    });
    let forecaster = SubAgent::<()>::new(
        "forecaster",
        "Forecasts rain",
        Budget::new().calls(calls),
        |c: City| {
            agent::<(), Rain>(
                "helper",
                &Toolbox::new("none"),
                format!("Rain in {}?", c.city),
            )
        },
    );
    let boss = agent::<(), Rain>("boss", &Toolbox::new("none"), "Umbrella?").sub_agent(forecaster);
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let config = Config::new().provider(provider);
        let outcome = rt
            .block_on(agent_interp_seq::run(&config, (), boss.run()))
            .unwrap();
        assert!(outcome.value.unwrap().rain);
    });
    capture.spans.lock().unwrap().clone()
}

/// A sub-agent offered as a tool: `execute_tool {name}` for the model's call, with the
/// sub-agent's `invoke_agent {name}` inside it and the sub-agent's model calls inside that.
#[test]
fn a_sub_agent_is_an_agent_span_inside_the_tool_call_that_reached_it() {
    let spans = sub_agent_run(3);
    let index = by_id(&spans);
    let (agent_id, sub) = spans
        .iter()
        .find(|(_, s)| {
            s.name == "invoke_agent" && s.field("gen_ai.agent.name") == Some("forecaster")
        })
        .expect("an invoke_agent span for the sub-agent");
    assert_eq!(sub.otel_name(), "invoke_agent forecaster");
    let call = index[&sub.parent.unwrap()];
    assert_eq!(call.otel_name(), "execute_tool forecaster");
    assert_eq!(call.field("gen_ai.tool.call.id"), Some("b1"));
    assert_eq!(call.field("error.type"), None);
    // The helper's model call is inside the sub-agent's span.
    let helper = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.otel_name() == "chat helper")
        .unwrap();
    let mut ancestor = helper.parent;
    let mut inside = false;
    while let Some(id) = ancestor {
        inside |= id == *agent_id;
        ancestor = index[&id].parent;
    }
    assert!(inside, "{:#?}", shape(&spans));

    // With no budget the sub-agent fails: a tool error, and its spans say so.
    let spans = sub_agent_run(0);
    let call = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.otel_name() == "execute_tool forecaster")
        .unwrap();
    assert_eq!(call.field("error.type"), Some("failed"), "{call:?}");
    let sub = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.otel_name() == "invoke_agent forecaster")
        .unwrap();
    assert_eq!(sub.field("otel.status_code"), Some("ERROR"));
}

/// Failures mark the spans they end: the call, the scopes it was in, and the run.
#[test]
fn failures_mark_the_spans_they_end() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // A budget of one call, asked for two: the scope ends early, the run goes on.
        let ask = || op::infer_raw::<()>("small", agent_op::Prompt::default().user("hi"));
        let limited = op::limit(Budget::new().calls(1), ask().then(ask())).map(|r| r.is_err());
        // A tool outside a tool scope is refused (a tool error value); then a tool the run
        // does not have at all fails the run.
        let scope = agent_op::ToolScope::new("none", agent_op::ToolSet::new());
        let program = limited
            .then(op::with_tools(scope, op::tool("missing", json!({}))))
            .then(op::tool("missing", json!({})));
        let error = rt
            .block_on(agent_interp_seq::run(&config(), (), program))
            .unwrap_err();
        assert!(error.kind.to_string().contains("missing"), "{}", error.kind);
    });
    let spans = capture.spans.lock().unwrap().clone();
    let find = |name: &str| {
        spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| s.otel_name() == name)
            .unwrap_or_else(|| panic!("no `{name}` span in {:#?}", shape(&spans)))
    };
    assert_eq!(
        find("limit").field("effect_agents.scope.ended"),
        Some("exhausted")
    );
    let calls: Vec<&Captured> = spans
        .iter()
        .map(|(_, s)| s)
        .filter(|s| s.otel_name() == "execute_tool missing")
        .collect();
    assert_eq!(calls.len(), 2);
    // The refused call, and the call of a tool the run lacks, each end their span failed and
    // name the events they cover.
    assert_eq!(calls[0].field("error.type"), Some("denied"));
    assert_eq!(calls[1].field("error.type"), Some("unknown_tool"));
    assert!(
        calls
            .iter()
            .all(|c| c.field("effect_agents.event.last").is_some())
    );
    assert_eq!(find("with_tools").field("error.type"), None);
    let root = find("invoke_agent forecaster");
    assert_eq!(root.field("error.type"), Some("unknown_tool"));
    assert_eq!(root.field("otel.status_code"), Some("ERROR"));
    assert!(spans.iter().all(|(_, s)| s.closed));
}
