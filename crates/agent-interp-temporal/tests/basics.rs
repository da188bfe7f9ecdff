//! Programs run as Temporal workflows give what they give under the sequential interpreter.

mod support;

use std::time::Duration;

use agent_interp_temporal::{StartOptions, TemporalError, Worker, connect, start};
use agent_op::crdt::GSet;
use agent_op::{Op, Prompt, Response, Steering, op};
use agent_provider::ScriptedProvider;

fn last_message(p: &Prompt) -> String {
    p.messages
        .last()
        .map(|m| m.content().to_owned())
        .unwrap_or_default()
}

fn echo() -> ScriptedProvider {
    ScriptedProvider::from_fn(|_, p| {
        Ok(Response::text(format!("echo: {}", last_message(p))).with_usage(3, 4))
    })
}

/// The answers seen, merged across branches.
type Seen = GSet<String>;

fn ask(text: String) -> Op<Seen, String> {
    op::infer_raw("m", Prompt::new().user(text)).and_then(|r| {
        let content = r.content.clone();
        op::modify(move |seen: &mut Seen| {
            seen.insert(content);
        })
        .map(move |_| r.content)
    })
}

/// Three calls in a `par`, then a race of two calls (one of which then gives up).
fn fan_out(topic: String) -> Op<Seen, Vec<String>> {
    let par = op::par(vec![
        ask(format!("{topic} a")),
        ask(format!("{topic} b")),
        ask(format!("{topic} c")),
    ]);
    par.and_then(|mut answers: Vec<String>| {
        // The second branch gives up after its call, so which call answers first does not
        // decide the winner (it would, between two that both succeed).
        op::race(vec![
            ask("first".into()),
            ask("second".into()).then(op::fail("the second gives up")),
        ])
        .map(move |won| {
            answers.push(won);
            answers
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_gives_the_same_value_state_and_trace_as_under_seq() {
    let Some(address) =
        support::address("a_program_gives_the_same_value_state_and_trace_as_under_seq")
    else {
        return;
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("same");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(echo())
        .program("fan_out", fan_out)
        .run(async move {
            let _ = stopped.await;
        });
    let test = async {
        let handle = start(
            &client,
            "fan_out",
            "topic",
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        let outcome = tokio::time::timeout(
            Duration::from_secs(120),
            handle.result::<Seen, Vec<String>>(),
        )
        .await
        .expect("the run ends")
        .unwrap();
        let local = agent_interp_seq::run(
            &agent_interp_seq::Config::new()
                .provider(echo())
                .trace_id(handle.workflow_id()),
            Seen::default(),
            fan_out("topic".into()),
        )
        .await
        .unwrap();
        assert_eq!(outcome.value, local.value);
        assert_eq!(outcome.state, local.state);
        assert_eq!(outcome.trace.canonical(), local.trace.canonical());
        let queried = handle.trace().await.unwrap();
        assert_eq!(queried.canonical(), outcome.trace.canonical());
        let _ = stop.send(());
    };
    let (ran, ()) = tokio::join!(worker, test);
    ran.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_arrives_as_a_signal_and_bad_input_is_a_typed_error() {
    let Some(address) = support::address("steering_arrives_as_a_signal") else {
        return;
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("steer");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(echo())
        .program("listen", |limit_s: u64| -> Op<(), Option<String>> {
            op::wait_steering(Duration::from_secs(limit_s)).map(|s| s.map(|s| s.message))
        })
        .run(async move {
            let _ = stopped.await;
        });
    let test = async {
        let handle = start(&client, "listen", 300u64, StartOptions::new(queue.clone()))
            .await
            .unwrap();
        handle.steer(Steering::new("turn left")).await.unwrap();
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            handle.result::<(), Option<String>>(),
        )
        .await
        .expect("the steering message ends the wait")
        .unwrap();
        assert_eq!(outcome.value.as_deref(), Some("turn left"));

        let bad = start(
            &client,
            "listen",
            "not a number",
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        let error =
            tokio::time::timeout(Duration::from_secs(60), bad.result::<(), Option<String>>())
                .await
                .expect("bad input fails at once")
                .unwrap_err();
        assert!(
            matches!(error, TemporalError::BadInput { ref program, .. } if program == "listen"),
            "{error}"
        );

        let unknown = start(
            &client,
            "nobody_runs_this",
            1u64,
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        let error = tokio::time::timeout(Duration::from_secs(60), unknown.result::<(), ()>())
            .await
            .expect("an unknown program is reported, not waited for")
            .unwrap_err();
        assert!(
            matches!(error, TemporalError::UnknownProgram { ref program, .. } if program == "nobody_runs_this"),
            "{error}"
        );
        let _ = stop.send(());
    };
    let (ran, ()) = tokio::join!(worker, test);
    ran.unwrap();
}

#[tokio::test]
async fn an_unreachable_server_is_a_typed_error_within_the_bound() {
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        agent_interp_temporal::connect_to(
            &format!("127.0.0.1:{port}"),
            "default",
            Duration::from_secs(3),
        ),
    )
    .await
    .expect("connect gives up by itself")
    .unwrap_err();
    assert!(
        matches!(
            error,
            TemporalError::Connect { .. } | TemporalError::Unreachable { .. }
        ),
        "{error}"
    );
}

/// A loop of `turns` model calls (a `par` of two every fifth turn, a race of two every
/// fifth after that), then a wait for a steering message.
fn long_loop(turns: u32) -> Op<Seen, String> {
    fn turn(i: u32, turns: u32) -> Op<Seen, String> {
        if i == turns {
            return op::wait_steering(Duration::from_secs(300))
                .map(|s| s.map(|s| s.message).unwrap_or_default());
        }
        let step = match i % 5 {
            2 => op::par(vec![ask(format!("{i} a")), ask(format!("{i} b"))]).map(|v| v.join("+")),
            // One branch can win: the other gives up after its call.
            4 => op::race(vec![
                ask(format!("{i} x")),
                ask(format!("{i} y")).then(op::fail("y gives up")),
            ]),
            _ => ask(format!("turn {i}")),
        };
        step.and_then(move |answer| {
            turn(i + 1, turns).map(move |rest| format!("{answer} | {rest}"))
        })
    }
    turn(0, turns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_loop_continues_as_new_transparently() {
    let Some(address) = support::address("a_long_loop_continues_as_new_transparently") else {
        return;
    };
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let counted = {
        let asked = asked.clone();
        ScriptedProvider::from_fn(move |_, p| {
            asked.lock().unwrap().push(last_message(p));
            Ok(Response::text(format!("echo: {}", last_message(p))).with_usage(3, 4))
        })
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("rollover");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(counted)
        .continue_as_new_after(Some(4))
        .program("long_loop", long_loop)
        .run(async move {
            let _ = stopped.await;
        });
    let test = async {
        let handle = start(
            &client,
            "long_loop",
            23u32,
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        // The loop hands over every four calls: wait until it has, more than once, then
        // steer the run that is current.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let runs = handle.run_ids().await.unwrap();
            if runs.len() >= 4 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} runs",
                runs.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        handle.steer(Steering::new("stop")).await.unwrap();
        let outcome =
            tokio::time::timeout(Duration::from_secs(120), handle.result::<Seen, String>())
                .await
                .expect("the run ends")
                .unwrap();
        let runs = handle.run_ids().await.unwrap();
        // 23 turns, nine of them two calls (28 to 32 calls), four per run.
        assert!(runs.len() >= 7, "{} runs", runs.len());

        let steering = agent_interp_seq::SteeringQueue::new();
        steering.push(Steering::new("stop"));
        let local = agent_interp_seq::run(
            &agent_interp_seq::Config::new()
                .provider(echo())
                .steering(steering)
                .trace_id(handle.workflow_id()),
            Seen::default(),
            long_loop(23),
        )
        .await
        .unwrap();
        assert_eq!(outcome.value, local.value);
        assert!(outcome.value.ends_with("| stop"), "{}", outcome.value);
        assert_eq!(outcome.state, local.state);
        assert_eq!(outcome.trace.canonical(), local.trace.canonical());
        // No call was made twice across the hand-overs (every prompt is unique), and
        // every turn's were made (a race's loser may have been cancelled before it ran).
        let mut asked = asked.lock().unwrap().clone();
        let all = asked.len();
        asked.sort();
        asked.dedup();
        assert_eq!(asked.len(), all, "a call was made twice: {asked:?}");
        assert!((28..=32).contains(&all), "{all} calls");
        // The query reaches the last run, which rebuilt the whole trace.
        let queried = handle.trace().await.unwrap();
        assert_eq!(queried.canonical(), outcome.trace.canonical());
        let _ = stop.send(());
    };
    let (ran, ()) = tokio::join!(worker, test);
    ran.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_aborts_its_program() {
    let Some(address) = support::address("cancelling_a_run_aborts_its_program") else {
        return;
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("cancel");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(echo())
        .program(
            "ask_then_listen",
            |limit_s: u64| -> Op<Seen, Option<String>> {
                ask("hello".into()).then(
                    op::wait_steering(Duration::from_secs(limit_s)).map(|s| s.map(|s| s.message)),
                )
            },
        )
        .run(async move {
            let _ = stopped.await;
        });
    let test = async {
        let handle = start(
            &client,
            "ask_then_listen",
            3600u64,
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        // Until the program waits (its call is done).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while handle.trace().await.unwrap().infer_calls() < 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the call never ended"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        handle.cancel("the user left").await.unwrap();
        let error = tokio::time::timeout(
            Duration::from_secs(60),
            handle.result::<Seen, Option<String>>(),
        )
        .await
        .expect("a cancelled run ends without waiting out its hour")
        .unwrap_err();
        assert!(
            matches!(error, TemporalError::Stopped { ref program, .. } if program == "ask_then_listen"),
            "{error}"
        );
        let _ = stop.send(());
    };
    let (ran, ()) = tokio::join!(worker, test);
    ran.unwrap();
}
