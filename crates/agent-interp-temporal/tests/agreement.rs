//! Generated programs give the same result, state and canonical trace on Temporal as under
//! the sequential interpreter (the reference semantics): the third leg of the
//! seq ≡ par property test (`agent-interp-par/tests/agreement.rs`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_interp_temporal::{StartOptions, TemporalError, Worker, connect, start};
use agent_op::agent::{AgentState, react};
use agent_op::crdt::GSet;
use agent_op::{Budget, FnTool, Message, Op, Prompt, Response, ToolSet, op};
use agent_provider::ScriptedProvider;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What a branch saw, merged across branches.
type Seen = GSet<String>;

/// A generated program, as data (it travels to the workflow as the program's input).
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Spec {
    Ask(String),
    Tool(String),
    Fail(String),
    Now,
    Random,
    Seq(Vec<Spec>),
    Par(Vec<Spec>),
    /// Exactly one branch can succeed (the others fail), so the winner does not depend on
    /// which call answers first.
    Race(Vec<Spec>),
    /// `fires`: the body first waits far longer than the timeout.
    Timeout {
        fires: bool,
        body: Box<Spec>,
    },
    Limit {
        calls: u64,
        body: Box<Spec>,
    },
}

impl Spec {
    fn generate(rng: &mut fastrand::Rng, depth: u32) -> Spec {
        let leaf = depth == 0 || rng.u8(..10) < 3;
        if leaf {
            return match rng.u8(..10) {
                0..=5 => Spec::Ask(format!("q{}", rng.u16(..1000))),
                6 | 7 => Spec::Tool(format!("t{}", rng.u16(..1000))),
                8 => Spec::Now,
                _ => Spec::Random,
            };
        }
        let children = |rng: &mut fastrand::Rng| -> Vec<Spec> {
            (0..rng.usize(1..4))
                .map(|_| Spec::generate(rng, depth - 1))
                .collect()
        };
        match rng.u8(..6) {
            0 => Spec::Seq(children(rng)),
            1 => Spec::Par(children(rng)),
            2 => {
                let n = rng.usize(2..4);
                let winner = rng.usize(..n);
                Spec::Race(
                    (0..n)
                        .map(|i| {
                            if i == winner {
                                Spec::generate(rng, depth - 1).without_failures()
                            } else {
                                Spec::Fail(format!("loser {i}"))
                            }
                        })
                        .collect(),
                )
            }
            3 => Spec::Timeout {
                fires: rng.u8(..4) == 0,
                body: Box::new(Spec::generate(rng, depth - 1)),
            },
            4 => Spec::Limit {
                calls: rng.u64(0..6),
                body: Box::new(Spec::generate(rng, depth - 1)),
            },
            _ => Spec::Fail(format!("boom {}", rng.u16(..100))),
        }
    }

    /// The same program with every `Fail` made an `Ask`, so it can win a race.
    fn without_failures(self) -> Spec {
        match self {
            Spec::Fail(text) => Spec::Ask(text),
            Spec::Seq(c) => Spec::Seq(c.into_iter().map(Spec::without_failures).collect()),
            Spec::Par(c) => Spec::Par(c.into_iter().map(Spec::without_failures).collect()),
            Spec::Timeout { body, .. } => Spec::Timeout {
                fires: false,
                body: Box::new(body.without_failures()),
            },
            Spec::Limit { body, .. } => Spec::Limit {
                calls: 100,
                body: Box::new(body.without_failures()),
            },
            other => other,
        }
    }

    /// The most model calls the program can make.
    fn max_calls(&self) -> u64 {
        match self {
            Spec::Ask(_) => 1,
            Spec::Seq(c) | Spec::Par(c) | Spec::Race(c) => c.iter().map(Spec::max_calls).sum(),
            Spec::Timeout { body, .. } | Spec::Limit { body, .. } => body.max_calls(),
            _ => 0,
        }
    }

    fn contains(&self, f: &impl Fn(&Spec) -> bool) -> bool {
        f(self)
            || match self {
                Spec::Seq(c) | Spec::Par(c) | Spec::Race(c) => c.iter().any(|s| s.contains(f)),
                Spec::Timeout { body, .. } | Spec::Limit { body, .. } => body.contains(f),
                _ => false,
            }
    }

