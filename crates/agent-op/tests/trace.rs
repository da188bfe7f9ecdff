//! Tests of the trace types: JSON round trips of events and traces, the `Trace` queries, trace
//! ids, money, previews and content hashes.

mod strategies;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use agent_op::trace::event::StateAccess;
use agent_op::{
    Event, EventKind, EventType, MicroUsd, Trace, TraceEntry, TraceId, Usage, content_hash, preview,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use strategies::*;

// ---- JSON of events ----

/// Serializes an event and checks the shape the format promises: exactly `at`, `type`, `data`.
fn event_json(event: &Event) -> Value {
    let value = serde_json::to_value(event).expect("events serialize");
    let object = value.as_object().expect("an event is a JSON object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["at", "data", "type"]);
    assert_eq!(object["type"], event.event_type().as_str());
    value
}

proptest! {
    #[test]
    fn event_json_round_trips(event in event()) {
        event_json(&event);
        let text = serde_json::to_string(&event).unwrap();
        // From text `type` comes before `data`: the payload is parsed in place.
        prop_assert_eq!(&serde_json::from_str::<Event>(&text).unwrap(), &event);
        // A `Value` object iterates its keys sorted, so `data` comes before `type`: the payload
        // is buffered first.
        let value = serde_json::to_value(&event).unwrap();
        prop_assert_eq!(&serde_json::from_value::<Event>(value).unwrap(), &event);
        // Pretty-printed JSON (newlines, indentation) reads back too.
        let pretty = serde_json::to_string_pretty(&event).unwrap();
        prop_assert_eq!(serde_json::from_str::<Event>(&pretty).unwrap(), event);
    }

    #[test]
    fn trace_json_round_trips(trace in trace()) {
        let text = serde_json::to_string(&trace).unwrap();
        prop_assert_eq!(&serde_json::from_str::<Trace>(&text).unwrap(), &trace);
        let value = serde_json::to_value(&trace).unwrap();
        prop_assert_eq!(serde_json::from_value::<Trace>(value).unwrap(), trace);
    }

    #[test]
    fn entry_json_round_trips_and_omits_false_cancelled(entry in entry()) {
        let value = serde_json::to_value(&entry).unwrap();
        prop_assert_eq!(value.get("cancelled").is_some(), entry.cancelled);
        prop_assert_eq!(serde_json::from_value::<TraceEntry>(value).unwrap(), entry);
    }
}

/// Every event type separately, so none is left to chance.
#[test]
fn every_event_type_round_trips() {
    assert_eq!(EventType::ALL.len(), 22);
    for &ty in EventType::ALL {
        let mut runner = TestRunner::new(Config {
            cases: 64,
            ..Config::default()
        });
        let strategy = (timestamp(), event_kind_of(ty)).prop_map(|(at, kind)| Event { at, kind });
        runner
            .run(&strategy, |event| {
                prop_assert_eq!(event.event_type(), ty);
                let value = event_json(&event);
                prop_assert_eq!(value["type"].as_str(), Some(ty.as_str()));
                let text = serde_json::to_string(&event).unwrap();
                prop_assert_eq!(&serde_json::from_str::<Event>(&text).unwrap(), &event);
                prop_assert_eq!(serde_json::from_value::<Event>(value).unwrap(), event);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
    }
}

#[test]
fn event_type_names_are_distinct_snake_case_and_round_trip() {
    let mut names = HashSet::new();
    for &ty in EventType::ALL {
        let name = ty.as_str();
        assert!(names.insert(name), "duplicate name {name}");
        assert!(
            name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{name}"
        );
        assert_eq!(EventType::from_name(name), Some(ty));
        assert_eq!(ty.to_string(), name);
        assert_eq!(serde_json::to_value(ty).unwrap(), json!(name));
        assert_eq!(
            serde_json::from_value::<EventType>(json!(name)).unwrap(),
            ty
        );
    }
    assert_eq!(EventType::from_name("InferStart"), None);
    assert_eq!(EventType::from_name(""), None);
}

#[test]
fn event_json_has_the_documented_shape() {
    let event = Event::at(t(100), infer_end_kind(Some(1_500), 12, 34, 250_000));
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({
            "at": "2026-11-22T10:00:00.100Z",
            "type": "infer_end",
            "data": {
                "model": "small-model",
                "response_preview": "Sure, here is a plan",
                "tool_calls": 0,
                "finish_reason": "stop",
                "input_tokens": 12,
                "output_tokens": 34,
                "cost": 1500,
                "duration_us": 250000,
                "iteration": 0
            }
        })
    );
    // An unknown cost is absent, not zero.
    let unknown = Event::at(t(0), infer_end_kind(None, 1, 1, 1));
    let value = serde_json::to_value(&unknown).unwrap();
    assert!(value["data"].get("cost").is_none(), "{value}");
}

#[test]
fn data_before_type_deserializes() {
    let text = r#"{"data":{"key":"plan"},"at":"2026-11-22T10:00:00Z","type":"state_write"}"#;
    let event: Event = serde_json::from_str(text).unwrap();
    assert_eq!(event, Event::at(t(0), EventKind::state_write("plan")));

    let text = r#"{"data":{"name":"weather","args":{"city":"Oslo","days":[1,2]},"iteration":3},
                   "type":"tool_call","at":"2026-11-22T10:00:01Z"}"#;
    let event: Event = serde_json::from_str(text).unwrap();
    assert_eq!(
        event.kind,
        EventKind::ToolCall(agent_op::trace::event::ToolCall {
            name: "weather".into(),
            args: json!({"city": "Oslo", "days": [1, 2]}),
            call_id: None,
            iteration: 3,
        })
    );
    assert_eq!(event.at, t(1000));
}

#[test]
fn unknown_fields_are_ignored() {
    let text = r#"{"future":{"nested":[1,{"x":null}]},"at":"2026-11-22T10:00:00Z",
                   "type":"state_read","x-extra":"y","data":{"key":"k","added_later":true},"z":0}"#;
    let event: Event = serde_json::from_str(text).unwrap();
    assert_eq!(
        event.kind,
        EventKind::StateRead(StateAccess { key: "k".into() })
    );
}

#[test]
fn unknown_type_is_a_clear_error() {
    let text = r#"{"at":"2026-11-22T10:00:00Z","type":"teleport","data":{}}"#;
    let err = serde_json::from_str::<Event>(text).unwrap_err().to_string();
    assert!(err.contains("unknown event type `teleport`"), "{err}");
    // Also when `data` comes first.
    let text = r#"{"data":{},"at":"2026-11-22T10:00:00Z","type":"teleport"}"#;
    let err = serde_json::from_str::<Event>(text).unwrap_err().to_string();
    assert!(err.contains("unknown event type `teleport`"), "{err}");
}

#[test]
fn missing_fields_and_bad_payloads_are_errors() {
    for (text, needle) in [
        (
            r#"{"type":"state_read","data":{"key":"k"}}"#,
            "missing field `at`",
        ),
        (
            r#"{"at":"2026-11-22T10:00:00Z","data":{"key":"k"}}"#,
            "missing field `type`",
        ),
        (
            r#"{"at":"2026-11-22T10:00:00Z","type":"state_read"}"#,
            "missing field `data`",
        ),
        (
            r#"{"at":"2026-11-22T10:00:00Z","type":"state_read","data":{}}"#,
            "missing field `key`",
        ),
        (
            r#"{"data":{},"at":"2026-11-22T10:00:00Z","type":"state_read"}"#,
            "missing field `key`",
        ),
        (
            r#"{"at":"yesterday","type":"state_read","data":{"key":"k"}}"#,
            "",
        ),
        (r#"["2026-11-22T10:00:00Z","state_read"]"#, ""),
    ] {
        let err = serde_json::from_str::<Event>(text)
            .expect_err(text)
            .to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}

#[test]
fn durations_in_milliseconds_and_budget_omits_unset_limits() {
    let kind = EventKind::Limit(agent_op::trace::event::LimitStart {
        budget: agent_op::Budget::new()
            .calls(3)
            .time(Duration::from_millis(1_500)),
    });
    let value = serde_json::to_value(Event::at(t(0), kind)).unwrap();
    assert_eq!(value["data"], json!({"budget": {"time": 1500, "calls": 3}}));

    let kind = EventKind::TimedOut(agent_op::TimedOut {
        limit: Duration::from_secs(2),
    });
    let value = serde_json::to_value(Event::at(t(0), kind)).unwrap();
    assert_eq!(value["data"], json!({"limit": 2000}));
}

// ---- Trace queries ----

fn trace_of(entries: Vec<TraceEntry>) -> Trace {
    Trace {
        id: TraceId::from("calm-owl-0001"),
        parent_id: None,
        start: t(0),
        end: None,
        events: entries,
    }
}

#[test]
fn total_cost_sums_known_costs_and_counts_unknown_ones() {
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_start_kind(0)),
        entry_at("calm-owl-0001", 2, infer_end_kind(Some(100), 1, 1, 5)),
        entry_at("calm-owl-0001.0", 3, infer_end_kind(None, 1, 1, 5)),
        entry_at("calm-owl-0001.1", 4, infer_end_kind(Some(250), 1, 1, 5)),
        entry_at("calm-owl-0001", 5, EventKind::error("boom")),
    ]);
    let cost = trace.total_cost();
    assert_eq!(cost.known, MicroUsd(350));
    assert_eq!(cost.unknown_calls, 1);
    assert_eq!(cost.exact(), None);

    // A known zero is a known cost; only `None` is unknown.
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_end_kind(Some(0), 1, 1, 5)),
        entry_at("calm-owl-0001", 2, infer_end_kind(Some(7), 1, 1, 5)),
    ]);
    assert_eq!(trace.total_cost().exact(), Some(MicroUsd(7)));

    let trace = trace_of(vec![entry_at(
        "calm-owl-0001",
        1,
        infer_end_kind(None, 1, 1, 5),
    )]);
    let cost = trace.total_cost();
    assert_eq!((cost.known, cost.unknown_calls), (MicroUsd::ZERO, 1));
    assert_eq!(cost.exact(), None, "an unknown cost must not count as zero");

    assert_eq!(trace_of(vec![]).total_cost().exact(), Some(MicroUsd::ZERO));

    // Sums saturate instead of wrapping.
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_end_kind(Some(u64::MAX), 1, 1, 5)),
        entry_at("calm-owl-0001", 2, infer_end_kind(Some(1), 1, 1, 5)),
    ]);
    assert_eq!(trace.total_cost().exact(), Some(MicroUsd(u64::MAX)));
}

