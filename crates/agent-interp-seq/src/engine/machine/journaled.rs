//! A machine's side of journaling: asking the journal before an effect, committing a live
//! result before the program sees it.

use agent_op::journal::{Entry, EntryKind, JournalError, Key, Request};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Machine;
use crate::engine::Unwind;
use crate::engine::journal::Lookup;
use crate::engine::scheduler::Scheduler;
use crate::engine::scope::ScopeExit;
use crate::error::ErrorKind;

/// How to answer an effect.
pub(super) enum Answer {
    /// The run keeps no journal: run the effect.
    Off,
    /// The journal's answer (boxed: every effect's future holds an `Answer`).
    Replayed(Box<Value>),
    /// Run the effect, then commit its result here (if the run has a sink).
    Live(Box<Pending>),
    /// The recording was cut off here by a deadline: end the same way.
    Interrupted(Box<Unwind>),
}

impl Answer {
    /// The recorded interruption, as the effect's await would have returned it.
    pub(super) fn interrupted(&self) -> Option<Unwind> {
        match self {
            Answer::Interrupted(unwind) => Some((**unwind).clone()),
            _ => None,
        }
    }
}

/// Where a live result is committed.
pub(super) struct Pending {
    key: Key,
    request: Request,
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

    /// Asks the journal about this branch's next effect. `request` is built only when the
    /// run keeps a journal.
    pub(super) async fn journal_answer(
        &mut self,
        request: impl FnOnce() -> Request,
    ) -> Result<Answer, Unwind> {
        self.journal_answer_summarized(request, || Value::Null)
            .await
    }

    /// Like [`journal_answer`](Machine::journal_answer), for a request built without its
    /// summary: `summarize` builds it where it is needed (a new entry, a divergence).
    pub(super) async fn journal_answer_summarized(
        &mut self,
        request: impl FnOnce() -> Request,
        summarize: impl Fn() -> Value + Send + Sync,
    ) -> Result<Answer, Unwind> {
        let n = self.next_effect();
        if self.rt.journal.is_none() {
            return Ok(Answer::Off);
        }
        // Boxed: every effect's future (and every branch's) would otherwise carry it.
        let request = request();
        Box::pin(self.journal_lookup(n, request, &summarize)).await
    }

    async fn journal_lookup(
        &mut self,
        n: u64,
        request: Request,
        summarize: &(dyn Fn() -> Value + Send + Sync),
    ) -> Result<Answer, Unwind> {
        let Some(journal) = self.rt.journal.clone() else {
            return Ok(Answer::Off);
        };
        let key = journal.key(&self.id, n);
        match journal.lookup(key, request, self.doomed, summarize) {
            Ok((Lookup::Replayed(value), copy)) => {
                if let Some(entry) = copy {
                    self.journal_append(entry).await?;
                }
                Ok(Answer::Replayed(Box::new(value)))
            }
            Ok((Lookup::Live { key, request }, _)) => {
                Ok(Answer::Live(Box::new(Pending { key, request })))
            }
            Ok((Lookup::Interrupted { scope, exit }, copy)) => {
                if let Some(entry) = copy {
                    self.journal_append(entry).await?;
                }
                let unwind = self.recorded_exit(scope, exit)?;
                Ok(Answer::Interrupted(Box::new(unwind)))
            }
            Ok((Lookup::Park, _)) => {
                // A race loser cut off here when the race was recorded: wait to be cancelled
                // (its race is decided by the recorded winner) or interrupted.
                self.guarded(std::future::pending::<()>()).await?;
                Err(Unwind::Fail(ErrorKind::Internal(
                    "a parked race branch resumed".into(),
                )))
            }
            Err(divergence) => Err(self.fail(ErrorKind::Divergence(divergence))),
        }
    }

