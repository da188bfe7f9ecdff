//! Tests of the JSONL trace format: round trips, torn and malformed lines, versions, and the
//! appender's repair of a torn tail.

mod strategies;

use std::fs;

use agent_op::trace::jsonl::{
    FORMAT_VERSION, JsonlAppender, JsonlError, ReadTrace, TornLine, append_event, read_jsonl,
    read_trace_file, write_jsonl, write_trace_file,
};
use agent_op::{Event, EventKind, Trace, TraceEntry, TraceId};
use proptest::prelude::*;
use serde_json::{Value, json};
use strategies::*;

fn to_bytes(trace: &Trace) -> Vec<u8> {
    let mut out = Vec::new();
    write_jsonl(trace, &mut out).expect("writing to a Vec cannot fail");
    out
}

fn load(bytes: &[u8]) -> Result<ReadTrace, JsonlError> {
    read_jsonl(bytes)
}

/// Byte offsets where each line starts (plus the total length at the end).
fn line_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    starts.extend(
        bytes
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'\n')
            .map(|(i, _)| i + 1),
    );
    starts
}

/// A small hand-made trace whose last line holds multi-byte characters, so cuts land inside
/// them too.
fn sample_trace() -> Trace {
    let root = "brave-otter-3f2a";
    let mut cancelled = entry_at("brave-otter-3f2a.1", 40, infer_start_kind(0));
    cancelled.cancelled = true;
    Trace {
        id: TraceId::from(root),
        parent_id: None,
        start: t(0),
        end: Some(t(2_000)),
        events: vec![
            entry_at(root, 1, infer_start_kind(0)),
            entry_at(root, 20, infer_end_kind(Some(1_200), 50, 10, 19_000)),
            entry_at(
                "brave-otter-3f2a.0",
                30,
                tool_call_kind("search", json!({"q": "otters"})),
            ),
            cancelled,
            entry_at(
                "brave-otter-3f2a.0",
                50,
                tool_result_kind(
                    "search",
                    true,
                    "Otters 🦦 «hold hands» while\nsleeping; 漢字 \"quoted\"",
                    800,
                ),
            ),
        ],
    }
}

// ---- round trips ----

proptest! {
    #[test]
    fn jsonl_round_trips(trace in trace()) {
        let bytes = to_bytes(&trace);
        let read = load(&bytes).unwrap();
        prop_assert_eq!(read.torn, None);
        prop_assert_eq!(read.trace, trace.clone());

        // One header line and one line per event, each a JSON object of this version ending
        // in a newline (text with newlines is escaped), with a content line before an event
        // for each piece of content no line before it holds.
        prop_assert_eq!(bytes.last(), Some(&b'\n'));
        let lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
        let mut events = 0;
        let mut hashes = std::collections::HashSet::new();
        for (i, line) in lines.iter().enumerate() {
            let value: Value = serde_json::from_slice(line).unwrap();
            prop_assert_eq!(&value["v"], &json!(FORMAT_VERSION));
            prop_assert_eq!(value.get("trace").is_some(), i == 0);
            match value.get("content") {
                Some(content) => {
                    let hash = content["hash"].as_str().unwrap().to_owned();
                    prop_assert!(hashes.insert(hash), "each piece is stored once");
                }
                None => events += usize::from(i > 0),
            }
        }
        prop_assert_eq!(events, trace.events.len());
    }

    #[test]
    fn files_round_trip(trace in trace_with(0..8)) {
        let dir = TempDir::new("roundtrip");
        let path = dir.path("run.jsonl");
        write_trace_file(&path, &trace).unwrap();
        let read = read_trace_file(&path).unwrap();
        prop_assert_eq!(read.torn, None);
        prop_assert_eq!(read.trace, trace);
        // The temporary file was renamed away.
        let names: Vec<_> = fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
        prop_assert_eq!(names, vec![std::ffi::OsString::from("run.jsonl")]);
    }
}

#[test]
fn header_holds_the_trace_metadata() {
    let mut trace = sample_trace();
    trace.parent_id = Some(TraceId::from("calm-owl-0001.3"));
    let bytes = to_bytes(&trace);
    let first = bytes.split(|&b| b == b'\n').next().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(first).unwrap(),
        json!({"v": 3, "trace": {
            "id": "brave-otter-3f2a",
            "parent_id": "calm-owl-0001.3",
            "start": "2026-11-22T10:00:00Z",
            "end": "2026-11-22T10:00:02Z",
        }})
    );
    let read = load(&bytes).unwrap();
    assert_eq!(read.trace, trace);

    // Optional header fields are left out when unset, and read back as unset.
    trace.parent_id = None;
    trace.end = None;
    let bytes = to_bytes(&trace);
    let first = bytes.split(|&b| b == b'\n').next().unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(first).unwrap(),
        json!({"v": 3, "trace": {"id": "brave-otter-3f2a", "start": "2026-11-22T10:00:00Z"}})
    );
    assert_eq!(read_jsonl(&bytes[..]).unwrap().trace, trace);
}

