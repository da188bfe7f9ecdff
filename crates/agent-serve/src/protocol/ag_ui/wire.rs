//! AG-UI's request: `RunAgentInput` and the conversation it carries.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;

/// What a front end sends to run an agent (camelCase on the wire). Tools, context and
/// forwarded properties are accepted and not used: the agent's own toolbox is what runs.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunAgentInput {
    /// The conversation's thread (a thread of the run model).
    pub(crate) thread_id: String,
    /// The front end's id for this run (echoed in the run's events).
    pub(crate) run_id: String,
    /// The conversation, oldest first, the new user message last.
    #[serde(default)]
    pub(crate) messages: Vec<Value>,
    /// The answers to a run's interrupts.
    #[serde(default)]
    pub(crate) resume: Option<Vec<Resume>>,
    /// The protocol version the front end speaks.
    #[serde(default)]
    pub(crate) protocol_version: Option<String>,
}

/// The answer to one interrupt.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Resume {
    /// The interrupt answered (for an approval, the tool call's id).
    pub(crate) interrupt_id: String,
    /// `resolved` or `cancelled`.
    pub(crate) status: String,
    /// The answer.
    #[serde(default)]
    pub(crate) payload: Option<Value>,
}

impl Resume {
    /// The answer as the run model takes it: `approve` approves a tool call, anything else is
    /// the person's refusal or answer.
    pub(crate) fn answer(&self) -> String {
        if self.status != "resolved" {
            return "cancelled".into();
        }
        match &self.payload {
            None | Some(Value::Bool(true)) => "approve".into(),
            Some(Value::String(text)) => text.clone(),
            Some(Value::Object(map)) if map.get("approved") == Some(&Value::Bool(true)) => {
                "approve".into()
            }
            Some(other) => other.to_string(),
        }
    }
}

/// The conversation of a request: its last user message, and all of it in the run model's
/// `messages` input form.
pub(crate) struct Conversation {
    pub(crate) last: String,
    pub(crate) all: Value,
}

/// Reads the messages: user, assistant, system and developer text (a user message's text
/// parts joined); tool, activity and reasoning messages are the front end's record of what
/// ran and are left out. The last must be the user's.
pub(crate) fn conversation(messages: &[Value]) -> Result<Conversation, ApiError> {
    let mut turns = Vec::new();
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        let role = match role {
            "user" => "user",
            "assistant" => "assistant",
            "system" | "developer" => "system",
            _ => continue,
        };
        let content = match message.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => continue,
        };
        turns.push(json!({"role": role, "content": content}));
    }
    match turns.last() {
        Some(last) if last["role"] == "user" => Ok(Conversation {
            last: last["content"].as_str().unwrap_or_default().to_owned(),
            all: json!({ "messages": turns }),
        }),
        _ => Err(ApiError::unprocessable(
            "`messages` must end with the user's message (or `resume` answer an interrupt)",
        )),
    }
}
