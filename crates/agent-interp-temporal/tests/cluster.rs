//! Several workers on one task queue: budgets hold across them, and a program changed
//! under a running workflow is reported as a divergence.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agent_interp_temporal::{StartOptions, TemporalError, Worker, connect, start};
use agent_op::{Budget, EventKind, Op, Prompt, Response, Steering, op};
use agent_provider::ScriptedProvider;

fn counted(calls: Arc<AtomicU64>) -> ScriptedProvider {
    ScriptedProvider::from_fn(move |_, _| {
        calls.fetch_add(1, Ordering::Relaxed);
        Ok(Response::text("ok"))
    })
    .with_latency(Duration::from_millis(20))
}

fn ask(text: String) -> Op<(), String> {
    op::infer_raw("m", Prompt::new().user(text)).map(|r| r.content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calls_budget_holds_when_its_calls_run_on_two_workers() {
    let Some(address) = support::address("a_calls_budget_holds_when_its_calls_run_on_two_workers")
    else {
        return;
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("budget");
    let (first, second) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let runs_workflows = Worker::new(client.clone(), queue.clone())
        .build_id("runs-workflows")
        .provider(counted(first.clone()))
        .program("capped", |n: usize| -> Op<(), bool> {
            let asks = (0..n).map(|i| ask(format!("q{i}"))).collect();
            op::limit(Budget::new().calls(30), op::par(asks)).map(|r| r.is_err())
        })
        .run(until_stopped(stopped.clone()));
    // Serves activities only: no program registered.
    let serves_calls = Worker::new(client.clone(), queue.clone())
        .build_id("serves-calls")
        .provider(counted(second.clone()))
        .run(until_stopped(stopped.clone()));
    let test = async {
        let handle = start(
            &client,
            "capped",
            100usize,
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(120), handle.result::<(), bool>())
            .await
            .expect("the run ends")
            .unwrap();
        assert!(
            outcome.value,
            "100 calls under a budget of 30 run out of it"
        );
        let (a, b) = (
            first.load(Ordering::Relaxed),
            second.load(Ordering::Relaxed),
        );
        eprintln!("calls served: {a} by the workflow worker, {b} by the activity-only worker");
        assert!(a + b <= 30, "{a} + {b} calls under a budget of 30");
        assert_eq!(outcome.trace.infer_calls() as u64, a + b);
        let _ = stop.send(true);
    };
    let (one, two, ()) = tokio::join!(runs_workflows, serves_calls, test);
    one.unwrap();
    two.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_changed_under_a_running_workflow_is_a_divergence() {
    let Some(address) =
        support::address("a_program_changed_under_a_running_workflow_is_a_divergence")
    else {
        return;
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("changed");
    let calls = Arc::new(AtomicU64::new(0));
    // Version 1 asks, then waits for a steering message, then asks again.
    let (stop_v1, stopped_v1) = tokio::sync::oneshot::channel::<()>();
    let v1 = Worker::new(client.clone(), queue.clone())
        .provider(counted(calls.clone()))
        .program("evolving", |_: ()| -> Op<(), String> {
            ask("one".into())
                .then(op::wait_steering(Duration::from_secs(600)))
                .then(ask("two".into()))
        })
        .run(async move {
            let _ = stopped_v1.await;
        });
    let handle = start(&client, "evolving", (), StartOptions::new(queue.clone()))
        .await
        .unwrap();
    let waiting = async {
        // Until the first call is in the trace: the workflow then waits for steering.
        loop {
            let trace = handle.trace().await.unwrap();
            if trace
                .events
                .iter()
                .any(|e| matches!(e.event.kind, EventKind::InferEnd(_)))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = stop_v1.send(());
    };
    let (ran, ()) = tokio::join!(v1, waiting);
    ran.unwrap();
    // Version 2 waits first: its history no longer fits.
    let (stop_v2, stopped_v2) = tokio::sync::oneshot::channel::<()>();
    let v2 = Worker::new(client.clone(), queue.clone())
        .provider(counted(calls.clone()))
        .program("evolving", |_: ()| -> Op<(), String> {
            op::wait_steering(Duration::from_secs(5)).then(ask("one".into()))
        })
        .run(async move {
            let _ = stopped_v2.await;
        });
    let test = async {
        handle.steer(Steering::new("go on")).await.unwrap();
        let error = tokio::time::timeout(Duration::from_secs(120), handle.result::<(), String>())
            .await
            .expect("the divergence ends the run")
            .unwrap_err();
        match &error {
            TemporalError::Divergence {
                program, message, ..
            } => {
                assert_eq!(program, "evolving");
                assert!(
                    message.contains("HistoryEvent"),
                    "names the position: {message}"
                );
            }
            other => panic!("expected a divergence, got {other}"),
        }
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "the changed program made no call"
        );
        let _ = stop_v2.send(());
    };
    let (ran, ()) = tokio::join!(v2, test);
    ran.unwrap();
}
