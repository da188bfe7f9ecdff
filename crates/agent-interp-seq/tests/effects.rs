//! Effects under the sequential interpreter: model calls, tools, events, checkpoints,
//! steering, memory and subscribers.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_interp_seq::{
    Config, ErrorKind, JsonlSubscriber, SteeringQueue, Subscriber, run, run_agent,
};
use agent_op::agent::{AgentState, react};
use agent_op::trace::jsonl::read_trace_file;
use agent_op::{
    Event, EventKind, EventType, FnTool, MemoryId, Message, MicroUsd, Op, Prompt, ProviderError,
    Response, Steering, Tag, ToolErrorKind, ToolSet, TraceId, op,
};
use agent_provider::ScriptedProvider;
use common::{TestMemory, add_tool, types};
use serde_json::{Value, json};

#[tokio::test]
async fn infer_records_start_and_end_with_previews_usage_cost_and_iterations() {
    let provider = ScriptedProvider::new([
        Response::text("first answer")
            .with_usage(12, 3)
            .with_cost(MicroUsd(250)),
        Response::text("second answer").with_usage(20, 4),
    ]);
    let config = Config::new()
        .provider(provider.clone())
        .trace_id("calm-owl-0001");
    let program: Op<(), (String, String)> =
        op::infer_raw("m1", Prompt::new().system("sys").user("hello there")).and_then(|a| {
            op::infer_raw("m2", Prompt::new().user("again")).map(move |b| (a.content, b.content))
        });
    let outcome = run(&config, (), program).await.unwrap();
    assert_eq!(
        outcome.value,
        ("first answer".into(), "second answer".into())
    );
    assert_eq!(
        types(&outcome.trace),
        vec![
            EventType::InferStart,
            EventType::InferEnd,
            EventType::InferStart,
            EventType::InferEnd
        ]
    );
    let kinds: Vec<&EventKind> = outcome.trace.events.iter().map(|e| &e.event.kind).collect();
    match (kinds[0], kinds[1], kinds[2], kinds[3]) {
        (
            EventKind::InferStart(s0),
            EventKind::InferEnd(e0),
            EventKind::InferStart(s1),
            EventKind::InferEnd(e1),
        ) => {
            assert_eq!(s0.model, "m1");
            assert_eq!(s0.prompt_preview, "hello there");
            assert_eq!(s0.messages, 2);
            assert_eq!(
                (s0.iteration, e0.iteration, s1.iteration, e1.iteration),
                (0, 0, 1, 1)
            );
            assert_eq!(e0.response_preview, "first answer");
            assert_eq!((e0.input_tokens, e0.output_tokens), (12, 3));
            assert_eq!(e0.cost, Some(MicroUsd(250)));
            assert_eq!(e1.cost, None, "unknown cost stays absent");
        }
        other => panic!("unexpected events {other:?}"),
    }
    assert_eq!(outcome.trace.infer_calls(), 2);
    assert_eq!(outcome.trace.total_tokens().total(), 39);
    let cost = outcome.trace.total_cost();
    assert_eq!(
        (cost.known, cost.unknown_calls, cost.exact()),
        (MicroUsd(250), 1, None)
    );
    assert!(
        outcome
            .trace
            .events
            .iter()
            .all(|e| e.trace_id == TraceId::from("calm-owl-0001"))
    );
    // What the program sent is what the provider received.
    let calls = provider.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].model, "m1");
    assert_eq!(calls[0].prompt.messages.len(), 2);
    provider.verify().unwrap();
}

#[tokio::test]
async fn traces_hold_whole_prompts_and_replies_unless_content_recording_is_off() {
    let long = "x".repeat(10_000);
    let answer = "y".repeat(10_000);
    let program = || -> Op<(), _> { op::infer_raw("m", Prompt::new().user(long.clone())) };
    // By default: the whole request and reply.
    let provider = ScriptedProvider::new([Response::text(answer.clone())]);
    let outcome = run(&Config::new().provider(provider), (), program())
        .await
        .unwrap();
    let start = outcome
        .trace
        .events_of(EventType::InferStart)
        .next()
        .unwrap();
    let EventKind::InferStart(start) = &start.event.kind else {
        unreachable!()
    };
    let prompt = start.prompt.as_ref().expect("the request is recorded");
    assert_eq!(prompt.messages, vec![Message::user(long.clone())]);
    let end = outcome.trace.events_of(EventType::InferEnd).next().unwrap();
    let EventKind::InferEnd(end) = &end.event.kind else {
        unreachable!()
    };
    assert_eq!(end.reply, Some(Message::assistant(answer.clone())));
    // Previews stay short.
    assert!(start.prompt_preview.chars().count() <= 201);
    // Off: previews only.
    let provider = ScriptedProvider::new([Response::text(answer.clone())]);
    let config = Config::new().provider(provider).record_content(false);
    let outcome = run(&config, (), program()).await.unwrap();
    let json = serde_json::to_string(&outcome.trace).unwrap();
    assert!(
        json.len() < 2_000,
        "trace holds previews only, was {} bytes",
        json.len()
    );
    assert_eq!(outcome.value.content.len(), 10_000);
}

