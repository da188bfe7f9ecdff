//! Benchmark: writing and reading a 1,000,000-event trace as JSONL, against plain serde_json
//! baselines over the same in-memory sink.
//!
//! - `trace.jsonl_write`: [`write_jsonl`] into a pre-sized `Vec<u8>`, against
//!   `serde_json::to_writer` of each [`TraceEntry`] plus `\n` through a `BufWriter` into a
//!   pre-sized `Vec<u8>`.
//! - `trace.jsonl_read`: [`read_jsonl`] over a `BufReader` of the written bytes, against a
//!   `read_until` loop with `serde_json::from_slice::<TraceEntry>` per line over the baseline's
//!   bytes.
//!
//! Both figures are in events/s (higher is better).
//!
//! - `trace.content_bytes_1000_turns`: the JSONL file of a 1,000-turn conversation whose every
//!   model call records its whole prompt and reply, in bytes, against the same trace written
//!   with content inline (each event serialized with serde); lower is better.
//! - `trace.content_write_1000_turns`: writing that file, in events/s, against the inline
//!   serde baseline (which writes the quadratic bytes).
//! - `trace.content_read_1000_turns`: reading it back whole, in events/s, against serde
//!   reading the inline file.

use std::hint::black_box;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::time::Duration;

use agent_op::trace::ForkKind;
use agent_op::trace::event::{
    CheckpointReached, Fork, InferEnd, InferStart, Join, Recall, StateAccess, ToolCall, ToolResult,
};
use agent_op::trace::jsonl::{read_jsonl, write_jsonl};
use agent_op::{
    Event, EventKind, FinishReason, MemoryId, MicroUsd, Timestamp, Trace, TraceEntry, TraceId,
    content_hash,
};
use serde_json::json;

const EVENTS: usize = 1_000_000;
const ROUNDS: usize = 7;
const READ_BUFFER: usize = 64 * 1024;

/// A small deterministic generator (64-bit LCG), so every run measures the same trace.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "the",
    "weather",
    "in",
    "Oslo",
    "is",
    "sunny",
    "with",
    "a",
    "chance",
    "of",
    "rain",
    "later",
    "today;",
    "plan",
    "trip",
    "to",
    "Bergen",
    "by",
    "train",
    "and",
    "book",
    "hotel",
    "near",
    "harbor",
    "\"quoted\"",
    "café",
    "fjord",
    "tickets",
    "cost",
    "NOK",
    "1200",
    "per",
    "person",
    "— about",
    "€100",
    "{\"json\":",
    "true}",
    "line\nbreak",
    "tab\there",
    "museum",
    "opens",
    "at",
    "9:00",
    "🚆",
];

