//! Pure constructors, state, loops and the `op!` macro under the sequential interpreter.

mod common;

use std::ops::ControlFlow;

use agent_interp_seq::{Config, ErrorKind, run};
use agent_op::{EventKind, EventType};
use agent_op::{Op, op};
use common::types;

async fn value<S: Clone + Send + 'static, A: Send + 'static>(
    state: S,
    program: Op<S, A>,
) -> (A, S) {
    let outcome = run(&Config::new(), state, program)
        .await
        .expect("run succeeds");
    (outcome.value, outcome.state)
}

#[tokio::test]
async fn pure_map_and_then_then() {
    let program: Op<(), String> = op::pure(20)
        .map(|x: i32| x + 1)
        .and_then(|x| op::pure(x * 2))
        .then(op::pure("done"))
        .map(|s: &str| s.to_owned());
    assert_eq!(value((), program).await.0, "done");

    let program: Op<(), i32> = op::pure(20)
        .map(|x: i32| x + 1)
        .and_then(|x| op::pure(x * 2));
    assert_eq!(value((), program).await.0, 42);
}

#[tokio::test]
async fn state_get_put_modify_gets() {
    let program: Op<Vec<u32>, (Vec<u32>, usize)> = op::put(vec![1, 2])
        .then(op::modify(|v: &mut Vec<u32>| v.push(3)))
        .then(op::get())
        .and_then(|snapshot| op::gets(|v: &Vec<u32>| v.len()).map(move |n| (snapshot, n)));
    let ((snapshot, len), state) = value(vec![9], program).await;
    assert_eq!(snapshot, vec![1, 2, 3]);
    assert_eq!(len, 3);
    assert_eq!(state, vec![1, 2, 3]);
}

#[tokio::test]
async fn plain_state_ops_record_nothing_labelled_ones_do() {
    let program: Op<u32, u32> = op::modify(|n: &mut u32| *n += 1)
        .then(op::get())
        .then(op::modify_labeled("counter", |n: &mut u32| *n += 1))
        .then(op::gets_labeled("counter", |n: &u32| *n));
    let outcome = run(&Config::new(), 0, program).await.unwrap();
    assert_eq!(outcome.value, 2);
    assert_eq!(
        types(&outcome.trace),
        vec![EventType::StateWrite, EventType::StateRead]
    );
    match &outcome.trace.events[0].event.kind {
        EventKind::StateWrite(w) => assert_eq!(w.key, "counter"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn sequence_for_each_repeat_and_loop() {
    let program: Op<u32, Vec<u32>> = op::sequence(vec![op::pure(1), op::pure(2), op::pure(3)]);
    assert_eq!(value(0, program).await.0, vec![1, 2, 3]);

    let program: Op<u32, Vec<String>> = op::for_each(vec!["a", "b"], |s| {
        op::modify(|n: &mut u32| *n += 1).map(move |_| s.to_uppercase())
    });
    let (v, state) = value(0, program).await;
    assert_eq!(v, vec!["A", "B"]);
    assert_eq!(state, 2);

    let program: Op<u64, ()> = op::repeat(5, |i| op::modify(move |n: &mut u64| *n += i));
    assert_eq!(value(0, program).await.1, 10);

    let program: Op<u64, ()> = op::repeat(0, |_| op::modify(|n: &mut u64| *n += 1));
    assert_eq!(value(7, program).await.1, 7, "repeat(0) runs nothing");

    let program: Op<(), u64> = op::loop_fn((1u64, 0u64), |(i, acc)| {
        op::pure(if i > 100 {
            ControlFlow::Break(acc)
        } else {
            ControlFlow::Continue((i + 1, acc + i))
        })
    });
    assert_eq!(value((), program).await.0, 5050);
}

#[tokio::test]
async fn do_notation_macro() {
    let program: Op<u32, String> = op! {
        let x <- op::pure(2u32);
        let (a, b) <- op::pure((x, 3u32));
        let sum = a + b;
        op::modify(move |n: &mut u32| *n = sum);
        let n <- op::get();
        op::pure(format!("{n}"))
    };
    let (v, s) = value(0, program).await;
    assert_eq!(v, "5");
    assert_eq!(s, 5);
}

#[tokio::test]
async fn fail_stops_the_run_with_the_message_and_an_error_event() {
    let program: Op<u32, ()> = op::modify(|n: &mut u32| *n = 1).then(op::fail("broken plan"));
    let err = run(&Config::new(), 0, program).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Program("broken plan".into()));
    assert_eq!(err.trace.errors(), vec!["broken plan"]);
}

/// Runs on a thread with a deliberately small stack: a loop that recursed per step (or a
/// continuation chain that nested) would overflow it.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the test thread did not overflow its stack")
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[test]
fn ten_million_step_loops_run_in_constant_stack_and_memory() {
    let n = 10_000_000u64;
    let (total, growth) = on_small_stack(move || {
        let program: Op<u64, u64> =
            op::repeat(n, |_| op::modify(|s: &mut u64| *s += 1).then(op::get())).then(op::get());
        let before = rss_bytes();
        let total = block_on(run(&Config::new(), 0u64, program)).unwrap().value;
        let growth = before.zip(rss_bytes()).map(|(b, a)| a.saturating_sub(b));
        (total, growth)
    });
    assert_eq!(total, n);
    if let Some(growth) = growth {
        assert!(
            growth < 16 * 1024 * 1024,
            "RSS grew by {growth} bytes over {n} steps"
        );
    }
}

#[test]
fn million_step_recursive_programs_run_in_constant_stack() {
    let n = 1_000_000u64;

    // A tail-recursive program built with `and_then`.
    fn count_down(n: u64) -> Op<u64, u64> {
        if n == 0 {
            op::get()
        } else {
            op::modify(|s: &mut u64| *s += 1).and_then(move |_| count_down(n - 1))
        }
    }
    let total = on_small_stack(move || {
        block_on(run(&Config::new(), 0, count_down(n)))
            .unwrap()
            .value
    });
    assert_eq!(total, n);
}

#[test]
fn long_left_nested_chains_run_and_drop_without_overflow() {
    let n = 200_000u64;
    let total = on_small_stack(move || {
        // `fold` nests every bind inside the previous one: `((p >>= f) >>= f) >>= ...`.
        let program: Op<u64, u64> = (0..n).fold(op::pure(0u64), |p, _| p.map(|x| x + 1));
        block_on(run(&Config::new(), 0u64, program)).unwrap().value
    });
    assert_eq!(total, n);

    on_small_stack(move || {
        let program: Op<u64, u64> = (0..n).fold(op::pure(0u64), |p, _| p.map(|x| x + 1));
        drop(program); // never run: must still be torn down iteratively
        let program: Op<u64, ()> = (0..n).fold(op::pure(()), |p, _| {
            p.then(op::modify(|s: &mut u64| *s += 1))
        });
        drop(program);
    });
}
