//! What the store keeps about runs and threads: plain data, no protocol's shape.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a run is in its life. The names are the Agent Protocol's.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// Accepted, not started yet.
    Pending,
    /// Running.
    Running,
    /// Finished with an answer.
    Success,
    /// Failed.
    Error,
    /// Stopped by its time budget.
    Timeout,
    /// Cancelled, or waiting for a person (a tool approval, steering).
    Interrupted,
}

impl RunStatus {
    /// The protocol's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Error => "error",
            RunStatus::Timeout => "timeout",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// The status named `name`, if it is one.
    pub fn from_name(name: &str) -> Option<RunStatus> {
        Some(match name {
            "pending" => RunStatus::Pending,
            "running" => RunStatus::Running,
            "success" => RunStatus::Success,
            "error" => RunStatus::Error,
            "timeout" => RunStatus::Timeout,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }

    /// Whether the run is over (nothing will change it again).
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

/// Whether a thread has a run going.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ThreadStatus {
    /// No run going.
    Idle,
    /// A run is going.
    Busy,
    /// Its last run was interrupted.
    Interrupted,
    /// Its last run failed.
    Error,
}

impl ThreadStatus {
    /// The protocol's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Idle => "idle",
            ThreadStatus::Busy => "busy",
            ThreadStatus::Interrupted => "interrupted",
            ThreadStatus::Error => "error",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<ThreadStatus> {
        Some(match name {
            "idle" => ThreadStatus::Idle,
            "busy" => ThreadStatus::Busy,
            "interrupted" => ThreadStatus::Interrupted,
            "error" => ThreadStatus::Error,
            _ => return None,
        })
    }
}

/// What a run spent: model calls, tokens and the known cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    /// Model calls started.
    pub calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// The known cost, in millionths of a dollar.
    pub cost_micro_usd: u64,
}

impl Spent {
    /// What the trace's model calls spent (kept and discarded branches together).
    pub fn of(trace: &agent_op::Trace) -> Spent {
        let total = trace.spend().total();
        Spent {
            calls: total.calls,
            input_tokens: total.tokens.input_tokens,
            output_tokens: total.tokens.output_tokens,
            cost_micro_usd: total.cost.known.0,
        }
    }
}

/// Why a run failed: the error's kind (a stable name) and its message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The kind of error (`provider`, `budget`, `aborted`, `invalid_input`, …).
    pub kind: String,
    /// What went wrong, for people.
    pub message: String,
}

/// One turn of a thread's conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// `user` or `assistant`.
    pub role: String,
    /// What was said (a typed answer as its JSON text).
    pub content: String,
}

/// A run as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// Its id (a UUID).
    pub id: String,
    /// The thread it runs on, if any.
    pub thread_id: Option<String>,
    /// The agent it runs.
    pub agent: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// Where it is.
    pub status: RunStatus,
    /// The caller's metadata.
    pub metadata: Value,
    /// The input it was given.
    pub input: Value,
    /// Its answer, once it has one.
    pub output: Option<Value>,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
    /// What it spent so far (final once the run is).
    pub spent: Spent,
    /// The API key's name that started it, if keys are configured.
    pub key: Option<String>,
    /// What it did, or would do, to a run going on its thread when it was started.
    pub multitask: Multitask,
}

/// What a run started on a thread with a run going does (the protocol's
/// `multitask_strategy`; LangGraph's "double texting").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Multitask {
    /// Refused ([`RunsError::ThreadBusy`](crate::RunsError::ThreadBusy)); the run going
    /// goes on.
    Reject,
    /// The run going is cancelled (it ends `interrupted`, keeping what it did), then this
    /// one starts.
    Interrupt,
    /// The run going is cancelled and deleted with its events, then this one starts.
    Rollback,
    /// Waits (`pending`) until the runs before it on the thread are over, then starts, seeing
    /// their turns. LangGraph's server does this by default, and so does this one.
    #[default]
    Enqueue,
}

impl Multitask {
    /// The protocol's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Multitask::Reject => "reject",
            Multitask::Interrupt => "interrupt",
            Multitask::Rollback => "rollback",
            Multitask::Enqueue => "enqueue",
        }
    }

    /// The strategy named `name`, if it is one.
    pub fn from_name(name: &str) -> Option<Multitask> {
        Some(match name {
            "reject" => Multitask::Reject,
            "interrupt" => Multitask::Interrupt,
            "rollback" => Multitask::Rollback,
            "enqueue" => Multitask::Enqueue,
            _ => return None,
        })
    }
}

/// A thread as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRecord {
    /// Its id (a UUID, or the caller's).
    pub id: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// The caller's metadata.
    pub metadata: Value,
    /// Whether a run is going on it.
    pub status: ThreadStatus,
    /// Its conversation so far.
    pub turns: Vec<Turn>,
    /// The last answer, if any.
    pub last_output: Option<Value>,
}

/// A thread's state after one of its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadState {
    /// The run that produced it.
    pub run_id: String,
    /// Its position in the thread's history (1 for the first run's).
    pub seq: u64,
    /// The conversation after that run.
    pub turns: Vec<Turn>,
    /// That run's answer.
    pub output: Option<Value>,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}