/// Text of about `chars` characters drawn from `WORDS`, as previews look.
fn text(rng: &mut Lcg, chars: usize) -> String {
    let mut out = String::with_capacity(chars + 16);
    while out.chars().count() < chars {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    out
}

/// A run with a few branches: the root, four branches, and two nested ones. Each block of
/// events is one model-and-tool step of one branch, as an agent loop records it.
fn build_trace(events: usize) -> Trace {
    let root = TraceId::from("brave-otter-3f2a");
    let branches: Vec<TraceId> = (0..4).map(|i| root.child(i)).collect();
    let nested: Vec<TraceId> = (0..2).map(|i| branches[1].child(i)).collect();
    let ids: Vec<TraceId> = std::iter::once(root.clone())
        .chain(branches.iter().cloned())
        .chain(nested.iter().cloned())
        .collect();
    let start = Timestamp::from_timestamp_micros(1_795_341_600_000_000).expect("in range");
    let mut rng = Lcg(0x5eed);
    let mut trace = Trace {
        id: root.clone(),
        parent_id: None,
        start,
        end: None,
        events: Vec::with_capacity(events),
    };
    let mut micros = 0i64;
    let mut iteration = 0u32;
    while trace.events.len() < events {
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let step = rng.below(20);
        let mut kinds: Vec<EventKind> = Vec::with_capacity(8);
        let model = if step % 3 == 0 {
            "large-model"
        } else {
            "small-model"
        };
        kinds.push(EventKind::InferStart(InferStart {
            model: model.into(),
            prompt_preview: text(&mut rng, 100),
            messages: 2 + iteration % 30,
            tools: 3,
            iteration,
            prompt: None,
        }));
        let calls_tool = step % 2 == 0;
        kinds.push(EventKind::InferEnd(InferEnd {
            model: model.into(),
            response_preview: text(&mut rng, 100),
            tool_calls: u32::from(calls_tool),
            finish_reason: if calls_tool {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            },
            input_tokens: 200 + rng.below(4_000),
            output_tokens: 10 + rng.below(800),
            cost: (step != 7).then(|| MicroUsd(rng.below(20_000))),
            duration_us: 50_000 + rng.below(2_000_000),
            iteration,
            reply: None,
        }));
        if calls_tool {
            kinds.push(EventKind::ToolCall(ToolCall {
                name: "search".into(),
                args: json!({"query": text(&mut rng, 40), "limit": rng.below(10)}),
                call_id: Some(format!("call_{step}")),
                iteration,
            }));
            kinds.push(EventKind::ToolResult(ToolResult {
                name: "search".into(),
                success: step != 4,
                output_preview: text(&mut rng, 100),
                duration_us: 1_000 + rng.below(500_000),
                iteration,
                output: None,
            }));
        }
        kinds.push(EventKind::StateRead(StateAccess {
            key: "notes".into(),
        }));
        kinds.push(EventKind::StateWrite(StateAccess {
            key: "notes".into(),
        }));
        match step {
            3 => kinds.push(EventKind::Checkpoint(CheckpointReached {
                name: format!("step-{iteration}"),
            })),
            5 => kinds.push(EventKind::custom(
                "progress",
                json!({"done": iteration, "note": text(&mut rng, 30)}),
            )),
            11 => {
                let query = text(&mut rng, 100);
                kinds.push(EventKind::Recall(Recall {
                    query_hash: content_hash(&query),
                    query_preview: query,
                    results: 2,
                    ids: vec![MemoryId("mem-17".into()), MemoryId("mem-4".into())],
                }));
            }
            13 => {
                let kind = if rng.below(2) == 0 {
                    ForkKind::Par
                } else {
                    ForkKind::Race
                };
                kinds.push(EventKind::Fork(Fork {
                    kind,
                    branch_count: 2,
                    branch_ids: nested.clone(),
                }));
                kinds.push(EventKind::Join(Join {
                    kind,
                    branch_ids: nested.clone(),
                    winner: (kind == ForkKind::Race).then_some(0),
                }));
            }
            17 => kinds.push(EventKind::error(text(&mut rng, 60))),
            _ => {}
        }
        let cancelled = step == 19;
        for kind in kinds {
            if trace.events.len() == events {
                break;
            }
            micros += 1 + rng.below(5_000) as i64;
            trace.events.push(TraceEntry {
                trace_id: id.clone(),
                cancelled,
                event: Event::at(start + chrono::Duration::microseconds(micros), kind),
            });
        }
        iteration = iteration.wrapping_add(1);
    }
    trace.end = Some(start + chrono::Duration::microseconds(micros + 1));
    trace
}

fn write_baseline(trace: &Trace, sink: &mut Vec<u8>) {
    let mut w = BufWriter::new(sink);
    for entry in &trace.events {
        serde_json::to_writer(&mut w, entry).expect("serializable");
        w.write_all(b"\n").expect("in memory");
    }
    w.flush().expect("in memory");
}

fn read_baseline(bytes: &[u8]) -> Vec<TraceEntry> {
    let mut reader = BufReader::with_capacity(READ_BUFFER, bytes);
    let mut out = Vec::new();
    let mut line = Vec::with_capacity(1024);
    while reader.read_until(b'\n', &mut line).expect("in memory") > 0 {
        out.push(serde_json::from_slice::<TraceEntry>(&line).expect("valid line"));
        line.clear();
    }
    out
}

/// Events per second from per-run durations (the median run).
fn rate(samples: &[Duration]) -> f64 {
    1.0 / bench_kit::median_per(samples, EVENTS as f64, bench_kit::secs)
}

/// A conversation of `turns` model calls, each sending everything so far and recording its
/// whole request and reply (what an agent loop's trace holds).
fn conversation(turns: usize) -> Trace {
    use agent_op::{Message, Prompt};
    let mut rng = Lcg(7);
    let start = Timestamp::UNIX_EPOCH;
    let mut trace = Trace::new(TraceId::from("long-talk-0001"));
    trace.start = start;
    // One conversation the prompts share, as the agent loop's do.
    let mut messages = agent_op::Messages::from(vec![Message::system(text(&mut rng, 400))]);
    for turn in 0..turns {
        messages.push(Message::user(text(&mut rng, 300)));
        let at = start + chrono::Duration::milliseconds(turn as i64);
        trace.events.push(TraceEntry {
            trace_id: trace.id.clone(),
            cancelled: false,
            event: Event::at(
                at,
                EventKind::InferStart(InferStart {
                    model: "small-model".into(),
                    prompt_preview: String::new(),
                    messages: messages.len() as u32,
                    tools: 0,
                    iteration: turn as u32,
                    prompt: Some(std::sync::Arc::new(Prompt::from_messages(messages.clone()))),
                }),
            ),
        });
        let reply = Message::assistant(text(&mut rng, 300));
        trace.events.push(TraceEntry {
            trace_id: trace.id.clone(),
            cancelled: false,
            event: Event::at(
                at,
                EventKind::InferEnd(InferEnd {
                    model: "small-model".into(),
                    response_preview: String::new(),
                    tool_calls: 0,
                    finish_reason: FinishReason::Stop,
                    input_tokens: 100,
                    output_tokens: 50,
                    cost: None,
                    duration_us: 1_000,
                    iteration: turn as u32,
                    reply: Some(reply.clone()),
                }),
            ),
        });
        messages.push(reply);
    }
    trace
}

fn bench_content() {
    const TURNS: usize = 1_000;
    let trace = conversation(TURNS);
    let events = trace.events.len() as f64;
    let mut subject_bytes = Vec::new();
    write_jsonl(&trace, &mut subject_bytes).expect("in memory");
    let mut baseline_bytes = Vec::new();
    write_baseline(&trace, &mut baseline_bytes);
    assert!(
        read_jsonl(&subject_bytes[..]).expect("valid trace").trace == trace,
        "the content-addressed file reads back whole"
    );
    bench_kit::report(
        "trace.content_bytes_1000_turns",
        subject_bytes.len() as f64,
        "bytes",
        baseline_bytes.len() as f64,
    );
    let (subject, baseline) = bench_kit::interleaved(
        ROUNDS,
        || {
            let mut sink = Vec::with_capacity(subject_bytes.len());
            bench_kit::time(|| write_jsonl(black_box(&trace), &mut sink).expect("in memory")).0
        },
        || {
            let mut sink = Vec::with_capacity(baseline_bytes.len());
            bench_kit::time(|| write_baseline(black_box(&trace), &mut sink)).0
        },
    );
    let rate = |samples: &[Duration]| 1.0 / bench_kit::median_per(samples, events, bench_kit::secs);
    bench_kit::report(
        "trace.content_write_1000_turns",
        rate(&subject),
        "events/s",
        rate(&baseline),
    );
    let (subject, baseline) = bench_kit::interleaved(
        ROUNDS,
        || bench_kit::time(|| read_jsonl(black_box(&subject_bytes[..])).expect("valid")).0,
        || bench_kit::time(|| read_baseline(black_box(&baseline_bytes))).0,
    );
    bench_kit::report(
        "trace.content_read_1000_turns",
        rate(&subject),
        "events/s",
        rate(&baseline),
    );
}

fn main() {
    if bench_kit::enabled("trace.content") {
        bench_content();
    }
    let bench_write = bench_kit::enabled("trace.jsonl_write");
    let bench_read = bench_kit::enabled("trace.jsonl_read");
    if !bench_write && !bench_read {
        return;
    }
    let trace = build_trace(EVENTS);

    // Written once up front: the input of the read benchmark, and the sizes of the sinks.
    let mut subject_bytes = Vec::new();
    write_jsonl(&trace, &mut subject_bytes).expect("in memory");
    let mut baseline_bytes = Vec::new();
    write_baseline(&trace, &mut baseline_bytes);

    if bench_write {
        // Sinks allocated and touched once, then reused: every run writes into memory that is
        // already mapped, for the subject and the baseline alike.
        let mut subject_sink = Vec::with_capacity(subject_bytes.len());
        let mut baseline_sink = Vec::with_capacity(baseline_bytes.len());
        let (subject, baseline) = bench_kit::interleaved(
            ROUNDS,
            || {
                subject_sink.clear();
                let (d, ()) = bench_kit::time(|| {
                    write_jsonl(black_box(&trace), &mut subject_sink).expect("in memory")
                });
                assert_eq!(subject_sink.len(), subject_bytes.len());
                d
            },
            || {
                baseline_sink.clear();
                let (d, ()) =
                    bench_kit::time(|| write_baseline(black_box(&trace), &mut baseline_sink));
                assert_eq!(baseline_sink.len(), baseline_bytes.len());
                d
            },
        );
        bench_kit::report(
            "trace.jsonl_write",
            rate(&subject),
            "events/s",
            rate(&baseline),
        );
    }

    if bench_read {
        // Check once that both sides read back what was written.
        let read = read_jsonl(&subject_bytes[..]).expect("valid trace");
        assert!(read.torn.is_none());
        assert!(read.trace == trace, "the JSONL trace reads back unchanged");
        drop(read);
        assert_eq!(read_baseline(&baseline_bytes), trace.events);

        let (subject, baseline) = bench_kit::interleaved(
            ROUNDS,
            || {
                let (d, read) = bench_kit::time(|| {
                    read_jsonl(BufReader::with_capacity(
                        READ_BUFFER,
                        black_box(&subject_bytes[..]),
                    ))
                    .expect("valid trace")
                });
                assert_eq!(read.trace.events.len(), EVENTS);
                d
            },
            || {
                let (d, entries) = bench_kit::time(|| read_baseline(black_box(&baseline_bytes)));
                assert_eq!(entries.len(), EVENTS);
                d
            },
        );
        bench_kit::report(
            "trace.jsonl_read",
            rate(&subject),
            "events/s",
            rate(&baseline),
        );
    }
}
