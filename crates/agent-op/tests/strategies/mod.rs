//! Proptest strategies for every trace type, shared by the trace and JSONL tests, plus small
//! helpers to build events by hand.

// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use agent_op::context::{
    CompileReport, ContextReport, DropReason, Outcome, Priority, SectionReport, SectionSource,
    SourceOutcome, SourceReport, ToolReport,
};
use agent_op::trace::event::{
    CheckpointReached, Custom, Failure, Forget, Fork, InferEnd, InferStart, Join, LimitStart,
    Recall, Remember, StateAccess, TimeoutStart, ToolCall, ToolResult,
};
use agent_op::trace::{ForkKind, Timestamp};
use agent_op::{
    Budget, Event, EventKind, EventType, Exhausted, FinishReason, MemoryId, MicroUsd, Resource,
    Steering, Tag, TimedOut, Trace, TraceEntry, TraceId,
};
use proptest::prelude::*;
use serde_json::Value;

/// Characters that stress JSON escaping: quotes, backslashes, control characters, line and
/// paragraph separators, multi-byte characters.
const NASTY: &[char] = &[
    '"', '\\', '/', '\n', '\r', '\t', '\u{0}', '\u{1}', '\u{1f}', '\u{7f}', '\u{2028}', '\u{2029}',
    '\u{feff}', 'é', '€', '漢', '😀', '{', '}', '[', ']', ':', ',', ' ',
];

/// Arbitrary text: any Unicode scalar values, mixed with characters that need escaping.
pub fn text() -> impl Strategy<Value = String> + Clone {
    prop::collection::vec(
        prop_oneof![
            3 => any::<char>(),
            2 => prop::sample::select(NASTY),
            3 => prop::char::range('a', 'z'),
        ],
        0..24,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// A timestamp with microsecond precision between 1900 and 2100.
pub fn timestamp() -> impl Strategy<Value = Timestamp> + Clone {
    (-2_208_988_800_000_000i64..4_102_444_800_000_000).prop_map(|micros| {
        Timestamp::from_timestamp_micros(micros).expect("the range is representable")
    })
}

/// A JSON number that survives a text round trip: integers of either sign, and decimals with
/// few digits (serde_json parses those exactly).
fn json_number() -> impl Strategy<Value = Value> + Clone {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1_000_000_000i64..1_000_000_000).prop_map(|n| Value::from(n as f64 / 1000.0)),
    ]
}