#[tokio::test]
async fn provider_errors_and_missing_provider_fail_the_run() {
    let provider = ScriptedProvider::from_results([Err(ProviderError::Authentication {
        message: "bad key".into(),
        cause: None,
    })]);
    let program: Op<(), _> = op::infer_raw("m", Prompt::new().user("hi"));
    let err = run(&Config::new().provider(provider), (), program)
        .await
        .unwrap_err();
    match &err.kind {
        ErrorKind::Provider { model, error } => {
            assert_eq!(model, "m");
            assert!(matches!(error, ProviderError::Authentication { .. }));
            // The provider's error is the run error's source, typed.
            let source = std::error::Error::source(&err).expect("a source");
            assert_eq!(source.downcast_ref::<ProviderError>(), Some(error));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        types(&err.trace),
        vec![EventType::InferStart, EventType::Error]
    );

    let program: Op<(), _> = op::infer_raw("m", Prompt::new().user("hi"));
    let err = run(&Config::new(), (), program).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoProvider);
}

#[tokio::test]
async fn scripted_provider_reports_unexpected_calls_and_leftovers() {
    let provider = ScriptedProvider::new([]);
    let program: Op<(), _> = op::infer_raw("m", Prompt::new().user("anyone?"));
    let err = run(&Config::new().provider(provider.clone()), (), program)
        .await
        .unwrap_err();
    assert!(matches!(
        err.kind,
        ErrorKind::Provider {
            error: ProviderError::Unexpected { .. },
            ..
        }
    ));
    let report = provider.verify().unwrap_err();
    assert_eq!(report.unexpected_calls.len(), 1);
    assert!(report.unexpected_calls[0].contains("anyone?"), "{report}");

    let provider = ScriptedProvider::new([Response::text("a"), Response::text("b")]);
    let program: Op<(), _> = op::infer_raw("m", Prompt::new().user("one"));
    run(&Config::new().provider(provider.clone()), (), program)
        .await
        .unwrap();
    assert_eq!(provider.verify().unwrap_err().unconsumed, 1);
}

#[tokio::test]
async fn tools_succeed_fail_as_values_and_unknown_tools_fail_the_run() {
    let config = Config::new().tool(add_tool());
    let program: Op<(), _> = op::tool("add", json!({"a": 2, "b": 3}))
        .and_then(|sum| op::tool("add", json!({"a": "x"})).map(move |bad| (sum, bad)));
    let outcome = run(&config, (), program).await.unwrap();
    let (sum, bad) = outcome.value;
    assert_eq!(sum, Ok(json!(5)));
    assert_eq!(bad.unwrap_err().kind, ToolErrorKind::InvalidArguments);
    let calls = outcome.trace.tool_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "add");
    assert_eq!(calls[0].args, json!({"a": 2, "b": 3}));
    assert_eq!(calls[0].success, Some(true));
    assert_eq!(calls[0].result_preview.as_deref(), Some("5"));
    assert_eq!(calls[1].success, Some(false));

    let program: Op<(), _> = op::tool("rm_rf", json!({}));
    let err = run(&config, (), program).await.unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::UnknownTool {
            name: "rm_rf".into(),
            permitted: vec!["add".into()]
        }
    );
    assert_eq!(
        types(&err.trace),
        vec![EventType::ToolCall, EventType::Error]
    );
    assert!(err.to_string().contains("rm_rf") && err.to_string().contains("add"));
}