#[test]
fn event_lines_hold_cancelled_only_when_true() {
    let bytes = to_bytes(&sample_trace());
    let lines: Vec<Value> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines[1]["trace_id"], "brave-otter-3f2a");
    assert!(lines[1].get("cancelled").is_none());
    assert_eq!(lines[4]["cancelled"], true);
    assert_eq!(lines[4]["trace_id"], "brave-otter-3f2a.1");
    assert_eq!(lines[4]["event"]["type"], "infer_start");
}

#[test]
fn file_write_replaces_an_existing_file() {
    let dir = TempDir::new("replace");
    let path = dir.path("run.jsonl");
    let long = sample_trace();
    write_trace_file(&path, &long).unwrap();
    let mut short = long.clone();
    short.events.truncate(1);
    write_trace_file(&path, &short).unwrap();
    assert_eq!(read_trace_file(&path).unwrap().trace, short);
}

#[test]
fn missing_file_is_an_io_error() {
    let dir = TempDir::new("missing");
    let err = read_trace_file(dir.path("nope.jsonl")).unwrap_err();
    assert!(
        matches!(err, JsonlError::Io(ref e) if e.kind() == std::io::ErrorKind::NotFound),
        "{err}"
    );
}

// ---- torn, malformed and foreign lines ----

#[test]
fn torn_last_line_at_every_offset() {
    let trace = sample_trace();
    let bytes = to_bytes(&trace);
    let starts = line_starts(&bytes);
    let last_start = starts[starts.len() - 2];
    let last_line_no = trace.events.len() + 1;
    let mut complete = trace.clone();
    complete.events.pop();

    // Cut right after the previous line's newline: a clean file without the last event.
    let read = load(&bytes[..last_start]).unwrap();
    assert_eq!(read.torn, None);
    assert_eq!(read.trace, complete);

    // Cut anywhere inside the last line (including inside multi-byte characters): every
    // complete event comes back and the fragment is reported with its line number.
    for cut in last_start + 1..bytes.len() - 1 {
        let read = load(&bytes[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(
            read.torn,
            Some(TornLine {
                line: last_line_no,
                bytes: cut - last_start
            }),
            "cut at {cut}"
        );
        assert_eq!(read.trace, complete, "cut at {cut}");
    }

    // Only the newline missing: the line is complete and parses fully.
    let read = load(&bytes[..bytes.len() - 1]).unwrap();
    assert_eq!(read.torn, None);
    assert_eq!(read.trace, trace);
}

proptest! {
    #[test]
    fn torn_last_line_of_any_trace(trace in trace_with(1..8), frac in 0.0f64..1.0) {
        let bytes = to_bytes(&trace);
        let starts = line_starts(&bytes);
        let last_start = starts[starts.len() - 2];
        let content_len = bytes.len() - 1 - last_start;
        // Keep 1..content_len bytes of the last line's content.
        let keep = 1 + ((content_len - 1) as f64 * frac) as usize;
        prop_assume!(keep < content_len);
        let read = load(&bytes[..last_start + keep]).unwrap();
        prop_assert_eq!(read.torn, Some(TornLine { line: starts.len() - 1, bytes: keep }));
        prop_assert_eq!(&read.trace.events[..], &trace.events[..trace.events.len() - 1]);
        prop_assert_eq!(&read.trace.id, &trace.id);
        prop_assert_eq!(read.trace.end, trace.end);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_read_invariants(&bytes);
    }

    #[test]
    fn mutated_traces_never_panic(
        trace in trace_with(0..6),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = to_bytes(&trace);
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => { bytes.remove(i); }
            }
        }
        check_read_invariants(&bytes);
    }
}

/// Reading arbitrary bytes returns (never panics), and what it returns is consistent with the
/// input: line numbers exist, a torn line is the last one and has no newline.
fn check_read_invariants(bytes: &[u8]) {
    let lines = bytes.split(|&b| b == b'\n').count() - usize::from(bytes.last() == Some(&b'\n'));
    match read_jsonl(bytes) {
        Ok(read) => {
            let event_lines = bytes
                .split(|&b| b == b'\n')
                .filter(|l| !l.trim_ascii().is_empty())
                .count();
            assert!(read.trace.events.len() <= event_lines);
            if let Some(torn) = read.torn {
                assert_eq!(torn.line, lines, "the torn line is the last line");
                assert_ne!(bytes.last(), Some(&b'\n'));
                assert!(torn.bytes > 0 && torn.bytes <= bytes.len());
            }
        }
        Err(JsonlError::Malformed { line, message, .. }) => {
            assert!((1..=lines).contains(&line), "line {line} of {lines}");
            assert!(!message.is_empty());
        }
        Err(JsonlError::UnsupportedVersion { line, version }) => {
            assert!((1..=lines).contains(&line), "line {line} of {lines}");
            assert_ne!(version, u64::from(FORMAT_VERSION));
        }
        Err(JsonlError::Empty) => {}
        Err(other) => panic!("unexpected error on in-memory input: {other}"),
    }
}

