//! [`Checkpoint`]: a named snapshot of a run's state, and where it stood in the trace.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::serde_util::is_false;
use crate::trace::{Timestamp, Trace, TraceEntry, TraceId};

/// Taken by the `checkpoint(name)` operation: the program state, serialized, and how far the
/// run (or branch) had got in its trace.
///
/// A checkpoint costs what serializing the state costs: it does not copy the trace. The
/// events up to it are a slice of the run's final trace, which
/// [`events_in`](Checkpoint::events_in) returns.
///
/// Checkpoints are for inspecting a run (what the state was at a named point, and what had
/// happened by then). Resuming a run from one is not implemented yet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The checkpoint's name.
    pub name: String,
    /// The run or branch that took it.
    pub trace_id: TraceId,
    /// How many events that run or branch had recorded (its sub-branches' included), the
    /// checkpoint's own `Checkpoint` event being the last.
    pub events: usize,
    /// The program state, serialized to JSON.
    pub state: Value,
    /// When it was taken.
    pub at: Timestamp,
    /// Taken by a branch that was later cancelled, or whose outcome was discarded (see
    /// [`TraceEntry::cancelled`](crate::TraceEntry::cancelled)): the reference semantics never
    /// reach this state.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
}

impl Checkpoint {
    /// A checkpoint of `trace_id` after `events` events, holding `state`.
    pub fn new(
        name: impl Into<String>,
        trace_id: TraceId,
        events: usize,
        state: Value,
        at: Timestamp,
    ) -> Checkpoint {
        Checkpoint {
            name: name.into(),
            trace_id,
            events,
            state,
            at,
            cancelled: false,
        }
    }

    /// The events recorded by the checkpoint's run or branch up to and including the
    /// checkpoint, out of `trace`: the final trace of the run that took it (a branch's
    /// events are one contiguous block of it). Empty when `trace` does not hold them.
    pub fn events_in<'a>(&self, trace: &'a Trace) -> &'a [TraceEntry] {
        let mine = |entry: &TraceEntry| in_subtree(&entry.trace_id, &self.trace_id);
        let Some(start) = trace.events.iter().position(mine) else {
            return &[];
        };
        let end = start.saturating_add(self.events).min(trace.events.len());
        let block = &trace.events[start..end];
        // Only the block of this branch; a trace from another run ends it early.
        let len = block.iter().take_while(|e| mine(e)).count();
        &block[..len]
    }
}

/// Whether `id` is `root` or one of its branches (`root.0`, `root.0.3`, …).
fn in_subtree(id: &TraceId, root: &TraceId) -> bool {
    let (id, root) = (id.as_str(), root.as_str());
    id.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}
