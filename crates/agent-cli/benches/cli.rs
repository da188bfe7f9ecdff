//! `cli.trace_summary_1m`: seconds for `agent trace summary` (the real binary, a process of
//! its own) on a 1,000,000-event JSONL trace; baseline: reading the same file with the trace
//! reader alone, in process. The ratio is what summarizing and starting a process add.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use agent_op::trace::event::{InferEnd, InferStart, ToolCall, ToolResult};
use agent_op::{Event, EventKind, FinishReason, MicroUsd, Trace, TraceEntry, TraceId};
use chrono::{TimeDelta, Utc};
use serde_json::json;

const EVENTS: usize = 1_000_000;

/// A trace of `EVENTS` events: rounds of a model call and a tool call, over 8 branches.
fn write_trace(path: &Path) {
    let root = TraceId::from("bench-run-0001");
    let branches: Vec<TraceId> = (0..8).map(|i| root.child(i)).collect();
    let start = Utc::now();
    let mut trace = Trace::new(root);
    trace.events.reserve(EVENTS);
    let mut i = 0usize;
    while trace.events.len() < EVENTS {
        let at = start + TimeDelta::microseconds(i as i64 * 10);
        let branch = &branches[i % branches.len()];
        let kinds = [
            EventKind::InferStart(InferStart {
                model: "small".into(),
                prompt_preview: "What is next?".into(),
                messages: 4,
                tools: 2,
                iteration: 1,
                prompt: None,
            }),
            EventKind::InferEnd(InferEnd {
                model: "small".into(),
                response_preview: "Calling the search tool.".into(),
                tool_calls: 1,
                finish_reason: FinishReason::ToolCalls,
                input_tokens: 812,
                output_tokens: 37,
                cost: Some(MicroUsd(120)),
                duration_us: 650_000,
                iteration: 1,
                reply: None,
            }),
            EventKind::ToolCall(ToolCall {
                name: "search".into(),
                args: json!({"query": "effect systems", "limit": 5}),
                call_id: Some(format!("call_{i}")),
                iteration: 1,
            }),
            EventKind::ToolResult(ToolResult {
                name: "search".into(),
                success: i % 17 != 0,
                output_preview: "5 results".into(),
                duration_us: 12_000,
                iteration: 1,
                output: None,
            }),
        ];
        for kind in kinds {
            trace.events.push(TraceEntry {
                trace_id: branch.clone(),
                cancelled: false,
                event: Event::at(at, kind),
            });
        }
        i += 1;
    }
    trace.events.truncate(EVENTS);
    agent_op::trace::jsonl::write_trace_file(path, &trace).expect("the trace is written");
}

fn main() {
    if !bench_kit::enabled("cli.trace_summary_1m") {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("big.trace.jsonl");
    write_trace(&path);
    let agent = env!("CARGO_BIN_EXE_agent");
    let (subject, baseline) = bench_kit::interleaved(
        3,
        || {
            let started = Instant::now();
            let out = Command::new(agent)
                .args(["trace", "summary", "--json"])
                .arg(&path)
                .output()
                .expect("agent runs");
            let elapsed = started.elapsed();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let summary: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("a JSON summary");
            assert_eq!(summary["events"], EVENTS as u64);
            elapsed
        },
        || {
            let started = Instant::now();
            let read = agent_op::trace::jsonl::read_trace_file(&path).expect("the trace reads");
            let elapsed = started.elapsed();
            assert_eq!(read.trace.events.len(), EVENTS);
            elapsed
        },
    );
    let secs = |s: &[Duration]| bench_kit::median_per(s, 1.0, bench_kit::secs);
    bench_kit::report("cli.trace_summary_1m", secs(&subject), "s", secs(&baseline));
}
