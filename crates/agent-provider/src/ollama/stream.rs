//! Streamed `/api/chat` replies: newline-delimited JSON objects, assembled into one
//! [`Response`] while their pieces are passed on as [`Delta`]s.
//!
//! Each line is a chat object whose `message.content` continues the reply and whose
//! `message.tool_calls` (whole calls, arguments as a JSON object) are appended to it; the
//! line with `"done": true` carries `done_reason`, the token counts (`prompt_eval_count`,
//! `eval_count`) and the durations (nanoseconds). A line `{"error": "..."}` fails the call.
//!
//! [`NdjsonAssembler::push_bytes`] takes bytes split at any point. A stream is complete only
//! once the `done` line arrived: a body that ends before is an error
//! ([`ProviderError::Transport`]), never a partial success. A final line without its newline
//! counts if it is a whole JSON object; a line cut short does not.

use std::time::Duration;

use agent_op::{Delta, ProviderError, Response, ToolCall, Usage};
use bytes::Buf;
use futures_util::{Stream, StreamExt};
use serde_json::json;

use super::wire::ChatChunk;
use crate::error;
use crate::json::{arguments_text, arguments_value};
use crate::reply;
use crate::secret::Redactor;

/// The time Ollama reports it spent on a call, from its final chat object.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OllamaTimings {
    /// The whole call (`total_duration`).
    pub total: Option<Duration>,
    /// Loading the model (`load_duration`).
    pub load: Option<Duration>,
    /// Evaluating the prompt (`prompt_eval_duration`).
    pub prompt_eval: Option<Duration>,
    /// Generating the reply (`eval_duration`).
    pub eval: Option<Duration>,
}

/// Assembles Ollama's `/api/chat` objects, streamed as NDJSON or whole, into a [`Response`].
///
/// Each object's `message.content` continues the reply and its `message.tool_calls` (whole
/// calls, arguments as a JSON object or a JSON string) are appended, with ids `call_<n>` when
/// Ollama gives none; the object with `"done": true` carries `done_reason`, the token counts
/// (`prompt_eval_count`, `eval_count`; a missing count is zero, as Ollama omits zeros) and the
/// durations. An object `{"error": "..."}` fails the call. The reply is complete only once the
/// `done` object arrived; [`NdjsonAssembler::finish`] fails otherwise
/// ([`ProviderError::Transport`]).
///
/// ```
/// use agent_op::Delta;
/// use agent_provider::ollama::NdjsonAssembler;
///
/// let stream = concat!(
///     r#"{"message":{"role":"assistant","content":"Hel"},"done":false}"#, "\n",
///     r#"{"message":{"role":"assistant","content":"lo"},"done":false}"#, "\n",
///     r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":4,"eval_count":2,"eval_duration":1000}"#, "\n",
/// );
/// let mut assembler = NdjsonAssembler::new();
/// let mut deltas = Vec::new();
/// let (a, b) = stream.as_bytes().split_at(30); // any split point works
/// assembler.push_bytes(a, &mut |d| deltas.push(d))?;
/// assembler.push_bytes(b, &mut |d| deltas.push(d))?;
/// assert_eq!(assembler.timings().eval, Some(std::time::Duration::from_micros(1)));
/// let response = assembler.finish()?;
/// assert_eq!(response.content, "Hello");
/// assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (4, 2));
/// assert_eq!(deltas, [Delta::Text("Hel".into()), Delta::Text("lo".into())]);
/// # Ok::<(), agent_op::ProviderError>(())
/// ```
#[derive(Debug, Default)]
pub struct NdjsonAssembler {
    /// The start of a line whose end has not arrived yet.
    partial_line: Vec<u8>,
    content: String,
    calls: Vec<ToolCall>,
    done: Option<Done>,
    model: Option<String>,
    redactor: Redactor,
}

#[derive(Debug)]
struct Done {
    reason: Option<String>,
    usage: Usage,
    timings: OllamaTimings,
}

impl NdjsonAssembler {
    /// An assembler with nothing received yet.
    pub fn new() -> NdjsonAssembler {
        NdjsonAssembler::default()
    }

    pub(crate) fn with_redactor(redactor: Redactor) -> NdjsonAssembler {
        NdjsonAssembler {
            redactor,
            ..NdjsonAssembler::default()
        }
    }

    /// Whether the final (`"done": true`) object arrived.
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// The token usage, once the final object arrived.
    pub fn usage(&self) -> Option<Usage> {
        self.done.as_ref().map(|d| d.usage)
    }

    /// The durations Ollama reported (all `None` until the final object arrived).
    pub fn timings(&self) -> OllamaTimings {
        self.done.as_ref().map(|d| d.timings).unwrap_or_default()
    }

