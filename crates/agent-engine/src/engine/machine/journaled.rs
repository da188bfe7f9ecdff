//! A machine's side of journaling: asking the journal before an effect, committing a live
//! result before the program sees it.

use std::sync::Arc;

use agent_op::journal::{Entry, EntryKind, JournalError, Key, Request};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use agent_op::{Prompt, ProviderError, Response};

use super::Machine;
use crate::engine::Unwind;
use crate::engine::commit::{Deferred, ModelCall};
use crate::engine::journal::{
    Journaling, Lookup, Requested, cut_off, fork_cut, race_won, raw, unavailable,
};
use crate::engine::scheduler::Scheduler;
use crate::engine::scope::ScopeExit;
use crate::error::ErrorKind;

/// How to answer an effect.
pub(super) enum Answer {
    /// The run keeps no journal: run the effect.
    Off,
    /// The journal's answer: the entry's result.
    Replayed(Arc<Entry>),
    /// Run the effect, then commit its result here (if the run has a sink).
    Live(Box<Pending>),
    /// A model call, the branch's effect number `seq`, in a durable run whose journal held
    /// nothing (see [`Journaling::fresh`]): run it, then commit its result with
    /// [`Machine::journal_model_entry`], which has its key and request made where it is
    /// committed. Only given when a provider is there to run it.
    LiveModel { seq: u64 },
    /// The recording was cut off here by a deadline: end the same way.
    Interrupted(Box<Unwind>),
    /// The recording lacked what the effect needs and failed here: fail the same way (see
    /// [`Machine::missing_handler`]).
    Unavailable(Arc<Entry>),
}

impl Answer {
    /// Whether the effect can go on with its handler (provider, tool, memory backend)
    /// `present` or not: a recorded answer needs none, a live one needs it, and a recorded
    /// failure for lack of it fails again (see [`Machine::missing_handler`]).
    pub(super) fn suffices(&self, present: bool) -> bool {
        match self {
            Answer::Replayed(_) | Answer::Interrupted(_) => true,
            Answer::Live(_) | Answer::LiveModel { .. } | Answer::Off => present,
            Answer::Unavailable(_) => false,
        }
    }

    /// The recorded interruption, as the effect's await would have returned it.
    pub(super) fn interrupted(&self) -> Option<Unwind> {
        match self {
            Answer::Interrupted(unwind) => Some((**unwind).clone()),
            _ => None,
        }
    }
}

/// What a model call's result needs before the program sees it (see
/// [`Machine::journal_model_entry`]).
pub(super) enum ModelAnswer {
    /// Nothing: the model name and result, given back.
    Done(String, Result<Response, ProviderError>),
    /// The entry to commit ([`Machine::journal_append`]), and the call it records: once
    /// committed, the call comes back out of its `Arc` unshared (the committer lets go of
    /// its share when it makes the entry). The committer serializes the result and makes
    /// the key and request, without copying the call, and what the branch allocated is freed
    /// on its own thread.
    Commit(Deferred, Arc<ModelCall>),
}

/// Where a live result is committed.
pub(super) struct Pending {
    key: Key,
    request: Requested,
}