#[tokio::test]
async fn a_panicking_tool_is_a_tool_error_not_a_crash() {
    let boom = FnTool::new("boom", "panics", json!({}), |_args: Value| async move {
        if true {
            panic!("kaboom");
        }
        Ok(Value::Null)
    });
    let program: Op<(), _> = op::tool("boom", json!({}));
    let outcome = run(&Config::new().tool(boom), (), program).await.unwrap();
    let error = outcome.value.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Panicked);
    assert!(error.message.contains("kaboom"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_tools_run_on_the_blocking_pool() {
    let heavy = FnTool::new("heavy", "CPU work", json!({}), |args: Value| async move {
        std::thread::sleep(Duration::from_millis(20));
        Ok(json!(args["n"].as_u64().unwrap_or(0) * 2))
    })
    .blocking();
    let crash = FnTool::new(
        "crash",
        "panics on a blocking thread",
        json!({}),
        |_args: Value| async move {
            if true {
                panic!("blocking kaboom");
            }
            Ok(Value::Null)
        },
    )
    .blocking();
    let program: Op<(), _> = op::tool("heavy", json!({"n": 21}))
        .and_then(|a| op::tool("crash", json!({})).map(move |b| (a, b)));
    let outcome = run(&Config::new().tool(heavy).tool(crash), (), program)
        .await
        .unwrap();
    assert_eq!(outcome.value.0, Ok(json!(42)));
    assert_eq!(outcome.value.1.unwrap_err().kind, ToolErrorKind::Panicked);
}

#[tokio::test]
async fn tool_definitions_lists_the_permitted_tools() {
    let program: Op<(), _> = op::tool_definitions();
    let outcome = run(&Config::new().tool(add_tool()), (), program)
        .await
        .unwrap();
    assert_eq!(outcome.value.len(), 1);
    assert_eq!(outcome.value[0].name, "add");
}

#[tokio::test]
async fn emit_and_get_trace() {
    let program: Op<(), _> =
        op::emit(EventKind::custom("plan", json!({"steps": 3}))).then(op::get_trace());
    let outcome = run(&Config::new().trace_id("wise-wolf-0002"), (), program)
        .await
        .unwrap();
    let seen = outcome.value;
    assert_eq!(seen.id, TraceId::from("wise-wolf-0002"));
    assert_eq!(types(&seen), vec![EventType::Custom]);
    // The final trace is what the program saw, then the run's end.
    assert_eq!(outcome.trace.events[..seen.events.len()], seen.events);
    assert_eq!(types(&outcome.trace), vec![EventType::Custom]);
    assert!(outcome.trace.end.is_some());
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
struct Notes {
    lines: Vec<String>,
}

#[tokio::test]
async fn checkpoints_record_an_event_and_a_snapshot() {
    let program: Op<Notes, ()> = op::emit(EventKind::custom("before", json!(null)))
        .then(op::modify(|n: &mut Notes| n.lines.push("one".into())))
        .then(op::checkpoint("after-one"))
        .then(op::modify(|n: &mut Notes| n.lines.push("two".into())));
    let outcome = run(
        &Config::new().trace_id("calm-owl-0003"),
        Notes::default(),
        program,
    )
    .await
    .unwrap();
    assert_eq!(outcome.trace.checkpoints(), vec!["after-one"]);
    assert_eq!(outcome.checkpoints.len(), 1);
    let cp = &outcome.checkpoints[0];
    assert_eq!(cp.name, "after-one");
    assert_eq!(cp.trace_id, TraceId::from("calm-owl-0003"));
    assert_eq!(cp.state, json!({"lines": ["one"]}));
    assert_eq!(cp.events, 2);
    let events: Vec<EventType> = cp
        .events_in(&outcome.trace)
        .iter()
        .map(|e| e.event.event_type())
        .collect();
    assert_eq!(events, [EventType::Custom, EventType::Checkpoint]);
}

#[derive(Debug)]
struct Unserializable;

impl serde::Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _s: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("cannot serialize this"))
    }
}

impl Clone for Unserializable {
    fn clone(&self) -> Self {
        Unserializable
    }
}

