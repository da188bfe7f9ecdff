//! [`Checkpoint`]: a named snapshot of a run, enough to inspect or resume it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::serde_util::is_false;
use crate::trace::{Timestamp, Trace, TraceId};

/// Taken by the `checkpoint(name)` operation: the events so far and the program state,
/// serialized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The checkpoint's name.
    pub name: String,
    /// The run or branch that took it.
    pub trace_id: TraceId,
    /// The events of that run or branch up to this point.
    pub trace: Trace,
    /// The program state, serialized to JSON.
    pub state: Value,
    /// When it was taken.
    pub at: Timestamp,
    /// Taken by a branch that was later cancelled, or whose outcome was discarded (see
    /// [`TraceEntry::cancelled`](crate::TraceEntry::cancelled)): the reference semantics never
    /// reach this state, so do not resume from it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
}