proptest! {
    #[test]
    fn total_cost_matches_a_direct_sum(
        costs in prop::collection::vec(prop::option::of(0u64..1_000_000_000), 0..20),
        others in prop::collection::vec(event(), 0..10),
    ) {
        let mut trace = trace_of(vec![]);
        for (i, cost) in costs.iter().enumerate() {
            trace.append(Event::at(t(i as i64), infer_end_kind(*cost, 1, 1, 1)));
        }
        let extra: Vec<_> = others
            .into_iter()
            .filter(|e| !matches!(e.kind, EventKind::InferEnd(_)))
            .collect();
        for event in extra {
            trace.append(event);
        }
        let summary = trace.total_cost();
        let known: u64 = costs.iter().flatten().sum();
        let unknown = costs.iter().filter(|c| c.is_none()).count() as u64;
        prop_assert_eq!(summary.known, MicroUsd(known));
        prop_assert_eq!(summary.unknown_calls, unknown);
        prop_assert_eq!(summary.exact(), (unknown == 0).then_some(MicroUsd(known)));
    }
}

#[test]
fn total_tokens_sums_model_calls_only() {
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_start_kind(0)),
        entry_at("calm-owl-0001", 2, infer_end_kind(None, 10, 3, 5)),
        entry_at("calm-owl-0001.0", 3, infer_end_kind(Some(1), 20, 4, 5)),
        entry_at(
            "calm-owl-0001",
            4,
            tool_result_kind("weather", true, "sunny", 9),
        ),
    ]);
    assert_eq!(
        trace.total_tokens(),
        Usage {
            input_tokens: 30,
            output_tokens: 7
        }
    );
    assert_eq!(trace.total_tokens().total(), 37);
    assert_eq!(trace_of(vec![]).total_tokens(), Usage::default());

    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_end_kind(None, u64::MAX, 1, 5)),
        entry_at("calm-owl-0001", 2, infer_end_kind(None, 1, 1, 5)),
    ]);
    assert_eq!(trace.total_tokens().input_tokens, u64::MAX);
}