/// The sample trace's lines, to rearrange.
fn sample_lines() -> Vec<String> {
    String::from_utf8(to_bytes(&sample_trace()))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn join_lines(lines: &[String]) -> Vec<u8> {
    let mut out = lines.join("\n");
    out.push('\n');
    out.into_bytes()
}

#[test]
fn malformed_line_in_the_middle_names_its_line() {
    for bad in [
        "not json",
        "{\"v\":1,\"trace_id\":\"x\"",
        r#"{"v":1}"#,
        r#"{"v":1,"trace_id":"x","event":{"at":"yesterday","type":"state_read","data":{"key":"k"}}}"#,
        r#"{"v":1,"trace_id":"x","event":{"at":"2026-11-22T10:00:00Z","type":"teleport","data":{}}}"#,
        r#"{"v":1,"event":{"at":"2026-11-22T10:00:00Z","type":"state_read","data":{"key":"k"}}}"#,
        r#"{"v":"1","trace":{"id":"x","start":"2026-11-22T10:00:00Z"}}"#,
        r#"{"trace_id":"x","event":{"at":"2026-11-22T10:00:00Z","type":"state_read","data":{"key":"k"}}}"#,
        r#"[1,2,3]"#,
    ] {
        let mut lines = sample_lines();
        lines[2] = bad.to_owned();
        match load(&join_lines(&lines)) {
            Err(JsonlError::Malformed { line, message, .. }) => {
                assert_eq!(line, 3, "{bad}");
                assert!(!message.is_empty());
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    // The message says what is wrong, and the error names the line.
    let mut lines = sample_lines();
    lines[2] = r#"{"v":1,"trace_id":"x","event":{"at":"2026-11-22T10:00:00Z","type":"teleport","data":{}}}"#.into();
    let err = load(&join_lines(&lines)).unwrap_err().to_string();
    assert!(err.starts_with("line 3, column "), "{err}");
    assert!(err.contains("unknown event type `teleport`"), "{err}");
    assert!(err.contains("unknown event type `teleport`"), "{err}");
    let mut lines = sample_lines();
    lines[2] = r#"{"v":1}"#.into();
    let err = load(&join_lines(&lines)).unwrap_err().to_string();
    assert!(
        err.contains("either `trace` (a header) or `trace_id` and `event`"),
        "{err}"
    );
}

#[test]
fn malformed_last_line_with_newline_is_an_error_not_a_torn_line() {
    let mut bytes = to_bytes(&sample_trace());
    bytes.extend_from_slice(b"{\"v\":1,\"trace_id\":\"x\",\"ev\n");
    let lines = sample_trace().events.len() + 2;
    assert!(
        matches!(load(&bytes), Err(JsonlError::Malformed { line, .. }) if line == lines),
        "{:?}",
        load(&bytes)
    );
}

#[test]
fn blank_lines_are_skipped_but_counted() {
    let mut lines = sample_lines();
    lines.insert(1, String::new());
    lines.insert(2, "   \t".into());
    let read_back = load(&join_lines(&lines)).unwrap();
    assert_eq!(read_back.trace, sample_trace());
    lines.insert(4, "garbage".into());
    assert!(matches!(
        load(&join_lines(&lines)),
        Err(JsonlError::Malformed { line: 5, .. })
    ));
}

#[test]
fn version_1_files_still_read_and_mix_with_version_3_lines() {
    let text = String::from_utf8(to_bytes(&sample_trace())).unwrap();
    let v1 = text.replace("{\"v\":3,", "{\"v\":1,");
    assert_ne!(v1, text);
    assert_eq!(load(v1.as_bytes()).unwrap().trace, sample_trace());
    // A version-1 file appended to by this version.
    let mut lines: Vec<&str> = v1.lines().collect();
    let last = text.lines().last().unwrap();
    lines.pop();
    lines.push(last);
    let mixed = lines.join("\n") + "\n";
    assert_eq!(load(mixed.as_bytes()).unwrap().trace, sample_trace());
}

#[test]
fn crlf_line_endings_are_accepted() {
    let text = String::from_utf8(to_bytes(&sample_trace())).unwrap();
    let crlf = text.replace('\n', "\r\n");
    assert_eq!(load(crlf.as_bytes()).unwrap().trace, sample_trace());
}

#[test]
fn other_versions_are_rejected_naming_the_line() {
    let mut lines = sample_lines();
    lines[1] = lines[1].replacen("{\"v\":3,", "{\"v\":4,", 1);
    let err = load(&join_lines(&lines)).unwrap_err();
    assert!(
        matches!(
            err,
            JsonlError::UnsupportedVersion {
                line: 2,
                version: 4
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "line 2: trace format version 4 is not supported (this library reads versions 1 to 3)"
    );

    // A header of another version.
    let mut lines = sample_lines();
    lines[0] = lines[0].replacen("{\"v\":3,", "{\"v\":0,", 1);
    assert!(matches!(
        load(&join_lines(&lines)),
        Err(JsonlError::UnsupportedVersion {
            line: 1,
            version: 0
        })
    ));

    // A line of a later version that does not fit version 1's shape is still reported as a
    // version problem, not as a malformed line.
    let mut lines = sample_lines();
    lines[3] = r#"{"v":4,"trace_id":"x","event":{"at":"2026-11-22T10:00:00Z","type":"teleport","data":{}}}"#.into();
    assert!(matches!(
        load(&join_lines(&lines)),
        Err(JsonlError::UnsupportedVersion {
            line: 4,
            version: 4
        })
    ));
    let mut lines = sample_lines();
    lines[3] = r#"{"v":7,"something":"new"}"#.into();
    assert!(matches!(
        load(&join_lines(&lines)),
        Err(JsonlError::UnsupportedVersion {
            line: 4,
            version: 7
        })
    ));

    // A complete last line of another version is not mistaken for a torn line, even without
    // its newline.
    let mut bytes = join_lines(&sample_lines());
    bytes.extend_from_slice(br#"{"v":4,"trace_id":"x","event":{}}"#);
    let lines = sample_trace().events.len() + 2;
    assert!(
        matches!(load(&bytes), Err(JsonlError::UnsupportedVersion { line, version: 4 }) if line == lines),
        "{:?}",
        load(&bytes)
    );
}

#[test]
fn empty_input_is_empty() {
    for input in [&b""[..], b"\n", b"\n\n  \n", b"   "] {
        assert!(matches!(load(input), Err(JsonlError::Empty)), "{input:?}");
    }
    // Only a torn fragment: no trace either.
    assert!(matches!(load(b"{\"v\":1,\"tra"), Err(JsonlError::Empty)));
    assert_eq!(JsonlError::Empty.to_string(), "the input holds no trace");
}

#[test]
fn header_only_is_an_empty_trace() {
    let mut trace = sample_trace();
    trace.events.clear();
    let read = load(&to_bytes(&trace)).unwrap();
    assert_eq!(read.trace, trace);
}

#[test]
fn repeated_headers_must_agree_on_the_id() {
    let mut lines = sample_lines();
    let header = lines[0].clone();
    lines.push(header);
    assert_eq!(load(&join_lines(&lines)).unwrap().trace, sample_trace());

    let mut lines = sample_lines();
    lines.push(r#"{"v":1,"trace":{"id":"other-run-0000","start":"2026-11-22T10:00:00Z"}}"#.into());
    let n = lines.len();
    match load(&join_lines(&lines)) {
        Err(JsonlError::Malformed { line, message, .. }) => {
            assert_eq!(line, n);
            assert!(message.contains("other-run-0000"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn headerless_files_take_the_root_of_the_first_event() {
    let mut lines = sample_lines();
    lines.remove(0);
    // The first event is in a branch; events are not in time order.
    lines.insert(
        0,
        serde_json::to_string(&json!({
            "v": 1,
            "trace_id": "brave-otter-3f2a.2.1",
            "event": {"at": "2026-11-22T10:00:05Z", "type": "state_read", "data": {"key": "k"}}
        }))
        .unwrap(),
    );
    let read = load(&join_lines(&lines)).unwrap();
    assert_eq!(read.torn, None);
    assert_eq!(read.trace.id, TraceId::from("brave-otter-3f2a"));
    assert_eq!(read.trace.parent_id, None);
    assert_eq!(read.trace.end, None);
    // The start is the earliest event.
    assert_eq!(read.trace.start, t(1));
    assert_eq!(read.trace.events.len(), sample_trace().events.len() + 1);
    assert_eq!(
        read.trace.events[0].trace_id.as_str(),
        "brave-otter-3f2a.2.1"
    );
    assert_eq!(&read.trace.events[1..], &sample_trace().events[..]);
}

// ---- appending ----

fn appended(id: &str, ms: i64, key: &str) -> TraceEntry {
    entry_at(id, ms, EventKind::state_write(key))
}

#[test]
fn appender_streams_a_trace_that_reads_back() {
    let dir = TempDir::new("stream");
    let path = dir.path("run.jsonl");
    let trace = sample_trace();
    {
        let (mut appender, torn) = JsonlAppender::open(&path).unwrap();
        assert_eq!(torn, None);
        appender.write_header(&trace).unwrap();
        for entry in &trace.events {
            appender.append(entry).unwrap();
        }
        appender.flush().unwrap();
    }
    assert_eq!(fs::read(&path).unwrap(), to_bytes(&trace));
    let read = read_trace_file(&path).unwrap();
    assert_eq!(read.torn, None);
    assert_eq!(read.trace, trace);

    // Reopening a clean file changes nothing; appending adds at the end.
    let (mut appender, torn) = JsonlAppender::open(&path).unwrap();
    assert_eq!(torn, None);
    let extra = appended("brave-otter-3f2a", 3_000, "late");
    appender.append(&extra).unwrap();
    appender.flush().unwrap();
    let mut expected = trace.clone();
    expected.events.push(extra);
    assert_eq!(read_trace_file(&path).unwrap().trace, expected);
}

#[test]
fn appender_on_an_empty_file_writes_nothing_until_asked() {
    let dir = TempDir::new("emptyfile");
    let path = dir.path("run.jsonl");
    fs::write(&path, b"").unwrap();
    let (appender, torn) = JsonlAppender::open(&path).unwrap();
    assert_eq!(torn, None);
    drop(appender);
    assert_eq!(fs::read(&path).unwrap(), b"");
}

#[test]
fn appender_cuts_a_torn_tail_at_every_offset() {
    let dir = TempDir::new("repair");
    let trace = sample_trace();
    let bytes = to_bytes(&trace);
    let starts = line_starts(&bytes);
    let last_start = starts[starts.len() - 2];
    let last_line_no = trace.events.len() + 1;
    let mut kept = trace.clone();
    kept.events.pop();
    let extra = appended("brave-otter-3f2a", 3_000, "after-crash");
    let path = dir.path("run.jsonl");
    for cut in last_start + 1..bytes.len() - 1 {
        fs::write(&path, &bytes[..cut]).unwrap();
        let (mut appender, torn) = JsonlAppender::open(&path).unwrap();
        assert_eq!(
            torn,
            Some(TornLine {
                line: last_line_no,
                bytes: cut - last_start
            }),
            "cut at {cut}"
        );
        // The fragment is gone; the file ends with the last complete line.
        assert_eq!(
            fs::read(&path).unwrap(),
            &bytes[..last_start],
            "cut at {cut}"
        );
        appender.append(&extra).unwrap();
        appender.flush().unwrap();
        drop(appender);
        let read = read_trace_file(&path).unwrap();
        assert_eq!(read.torn, None, "cut at {cut}");
        let mut expected = kept.clone();
        expected.events.push(extra.clone());
        assert_eq!(read.trace, expected, "cut at {cut}");
    }
}

#[test]
fn appender_terminates_a_complete_last_line() {
    let dir = TempDir::new("unterminated");
    let path = dir.path("run.jsonl");
    let trace = sample_trace();
    let bytes = to_bytes(&trace);
    fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let (mut appender, torn) = JsonlAppender::open(&path).unwrap();
    assert_eq!(torn, None);
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "only the newline was added"
    );
    let extra = appended("brave-otter-3f2a.0", 3_000, "next");
    appender.append(&extra).unwrap();
    appender.flush().unwrap();
    let mut expected = trace;
    expected.events.push(extra);
    assert_eq!(read_trace_file(&path).unwrap().trace, expected);
}

#[test]
fn appender_cuts_a_file_that_is_only_a_fragment() {
    let dir = TempDir::new("fragment");
    let path = dir.path("run.jsonl");
    fs::write(&path, b"{\"v\":1,\"trace\":{\"id\":\"brave-ot").unwrap();
    let (_, torn) = JsonlAppender::open(&path).unwrap();
    assert_eq!(torn, Some(TornLine { line: 1, bytes: 30 }));
    assert_eq!(fs::read(&path).unwrap(), b"");
}

#[test]
fn appender_refuses_a_file_ending_in_another_version() {
    let dir = TempDir::new("version");
    let path = dir.path("run.jsonl");
    let mut bytes = to_bytes(&sample_trace());
    bytes.extend_from_slice(br#"{"v":4,"trace_id":"x","event":{"new":"shape"}}"#);
    fs::write(&path, &bytes).unwrap();
    let err = JsonlAppender::open(&path).unwrap_err();
    assert!(
        matches!(err, JsonlError::UnsupportedVersion { line, version: 4 } if line == sample_trace().events.len() + 2),
        "{err:?}"
    );
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "the file is left as it was"
    );
}

#[test]
fn append_event_adds_to_an_existing_file() {
    let dir = TempDir::new("append");
    let path = dir.path("run.jsonl");
    let trace = sample_trace();
    write_trace_file(&path, &trace).unwrap();
    let id = TraceId::from("brave-otter-3f2a.0");
    let event = Event::at(t(2_500), EventKind::custom("note", json!({"ok": true})));
    append_event(&path, &id, &event).unwrap();
    let read = read_trace_file(&path).unwrap();
    let mut expected = trace;
    expected.events.push(TraceEntry {
        trace_id: id,
        cancelled: false,
        event,
    });
    assert_eq!(read.torn, None);
    assert_eq!(read.trace, expected);
}

#[test]
fn append_event_creates_a_headerless_file() {
    let dir = TempDir::new("create");
    let path = dir.path("new.jsonl");
    let branch = TraceId::from("quiet-heron-00ff.1");
    let root = TraceId::from("quiet-heron-00ff");
    append_event(
        &path,
        &branch,
        &Event::at(t(500), EventKind::state_read("a")),
    )
    .unwrap();
    append_event(
        &path,
        &root,
        &Event::at(t(100), EventKind::state_write("b")),
    )
    .unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.ends_with('\n'));
    let read = read_trace_file(&path).unwrap();
    assert_eq!(read.torn, None);
    assert_eq!(read.trace.id, root);
    assert_eq!(read.trace.start, t(100));
    assert_eq!(read.trace.end, None);
    let ids: Vec<_> = read
        .trace
        .events
        .iter()
        .map(|e| e.trace_id.as_str())
        .collect();
    assert_eq!(ids, ["quiet-heron-00ff.1", "quiet-heron-00ff"]);
    assert_eq!(read.trace.events[0].event.kind, EventKind::state_read("a"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn appended_events_read_back(events in prop::collection::vec(entry(), 1..10)) {
        let dir = TempDir::new("append-prop");
        let path = dir.path("run.jsonl");
        let (mut appender, _) = JsonlAppender::open(&path).unwrap();
        for e in &events {
            appender.append(e).unwrap();
        }
        appender.flush().unwrap();
        drop(appender);
        let read = read_trace_file(&path).unwrap();
        prop_assert_eq!(read.torn, None);
        prop_assert_eq!(&read.trace.events, &events);
        prop_assert_eq!(read.trace.id.as_str(), events[0].trace_id.root());
        let earliest = events.iter().map(|e| e.event.at).min().unwrap();
        prop_assert_eq!(read.trace.start, earliest);
    }
}

// ---- the documented format ----

/// The example of `docs/TRACE_FORMAT.md`.
fn documented_example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/TRACE_FORMAT.md");
    let doc = fs::read_to_string(path).expect("docs/TRACE_FORMAT.md");
    let start = doc.find("```jsonl\n").expect("a jsonl example") + "```jsonl\n".len();
    let len = doc[start..].find("```").expect("the example's end");
    doc[start..start + len].to_owned()
}

#[test]
fn documented_example_reads_back_and_rewrites_identically() {
    let example = documented_example();
    let read = load(example.as_bytes()).unwrap();
    assert_eq!(read.torn, None);
    let trace = read.trace;
    assert_eq!(trace.id.as_str(), "brave-otter-3f2a");
    assert_eq!(trace.events.len(), 11);
    // The run's own account of what it spent agrees with the events.
    let Some(agent_op::EventKind::RunEnd(end)) = trace.events.last().map(|e| &e.event.kind) else {
        panic!("the example ends with run_end");
    };
    let spend = trace.spend();
    assert_eq!(end.spent, (&spend.kept).into());
    assert_eq!(end.discarded, (&spend.discarded).into());
    assert_eq!(
        (trace.end.unwrap() - trace.start).num_microseconds(),
        Some(end.duration_us as i64)
    );
    assert_eq!(trace.total_cost().known, agent_op::MicroUsd(84));
    assert_eq!(trace.total_cost().unknown_calls, 1);
    assert_eq!(trace.checkpoints(), ["answered"]);
    assert_eq!(trace.tool_calls().len(), 1);
    let canonical = trace.canonical();
    assert!(!canonical.contains_key(&TraceId::from("brave-otter-3f2a.1")));
    assert_eq!(canonical[&TraceId::from("brave-otter-3f2a.0")].len(), 2);
    assert_eq!(String::from_utf8(to_bytes(&trace)).unwrap(), example);
}

#[test]
fn optional_members_accept_null_and_timestamps_accept_offsets() {
    let text = concat!(
        r#"{"v":1,"trace":{"id":"brave-otter-3f2a","parent_id":null,"start":"2026-11-22T12:00:00+02:00","end":null}}"#,
        "\n",
        r#"{"v":1,"trace_id":"brave-otter-3f2a","event":{"at":"2026-11-22T05:00:00.020-05:00","type":"infer_end","data":{"model":"m","response_preview":"","tool_calls":0,"finish_reason":{"other":"safety"},"input_tokens":1,"output_tokens":2,"cost":null,"duration_us":3,"iteration":0}}}"#,
        "\n",
        r#"{"v":1,"trace_id":"brave-otter-3f2a","event":{"at":"2026-11-22T10:00:00Z","type":"limit","data":{"budget":{"cost":null,"tokens":null,"time":null,"calls":null}}}}"#,
        "\n",
    );
    let read = load(text.as_bytes()).unwrap();
    assert_eq!(read.trace.start, t(0));
    assert_eq!(read.trace.end, None);
    assert_eq!(read.trace.parent_id, None);
    assert_eq!(read.trace.events[0].event.at, t(20));
    match &read.trace.events[0].event.kind {
        EventKind::InferEnd(e) => {
            assert_eq!(e.cost, None);
            assert_eq!(
                e.finish_reason,
                agent_op::FinishReason::Other("safety".into())
            );
        }
        other => panic!("{other:?}"),
    }
    match &read.trace.events[1].event.kind {
        EventKind::Limit(l) => assert_eq!(l.budget, agent_op::Budget::new()),
        other => panic!("{other:?}"),
    }

    // `cancelled` must be a boolean.
    let text = r#"{"v":1,"trace_id":"x","cancelled":null,"event":{"at":"2026-11-22T10:00:00Z","type":"state_read","data":{"key":"k"}}}
"#;
    assert!(matches!(
        load(text.as_bytes()),
        Err(JsonlError::Malformed { line: 1, .. })
    ));
}

/// A bad line in the middle of a file is reported by its line and column in the file, once:
/// it read "line 17: EOF while parsing a string at line 1 column 49" (the parser's own
/// position, counted from the start of the line's JSON). The parser's error stays reachable.
#[test]
fn malformed_lines_report_the_files_line_and_column_once() {
    let mut lines = sample_lines();
    let good = lines[1].clone();
    // Indented by three spaces (readers skip surrounding whitespace), then cut inside a
    // string, with more lines after it: malformed, not torn.
    let cut = good.find("\"type\"").expect("an event line") + 4;
    lines[1] = format!("   {}", &good[..cut]);
    let err = load(&join_lines(&lines)).unwrap_err();
    let text = err.to_string();
    assert!(!text.contains(" at line "), "{text}");
    match &err {
        JsonlError::Malformed {
            line,
            column,
            message,
            source,
        } => {
            assert_eq!(*line, 2, "{text}");
            let source = source.as_ref().expect("the parser's error");
            assert!(source.is_eof(), "{source}");
            // The parser saw the line without its indent.
            assert_eq!(*column, Some(source.column() + 3), "{text}");
            assert_eq!(message, "EOF while parsing a string", "{text}");
            assert_eq!(
                text,
                format!(
                    "line 2, column {}: EOF while parsing a string",
                    source.column() + 3
                )
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(std::error::Error::source(&err).is_some());
}

#[test]
fn the_readable_prefix_of_a_corrupt_file_comes_with_the_first_error() {
    let text = concat!(
        r#"{"v":2,"trace_id":"t","event":{"at":"2026-11-22T10:00:00Z","type":"custom","data":{"name":"a","data":null}}}"#,
        "\n",
        r#"{"v":2,"trace_id":"t","event":{"at":"2026-11-22T10:00:01Z","type":"custom","data":{"name":"b","data":null}}}"#,
        "\n",
        "{not json at all}\n",
        r#"{"v":2,"trace_id":"t","event":{"at":"2026-11-22T10:00:02Z","type":"custom","data":{"name":"c","data":null}}}"#,
        "\n",
    );
    assert!(agent_op::trace::jsonl::read_jsonl(text.as_bytes()).is_err());
    let (read, error) = agent_op::trace::jsonl::read_jsonl_prefix(text.as_bytes()).unwrap();
    assert_eq!(read.trace.events.len(), 2);
    match error {
        Some(agent_op::trace::jsonl::JsonlError::Malformed { line, .. }) => assert_eq!(line, 3),
        other => panic!("{other:?}"),
    }
    // Nothing readable at all: the bad line is the error, not "no trace".
    let error = agent_op::trace::jsonl::read_jsonl_prefix("{oops\n".as_bytes()).unwrap_err();
    assert!(
        matches!(
            error,
            agent_op::trace::jsonl::JsonlError::Malformed { line: 1, .. }
        ),
        "{error}"
    );
    // A clean file reads whole, with no error.
    let clean: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    let (read, error) = agent_op::trace::jsonl::read_jsonl_prefix(clean.as_bytes()).unwrap();
    assert_eq!(read.trace.events.len(), 2);
    assert!(error.is_none());
}

/// A conversation of `turns` model calls, each sending everything so far (as an agent loop
/// does) and recording its request and reply in full.
fn conversation(turns: usize) -> Trace {
    use agent_op::trace::event::{InferEnd, InferStart};
    use agent_op::{FinishReason, Message, Prompt};
    let mut trace = Trace::new(TraceId::from("long-talk-0001"));
    let mut messages = vec![Message::system("You are a careful assistant. ".repeat(10))];
    for turn in 0..turns {
        messages.push(Message::user(format!(
            "question {turn}: {}",
            "why? ".repeat(60)
        )));
        let prompt = Prompt::from_messages(messages.clone());
        let reply = Message::assistant(format!("answer {turn}: {}", "because. ".repeat(40)));
        trace.append(Event::now(EventKind::InferStart(InferStart {
            model: "m".into(),
            prompt_preview: String::new(),
            messages: messages.len() as u32,
            tools: 0,
            iteration: turn as u32,
            prompt: Some(std::sync::Arc::new(prompt)),
        })));
        trace.append(Event::now(EventKind::InferEnd(InferEnd {
            model: "m".into(),
            response_preview: String::new(),
            tool_calls: 0,
            finish_reason: FinishReason::Stop,
            input_tokens: 1,
            output_tokens: 1,
            cost: None,
            duration_us: 1,
            iteration: turn as u32,
            reply: Some(reply.clone()),
        })));
        messages.push(reply);
    }
    trace
}

#[test]
fn full_prompts_are_stored_once_so_files_grow_with_the_conversation_not_its_square() {
    let sizes: Vec<usize> = [50, 100, 200]
        .iter()
        .map(|&turns| {
            let trace = conversation(turns);
            let bytes = to_bytes(&trace);
            // Everything reads back whole.
            assert_eq!(load(&bytes).unwrap().trace, trace);
            bytes.len()
        })
        .collect();
    // Doubling the turns doubles the file (plus a little): sending the whole conversation
    // each time would quadruple it.
    for pair in sizes.windows(2) {
        let ratio = pair[1] as f64 / pair[0] as f64;
        assert!(ratio < 2.2, "sizes {sizes:?}: ratio {ratio:.2}");
    }
    // And the file is the conversation itself plus a bounded cost per call (two event lines,
    // two content lines' framing and the hashes naming a prefix and the new messages).
    let trace = conversation(200);
    let text: usize = trace
        .prompts()
        .last()
        .expect("the last call's prompt")
        .messages
        .iter()
        .map(|m| serde_json::to_string(m).unwrap().len())
        .sum();
    assert!(
        sizes[2] < text + 200 * 1_200,
        "{} bytes for {text} of text",
        sizes[2]
    );
}

/// The prompts of `trace` rebuilt as an agent loop makes them: each a view of one growing
/// conversation, sharing its messages.
fn sharing_one_conversation(trace: &Trace) -> Trace {
    use agent_op::{Messages, Prompt};
    let mut shared = trace.clone();
    let mut conversation = Messages::new();
    for entry in &mut shared.events {
        if let EventKind::InferStart(start) = &mut entry.event.kind
            && let Some(prompt) = &mut start.prompt
        {
            for message in prompt.messages.iter().skip(conversation.len()) {
                conversation.push(message.clone());
            }
            *prompt = std::sync::Arc::new(Prompt::from_messages(conversation.clone()));
        }
    }
    shared
}

#[test]
fn prompts_sharing_a_conversation_are_written_as_copies_are_and_read_back_shared() {
    let copies = conversation(60);
    let shared = sharing_one_conversation(&copies);
    let prompts_written = shared.prompts().cloned().collect::<Vec<_>>();
    let last = &prompts_written.last().unwrap().messages;
    assert!(
        prompts_written
            .iter()
            .all(|p| p.messages.shared_with(last) == p.messages.len())
    );
    // The same file, byte for byte, however the prompts hold their messages.
    let bytes = to_bytes(&shared);
    assert_eq!(bytes, to_bytes(&copies));
    // Each prompt after the first names the one before it and adds its new message only.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let listed: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"]["type"] == "infer_start")
        .map(|l| l["event"]["data"]["prompt"]["messages"].clone())
        .collect();
    assert_eq!(listed.len(), 60);
    for messages in &listed[1..] {
        assert!(messages["prefix"].is_string(), "{messages}");
        assert_eq!(messages["then"].as_array().unwrap().len(), 2, "{messages}");
    }
    // Read back, the prompts share their messages again: each is stored once in memory.
    let read = load(&bytes).unwrap().trace;
    assert_eq!(read, copies);
    let prompts_read = read.prompts().cloned().collect::<Vec<_>>();
    let last = &prompts_read.last().unwrap().messages;
    for prompt in &prompts_read {
        assert_eq!(prompt.messages.shared_with(last), prompt.messages.len());
    }
}

#[test]
fn forked_and_shortened_conversations_are_written_as_their_copies_are() {
    use agent_op::trace::event::InferStart;
    use agent_op::{Message, Messages, Prompt, Timestamp};
    // Prompts of one conversation, of a fork of it (a branch going on from an earlier turn),
    // interleaved, then of a shortened one going on differently, then an old one again.
    let mut main = Messages::from(vec![Message::system("rules"), Message::user("goal")]);
    let mut lists = Vec::new();
    for i in 0..5 {
        main.push(Message::assistant(format!("a{i}")));
        lists.push(main.clone());
    }
    let mut fork = lists[1].clone();
    for i in 0..4 {
        fork.push(Message::user(format!("f{i}")));
        lists.push(fork.clone());
        main.push(Message::user(format!("m{i}")));
        lists.push(main.clone());
    }
    let mut short = main.clone();
    short.truncate(3);
    lists.push(short.clone());
    short.push(Message::user("again"));
    lists.push(short);
    lists.push(lists[0].clone());
    assert_eq!(
        lists[5].shared_with(&lists[6]),
        4,
        "the fork shares its beginning"
    );
    let trace_of = |copies: bool| {
        let mut trace = Trace::new(TraceId::from("forks"));
        trace.start = Timestamp::UNIX_EPOCH;
        for (i, list) in lists.iter().enumerate() {
            let messages = if copies {
                Messages::from(list.to_vec())
            } else {
                list.clone()
            };
            trace.events.push(TraceEntry {
                trace_id: trace.id.clone(),
                cancelled: false,
                event: Event::at(
                    Timestamp::UNIX_EPOCH,
                    EventKind::InferStart(InferStart {
                        model: "m".into(),
                        prompt_preview: String::new(),
                        messages: list.len() as u32,
                        tools: 0,
                        iteration: i as u32,
                        prompt: Some(std::sync::Arc::new(Prompt::from_messages(messages))),
                    }),
                ),
            });
        }
        trace
    };
    let bytes = to_bytes(&trace_of(false));
    assert_eq!(
        String::from_utf8(bytes.clone()).unwrap(),
        String::from_utf8(to_bytes(&trace_of(true))).unwrap()
    );
    assert_eq!(load(&bytes).unwrap().trace, trace_of(true));
}

#[test]
fn content_that_does_not_match_its_hash_or_is_missing_is_a_malformed_line() {
    let bytes = to_bytes(&conversation(3));
    let text = String::from_utf8(bytes).unwrap();
    // A content line whose value was changed.
    let edited = text.replacen("question 1", "question 9", 1);
    match load(edited.as_bytes()) {
        Err(JsonlError::Malformed { line, message, .. }) => {
            assert!(message.contains("does not match"), "{message}");
            assert!(line > 1);
        }
        other => panic!("{other:?}"),
    }
    // An event naming content no line holds.
    let lines: Vec<&str> = text.lines().collect();
    let first_content = lines
        .iter()
        .position(|l| l.contains("\"content\":{"))
        .unwrap();
    let mut without: Vec<&str> = lines.clone();
    without.remove(first_content);
    match load((without.join("\n") + "\n").as_bytes()) {
        Err(JsonlError::Malformed { message, .. }) => {
            assert!(message.contains("is not in the file"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}
