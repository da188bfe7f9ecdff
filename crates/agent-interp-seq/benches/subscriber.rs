//! What streaming a run's trace to a JSONL file costs the run.
//!
//! `seq.jsonl_subscriber_10k`: a run emitting 10,000 events with a [`JsonlSubscriber`]
//! writing them to a file, against the same run with a subscriber that only counts them
//! (the ideal: observing costs nothing). The run ends when `run` returns, which includes
//! writing and `fsync`ing the file.
//!
//! `seq.jsonl_on_event`: what one event costs the thread running the program (the writing
//! happens on the subscriber's own thread), against the counting subscriber.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use agent_interp_seq::{Config, JsonlSubscriber, Subscriber, run};
use agent_op::op::{self, Op};
use agent_op::{Event, EventKind, TraceId};

const EVENTS: u64 = 10_000;

fn program() -> Op<(), Vec<()>> {
    op::for_each(0..EVENTS, |i| {
        op::emit(EventKind::custom("tick", serde_json::json!({ "i": i })))
    })
}

fn main() {
    if bench_kit::enabled("seq.jsonl_on_event") {
        on_event();
    }
    if bench_kit::enabled("seq.jsonl_subscriber_10k") {
        whole_run();
    }
}

fn on_event() {
    let dir = tempfile::tempdir().expect("temp dir");
    let id = TraceId::from("bench-run-0001");
    let events: Vec<Event> = (0..EVENTS)
        .map(|i| Event::now(EventKind::custom("tick", serde_json::json!({ "i": i }))))
        .collect();
    let mut file = 0;
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            file += 1;
            let path = dir.path().join(format!("events-{file}.jsonl"));
            let (subscriber, _) = JsonlSubscriber::open(&path).expect("open");
            let start = Instant::now();
            for event in &events {
                subscriber.on_event(&id, event);
            }
            let elapsed = start.elapsed();
            drop(subscriber);
            elapsed
        },
        || {
            let seen = AtomicU64::new(0);
            let counter = |_: &TraceId, _: &Event| {
                seen.fetch_add(1, Ordering::Relaxed);
            };
            let start = Instant::now();
            for event in &events {
                counter.on_event(&id, event);
            }
            start.elapsed()
        },
    );
    bench_kit::report(
        "seq.jsonl_on_event",
        bench_kit::median_per(&subject, EVENTS as f64, bench_kit::ns),
        "ns/event",
        bench_kit::median_per(&baseline, EVENTS as f64, bench_kit::ns),
    );
}

fn whole_run() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut file = 0;
    let (subject, baseline) = bench_kit::interleaved(
        9,
        || {
            file += 1;
            let path = dir.path().join(format!("run-{file}.jsonl"));
            let (subscriber, _) = JsonlSubscriber::open(&path).expect("open");
            let subscriber = Arc::new(subscriber);
            let config = Config::new().shared_subscriber(subscriber.clone() as Arc<dyn Subscriber>);
            let start = Instant::now();
            rt.block_on(run(&config, (), program())).expect("run");
            let elapsed = start.elapsed();
            assert!(subscriber.errors().is_empty());
            elapsed
        },
        || {
            let seen = Arc::new(AtomicU64::new(0));
            let counter = seen.clone();
            let config = Config::new().subscribe(move |_: &TraceId, _: &Event| {
                counter.fetch_add(1, Ordering::Relaxed);
            });
            let start = Instant::now();
            rt.block_on(run(&config, (), program())).expect("run");
            let elapsed = start.elapsed();
            assert!(seen.load(Ordering::Relaxed) >= EVENTS);
            elapsed
        },
    );
    bench_kit::report(
        "seq.jsonl_subscriber_10k",
        bench_kit::median_per(&subject, 1.0, bench_kit::ms),
        "ms",
        bench_kit::median_per(&baseline, 1.0, bench_kit::ms),
    );
}