#[test]
fn total_duration_uses_end_or_the_last_event() {
    let mut trace = trace_of(vec![
        entry_at("calm-owl-0001", 250, EventKind::state_read("a")),
        entry_at("calm-owl-0001.0", 900, EventKind::state_read("b")),
        entry_at("calm-owl-0001.1", 400, EventKind::state_read("c")),
    ]);
    // Not ended: up to the latest event, wherever it is.
    assert_eq!(trace.total_duration(), Some(Duration::from_millis(900)));
    // Ended: up to the end, even if events are earlier.
    trace.end = Some(t(2_000));
    assert_eq!(trace.total_duration(), Some(Duration::from_secs(2)));
    // Microsecond precision is kept.
    trace.end = Some(t(0) + chrono::Duration::microseconds(1_234_567));
    assert_eq!(
        trace.total_duration(),
        Some(Duration::from_micros(1_234_567))
    );
    // An end before the start has no duration.
    trace.end = Some(t(-1));
    assert_eq!(trace.total_duration(), None);
    // No end and no events: nothing to measure.
    assert_eq!(trace_of(vec![]).total_duration(), None);
}

#[test]
fn tool_calls_pair_with_the_next_result_of_the_same_branch() {
    let a = "calm-owl-0001.0";
    let b = "calm-owl-0001.1";
    let trace = trace_of(vec![
        entry_at(a, 1, tool_call_kind("search", json!({"q": "otters"}))),
        entry_at(b, 2, tool_call_kind("weather", json!({"city": "Oslo"}))),
        entry_at(b, 3, tool_result_kind("weather", true, "sunny", 1_500)),
        entry_at("calm-owl-0001", 4, EventKind::state_read("x")),
        entry_at(a, 5, tool_result_kind("search", false, "rate limited", 20)),
        entry_at(b, 6, tool_call_kind("weather", json!({"city": "Bergen"}))),
        entry_at(b, 7, tool_result_kind("weather", true, "rain", 7)),
        // Cut short: no result.
        entry_at(a, 8, tool_call_kind("search", json!({"q": "again"}))),
        // A result without a call is ignored.
        entry_at("calm-owl-0001", 9, tool_result_kind("orphan", true, "?", 1)),
    ]);
    let calls = trace.tool_calls();
    let summary: Vec<_> = calls
        .iter()
        .map(|c| {
            (
                c.trace_id.as_str(),
                c.name.as_str(),
                c.args.clone(),
                c.success,
                c.result_preview.as_deref(),
                c.duration,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                a,
                "search",
                json!({"q": "otters"}),
                Some(false),
                Some("rate limited"),
                Some(Duration::from_micros(20)),
            ),
            (
                b,
                "weather",
                json!({"city": "Oslo"}),
                Some(true),
                Some("sunny"),
                Some(Duration::from_micros(1_500)),
            ),
            (
                b,
                "weather",
                json!({"city": "Bergen"}),
                Some(true),
                Some("rain"),
                Some(Duration::from_micros(7)),
            ),
            (a, "search", json!({"q": "again"}), None, None, None),
        ]
    );
}

