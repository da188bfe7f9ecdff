//! The agent loop against scripted models, under both interpreters.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_agents::{AgentError, Toolbox, agent, tool};
use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use agent_op::{Budget, EventType, FnTool, Message, Response, ToolCall};
use agent_provider::ScriptedProvider;
use serde_json::{Value, json};
use tokio::time::Instant;

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Advice {
    umbrella: bool,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Query {
    city: String,
}

fn weather_box(runs: Arc<AtomicUsize>) -> Toolbox {
    let weather = tool("weather", "Today's weather in a city", move |q: Query| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok(format!("rain in {}", q.city))
        }
    })
    .read_only()
    .needs("net");
    Toolbox::new("weather").with(weather)
}

fn calls(pairs: &[(&str, &str, Value)]) -> Response {
    let mut reply = Response::text("");
    reply.tool_calls = pairs
        .iter()
        .map(|(id, name, args)| ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: args.clone(),
        })
        .collect();
    reply
}

/// On a paused clock (virtual time): each weather call takes exactly 150 ms.
#[tokio::test(start_paused = true)]
async fn the_loop_runs_tools_feeds_results_back_in_order_and_returns_a_typed_answer() {
    for parallel in [false, true] {
        let runs = Arc::new(AtomicUsize::new(0));
        let provider = Arc::new(ScriptedProvider::new([
            calls(&[
                ("c1", "weather", json!({"city": "Oslo"})),
                ("c2", "weather", json!({"city": "Bergen"})),
            ]),
            Response::text("{\"umbrella\": true}"),
        ]));
        let toolbox = weather_box(runs.clone());
        let config = Config::new()
            .shared_provider(provider.clone())
            .tools(toolbox.tool_set());
        let program = agent::<(), Advice>("small", &toolbox, "Umbrella in Oslo or Bergen?").run();
        let started = Instant::now();
        let outcome = if parallel {
            agent_interp_par::run(&config, (), program).await
        } else {
            agent_interp_seq::run(&config, (), program).await
        }
        .unwrap();
        let elapsed = started.elapsed();
        assert_eq!(outcome.value.unwrap(), Advice { umbrella: true });
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let second = &provider.calls()[1].prompt;
        let n = second.messages.len();
        assert_eq!(
            second.messages[n - 2],
            Message::tool_result("c1", "rain in Oslo")
        );
        assert_eq!(
            second.messages[n - 1],
            Message::tool_result("c2", "rain in Bergen")
        );
        assert_eq!(provider.calls()[0].prompt.tools.len(), 1);
        // Under the parallel interpreter the two calls overlap; under the sequential one they
        // run one after the other.
        let expected = if parallel { 150 } else { 300 };
        assert_eq!(
            elapsed,
            Duration::from_millis(expected),
            "parallel: {parallel}"
        );
    }
}

#[tokio::test]
async fn a_tool_outside_the_toolbox_is_denied_and_the_model_is_told() {
    for parallel in [false, true] {
        a_tool_outside_the_toolbox_is_denied(parallel).await;
    }
}

