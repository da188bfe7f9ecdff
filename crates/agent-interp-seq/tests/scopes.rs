//! `limit`, `timeout` and the abort token under the sequential interpreter.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_interp_seq::{CancellationToken, Config, ErrorKind, run};
use agent_op::{
    Budget, EventKind, EventType, Exhausted, MicroUsd, Op, Prompt, Resource, Response, TimedOut, op,
};
use agent_provider::ScriptedProvider;
use common::{SlowProvider, types};

fn ask(text: &str) -> Op<u32, String> {
    op::infer_raw("m", Prompt::new().user(text)).map(|r| r.content)
}

fn counting_calls(n: u32) -> Op<u32, ()> {
    op::repeat(u64::from(n), |i| {
        op::modify(|s: &mut u32| *s += 1).then(ask(&format!("call {i}")))
    })
}

fn echo() -> ScriptedProvider {
    ScriptedProvider::from_fn(|_, p| {
        Ok(Response::text(
            p.messages
                .last()
                .map(|m| m.content().to_owned())
                .unwrap_or_default(),
        )
        .with_usage(10, 10)
        .with_cost(MicroUsd(1_000)))
    })
}

#[tokio::test]
async fn a_calls_budget_admits_exactly_that_many_calls() {
    let provider = echo();
    let program = op::limit(Budget::new().calls(3), counting_calls(10));
    let outcome = run(&Config::new().provider(provider.clone()), 100, program)
        .await
        .unwrap();
    assert_eq!(
        outcome.value,
        Err(Exhausted {
            resource: Resource::Calls,
            spent: 3,
            limit: 3
        })
    );
    assert_eq!(provider.calls().len(), 3, "the fourth call was never made");
    assert_eq!(
        outcome.state, 100,
        "state changes inside the limit are discarded"
    );
    let trace = &outcome.trace;
    assert_eq!(
        trace.infer_calls(),
        3,
        "the events of the stopped program stay"
    );
    assert_eq!(types(trace).first(), Some(&EventType::Limit));
    assert_eq!(types(trace).last(), Some(&EventType::Exhausted));
}

#[tokio::test]
async fn a_program_within_budget_keeps_its_state_and_value() {
    let program = op::limit(
        Budget::new().calls(3).tokens(1_000),
        counting_calls(2).then(op::get()),
    );
    let outcome = run(&Config::new().provider(echo()), 0, program)
        .await
        .unwrap();
    assert_eq!(outcome.value, Ok(2));
    assert_eq!(outcome.state, 2);
}

