//! Journaling inside the engine: answering effects from a recorded journal (replay, resume)
//! and committing live results before the program sees them (durable runs).
//!
//! Every machine asks [`Journaling::lookup`] before a nondeterministic effect. The answer is
//! the recorded result (the request matched), "go live" (no journal, a position the journal
//! lacks while resuming, or any change in replay-then-live), or a [`Divergence`]. A live
//! result is appended to the sink, if there is one, before it is fed on: write-ahead.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_op::journal::{
    Divergence, Entry, EntryKind, Journal, JournalError, Key, Recorded, Request,
};
use agent_op::{Cause, Checkpoint, Prompt, TraceId};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::commit::{Committer, Deferred};
use crate::engine::scheduler::Spawn;
use crate::error::ErrorKind;

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
    /// The recorded entry: its result is the effect's.
    Replayed(Arc<Entry>),
    /// Run the effect; commit its result at `key` (when the run has a sink).
    Live { key: Key, request: Requested },
    /// The recording was cut off here by the deadline (or time budget) of the scope at
    /// this position among the machine's scopes (outermost first), ending it with `exit`.
    Interrupted { key: Key, scope: usize, exit: Value },
    /// Only in a doomed `race` branch: the journal ends here because the race was decided
    /// while this call was in flight. The branch waits to be cancelled.
    Park,
    /// The recorded run lacked what this effect needs (a tool, a provider, a memory
    /// backend) and failed here; the entry's result is what it recorded about that (the
    /// tools it permitted).
    Unavailable(Arc<Entry>),
}

/// What an effect asks, as [`Journaling::lookup`] is given it.
pub(crate) enum Requested {
    /// Built in full.
    Request(Request),
    /// A model call, whose request (the prompt serialized and hashed) is built only where it
    /// is needed: a fresh durable run compares it with nothing, and its committer builds the
    /// entry.
    Model { model: String, prompt: Arc<Prompt> },
}

impl From<Request> for Requested {
    fn from(request: Request) -> Requested {
        Requested::Request(request)
    }
}

impl Requested {
    /// What it is.
    pub(crate) fn kind(&self) -> EntryKind {
        match self {
            Requested::Request(request) => request.kind,
            Requested::Model { .. } => EntryKind::Model,
        }
    }

    /// The request without its summary, where that is costly: what a comparison with a
    /// recorded entry needs.
    pub(crate) fn quick(&self) -> Cow<'_, Request> {
        match self {
            Requested::Request(request) => Cow::Borrowed(request),
            Requested::Model { model, prompt } => {
                Cow::Owned(Request::model_unsummarized(model, prompt))
            }
        }
    }

    /// The request in full.
    pub(crate) fn build(self) -> Request {
        match self {
            Requested::Request(request) => request,
            Requested::Model { model, prompt } => Request::model(&model, &prompt),
        }
    }

    /// The entry recording `result` as its answer at `key`, to be committed. (A model
    /// call's entry is made where it is committed instead: see
    /// `Machine::journal_model_entry`.)
    pub(crate) fn entry(self, key: Key, result: Box<RawValue>) -> Deferred {
        Deferred::Entry(self.build().entry(key, result))
    }

    /// The request, if it was built in full (a model call's is built where its entry is
    /// committed).
    pub(crate) fn built(self) -> Option<Request> {
        match self {
            Requested::Request(request) => Some(request),
            Requested::Model { .. } => None,
        }
    }
}

/// What the journal recorded at a fork's position.
pub(crate) enum ForkRecord {
    /// Nothing: the fork ran to its end (a `par`), or the recording stopped before the
    /// fork was decided.
    None,
    /// The race's winner, and the branches before it that had finished (failing) when it
    /// won: the others were cut off.
    Winner { winner: usize, finished: Vec<usize> },
    /// A deadline cut the fork off: the position of the scope whose deadline it was (among
    /// the machine's scopes, outermost first), how the scope ended, and the branches that
    /// had finished by then.
    Cut {
        scope: usize,
        exit: Value,
        finished: Vec<usize>,
    },
}