async fn a_tool_outside_the_toolbox_is_denied(parallel: bool) {
    let runs = Arc::new(AtomicUsize::new(0));
    let deleted = Arc::new(AtomicUsize::new(0));
    let deleted_in_tool = deleted.clone();
    let delete = FnTool::new(
        "delete_all",
        "Deletes everything",
        json!({"type": "object"}),
        move |_: Value| {
            deleted_in_tool.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(json!("done")))
        },
    );
    let toolbox = weather_box(runs);
    let provider = Arc::new(ScriptedProvider::new([
        calls(&[("c1", "delete_all", json!({}))]),
        Response::text("{\"umbrella\": false}"),
    ]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(toolbox.tool_set().with(delete));
    let program = agent::<(), Advice>("small", &toolbox, "Clean up").run();
    let outcome = if parallel {
        agent_interp_par::run(&config, (), program).await
    } else {
        agent_interp_seq::run(&config, (), program).await
    }
    .unwrap();
    assert_eq!(outcome.value.unwrap(), Advice { umbrella: false });
    assert_eq!(deleted.load(Ordering::SeqCst), 0, "never executed");
    assert_eq!(outcome.trace.events_of(EventType::ToolDenied).count(), 1);
    let told = provider.calls()[1]
        .prompt
        .messages
        .last()
        .unwrap()
        .content()
        .to_owned();
    assert!(told.starts_with("error: tool denied"), "{told}");
}

/// The model's mistakes inside the loop — a tool name nobody has, arguments that fail the
/// tool's schema — are tool errors shown to the model, in the trace; nothing runs, the run
/// goes on to the model's next answer.
#[tokio::test]
async fn unknown_tools_and_bad_arguments_are_tool_errors_the_model_sees() {
    for parallel in [false, true] {
        let runs = Arc::new(AtomicUsize::new(0));
        let toolbox = weather_box(runs.clone());
        let provider = Arc::new(ScriptedProvider::new([
            calls(&[("c1", "no_such_tool", json!({}))]),
            calls(&[("c2", "weather", json!({"town": 7}))]),
            Response::text("{\"umbrella\": true}"),
        ]));
        let config = Config::new()
            .shared_provider(provider.clone())
            .tools(toolbox.tool_set());
        let program = agent::<(), Advice>("small", &toolbox, "Umbrella?").run();
        let outcome = if parallel {
            agent_interp_par::run(&config, (), program).await
        } else {
            agent_interp_seq::run(&config, (), program).await
        }
        .unwrap();
        assert_eq!(outcome.value.unwrap(), Advice { umbrella: true });
        assert_eq!(runs.load(Ordering::SeqCst), 0, "the tool never ran");
        let last = |call: usize| {
            provider.calls()[call]
                .prompt
                .messages
                .last()
                .unwrap()
                .content()
                .to_owned()
        };
        let unknown = last(1);
        assert!(
            unknown.starts_with("error:") && unknown.contains("no_such_tool"),
            "{unknown}"
        );
        let invalid = last(2);
        assert!(
            invalid.starts_with("error:") && invalid.contains("city"),
            "the validator's message names the missing field: {invalid}"
        );
        assert_eq!(outcome.trace.events_of(EventType::ToolDenied).count(), 1);
        assert_eq!(outcome.trace.events_of(EventType::ToolResult).count(), 1);
    }
}

#[tokio::test]
async fn turns_repairs_and_budgets_bound_the_loop() {
    let toolbox = weather_box(Arc::default());
    let forever = || {
        Arc::new(ScriptedProvider::from_fn(|_, _| {
            Ok(calls(&[("c", "weather", json!({"city": "Oslo"}))]))
        }))
    };
    let config = Config::new()
        .shared_provider(forever())
        .tools(toolbox.tool_set());
    let outcome = agent_interp_seq::run(
        &config,
        (),
        agent::<(), Advice>("small", &toolbox, "Loop")
            .max_turns(3)
            .run(),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome.value.unwrap_err(),
        AgentError::MaxTurns { turns: 3 }
    );
    assert_eq!(outcome.trace.infer_calls(), 3);

    let program: Op<(), _> = op::limit(
        Budget::new().calls(2),
        agent::<(), Advice>("small", &toolbox, "Loop")
            .max_turns(50)
            .run(),
    );
    let outcome = agent_interp_seq::run(&config, (), program).await.unwrap();
    assert!(outcome.value.is_err(), "the budget stops it");
    assert_eq!(outcome.trace.events_of(EventType::Exhausted).count(), 1);

    // A bad answer is repaired once, then it is a typed error with both replies.
    let provider = Arc::new(ScriptedProvider::new([
        Response::text("yes, bring one"),
        Response::text("{\"umbrella\": \"yes\"}"),
    ]));
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(toolbox.tool_set());
    let outcome = agent_interp_seq::run(
        &config,
        (),
        agent::<(), Advice>("small", &toolbox, "Umbrella?").run(),
    )
    .await
    .unwrap();
    let AgentError::Output(error) = outcome.value.unwrap_err() else {
        panic!()
    };
    let raws: Vec<_> = error.attempts.iter().map(|a| a.raw.as_str()).collect();
    assert_eq!(raws, ["yes, bring one", "{\"umbrella\": \"yes\"}"]);
    let repair = provider.calls()[1]
        .prompt
        .messages
        .last()
        .unwrap()
        .content()
        .to_owned();
    assert!(repair.contains("could not be read"), "{repair}");
}

#[tokio::test]
async fn a_verified_agent_returns_only_what_the_check_accepts() {
    let toolbox = weather_box(Arc::default());
    let provider = Arc::new(ScriptedProvider::new([
        Response::text("{\"umbrella\": false}"),
        Response::text("{\"umbrella\": true}"),
    ]));
    // The check is a program: it calls a validator tool.
    let validator = FnTool::new(
        "validate",
        "Checks advice",
        json!({"type": "object"}),
        |args: Value| {
            std::future::ready(if args["umbrella"] == json!(true) {
                Ok(json!("ok"))
            } else {
                Err(agent_op::ToolError::failed(
                    "it is raining: bring an umbrella",
                ))
            })
        },
    );
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(toolbox.tool_set().with(validator));
    let program = agent::<(), Advice>("small", &toolbox, "Umbrella?")
        .verified(3, |advice: &Advice| {
            op::tool("validate", json!({"umbrella": advice.umbrella}))
                .map(|verdict| verdict.map(|_| ()).map_err(|e| e.message))
        })
        .run();
    let outcome = agent_interp_par::run(&config, (), program).await.unwrap();
    assert_eq!(outcome.value.unwrap(), Advice { umbrella: true });
    let second = &provider.calls()[1].prompt;
    assert!(second.messages[1].content().contains("bring an umbrella"));
}

#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Forecast {
    rain: bool,
}

