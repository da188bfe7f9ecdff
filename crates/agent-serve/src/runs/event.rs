//! The events of a run, as every protocol's stream is made from them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::record::{Failure, RunStatus, Spent};

/// Something that happened in a run, in the order it happened. Each carries a sequence
/// number (from 1) within its run: the `id:` of every SSE event made from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEvent {
    /// The run started.
    Started {
        /// The run.
        run_id: String,
        /// Its thread, if any.
        thread_id: Option<String>,
        /// The agent.
        agent: String,
    },
    /// A piece of the model's reply, as it streams.
    Token {
        /// The text.
        text: String,
    },
    /// A trace event (a model or tool call with its arguments and result, a fork, a budget
    /// event…), as the JSONL trace holds it.
    Trace {
        /// The run or branch it happened in.
        trace_id: String,
        /// The event.
        event: Value,
    },
    /// The run waits for a person: a tool call to approve, a question to answer. Resumed
    /// with an answer ([`Runs::resume`](super::Runs::resume)).
    Interrupted {
        /// The interrupt's id (the tool call's id for an approval).
        id: String,
        /// What the run asks.
        value: Value,
    },
    /// The run answered.
    Output {
        /// The answer: text as a JSON string, a typed answer as its JSON.
        value: Value,
        /// What the run spent.
        spent: Spent,
    },
    /// The run failed.
    Failed {
        /// Why.
        failure: Failure,
        /// What the run spent.
        spent: Spent,
    },
    /// The run is over: the last event.
    Ended {
        /// How it ended.
        status: RunStatus,
    },
}

/// A run's event with its sequence number.
#[derive(Clone, Debug)]
pub struct Numbered {
    /// Its place in the run's events, from 1.
    pub seq: u64,
    /// The event.
    pub event: RunEvent,
    /// A trace event's JSON text, made once for every stream that sends it.
    json: std::sync::OnceLock<std::sync::Arc<str>>,
}

impl PartialEq for Numbered {
    fn eq(&self, other: &Numbered) -> bool {
        self.seq == other.seq && self.event == other.event
    }
}

impl Numbered {
    /// Event `seq` of its run.
    pub fn new(seq: u64, event: RunEvent) -> Numbered {
        Numbered {
            seq,
            event,
            json: std::sync::OnceLock::new(),
        }
    }

    /// The JSON text of a trace event's `event` (of any other event, the whole event),
    /// serialized once however many streams send it.
    pub fn trace_json(&self) -> &str {
        self.json.get_or_init(|| {
            let text = match &self.event {
                RunEvent::Trace { event, .. } => serde_json::to_string(event),
                other => serde_json::to_string(other),
            };
            text.unwrap_or_else(|_| "null".into()).into()
        })
    }
}