/// A run's journal state, shared by all its machines.
pub(crate) struct Journaling {
    mode: Mode,
    /// The journal the recorded entries come from, for messages.
    name: String,
    /// Shared with the effects they answer, so a replay copies no result.
    recorded: HashMap<Key, Arc<Entry>>,
    /// Where live results go.
    committer: Option<Committer>,
    /// Whether replayed entries are copied to the sink too (replaying into a new journal).
    copy_replayed: bool,
    /// The run's id: keys hold branch paths below it.
    root: TraceId,
    /// Replay-then-live: whether the first divergence was reported already, and it.
    reported: AtomicBool,
    first: Mutex<Option<Divergence>>,
    /// Checkpoint markers and race outcomes waiting for the next commit.
    queued: Mutex<Vec<Deferred>>,
    /// Effects answered from the journal, and run live.
    pub(crate) replayed: AtomicU64,
    pub(crate) live: AtomicU64,
}

impl Journaling {
    /// The journal state of a run over `entries`, recorded in the journal `name`, with its
    /// commits on a task `spawn` starts, if there is one. Two entries at one position are
    /// refused: no run records them.
    pub(crate) fn new(
        mode: Mode,
        name: String,
        entries: Vec<Entry>,
        sink: Option<Arc<dyn Journal>>,
        spawn: Option<Spawn>,
        root: TraceId,
    ) -> Result<Journaling, JournalError> {
        // Replaying into a new journal copies what it replays; resuming a durable run writes
        // to the journal it replays, which has them already.
        let copy_replayed = mode == Mode::ReplayThenLive && sink.is_some();
        let mut recorded = HashMap::with_capacity(entries.len());
        for entry in entries.into_iter().filter(|e| e.kind != EntryKind::Run) {
            let key = entry.key.clone();
            if recorded.insert(key.clone(), Arc::new(entry)).is_some() {
                return Err(malformed(&name, &key, "it holds two entries here"));
            }
        }
        Ok(Journaling {
            mode,
            name,
            recorded,
            committer: sink.map(|sink| Committer::new(sink, spawn, root.clone())),
            copy_replayed,
            root,
            reported: AtomicBool::new(false),
            first: Mutex::new(None),
            queued: Mutex::new(Vec::new()),
            replayed: AtomicU64::new(0),
            live: AtomicU64::new(0),
        })
    }

    /// The journal the recorded entries come from, for messages.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether every effect is answered from the journal (a pure replay): nothing runs.
    pub(crate) fn replays_only(&self) -> bool {
        self.mode == Mode::Replay
    }

    /// Whether live results are committed.
    pub(crate) fn has_sink(&self) -> bool {
        self.committer.is_some()
    }

    /// Commits `entries` in order, after everything handed over before them (see
    /// [`Committer::commit`]).
    pub(crate) async fn commit(
        &self,
        entries: impl IntoIterator<Item = Deferred>,
    ) -> Result<(), JournalError> {
        match &self.committer {
            Some(committer) => committer.commit(entries).await,
            None => Ok(()),
        }
    }