#[tokio::test]
async fn a_state_that_cannot_serialize_fails_the_checkpoint_clearly() {
    let program: Op<Unserializable, ()> = op::checkpoint("cp");
    let err = run(&Config::new(), Unserializable, program)
        .await
        .unwrap_err();
    match err.kind {
        ErrorKind::Checkpoint { name, cause } => {
            assert_eq!(name, "cp");
            assert!(cause.to_string().contains("cannot serialize"));
            assert!(
                cause.downcast_ref::<serde_json::Error>().is_some(),
                "{cause:?}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn check_pops_queued_steering_messages() {
    let queue = SteeringQueue::new();
    queue.push(Steering::new("focus on tests"));
    let program: Op<(), _> =
        op::next_steering().and_then(|a| op::next_steering().map(move |b| (a, b)));
    let outcome = run(&Config::new().steering(queue.clone()), (), program)
        .await
        .unwrap();
    assert_eq!(outcome.value, (Some(Steering::new("focus on tests")), None));
    assert_eq!(types(&outcome.trace), vec![EventType::Steering]);
    assert!(queue.is_empty());
}

#[tokio::test]
async fn memory_operations_use_the_backend_and_record_hashes_not_content() {
    let program: Op<(), _> =
        op::remember("the user prefers tea", "said so", vec![Tag::from("prefs")])
            .and_then(|id| op::recall("tea", 5).map(move |hits| (id, hits)))
            .and_then(|(id, hits)| {
                op::forget(id.clone()).and_then(move |existed| {
                    op::forget(MemoryId::from("nope")).map(move |again| (id, hits, existed, again))
                })
            });
    let outcome = run(&Config::new().memory(TestMemory::default()), (), program)
        .await
        .unwrap();
    let (id, hits, existed, again) = outcome.value;
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].id, id);
    assert!(existed && !again);
    assert_eq!(
        types(&outcome.trace),
        vec![
            EventType::Remember,
            EventType::Recall,
            EventType::Forget,
            EventType::Forget
        ]
    );
    match &outcome.trace.events[0].event.kind {
        EventKind::Remember(r) => {
            assert_eq!(
                r.content_hash,
                agent_op::content_hash("the user prefers tea")
            );
            assert_eq!(r.tags, vec![Tag::from("prefs")]);
        }
        other => panic!("unexpected {other:?}"),
    }

    let program: Op<(), _> = op::recall("anything", 3);
    let err = run(&Config::new(), (), program).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoMemoryBackend);
}

