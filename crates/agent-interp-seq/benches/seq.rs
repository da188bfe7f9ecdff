//! Benchmarks of the sequential interpreter: per-step overhead, memory of deep loops, and
//! what `tracing` spans cost with and without a subscriber.

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

use agent_interp_seq::{Config, run};
use agent_op::op::{self, Op};

const STEPS: u64 = 1_000_000;
const DEEP_STEPS: u64 = 10_000_000;
const RSS_CHILD_ENV: &str = "AGENT_SEQ_BENCH_RSS_STEPS";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime")
}

/// The benchmarked program: `steps` times, increment the state and read it back.
fn modify_get_loop(steps: u64) -> Op<u64, u64> {
    op::repeat(steps, |_| op::modify(|s: &mut u64| *s += 1).then(op::get())).then(op::get())
}

/// The same work written by hand: an async loop applying a boxed closure per step, then
/// reading the state.
async fn hand_written(steps: u64) -> u64 {
    let mut state = 0u64;
    for _ in 0..steps {
        let update: Box<dyn FnOnce(&mut u64) + Send> = Box::new(|s: &mut u64| *s += 1);
        black_box(update)(&mut state);
        black_box(state);
    }
    state
}

/// Times one run of the benchmarked program.
fn time_loop(rt: &tokio::runtime::Runtime, config: &Config) -> std::time::Duration {
    let program = modify_get_loop(STEPS);
    let start = Instant::now();
    let out = rt.block_on(run(config, 0u64, program)).expect("run");
    let elapsed = start.elapsed();
    assert_eq!(out.value, STEPS);
    elapsed
}

fn seq_step(rt: &tokio::runtime::Runtime) {
    let config = Config::new();
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || time_loop(rt, &config),
        || {
            let start = Instant::now();
            let out = rt.block_on(hand_written(STEPS));
            let elapsed = start.elapsed();
            assert_eq!(out, STEPS);
            elapsed
        },
    );
    let steps = STEPS as f64;
    bench_kit::report(
        "seq.step",
        bench_kit::median_per(&subject, steps, bench_kit::ns),
        "ns/step",
        bench_kit::median_per(&baseline, steps, bench_kit::ns),
    );
}

/// `trace.spans_overhead`: `seq.step` under a `tracing` subscriber that keeps spans but
/// prints nothing (the registry), against no subscriber at all.
fn spans_overhead(rt: &tokio::runtime::Runtime) {
    let config = Config::new();
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            let subscriber = tracing_subscriber::registry();
            tracing::subscriber::with_default(subscriber, || time_loop(rt, &config))
        },
        || time_loop(rt, &config),
    );
    let steps = STEPS as f64;
    bench_kit::report(
        "trace.spans_overhead",
        bench_kit::median_per(&subject, steps, bench_kit::ns),
        "ns/step",
        bench_kit::median_per(&baseline, steps, bench_kit::ns),
    );
}

/// `trace.spans_tool_call`: a tool call (one `execute_tool` span) under the registry, against
/// the same call with no subscriber: what a span costs where there is one.
fn spans_tool_call(rt: &tokio::runtime::Runtime) {
    const CALLS: u64 = 20_000;
    let config = Config::new().tool(agent_op::FnTool::new(
        "echo",
        "Echoes",
        serde_json::json!({"type": "object"}),
        |args: serde_json::Value| async move { Ok(args) },
    ));
    let timed = |rt: &tokio::runtime::Runtime| {
        let program: Op<u64, ()> = op::repeat(CALLS, |_| {
            op::tool("echo", serde_json::json!({"n": 1})).map(|_| ())
        });
        let start = Instant::now();
        rt.block_on(run(&config, 0u64, program)).expect("run");
        start.elapsed()
    };
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            let subscriber = tracing_subscriber::registry();
            tracing::subscriber::with_default(subscriber, || timed(rt))
        },
        || timed(rt),
    );
    bench_kit::report(
        "trace.spans_tool_call",
        bench_kit::median_per(&subject, CALLS as f64, bench_kit::ns),
        "ns/call",
        bench_kit::median_per(&baseline, CALLS as f64, bench_kit::ns),
    );
}

/// Runs in a child process: the deep loop on a small stack, printing peak RSS growth in bytes.
fn rss_child(steps: u64) {
    let growth = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let rt = runtime();
            let before = bench_kit::rss_bytes().unwrap_or(0);
            bench_kit::reset_peak_rss();
            let out = rt
                .block_on(run(&Config::new(), 0u64, modify_get_loop(steps)))
                .expect("run");
            assert_eq!(out.value, steps);
            bench_kit::peak_rss_bytes()
                .unwrap_or(0)
                .saturating_sub(before)
        })
        .expect("spawn")
        .join()
        .expect("the deep loop overflowed its 256 KiB stack");
    println!("{growth}");
}

fn rss_growth_mib(steps: u64) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = Command::new(exe)
        .env(RSS_CHILD_ENV, steps.to_string())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("rss child failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let bytes: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some(bytes / (1024.0 * 1024.0))
}

fn deep_loop_rss() {
    // Baseline: the same program over a tenth of the steps. Constant memory means the deep
    // loop grows no more than the short one (ratio about 1).
    let deep = rss_growth_mib(DEEP_STEPS);
    let short = rss_growth_mib(DEEP_STEPS / 10);
    match (deep, short) {
        (Some(deep), Some(short)) => {
            bench_kit::report("seq.deep_loop_rss", deep, "MiB", short.max(1.0 / 1024.0))
        }
        _ => eprintln!("seq.deep_loop_rss: could not measure RSS (needs Linux /proc)"),
    }
}

fn main() {
    if let Ok(steps) = std::env::var(RSS_CHILD_ENV) {
        rss_child(steps.parse().expect("step count"));
        return;
    }
    let rt = runtime();
    if bench_kit::enabled("seq.step") {
        seq_step(&rt);
    }
    if bench_kit::enabled("seq.deep_loop_rss") {
        deep_loop_rss();
    }
    if bench_kit::enabled("trace.spans_overhead") {
        spans_overhead(&rt);
    }
    if bench_kit::enabled("trace.spans_tool_call") {
        spans_tool_call(&rt);
    }
}
