//! [`RunHandle`]: a run that is going or over, as callers hold it, and its [`EventStream`].

use std::sync::Arc;

use super::hub::Follower;
use super::{Interrupt, Live, RunRecord, RunStatus, Runs, RunsError, Store};
use crate::runs::Numbered;

/// A run that is going or over: its record as it was when the handle was made, and its
/// events.
#[derive(Clone)]
pub struct RunHandle {
    /// The run as it started (or as the store had it).
    pub record: RunRecord,
    pub(super) live: Option<Arc<Live>>,
    /// For a resumed run: its last event before it was resumed.
    pub(super) resumed_from: u64,
    pub(super) runs: Runs,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

impl RunHandle {
    /// The run's events after the `after`th (0 for all), live while it goes, then from the
    /// store once it is over.
    pub fn events(&self, after: u64) -> EventStream {
        match &self.live {
            Some(live) => EventStream {
                source: Source::Live(live.hub.follow(after)),
            },
            None => EventStream {
                source: Source::Stored {
                    store: self.runs.inner.store.clone(),
                    run_id: self.record.id.clone(),
                    after,
                    buffer: Vec::new().into_iter(),
                    done: false,
                },
            },
        }
    }

    /// Waits for the run to end; its final record.
    pub async fn wait(&self) -> Result<RunRecord, RunsError> {
        if let Some(live) = &self.live {
            let mut done = live.done.clone();
            loop {
                if let Some(record) = done.borrow_and_update().clone() {
                    return Ok(record);
                }
                if done.changed().await.is_err() {
                    break;
                }
            }
        }
        self.runs
            .inner
            .store
            .run(&self.record.id)
            .await?
            .ok_or_else(|| RunsError::UnknownRun(self.record.id.clone()))
    }

    /// Waits for the run to end or to wait for a person, whichever comes first.
    pub async fn wait_or_interrupt(&self) -> Result<Waited, RunsError> {
        if let Some(live) = &self.live {
            let mut done = live.done.clone();
            let mut waiting = live.waiting.subscribe();
            loop {
                if let Some(record) = done.borrow_and_update().clone() {
                    return Ok(Waited::Done(record));
                }
                if let Some(interrupt) = waiting.borrow_and_update().clone() {
                    let record = RunRecord {
                        status: RunStatus::Interrupted,
                        ..self.record.clone()
                    };
                    return Ok(Waited::Interrupted(record, interrupt));
                }
                tokio::select! {
                    changed = done.changed() => if changed.is_err() { break },
                    _ = waiting.changed() => {}
                }
            }
        }
        self.wait().await.map(Waited::Done)
    }

    /// For a handle [`Runs::resume`] gave: the number of the run's last event before it was
    /// resumed (a stream of what the answer led to starts after it); else 0.
    pub fn resumed_from(&self) -> u64 {
        self.resumed_from
    }

    /// Cancels the run (it ends `interrupted`); nothing if it is over.
    pub fn cancel(&self) {
        if let Some(live) = &self.live {
            live.cancel.cancel();
        }
    }
}

/// A run's events, in order, each once.
pub struct EventStream {
    source: Source,
}

enum Source {
    Live(Follower),
    Stored {
        store: Store,
        run_id: String,
        after: u64,
        buffer: std::vec::IntoIter<Arc<Numbered>>,
        done: bool,
    },
}

impl EventStream {
    /// The next event; `None` after the last.
    pub async fn next(&mut self) -> Option<Arc<Numbered>> {
        match &mut self.source {
            Source::Live(follower) => follower.next().await,
            Source::Stored {
                store,
                run_id,
                after,
                buffer,
                done,
            } => {
                if let Some(event) = buffer.next() {
                    return Some(event);
                }
                if *done {
                    return None;
                }
                *done = true;
                let events = store.events_after(run_id, *after).await.ok()?;
                *buffer = events
                    .into_iter()
                    .map(Arc::new)
                    .collect::<Vec<_>>()
                    .into_iter();
                buffer.next()
            }
        }
    }
}

/// Where a run stands when a caller stops waiting for it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Waited {
    /// It is over.
    Done(RunRecord),
    /// It waits for a person (resumed with [`Runs::resume`]).
    Interrupted(RunRecord, Interrupt),
}
