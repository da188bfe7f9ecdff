//! Event logs of a run and its branches, and their assembly into one deterministic [`Trace`].
//!
//! Each run or branch appends to its own [`BranchLog`]. A fork stores its children's logs right
//! after the `Fork` event, so the final trace lists each branch's events after its `Fork`, in
//! declaration order, whatever order the branches really ran in. Logs are shared (`Arc`), so
//! a branch cancelled mid-flight keeps everything it recorded.

use std::sync::{Arc, Mutex, MutexGuard};

use agent_op::{Event, Timestamp, Trace, TraceEntry, TraceId};
use smallvec::SmallVec;

pub(crate) struct BranchLog {
    id: TraceId,
    parent: Option<TraceId>,
    start: Timestamp,
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    /// Two items inline: a fan-out's branch is often one call (a start and an end event),
    /// and its log then costs no allocation of its own beside the `BranchLog`'s.
    items: SmallVec<[Item; 2]>,
    /// Events in `items`, counting the branch groups of `items` whose branches have all
    /// finished (they cannot grow any more).
    counted: usize,
    /// Indices in `items` of branch groups some branch of which may still add events.
    open_groups: Vec<usize>,
    finished: bool,
    cancelled: bool,
    end: Option<Timestamp>,
}

enum Item {
    Event(Event),
    Branches(Vec<Arc<BranchLog>>),
}

impl BranchLog {
    pub(crate) fn new(id: TraceId, parent: Option<TraceId>) -> Arc<BranchLog> {
        Arc::new(BranchLog {
            id,
            parent,
            start: agent_op::trace::now(),
            inner: Mutex::new(LogInner::default()),
        })
    }

    pub(crate) fn id(&self) -> &TraceId {
        &self.id
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        // Only pushes happen under this lock; a panic cannot leave it inconsistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn push(&self, event: Event) {
        let mut inner = self.lock();
        inner.items.push(Item::Event(event));
        inner.counted += 1;
    }

    pub(crate) fn push_branches(&self, branches: Vec<Arc<BranchLog>>) {
        let mut inner = self.lock();
        let at = inner.items.len();
        inner.items.push(Item::Branches(branches));
        inner.open_groups.push(at);
    }

    /// The branch ran to its end (successfully or not).
    pub(crate) fn finish(&self) {
        let mut inner = self.lock();
        inner.finished = true;
        inner.end = Some(agent_op::trace::now());
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.lock().finished
    }

    /// Whether [`mark_cancelled`](BranchLog::mark_cancelled) was called.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    /// The branch was cancelled, or its outcome discarded, because a sibling decided the fork.
    pub(crate) fn mark_cancelled(&self) {
        self.lock().cancelled = true;
    }

    /// This log and every branch below it, as a trace (non-destructive).
    pub(crate) fn snapshot(&self) -> Trace {
        let mut events = Vec::with_capacity(self.count());
        self.collect(false, &mut events, &mut |item| match item {
            Item::Event(e) => Some(e.clone()),
            Item::Branches(_) => None,
        });
        self.trace(events)
    }

    /// Moves every event out of this log and its branches into a trace (at the end of a run).
    pub(crate) fn take(&self) -> Trace {
        let mut events = Vec::with_capacity(self.count());
        self.drain(false, &mut events);
        self.trace(events)
    }

    fn trace(&self, events: Vec<TraceEntry>) -> Trace {
        let inner = self.lock();
        Trace {
            id: self.id.clone(),
            parent_id: self.parent.clone(),
            start: self.start,
            end: inner.end,
            events,
        }
    }

    /// How many events this log and its branches hold.
    /// The number of events in this log, its branches' included. Amortized O(1) per call
    /// for a log whose branch groups have finished (which is every group once a fork has
    /// joined): each group is counted once, when it can no longer grow, and its count kept.
    pub(crate) fn count(&self) -> usize {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut open = 0;
        let mut i = 0;
        while i < inner.open_groups.len() {
            let Item::Branches(group) = &inner.items[inner.open_groups[i]] else {
                inner.open_groups.swap_remove(i);
                continue;
            };
            let events: usize = group.iter().map(|b| b.count()).sum();
            if group.iter().all(|b| b.is_finished()) {
                inner.counted += events;
                inner.open_groups.swap_remove(i);
            } else {
                open += events;
                i += 1;
            }
        }
        inner.counted + open
    }

    fn collect(
        &self,
        cancelled_above: bool,
        out: &mut Vec<TraceEntry>,
        copy: &mut dyn FnMut(&Item) -> Option<Event>,
    ) {
        let inner = self.lock();
        let cancelled = cancelled_above || inner.cancelled;
        for item in &inner.items {
            match item {
                Item::Event(_) => {
                    if let Some(event) = copy(item) {
                        out.push(TraceEntry {
                            trace_id: self.id.clone(),
                            cancelled,
                            event,
                        });
                    }
                }
                Item::Branches(branches) => {
                    for branch in branches {
                        branch.collect(cancelled, out, copy);
                    }
                }
            }
        }
    }

    fn drain(&self, cancelled_above: bool, out: &mut Vec<TraceEntry>) {
        let (items, cancelled) = {
            let mut inner = self.lock();
            inner.counted = 0;
            inner.open_groups.clear();
            (
                std::mem::take(&mut inner.items),
                cancelled_above || inner.cancelled,
            )
        };
        for item in items {
            match item {
                Item::Event(event) => out.push(TraceEntry {
                    trace_id: self.id.clone(),
                    cancelled,
                    event,
                }),
                Item::Branches(branches) => {
                    for branch in branches {
                        branch.drain(cancelled, out);
                    }
                }
            }
        }
    }
}
