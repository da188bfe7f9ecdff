//! Journaling inside the engine: answering effects from a recorded journal (replay, resume)
//! and committing live results before the program sees them (durable runs).
//!
//! Every machine asks [`Journaling::lookup`] before a nondeterministic effect. The answer is
//! the recorded result (the request matched), "go live" (no journal, a position the journal
//! lacks while resuming, or any change in replay-then-live), or a [`Divergence`]. A live
//! result is appended to the sink, if there is one, before it is fed on: write-ahead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_op::journal::{Divergence, Entry, EntryKind, Journal, Key, Recorded, Request};
use agent_op::{Checkpoint, TraceId};
use serde_json::Value;

/// How a run uses its journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every effect is answered from the journal; anything else is a divergence.
    Replay,
    /// Effects whose request matches the journal at their position are answered from it;
    /// the rest run live (the first difference is recorded as a `journal.live` event).
    ReplayThenLive,
    /// Recorded positions are answered from the journal (a changed request there is a
    /// divergence); new positions run live and are committed before the program sees them.
    Durable,
}

/// What a lookup found.
pub(crate) enum Lookup {
    /// The recorded result.
    Replayed(Value),
    /// Run the effect; commit its result at `key` (when the run has a sink).
    Live { key: Key, request: Request },
    /// The recording was cut off here by the deadline (or time budget) of the scope at
    /// this position among the machine's scopes (outermost first), ending it with `exit`.
    Interrupted { scope: usize, exit: Value },
    /// Only in a doomed `race` branch: the journal ends here because the race was decided
    /// while this call was in flight. The branch waits to be cancelled.
    Park,
}

/// A run's journal state, shared by all its machines.
pub(crate) struct Journaling {
    mode: Mode,
    recorded: HashMap<Key, Entry>,
    /// Where live results go.
    sink: Option<Arc<dyn Journal>>,
    /// Whether replayed entries are copied to the sink too (replaying into a new journal).
    copy_replayed: bool,
    /// The run's id: keys hold branch paths below it.
    root: TraceId,
    /// Replay-then-live: whether the first divergence was reported already, and it.
    reported: AtomicBool,
    first: Mutex<Option<Divergence>>,
    /// Checkpoint markers and race outcomes waiting for the next commit.
    queued: Mutex<Vec<Entry>>,
    /// Effects answered from the journal, and run live.
    pub(crate) replayed: AtomicU64,
    pub(crate) live: AtomicU64,
}

impl Journaling {
    pub(crate) fn new(
        mode: Mode,
        entries: Vec<Entry>,
        sink: Option<Arc<dyn Journal>>,
        root: TraceId,
    ) -> Journaling {
        // Replaying into a new journal copies what it replays; resuming a durable run writes
        // to the journal it replays, which has them already.
        let copy_replayed = mode == Mode::ReplayThenLive && sink.is_some();
        let recorded = entries
            .into_iter()
            .filter(|e| e.kind != EntryKind::Run)
            .map(|e| (e.key.clone(), e))
            .collect();
        Journaling {
            mode,
            recorded,
            sink,
            copy_replayed,
            root,
            reported: AtomicBool::new(false),
            first: Mutex::new(None),
            queued: Mutex::new(Vec::new()),
            replayed: AtomicU64::new(0),
            live: AtomicU64::new(0),
        }
    }

    pub(crate) fn sink(&self) -> Option<&Arc<dyn Journal>> {
        self.sink.as_ref()
    }

