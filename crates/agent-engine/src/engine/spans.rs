//! `tracing` spans for a run, named and attributed per the OpenTelemetry GenAI semantic
//! conventions, so any `tracing` subscriber (and, through `tracing-opentelemetry`, any OTLP
//! backend) sees the run as it happened.
//!
//! Every span is created with an explicit parent (the enclosing scope's span, the branch's,
//! or the run's), never from the thread's current span: branches run interleaved on one
//! task under the parallel interpreter, so "current" would be whichever ran last. Work done
//! inside a model or tool call (a provider's HTTP client, a tool's own spans) is
//! instrumented with the call's span, so it nests under it.
//!
//! With no subscriber at all, a constructor returns `Span::none()` after one check of the
//! global level filter, without running the span macro: with `tracing`'s `log` feature on
//! (sqlx turns it on in any build that has SQLite), a disabled span built by the macro still
//! carries its metadata, and its creation, every enter and exit of a call instrumented with
//! it and its drop each go to `log`. With a subscriber, each macro is one cached interest
//! check; every field whose value costs anything is recorded only on enabled spans.
//!
//! The structure of a run (`par` / `race` forks, their branches, `limit`, `timeout` and
//! `with_tools` scopes) is at `DEBUG` level; runs, sub-agents, model and tool calls and
//! memory operations at `INFO`. A subscriber at `INFO` (the OTLP exporter's default) sees
//! agent → model / tool nesting without the scaffolding: a span whose parent is filtered out
//! nests under the nearest enclosing span that is recorded.
//!
//! Each span carries the JSONL trace's view of what it covers: `effect_agents.trace_id` (the
//! branch's trace id) and `effect_agents.event.first` / `.last`, the sequence numbers within
//! that branch of the first and last event it covers.

use agent_op::{Message, ProviderError, Response, ToolError, TraceId};
use serde_json::{Value, json};
use tracing::field::Empty;
use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
use tracing::{Level, Span};

/// The `tracing` target of every span the interpreters create.
pub const TARGET: &str = "effect_agents";

/// The run's root span: `invoke_agent {name}`.
pub(crate) fn run(trace_id: &TraceId, agent: Option<&str>) -> Span {
    if unwanted(Level::INFO) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = Empty,
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        effect_agents.trace_id = %trace_id,
        effect_agents.event.first = Empty,
        effect_agents.event.last = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        effect_agents.cost.usd = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
        otel.status_description = Empty,
    );
    if let Some(name) = agent {
        display_name(&span, || format!("invoke_agent {name}"));
    }
    span
}

/// What the run was asked (`Config::goal`), on its span as a user message.
pub(crate) fn run_goal(span: &Span, goal: &str) {
    if span.is_disabled() {
        return;
    }
    let message = json!({"role": "user", "parts": [{"type": "text", "content": goal}]});
    span.record(
        "gen_ai.input.messages",
        Value::from(vec![message]).to_string(),
    );
}

/// How the run ended, on its span: what all its model calls used (tokens, and the cost when
/// every call's is known, as `effect_agents.cost.usd`), its error's message, and its whole
/// `answer` (given when content is exported) as `gen_ai.output.messages`: an output message,
/// which the conventions require to carry a `finish_reason` (receivers such as Phoenix drop
/// output messages without one).
pub(crate) fn run_ended(span: &Span, ended: &agent_op::RunEnd, answer: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    let (kept, lost) = (&ended.spent, &ended.discarded);
    span.record(
        "gen_ai.usage.input_tokens",
        int(kept.input_tokens.saturating_add(lost.input_tokens)),
    );
    span.record(
        "gen_ai.usage.output_tokens",
        int(kept.output_tokens.saturating_add(lost.output_tokens)),
    );
    if let (Some(a), Some(b)) = (kept.cost, lost.cost) {
        span.record("effect_agents.cost.usd", a.saturating_add(b).0 as f64 / 1e6);
    }
    if let Some(error) = &ended.error {
        span.record("otel.status_description", error.message.as_str());
    }
    if let Some(answer) = answer {
        let message = json!({
            "role": "assistant",
            "parts": [{"type": "text", "content": answer}],
            "finish_reason": "stop",
        });
        span.record(
            "gen_ai.output.messages",
            Value::from(vec![message]).to_string(),
        );
    }
}