    /// Takes the next bytes of an NDJSON stream, split anywhere, passing what complete lines
    /// add to the reply to `on_delta`. Lines after the final object are ignored.
    pub fn push_bytes(
        &mut self,
        bytes: &[u8],
        on_delta: &mut dyn FnMut(Delta),
    ) -> Result<(), ProviderError> {
        let mut rest = bytes;
        if !self.partial_line.is_empty() {
            let Some(end) = memchr::memchr(b'\n', rest) else {
                self.partial_line.extend_from_slice(rest);
                return Ok(());
            };
            let mut line = std::mem::take(&mut self.partial_line);
            line.extend_from_slice(&rest[..end]);
            let pushed = self.push_line(&line, on_delta);
            // Keep the buffer's allocation for the next split line.
            line.clear();
            self.partial_line = line;
            pushed?;
            rest = &rest[end + 1..];
        }
        while let Some(end) = memchr::memchr(b'\n', rest) {
            self.push_line(&rest[..end], on_delta)?;
            rest = &rest[end + 1..];
        }
        self.partial_line.extend_from_slice(rest);
        Ok(())
    }

    /// Marks the end of the input. A final line without its newline is taken if it is a whole
    /// JSON object, passing what it adds to `on_delta`; a line cut short is left for
    /// [`NdjsonAssembler::finish`] to report. ([`NdjsonAssembler::finish`] does this too, but
    /// without a way to pass the line's deltas on.)
    pub fn push_end(&mut self, on_delta: &mut dyn FnMut(Delta)) -> Result<(), ProviderError> {
        if self.done.is_some() || self.partial_line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(&self.partial_line).is_err() {
            return Ok(());
        }
        let line = std::mem::take(&mut self.partial_line);
        self.push_line(&line, on_delta)
    }

    /// Takes one complete chat object (one NDJSON line, or a whole non-streamed reply).
    pub fn push_line(
        &mut self,
        line: &[u8],
        on_delta: &mut dyn FnMut(Delta),
    ) -> Result<(), ProviderError> {
        if self.done.is_some() || line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let chunk: ChatChunk = serde_json::from_slice(line)
            .map_err(|e| error::decode("chat object", line, e, &self.redactor))?;
        if let Some(err) = chunk.error {
            let raw = String::from_utf8_lossy(line);
            return Err(error::from_stream_error(
                &json!({ "error": err }),
                &raw,
                &self.redactor,
            ));
        }
        if let Some(model) = chunk.model.filter(|m| !m.is_empty()) {
            self.model = Some(model);
        }
        if let Some(message) = chunk.message {
            if !message.content.is_empty() {
                self.content.push_str(&message.content);
                on_delta(Delta::Text(message.content));
            }
            for call in message.tool_calls {
                let slot = self.calls.len();
                let index = u32::try_from(slot).unwrap_or(u32::MAX);
                let id = call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{slot}"));
                let arguments = arguments_value(call.function.arguments);
                on_delta(Delta::ToolCall {
                    index,
                    id: Some(id.clone()),
                    name: Some(call.function.name.clone()),
                });
                on_delta(Delta::ToolCallArguments {
                    index,
                    fragment: arguments_text(&arguments),
                });
                self.calls.push(ToolCall {
                    id,
                    name: call.function.name,
                    arguments,
                });
            }
        }
        if chunk.done {
            let ns = |n: Option<u64>| n.map(Duration::from_nanos);
            self.done = Some(Done {
                reason: chunk.done_reason,
                // Ollama omits counts that are zero (a cached prompt has no eval count).
                usage: Usage {
                    input_tokens: chunk.prompt_eval_count.unwrap_or(0),
                    output_tokens: chunk.eval_count.unwrap_or(0),
                },
                timings: OllamaTimings {
                    total: ns(chunk.total_duration),
                    load: ns(chunk.load_duration),
                    prompt_eval: ns(chunk.prompt_eval_duration),
                    eval: ns(chunk.eval_duration),
                },
            });
        }
        Ok(())
    }

    /// The assembled reply. Fails if the final object never arrived, or if the stream ended
    /// in the middle of a line.
    pub fn finish(mut self) -> Result<Response, ProviderError> {
        self.push_end(&mut |_| {})?;
        let Some(done) = self.done else {
            let cut = if self.partial_line.iter().all(u8::is_ascii_whitespace) {
                ""
            } else {
                " in the middle of a line"
            };
            return Err(ProviderError::transport(format!(
                "the stream ended{cut} before the reply was complete (no object with \"done\": true)"
            )));
        };
        let finish_reason = reply::finish_reason(
            reply::parse_finish_reason(done.reason.as_deref()),
            !self.calls.is_empty(),
        );
        Ok(Response {
            content: self.content,
            tool_calls: self.calls,
            finish_reason,
            usage: done.usage,
            cost: None,
            model: self.model,
        })
    }
}

/// Assembles an NDJSON `/api/chat` stream, passing each piece to `on_delta` as it arrives.
/// A transport failure in `body` is passed through unchanged.
pub async fn assemble_stream<S, B>(
    body: S,
    mut on_delta: impl FnMut(Delta),
) -> Result<Response, ProviderError>
where
    S: Stream<Item = Result<B, ProviderError>>,
    B: Buf,
{
    let mut assembler = NdjsonAssembler::new();
    drive(&mut assembler, body, &mut on_delta).await?;
    assembler.finish()
}

