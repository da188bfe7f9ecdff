//! `par` and `race` under the sequential interpreter: declaration order, merged states,
//! branch ids, and which error wins.

mod common;

use agent_interp_seq::{Config, ErrorKind, run};
use agent_op::trace::event::ForkKind;
use agent_op::{EventKind, EventType, Op, Prompt, Response, TraceId, op};
use agent_provider::ScriptedProvider;
use common::{Counters, types};
use serde_json::json;

fn note(text: &'static str) -> Op<Counters, ()> {
    op::emit(EventKind::custom(text, json!(null)))
}

#[tokio::test]
async fn par_runs_branches_from_the_pre_fork_state_and_merges_in_order() {
    let program: Op<Counters, Vec<u64>> =
        op::modify(|c: &mut Counters| c.a = 1).then(op::par(vec![
            op::modify(|c: &mut Counters| {
                c.a += 10;
                c.log.push("left".into());
            })
            .then(note("left"))
            .then(op::gets(|c: &Counters| c.a)),
            op::modify(|c: &mut Counters| {
                c.b = 5;
                c.log.push("right".into());
            })
            .then(note("right"))
            // Each branch sees the pre-fork state, not its sibling's changes.
            .then(op::gets(|c: &Counters| c.a)),
        ]));
    let config = Config::new().trace_id("calm-owl-0005");
    let outcome = run(&config, Counters::default(), program).await.unwrap();
    assert_eq!(outcome.value, vec![11, 1]);
    assert_eq!(
        outcome.state,
        Counters {
            a: 11,
            b: 5,
            log: vec!["left".into(), "right".into()]
        }
    );
    let root = TraceId::from("calm-owl-0005");
    let ids: Vec<TraceId> = outcome
        .trace
        .events
        .iter()
        .map(|e| e.trace_id.clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            root.clone(),
            root.child(0),
            root.child(1),
            root.clone(),
            root.clone()
        ]
    );
    assert_eq!(
        types(&outcome.trace),
        vec![
            EventType::Fork,
            EventType::Custom,
            EventType::Custom,
            EventType::Join
        ]
    );
    match &outcome.trace.events[0].event.kind {
        EventKind::Fork(f) => {
            assert_eq!(f.kind, ForkKind::Par);
            assert_eq!(f.branch_count, 2);
            assert_eq!(f.branch_ids, vec![root.child(0), root.child(1)]);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(outcome.trace.events.iter().all(|e| !e.cancelled));
}

#[tokio::test]
async fn nested_branches_get_nested_ids() {
    let inner = || op::par(vec![note("x"), note("y")]).void();
    let program: Op<Counters, _> = op::par(vec![inner(), inner()]);
    let outcome = run(
        &Config::new().trace_id("calm-owl-0006"),
        Counters::default(),
        program,
    )
    .await
    .unwrap();
    let root = TraceId::from("calm-owl-0006");
    let custom_ids: Vec<TraceId> = outcome
        .trace
        .events_of(EventType::Custom)
        .map(|e| e.trace_id.clone())
        .collect();
    assert_eq!(
        custom_ids,
        vec![
            root.child(0).child(0),
            root.child(0).child(1),
            root.child(1).child(0),
            root.child(1).child(1)
        ]
    );
}

#[tokio::test]
async fn an_empty_par_returns_nothing_and_keeps_the_state() {
    let program: Op<Counters, Vec<()>> =
        op::modify(|c: &mut Counters| c.a = 3).then(op::par(vec![]));
    let outcome = run(&Config::new(), Counters::default(), program)
        .await
        .unwrap();
    assert!(outcome.value.is_empty());
    assert_eq!(outcome.state.a, 3);
}

#[tokio::test]
async fn the_first_failing_branch_in_declaration_order_fails_the_par() {
    let program: Op<Counters, Vec<()>> = op::par(vec![
        note("ok"),
        op::fail("second broke"),
        op::fail("third broke"),
    ]);
    let err = run(
        &Config::new().trace_id("calm-owl-0007"),
        Counters::default(),
        program,
    )
    .await
    .unwrap_err();
    match &err.kind {
        ErrorKind::Branch { id, error } => {
            assert_eq!(id, &TraceId::from("calm-owl-0007").child(1));
            assert_eq!(**error, ErrorKind::Program("second broke".into()));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.kind.root_cause(),
        &ErrorKind::Program("second broke".into())
    );
    // The third branch never ran.
    assert_eq!(err.trace.errors(), vec!["second broke"]);
}

#[tokio::test]
async fn race_returns_the_first_success_in_declaration_order_with_its_state() {
    let program: Op<Counters, &'static str> = op::race(vec![
        op::modify(|c: &mut Counters| c.a = 1).then(op::fail("first fails")),
        op::modify(|c: &mut Counters| c.a = 2).then(op::pure("second wins")),
        op::modify(|c: &mut Counters| c.a = 3).then(op::pure("third never runs")),
    ]);
    let outcome = run(
        &Config::new().trace_id("calm-owl-0008"),
        Counters::default(),
        program,
    )
    .await
    .unwrap();
    assert_eq!(outcome.value, "second wins");
    assert_eq!(outcome.state.a, 2, "the winner's state is kept");
    let events = &outcome.trace.events;
    match &events[events.len() - 2].event.kind {
        EventKind::Join(j) => {
            assert_eq!(j.kind, ForkKind::Race);
            assert_eq!(j.winner, Some(1));
        }
        other => panic!("unexpected {other:?}"),
    }
    // The failed first branch ran and its events stay; the third never ran.
    assert_eq!(outcome.trace.errors(), vec!["first fails"]);
}