fn team(
    helper_budget: u64,
    helper_box: Toolbox,
) -> (
    Config,
    Arc<ScriptedProvider>,
    agent_agents::Agent<(), Advice>,
) {
    let boss_turns = Arc::new(AtomicUsize::new(0));
    let helper_turns = Arc::new(AtomicUsize::new(0));
    let provider = Arc::new(ScriptedProvider::from_fn(move |model, _| {
        if model == "helper" {
            return Ok(match helper_turns.fetch_add(1, Ordering::SeqCst) {
                0 => calls(&[("h1", "weather", json!({"city": "Oslo"}))]),
                _ => Response::text("{\"rain\": true}"),
            });
        }
        Ok(match boss_turns.fetch_add(1, Ordering::SeqCst) {
            0 => calls(&[("b1", "forecaster", json!({"city": "Oslo"}))]),
            _ => Response::text("{\"umbrella\": true}"),
        })
    }));
    let parent_box = weather_box(Arc::default());
    let forecaster = agent_agents::SubAgent::new(
        "forecaster",
        "Forecasts rain in a city",
        Budget::new().calls(helper_budget),
        move |q: Query| {
            agent::<(), Forecast>(
                "helper",
                &helper_box,
                format!("Will it rain in {}?", q.city),
            )
        },
    );
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(parent_box.tool_set());
    let boss = agent::<(), Advice>("boss", &parent_box, "Umbrella in Oslo?").sub_agent(forecaster);
    (config, provider, boss)
}