impl<S, Sch> Machine<S, Sch>
where
    S: Clone + Send + 'static,
    Sch: Scheduler,
{
    /// Numbers the next journaled effect of this branch (its [`Key::seq`]).
    pub(super) fn next_effect(&mut self) -> u64 {
        let n = self.effects;
        self.effects += 1;
        n
    }

    /// Asks the journal about this branch's next effect. `request` is made only when the
    /// run keeps a journal (a model call's [`Requested::Model`] is built further only where
    /// it is needed).
    pub(super) async fn journal_answer<R: Into<Requested>>(
        &mut self,
        request: impl FnOnce() -> R,
    ) -> Result<Answer, Unwind> {
        let n = self.next_effect();
        let Some(journal) = self.rt.journal.clone() else {
            return Ok(Answer::Off);
        };
        let key = journal.key(&self.id, n);
        let found = match journal.lookup(key, request().into(), self.doomed) {
            Ok(found) => found,
            Err(failure) => return Err(self.fail(failure)),
        };
        // A live effect with nothing queued before it (every effect of a fresh durable run)
        // has nothing to wait for: answered here, without the future below.
        let found = match found {
            (Lookup::Live { key, request }, None) if !journal.has_queued() => {
                return Ok(Answer::Live(Box::new(Pending { key, request })));
            }
            found => found,
        };
        // Boxed: every effect's future (and every branch's) would otherwise carry it.
        Box::pin(self.journal_found(journal, found)).await
    }

    /// The journal's answer to this branch's next effect, a model call that a provider is
    /// `present` to run, when it can be given without asking the journal: in a fresh durable
    /// run (see [`Journaling::fresh`]), [`Answer::LiveModel`], without the call's key or
    /// request built here. `None`: ask it ([`journal_answer`](Machine::journal_answer)).
    pub(super) fn journal_fresh_model(&mut self, present: bool) -> Option<Answer> {
        let journal = self.rt.journal.as_ref()?;
        if !present || journal.has_queued() || !journal.fresh(self.doomed) {
            return None;
        }
        Some(Answer::LiveModel {
            seq: self.next_effect(),
        })
    }

    /// What the journal answered, once what it needs first is committed.
    async fn journal_found(
        &mut self,
        journal: Arc<Journaling>,
        found: (Lookup, Option<Entry>),
    ) -> Result<Answer, Unwind> {
        match found {
            (Lookup::Replayed(value), copy) => {
                if let Some(entry) = copy {
                    self.journal_append(Deferred::Entry(entry)).await?;
                }
                Ok(Answer::Replayed(value))
            }
            (Lookup::Live { key, request }, _) => {
                // Race outcomes, checkpoint markers and cut-off calls queued before this
                // effect are committed before it starts, not with its result: the effect
                // may take long, or never end in this process (a Temporal run continuing
                // as new stops at its next effect), and a resumed run must not decide again
                // what was decided before it.
                if let Err(error) = journal.flush().await {
                    return Err(self.fail(ErrorKind::Journal(Box::new(error))));
                }
                Ok(Answer::Live(Box::new(Pending { key, request })))
            }
            (Lookup::Interrupted { key, scope, exit }, copy) => {
                if let Some(entry) = copy {
                    self.journal_append(Deferred::Entry(entry)).await?;
                }
                let unwind = self.recorded_exit(&key, scope, exit)?;
                Ok(Answer::Interrupted(Box::new(unwind)))
            }
            (Lookup::Unavailable(recorded), copy) => {
                if let Some(entry) = copy {
                    self.journal_append(Deferred::Entry(entry)).await?;
                }
                Ok(Answer::Unavailable(recorded))
            }
            (Lookup::Park, _) => {
                // A race loser cut off here when the race was recorded: wait to be cancelled
                // (its race is decided by the recorded winner) or interrupted.
                self.guarded(std::future::pending::<()>()).await?;
                Err(Unwind::Fail(ErrorKind::Internal(
                    "a parked race branch resumed".into(),
                )))
            }
        }
    }

    /// The effect `answer` is for cannot go on: it would run live without the handler it
    /// needs (a provider, a tool, a memory backend), or the recorded run failed here for lack
    /// of it (see [`Answer::suffices`]). Returns what the failure reports, as JSON text: what
    /// the journal recorded, or `details()` (the tools the run permits), committed first for
    /// a live answer so a replay fails the same way with nothing configured.
    pub(super) async fn missing_handler(
        &mut self,
        answer: &mut Answer,
        details: impl FnOnce(&Self) -> Value,
    ) -> Result<Box<RawValue>, Unwind> {
        if let Answer::Unavailable(recorded) = answer {
            return Ok(recorded.result.clone());
        }
        // (An `Answer::LiveModel` is never here: it is given only when a provider is.)
        let details = raw(&details(self));
        let has_sink = self.rt.journal.as_ref().is_some_and(|j| j.has_sink());
        if let (true, Answer::Live(pending)) = (has_sink, std::mem::replace(answer, Answer::Off)) {
            let Pending { key, request } = *pending;
            let entry = unavailable(&request.quick()).entry(key, details.clone());
            self.journal_append(Deferred::Entry(entry)).await?;
        }
        Ok(details)
    }

    /// Commits a live result (write-ahead: before the program sees it), if the run has a
    /// sink. A model call's goes through [`journal_model_entry`](Machine::journal_model_entry).
    pub(super) async fn journal_commit<T: Serialize>(
        &mut self,
        answer: &mut Answer,
        result: &T,
    ) -> Result<(), Unwind> {
        if matches!(answer, Answer::LiveModel { .. }) {
            return Err(self.fail(ErrorKind::Internal(
                "a model call's answer was committed as another effect's".into(),
            )));
        }
        if !matches!(answer, Answer::Live(_)) {
            return Ok(());
        }
        let has_sink = self.rt.journal.as_ref().is_some_and(|j| j.has_sink());
        if !has_sink {
            return Ok(());
        }
        let Answer::Live(pending) = std::mem::replace(answer, Answer::Off) else {
            return Ok(());
        };
        // Serialized once, into the text the journal stores.
        let value = match serde_json::value::to_raw_value(result) {
            Ok(value) => value,
            Err(e) => {
                return Err(self.fail(ErrorKind::Internal(format!(
                    "a result could not be journaled: {e}"
                ))));
            }
        };
        let Pending { key, request } = *pending;
        let entry = request.entry(key, value);
        Box::pin(self.journal_append(entry)).await
    }

    /// What a model call's result needs before the program sees it: nothing (the run keeps
    /// no sink, or the call was answered from the journal), or, for a live call,
    /// its entry committed (write-ahead; see [`ModelAnswer::Commit`]).
    pub(super) fn journal_model_entry(
        &self,
        answer: &mut Answer,
        prompt: &Arc<Prompt>,
        model: String,
        result: Result<Response, ProviderError>,
    ) -> ModelAnswer {
        let has_sink = self.rt.journal.as_ref().is_some_and(|j| j.has_sink());
        let (seq, request) = match std::mem::replace(answer, Answer::Off) {
            Answer::LiveModel { seq } if has_sink => (seq, None),
            Answer::Live(pending) if has_sink => {
                let Pending { key, request } = *pending;
                (key.seq, request.built())
            }
            other => {
                *answer = other;
                return ModelAnswer::Done(model, result);
            }
        };
        let call = Arc::new(ModelCall { model, result });
        let entry = Deferred::Model {
            branch: self.id.clone(),
            seq,
            request,
            prompt: Arc::clone(prompt),
            call: Arc::clone(&call),
        };
        ModelAnswer::Commit(entry, call)
    }

    /// Commits `entry` to the run's sink.
    pub(super) async fn journal_append(&mut self, entry: Deferred) -> Result<(), Unwind> {
        let Some(journal) = self.rt.journal.clone().filter(|j| j.has_sink()) else {
            return Ok(());
        };
        // Queued markers and race outcomes go first: they happened before this. Chained, not
        // pushed: with nothing queued, a push would allocate a list for the one entry.
        let entries = journal
            .take_queued()
            .into_iter()
            .chain(std::iter::once(entry));
        // Not guarded: once the effect happened, its entry is committed even if a deadline
        // passes meanwhile (the deadline is seen right after).
        match journal.commit(entries).await {
            Ok(()) => Ok(()),
            Err(error) => Err(self.fail(ErrorKind::Journal(Box::new(error)))),
        }
    }

    /// Queues the record that the live call `answer` was cut off by `unwind` (a deadline or
    /// a time budget), so a replay cuts it off at the same call.
    pub(super) fn journal_interrupted(&mut self, answer: &Answer, unwind: &Unwind) {
        let (Some(journal), Some(cut)) = (self.rt.journal.clone(), self.stored_cut(unwind)) else {
            return;
        };
        let (key, kind) = match answer {
            Answer::Live(pending) => (pending.key.clone(), pending.request.kind()),
            Answer::LiveModel { seq } => (journal.key(&self.id, *seq), EntryKind::Model),
            _ => return,
        };
        journal.queue(
            key,
            || cut_off(kind),
            serde_json::json!({"interrupted": cut}),
        );
    }

    /// How `unwind` ended a call or fork, as a journal records it: the position of the
    /// scope among those in force and how it ended. `None` unless a scope's deadline or
    /// budget ended it.
    fn stored_cut(&self, unwind: &Unwind) -> Option<Value> {
        let Unwind::Exit { scope, exit } = unwind else {
            return None;
        };
        let index = self.stack.all_scopes().position(|s| s.id == *scope)?;
        let stored = match exit {
            ScopeExit::TimedOut(t) => StoredExit::TimedOut(t.clone()),
            ScopeExit::Exhausted(e) => StoredExit::Exhausted(e.clone()),
        };
        let exit = serde_json::to_value(stored).ok()?;
        Some(serde_json::json!({"scope": index, "exit": exit}))
    }

    /// The exit the journal recorded at `key`: `scope`'s position among the scopes in force,
    /// and how it ended. A record that does not parse, or names a scope that is not in force,
    /// does not fit the program: a journal error.
    pub(super) fn recorded_exit(
        &mut self,
        key: &Key,
        scope: usize,
        exit: Value,
    ) -> Result<Unwind, Unwind> {
        let exit = match serde_json::from_value::<StoredExit>(exit) {
            Ok(StoredExit::TimedOut(t)) => ScopeExit::TimedOut(t),
            Ok(StoredExit::Exhausted(e)) => ScopeExit::Exhausted(e),
            Err(e) => {
                let why = format!("its record of how a scope ended does not parse: {e}");
                return Err(self.journal_misfit(key, &why));
            }
        };
        let id = self.stack.all_scopes().nth(scope).map(|active| active.id);
        match id {
            Some(id) => Ok(Unwind::Exit { scope: id, exit }),
            None => {
                let why = format!(
                    "it says scope {scope} cut this off, but only {} are in force here",
                    self.stack.all_scopes().count()
                );
                Err(self.journal_misfit(key, &why))
            }
        }
    }

    /// Fails the run: the journal's entry at `key` does not fit the program (`why`).
    pub(super) fn journal_misfit(&mut self, key: &Key, why: &str) -> Unwind {
        let failure = match &self.rt.journal {
            Some(journal) => journal.misfit(key, why),
            None => ErrorKind::Internal(format!("a journal entry without a journal: {why}")),
        };
        self.fail(failure)
    }

    /// Queues the record that the fork that is this branch's effect number `seq` was cut
    /// off by `unwind` (a deadline or time budget of an enclosing scope) once the branches
    /// `finished` had finished, so a replay cuts it off at the same point.
    pub(super) fn journal_fork_cut(&mut self, seq: u64, unwind: &Unwind, finished: Vec<usize>) {
        let (Some(journal), Some(cut)) = (self.rt.journal.clone(), self.stored_cut(unwind)) else {
            return;
        };
        journal.queue(
            journal.key(&self.id, seq),
            fork_cut,
            serde_json::json!({"interrupted": cut, "finished": finished}),
        );
    }

    /// A replayed result as the effect's type (the one numbered last in this branch): one
    /// that is not of that type does not fit the program, a journal error.
    pub(super) fn journal_decode<T: DeserializeOwned>(
        &mut self,
        value: &RawValue,
    ) -> Result<T, Unwind> {
        serde_json::from_str(value.get()).map_err(|e| {
            let journal = self.rt.journal.as_ref();
            let at = journal.map(|j| j.key(&self.id, self.effects.saturating_sub(1)));
            let journal = journal.map_or("being replayed", |j| j.name()).to_owned();
            self.fail(ErrorKind::Journal(Box::new(JournalError::Malformed {
                journal,
                at: at.map_or_else(String::new, |key| key.to_string()),
                cause: agent_op::Cause::new(e),
            })))
        })
    }

    /// Queues the marker of a checkpoint, this branch's effect number `seq` (what
    /// `resume_from` cuts the journal at). Committed with the next entry of the run (or at
    /// its end), so before anything that happened after the checkpoint.
    pub(super) fn journal_checkpoint(&mut self, seq: u64, checkpoint: &agent_op::Checkpoint) {
        let Some(journal) = self.rt.journal.clone() else {
            return;
        };
        journal.queue(
            journal.key(&self.id, seq),
            || {
                Request::plain(
                    EntryKind::Checkpoint,
                    serde_json::json!({"checkpoint": checkpoint.name}),
                )
            },
            serde_json::json!({"events": checkpoint.events}),
        );
    }

    /// Queues which branch won the race that is this branch's effect number `seq`, and
    /// which branches before it had `finished` (failing) by then (the others were cut off):
    /// committed with the next entry of the run (or at its end), so before anything that
    /// depends on the winner.
    pub(super) fn journal_race_won(
        &mut self,
        seq: u64,
        branches: usize,
        winner: usize,
        finished: Vec<usize>,
    ) {
        let Some(journal) = self.rt.journal.clone() else {
            return;
        };
        journal.queue(
            journal.key(&self.id, seq),
            || race_won(branches),
            serde_json::json!({"winner": winner, "finished": finished}),
        );
    }
}

/// How a scope ended a call, as journaled.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum StoredExit {
    TimedOut(agent_op::TimedOut),
    Exhausted(agent_op::Exhausted),
}
