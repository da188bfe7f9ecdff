//! What checkpoints cost a run.
//!
//! `seq.checkpoint_10k`: one run taking 10,000 checkpoints (a loop that updates the state,
//! then checkpoints it), against the same loop without the checkpoints. A checkpoint
//! serializes the state and records where the run stood in its trace, without copying the
//! trace, so the ratio stays flat as runs grow (copying the trace made it O(n²)).

use std::time::Instant;

use agent_interp_seq::{Config, run};
use agent_op::op::{self, Op};

const CHECKPOINTS: u64 = 10_000;

fn program(checkpoints: bool) -> Op<u64, Vec<()>> {
    op::for_each(0..CHECKPOINTS, move |_| {
        let step = op::modify(|n: &mut u64| *n += 1);
        if checkpoints {
            step.then(op::checkpoint("step"))
        } else {
            step.then(op::pure(()))
        }
    })
}

fn main() {
    if !bench_kit::enabled("seq.checkpoint_10k") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let config = Config::new();
    let time = |checkpoints: bool| {
        let start = Instant::now();
        let outcome = rt
            .block_on(run(&config, 0u64, program(checkpoints)))
            .expect("run");
        let elapsed = start.elapsed();
        assert_eq!(outcome.state, CHECKPOINTS);
        let taken = if checkpoints { CHECKPOINTS as usize } else { 0 };
        assert_eq!(outcome.checkpoints.len(), taken);
        elapsed
    };
    let (subject, baseline) = bench_kit::interleaved(9, || time(true), || time(false));
    bench_kit::report(
        "seq.checkpoint_10k",
        bench_kit::median_per(&subject, 1.0, bench_kit::ms),
        "ms",
        bench_kit::median_per(&baseline, 1.0, bench_kit::ms),
    );
}