#[tokio::test]
async fn a_sub_agent_runs_as_a_tool_nested_in_the_trace_under_its_own_budget() {
    let narrowed = weather_box(Arc::default())
        .narrow("forecast", &["weather"])
        .unwrap();
    let (config, provider, boss) = team(2, narrowed.clone());
    let outcome = agent_interp_par::run(&config, (), boss.run())
        .await
        .unwrap();
    assert_eq!(outcome.value.unwrap(), Advice { umbrella: true });
    let boss_second = provider
        .calls()
        .into_iter()
        .filter(|c| c.model == "boss")
        .nth(1)
        .unwrap();
    let result = boss_second
        .prompt
        .messages
        .last()
        .unwrap()
        .content()
        .to_owned();
    assert_eq!(result, "{\"rain\":true}");
    // The helper's tool call sits in the branch of the boss's call, inside its markers.
    let helper_call = outcome
        .trace
        .events_of(EventType::ToolCall)
        .find(|e| matches!(&e.event.kind, agent_op::EventKind::ToolCall(c) if c.name == "weather"))
        .unwrap();
    assert_eq!(
        helper_call.trace_id.as_str().matches('.').count(),
        2,
        "{}",
        helper_call.trace_id
    );
    let markers: Vec<_> = outcome
        .trace
        .events_of(EventType::Custom)
        .map(|e| match &e.event.kind {
            agent_op::EventKind::Custom(c) => c.name.clone(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(markers, ["agent_call", "agent_result"]);

    // Over its budget, the sub-agent is a tool error the boss is shown.
    let (config, provider, boss) = team(1, narrowed);
    let outcome = agent_interp_seq::run(&config, (), boss.run())
        .await
        .unwrap();
    assert!(outcome.value.is_ok());
    let shown = provider
        .calls()
        .into_iter()
        .filter(|c| c.model == "boss")
        .nth(1)
        .unwrap();
    let shown = shown.prompt.messages.last().unwrap().content().to_owned();
    assert!(shown.contains("ran out of its budget"), "{shown}");

    // A sub-agent asking for more tools than its caller has is refused by the runtime.
    let wider =
        weather_box(Arc::default()).with(tool("shell", "Runs commands", |q: Query| async move {
            Ok(q.city)
        }));
    let (config, _, boss) = team(2, wider);
    let error = agent_interp_seq::run(&config, (), boss.run())
        .await
        .unwrap_err();
    assert!(
        error.kind.to_string().contains("asks for more than"),
        "{}",
        error.kind
    );
}

/// On a paused clock, so that the approver's answer at 100 ms always comes before the 300 ms
/// approval timeout (in real time, a stalled machine could fire both at once).
#[tokio::test(start_paused = true)]
async fn a_tool_needing_approval_waits_for_it_on_the_steering_channel() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Mail {
        to: String,
    }
    let answers = [
        Some("approve"),
        Some("approve c1"),
        Some("no, not now"),
        None,
    ];
    for (parallel, answer) in [false, true]
        .into_iter()
        .flat_map(|p| answers.map(|a| (p, a)))
    {
        let sent = Arc::new(AtomicUsize::new(0));
        let sent_in_tool = sent.clone();
        let send = tool("send_mail", "Sends an email", move |m: Mail| {
            sent_in_tool.fetch_add(1, Ordering::SeqCst);
            async move { Ok(format!("sent to {}", m.to)) }
        })
        .needs_approval();
        let toolbox = Toolbox::new("mail").with(send);
        let provider = Arc::new(ScriptedProvider::new([
            calls(&[("c1", "send_mail", json!({"to": "ana@example.com"}))]),
            Response::text("{\"umbrella\": false}"),
        ]));
        let config = Config::new()
            .shared_provider(provider.clone())
            .tools(toolbox.tool_set());
        let queue = config.steering_queue().clone();
        let program = agent::<(), Advice>("small", &toolbox, "Mail Ana")
            .approval_timeout(Duration::from_millis(300))
            .run();
        let approver = tokio::spawn(async move {
            // Answer only once the run is waiting.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(answer) = answer {
                queue.push(agent_op::Steering::new(answer));
            }
        });
        let outcome = if parallel {
            agent_interp_par::run(&config, (), program).await
        } else {
            agent_interp_seq::run(&config, (), program).await
        }
        .unwrap();
        approver.await.unwrap();
        assert!(outcome.value.is_ok());
        let requested = outcome
            .trace
            .events_of(EventType::Custom)
            .filter(|e| matches!(&e.event.kind, agent_op::EventKind::Custom(c) if c.name == "approval_requested"))
            .count();
        assert_eq!(requested, 1);
        let shown = provider.calls()[1]
            .prompt
            .messages
            .last()
            .unwrap()
            .content()
            .to_owned();
        match answer {
            Some(a) if a.starts_with("approve") => {
                assert_eq!(sent.load(Ordering::SeqCst), 1);
                assert_eq!(shown, "sent to ana@example.com");
            }
            Some(_) => {
                assert_eq!(sent.load(Ordering::SeqCst), 0);
                assert!(shown.contains("did not approve"), "{shown}");
            }
            None => {
                assert_eq!(sent.load(Ordering::SeqCst), 0);
                assert!(shown.contains("no approval"), "{shown}");
            }
        }
    }
}

/// A long loop's prompts share the conversation instead of copying it: every prompt the
/// trace keeps holds the very messages of the last one and the same tool definitions (each
/// stored once in memory however many prompts sent it), and the trace's JSONL file has one
/// content line per
/// distinct message and names each prompt by the one before it plus its two new messages.
#[tokio::test]
async fn a_long_loops_prompts_share_one_conversation_stored_once() {
    const TURNS: usize = 300;
    let asked = AtomicUsize::new(0);
    let provider = ScriptedProvider::from_fn(move |_, _| {
        let i = asked.fetch_add(1, Ordering::Relaxed);
        Ok(if i + 1 == TURNS {
            Response::text("{\"umbrella\": false}")
        } else {
            calls(&[(
                &format!("c{i}"),
                "weather",
                json!({"city": format!("city {i}")}),
            )])
        })
    });
    let weather = tool(
        "weather",
        "Today's weather in a city",
        |q: Query| async move { Ok(format!("sun in {}", q.city)) },
    );
    let toolbox = Toolbox::new("weather").with(weather);
    let config = Config::new().provider(provider).tools(toolbox.tool_set());
    let program = agent::<(), Advice>("small", &toolbox, "Umbrella?")
        .max_turns(TURNS as u32)
        .run();
    let outcome = agent_interp_seq::run(&config, (), program).await.unwrap();
    assert_eq!(outcome.value, Ok(Advice { umbrella: false }));

    let sent: Vec<Arc<agent_op::Prompt>> = outcome.trace.prompts().cloned().collect();
    assert_eq!(sent.len(), TURNS);
    let last = &sent[TURNS - 1].messages;
    for (turn, prompt) in sent.iter().enumerate() {
        // The system message and the goal, then a call and its result per turn before.
        assert_eq!(prompt.messages.len(), 2 + 2 * turn);
        assert_eq!(
            prompt.messages.shared_with(last),
            prompt.messages.len(),
            "turn {turn}'s prompt copied the conversation"
        );
        assert!(
            Arc::ptr_eq(&prompt.tools, &sent[0].tools),
            "turn {turn}'s prompt copied the tools"
        );
    }

    let mut file = Vec::new();
    agent_op::trace::jsonl::write_jsonl(&outcome.trace, &mut file).unwrap();
    let lines: Vec<Value> = String::from_utf8(file.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let content_lines = lines.iter().filter(|l| l.get("content").is_some()).count();
    // The system message, the goal, every reply (the answer too), every tool result but
    // none after the answer, and the tool's definition.
    assert_eq!(content_lines, 2 + TURNS + (TURNS - 1) + 1);
    let listed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"]["type"] == "infer_start")
        .map(|l| &l["event"]["data"]["prompt"]["messages"])
        .collect();
    assert_eq!(listed.len(), TURNS);
    for messages in &listed[1..] {
        assert_eq!(
            messages["then"].as_array().map(Vec::len),
            Some(2),
            "{messages}"
        );
    }
    // Read back, the prompts share their messages again.
    let read = agent_op::trace::jsonl::read_jsonl(&file[..]).unwrap().trace;
    let read_prompts: Vec<_> = read.prompts().collect();
    let last = &read_prompts[TURNS - 1].messages;
    assert_eq!(last, &sent[TURNS - 1].messages);
    for prompt in read_prompts {
        assert_eq!(prompt.messages.shared_with(last), prompt.messages.len());
    }
}