#[tokio::test]
async fn tokens_and_cost_budgets_stop_once_exceeded() {
    // Each call uses 20 tokens: after 3 calls 60 > 50.
    let program = op::limit(Budget::new().tokens(50), counting_calls(10));
    let provider = echo();
    let outcome = run(&Config::new().provider(provider.clone()), 0, program)
        .await
        .unwrap();
    assert_eq!(
        outcome.value,
        Err(Exhausted {
            resource: Resource::Tokens,
            spent: 60,
            limit: 50
        })
    );
    assert_eq!(provider.calls().len(), 3);

    // Each call costs 1,000 µ$: 2 calls reach 2,000 = limit (not exceeded), the third call is
    // refused before it is made because nothing is left.
    let program = op::limit(Budget::new().cost(MicroUsd(2_000)), counting_calls(10));
    let provider = echo();
    let outcome = run(&Config::new().provider(provider.clone()), 0, program)
        .await
        .unwrap();
    assert_eq!(
        outcome.value,
        Err(Exhausted {
            resource: Resource::Cost,
            spent: 2_000,
            limit: 2_000
        })
    );
    assert_eq!(provider.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_time_budget_stops_a_slow_call() {
    let provider = SlowProvider::new(Duration::from_secs(10));
    let live = provider.live.clone();
    let program = op::limit(
        Budget::new().time(Duration::from_secs(3)),
        counting_calls(1),
    );
    let outcome = run(&Config::new().provider(provider), 0, program)
        .await
        .unwrap();
    match outcome.value {
        Err(Exhausted {
            resource: Resource::Time,
            spent,
            limit: 3_000,
        }) => assert!(spent >= 3_000),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(live.get(), 0, "the in-flight call was dropped");
    assert_eq!(outcome.state, 0);
}

#[tokio::test]
async fn nested_limits_all_count_and_the_outer_one_catches_its_own_exhaustion() {
    // Inner allows 5, outer allows 2: the outer budget runs out inside the inner limit, so the
    // inner limit must not catch it.
    let inner = op::limit(Budget::new().calls(5), counting_calls(10));
    let program = op::limit(Budget::new().calls(2), inner.map(|r| format!("{r:?}")));
    let provider = echo();
    let outcome = run(&Config::new().provider(provider.clone()), 0, program)
        .await
        .unwrap();
    assert_eq!(
        outcome.value,
        Err(Exhausted {
            resource: Resource::Calls,
            spent: 2,
            limit: 2
        })
    );
    assert_eq!(provider.calls().len(), 2);

    // The inner budget is tighter: it catches, and the outer program continues.
    let inner = op::limit(Budget::new().calls(1), counting_calls(10));
    let program = op::limit(
        Budget::new().calls(3),
        inner.and_then(|r| ask("after").map(move |a| (r, a))),
    );
    let provider = echo();
    let outcome = run(&Config::new().provider(provider.clone()), 0, program)
        .await
        .unwrap();
    let (inner_result, after) = outcome.value.unwrap();
    assert_eq!(
        inner_result,
        Err(Exhausted {
            resource: Resource::Calls,
            spent: 1,
            limit: 1
        })
    );
    assert_eq!(after, "after");
    assert_eq!(
        provider.calls().len(),
        2,
        "both calls count against the outer budget"
    );
}

#[tokio::test(start_paused = true)]
async fn timeout_cancels_in_flight_work_and_rolls_back_state() {
    let provider = SlowProvider::new(Duration::from_secs(60));
    let live = provider.live.clone();
    let started = provider.started.clone();
    let body = op::modify(|s: &mut u32| *s = 99).then(ask("slow"));
    let program =
        op::timeout(Duration::from_secs(5), body).and_then(|r| op::get().map(move |s| (r, s)));
    let before = tokio::time::Instant::now();
    let outcome = run(&Config::new().provider(provider), 1, program)
        .await
        .unwrap();
    assert_eq!(tokio::time::Instant::now() - before, Duration::from_secs(5));
    assert_eq!(
        outcome.value,
        (
            Err(TimedOut {
                limit: Duration::from_secs(5)
            }),
            1
        )
    );
    assert_eq!(started.load(Ordering::SeqCst), 1);
    assert_eq!(live.get(), 0, "the timed-out provider call was dropped");
    assert_eq!(
        types(&outcome.trace),
        vec![
            EventType::Timeout,
            EventType::InferStart,
            EventType::TimedOut
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_timeout_that_does_not_fire_returns_ok() {
    let provider = SlowProvider::new(Duration::from_secs(1));
    let program = op::timeout(Duration::from_secs(5), ask("fast"));
    let outcome = run(&Config::new().provider(provider), 0, program)
        .await
        .unwrap();
    assert_eq!(outcome.value, Ok("re: fast".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn timeouts_interrupt_long_pure_loops() {
    // No await inside: the interpreter must notice the deadline between steps. The paused clock
    // never auto-advances while the loop is runnable, so advance it by hand from this task (the
    // loop yields to the scheduler cooperatively, so this task gets to run).
    let program: Op<u64, _> = op::timeout(
        Duration::from_millis(10),
        op::loop_fn((), |()| {
            op::modify(|s: &mut u64| *s += 1).map(|_| std::ops::ControlFlow::<(), ()>::Continue(()))
        }),
    );
    let runner = tokio::spawn(async move { run(&Config::new(), 0u64, program).await });
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_millis(20)).await;
    let outcome = runner.await.unwrap().unwrap();
    assert_eq!(
        outcome.value,
        Err(TimedOut {
            limit: Duration::from_millis(10)
        })
    );
    assert_eq!(outcome.state, 0);
}

#[tokio::test(start_paused = true)]
async fn abort_stops_promptly_with_the_trace_so_far() {
    let provider = SlowProvider::new(Duration::from_secs(3600));
    let live = provider.live.clone();
    let token = CancellationToken::new();
    let config = Config::new().provider(provider).cancel_token(token.clone());
    let program =
        op::emit(EventKind::custom("started", serde_json::json!({}))).then(ask("forever"));
    let runner = tokio::spawn(async move { run(&config, 0u32, program).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    token.cancel();
    let err = runner.await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Aborted);
    assert_eq!(
        types(&err.trace),
        vec![EventType::Custom, EventType::InferStart]
    );
    assert_eq!(live.get(), 0);

    // Aborting before the run starts stops it before its first step.
    let token = CancellationToken::new();
    token.cancel();
    let program: Op<u32, ()> = op::emit(EventKind::custom("never", serde_json::json!({})));
    let err = run(&Config::new().cancel_token(token), 0, program)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Aborted);
    assert!(types(&err.trace).is_empty());
}

#[tokio::test(start_paused = true)]
async fn abort_stops_a_pure_loop() {
    let token = CancellationToken::new();
    let config = Config::new().cancel_token(token.clone());
    let program: Op<u64, ()> = op::loop_fn((), |()| {
        op::modify(|s: &mut u64| *s += 1).map(|_| std::ops::ControlFlow::<(), ()>::Continue(()))
    });
    let runner = tokio::spawn(async move { run(&config, 0u64, program).await });
    tokio::task::yield_now().await;
    token.cancel();
    let err = runner.await.unwrap().unwrap_err();
    assert_eq!(err.kind, ErrorKind::Aborted);
}
