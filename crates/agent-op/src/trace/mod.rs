//! Structured traces: events, trace ids, the [`Trace`] with its queries, checkpoints, and the
//! JSONL format.

mod checkpoint;
mod content;
pub mod event;
mod id;
pub mod jsonl;
mod now;
mod record;

pub use checkpoint::Checkpoint;
pub use event::{
    Event, EventKind, EventType, ForkKind, RunEnd, RunFailure, RunOutcome, SpentRecord, Timestamp,
};
pub use id::TraceId;
pub use now::now;
pub use record::{CostSummary, Spend, SpendPart, ToolCallRecord, Trace, TraceEntry};