    /// Commits a live result (write-ahead: before the program sees it), if the run has a
    /// sink.
    pub(super) async fn journal_commit<T: Serialize>(
        &mut self,
        answer: &mut Answer,
        result: &T,
    ) -> Result<(), Unwind> {
        if !matches!(answer, Answer::Live(_)) {
            return Ok(());
        }
        let has_sink = self.rt.journal.as_ref().is_some_and(|j| j.sink().is_some());
        if !has_sink {
            return Ok(());
        }
        let Answer::Live(pending) = std::mem::replace(answer, Answer::Off) else {
            return Ok(());
        };
        let value = match serde_json::to_value(result) {
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

    /// Appends `entry` to the run's sink.
    pub(super) async fn journal_append(&mut self, entry: Entry) -> Result<(), Unwind> {
        let Some(sink) = self.rt.journal.as_ref().and_then(|j| j.sink().cloned()) else {
            return Ok(());
        };
        // Queued markers and race outcomes go first: they happened before this.
        let mut entries = self
            .rt
            .journal
            .as_ref()
            .map(|j| j.take_queued())
            .unwrap_or_default();
        entries.push(entry);
        // Not guarded: once the effect happened, its entry is committed even if a deadline
        // passes meanwhile (the deadline is seen right after).
        match sink.append(entries).await {
            Ok(()) => Ok(()),
            Err(error) => Err(self.fail(ErrorKind::Journal(Box::new(error)))),
        }
    }

    /// Queues the record that the live call `answer` was cut off by `unwind` (a deadline or
    /// a time budget), so a replay cuts it off at the same call.
    pub(super) fn journal_interrupted(&mut self, answer: &Answer, unwind: &Unwind) {
        let Answer::Live(pending) = answer else {
            return;
        };
        let (Some(journal), Some(cut)) = (self.rt.journal.clone(), self.stored_cut(unwind)) else {
            return;
        };
        let kind = pending.request.kind;
        journal.queue(
            pending.key.clone(),
            || Request::plain(EntryKind::Outcome, serde_json::json!({"cut_off": kind})),
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

    /// The exit a journal recorded: `scope`'s position among the scopes in force, and how
    /// it ended.
    pub(super) fn recorded_exit(&mut self, scope: usize, exit: Value) -> Result<Unwind, Unwind> {
        let exit = match serde_json::from_value::<StoredExit>(exit) {
            Ok(StoredExit::TimedOut(t)) => ScopeExit::TimedOut(t),
            Ok(StoredExit::Exhausted(e)) => ScopeExit::Exhausted(e),
            Err(e) => {
                return Err(self.fail(ErrorKind::Internal(format!(
                    "a journaled interruption does not parse: {e}"
                ))));
            }
        };
        let id = self.stack.all_scopes().nth(scope).map(|active| active.id);
        match id {
            Some(id) => Ok(Unwind::Exit { scope: id, exit }),
            None => Err(self.fail(ErrorKind::Internal(format!(
                "the journal says scope {scope} cut this off, but only {} are in force",
                self.stack.all_scopes().count()
            )))),
        }
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
            || Request::plain(EntryKind::Outcome, serde_json::json!({"fork": "cut"})),
            serde_json::json!({"interrupted": cut, "finished": finished}),
        );
    }

    /// A replayed result as the effect's type.
    pub(super) fn journal_decode<T: DeserializeOwned>(
        &mut self,
        value: Value,
    ) -> Result<T, Unwind> {
        serde_json::from_value(value).map_err(|e| {
            let journal = self
                .rt
                .journal
                .as_ref()
                .and_then(|j| j.sink().map(|s| s.describe()))
                .unwrap_or_else(|| "being replayed".to_owned());
            self.fail(ErrorKind::Journal(Box::new(JournalError::Malformed {
                journal,
                at: format!("{} effect {}", self.id, self.effects.saturating_sub(1)),
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

    /// Queues which branch won the race that is this branch's effect number `seq`:
    /// committed with the next entry of the run (or at its end), so before anything that
    /// depends on the winner.
    pub(super) fn journal_race_won(&mut self, seq: u64, branches: usize, winner: usize) {
        let Some(journal) = self.rt.journal.clone() else {
            return;
        };
        journal.queue(
            journal.key(&self.id, seq),
            || Request::plain(EntryKind::Outcome, serde_json::json!({"race": branches})),
            serde_json::json!({"winner": winner}),
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
