//! [`HubSubscriber`]: a run's trace events and reply deltas, to its hub, and its waits for a
//! person noticed on the way.

use std::sync::Arc;

use agent_engine::Subscriber;
use agent_op::{Delta, Event, TraceId};
use tokio::sync::watch;

use super::hub::Hub;
use super::{Interrupt, RunEvent, RunStatus, Store};

/// The custom events by which a program says it waits for a person: a tool approval
/// (`agent-agents` emits `approval_requested` before it waits on the steering queue) or a
/// question.
const INTERRUPTS: [&str; 2] = ["approval_requested", "input_requested"];

/// Passes a run's trace events and reply deltas to its hub.
pub(super) struct HubSubscriber {
    pub(super) hub: Arc<Hub>,
    /// Told when the run starts waiting for a person.
    pub(super) waiting: Arc<watch::Sender<Option<Interrupt>>>,
    pub(super) store: Store,
    pub(super) run_id: String,
    pub(super) thread_id: Option<String>,
    /// Trace events still to drop: a resumed run replays its committed prefix, whose
    /// events its streams already had.
    pub(super) skip: std::sync::atomic::AtomicU64,
}

impl Subscriber for HubSubscriber {
    fn on_event(&self, trace_id: &TraceId, event: &Event) {
        use std::sync::atomic::Ordering;
        let skipped = self
            .skip
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if let agent_op::EventKind::Custom(custom) = &event.kind {
            if INTERRUPTS.contains(&custom.name.as_str()) {
                let id = custom.data["call_id"]
                    .as_str()
                    .map_or_else(|| format!("{}", self.hub.last_seq() + 1), str::to_owned);
                let interrupt = Interrupt {
                    id: id.clone(),
                    value: custom.data.clone(),
                };
                self.store.set_status(
                    &self.run_id,
                    RunStatus::Interrupted,
                    self.thread_id.as_deref(),
                );
                // Replayed (a resumed run waiting again for the answer it waited for when
                // its server stopped): its streams had the event already.
                if skipped.is_err() {
                    self.hub.push(RunEvent::Interrupted {
                        id,
                        value: custom.data.clone(),
                    });
                }
                self.waiting.send_replace(Some(interrupt));
            }
        }
        // The answer taken (replayed, for a run resumed past a wait that was answered
        // before its server stopped; live, `resume` has done this already).
        if matches!(event.kind, agent_op::EventKind::Steering(_)) && self.waiting.borrow().is_some()
        {
            self.waiting.send_replace(None);
            self.store
                .set_status(&self.run_id, RunStatus::Running, self.thread_id.as_deref());
        }
        if skipped.is_ok() {
            return;
        }
        let Ok(event) = serde_json::to_value(event) else {
            return;
        };
        self.hub.push(RunEvent::Trace {
            trace_id: trace_id.to_string(),
            event,
        });
    }

    fn wants_deltas(&self) -> bool {
        true
    }

    fn on_delta(&self, _trace_id: &TraceId, delta: &Delta) {
        if let Delta::Text(text) = delta {
            self.hub.push(RunEvent::Token { text: text.clone() });
        }
    }
}
