//! Streamed chat completions: server-sent events of `chat.completion.chunk` objects, assembled
//! into one [`Response`] while their pieces are passed on as [`Delta`]s.
//!
//! The SSE framing is parsed by [`sse_stream`]; [`SseAssembler`] handles what the events
//! carry. Both work on bytes split at any point (inside a UTF-8 character, an SSE line or a
//! JSON document), so the same code serves a network body and a recording in memory.
//!
//! What is accepted, beyond the documented format:
//! - `finish_reason` `null`, missing or `""` (not said yet);
//! - `choices` `null` or missing (vLLM's usage-only final chunk);
//! - tool-call `arguments` as a JSON string (documented) or a JSON object (some servers);
//! - tool calls without `index` (matched by `id`, else continuing the latest call), and
//!   parallel calls all sent with the same `index` (Ollama's `/v1`), told apart by their `id`;
//! - an `error` object inside the stream, or an `event: error`, which fails the call.
//!
//! A stream is complete only when `data: [DONE]` arrives: a body that ends before is an error
//! ([`ProviderError::Transport`]), never a partial success. A final `data: [DONE]` without
//! the blank line that should follow it is complete; a final event cut short is not.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_op::{Delta, FinishReason, ProviderError, Response, ToolCall, Usage};
use bytes::Buf;
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::Value;
use sse_stream::SseByteStream;

use super::wire::WireUsage;
use crate::error;
use crate::json::{nullable, parse_arguments};
use crate::reply;
use crate::secret::Redactor;

/// Assembles the `data` payloads of a streamed chat completion into a [`Response`].
///
/// Feed it each event's data with [`SseAssembler::push_data`], then call
/// [`SseAssembler::finish`]. Most users want [`assemble_stream`] or [`assemble_bytes`],
/// which also parse the SSE framing.
///
/// Text deltas (`content`, and `refusal`, which becomes part of the reply's text) are appended
/// and passed on; tool-call fragments are matched to their call by `index` and their
/// `arguments` text appended. What is accepted beyond the documented format:
/// - `finish_reason` `null`, missing or `""` (not said yet);
/// - `choices` `null` or missing (vLLM's usage-only final chunk);
/// - tool-call `arguments` as a JSON string (documented) or a JSON object (some servers);
/// - tool calls without `index` (matched by `id`, else continuing the latest call), with any
///   `index` values (they are mapped to positions in order of first appearance), and with
///   their whole name repeated in every fragment;
/// - several calls sent with the same `index` (Ollama's `/v1` sends every parallel call with
///   index 0): a fragment whose `id` differs from the `id` its call already has starts a new
///   call;
/// - an `error` object inside the stream, which fails the call with the matching error.
///
/// The reply is complete only once `[DONE]` arrived; [`SseAssembler::finish`] fails
/// otherwise ([`ProviderError::Transport`]), so a cut stream is never a partial success.
///
/// ```
/// use agent_op::Delta;
/// use agent_provider::openai::SseAssembler;
///
/// let mut assembler = SseAssembler::new();
/// let mut deltas = Vec::new();
/// for data in [
///     r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}"#,
///     r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
///     r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
///     "[DONE]",
/// ] {
///     assembler.push_data(data, &mut |d| deltas.push(d))?;
/// }
/// let response = assembler.finish()?;
/// assert_eq!(response.content, "Hello");
/// assert_eq!(response.usage.output_tokens, 2);
/// assert_eq!(deltas, [Delta::Text("Hel".into()), Delta::Text("lo".into())]);
/// # Ok::<(), agent_op::ProviderError>(())
/// ```
#[derive(Debug, Default)]
pub struct SseAssembler {
    content: String,
    calls: Vec<PartialCall>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    model: Option<String>,
    done: bool,
    redactor: Redactor,
}

#[derive(Debug, Default)]
struct PartialCall {
    /// The server's `index` for the call, if it sent one.
    key: Option<u32>,
    id: String,
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<ChunkDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChunkDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    tool_calls: Vec<ChunkToolCall>,
}

#[derive(Deserialize)]
struct ChunkToolCall {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<ChunkFunction>,
}

#[derive(Deserialize)]
struct ChunkFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

impl SseAssembler {
    /// An assembler with nothing received yet.
    pub fn new() -> SseAssembler {
        SseAssembler::default()
    }

    pub(crate) fn with_redactor(redactor: Redactor) -> SseAssembler {
        SseAssembler {
            redactor,
            ..SseAssembler::default()
        }
    }