    fn build(self) -> Op<Seen, Value> {
        match self {
            Spec::Ask(text) => op::infer_raw("m", Prompt::new().user(text)).and_then(|r| {
                let content = r.content.clone();
                op::modify(move |seen: &mut Seen| {
                    seen.insert(content);
                })
                .map(move |_| Value::String(r.content))
            }),
            Spec::Tool(text) => op::tool("upper", json!({ "text": text })).map(|r| match r {
                Ok(v) => v,
                Err(e) => json!({ "tool_error": e.to_string() }),
            }),
            Spec::Fail(message) => op::fail(message),
            // Time and randomness differ between the two runs; that they run is the point.
            Spec::Now => op::now().map(|_| Value::Null),
            Spec::Random => op::random().map(|_| Value::Null),
            Spec::Seq(children) => {
                op::sequence(children.into_iter().map(Spec::build).collect()).map(Value::Array)
            }
            Spec::Par(children) => {
                op::par(children.into_iter().map(Spec::build).collect()).map(Value::Array)
            }
            Spec::Race(children) => op::race(children.into_iter().map(Spec::build).collect()),
            Spec::Timeout { fires, body } => {
                let body = body.build();
                let (limit, body) = if fires {
                    (
                        Duration::from_secs(1),
                        op::wait_steering(Duration::from_secs(3600)).then(body),
                    )
                } else {
                    (Duration::from_secs(3600), body)
                };
                op::timeout(limit, body).map(|r| r.unwrap_or_else(|_| json!("timed out")))
            }
            Spec::Limit { calls, body } => {
                // Branches running at once may compete for the last of a budget, and which one
                // gets it depends on timing (`op::limit`): as in `agent-interp-par`'s agreement
                // test, a limit whose body forks gets room for every call the body can make.
                let calls = if body.contains(&|s| matches!(s, Spec::Par(_) | Spec::Race(_))) {
                    calls.max(body.max_calls())
                } else {
                    calls
                };
                op::limit(Budget::new().calls(calls), body.build())
                    .map(|r| r.unwrap_or_else(|_| json!("exhausted")))
            }
        }
    }
}

fn echo() -> ScriptedProvider {
    ScriptedProvider::from_fn(|_, p| {
        let last = p
            .messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("echo: {last}")).with_usage(2, 3))
    })
}

fn tools() -> ToolSet {
    let mut tools = ToolSet::new();
    tools.insert(Arc::new(FnTool::new(
        "upper",
        "Upper-cases text.",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        |args: Value| async move {
            Ok(json!(
                args["text"].as_str().unwrap_or_default().to_uppercase()
            ))
        },
    )));
    tools
}