/// A JSON value of depth at most 3.
pub fn json_value() -> impl Strategy<Value = Value> + Clone {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A run id in the `adjective-noun-hex` shape.
pub fn root_id() -> impl Strategy<Value = TraceId> + Clone {
    ("[a-z]{1,8}", "[a-z]{1,8}", 0u32..=0xffff)
        .prop_map(|(a, n, hex)| TraceId::from(format!("{a}-{n}-{hex:04x}")))
}

/// A run id or a branch id up to three forks deep.
pub fn trace_id() -> impl Strategy<Value = TraceId> + Clone {
    (root_id(), prop::collection::vec(0usize..12, 0..4))
        .prop_map(|(root, path)| path.into_iter().fold(root, |id, index| id.child(index)))
}

/// Any trace id, including ones that are not in the usual shape (ids are opaque text to the
/// format).
pub fn any_trace_id() -> impl Strategy<Value = TraceId> + Clone {
    prop_oneof![4 => trace_id(), 1 => text().prop_map(TraceId::from)]
}

pub fn micro_usd() -> impl Strategy<Value = MicroUsd> + Clone {
    any::<u64>().prop_map(MicroUsd)
}

/// A duration of whole milliseconds (the unit the format stores).
pub fn millis() -> impl Strategy<Value = Duration> + Clone {
    any::<u64>().prop_map(Duration::from_millis)
}

pub fn finish_reason() -> impl Strategy<Value = FinishReason> + Clone {
    prop_oneof![
        Just(FinishReason::Stop),
        Just(FinishReason::Length),
        Just(FinishReason::ToolCalls),
        Just(FinishReason::ContentFilter),
        text().prop_map(FinishReason::Other),
    ]
}

pub fn fork_kind() -> impl Strategy<Value = ForkKind> + Clone {
    prop_oneof![Just(ForkKind::Par), Just(ForkKind::Race)]
}

pub fn resource() -> impl Strategy<Value = Resource> + Clone {
    prop_oneof![
        Just(Resource::Cost),
        Just(Resource::Tokens),
        Just(Resource::Time),
        Just(Resource::Calls),
    ]
}

pub fn budget() -> impl Strategy<Value = Budget> + Clone {
    (
        prop::option::of(micro_usd()),
        prop::option::of(any::<u64>()),
        prop::option::of(millis()),
        prop::option::of(any::<u64>()),
    )
        .prop_map(|(cost, tokens, time, calls)| {
            let mut budget = Budget::default();
            budget.cost = cost;
            budget.tokens = tokens;
            budget.time = time;
            budget.calls = calls;
            budget
        })
}

/// A message of a conversation (few distinct texts, so prompts share messages as real
/// conversations do and files store each once).
pub fn message() -> impl Strategy<Value = agent_op::Message> + Clone {
    let short = prop_oneof![
        Just("Be brief.".to_owned()),
        Just("What's the weather?".to_owned()),
        text()
    ];
    prop_oneof![
        short.clone().prop_map(agent_op::Message::system),
        short.clone().prop_map(agent_op::Message::user),
        (short.clone(), text(), json_value()).prop_map(|(content, name, arguments)| {
            agent_op::Message::Assistant {
                content,
                tool_calls: vec![agent_op::ToolCall {
                    id: "call_1".into(),
                    name,
                    arguments,
                }],
            }
        }),
        (text(), short).prop_map(|(id, content)| agent_op::Message::tool_result(id, content)),
    ]
}

/// A recorded prompt: messages, tools and options.
pub fn prompt() -> impl Strategy<Value = agent_op::Prompt> + Clone {
    (
        prop::collection::vec(message(), 0..4),
        prop::collection::vec(
            (text(), text(), json_value()).prop_map(|(name, description, parameters)| {
                agent_op::ToolDefinition {
                    name,
                    description,
                    parameters,
                }
            }),
            0..2,
        ),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(messages, tools, max_tokens)| {
            let mut prompt = agent_op::Prompt::from_messages(messages);
            prompt.tools = tools.into();
            prompt.options.max_tokens = max_tokens;
            prompt
        })
}

pub fn infer_start() -> impl Strategy<Value = InferStart> + Clone {
    (
        (text(), text(), any::<u32>(), any::<u32>(), any::<u32>()),
        prop::option::of(prompt()),
    )
        .prop_map(
            |((model, prompt_preview, messages, tools, iteration), prompt)| InferStart {
                model,
                prompt_preview,
                messages,
                tools,
                iteration,
                prompt: prompt.map(std::sync::Arc::new),
            },
        )
}

pub fn infer_end() -> impl Strategy<Value = InferEnd> + Clone {
    (
        (text(), text(), any::<u32>(), finish_reason()),
        (
            any::<u64>(),
            any::<u64>(),
            prop::option::of(micro_usd()),
            any::<u64>(),
            any::<u32>(),
        ),
        prop::option::of(message()),
    )
        .prop_map(
            |(
                (model, response_preview, tool_calls, finish_reason),
                (input_tokens, output_tokens, cost, duration_us, iteration),
                reply,
            )| InferEnd {
                model,
                response_preview,
                tool_calls,
                finish_reason,
                input_tokens,
                output_tokens,
                cost,
                duration_us,
                iteration,
                reply,
            },
        )
}

pub fn tool_call() -> impl Strategy<Value = ToolCall> + Clone {
    (
        text(),
        json_value(),
        proptest::option::of(text()),
        any::<u32>(),
    )
        .prop_map(|(name, args, call_id, iteration)| ToolCall {
            name,
            args,
            call_id,
            iteration,
        })
}

pub fn tool_result() -> impl Strategy<Value = ToolResult> + Clone {
    (
        (text(), any::<bool>(), text(), any::<u64>(), any::<u32>()),
        prop::option::of(json_value()),
    )
        .prop_map(
            |((name, success, output_preview, duration_us, iteration), output)| ToolResult {
                name,
                success,
                output_preview,
                duration_us,
                iteration,
                output,
            },
        )
}

pub fn state_access() -> impl Strategy<Value = StateAccess> + Clone {
    text().prop_map(|key| StateAccess { key })
}

pub fn fork() -> impl Strategy<Value = Fork> + Clone {
    (
        fork_kind(),
        any::<u32>(),
        prop::collection::vec(any_trace_id(), 0..5),
    )
        .prop_map(|(kind, branch_count, branch_ids)| Fork {
            kind,
            branch_count,
            branch_ids,
        })
}

pub fn join() -> impl Strategy<Value = Join> + Clone {
    (
        fork_kind(),
        prop::collection::vec(any_trace_id(), 0..5),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(kind, branch_ids, winner)| Join {
            kind,
            branch_ids,
            winner,
        })
}

pub fn checkpoint_reached() -> impl Strategy<Value = CheckpointReached> + Clone {
    text().prop_map(|name| CheckpointReached { name })
}

pub fn limit_start() -> impl Strategy<Value = LimitStart> + Clone {
    budget().prop_map(|budget| LimitStart { budget })
}

pub fn exhausted() -> impl Strategy<Value = Exhausted> + Clone {
    (resource(), any::<u64>(), any::<u64>()).prop_map(|(resource, spent, limit)| Exhausted {
        resource,
        spent,
        limit,
    })
}

pub fn timeout_start() -> impl Strategy<Value = TimeoutStart> + Clone {
    millis().prop_map(|limit| TimeoutStart { limit })
}

pub fn timed_out() -> impl Strategy<Value = TimedOut> + Clone {
    millis().prop_map(|limit| TimedOut { limit })
}

pub fn steering() -> impl Strategy<Value = Steering> + Clone {
    text().prop_map(Steering::new)
}

pub fn memory_id() -> impl Strategy<Value = MemoryId> + Clone {
    text().prop_map(MemoryId)
}

pub fn remember() -> impl Strategy<Value = Remember> + Clone {
    (
        memory_id(),
        text(),
        text(),
        prop::collection::vec(text().prop_map(Tag), 0..4),
    )
        .prop_map(|(id, content_preview, content_hash, tags)| Remember {
            id,
            content_preview,
            content_hash,
            tags,
        })
}

pub fn recall() -> impl Strategy<Value = Recall> + Clone {
    (
        text(),
        text(),
        any::<u32>(),
        prop::collection::vec(memory_id(), 0..4),
    )
        .prop_map(|(query_preview, query_hash, results, ids)| Recall {
            query_preview,
            query_hash,
            results,
            ids,
        })
}

pub fn forget() -> impl Strategy<Value = Forget> + Clone {
    (memory_id(), any::<bool>()).prop_map(|(id, existed)| Forget { id, existed })
}

pub fn custom() -> impl Strategy<Value = Custom> + Clone {
    (text(), json_value()).prop_map(|(name, data)| Custom { name, data })
}

pub fn failure() -> impl Strategy<Value = Failure> + Clone {
    text().prop_map(|message| Failure { message })
}

pub fn priority() -> impl Strategy<Value = Priority> + Clone {
    prop_oneof![
        Just(Priority::Low),
        Just(Priority::Medium),
        Just(Priority::High),
        Just(Priority::Critical)
    ]
}

pub fn section_source() -> impl Strategy<Value = SectionSource> + Clone {
    prop_oneof![
        text().prop_map(|origin| SectionSource::Static {
            origin: origin.into()
        }),
        Just(SectionSource::Temporal),
        (0.0f32..=1.0).prop_map(|score| SectionSource::Semantic { score }),
        Just(SectionSource::Knowledge),
        text().prop_map(|key| SectionSource::State { key }),
        text().prop_map(|condition| SectionSource::Conditional { condition }),
        prop::collection::vec(text(), 0..3).prop_map(|of| SectionSource::Summary { of }),
    ]
}

pub fn outcome() -> impl Strategy<Value = Outcome> + Clone {
    prop_oneof![
        Just(Outcome::Kept),
        Just(Outcome::Shrunk),
        prop_oneof![
            Just(DropReason::OverBudget),
            Just(DropReason::OverAllocation),
            Just(DropReason::Duplicate),
            Just(DropReason::Empty),
            Just(DropReason::Summarized),
        ]
        .prop_map(|reason| Outcome::Dropped { reason }),
    ]
}

pub fn context_report() -> impl Strategy<Value = ContextReport> + Clone {
    let source = (
        text(),
        any::<u32>(),
        any::<u64>(),
        prop_oneof![
            Just(SourceOutcome::Hydrated),
            Just(SourceOutcome::Skipped),
            text().prop_map(|error| SourceOutcome::Dropped { error }),
        ],
    )
        .prop_map(|(name, sections, elapsed_us, outcome)| SourceReport {
            name,
            sections,
            elapsed_us,
            outcome,
        });
    let section = (
        text(),
        section_source(),
        priority(),
        any::<u32>(),
        any::<u32>(),
        outcome(),
    )
        .prop_map(
            |(id, source, priority, tokens_before, tokens_after, outcome)| SectionReport {
                id,
                source,
                priority,
                tokens_before,
                tokens_after,
                outcome,
            },
        );
    let tool = (text(), priority(), any::<u32>(), outcome()).prop_map(
        |(name, priority, tokens, outcome)| ToolReport {
            name,
            priority,
            tokens,
            outcome,
        },
    );
    let compile = (
        prop::collection::vec(section, 0..4),
        prop::collection::vec(tool, 0..3),
        any::<[u32; 5]>(),
        0.0f32..4.0,
    )
        .prop_map(|(sections, tools, n, compression_ratio)| CompileReport {
            sections,
            tools,
            tokens_before: n[0],
            tokens_after: n[1],
            budget: n[2],
            reserve: n[3],
            available: n[4],
            compression_ratio,
        });
    (
        text(),
        text(),
        prop::collection::vec(source, 0..4),
        any::<[u64; 2]>(),
        compile,
    )
        .prop_map(|(model, encoding, sources, us, compile)| ContextReport {
            model,
            encoding,
            sources,
            hydrate_us: us[0],
            compile_us: us[1],
            compile,
        })
}

/// Events of one type. `EventType` is `#[non_exhaustive]`, so a new type reaches the last arm;
/// every test drawing events covers `EventType::ALL`, so a type without a strategy here fails
/// them.
pub fn event_kind_of(ty: EventType) -> BoxedStrategy<EventKind> {
    match ty {
        EventType::InferStart => infer_start().prop_map(EventKind::InferStart).boxed(),
        EventType::InferEnd => infer_end().prop_map(EventKind::InferEnd).boxed(),
        EventType::ToolCall => tool_call().prop_map(EventKind::ToolCall).boxed(),
        EventType::ToolResult => tool_result().prop_map(EventKind::ToolResult).boxed(),
        EventType::StateRead => state_access().prop_map(EventKind::StateRead).boxed(),
        EventType::StateWrite => state_access().prop_map(EventKind::StateWrite).boxed(),
        EventType::Fork => fork().prop_map(EventKind::Fork).boxed(),
        EventType::Join => join().prop_map(EventKind::Join).boxed(),
        EventType::Checkpoint => checkpoint_reached().prop_map(EventKind::Checkpoint).boxed(),
        EventType::Limit => limit_start().prop_map(EventKind::Limit).boxed(),
        EventType::Exhausted => exhausted().prop_map(EventKind::Exhausted).boxed(),
        EventType::Timeout => timeout_start().prop_map(EventKind::Timeout).boxed(),
        EventType::TimedOut => timed_out().prop_map(EventKind::TimedOut).boxed(),
        EventType::Steering => steering().prop_map(EventKind::Steering).boxed(),
        EventType::Remember => remember().prop_map(EventKind::Remember).boxed(),
        EventType::Recall => recall().prop_map(EventKind::Recall).boxed(),
        EventType::Forget => forget().prop_map(EventKind::Forget).boxed(),
        EventType::Custom => custom().prop_map(EventKind::Custom).boxed(),
        EventType::Error => failure().prop_map(EventKind::Error).boxed(),
        EventType::ToolDenied => (
            text(),
            text(),
            prop::collection::vec(text(), 0..3),
            any::<u32>(),
        )
            .prop_map(|(name, scope, allowed, iteration)| {
                EventKind::ToolDenied(agent_op::trace::event::ToolDenied {
                    name,
                    scope,
                    allowed,
                    iteration,
                })
            })
            .boxed(),
        EventType::Context => context_report()
            .prop_map(|r| EventKind::Context(Box::new(r)))
            .boxed(),
        EventType::RunEnd => run_end().prop_map(EventKind::RunEnd).boxed(),
        other => panic!("no strategy for event type {other:?}: add one to tests/strategies"),
    }
}

/// An event of any type (every type equally likely).
pub fn event_kind() -> BoxedStrategy<EventKind> {
    prop::sample::select(EventType::ALL)
        .prop_flat_map(event_kind_of)
        .boxed()
}

pub fn event() -> impl Strategy<Value = Event> {
    (timestamp(), event_kind()).prop_map(|(at, kind)| Event { at, kind })
}

pub fn entry() -> impl Strategy<Value = TraceEntry> {
    (any_trace_id(), any::<bool>(), event()).prop_map(|(trace_id, cancelled, event)| TraceEntry {
        trace_id,
        cancelled,
        event,
    })
}

/// A trace whose events belong to a few branches of one run (or, rarely, to unrelated ids).
pub fn trace_with(events: std::ops::Range<usize>) -> impl Strategy<Value = Trace> {
    (
        trace_id(),
        prop::option::of(any_trace_id()),
        timestamp(),
        prop::option::of(timestamp()),
        prop::collection::vec(entry(), events),
    )
        .prop_map(|(id, parent_id, start, end, events)| Trace {
            id,
            parent_id,
            start,
            end,
            events,
        })
}

pub fn trace() -> impl Strategy<Value = Trace> {
    trace_with(0..16)
}

// ---- hand-built events ----

/// `2026-11-22T10:00:00Z` plus `ms` milliseconds.
pub fn t(ms: i64) -> Timestamp {
    Timestamp::from_timestamp_millis(1_795_341_600_000 + ms).expect("in range")
}

pub fn entry_at(id: &str, ms: i64, kind: EventKind) -> TraceEntry {
    TraceEntry {
        trace_id: TraceId::from(id),
        cancelled: false,
        event: Event::at(t(ms), kind),
    }
}

pub fn infer_start_kind(iteration: u32) -> EventKind {
    EventKind::InferStart(InferStart {
        model: "small-model".into(),
        prompt_preview: "Plan a trip".into(),
        messages: 2,
        tools: 1,
        iteration,
        prompt: None,
    })
}

pub fn infer_end_kind(cost: Option<u64>, input: u64, output: u64, duration_us: u64) -> EventKind {
    EventKind::InferEnd(InferEnd {
        model: "small-model".into(),
        response_preview: "Sure, here is a plan".into(),
        tool_calls: 0,
        finish_reason: FinishReason::Stop,
        input_tokens: input,
        output_tokens: output,
        cost: cost.map(MicroUsd),
        duration_us,
        iteration: 0,
        reply: None,
    })
}

pub fn tool_call_kind(name: &str, args: Value) -> EventKind {
    EventKind::ToolCall(ToolCall {
        name: name.into(),
        args,
        call_id: None,
        iteration: 0,
    })
}

pub fn tool_result_kind(name: &str, success: bool, output: &str, duration_us: u64) -> EventKind {
    EventKind::ToolResult(ToolResult {
        name: name.into(),
        success,
        output_preview: output.into(),
        duration_us,
        iteration: 0,
        output: None,
    })
}

pub fn checkpoint_kind(name: &str) -> EventKind {
    EventKind::Checkpoint(CheckpointReached { name: name.into() })
}

/// The entries of `events` as a multiset, keyed by their JSON (entries are not `Ord`).
pub fn multiset(events: &[TraceEntry]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events {
        *out.entry(serde_json::to_string(e).expect("serializable"))
            .or_default() += 1;
    }
    out
}

/// A fresh, empty directory under the system temp dir, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "agent-op-{tag}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spent_record() -> impl Strategy<Value = agent_op::trace::SpentRecord> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        prop::option::of(any::<u64>()),
    )
        .prop_map(
            |(calls, input_tokens, output_tokens, cost)| agent_op::trace::SpentRecord {
                calls,
                input_tokens,
                output_tokens,
                cost: cost.map(agent_op::MicroUsd),
            },
        )
}

fn run_end() -> impl Strategy<Value = agent_op::RunEnd> {
    use agent_op::trace::{RunFailure, RunOutcome};
    (
        prop::sample::select(vec![
            RunOutcome::Succeeded,
            RunOutcome::Failed,
            RunOutcome::Aborted,
        ]),
        prop::option::of(text()),
        prop::option::of((text(), text())),
        spent_record(),
        spent_record(),
        any::<u64>(),
    )
        .prop_map(
            |(outcome, value_preview, error, spent, discarded, duration_us)| agent_op::RunEnd {
                outcome,
                value_preview,
                error: error.map(|(kind, message)| RunFailure { kind, message }),
                spent,
                // Written only when something was discarded, so a zero one reads back as
                // the default: generate what reads back equal.
                discarded: if discarded.calls == 0 {
                    agent_op::trace::SpentRecord::NOTHING
                } else {
                    discarded
                },
                duration_us,
            },
        )
}