/// A `par` or `race` whose `fork` event is number `event` of its branch.
pub(crate) fn fork(parent: &Span, race: bool, branches: usize, event: u64) -> Span {
    if unwanted(Level::DEBUG) {
        return Span::none();
    }
    let name = if race { "race" } else { "par" };
    tracing::debug_span!(
        target: TARGET,
        parent: parent,
        "fork",
        otel.name = name,
        effect_agents.fork.kind = name,
        effect_agents.fork.branches = int(branches as u64),
        effect_agents.event.first = int(event),
        effect_agents.event.last = Empty,
        effect_agents.fork.winner = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// Branch `index` of a fork, with its own trace id.
pub(crate) fn branch(fork: &Span, id: &TraceId, index: usize) -> Span {
    if unwanted(Level::DEBUG) {
        return Span::none();
    }
    tracing::debug_span!(
        target: TARGET,
        parent: fork,
        "branch",
        effect_agents.trace_id = %id,
        effect_agents.branch.index = int(index as u64),
        effect_agents.event.first = Empty,
        effect_agents.event.last = Empty,
        effect_agents.cancelled = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// A `limit`, `timeout` or `with_tools` scope; `event` is the number of the event that opens
/// it, for the scopes one does.
pub(crate) fn scope(parent: &Span, kind: &'static str, event: Option<u64>) -> Span {
    if unwanted(Level::DEBUG) {
        return Span::none();
    }
    tracing::debug_span!(
        target: TARGET,
        parent: parent,
        "scope",
        otel.name = kind,
        effect_agents.scope.kind = kind,
        effect_agents.event.first = event.map(int),
        effect_agents.scope.ended = Empty,
        error.type = Empty,
        otel.status_code = Empty,
    )
}

/// A scope ended before its body did (`exhausted`, `timed_out`).
pub(crate) fn ended_early(span: &Span, how: &str) {
    span.record("effect_agents.scope.ended", how);
}

/// A sub-agent's run: `invoke_agent {name}`, inside `execute_tool {name}` (returned first,
/// to be kept open as long as the agent's span) when it answers a model's tool call. No
/// event opens either, so they claim none.
pub(crate) fn agent(parent: &Span, name: &str, call_id: Option<&str>) -> (Option<Span>, Span) {
    if unwanted(Level::INFO) {
        return (None, Span::none());
    }
    let outer = call_id.map(|id| tool(parent, name, Some(id), None));
    let span = tracing::info_span!(
        target: TARGET,
        parent: outer.as_ref().unwrap_or(parent),
        "invoke_agent",
        otel.name = Empty,
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = name,
        error.type = Empty,
    );
    display_name(&span, || format!("invoke_agent {name}"));
    (outer, span)
}

/// A model call: `chat {model}`.
pub(crate) fn chat(parent: &Span, provider: &str, model: &str, event: u64) -> Span {
    if unwanted(Level::INFO) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        parent: parent,
        "chat",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.system_instructions = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        effect_agents.cost.usd = Empty,
        effect_agents.event.first = int(event),
        effect_agents.event.last = Empty,
        error.type = Empty,
        otel.status_description = Empty,
    );
    display_name(&span, || format!("chat {model}"));
    span
}

/// What a model call returned.
pub(crate) fn chat_ended(span: &Span, response: &Response, content: bool) {
    if span.is_disabled() {
        return;
    }
    if let Some(model) = &response.model {
        span.record("gen_ai.response.model", model.as_str());
    }
    let reason = match &response.finish_reason {
        agent_op::FinishReason::Stop => "stop",
        agent_op::FinishReason::Length => "length",
        agent_op::FinishReason::ToolCalls => "tool_calls",
        agent_op::FinishReason::ContentFilter => "content_filter",
        agent_op::FinishReason::Other(other) => other.as_str(),
        _ => "other",
    };
    // `tracing` fields hold no arrays: the conventions' string array goes out as JSON, which
    // agent-otel exports as an OTLP string array.
    let reasons = serde_json::to_string(&[reason]).unwrap_or_default();
    span.record("gen_ai.response.finish_reasons", reasons);
    span.record(
        "gen_ai.usage.input_tokens",
        int(response.usage.input_tokens),
    );
    span.record(
        "gen_ai.usage.output_tokens",
        int(response.usage.output_tokens),
    );
    if let Some(cost) = response.cost {
        span.record("effect_agents.cost.usd", cost.0 as f64 / 1e6);
    }
    if content {
        let mut message = genai_message(&response.to_message());
        message["finish_reason"] = Value::from(reason);
        span.record(
            "gen_ai.output.messages",
            Value::from(vec![message]).to_string(),
        );
    }
}

/// A message as the GenAI semantic conventions record it (`gen_ai.input.messages`,
/// `gen_ai.output.messages`): its role and its parts, each typed (`text`, `tool_call`,
/// `tool_call_response`). Phoenix, Langfuse and other receivers read this shape.
pub(crate) fn genai_message(message: &Message) -> Value {
    let text = |content: &str| json!({"type": "text", "content": content});
    let (role, parts) = match message {
        Message::System { content } => ("system", vec![text(content)]),
        Message::User {
            content,
            attachments,
        } => {
            let mut parts = vec![text(content)];
            parts.extend(attachments.iter().map(attachment_part));
            ("user", parts)
        }
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut parts = Vec::with_capacity(tool_calls.len() + 1);
            if !content.is_empty() || tool_calls.is_empty() {
                parts.push(text(content));
            }
            parts.extend(tool_calls.iter().map(|call| {
                json!({
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                })
            }));
            ("assistant", parts)
        }
        Message::Tool {
            tool_call_id,
            content,
            attachments,
        } => {
            let mut parts = vec![
                json!({"type": "tool_call_response", "id": tool_call_id, "response": content}),
            ];
            parts.extend(attachments.iter().map(attachment_part));
            ("tool", parts)
        }
        // A kind of message added later: its text, under its own role.
        other => (other.role(), vec![text(other.content())]),
    };
    json!({"role": role, "parts": parts})
}

/// An image as the conventions' blob part, with its bytes when small enough for a trace to
/// keep them; a larger one as a text part naming it (spans travel in size-limited batches).
fn attachment_part(attachment: &agent_op::Attachment) -> Value {
    let Some(image) = attachment.as_image() else {
        return json!({"type": "text", "content": "[an attachment]"});
    };
    match image.base64() {
        Some(data) if image.size() as usize <= agent_op::attachment::TRACE_IMAGE_BYTES => json!({
            "type": "blob",
            "modality": "image",
            "mime_type": image.media_type(),
            "content": data,
        }),
        _ => json!({
            "type": "text",
            "content": format!(
                "[image {} · {} bytes · sha256:{}]",
                image.media_type(),
                image.size(),
                image.sha256()
            ),
        }),
    }
}

/// The prompt's messages, recorded only when the run opted in to message contents.
pub(crate) fn chat_input(span: &Span, prompt: &agent_op::Prompt) {
    if span.is_disabled() {
        return;
    }
    // The leading system messages are the instructions: recorded as the conventions'
    // system instructions (text parts), not again among the messages (receivers such as
    // Phoenix show both, so the prompt would appear twice). A system message later in the
    // conversation stays where it was.
    let leading = prompt
        .messages
        .iter()
        .take_while(|m| matches!(m, Message::System { .. }))
        .count();
    if leading > 0 {
        let instructions: Vec<Value> = prompt
            .messages
            .iter()
            .take(leading)
            .map(|m| json!({"type": "text", "content": m.content()}))
            .collect();
        span.record(
            "gen_ai.system_instructions",
            Value::from(instructions).to_string(),
        );
    }
    let messages: Vec<Value> = prompt
        .messages
        .iter()
        .skip(leading)
        .map(genai_message)
        .collect();
    span.record("gen_ai.input.messages", Value::from(messages).to_string());
}

/// A model call failed.
pub(crate) fn chat_failed(span: &Span, error: &ProviderError) {
    failed_with(span, error.kind_name(), &error.to_string());
}

/// A tool call: `execute_tool {name}`.
pub(crate) fn tool(parent: &Span, name: &str, call_id: Option<&str>, event: Option<u64>) -> Span {
    if unwanted(Level::INFO) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        parent: parent,
        "execute_tool",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        effect_agents.event.first = event.map(int),
        effect_agents.event.last = Empty,
        error.type = Empty,
        otel.status_description = Empty,
    );
    display_name(&span, || format!("execute_tool {name}"));
    span
}

/// What a tool call returned; its arguments and result only when the run opted in.
pub(crate) fn tool_ended(
    span: &Span,
    args: Option<&serde_json::Value>,
    result: &Result<serde_json::Value, ToolError>,
    content: bool,
) {
    if span.is_disabled() {
        return;
    }
    if content {
        if let Some(args) = args {
            span.record("gen_ai.tool.call.arguments", args.to_string());
        }
        if let Ok(value) = result {
            span.record("gen_ai.tool.call.result", value.to_string());
        }
    }
    if let Err(error) = result {
        failed_with(span, error.kind.as_str(), &error.message);
    }
}

/// A memory operation (`remember`, `recall`, `forget`).
pub(crate) fn memory(parent: &Span, operation: &'static str, event: u64) -> Span {
    if unwanted(Level::INFO) {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "memory",
        otel.name = operation,
        otel.status_code = Empty,
        effect_agents.memory.operation = operation,
        effect_agents.memory.results = Empty,
        effect_agents.event.first = int(event),
        effect_agents.event.last = Empty,
        error.type = Empty,
    )
}

/// A checkpoint, as an instant span.
pub(crate) fn checkpoint(parent: &Span, name: &str, event: u64) -> Span {
    if unwanted(Level::INFO) {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        parent: parent,
        "checkpoint",
        effect_agents.checkpoint.name = name,
        effect_agents.event.first = int(event),
        effect_agents.event.last = int(event),
    )
}

/// The span new spans nest under inside `own` (a scope's or branch's span) whose enclosing
/// span is `enclosing` (already the nearest recorded one): `own` when a subscriber records
/// it, else `enclosing`. Kept per scope and branch, so finding a parent costs the same at
/// any depth.
pub(crate) fn nest(own: &Span, enclosing: &Span) -> Span {
    if own.is_disabled() {
        enclosing.clone()
    } else {
        own.clone()
    }
}

/// Whether no subscriber can want a span at `level`: the span macros' own first check, made
/// before the macro so that with no subscriber nothing is built (see the module's docs).
fn unwanted(level: Level) -> bool {
    level > STATIC_MAX_LEVEL || level > LevelFilter::current()
}

/// Sets `span`'s display name (`otel.name`), formatting it only for a span someone records.
fn display_name(span: &Span, name: impl FnOnce() -> String) {
    if !span.is_disabled() {
        span.record("otel.name", name());
    }
}

/// Marks `span` failed with `error_type` (a short, low-cardinality name).
pub(crate) fn failed(span: &Span, error_type: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", error_type);
    span.record("otel.status_code", "ERROR");
}

/// Marks `span` failed with `error_type`, and `message` as its status description (what a
/// receiver shows as the error). Only spans that declare `otel.status_description` show it.
pub(crate) fn failed_with(span: &Span, error_type: &str, message: &str) {
    if span.is_disabled() {
        return;
    }
    failed(span, error_type);
    span.record("otel.status_description", message);
}

/// Records the last event `span` covers.
pub(crate) fn last_event(span: &Span, event: u64) {
    // Recording looks the field up by name even on a disabled span: skipped per event of
    // every branch when no subscriber listens.
    if span.is_disabled() {
        return;
    }
    span.record("effect_agents.event.last", int(event));
}

/// Records the events `span` covers, `first` to `last`.
pub(crate) fn covers(span: &Span, first: u64, last: u64) {
    if span.is_disabled() {
        return;
    }
    span.record("effect_agents.event.first", int(first));
    span.record("effect_agents.event.last", int(last));
}

/// Records which branch of a `race` won.
pub(crate) fn winner(span: &Span, index: usize) {
    if span.is_disabled() {
        return;
    }
    span.record("effect_agents.fork.winner", int(index as u64));
}

/// Counts go out as signed integers: OpenTelemetry has no unsigned type, and the bridge
/// turns a `u64` into a string.
pub(crate) fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use agent_op::{Attachment, Image, Message, ToolCall};
    use serde_json::json;

    use super::genai_message;

    /// The parts of a tool-calling conversation, in the shape the conventions define (and
    /// Phoenix's converter turns into its `tool_calls` and `tool_call_id` attributes).
    #[test]
    fn tool_calls_their_answers_and_images_are_typed_parts() {
        let asked = Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "weather".into(),
                arguments: json!({"city": "Oslo"}),
            }],
        };
        assert_eq!(
            genai_message(&asked),
            json!({"role": "assistant", "parts": [
                {"type": "tool_call", "id": "call_1", "name": "weather", "arguments": {"city": "Oslo"}},
            ]})
        );
        let said_and_asked = Message::Assistant {
            content: "Let me look.".into(),
            tool_calls: vec![ToolCall {
                id: "call_2".into(),
                name: "weather".into(),
                arguments: json!({}),
            }],
        };
        assert_eq!(
            genai_message(&said_and_asked)["parts"][0],
            json!({"type": "text", "content": "Let me look."})
        );
        assert_eq!(
            genai_message(&Message::tool_result("call_1", "sunny")),
            json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "call_1", "response": "sunny"},
            ]})
        );
        let pixel = Image::new("image/png", vec![1u8, 2, 3]);
        let with_image = Message::user("What is this?").with_attachment(Attachment::Image(pixel));
        assert_eq!(
            genai_message(&with_image),
            json!({"role": "user", "parts": [
                {"type": "text", "content": "What is this?"},
                {"type": "blob", "modality": "image", "mime_type": "image/png", "content": "AQID"},
            ]})
        );
        // Too large to travel on a span: named by its hash instead.
        let large = Image::new(
            "image/jpeg",
            vec![0u8; agent_op::attachment::TRACE_IMAGE_BYTES + 1],
        );
        let large_sha = large.sha256().to_owned();
        let part = &genai_message(
            &Message::user("and this?").with_attachment(Attachment::Image(large)),
        )["parts"][1];
        assert_eq!(part["type"], "text");
        assert!(
            part["content"].as_str().unwrap().contains(&large_sha),
            "{part}"
        );
    }
}