#[test]
fn counts_checkpoints_and_errors_in_order() {
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_start_kind(0)),
        entry_at("calm-owl-0001", 2, checkpoint_kind("planned")),
        entry_at("calm-owl-0001.0", 3, infer_start_kind(0)),
        entry_at("calm-owl-0001.0", 4, EventKind::error("tool exploded")),
        entry_at("calm-owl-0001.1", 5, infer_start_kind(1)),
        entry_at("calm-owl-0001", 6, checkpoint_kind("done")),
        entry_at("calm-owl-0001", 7, EventKind::error("budget")),
    ]);
    assert_eq!(trace.infer_calls(), 3);
    assert_eq!(trace.checkpoints(), ["planned", "done"]);
    assert_eq!(trace.errors(), ["tool exploded", "budget"]);
    let empty = trace_of(vec![]);
    assert_eq!(empty.infer_calls(), 0);
    assert!(empty.checkpoints().is_empty());
    assert!(empty.errors().is_empty());
}

proptest! {
    #[test]
    fn filters_agree_with_a_direct_scan(trace in trace(), ty in prop::sample::select(EventType::ALL)) {
        let of: Vec<_> = trace.events_of(ty).collect();
        let expected: Vec<_> = trace.events.iter().filter(|e| e.event.event_type() == ty).collect();
        prop_assert_eq!(of, expected);
        prop_assert_eq!(trace.infer_calls(), trace.events_of(EventType::InferStart).count());

        for entry in &trace.events {
            let id = &entry.trace_id;
            let mine: Vec<_> = trace.events_in(id).collect();
            let expected: Vec<_> = trace.events.iter().filter(|e| &e.trace_id == id).map(|e| &e.event).collect();
            prop_assert_eq!(mine, expected);
        }
    }

    #[test]
    fn canonical_drops_cancelled_and_timing_and_groups_by_id(trace in trace()) {
        let canonical = trace.canonical();
        let kept = trace.events.iter().filter(|e| !e.cancelled).count();
        prop_assert_eq!(canonical.values().map(Vec::len).sum::<usize>(), kept);
        for (id, kinds) in &canonical {
            let expected: Vec<EventKind> = trace
                .events
                .iter()
                .filter(|e| &e.trace_id == id && !e.cancelled)
                .map(|e| e.event.kind.without_timing())
                .collect();
            prop_assert_eq!(kinds, &expected);
            prop_assert!(!kinds.is_empty());
            for kind in kinds {
                match kind {
                    EventKind::InferEnd(e) => prop_assert_eq!(e.duration_us, 0),
                    EventKind::ToolResult(e) => prop_assert_eq!(e.duration_us, 0),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn canonical_example() {
    let mut cancelled = entry_at("calm-owl-0001.1", 4, infer_start_kind(0));
    cancelled.cancelled = true;
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, infer_end_kind(Some(5), 1, 2, 999)),
        entry_at("calm-owl-0001.0", 2, tool_result_kind("t", true, "ok", 777)),
        entry_at("calm-owl-0001", 3, checkpoint_kind("c")),
        cancelled,
    ]);
    let mut expected = BTreeMap::new();
    expected.insert(
        TraceId::from("calm-owl-0001"),
        vec![infer_end_kind(Some(5), 1, 2, 0), checkpoint_kind("c")],
    );
    expected.insert(
        TraceId::from("calm-owl-0001.0"),
        vec![tool_result_kind("t", true, "ok", 0)],
    );
    assert_eq!(trace.canonical(), expected);

    // Timestamps do not matter either.
    let mut shifted = trace.clone();
    for e in &mut shifted.events {
        e.event.at += chrono::Duration::seconds(30);
    }
    assert_eq!(shifted.canonical(), trace.canonical());
}

#[test]
fn events_between_is_inclusive() {
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 10, EventKind::state_read("a")),
        entry_at("calm-owl-0001", 20, EventKind::state_read("b")),
        entry_at("calm-owl-0001.0", 30, EventKind::state_read("c")),
        entry_at("calm-owl-0001", 40, EventKind::state_read("d")),
    ]);
    let keys = |from, to| -> Vec<String> {
        trace
            .events_between(t(from), t(to))
            .map(|e| match &e.event.kind {
                EventKind::StateRead(s) => s.key.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(keys(20, 30), ["b", "c"]);
    assert_eq!(keys(11, 39), ["b", "c"]);
    assert_eq!(keys(0, 100), ["a", "b", "c", "d"]);
    assert_eq!(keys(40, 40), ["d"]);
    assert!(keys(41, 100).is_empty());
    assert!(keys(30, 20).is_empty());
}

#[test]
fn events_in_selects_one_branch_exactly() {
    let trace = trace_of(vec![
        entry_at("calm-owl-0001", 1, EventKind::state_read("root")),
        entry_at("calm-owl-0001.0", 2, EventKind::state_read("b0")),
        entry_at("calm-owl-0001.0.1", 3, EventKind::state_read("b01")),
        entry_at("calm-owl-0001.0", 4, EventKind::state_write("b0")),
    ]);
    let branch = TraceId::from("calm-owl-0001.0");
    let kinds: Vec<_> = trace.events_in(&branch).map(|e| e.kind.clone()).collect();
    assert_eq!(
        kinds,
        [EventKind::state_read("b0"), EventKind::state_write("b0")]
    );
    assert_eq!(
        trace.events_in(&TraceId::from("calm-owl-0001.9")).count(),
        0
    );
}

#[test]
fn append_uses_the_trace_id() {
    let mut trace = Trace::new(TraceId::from("calm-owl-0001"));
    trace.append(Event::at(t(0), EventKind::state_read("k")));
    assert_eq!(trace.events.len(), 1);
    assert_eq!(trace.events[0].trace_id, trace.id);
    assert!(!trace.events[0].cancelled);
}

proptest! {
    #[test]
    fn merge_keeps_every_event_and_widens_the_span(a in trace(), b in trace()) {
        let mut merged = a.clone();
        merged.merge(b.clone());
        prop_assert_eq!(merged.events.len(), a.events.len() + b.events.len());
        let mut expected = multiset(&a.events);
        for (k, n) in multiset(&b.events) {
            *expected.entry(k).or_default() += n;
        }
        prop_assert_eq!(multiset(&merged.events), expected);
        // In fact in order: `a`'s events, then `b`'s.
        prop_assert_eq!(&merged.events[..a.events.len()], &a.events[..]);
        prop_assert_eq!(&merged.events[a.events.len()..], &b.events[..]);
        prop_assert_eq!(merged.start, a.start.min(b.start));
        let end = match (a.end, b.end) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        prop_assert_eq!(merged.end, end);
        prop_assert_eq!(&merged.id, &a.id);
        prop_assert_eq!(&merged.parent_id, &a.parent_id);
    }
}

// ---- Trace ids ----

#[test]
fn random_ids_are_adjective_noun_hex_and_distinct() {
    let mut seen = HashSet::new();
    for _ in 0..10_000 {
        let id = TraceId::random();
        let parts: Vec<&str> = id.as_str().split('-').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert!(
            parts[..2]
                .iter()
                .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())),
            "{id}"
        );
        assert_eq!(parts[2].len(), 4, "{id}");
        assert!(
            parts[2]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{id}"
        );
        assert_eq!(id.depth(), 0);
        assert_eq!(id.parent(), None);
        assert_eq!(id.root(), id.as_str());
        assert!(seen.insert(id.clone()), "duplicate id {id}");
    }
}

