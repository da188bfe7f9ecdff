//! A recorded stream assembles to the same reply, with the same deltas, however its bytes are
//! split: inside multi-byte UTF-8 characters, inside SSE fields and CRLF pairs, inside NDJSON
//! lines and JSON strings.

use agent_op::{Delta, ProviderError, Response};
use agent_provider::{ollama, openai};
use proptest::prelude::*;
use serde_json::{Value, json};

fn sse_chunk(delta: Value, finish: Value) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
}

/// A recorded SSE stream exercising every part of the format.
fn recorded_sse() -> Vec<u8> {
    let mut s = String::new();
    s.push_str(": keep-alive comment\n\n");
    s.push_str(&format!(
        "data: {}\n\n",
        sse_chunk(json!({"role": "assistant", "content": ""}), Value::Null)
    ));
    for piece in ["Grüß ", "dich, ", "世界 ", "🎉🎉 ", "naïve café"] {
        s.push_str(&format!(
            "data: {}\n\n",
            sse_chunk(json!({"content": piece}), Value::Null)
        ));
    }
    // An event with CRLF line endings and an explicit event type.
    s.push_str(&format!(
        "event: message\r\ndata: {}\r\n\r\n",
        sse_chunk(json!({"content": " — fin"}), json!(""))
    ));
    s.push_str(&format!(
        "data: {}\n\n",
        sse_chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ""}}]}),
            Value::Null
        )
    ));
    for fragment in ["{\"q\": \"Zü", "rich ✓\", ", "\"n\": 3}"] {
        s.push_str(&format!(
            "data: {}\n\n",
            sse_chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}),
                Value::Null
            )
        ));
    }
    s.push_str(&format!(
        "data: {}\n\n",
        sse_chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "echo", "arguments": {"text": "日本語"}}}]}),
            Value::Null
        )
    ));
    s.push_str(&format!(
        "data: {}\n\n",
        sse_chunk(json!({}), json!("tool_calls"))
    ));
    s.push_str("data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":17,\"completion_tokens\":42}}\n\n");
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

/// A recorded NDJSON stream of Ollama's `/api/chat`.
fn recorded_ndjson() -> Vec<u8> {
    let mut s = String::new();
    for piece in ["Grüß ", "dich, ", "世界 ", "🎉🎉 ", "naïve café"] {
        s.push_str(
            &json!({"model": "m", "message": {"role": "assistant", "content": piece}, "done": false})
                .to_string(),
        );
        s.push('\n');
    }
    s.push_str(
        &json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"index": 0, "name": "lookup", "arguments": {"q": "Zürich ✓", "n": 3}}},
            {"function": {"index": 1, "name": "echo", "arguments": {"text": "日本語"}}},
        ]}, "done": false})
        .to_string(),
    );
    s.push_str("\r\n");
    s.push_str(
        &json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
            "prompt_eval_count": 17, "eval_count": 42, "total_duration": 123_456_789})
        .to_string(),
    );
    s.push('\n');
    s.into_bytes()
}

type Assembled = (Result<Response, ProviderError>, Vec<Delta>);
type Assembler = fn(&[&[u8]]) -> Assembled;

fn split_at_points<'a>(bytes: &'a [u8], points: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = points.iter().map(|p| p % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for p in points {
        pieces.push(&bytes[start..p]);
        start = p;
    }
    pieces.push(&bytes[start..]);
    pieces
}

fn assemble_sse(pieces: &[&[u8]]) -> Assembled {
    let mut deltas = Vec::new();
    let result = openai::assemble_bytes(pieces.iter().copied(), |d| deltas.push(d));
    (result, deltas)
}

fn assemble_ndjson(pieces: &[&[u8]]) -> Assembled {
    let mut deltas = Vec::new();
    let result = ollama::assemble_bytes(pieces.iter().copied(), |d| deltas.push(d));
    (result, deltas)
}