    /// Whether `[DONE]` arrived: the reply is complete.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The token usage, once the final usage chunk arrived.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Takes the `data` of one event, passing what it adds to the reply to `on_delta`.
    ///
    /// Fails on data that is not a chunk, and on an `error` the server sent in the stream.
    /// Events after `[DONE]` are ignored.
    pub fn push_data(
        &mut self,
        data: &str,
        on_delta: &mut dyn FnMut(Delta),
    ) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            error::decode("chat completion chunk", data.as_bytes(), e, &self.redactor)
        })?;
        if let Some(err) = &chunk.error {
            return Err(error::from_stream_error(err, data, &self.redactor));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into());
        }
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = Some(model);
        }
        for choice in chunk.choices {
            // We never ask for more than one choice; ignore any others.
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        self.content.push_str(&text);
                        on_delta(Delta::Text(text));
                    }
                }
                for call in delta.tool_calls {
                    self.push_tool_call(call, on_delta);
                }
            }
            if let Some(reason) = reply::parse_finish_reason(choice.finish_reason.as_deref()) {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    /// Which of our calls a tool-call fragment continues, or `None` for a new call.
    ///
    /// With an `index`, the latest call with that index, unless the fragment carries an `id`
    /// different from the one that call already has: then the latest call with that index and
    /// that id, else a new call. Without an `index`, the call with the fragment's `id`, else
    /// (no id) the latest call.
    fn slot_of(&self, call: &ChunkToolCall) -> Option<usize> {
        let id = call.id.as_deref().filter(|id| !id.is_empty());
        match (call.index, id) {
            (Some(key), None) => self.calls.iter().rposition(|c| c.key == Some(key)),
            (Some(key), Some(id)) => {
                let latest = self.calls.iter().rposition(|c| c.key == Some(key))?;
                let latest_id = self.calls[latest].id.as_str();
                if latest_id.is_empty() || latest_id == id {
                    Some(latest)
                } else {
                    self.calls
                        .iter()
                        .rposition(|c| c.key == Some(key) && c.id == id)
                }
            }
            (None, Some(id)) => self.calls.iter().rposition(|c| c.id == id),
            (None, None) => self.calls.len().checked_sub(1),
        }
    }

    fn push_tool_call(&mut self, call: ChunkToolCall, on_delta: &mut dyn FnMut(Delta)) {
        let (slot, is_new) = match self.slot_of(&call) {
            Some(slot) => (slot, false),
            None => {
                self.calls.push(PartialCall {
                    key: call.index,
                    ..PartialCall::default()
                });
                (self.calls.len() - 1, true)
            }
        };
        let index = u32::try_from(slot).unwrap_or(u32::MAX);
        let partial = &mut self.calls[slot];
        let (name, arguments) = match call.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        let new_id = call
            .id
            .filter(|id| !id.is_empty() && partial.id.is_empty())
            .inspect(|id| partial.id.clone_from(id));
        // A name arrives whole in one fragment (some servers repeat it whole in every
        // fragment), or in pieces: only a piece equal to the whole name so far is a
        // repetition (a piece equal to its end is not: `list_tre` + `e`).
        let new_name = name
            .filter(|n| !n.is_empty() && partial.name != *n)
            .inspect(|n| {
                partial.name.push_str(n);
            });
        if is_new || new_id.is_some() || new_name.is_some() {
            on_delta(Delta::ToolCall {
                index,
                id: new_id,
                name: new_name,
            });
        }
        let fragment = match arguments {
            None | Some(Value::Null) => return,
            Some(Value::String(text)) => text,
            Some(object) => object.to_string(),
        };
        if !fragment.is_empty() {
            partial.arguments.push_str(&fragment);
            on_delta(Delta::ToolCallArguments { index, fragment });
        }
    }

    /// The assembled reply. Fails if `[DONE]` never arrived or a tool call has no name.
    pub fn finish(self) -> Result<Response, ProviderError> {
        if !self.done {
            return Err(ProviderError::transport(
                "the event stream ended before the reply was complete (no `data: [DONE]`)",
            ));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (i, call) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(error::invalid(
                    format!("tool call #{i} in the stream has no name"),
                    &call.arguments,
                    &self.redactor,
                ));
            }
            tool_calls.push(ToolCall {
                id: if call.id.is_empty() {
                    format!("call_{i}")
                } else {
                    call.id
                },
                name: call.name,
                arguments: parse_arguments(&call.arguments),
            });
        }
        let finish_reason = reply::finish_reason(self.finish_reason, !tool_calls.is_empty());
        Ok(Response {
            content: self.content,
            tool_calls,
            finish_reason,
            usage: self.usage.unwrap_or_default(),
            cost: None,
            model: self.model,
        })
    }
}