#[tokio::test]
async fn a_race_where_all_fail_reports_the_first_error_and_an_empty_race_is_an_error() {
    let program: Op<Counters, ()> = op::race(vec![op::fail("a"), op::fail("b")]);
    let err = run(
        &Config::new().trace_id("calm-owl-0009"),
        Counters::default(),
        program,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::Branch {
            id: TraceId::from("calm-owl-0009").child(0),
            error: Box::new(ErrorKind::Program("a".into()))
        }
    );
    assert_eq!(err.trace.errors(), vec!["a", "b"]);

    let program: Op<Counters, ()> = op::race(vec![]);
    let err = run(&Config::new(), Counters::default(), program)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::EmptyRace);
    assert!(err.to_string().contains("race with no branches"));
}

#[tokio::test]
async fn a_race_recovers_from_a_provider_error_in_one_branch() {
    let provider = ScriptedProvider::from_fn(|model, _| match model {
        "flaky" => Err(agent_op::ProviderError::transport("reset")),
        _ => Ok(Response::text(format!("from {model}"))),
    });
    let ask = |model: &'static str| -> Op<Counters, String> {
        op::infer_raw(model, Prompt::new().user("hi")).map(|r| r.content)
    };
    let program = op::race(vec![ask("flaky"), ask("steady")]);
    let outcome = run(
        &Config::new().provider(provider),
        Counters::default(),
        program,
    )
    .await
    .unwrap();
    assert_eq!(outcome.value, "from steady");
}

#[tokio::test]
async fn branch_iterations_continue_from_the_parent() {
    let provider = ScriptedProvider::from_fn(|_, _| Ok(Response::text("ok")));
    let ask = || op::infer_raw("m", Prompt::new().user("q")).void();
    let program: Op<Counters, _> = ask().then(op::par(vec![ask(), ask()]));
    let outcome = run(
        &Config::new().provider(provider),
        Counters::default(),
        program,
    )
    .await
    .unwrap();
    let iterations: Vec<u32> = outcome
        .trace
        .events_of(EventType::InferStart)
        .filter_map(|e| e.event.kind.iteration())
        .collect();
    assert_eq!(iterations, vec![0, 1, 1]);
}

#[tokio::test]
async fn sequential_forks_in_one_parent_get_distinct_branch_ids() {
    let program: Op<Counters, _> = op::par(vec![note("a"), note("b")])
        .then(op::race(vec![note("c").then(op::pure(1)), op::pure(2)]))
        .then(op::par(vec![op::trace_id()]));
    let outcome = run(
        &Config::new().trace_id("calm-owl-0014"),
        Counters::default(),
        program,
    )
    .await
    .unwrap();
    let root = TraceId::from("calm-owl-0014");
    let forks: Vec<Vec<TraceId>> = outcome
        .trace
        .events_of(EventType::Fork)
        .map(|e| match &e.event.kind {
            EventKind::Fork(f) => f.branch_ids.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        forks,
        vec![
            vec![root.child(0), root.child(1)],
            vec![root.child(2), root.child(3)],
            vec![root.child(4)],
        ]
    );
    assert_eq!(
        outcome.value,
        vec![root.child(4)],
        "a branch knows its own id"
    );
}

#[tokio::test]
async fn checkpoints_in_branches_point_at_their_branch_block_of_the_final_trace() {
    let branch = |i: u64| {
        op::emit(EventKind::custom("work", json!(i)))
            .then(op::checkpoint("branch"))
            .then(op::emit(EventKind::custom("after", json!(i))))
    };
    let program: Op<(), Vec<()>> = op::par(vec![branch(0), branch(1)])
        .and_then(|done| op::checkpoint("joined").map(move |_| done));
    let outcome = run(&Config::new().trace_id("calm-crab-0001"), (), program)
        .await
        .unwrap();
    let trace = &outcome.trace;
    let names: Vec<(&str, &str)> = outcome
        .checkpoints
        .iter()
        .map(|c| (c.name.as_str(), c.trace_id.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("branch", "calm-crab-0001.0"),
            ("branch", "calm-crab-0001.1"),
            ("joined", "calm-crab-0001"),
        ]
    );
    for cp in &outcome.checkpoints[..2] {
        let events = cp.events_in(trace);
        assert_eq!(events.len(), 2, "{cp:?}");
        assert!(events.iter().all(|e| e.trace_id == cp.trace_id));
        assert_eq!(events[1].event.event_type(), EventType::Checkpoint);
    }
    // The root's checkpoint comes after the join: it sees both branches whole.
    let joined = &outcome.checkpoints[2];
    let events = joined.events_in(trace);
    // Everything but the run's end, which comes after it.
    assert_eq!(events.len(), trace.events.len() - 1);
    assert_eq!(
        events.last().map(|e| e.event.event_type()),
        Some(EventType::Checkpoint)
    );
}
