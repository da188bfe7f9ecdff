//! The Agent Protocol's wire types, in the names LangGraph's server and SDK use.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::runs::{RunRecord, ThreadRecord, ThreadState, Turn};

/// An assistant: a served agent.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct Assistant {
    pub(crate) assistant_id: String,
    pub(crate) graph_id: String,
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    pub(crate) config: Value,
    pub(crate) context: Value,
    pub(crate) metadata: Value,
    pub(crate) version: u32,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
}

/// `POST /assistants/search`'s body (every field optional).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct AssistantSearch {
    pub(crate) graph_id: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) limit: Option<usize>,
    pub(crate) offset: Option<usize>,
}

/// `POST /threads`'s body.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct ThreadCreate {
    pub(crate) thread_id: Option<String>,
    pub(crate) metadata: Option<Value>,
    pub(crate) if_exists: Option<String>,
}

/// `POST /threads/{id}/history`'s body.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct HistoryQuery {
    pub(crate) limit: Option<usize>,
}

/// One stream mode or several.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub(crate) enum Modes {
    One(String),
    Many(Vec<String>),
}

/// The body of a run's create, stream and wait.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct RunCreate {
    pub(crate) assistant_id: String,
    pub(crate) input: Option<Value>,
    pub(crate) command: Option<Value>,
    pub(crate) metadata: Option<Value>,
    pub(crate) stream_mode: Option<Modes>,
    pub(crate) multitask_strategy: Option<String>,
    pub(crate) if_not_exists: Option<String>,
}

/// `?limit=&offset=&status=` of run lists.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct ListQuery {
    pub(crate) limit: Option<usize>,
    pub(crate) offset: Option<usize>,
    pub(crate) status: Option<String>,
}

/// `?wait=&action=` of a cancel.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct CancelQuery {
    pub(crate) wait: Option<String>,
}

/// A run, as the protocol shows it (with our spend and failure on top).
pub(crate) fn run(record: &RunRecord) -> Value {
    json!({
        "run_id": record.id,
        "thread_id": record.thread_id,
        "assistant_id": record.agent,
        "created_at": time(&record.created_at),
        "updated_at": time(&record.updated_at),
        "status": record.status.as_str(),
        "metadata": record.metadata,
        "multitask_strategy": record.multitask.as_str(),
        "kwargs": {"input": record.input},
        "spent": record.spent,
        "error": record.failure,
    })
}

/// A conversation as LangChain message dicts (`human`, `ai`, `system`).
pub(crate) fn messages(turns: &[Turn]) -> Vec<Value> {
    turns
        .iter()
        .map(|turn| {
            let kind = match turn.role.as_str() {
                "user" => "human",
                "assistant" => "ai",
                other => other,
            };
            json!({"type": kind, "content": turn.content})
        })
        .collect()
}

/// A thread's values: its conversation and last answer.
pub(crate) fn values(turns: &[Turn], output: Option<&Value>) -> Value {
    json!({"messages": messages(turns), "output": output})
}

/// A thread.
pub(crate) fn thread(record: &ThreadRecord) -> Value {
    json!({
        "thread_id": record.id,
        "created_at": time(&record.created_at),
        "updated_at": time(&record.updated_at),
        "metadata": record.metadata,
        "status": record.status.as_str(),
        "values": values(&record.turns, record.last_output.as_ref()),
        "interrupts": {},
    })
}

/// A thread's state after one of its runs.
pub(crate) fn state(thread_id: &str, state: &ThreadState) -> Value {
    json!({
        "values": values(&state.turns, state.output.as_ref()),
        "next": [],
        "tasks": [],
        "interrupts": [],
        "checkpoint": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": state.run_id,
        },
        "metadata": {"run_id": state.run_id, "step": state.seq},
        "created_at": time(&state.created_at),
        "parent_checkpoint": null,
    })
}

pub(crate) fn time(at: &chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