#[tokio::test]
async fn subscribers_see_every_event_live_and_a_panicking_one_is_isolated() {
    let seen: Arc<Mutex<Vec<(TraceId, EventType)>>> = Arc::default();
    let sink = seen.clone();
    let config = Config::new()
        .subscribe(move |id: &TraceId, e: &Event| {
            sink.lock().unwrap().push((id.clone(), e.event_type()))
        })
        .subscribe(|_: &TraceId, _: &Event| panic!("a broken observer"))
        .tool(add_tool());
    let program: Op<(), _> = op::tool("add", json!({"a": 1, "b": 1}));
    let outcome = run(&config, (), program).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), outcome.trace.events.len());
    assert_eq!(
        seen.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
        outcome
            .trace
            .events
            .iter()
            .map(|e| e.event.event_type())
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn the_jsonl_subscriber_streams_a_readable_trace() {
    let dir = std::env::temp_dir().join(format!("agent-seq-jsonl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.jsonl");
    let _ = std::fs::remove_file(&path);
    let (subscriber, torn) = JsonlSubscriber::open(&path).unwrap();
    assert!(torn.is_none());
    let config = Config::new()
        .subscribe(subscriber)
        .tool(add_tool())
        .trace_id("bold-fox-0004");
    let program: Op<(), _> = op::tool("add", json!({"a": 1, "b": 2}));
    let outcome = run(&config, (), program).await.unwrap();
    let read = read_trace_file(&path).unwrap();
    assert_eq!(read.trace.events, outcome.trace.events);
    assert_eq!(read.trace.id, TraceId::from("bold-fox-0004"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_jsonl_subscriber_loses_nothing_when_dropped_or_when_the_run_fails() {
    let dir = tempfile::tempdir().unwrap();

    // Dropped without a flush: the writer finishes the queue before the drop returns.
    let path = dir.path().join("dropped.jsonl");
    let (subscriber, _) = JsonlSubscriber::open(&path).unwrap();
    let id = TraceId::from("calm-heron-0001");
    for i in 0..2_000 {
        subscriber.on_event(&id, &Event::now(EventKind::custom("line", json!(i))));
    }
    drop(subscriber);
    let read = read_trace_file(&path).unwrap();
    assert_eq!(read.trace.events.len(), 2_000);
    assert!(read.torn.is_none());

    // A run that fails (here: a program that panics) still has every event on disk when
    // `run` returns, the error's included.
    let path = dir.path().join("failed.jsonl");
    let (subscriber, _) = JsonlSubscriber::open(&path).unwrap();
    let subscriber = Arc::new(subscriber);
    let config = Config::new()
        .shared_subscriber(subscriber.clone() as Arc<dyn Subscriber>)
        .tool(add_tool());
    let program: Op<(), ()> = op::for_each(0..200, |i| {
        op::tool("add", json!({"a": i, "b": 1})).map(|_| ())
    })
    .and_then(|_| op::modify(|_: &mut ()| panic!("a bug in the program")));
    let err = run(&config, (), program)
        .await
        .expect_err("the program panicked");
    let read = read_trace_file(&path).unwrap();
    assert_eq!(read.trace.events, err.trace.events);
    assert!(subscriber.errors().is_empty(), "{:?}", subscriber.errors());
}

#[tokio::test]
async fn run_agent_drives_a_react_loop_with_tools() {
    let provider = ScriptedProvider::new([
        Response::tool_call("call-1", "add", json!({"a": 40, "b": 2})),
        Response::text("The answer is 42."),
    ]);
    let answer = run_agent(
        provider.clone(),
        ToolSet::new().with(add_tool()),
        "You add numbers.",
        react("m", "What is 40 + 2?", 5),
    )
    .await
    .unwrap();
    assert_eq!(answer, "The answer is 42.");
    let calls = provider.calls();
    // The second call carries the tool result back to the model.
    let second = &calls[1].prompt;
    assert_eq!(second.tools.len(), 1);
    assert_eq!(second.messages.last().map(|m| m.content()), Some("42"));
    assert_eq!(second.messages[0].content(), "You add numbers.");

    let stubborn = ScriptedProvider::from_fn(|_, _| {
        Ok(Response::tool_call("c", "add", json!({"a": 1, "b": 1})))
    });
    let err = run_agent(
        stubborn,
        ToolSet::new().with(add_tool()),
        "",
        react("m", "loop?", 3),
    )
    .await
    .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::Program(ref m) if m.contains("3 model calls")));
    let program: Op<AgentState, u32> = op::gets(|s: &AgentState| s.turns);
    assert_eq!(
        run_agent(ScriptedProvider::new([]), ToolSet::new(), "x", program)
            .await
            .unwrap(),
        0
    );
}

/// `react` sends the conversation without copying it: every turn's prompt shares the
/// messages of the last one (the system message included), however long the loop.
#[tokio::test]
async fn react_prompts_share_the_conversation_instead_of_copying_it() {
    const TURNS: usize = 50;
    let provider = ScriptedProvider::from_fn(|_, prompt| {
        let turn = (prompt.messages.len() - 2) / 2;
        Ok(if turn < TURNS {
            Response::tool_call(format!("c{turn}"), "add", json!({"a": turn, "b": 1}))
        } else {
            Response::text("done")
        })
    });
    let config = Config::new()
        .provider(provider)
        .tools(ToolSet::new().with(add_tool()));
    let state = AgentState::new("You add numbers.");
    let outcome = run(&config, state, react("m", "Count.", TURNS as u32 + 1))
        .await
        .unwrap();
    assert_eq!(outcome.value, "done");
    let sent: Vec<Arc<Prompt>> = outcome.trace.prompts().cloned().collect();
    assert_eq!(sent.len(), TURNS + 1);
    let last = &sent[TURNS].messages;
    assert_eq!(last[0], Message::system("You add numbers."));
    assert_eq!(last[1], Message::user("Count."));
    for (turn, prompt) in sent.iter().enumerate() {
        // The system message and the question, then a call and its result per turn before.
        assert_eq!(prompt.messages.len(), 2 + 2 * turn);
        assert_eq!(
            prompt.messages.shared_with(last),
            prompt.messages.len(),
            "turn {turn}'s prompt copied the conversation"
        );
    }
    // The state's conversation holds the same messages without the system message, and
    // the answer after them.
    let conversation: Vec<&Message> = outcome.state.messages.iter().collect();
    assert_eq!(conversation.len(), last.len());
    assert_eq!(
        conversation[..last.len() - 1],
        last.iter().skip(1).collect::<Vec<_>>()[..]
    );
    assert_eq!(conversation.last(), Some(&&Message::assistant("done")));
}

/// A conversation resumed with its turn count at the maximum keeps counting without
/// overflowing (it panicked with "attempt to add with overflow" under overflow checks).
#[tokio::test]
async fn a_resumed_agent_at_the_maximum_turn_count_does_not_overflow() {
    let config = Config::new().provider(ScriptedProvider::new([Response::text("done")]));
    let state = AgentState::new("x").with_turns(u32::MAX);
    let outcome = run(&config, state, react("m", "again?", 3)).await.unwrap();
    assert_eq!(outcome.value, "done");
    assert_eq!(outcome.state.turns, u32::MAX);
}
