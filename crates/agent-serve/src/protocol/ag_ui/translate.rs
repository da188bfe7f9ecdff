//! The run model's events as AG-UI events, in the order `@ag-ui/client` checks: the run
//! opened first, every text message and tool call opened before its content and closed
//! before the run's end, nothing after it.

use std::collections::{HashMap, VecDeque};

use serde_json::{Value, json};

use crate::runs::{Numbered, RunEvent, RunRecord, RunStatus, Spent};

/// One stream's translation: what it has opened and not closed, and the spend so far.
pub(super) struct Translate {
    thread_id: String,
    run_id: String,
    /// The run model's id for the run.
    ours: String,
    /// The text message being streamed, if one is open.
    text: Option<String>,
    /// How many text messages were opened.
    messages: u32,
    /// Tool calls started and not yet answered, by tool name, oldest first.
    calls: HashMap<String, VecDeque<String>>,
    /// How many tool calls were started.
    called: u32,
    spent: Spent,
}

impl Translate {
    pub(super) fn new(thread_id: &str, run_id: &str, record: &RunRecord) -> Translate {
        Translate {
            thread_id: thread_id.to_owned(),
            run_id: run_id.to_owned(),
            ours: record.id.clone(),
            text: None,
            messages: 0,
            calls: HashMap::new(),
            called: 0,
            spent: Spent::default(),
        }
    }

    /// `RUN_STARTED` and the state's snapshot: the run model's id for the run, its status and
    /// its spend (kept up to date by `STATE_DELTA`s). `resumed`: the stream of a run that
    /// goes on after an answer.
    pub(super) fn opening(&self, resumed: bool) -> Vec<Value> {
        vec![
            json!({
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "protocolVersion": super::PROTOCOL_VERSION,
            }),
            json!({
                "type": "STATE_SNAPSHOT",
                "snapshot": {
                    "runId": self.ours,
                    "status": RunStatus::Running.as_str(),
                    "resumed": resumed,
                    "spent": self.spent,
                },
            }),
        ]
    }

    /// What `event` becomes, and whether the stream is over after it.
    pub(super) fn event(&mut self, numbered: &Numbered) -> (Vec<Value>, bool) {
        let mut out = Vec::new();
        match &numbered.event {
            RunEvent::Token { text } => {
                let id = self.open_text(&mut out);
                out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}));
            }
            RunEvent::Trace { event, .. } => self.trace(event, &mut out),
            RunEvent::Interrupted { id, value } => {
                self.close_text(&mut out);
                let mut interrupt = json!({
                    "id": id,
                    "reason": if value.get("tool").is_some() { "tool_approval" } else { "input_required" },
                    "metadata": value,
                });
                if let Some(tool) = value.get("tool").and_then(Value::as_str) {
                    interrupt["message"] = json!(format!("approve the call of `{tool}`?"));
                }
                if let Some(call) = value.get("call_id").and_then(Value::as_str) {
                    interrupt["toolCallId"] = json!(call);
                }
                out.push(self.status_delta(RunStatus::Interrupted));
                out.push(json!({
                    "type": "RUN_FINISHED",
                    "threadId": self.thread_id,
                    "runId": self.run_id,
                    "outcome": {"type": "interrupt", "interrupts": [interrupt]},
                }));
                return (out, true);
            }
            RunEvent::Output { value, spent } => {
                // A reply that was not streamed (a model without deltas) is sent whole.
                if self.messages == 0 {
                    let id = self.open_text(&mut out);
                    let text = match value {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    out.push(
                        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}),
                    );
                }
                self.close_text(&mut out);
                self.spent = *spent;
                out.push(json!({
                    "type": "STATE_DELTA",
                    "delta": [
                        {"op": "replace", "path": "/spent", "value": spent},
                        {"op": "replace", "path": "/status", "value": RunStatus::Success.as_str()},
                    ],
                }));
                out.push(json!({
                    "type": "RUN_FINISHED",
                    "threadId": self.thread_id,
                    "runId": self.run_id,
                    "result": value,
                    "outcome": {"type": "success"},
                }));
                return (out, true);
            }
            RunEvent::Failed { failure, .. } => {
                self.close_text(&mut out);
                out.push(json!({
                    "type": "RUN_ERROR",
                    "message": failure.message,
                    "code": failure.kind,
                }));
                return (out, true);
            }
            RunEvent::Ended { status } => {
                // Ended without an answer or a failure: cancelled.
                self.close_text(&mut out);
                out.push(json!({
                    "type": "RUN_ERROR",
                    "message": format!("the run ended {}", status.as_str()),
                    "code": status.as_str(),
                }));
                return (out, true);
            }
            RunEvent::Started { .. } => {}
        }
        (out, false)
    }

    /// A trace event: tool calls and their results, model calls' spend.
    fn trace(&mut self, event: &Value, out: &mut Vec<Value>) {
        let data = &event["data"];
        match event["type"].as_str() {
            Some("tool_call") => {
                self.close_text(out);
                self.called += 1;
                let name = data["name"].as_str().unwrap_or("tool").to_owned();
                let id = data["call_id"].as_str().map_or_else(
                    || format!("{}-call-{}", self.ours, self.called),
                    str::to_owned,
                );
                out.push(
                    json!({"type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name}),
                );
                out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": data["args"].to_string()}));
                out.push(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
                self.calls.entry(name).or_default().push_back(id);
            }
            Some("tool_result") => {
                let name = data["name"].as_str().unwrap_or("tool");
                let Some(id) = self.calls.get_mut(name).and_then(VecDeque::pop_front) else {
                    return;
                };
                let content = match &data["output"] {
                    Value::String(text) => text.clone(),
                    Value::Null => data["output_preview"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    other => other.to_string(),
                };
                out.push(json!({
                    "type": "TOOL_CALL_RESULT",
                    "messageId": format!("{id}-result"),
                    "toolCallId": id,
                    "content": content,
                    "role": "tool",
                }));
            }
            Some("infer_end") => {
                self.close_text(out);
                self.spent.calls += 1;
                self.spent.input_tokens += data["input_tokens"].as_u64().unwrap_or(0);
                self.spent.output_tokens += data["output_tokens"].as_u64().unwrap_or(0);
                self.spent.cost_micro_usd += data["cost"].as_u64().unwrap_or(0);
                out.push(json!({
                    "type": "STATE_DELTA",
                    "delta": [{"op": "replace", "path": "/spent", "value": self.spent}],
                }));
            }
            _ => {}
        }
    }

    /// The open text message's id, opening one if none is.
    fn open_text(&mut self, out: &mut Vec<Value>) -> String {
        if let Some(id) = &self.text {
            return id.clone();
        }
        self.messages += 1;
        let id = format!("{}-message-{}", self.ours, self.messages);
        out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}));
        self.text = Some(id.clone());
        id
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
        }
    }

    fn status_delta(&self, status: RunStatus) -> Value {
        json!({
            "type": "STATE_DELTA",
            "delta": [{"op": "replace", "path": "/status", "value": status.as_str()}],
        })
    }
}
