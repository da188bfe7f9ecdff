//! What travels through Temporal: the inputs and outputs of the effect activities and of
//! the program workflows, as serde types (JSON payloads).

use agent_op::{
    Candidate, Checkpoint, MemoryEntry, MemoryError, MemoryId, NewMemory, Prompt, ProviderError,
    PrunePolicy, PruneReport, Response, ScoredMemory, SearchOptions, Tag, ToolError, Trace,
    TraceEntry,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rollover::Carried;

/// The activity that calls the model.
pub(crate) const INFER: &str = "effect_agents.infer";
/// The activity that calls a tool.
pub(crate) const TOOL: &str = "effect_agents.tool";
/// The activity that runs a memory operation.
pub(crate) const MEMORY: &str = "effect_agents.memory";

/// A model call.
#[derive(Serialize, Deserialize)]
pub(crate) struct InferCall {
    pub model: String,
    pub prompt: Prompt,
}

/// A model call's answer: a provider error is a value the program sees (as it would in
/// one process), not an activity failure Temporal would retry.
pub(crate) type InferReply = Result<Response, ProviderError>;

/// A tool call.
#[derive(Serialize, Deserialize)]
pub(crate) struct ToolCall {
    pub name: String,
    pub args: Value,
    /// The engine's idempotency key for the call (stable across retries and replays).
    pub idempotency_key: String,
}

/// A tool call's answer.
pub(crate) type ToolReply = Result<Value, ToolError>;

/// A memory operation.
#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum MemoryCall {
    Store {
        memory: NewMemory,
    },
    Search {
        query: String,
        k: usize,
    },
    SearchWith {
        query: String,
        k: usize,
        options: SearchOptions,
    },
    SearchCandidates {
        query: String,
        k: usize,
    },
    SearchCandidatesWith {
        query: String,
        k: usize,
        options: SearchOptions,
    },
    RecordAccess {
        ids: Vec<MemoryId>,
    },
    Recent {
        n: usize,
    },
    ByTags {
        tags: Vec<Tag>,
    },
    Prune {
        policy: PrunePolicy,
    },
    Delete {
        id: MemoryId,
    },
    Get {
        id: MemoryId,
    },
    Count,
}

/// A memory operation's answer.
#[derive(Serialize, Deserialize)]
#[serde(tag = "ok", rename_all = "snake_case")]
pub(crate) enum MemoryReply {
    Stored { id: MemoryId },
    Hits { hits: Vec<ScoredMemory> },
    Candidates { candidates: Vec<Candidate> },
    Entries { entries: Vec<MemoryEntry> },
    Pruned { report: PruneReport },
    Deleted { deleted: bool },
    Entry { entry: Option<MemoryEntry> },
    Count { count: u64 },
    Failed { error: MemoryError },
}

/// A program workflow's input.
#[derive(Serialize, Deserialize)]
pub(crate) struct ProgramInput {
    /// The caller's input, decoded by the program's registration.
    pub input: Value,
    /// What the run before this one handed over, when it continued as new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
}

/// A program workflow's result.
#[derive(Serialize, Deserialize)]
pub(crate) struct ProgramOutput {
    pub value: Value,
    pub state: Value,
    pub trace: Trace,
    pub checkpoints: Vec<Checkpoint>,
}

/// What the `trace` and `checkpoints` queries return while a program runs: the events so
/// far, and the checkpoints taken so far.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct Progress {
    pub trace: Option<Trace>,
    pub events: Vec<TraceEntry>,
    pub checkpoints: Vec<Checkpoint>,
}