    /// Queues the entry `make` builds (its key set to `key`) for the next commit, unless the
    /// run has no sink or the journal already holds it (then it is copied only when
    /// replaying into a new journal).
    pub(crate) fn queue(&self, key: Key, request: impl FnOnce() -> Request, result: Value) {
        if self.sink.is_none() {
            return;
        }
        let entry = match self.recorded.get(&key) {
            Some(entry) if self.copy_replayed => entry.clone(),
            Some(_) => return,
            None => request().entry(key, result),
        };
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry);
    }

    /// Takes the queued entries.
    pub(crate) fn take_queued(&self) -> Vec<Entry> {
        std::mem::take(&mut *self.queued.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Commits whatever is queued.
    pub(crate) async fn flush(&self) -> Result<(), agent_op::journal::JournalError> {
        let queued = self.take_queued();
        match &self.sink {
            Some(sink) if !queued.is_empty() => sink.append(queued).await,
            _ => Ok(()),
        }
    }

    /// The key of the effect starting now in `branch` after `seq` events.
    pub(crate) fn key(&self, branch: &TraceId, seq: u64) -> Key {
        Journaling::branch_key(&self.root, branch, seq)
    }

    fn branch_key(root: &TraceId, branch: &TraceId, seq: u64) -> Key {
        let id = branch.as_str();
        let path = if id == root.as_str() {
            ""
        } else {
            id.strip_prefix(root.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                .unwrap_or(id)
        };
        Key {
            branch: path.to_owned(),
            seq,
        }
    }

    /// Answers the effect at `key` asking `request`. `doomed`: the branch lost a recorded
    /// race, so a position the journal lacks means it was cancelled there.
    ///
    /// Returns the entry to copy to the sink with a replayed answer, when there is one.
    ///
    /// `summarize` fills in the request's summary (left out when costly to build) where one
    /// is needed: in a new entry, or a divergence.
    pub(crate) fn lookup(
        &self,
        key: Key,
        request: Request,
        doomed: bool,
        summarize: &dyn Fn() -> Value,
    ) -> Result<(Lookup, Option<Entry>), Box<Divergence>> {
        let full = |mut request: Request| {
            if request.summary.is_null() {
                request.summary = summarize();
            }
            request
        };
        let Some(entry) = self.recorded.get(&key) else {
            if doomed {
                return Ok((Lookup::Park, None));
            }
            return match self.mode {
                Mode::Replay => Err(Box::new(Divergence {
                    key,
                    requested: full(request),
                    recorded: None,
                })),
                Mode::ReplayThenLive | Mode::Durable => {
                    let request = if self.sink.is_some() || !self.reported.load(Ordering::Relaxed) {
                        full(request)
                    } else {
                        request
                    };
                    if self.mode == Mode::ReplayThenLive {
                        self.went_live(&key, &request, None);
                    }
                    self.live.fetch_add(1, Ordering::Relaxed);
                    Ok((Lookup::Live { key, request }, None))
                }
            };
        };
        if let Some((scope, exit)) = cut(entry) {
            self.replayed.fetch_add(1, Ordering::Relaxed);
            let copy = self.copy_replayed.then(|| entry.clone());
            return Ok((Lookup::Interrupted { scope, exit }, copy));
        }
        if entry.fingerprint == request.fingerprint && entry.kind == request.kind {
            self.replayed.fetch_add(1, Ordering::Relaxed);
            let copy = self.copy_replayed.then(|| entry.clone());
            return Ok((Lookup::Replayed(entry.result.clone()), copy));
        }
        let recorded = Recorded {
            kind: entry.kind,
            fingerprint: entry.fingerprint.clone(),
            summary: entry.request.clone(),
        };
        let request = full(request);
        match self.mode {
            Mode::ReplayThenLive => {
                self.went_live(&key, &request, Some(recorded));
                self.live.fetch_add(1, Ordering::Relaxed);
                Ok((Lookup::Live { key, request }, None))
            }
            Mode::Replay | Mode::Durable => Err(Box::new(Divergence {
                key,
                requested: request,
                recorded: Some(recorded),
            })),
        }
    }

    /// The recorded cut of the fork at `key` (a deadline fired while it ran): the position of
    /// the scope whose deadline it was, how the scope ended, and the branches that had
    /// finished by then.
    pub(crate) fn fork_cut(&self, key: &Key) -> Option<(usize, Value, Vec<usize>)> {
        let entry = self.recorded.get(key)?;
        let (scope, exit) = cut(entry)?;
        let finished = entry
            .result
            .get("finished")?
            .as_array()?
            .iter()
            .filter_map(|i| i.as_u64().and_then(|i| usize::try_from(i).ok()))
            .collect();
        Some((scope, exit, finished))
    }

    /// The recorded winner of the race forked at `key`, if the journal has it.
    pub(crate) fn race_winner(&self, key: &Key) -> Option<usize> {
        let entry = self.recorded.get(key)?;
        if entry.kind != EntryKind::Outcome {
            return None;
        }
        entry
            .result
            .get("winner")?
            .as_u64()
            .and_then(|w| usize::try_from(w).ok())
    }

    /// Replay-then-live: the first divergence, for the `journal.live` event (`None` after).
    fn went_live(&self, key: &Key, request: &Request, recorded: Option<Recorded>) {
        if !self.reported.swap(true, Ordering::Relaxed) {
            let divergence = Divergence {
                key: key.clone(),
                requested: request.clone(),
                recorded,
            };
            *self.first.lock().unwrap_or_else(|e| e.into_inner()) = Some(divergence);
        }
    }
}

/// What a journaled run did with its journal (see `Outcome::journal`).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct JournalReport {
    /// Effects answered from the journal.
    pub replayed: u64,
    /// Effects run live (and, in a durable run, committed).
    pub live: u64,
    /// In replay-then-live, where the run first left the journal.
    pub diverged: Option<Divergence>,
}

impl Journaling {
    /// What this run did with its journal.
    pub(crate) fn report(&self) -> JournalReport {
        JournalReport {
            replayed: self.replayed.load(Ordering::Relaxed),
            live: self.live.load(Ordering::Relaxed),
            diverged: self.first.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}

/// The entries committed before `checkpoint` of the run with id `root` was taken (before its
/// marker entry: same branch, name and event count), or `None` if the journal has no such
/// marker.
pub(crate) fn before_checkpoint(
    entries: Vec<Entry>,
    root: &TraceId,
    checkpoint: &Checkpoint,
) -> Option<Vec<Entry>> {
    let branch = Journaling::branch_key(root, &checkpoint.trace_id, 0).branch;
    let at = entries.iter().position(|e| {
        e.kind == EntryKind::Checkpoint
            && e.key.branch == branch
            && e.request.get("checkpoint").and_then(Value::as_str) == Some(&checkpoint.name)
            && e.result.get("events").and_then(Value::as_u64) == Some(checkpoint.events as u64)
    })?;
    let mut entries = entries;
    entries.truncate(at);
    Some(entries)
}

/// The record of a deadline that cut a call or a fork off (an `Outcome` entry whose result
/// is `{"interrupted": {"scope": <position>, "exit": <how the scope ended>}, ..}`), as the
/// scope's position and its exit; `None` for any other entry.
fn cut(entry: &Entry) -> Option<(usize, Value)> {
    if entry.kind != EntryKind::Outcome {
        return None;
    }
    let cut = entry.result.get("interrupted")?;
    let scope = usize::try_from(cut.get("scope")?.as_u64()?).ok()?;
    Some((scope, cut.get("exit").cloned().unwrap_or(Value::Null)))
}