/// Runs `spec` under the sequential interpreter on tokio's paused clock (a timeout that
/// fires takes no time), with the same trace id as the workflow.
fn run_seq(spec: Spec, trace_id: String) -> Result<(Value, Seen, agent_op::Trace), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let config = agent_interp_seq::Config::new()
        .provider(echo())
        .tools(tools())
        .trace_id(trace_id);
    runtime.block_on(async {
        agent_interp_seq::run(&config, Seen::default(), spec.build())
            .await
            .map(|o| (o.value, o.state, o.trace))
            .map_err(|e| e.kind.kind_name().to_owned())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_programs_agree_with_the_sequential_interpreter() {
    let Some(address) =
        support::address("generated_programs_agree_with_the_sequential_interpreter")
    else {
        return;
    };
    let seed = std::env::var("AGREEMENT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("AGREEMENT_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    // At least 50 programs, with every construct represented.
    let mut specs: Vec<Spec> = Vec::new();
    let wanted: [fn(&Spec) -> bool; 5] = [
        |s| matches!(s, Spec::Par(_)),
        |s| matches!(s, Spec::Race(_)),
        |s| matches!(s, Spec::Timeout { fires: true, .. }),
        |s| matches!(s, Spec::Limit { .. }),
        |s| matches!(s, Spec::Tool(_)),
    ];
    while specs.len() < 60 || !wanted.iter().all(|w| specs.iter().any(|s| s.contains(w))) {
        specs.push(Spec::generate(&mut rng, 3));
    }
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("agree");
    // The same programs again on a worker whose runs continue as new after every effect:
    // handing over must not change a result, a state or a trace.
    let handing_over = support::task_queue("agree-handing-over");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (stop_other, other_stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(echo())
        .tools(tools())
        .program("generated", Spec::build)
        .run(async move {
            let _ = stopped.await;
        });
    let other = Worker::new(client.clone(), handing_over.clone())
        .provider(echo())
        .tools(tools())
        .continue_as_new_after(Some(1))
        .build_id("agreement-handing-over")
        .program("generated", Spec::build)
        .run(async move {
            let _ = other_stopped.await;
        });
    // On the handing-over worker each program starts and ends with a model call, so every
    // one that does not fail at once hands over at least once, mid-program.
    let framed: Vec<Spec> = specs
        .iter()
        .map(|spec| {
            Spec::Seq(vec![
                Spec::Ask("before".into()),
                spec.clone(),
                Spec::Ask("after".into()),
            ])
        })
        .collect();
    let test = async {
        let mut handles = Vec::new();
        for (queue, specs) in [(&queue, &specs), (&handing_over, &framed)] {
            for spec in specs {
                handles.push(
                    start(&client, "generated", spec, StartOptions::new(queue.clone()))
                        .await
                        .unwrap(),
                );
            }
        }
        let mut handed_over = 0;
        for (spec, handle) in specs.iter().chain(&framed).zip(&handles) {
            let on_temporal =
                tokio::time::timeout(Duration::from_secs(300), handle.result::<Seen, Value>())
                    .await
                    .expect("every run ends");
            let spec_for_seq = spec.clone();
            let id = handle.workflow_id().to_owned();
            let local = tokio::task::spawn_blocking(move || run_seq(spec_for_seq, id))
                .await
                .unwrap();
            if handle.run_ids().await.unwrap().len() > 1 {
                handed_over += 1;
            }
            match (on_temporal, local) {
                (Ok(o), Ok((value, state, trace))) => {
                    assert_eq!(o.value, value, "value of {spec:?}");
                    assert_eq!(o.state, state, "state of {spec:?}");
                    assert_eq!(o.trace.canonical(), trace.canonical(), "trace of {spec:?}");
                }
                (Err(TemporalError::Run { kind, .. }), Err(local_kind)) => {
                    assert_eq!(kind, local_kind, "error of {spec:?}");
                }
                (t, s) => panic!(
                    "{spec:?}: Temporal gave {:?}, seq gave {:?}",
                    t.map(|o| o.value),
                    s.map(|o| o.0)
                ),
            }
        }
        eprintln!(
            "{} generated programs agreed, and again framed ({handed_over} runs continued as new)",
            specs.len()
        );
        assert!(
            handed_over >= framed.len() / 2,
            "only {handed_over} runs continued as new"
        );
        let _ = stop.send(());
        let _ = stop_other.send(());
    };
    let (ran, other_ran, ()) = tokio::join!(worker, other, test);
    ran.unwrap();
    other_ran.unwrap();
}

/// A model that asks for the `upper` tool once, then answers with what it returned.
fn agent_model(calls: Arc<AtomicU64>) -> ScriptedProvider {
    ScriptedProvider::from_fn(move |_, p| {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(match p.messages.last() {
            Some(Message::Tool { content, .. }) => {
                Response::text(format!("the answer is {content}"))
            }
            Some(m) => Response::tool_call("c1", "upper", json!({ "text": m.content() })),
            None => Response::text("nothing asked"),
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_loop_agrees_with_the_sequential_interpreter() {
    let Some(address) = support::address("an_agent_loop_agrees_with_the_sequential_interpreter")
    else {
        return;
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("agent");
    let calls = Arc::new(AtomicU64::new(0));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(agent_model(calls.clone()))
        .tools(tools())
        .program_with_state("agent", |question: String| {
            (
                AgentState::new("Answer with the tool."),
                react("m", question, 4),
            )
        })
        .run(async move {
            let _ = stopped.await;
        });
    let test = async {
        let handle = start(
            &client,
            "agent",
            "shout this",
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        let outcome = tokio::time::timeout(
            Duration::from_secs(120),
            handle.result::<AgentState, String>(),
        )
        .await
        .expect("the loop ends")
        .unwrap();
        let config = agent_interp_seq::Config::new()
            .provider(agent_model(Arc::new(AtomicU64::new(0))))
            .tools(tools())
            .trace_id(handle.workflow_id());
        let local = agent_interp_seq::run(
            &config,
            AgentState::new("Answer with the tool."),
            react("m", "shout this", 4),
        )
        .await
        .unwrap();
        assert_eq!(outcome.value, "the answer is SHOUT THIS");
        assert_eq!(outcome.value, local.value);
        assert_eq!(outcome.state, local.state);
        assert_eq!(outcome.trace.canonical(), local.trace.canonical());
        assert_eq!(
            calls.load(Ordering::Relaxed),
            2,
            "one model call per turn, each once"
        );
        let _ = stop.send(());
    };
    let (ran, ()) = tokio::join!(worker, test);
    ran.unwrap();
}
