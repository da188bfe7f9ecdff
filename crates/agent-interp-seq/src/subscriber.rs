//! Event subscribers: observers that see every event as it happens.

use std::path::Path;
use std::sync::Mutex;

use agent_op::trace::jsonl::{JsonlAppender, JsonlError, TornLine};
use agent_op::{Checkpoint, Delta, Event, TraceEntry, TraceId};

/// Sees every event of a run as it happens (in a concurrent run, branches interleave; the final
/// trace is ordered deterministically).
///
/// Subscribers run on the interpreter's task, so they should be quick; a panicking subscriber
/// is isolated and does not stop the run. Any `Fn(&TraceId, &Event)` is a subscriber.
pub trait Subscriber: Send + Sync {
    /// An event happened in the run or branch `trace_id`.
    fn on_event(&self, trace_id: &TraceId, event: &Event);

    /// A checkpoint was taken.
    fn on_checkpoint(&self, checkpoint: &Checkpoint) {
        let _ = checkpoint;
    }

    /// Whether this subscriber wants model replies piece by piece. If any subscriber of a run
    /// does, the interpreter calls providers in streaming mode and passes every piece to
    /// [`Subscriber::on_delta`] as it arrives. Deltas are not stored in the trace (the final
    /// `InferEnd` is).
    fn wants_deltas(&self) -> bool {
        false
    }

    /// A piece of a model reply arrived, in the run or branch `trace_id`.
    fn on_delta(&self, trace_id: &TraceId, delta: &Delta) {
        let _ = (trace_id, delta);
    }
}

impl<F: Fn(&TraceId, &Event) + Send + Sync> Subscriber for F {
    fn on_event(&self, trace_id: &TraceId, event: &Event) {
        self(trace_id, event)
    }
}

/// Streams every event to a JSONL trace file as it happens, so a crash loses at most the line
/// being written (which readers then report as torn).
#[derive(Debug)]
pub struct JsonlSubscriber {
    appender: Mutex<JsonlAppender>,
    errors: Mutex<Vec<String>>,
}

impl JsonlSubscriber {
    /// Appends to the file at `path` (created if missing). Returns the torn line it cut off, if
    /// an earlier writer crashed mid-line.
    pub fn open(path: impl AsRef<Path>) -> Result<(JsonlSubscriber, Option<TornLine>), JsonlError> {
        let (appender, torn) = JsonlAppender::open(path)?;
        Ok((
            JsonlSubscriber {
                appender: Mutex::new(appender),
                errors: Mutex::new(Vec::new()),
            },
            torn,
        ))
    }

    /// Write errors so far (a subscriber cannot fail the run, so it keeps them here).
    pub fn errors(&self) -> Vec<String> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Subscriber for JsonlSubscriber {
    fn on_event(&self, trace_id: &TraceId, event: &Event) {
        let entry = TraceEntry {
            trace_id: trace_id.clone(),
            cancelled: false,
            event: event.clone(),
        };
        let mut appender = self.appender.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = appender.append(&entry).and_then(|()| appender.flush()) {
            self.errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(e.to_string());
        }
    }
}
