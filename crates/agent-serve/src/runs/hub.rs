//! [`Hub`]: the events of a run that is going, for every stream that follows it.
//!
//! A run's events are kept in memory while it goes (and written to the store as they come),
//! so a stream that joins late, or reconnects with `Last-Event-ID`, reads what it missed
//! from the same list the live events are appended to: no gap between "replayed" and
//! "live", no duplicate. Followers wait on a watch channel of the last sequence number, so
//! an idle stream costs a receiver, not a task.

use std::sync::{Arc, PoisonError, RwLock};

use tokio::sync::watch;

use super::event::{Numbered, RunEvent};
use super::store::Store;

/// The live events of one run.
pub(crate) struct Hub {
    run_id: String,
    events: RwLock<Vec<Arc<Numbered>>>,
    /// The last sequence number pushed, and whether the run is over.
    last: watch::Sender<(u64, bool)>,
    store: Store,
}

impl Hub {
    /// A hub for run `run_id` whose events before `after` are already stored (a resumed
    /// run's): they are read from the store, and new events are numbered from `after + 1`.
    pub(crate) fn new(run_id: &str, after: u64, store: Store) -> Arc<Hub> {
        Arc::new(Hub {
            run_id: run_id.to_owned(),
            events: RwLock::new(Vec::new()),
            last: watch::channel((after, false)).0,
            store,
        })
    }

    /// Appends `event`, numbered next, for every follower and the store.
    pub(crate) fn push(&self, event: RunEvent) {
        let mut events = self.events.write().unwrap_or_else(PoisonError::into_inner);
        let (last, closed) = *self.last.borrow();
        if closed {
            return;
        }
        let numbered = Arc::new(Numbered::new(last + 1, event));
        self.store
            .append_events(&self.run_id, vec![numbered.clone()]);
        events.push(numbered);
        self.last.send_replace((last + 1, false));
    }

    /// The number of the last event pushed.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last.borrow().0
    }

    /// Marks the run over: followers end after the last event.
    pub(crate) fn close(&self) {
        let _events = self.events.write().unwrap_or_else(PoisonError::into_inner);
        self.last.send_modify(|(_, closed)| *closed = true);
    }

    /// Follows the events after `after`.
    pub(crate) fn follow(self: &Arc<Hub>, after: u64) -> Follower {
        Follower {
            hub: self.clone(),
            changed: self.last.subscribe(),
            next: after + 1,
            stored: None,
        }
    }

    /// The number of the first event held in memory, if any.
    fn first_held(&self) -> Option<u64> {
        self.events
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .first()
            .map(|e| e.seq)
    }
}

/// One stream's place in a run's events.
pub(crate) struct Follower {
    hub: Arc<Hub>,
    changed: watch::Receiver<(u64, bool)>,
    next: u64,
    /// Events read from the store (those before the hub's first), not yet given.
    stored: Option<std::vec::IntoIter<Arc<Numbered>>>,
}

impl Follower {
    /// The next event, once there is one; `None` when the run is over and every event was
    /// given (or the store cannot be read).
    pub(crate) async fn next(&mut self) -> Option<Arc<Numbered>> {
        loop {
            if let Some(stored) = &mut self.stored {
                if let Some(event) = stored.next() {
                    self.next = event.seq + 1;
                    return Some(event);
                }
                self.stored = None;
            }
            // Events from before this process (a resumed run's) are in the store only.
            if self.hub.first_held().is_none_or(|first| self.next < first) {
                let before = self.hub.first_held().unwrap_or(u64::MAX);
                let (last, _) = *self.changed.borrow();
                if self.next <= last.min(before.saturating_sub(1)) {
                    let events = self
                        .hub
                        .store
                        .events_after(&self.hub.run_id, self.next - 1)
                        .await
                        .ok()?;
                    let events: Vec<Arc<Numbered>> = events
                        .into_iter()
                        .filter(|e| e.seq < before)
                        .map(Arc::new)
                        .collect();
                    if !events.is_empty() {
                        self.stored = Some(events.into_iter());
                        continue;
                    }
                }
            }
            {
                let events = self
                    .hub
                    .events
                    .read()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(first) = events.first() {
                    if self.next >= first.seq {
                        let index = (self.next - first.seq) as usize;
                        if let Some(event) = events.get(index) {
                            self.next += 1;
                            return Some(event.clone());
                        }
                    }
                }
                let (last, closed) = *self.changed.borrow_and_update();
                if closed && self.next > last {
                    return None;
                }
            }
            if self.changed.changed().await.is_err() {
                return None;
            }
        }
    }
}