/// Parses an SSE body and assembles the chat completion it streams, passing each piece to
/// `on_delta` as it arrives.
///
/// `body` yields chunks of bytes split anywhere; a transport failure is passed through
/// unchanged. See [`SseAssembler`] for what is accepted; an `event: error` also fails the
/// call.
pub async fn assemble_stream<S, B>(
    body: S,
    mut on_delta: impl FnMut(Delta),
) -> Result<Response, ProviderError>
where
    S: Stream<Item = Result<B, ProviderError>>,
    B: Buf,
{
    let mut assembler = SseAssembler::new();
    drive(&mut assembler, body, &mut on_delta).await?;
    assembler.finish()
}

/// [`assemble_stream`] over chunks already in memory, such as a recorded stream.
///
/// ```
/// use agent_provider::openai::assemble_bytes;
///
/// let recorded = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// let (head, tail) = recorded.split_at(17); // any split point gives the same reply
/// let response = assemble_bytes([head, tail], |_| {})?;
/// assert_eq!(response.content, "Hi");
/// # Ok::<(), agent_op::ProviderError>(())
/// ```
pub fn assemble_bytes<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    on_delta: impl FnMut(Delta),
) -> Result<Response, ProviderError> {
    crate::assemble::in_memory(assemble_stream(crate::assemble::body(chunks), on_delta))
}

/// Feeds every event of `body` to `assembler`, stopping after `[DONE]`.
///
/// At the end of the body, a final event without the blank line that should end it is taken
/// only if it is complete: `data: [DONE]`, or data that is a whole JSON document. Anything
/// else there was cut short, and is left out (so the stream is incomplete).
pub(crate) async fn drive<S, B, F>(
    assembler: &mut SseAssembler,
    body: S,
    on_delta: &mut F,
) -> Result<(), ProviderError>
where
    S: Stream<Item = Result<B, ProviderError>>,
    B: Buf,
    F: FnMut(Delta) + ?Sized,
{
    // The SSE parser drops an unterminated final event; ending the body with a blank line
    // makes it come out, marked as having arrived at the end so it can be checked.
    let ended = AtomicBool::new(false);
    let body = body
        .map(|chunk| chunk.map(Piece::Body))
        .chain(futures_util::stream::once(futures_util::future::lazy(
            |_| {
                ended.store(true, Ordering::Relaxed);
                Ok(Piece::End(b"\n\n"))
            },
        )));
    let mut events = pin!(SseByteStream::new(body));
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| sse_failure(e, &assembler.redactor))?;
        let Some(data) = event.data else {
            continue;
        };
        if ended.load(Ordering::Relaxed)
            && data.trim() != "[DONE]"
            && serde_json::from_str::<serde::de::IgnoredAny>(&data).is_err()
        {
            // Cut short: `finish` reports the stream as incomplete.
            break;
        }
        if event.event.as_deref() == Some("error") {
            let value = serde_json::from_str(&data).unwrap_or(Value::String(data.clone()));
            return Err(error::from_stream_error(&value, &data, &assembler.redactor));
        }
        assembler.push_data(&data, &mut |d| on_delta(d))?;
        if assembler.is_done() {
            break;
        }
    }
    Ok(())
}

