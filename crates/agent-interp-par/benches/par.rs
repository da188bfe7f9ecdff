//! Benchmarks of the concurrent interpreter: per-step overhead, fan-out, race cancellation,
//! how the cost of nested scopes grows with depth.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use agent_op::{BoxFuture, Prompt, Provider, ProviderError, Response};

const STEPS: u64 = 1_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}

fn modify_get_loop(steps: u64) -> Op<u64, u64> {
    op::repeat(steps, |_| op::modify(|s: &mut u64| *s += 1).then(op::get())).then(op::get())
}

/// `par.step`: the foundation's 1,000,000-step loop under the concurrent interpreter; baseline:
/// the sequential interpreter on the same loop, measured alternately in the same run.
fn par_step(rt: &tokio::runtime::Runtime) {
    let config = Config::new();
    let (par, seq) = bench_kit::interleaved(
        9,
        || {
            let program = modify_get_loop(STEPS);
            let start = Instant::now();
            let out = rt
                .block_on(agent_interp_par::run(&config, 0u64, program))
                .expect("run");
            let elapsed = start.elapsed();
            assert_eq!(out.value, STEPS);
            elapsed
        },
        || {
            let program = modify_get_loop(STEPS);
            let start = Instant::now();
            let out = rt
                .block_on(agent_interp_seq::run(&config, 0u64, program))
                .expect("run");
            let elapsed = start.elapsed();
            assert_eq!(out.value, STEPS);
            elapsed
        },
    );
    let steps = STEPS as f64;
    bench_kit::report(
        "par.step",
        bench_kit::median_per(&par, steps, bench_kit::ns),
        "ns/step",
        bench_kit::median_per(&seq, steps, bench_kit::ns),
    );
}

/// A provider that takes `latency` of real time per call and counts calls in flight.
#[derive(Clone)]
struct Sleepy {
    latency: Duration,
    live: Arc<AtomicUsize>,
}

struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Provider for Sleepy {
    fn chat<'a>(
        &'a self,
        _model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            self.live.fetch_add(1, Ordering::SeqCst);
            let _live = Live(self.live.clone());
            // A prompt "long" makes this call take 10 s (the race's loser).
            let slow = prompt
                .messages
                .last()
                .is_some_and(|m| m.content() == "long");
            let latency = if slow {
                Duration::from_secs(10)
            } else {
                self.latency
            };
            tokio::time::sleep(latency).await;
            Ok(Response::text("ok").with_usage(3, 1))
        })
    }
}

/// `par.fanout_N`: wall time of a `par` over N branches, each one model call that sleeps 10 ms
/// of real time; baseline: the ideal 10 ms.
fn fanout(rt: &tokio::runtime::Runtime, n: usize, name: &str) {
    let provider = Sleepy {
        latency: Duration::from_millis(10),
        live: Arc::default(),
    };
    let config = Config::new().provider(provider);
    let mut samples = Vec::new();
    let rounds = if n >= 10_000 { 7 } else { 11 };
    for round in 0..=rounds {
        let branches: Vec<Op<(), String>> = (0..n)
            .map(|i| op::infer_raw("m", Prompt::new().user(format!("q{i}"))).map(|r| r.content))
            .collect();
        let program = op::par(branches);
        let start = Instant::now();
        let out = rt
            .block_on(agent_interp_par::run(&config, (), program))
            .expect("run");
        let elapsed = start.elapsed();
        assert_eq!(out.value.len(), n);
        if round > 0 {
            samples.push(bench_kit::ms(elapsed)); // round 0 warms up
        }
    }
    bench_kit::report(name, bench_kit::stats(&samples).median, "ms", 10.0);
}

/// `race.cancel`: time until a race between a 1 ms branch and a 10 s branch returns, with the
/// loser dropped; baseline: the ideal 1 ms.
fn race_cancel(rt: &tokio::runtime::Runtime) {
    let live = Arc::new(AtomicUsize::new(0));
    let provider = Sleepy {
        latency: Duration::from_millis(1),
        live: live.clone(),
    };
    let config = Config::new().provider(provider);
    let mut samples = Vec::new();
    for round in 0..=21 {
        let program: Op<(), String> = op::race(vec![
            op::infer_raw("m", Prompt::new().user("short")).map(|r| r.content),
            op::infer_raw("m", Prompt::new().user("long")).map(|r| r.content),
        ]);
        let start = Instant::now();
        let out = rt
            .block_on(agent_interp_par::run(&config, (), program))
            .expect("run");
        let elapsed = start.elapsed();
        assert_eq!(out.value, "ok");
        assert_eq!(live.load(Ordering::SeqCst), 0, "the loser was dropped");
        if round > 0 {
            samples.push(bench_kit::ms(elapsed));
        }
    }
    bench_kit::report("race.cancel", bench_kit::stats(&samples).median, "ms", 1.0);
}

fn nested_timeouts(depth: usize) -> Op<(), u64> {
    let mut program: Op<(), u64> = op::pure(0);
    for _ in 0..depth {
        program = op::timeout(Duration::from_secs(3600), program).map(|r| r.unwrap_or(0) + 1);
    }
    program
}

/// `par.nested_timeout_scaling`: time per scope of 16,000 `timeout`s nested inside each other
/// under the concurrent interpreter; baseline: the same at 4,000, measured alternately in the
/// same run. Entering and leaving a scope must cost the same however deep it sits, so the ratio
/// stays near 1; it was near 4 (16k nested took 15x the time of 4k) when every scope entered or
/// left rescanned all the scopes around it for the nearest deadline. The test
/// `nested_timeouts_do_not_cost_quadratic_time` only bounds this loosely.
fn nested_timeout_scaling(rt: &tokio::runtime::Runtime) {
    const SMALL: usize = 4_000;
    const LARGE: usize = 16_000;
    let config = Config::new();
    let time = |depth: usize| {
        let program = nested_timeouts(depth);
        let start = Instant::now();
        let out = rt
            .block_on(agent_interp_par::run(&config, (), program))
            .expect("run");
        let elapsed = start.elapsed();
        assert_eq!(out.value, depth as u64);
        elapsed
    };
    let (large, small) = bench_kit::interleaved(9, || time(LARGE), || time(SMALL));
    bench_kit::report(
        "par.nested_timeout_scaling",
        bench_kit::median_per(&large, LARGE as f64, bench_kit::ns),
        "ns/scope",
        bench_kit::median_per(&small, SMALL as f64, bench_kit::ns),
    );
}

fn main() {
    let rt = runtime();
    if bench_kit::enabled("par.step") {
        par_step(&rt);
    }
    for (n, name) in [
        (1, "par.fanout_1"),
        (100, "par.fanout_100"),
        (1_000, "par.fanout_1000"),
        (10_000, "par.fanout_10k"),
    ] {
        if bench_kit::enabled(name) {
            fanout(&rt, n, name);
        }
    }
    if bench_kit::enabled("race.cancel") {
        race_cancel(&rt);
    }
    if bench_kit::enabled("par.nested_timeout_scaling") {
        nested_timeout_scaling(&rt);
    }
}