#[test]
fn random_ids_are_distinct_across_threads() {
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| (0..2_000).map(|_| TraceId::random()).collect::<Vec<_>>()))
        .collect();
    let mut seen = HashSet::new();
    for h in handles {
        for id in h.join().unwrap() {
            assert!(seen.insert(id.clone()), "duplicate id {id}");
        }
    }
    assert_eq!(seen.len(), 8_000);
}

proptest! {
    #[test]
    fn child_parent_root_depth_round_trip(root in root_id(), path in prop::collection::vec(0usize..1000, 0..6)) {
        let mut id = root.clone();
        for (depth, &index) in path.iter().enumerate() {
            let child = id.child(index);
            prop_assert_eq!(child.as_str(), format!("{id}.{index}"));
            prop_assert_eq!(child.parent(), Some(id.clone()));
            prop_assert_eq!(child.root(), root.as_str());
            prop_assert_eq!(child.depth(), depth + 1);
            id = child;
        }
        // Walking back up visits every ancestor and ends at the root.
        let mut up = id.clone();
        for _ in 0..path.len() {
            up = up.parent().expect("a branch has a parent");
        }
        prop_assert_eq!(&up, &root);
        prop_assert_eq!(up.parent(), None);
        prop_assert_eq!(up.depth(), 0);
        // Ids are JSON strings.
        let json = serde_json::to_string(&id).unwrap();
        prop_assert_eq!(&json, &serde_json::to_string(id.as_str()).unwrap());
        prop_assert_eq!(serde_json::from_str::<TraceId>(&json).unwrap(), id);
    }
}