/// A piece of a body: one of its chunks, or the bytes added at its end.
enum Piece<B> {
    Body(B),
    End(&'static [u8]),
}

impl<B: Buf> Buf for Piece<B> {
    fn remaining(&self) -> usize {
        match self {
            Piece::Body(b) => b.remaining(),
            Piece::End(bytes) => bytes.len(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Piece::Body(b) => b.chunk(),
            Piece::End(bytes) => bytes,
        }
    }

    fn advance(&mut self, cnt: usize) {
        match self {
            Piece::Body(b) => b.advance(cnt),
            Piece::End(bytes) => *bytes = bytes.get(cnt..).unwrap_or_default(),
        }
    }
}

fn sse_failure(err: sse_stream::Error, redactor: &Redactor) -> ProviderError {
    match err {
        sse_stream::Error::Body(source) => match source.downcast::<ProviderError>() {
            Ok(err) => *err,
            Err(other) => ProviderError::transport(redactor.redact(&error::chain(other.as_ref()))),
        },
        other => ProviderError::decode(
            redactor.redact(&format!("invalid event stream: {}", error::chain(&other))),
            "",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use serde_json::json;

    fn push_all(data: &[&str]) -> (Result<Response, ProviderError>, Vec<Delta>) {
        let mut assembler = SseAssembler::new();
        let mut deltas = Vec::new();
        for d in data {
            if let Err(e) = assembler.push_data(d, &mut |x| deltas.push(x)) {
                return (Err(e), deltas);
            }
        }
        (assembler.finish(), deltas)
    }

    #[test]
    fn tool_calls_without_index_match_by_id_or_continue() {
        let (response, _) = push_all(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":{"y":2}}}]}}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0].arguments, json!({"x": 1}));
        assert_eq!(response.tool_calls[1].arguments, json!({"y": 2}));
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn odd_indices_map_to_positions_in_order_of_arrival() {
        let (response, deltas) = push_all(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":7,"id":"a","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":7,"function":{"arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(response.tool_calls[0].id, "a");
        assert_eq!(response.tool_calls[1].id, "b");
        assert!(deltas.contains(&Delta::ToolCallArguments {
            index: 0,
            fragment: "{}".into()
        }));
    }

    #[test]
    fn repeated_names_and_ids_are_not_duplicated() {
        // A name in pieces.
        let (response, deltas) = push_all(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"get_","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"weather","arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        assert_eq!(response.unwrap().tool_calls[0].name, "get_weather");
        let headers = deltas
            .iter()
            .filter(|d| matches!(d, Delta::ToolCall { .. }))
            .count();
        assert_eq!(headers, 2);
        // The whole name (and id) repeated in every fragment.
        let (response, deltas) = push_all(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"get_weather","arguments":"{\"city\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"get_weather","arguments":"\"Oslo\"}"}}]}}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].name, "get_weather");
        assert_eq!(response.tool_calls[0].arguments, json!({"city": "Oslo"}));
        let headers = deltas
            .iter()
            .filter(|d| matches!(d, Delta::ToolCall { .. }))
            .count();
        assert_eq!(headers, 1);
    }

    #[test]
    fn a_name_piece_equal_to_the_end_of_the_name_is_kept() {
        for pieces in [["list_tre", "e"], ["a", "a"]] {
            let (response, _) = push_all(&[
                &format!(
                    r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":0,"id":"c","function":{{"name":"{}","arguments":""}}}}]}}}}]}}"#,
                    pieces[0]
                ),
                &format!(
                    r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":0,"function":{{"name":"{}","arguments":"{{}}"}}}}]}}}}]}}"#,
                    pieces[1]
                ),
                "[DONE]",
            ]);
            let name = &response.unwrap().tool_calls[0].name;
            if pieces == ["a", "a"] {
                // Equal to the whole name so far: indistinguishable from a repetition.
                assert_eq!(name, "a");
            } else {
                assert_eq!(name, "list_tree");
            }
        }
    }

    #[test]
    fn parallel_calls_at_the_same_index_are_told_apart_by_id() {
        // Ollama's /v1: every call whole, all with index 0.
        let (response, deltas) = push_all(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.txt\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"b.txt\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(response.tool_calls.len(), 2, "{response:?}");
        assert_eq!(response.tool_calls[0].id, "call_a");
        assert_eq!(response.tool_calls[0].name, "read_file");
        assert_eq!(response.tool_calls[0].arguments, json!({"path": "a.txt"}));
        assert_eq!(response.tool_calls[1].id, "call_b");
        assert_eq!(response.tool_calls[1].name, "write_file");
        assert_eq!(response.tool_calls[1].arguments, json!({"path": "b.txt"}));
        assert!(deltas.contains(&Delta::ToolCall {
            index: 1,
            id: Some("call_b".into()),
            name: Some("write_file".into()),
        }));

        // OpenAI: the id only on the first fragment of each call, then arguments by index.
        let (response, _) = push_all(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.txt\"}"}}]}}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].id, "call_a");
        assert_eq!(response.tool_calls[0].arguments, json!({"path": "a.txt"}));

        // Same index, an id arriving only after the first fragment: still one call.
        let (response, _) = push_all(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"late","function":{"arguments":"}"}}]}}]}"#,
            "[DONE]",
        ]);
        let response = response.unwrap();
        assert_eq!(response.tool_calls.len(), 1);
        assert_eq!(response.tool_calls[0].id, "late");
    }

    #[test]
    fn a_final_done_without_its_blank_line_completes_the_stream() {
        let body = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]";
        for end in ["", "\n", "\r\n", "\r"] {
            let text = format!("{body}{end}");
            let r = assemble_bytes([text.as_bytes()], |_| {});
            assert_eq!(r.unwrap().content, "hi", "ending {end:?}");
        }
        // Cut inside `[DONE]`, or inside a chunk: incomplete.
        for cut in [
            "data: [DON",
            "data: {\"choices\":[{\"delta\":{\"content\":\"x",
        ] {
            let text = format!("data: {{\"choices\":[]}}\n\n{cut}");
            let err = assemble_bytes([text.as_bytes()], |_| {}).unwrap_err();
            assert!(
                matches!(err, ProviderError::Transport { .. }),
                "{cut}: {err:?}"
            );
        }
        // A whole error chunk at the end still fails with its error.
        let err = assemble_bytes(
            [
                b"data: {\"error\":{\"message\":\"slow\",\"code\":\"rate_limit_exceeded\"}}"
                    .as_slice(),
            ],
            |_| {},
        )
        .unwrap_err();
        assert!(matches!(err, ProviderError::RateLimited { .. }), "{err:?}");
    }

    #[test]
    fn completion_rules() {
        let (r, _) = push_all(&[r#"{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}"#]);
        assert!(matches!(r, Err(ProviderError::Transport { .. })));
        let (r, _) = push_all(&[
            r#"{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}"#,
            "[DONE]",
            "garbage after done",
        ]);
        assert_eq!(r.unwrap().finish_reason, FinishReason::Stop);
        let (r, _) = push_all(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
            "[DONE]",
        ]);
        assert!(
            matches!(r, Err(ProviderError::Decode { .. })),
            "a call without a name"
        );
        let (r, _) = push_all(&[r#"{"choices":[{"delta":{"content":1}}]}"#]);
        assert!(matches!(r, Err(ProviderError::Decode { .. })));
        let (r, _) =
            push_all(&[r#"{"error":{"message":"overloaded","type":"server_error","code":503}}"#]);
        assert!(matches!(
            r,
            Err(ProviderError::Refused {
                retryable: true,
                ..
            })
        ));
        let (r, _) = push_all(&[
            r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#,
        ]);
        let err = r.unwrap_err();
        assert!(
            matches!(
                err,
                ProviderError::Refused {
                    retryable: true,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_retryable());
        let (r, _) = push_all(&[
            r#"{"choices":null,"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            "[DONE]",
        ]);
        assert_eq!(r.unwrap().usage.total(), 7);
        let (r, _) = push_all(&[
            r#"{"choices":[{"index":1,"delta":{"content":"other choice"}}]}"#,
            "[DONE]",
        ]);
        assert_eq!(r.unwrap().content, "");
    }

    #[test]
    fn refusals_are_content() {
        let (r, deltas) = push_all(&[
            r#"{"choices":[{"delta":{"content":null,"refusal":"I can't"}}]}"#,
            "[DONE]",
        ]);
        assert_eq!(r.unwrap().content, "I can't");
        assert_eq!(deltas, [Delta::Text("I can't".into())]);
    }

    #[test]
    fn sse_framing_variants() {
        let body: &[u8] = b": keep-alive\r\n\r\nevent: message\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata:{\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n";
        let r = assemble_bytes([body], |_| {}).unwrap();
        assert_eq!(r.content, "ab");
        let err = assemble_bytes(
            [b"event: error\ndata: {\"error\":{\"message\":\"boom\",\"code\":\"rate_limit_exceeded\"}}\n\n".as_slice()],
            |_| {},
        )
        .unwrap_err();
        assert!(matches!(err, ProviderError::RateLimited { .. }), "{err:?}");
        let err = assemble_bytes([b"data: \xff\xfe\n\n".as_slice()], |_| {}).unwrap_err();
        assert!(matches!(err, ProviderError::Decode { .. }), "{err:?}");
    }

    #[test]
    fn transport_failures_pass_through() {
        let body = futures_util::stream::iter([
            Ok(&b"data: {\"choices\":[]}\n\n"[..]),
            Err(ProviderError::Timeout {
                after: std::time::Duration::from_secs(1),
            }),
        ]);
        let err = assemble_stream(body, |_| {})
            .now_or_never()
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
    }
}