/// [`assemble_stream`] over chunks already in memory, such as a recorded stream.
pub fn assemble_bytes<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    on_delta: impl FnMut(Delta),
) -> Result<Response, ProviderError> {
    crate::assemble::in_memory(assemble_stream(crate::assemble::body(chunks), on_delta))
}

/// Feeds `body` to `assembler` until the final object arrived or the body ends.
pub(crate) async fn drive<S, B, F>(
    assembler: &mut NdjsonAssembler,
    body: S,
    on_delta: &mut F,
) -> Result<(), ProviderError>
where
    S: Stream<Item = Result<B, ProviderError>>,
    B: Buf,
    F: FnMut(Delta) + ?Sized,
{
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let mut chunk = chunk?;
        while chunk.has_remaining() {
            let bytes = chunk.chunk();
            let n = bytes.len();
            assembler.push_bytes(bytes, &mut |d| on_delta(d))?;
            chunk.advance(n);
        }
        if assembler.is_done() {
            return Ok(());
        }
    }
    assembler.push_end(&mut |d| on_delta(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_op::FinishReason;

    fn assemble(text: &str) -> (Result<Response, ProviderError>, Vec<Delta>) {
        let mut deltas = Vec::new();
        let result = assemble_bytes([text.as_bytes()], |d| deltas.push(d));
        (result, deltas)
    }

    #[test]
    fn tool_calls_arrive_whole_and_get_ids() {
        let (r, deltas) = assemble(concat!(
            r#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"index":0,"name":"a","arguments":{"x":1}}},{"id":"given","function":{"index":1,"name":"b","arguments":"{\"y\":2}"}}]},"done":false}"#,
            "\n",
            r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}"#,
            "\n"
        ));
        let r = r.unwrap();
        assert_eq!(r.finish_reason, FinishReason::ToolCalls);
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.tool_calls[1].id, "given");
        assert_eq!(r.tool_calls[1].arguments, json!({"y": 2}));
        assert_eq!(
            deltas[1],
            Delta::ToolCallArguments {
                index: 0,
                fragment: "{\"x\":1}".into()
            }
        );
        assert_eq!(r.usage, Usage::default());
    }

    #[test]
    fn completion_rules() {
        let (r, _) = assemble("{\"message\":{\"content\":\"x\"},\"done\":false}\n");
        assert!(matches!(r, Err(ProviderError::Transport { .. })));
        let (r, _) = assemble("{\"message\":{\"content\":\"x\"},\"done\":false}\n{\"mess");
        let err = r.unwrap_err();
        assert!(err.to_string().contains("middle of a line"), "{err}");
        let (r, _) = assemble("{\"done\":true,\"done_reason\":\"length\"}\r\n\n{\"trailing\":1}\n");
        assert_eq!(r.unwrap().finish_reason, FinishReason::Length);
        let (r, _) = assemble("{\"done\":true,\"done_reason\":\"unload\"}\n");
        assert_eq!(
            r.unwrap().finish_reason,
            FinishReason::Other("unload".into())
        );
        let (r, _) = assemble("{\"error\":\"model 'x' not found\"}\n");
        assert!(matches!(
            r,
            Err(ProviderError::Refused {
                retryable: true,
                ..
            })
        ));
        let (r, _) = assemble("{\"error\":\"input length exceeds the context length\"}\n");
        assert!(matches!(
            r,
            Err(ProviderError::ContextLengthExceeded { .. })
        ));
        let (r, _) = assemble("not json\n");
        assert!(matches!(r, Err(ProviderError::Decode { .. })));
    }

    #[test]
    fn a_final_line_without_its_newline_counts_if_whole() {
        let stream = "{\"message\":{\"content\":\"a\"},\"done\":false}\n{\"message\":{\"content\":\"b\"},\"done\":true,\"eval_count\":2}";
        let (r, deltas) = assemble(stream);
        let r = r.unwrap();
        assert_eq!(r.content, "ab");
        assert_eq!(r.usage.output_tokens, 2);
        assert_eq!(deltas, [Delta::Text("a".into()), Delta::Text("b".into())]);
        // Without the last byte, the line was cut short.
        let (r, _) = assemble(&stream[..stream.len() - 1]);
        let err = r.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Transport { message, .. } if message.contains("middle of a line")),
            "{err:?}"
        );
        // An error line at the end, whole.
        let (r, _) = assemble("{\"error\":\"out of memory\"}");
        assert!(
            matches!(
                r,
                Err(ProviderError::Refused {
                    retryable: true,
                    ..
                })
            ),
            "{r:?}"
        );
        // By hand: `finish` takes the last line too.
        let mut assembler = NdjsonAssembler::new();
        assembler
            .push_bytes(b"{\"done\":true,\"done_reason\":\"stop\"}", &mut |_| {})
            .unwrap();
        assert!(!assembler.is_done());
        assert_eq!(
            assembler.finish().unwrap().finish_reason,
            FinishReason::Stop
        );
    }

    #[test]
    fn null_content_is_empty() {
        let (r, deltas) = assemble(
            "{\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":{}}}]},\"done\":true}\n",
        );
        let r = r.unwrap();
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls[0].name, "f");
        assert!(!deltas.iter().any(|d| matches!(d, Delta::Text(_))));
    }
}
