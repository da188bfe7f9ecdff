//! - `trace.otlp_export`: events per second of a run whose spans are exported over OTLP/HTTP
//!   (batched, into an in-process receiver on 127.0.0.1, counted until all have arrived),
//!   against the same run with no subscriber.
//! - `trace.otlp_run`: the same, timing the run alone (the export finishes after it, on the
//!   exporter's threads): what the OpenTelemetry layer costs the program itself.

#[path = "../tests/support/receiver.rs"]
mod receiver;

use std::time::{Duration, Instant};

use agent_interp_seq::Config;
use agent_op::op::{self, Op};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

const CALLS: u64 = 5_000;
/// The events such a run records: a start and an end per call, and the run's end.
const EVENTS: u64 = 2 * CALLS + 1;

fn config() -> Config {
    Config::new().tool(agent_op::FnTool::new(
        "echo",
        "Echoes",
        json!({"type": "object"}),
        |args: serde_json::Value| async move { Ok(args) },
    ))
}

fn program() -> Op<(), ()> {
    op::repeat(CALLS, |_| op::tool("echo", json!({"n": 1})).map(|_| ()))
}

/// Runs the program; returns the time and how many trace events it recorded.
fn run(rt: &tokio::runtime::Runtime) -> (Duration, usize) {
    let started = Instant::now();
    let outcome = rt
        .block_on(agent_interp_seq::run(&config(), (), program()))
        .expect("the run succeeds");
    (started.elapsed(), outcome.trace.events.len())
}

/// A fresh receiver, and a subscriber exporting to it over OTLP/HTTP with its guard.
fn exporting() -> (
    receiver::Receiver,
    impl tracing::Subscriber + Send + Sync,
    agent_otel::OtelGuard,
) {
    let receiver = receiver::Receiver::start();
    let (layer, guard) = agent_otel::Otel::new("bench")
        .endpoint(receiver.url())
        .build()
        .expect("the exporter builds");
    (receiver, tracing_subscriber::registry().with(layer), guard)
}

fn main() {
    if !bench_kit::enabled("trace.otlp_export") {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (subject, baseline) = bench_kit::interleaved(
        5,
        || {
            let (receiver, subscriber, guard) = exporting();
            let started = Instant::now();
            let events = tracing::subscriber::with_default(subscriber, || run(&rt).1);
            guard.shutdown().expect("the export flushes");
            let spans = CALLS as usize + 1;
            assert_eq!(receiver.wait_for(spans).len(), spans, "every span arrives");
            assert_eq!(events, EVENTS as usize);
            started.elapsed()
        },
        || run(&rt).0,
    );
    let (run_only, run_baseline) = bench_kit::interleaved(
        5,
        || {
            let (_receiver, subscriber, guard) = exporting();
            let elapsed = tracing::subscriber::with_default(subscriber, || run(&rt).0);
            guard.shutdown().expect("the export flushes");
            elapsed
        },
        || run(&rt).0,
    );
    let events = EVENTS as f64;
    let rate = |samples: &[Duration]| events / bench_kit::median_per(samples, 1.0, bench_kit::secs);
    bench_kit::report(
        "trace.otlp_export",
        rate(&subject),
        "events/s",
        rate(&baseline),
    );
    bench_kit::report(
        "trace.otlp_run",
        rate(&run_only),
        "events/s",
        rate(&run_baseline),
    );
}