#[test]
fn the_recordings_assemble_to_the_expected_replies() {
    for (bytes, assemble) in [
        (recorded_sse(), assemble_sse as fn(&[&[u8]]) -> Assembled),
        (recorded_ndjson(), assemble_ndjson),
    ] {
        let (response, deltas) = assemble(&[&bytes]);
        let response = response.unwrap();
        assert!(
            response
                .content
                .starts_with("Grüß dich, 世界 🎉🎉 naïve café")
        );
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(
            response.tool_calls[0].arguments,
            json!({"q": "Zürich ✓", "n": 3})
        );
        assert_eq!(response.tool_calls[1].arguments, json!({"text": "日本語"}));
        assert_eq!(response.usage.total(), 59);
        let text: String = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, response.content);
    }
}

#[test]
fn every_single_split_point_gives_the_same_reply() {
    for (bytes, assemble) in [
        (recorded_sse(), assemble_sse as fn(&[&[u8]]) -> Assembled),
        (recorded_ndjson(), assemble_ndjson),
    ] {
        let whole = assemble(&[&bytes]);
        assert!(whole.0.is_ok());
        for at in 0..=bytes.len() {
            let (head, tail) = bytes.split_at(at);
            assert_eq!(assemble(&[head, tail]), whole, "split at byte {at}");
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(assemble(&bytewise), whole, "one byte at a time");
    }
}

proptest! {
    #[test]
    fn sse_splits_anywhere(points in prop::collection::vec(any::<usize>(), 0..40)) {
        let bytes = recorded_sse();
        let whole = assemble_sse(&[&bytes]);
        prop_assert_eq!(assemble_sse(&split_at_points(&bytes, &points)), whole);
    }

    #[test]
    fn ndjson_splits_anywhere(points in prop::collection::vec(any::<usize>(), 0..40)) {
        let bytes = recorded_ndjson();
        let whole = assemble_ndjson(&[&bytes]);
        prop_assert_eq!(assemble_ndjson(&split_at_points(&bytes, &points)), whole);
    }

    /// Cutting a stream short anywhere before its final event or line is complete is an
    /// error, never a partial reply.
    #[test]
    fn truncation_anywhere_is_an_error(cut in any::<prop::sample::Index>()) {
        for (bytes, assemble, complete_from) in recordings() {
            let at = cut.index(bytes.len());
            let (result, _) = assemble(&[&bytes[..at]]);
            if at >= complete_from {
                prop_assert_eq!(assemble(&[&bytes[..at]]), assemble(&[&bytes]));
            } else {
                prop_assert!(result.is_err(), "cut at {} of {} assembled", at, bytes.len());
            }
        }
    }
}

/// Each recording, its assembler, and the shortest prefix that is a complete stream: the
/// final `data: [DONE]` without the blank line after it, the final object without its
/// newline (a complete event or line at the end of a body counts; anything shorter is cut).
fn recordings() -> [(Vec<u8>, Assembler, usize); 2] {
    let sse = recorded_sse();
    let sse_complete = sse.len() - "\n\n".len();
    assert!(sse[..sse_complete].ends_with(b"data: [DONE]"));
    let ndjson = recorded_ndjson();
    let ndjson_complete = ndjson.len() - "\n".len();
    assert!(ndjson[..ndjson_complete].ends_with(b"}"));
    [
        (sse, assemble_sse as Assembler, sse_complete),
        (ndjson, assemble_ndjson, ndjson_complete),
    ]
}

#[test]
fn every_truncation_before_the_final_event_is_an_error() {
    for (bytes, assemble, complete_from) in recordings() {
        let whole = assemble(&[&bytes]);
        for at in 0..=bytes.len() {
            let cut = assemble(&[&bytes[..at]]);
            if at >= complete_from {
                assert_eq!(cut, whole, "cut at {at} of {}", bytes.len());
            } else {
                assert!(cut.0.is_err(), "cut at {at} of {} assembled", bytes.len());
            }
        }
    }
}
