//! What nesting scopes costs.
//!
//! `seq.nested_timeout_10k`: a program of 10,000 `timeout`s nested inside each other, run to
//! completion, against the same nesting of plain `map`s (the structure without the scopes).
//! Entering and leaving a scope must cost the same however deep it sits: this grew
//! quadratically (1k nested: 2 ms; 10k: 124 ms; 50k: 3.2 s) when every scope entered or left
//! rescanned all the scopes around it for the nearest deadline.
//!
//! `seq.nested_timeout_scaling`: time per scope of 16,000 nested `timeout`s against the same at
//! 4,000: near 1 while entering and leaving a scope costs the same at any depth, near 4 when
//! it grows linearly with depth (16k nested took 15x the time of 4k then). The test
//! `nested_timeouts_do_not_cost_quadratic_time` (agent-interp-par) only bounds this loosely.

use std::time::{Duration, Instant};

use agent_interp_seq::{Config, run};
use agent_op::op::{self, Op};

const DEPTH: usize = 10_000;

fn nested(depth: usize, timeouts: bool) -> Op<(), u64> {
    let mut program: Op<(), u64> = op::pure(0);
    for _ in 0..depth {
        program = if timeouts {
            op::timeout(Duration::from_secs(3600), program).map(|r| r.unwrap_or(0) + 1)
        } else {
            program.map(|n| n + 1)
        };
    }
    program
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let config = Config::new();
    let time = |depth: usize, timeouts: bool| {
        let program = nested(depth, timeouts);
        let start = Instant::now();
        let outcome = rt.block_on(run(&config, (), program)).expect("run");
        let elapsed = start.elapsed();
        assert_eq!(outcome.value, depth as u64);
        elapsed
    };
    if bench_kit::enabled("seq.nested_timeout_10k") {
        let (subject, baseline) =
            bench_kit::interleaved(9, || time(DEPTH, true), || time(DEPTH, false));
        bench_kit::report(
            "seq.nested_timeout_10k",
            bench_kit::median_per(&subject, 1.0, bench_kit::ms),
            "ms",
            bench_kit::median_per(&baseline, 1.0, bench_kit::ms),
        );
    }
    if bench_kit::enabled("seq.nested_timeout_scaling") {
        const SMALL: usize = 4_000;
        const LARGE: usize = 16_000;
        let (large, small) = bench_kit::interleaved(9, || time(LARGE, true), || time(SMALL, true));
        bench_kit::report(
            "seq.nested_timeout_scaling",
            bench_kit::median_per(&large, LARGE as f64, bench_kit::ns),
            "ns/scope",
            bench_kit::median_per(&small, SMALL as f64, bench_kit::ns),
        );
    }
}