    /// Queues the entry `make` builds (its key set to `key`) for the next commit, unless the
    /// run has no sink or the journal already holds it (then it is copied only when
    /// replaying into a new journal).
    pub(crate) fn queue(&self, key: Key, request: impl FnOnce() -> Request, result: Value) {
        if self.committer.is_none() {
            return;
        }
        let entry = match self.recorded.get(&key) {
            Some(entry) if self.copy_replayed => Entry::clone(entry),
            Some(_) => return,
            None => request().entry(key, raw(&result)),
        };
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Deferred::Entry(entry));
    }

    /// Takes the queued entries.
    pub(crate) fn take_queued(&self) -> Vec<Deferred> {
        std::mem::take(&mut *self.queued.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether anything is queued for the next commit.
    pub(crate) fn has_queued(&self) -> bool {
        !self
            .queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Commits whatever is queued.
    pub(crate) async fn flush(&self) -> Result<(), JournalError> {
        let queued = self.take_queued();
        if queued.is_empty() {
            return Ok(());
        }
        self.commit(queued).await
    }

    /// Commits whatever is queued, and waits for every commit handed over before: at the
    /// run's end, what its branches did is durable (even a cancelled branch's last entry).
    pub(crate) async fn settle(&self) -> Result<(), JournalError> {
        self.commit(self.take_queued()).await
    }

    /// The key of the effect starting now in `branch` after `seq` events.
    pub(crate) fn key(&self, branch: &TraceId, seq: u64) -> Key {
        Journaling::branch_key(&self.root, branch, seq)
    }

    /// The key of the effect numbered `seq` of `branch` in the run `root`.
    pub(crate) fn branch_key(root: &TraceId, branch: &TraceId, seq: u64) -> Key {
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

    /// Whether every effect of a branch (`doomed` or not) goes live without asking the
    /// journal: a durable run whose journal held nothing when it started. Counts the effect
    /// as live when it does.
    pub(crate) fn fresh(&self, doomed: bool) -> bool {
        let fresh = self.mode == Mode::Durable
            && self.recorded.is_empty()
            && self.committer.is_some()
            && !doomed;
        if fresh {
            self.live.fetch_add(1, Ordering::Relaxed);
        }
        fresh
    }

    /// Answers the effect at `key` asking `request`. `doomed`: the branch lost a recorded
    /// race, so a position the journal lacks means it was cancelled there.
    ///
    /// Returns the entry to copy to the sink with a replayed answer, when there is one.
    /// Fails with the [`Divergence`], or with a [`JournalError`] when the entry there does
    /// not fit (a cut-off record that does not parse).
    pub(crate) fn lookup(
        &self,
        key: Key,
        request: Requested,
        doomed: bool,
    ) -> Result<(Lookup, Option<Entry>), ErrorKind> {
        let Some(entry) = self.recorded.get(&key) else {
            if doomed {
                return Ok((Lookup::Park, None));
            }
            return match self.mode {
                Mode::Replay => Err(ErrorKind::Divergence(Box::new(Divergence {
                    key,
                    requested: request.build(),
                    recorded: None,
                }))),
                Mode::ReplayThenLive if !self.reported.load(Ordering::Relaxed) => {
                    let request = request.build();
                    self.went_live(&key, &request, None);
                    self.live.fetch_add(1, Ordering::Relaxed);
                    let request = Requested::Request(request);
                    Ok((Lookup::Live { key, request }, None))
                }
                Mode::ReplayThenLive | Mode::Durable => {
                    self.live.fetch_add(1, Ordering::Relaxed);
                    Ok((Lookup::Live { key, request }, None))
                }
            };
        };
        let quick = request.quick();
        if entry.kind == EntryKind::Outcome && entry.fingerprint == cut_off(quick.kind).fingerprint
        {
            let (scope, exit) = cut(entry)
                .ok_or_else(|| self.misfit(&key, "its record of a call cut off does not parse"))?;
            self.replayed.fetch_add(1, Ordering::Relaxed);
            let copy = self.copy_replayed.then(|| Entry::clone(entry));
            return Ok((Lookup::Interrupted { key, scope, exit }, copy));
        }
        if entry.kind == EntryKind::Outcome && entry.fingerprint == unavailable(&quick).fingerprint
        {
            self.replayed.fetch_add(1, Ordering::Relaxed);
            let copy = self.copy_replayed.then(|| Entry::clone(entry));
            return Ok((Lookup::Unavailable(entry.clone()), copy));
        }
        if entry.fingerprint == quick.fingerprint && entry.kind == quick.kind {
            self.replayed.fetch_add(1, Ordering::Relaxed);
            let copy = self.copy_replayed.then(|| Entry::clone(entry));
            return Ok((Lookup::Replayed(entry.clone()), copy));
        }
        let recorded = Recorded {
            kind: entry.kind,
            fingerprint: entry.fingerprint.clone(),
            summary: entry.request.clone(),
        };
        drop(quick);
        let request = request.build();
        match self.mode {
            Mode::ReplayThenLive => {
                self.went_live(&key, &request, Some(recorded));
                self.live.fetch_add(1, Ordering::Relaxed);
                let request = Requested::Request(request);
                Ok((Lookup::Live { key, request }, None))
            }
            Mode::Replay | Mode::Durable => Err(ErrorKind::Divergence(Box::new(Divergence {
                key,
                requested: request,
                recorded: Some(recorded),
            }))),
        }
    }

    /// A [`JournalError`] saying the entry at `key` does not fit the program: `why`.
    pub(crate) fn misfit(&self, key: &Key, why: &str) -> ErrorKind {
        ErrorKind::Journal(Box::new(malformed(&self.name, key, why)))
    }

    /// What the journal recorded at the fork at `key`, a `race` (or a `par`) of `branches`:
    /// its winner, or where a deadline cut it off. A record that does not parse, or names a
    /// branch the fork lacks, is a [`JournalError`]; a record of something else there is a
    /// divergence (in replay-then-live, where the run goes live, it is ignored).
    pub(crate) fn fork_record(
        &self,
        key: &Key,
        race: bool,
        branches: usize,
    ) -> Result<ForkRecord, ErrorKind> {
        let Some(entry) = self.recorded.get(key) else {
            return Ok(ForkRecord::None);
        };
        let branch = |value: &Value| {
            value
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i < branches)
        };
        // Parsed only here, at a fork the journal recorded something for: rare.
        let result = parsed(&entry.result);
        let finished = || -> Option<Vec<usize>> {
            let finished = result.get("finished")?.as_array()?;
            finished.iter().map(branch).collect()
        };
        if entry.kind == EntryKind::Outcome && entry.fingerprint == fork_cut().fingerprint {
            let parsed = cut(entry).and_then(|(scope, exit)| Some((scope, exit, finished()?)));
            let (scope, exit, finished) = parsed.ok_or_else(|| {
                self.misfit(
                    key,
                    "its record of a fork cut off does not parse or names a branch the fork lacks",
                )
            })?;
            return Ok(ForkRecord::Cut {
                scope,
                exit,
                finished,
            });
        }
        let requested = race_won(branches);
        if race && entry.kind == EntryKind::Outcome && entry.fingerprint == requested.fingerprint {
            let winner = result.get("winner").and_then(branch);
            let (Some(winner), Some(finished)) = (winner, finished()) else {
                return Err(self.misfit(key, "its record of a race names branches the race lacks"));
            };
            return Ok(ForkRecord::Winner { winner, finished });
        }
        if self.mode == Mode::ReplayThenLive {
            return Ok(ForkRecord::None);
        }
        Err(ErrorKind::Divergence(Box::new(Divergence {
            key: key.clone(),
            requested: if race { requested } else { fork_cut() },
            recorded: Some(Recorded {
                kind: entry.kind,
                fingerprint: entry.fingerprint.clone(),
                summary: entry.request.clone(),
            }),
        })))
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
            && parsed(&e.request).get("checkpoint").and_then(Value::as_str)
                == Some(&checkpoint.name)
            && parsed(&e.result).get("events").and_then(Value::as_u64)
                == Some(checkpoint.events as u64)
    })?;
    let mut entries = entries;
    entries.truncate(at);
    Some(entries)
}

/// The request of the record that a deadline cut off a call of `kind`.
pub(crate) fn cut_off(kind: EntryKind) -> Request {
    Request::plain(EntryKind::Outcome, serde_json::json!({"cut_off": kind}))
}

/// The request of the record that the run lacked what `request` needed (a tool, a
/// provider, a memory backend), and failed.
pub(crate) fn unavailable(request: &Request) -> Request {
    Request::plain(
        EntryKind::Outcome,
        serde_json::json!({"unavailable": request.fingerprint}),
    )
}

/// The request of the record that a deadline cut off a fork.
pub(crate) fn fork_cut() -> Request {
    Request::plain(EntryKind::Outcome, serde_json::json!({"fork": "cut"}))
}

/// The request of the record of which of `branches` won a race.
pub(crate) fn race_won(branches: usize) -> Request {
    Request::plain(EntryKind::Outcome, serde_json::json!({"race": branches}))
}

/// The error of an entry at `key` of the journal `name` that does not fit: `why`.
fn malformed(name: &str, key: &Key, why: &str) -> JournalError {
    JournalError::Malformed {
        journal: name.to_owned(),
        at: key.to_string(),
        cause: Cause::new(std::io::Error::other(why.to_owned())),
    }
}

/// The record of a deadline that cut a call or a fork off (an `Outcome` entry whose result
/// is `{"interrupted": {"scope": <position>, "exit": <how the scope ended>}, ..}`), as the
/// scope's position and its exit; `None` for any other entry.
fn cut(entry: &Entry) -> Option<(usize, Value)> {
    if entry.kind != EntryKind::Outcome {
        return None;
    }
    let mut result = parsed(&entry.result);
    let cut = result.get_mut("interrupted")?;
    let scope = usize::try_from(cut.get("scope")?.as_u64()?).ok()?;
    Some((
        scope,
        cut.get_mut("exit").map(Value::take).unwrap_or(Value::Null),
    ))
}

/// A recorded request or result as a JSON value, for the engine's own records (race
/// winners, cut-off calls, checkpoints); `null` if it does not parse, which those records
/// then lack what they need and are refused as not fitting.
fn parsed(json: &RawValue) -> Value {
    serde_json::from_str(json.get()).unwrap_or(Value::Null)
}

/// `value` as raw JSON text. The engine's own records hold only numbers, strings and
/// JSON values, which always serialize.
pub(crate) fn raw(value: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_default()
}