#[test]
fn parent_only_strips_numeric_suffixes() {
    assert_eq!(TraceId::from("a-b-0001.x").parent(), None);
    assert_eq!(TraceId::from("a-b-0001.").parent(), None);
    assert_eq!(
        TraceId::from("a-b-0001.12").parent(),
        Some(TraceId::from("a-b-0001"))
    );
    assert_eq!(format!("{:?}", TraceId::from("a\"b")), r#""a\"b""#);
    assert_eq!(TraceId::from(String::from("x.1")).to_string(), "x.1");
}

// ---- money, previews, hashes ----

#[test]
fn micro_usd_display_and_cents() {
    assert_eq!(MicroUsd(0).to_string(), "$0.000000");
    assert_eq!(MicroUsd(1).to_string(), "$0.000001");
    assert_eq!(MicroUsd(999_999).to_string(), "$0.999999");
    assert_eq!(MicroUsd(1_000_000).to_string(), "$1.000000");
    assert_eq!(MicroUsd(12_345_678).to_string(), "$12.345678");
    assert_eq!(MicroUsd(u64::MAX).to_string(), "$18446744073709.551615");

    assert_eq!(MicroUsd(0).cents(), 0.0);
    assert_eq!(MicroUsd(1).cents(), 0.0001);
    assert_eq!(MicroUsd(10_000).cents(), 1.0);
    assert_eq!(MicroUsd(1_234_500).cents(), 123.45);
    assert_eq!(MicroUsd(2_500_000).dollars(), 2.5);

    assert_eq!(serde_json::to_string(&MicroUsd(1_500)).unwrap(), "1500");
    assert_eq!(
        serde_json::from_str::<MicroUsd>("1500").unwrap(),
        MicroUsd(1_500)
    );
    assert!(serde_json::from_str::<MicroUsd>("-1").is_err());
    assert!(serde_json::from_str::<MicroUsd>("1.5").is_err());

    assert_eq!(MicroUsd(u64::MAX) + MicroUsd(1), MicroUsd(u64::MAX));
    let mut m = MicroUsd(u64::MAX - 1);
    m += MicroUsd(5);
    assert_eq!(m, MicroUsd(u64::MAX));
    assert_eq!(
        [MicroUsd(1), MicroUsd(2), MicroUsd(3)]
            .into_iter()
            .sum::<MicroUsd>(),
        MicroUsd(6)
    );
}

#[test]
fn micro_usd_from_dollars_edge_cases() {
    assert_eq!(MicroUsd::from_dollars(f64::NAN), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(-f64::NAN), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(-1.0), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(-0.0), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(-0.000_000_4), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(f64::NEG_INFINITY), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(0.0), MicroUsd(0));
    // Rounds to the nearest micro-dollar (halves away from zero).
    assert_eq!(MicroUsd::from_dollars(0.000_000_4), MicroUsd(0));
    assert_eq!(MicroUsd::from_dollars(0.000_000_6), MicroUsd(1));
    assert_eq!(MicroUsd::from_dollars(0.000_001), MicroUsd(1));
    assert_eq!(MicroUsd::from_dollars(0.1 + 0.2), MicroUsd(300_000));
    assert_eq!(MicroUsd::from_dollars(1.5), MicroUsd(1_500_000));
    assert_eq!(MicroUsd::from_dollars(0.50), MicroUsd(500_000));
    // Huge amounts saturate.
    assert_eq!(MicroUsd::from_dollars(f64::INFINITY), MicroUsd(u64::MAX));
    assert_eq!(MicroUsd::from_dollars(1e300), MicroUsd(u64::MAX));
    assert_eq!(MicroUsd::from_dollars(f64::MAX), MicroUsd(u64::MAX));
    // The largest amount there is, converted back.
    assert_eq!(
        MicroUsd::from_dollars(MicroUsd(u64::MAX).dollars()),
        MicroUsd(u64::MAX)
    );
    // Half of that does not saturate (it is exact to within f64 precision).
    let half = MicroUsd::from_dollars((1u64 << 63) as f64 / 1e6);
    assert!(half < MicroUsd(u64::MAX));
    assert!(half.0.abs_diff(1 << 63) <= 4096, "{half:?}");
    // Large but representable amounts are kept (within f64 precision).
    assert_eq!(
        MicroUsd::from_dollars(1_000_000_000.0),
        MicroUsd(1_000_000_000_000_000)
    );
}

proptest! {
    #[test]
    fn from_dollars_inverts_dollars_for_exact_amounts(micros in 0u64..(1 << 48)) {
        let m = MicroUsd(micros);
        prop_assert_eq!(MicroUsd::from_dollars(m.dollars()), m);
    }

    #[test]
    fn preview_never_splits_characters(text in text(), long in ".{0,300}", max in 0usize..64) {
        for s in [text.as_str(), long.as_str()] {
            let p = preview(s, max);
            let chars = s.chars().count();
            if chars <= max {
                prop_assert_eq!(&p, s);
            } else {
                let kept = p.strip_suffix('…').expect("a cut preview ends in an ellipsis");
                prop_assert_eq!(kept.chars().count(), max);
                prop_assert!(s.starts_with(kept));
                prop_assert!(s.is_char_boundary(kept.len()));
                prop_assert_eq!(p.chars().count(), max + 1);
            }
        }
    }
}

#[test]
fn preview_examples() {
    assert_eq!(preview("", 0), "");
    assert_eq!(preview("a", 0), "…");
    assert_eq!(preview("héllo world", 5), "héllo…");
    assert_eq!(preview("😀😀😀", 2), "😀😀…");
    assert_eq!(preview("😀😀", 2), "😀😀");
    assert_eq!(preview("e\u{301}x", 1), "e…", "cuts by scalar value");
}

#[test]
fn content_hash_known_vectors() {
    assert_eq!(
        content_hash(""),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        content_hash("abc"),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        content_hash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
        "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
    assert_ne!(content_hash("a"), content_hash("a "));
}

/// Trace ids order as paths, numbers by value, and consistently with `Eq`: a total order
/// whatever the ids (it compared the strings, so `run.10` came before `run.2`).
#[test]
fn trace_ids_order_as_paths_consistently_with_equality() {
    let run = TraceId::from("calm-owl-0001");
    let mut ids: Vec<TraceId> = (0..12).rev().map(|i| run.child(i)).collect();
    ids.push(run.clone());
    ids.sort();
    let expected: Vec<TraceId> = std::iter::once(run.clone())
        .chain((0..12).map(|i| run.child(i)))
        .collect();
    assert_eq!(ids, expected);

    let segment = prop_oneof![
        "[0-9]{1,3}",
        "0[0-9]{1,2}",
        "[a-z]{1,3}",
        Just(String::new()),
    ];
    let id = prop::collection::vec(segment, 1..4).prop_map(|s| TraceId::from(s.join(".")));
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        ..Config::default()
    });
    runner
        .run(&(id.clone(), id.clone(), id), |(a, b, c)| {
            use std::cmp::Ordering;
            prop_assert_eq!(a.cmp(&b) == Ordering::Equal, a == b);
            prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
            if a <= b && b <= c {
                prop_assert!(a <= c, "{} <= {} <= {} but not {} <= {}", a, b, c, a, c);
            }
            Ok(())
        })
        .unwrap();
}
