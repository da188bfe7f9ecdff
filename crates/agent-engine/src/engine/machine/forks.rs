//! Forks: starting a `par` or `race`'s branches as child machines and joining them.

use std::any::Any;
use std::sync::Arc;

use agent_op::interp::{AnyValue, Feed, Fork, Node};
use agent_op::trace::event::{self, ForkKind};
use agent_op::{BoxFuture, EventKind, TraceId};

use super::{MAX_FORK_DEPTH, Machine, Stack, count};
use crate::engine::branch_log::BranchLog;
use crate::engine::journal::ForkRecord;
use crate::engine::scheduler::{BranchFuture, BranchOutcome, Scheduler};
use crate::engine::scope::ActiveScope;
use crate::engine::{Unwind, spans};
use crate::error::ErrorKind;

impl<S, Sch> Machine<S, Sch>
where
    S: Clone + Send + 'static,
    Sch: Scheduler,
{
    pub(super) fn branch(
        &self,
        log: Arc<BranchLog>,
        inherited: Arc<[ActiveScope]>,
        finish: fn(&mut dyn Any) -> AnyValue,
        span: tracing::Span,
        nest: tracing::Span,
    ) -> Self {
        Machine {
            rt: self.rt.clone(),
            id: log.id().clone(),
            log,
            state: self.state.clone(),
            stack: Stack::new(finish, inherited, false),
            iteration: self.iteration,
            forked: 0,
            ticks: 0,
            withheld: self.withheld.clone(),
            span,
            nest,
            seq: 0,
            effects: 0,
            doomed: self.doomed,
        }
    }

    /// Boxed with an explicit `Send` bound: the recursion machine → fork → branch machine would
    /// otherwise ask the compiler to prove `Send` for a future that contains itself.
    pub(super) fn fork(&mut self, fork: Fork<S>) -> BoxFuture<'_, Result<Node<S>, Unwind>> {
        Box::pin(self.fork_inner(fork))
    }

    pub(super) async fn fork_inner(&mut self, fork: Fork<S>) -> Result<Node<S>, Unwind> {
        let (kind, branches, finish, par) = match fork {
            Fork::Par {
                branches,
                finish,
                merge,
                collect,
            } => (ForkKind::Par, branches, finish, Some((merge, collect))),
            Fork::Race { branches, finish } => (ForkKind::Race, branches, finish, None),
            _ => return Err(self.unsupported("a kind of fork")),
        };
        if kind == ForkKind::Race && branches.is_empty() {
            return Err(self.fail(ErrorKind::EmptyRace));
        }
        if self.id.depth() >= MAX_FORK_DEPTH {
            return Err(self.fail(ErrorKind::ForksTooDeep {
                max: MAX_FORK_DEPTH,
            }));
        }
        let plan = self.fork_plan(kind, branches.len())?;
        let fork_seq = plan.seq;
        let recorded_winner = plan.winner;
        let Started {
            ids,
            logs,
            branch_spans,
            fork_span,
            futures,
        } = self.start_branches(kind, branches, finish, &plan);
        let scheduled = self.schedule(kind, &plan, futures);
        let scheduled = self.guarded(scheduled).await;
        let outcomes = self.scheduled(
            scheduled,
            fork_seq,
            plan.cut,
            &logs,
            &branch_spans,
            &fork_span,
        )?;
        let joined = match par {
            Some((merge, collect)) => self.join_par(ids, &logs, outcomes, merge, collect),
            None => self.join_race(ids, &logs, outcomes, &fork_span, fork_seq, recorded_winner),
        };
        for (log, span) in logs.iter().zip(&branch_spans) {
            if log.is_cancelled() {
                span.record("effect_agents.cancelled", true);
            }
        }
        if let Err(unwind) = &joined {
            spans::failed(&fork_span, unwind.kind_name());
        }
        spans::last_event(&fork_span, self.last_seq());
        joined
    }

    /// Records the fork and builds its branches' machines and futures. Apart from
    /// `fork_inner`, whose frame every level of a fork nest carries (in debug builds every
    /// temporary of an async body has its own stack slot).
    fn start_branches(
        &mut self,
        kind: ForkKind,
        branches: Vec<agent_op::interp::Subtree<S>>,
        finish: fn(&mut dyn Any) -> AnyValue,
        plan: &ForkPlan,
    ) -> Started<S> {
        let first = self.forked;
        self.forked += branches.len();
        let ids: Vec<TraceId> = (first..self.forked).map(|i| self.id.child(i)).collect();
        let enclosing = self.parent_span().clone();
        let fork_span = spans::fork(&enclosing, kind == ForkKind::Race, ids.len(), self.seq);
        let branch_spans: Vec<tracing::Span> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| spans::branch(&fork_span, id, i))
            .collect();
        self.record(EventKind::Fork(event::Fork {
            kind,
            branch_count: count(ids.len()),
            branch_ids: ids.clone(),
        }));
        let logs: Vec<Arc<BranchLog>> = ids
            .iter()
            .map(|id| BranchLog::new(id.clone(), Some(self.id.clone())))
            .collect();
        self.log.push_branches(logs.clone());
        let inherited: Arc<[ActiveScope]> = self.stack.all_scopes().cloned().collect();
        let futures: Vec<BranchFuture<S>> = branches
            .into_iter()
            .zip(&logs)
            .zip(&branch_spans)
            .enumerate()
            .map(|(i, ((node, log), span))| {
                let nest = spans::nest(span, &spans::nest(&fork_span, &enclosing));
                let mut machine =
                    self.branch(log.clone(), inherited.clone(), finish, span.clone(), nest);
                machine.doom_unless_decisive(plan, i);
                // Held as a `Subtree` until the branch starts: a branch cancelled before its
                // first poll drops its program without recursion.
                Box::pin(async move {
                    let result = machine.run_caught(node.into_node()).await;
                    machine.finish();
                    drop(machine.end_spans(&result));
                    BranchOutcome {
                        result,
                        state: machine.state,
                    }
                }) as BranchFuture<S>
            })
            .collect();
        Started {
            ids,
            logs,
            branch_spans,
            fork_span,
            futures,
        }
    }

    /// The journal position of a fork about to start (its effect number), and what the
    /// journal recorded about it: a race's winner, or where a deadline cut it off. A record
    /// that does not fit fails the fork before any branch starts. Apart from `fork_inner`,
    /// whose frame every level of a fork nest carries.
    fn fork_plan(&mut self, kind: ForkKind, branches: usize) -> Result<Box<ForkPlan>, Unwind> {
        let seq = self.next_effect();
        let mut plan = Box::new(ForkPlan {
            seq,
            winner: None,
            cut: None,
            finished: Vec::new(),
        });
        let Some(journal) = self.rt.journal.clone() else {
            return Ok(plan);
        };
        let key = journal.key(&self.id, seq);
        match journal.fork_record(&key, kind == ForkKind::Race, branches) {
            Ok(ForkRecord::None) => {}
            Ok(ForkRecord::Winner { winner, finished }) => {
                plan.winner = Some(winner);
                plan.finished = finished;
            }
            Ok(ForkRecord::Cut {
                scope,
                exit,
                finished,
            }) => {
                plan.cut = Some(Box::new(self.recorded_exit(&key, scope, exit)?));
                plan.finished = finished;
            }
            Err(failure) => return Err(self.fail(failure)),
        }
        Ok(plan)
    }

    /// What the scheduler returned, or how the fork was cut off: from outside (abort, a
    /// deadline: every branch still running is marked cancelled, and a durable run journals
    /// the cut) or, replaying, where the journal says. Apart from `fork_inner` for the same
    /// reason as `fork_plan`.
    fn scheduled(
        &mut self,
        result: Result<Vec<Option<BranchOutcome<S>>>, Unwind>,
        seq: u64,
        cut: Option<Box<Unwind>>,
        logs: &[Arc<BranchLog>],
        branch_spans: &[tracing::Span],
        fork_span: &tracing::Span,
    ) -> Result<Vec<Option<BranchOutcome<S>>>, Unwind> {
        let result = match (result, cut) {
            // Replaying a cut fork: the branches it had finished have finished again.
            (Ok(_), Some(cut)) => Err(*cut),
            (result, _) => result,
        };
        let unwind = match result {
            Ok(outcomes) => return Ok(outcomes),
            Err(unwind) => unwind,
        };
        self.journal_fork_cut(seq, &unwind, finished(logs));
        spans::failed(fork_span, unwind.kind_name());
        // Interrupted from outside: every branch still running was cancelled.
        for (log, span) in logs.iter().zip(branch_spans) {
            if !log.is_finished() {
                log.mark_cancelled();
                span.record("effect_agents.cancelled", true);
            }
        }
        Err(unwind)
    }

    /// The branches that lost a recorded race, or that a recorded cut caught unfinished:
    /// where their journal ends, they were cut off.
    fn doom_unless_decisive(&mut self, plan: &ForkPlan, index: usize) {
        let decided = plan.winner.is_some() || plan.cut.is_some();
        self.doomed |= decided && plan.winner != Some(index) && !plan.finished.contains(&index);
    }

    /// Hands the branches to the scheduler (a recorded race's winner, or a recorded cut,
    /// decides the fork whatever the scheduler).
    fn schedule(
        &self,
        kind: ForkKind,
        plan: &ForkPlan,
        futures: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        if plan.cut.is_some() {
            return Box::pin(replay_cut(futures, plan.finished.clone()));
        }
        match (kind, plan.winner) {
            (ForkKind::Race, Some(w)) => Box::pin(replay_race(futures, w)),
            (ForkKind::Race, None) => self.rt.scheduler.run_race(futures),
            // `kind` is one of the two `fork_inner` sets.
            _ => self.rt.scheduler.run_par(futures),
        }
    }

    /// Marks every branch after `decided` (and any branch that did not finish) cancelled: the
    /// sequential interpreter would never have started them.
    pub(super) fn discard_after(
        logs: &[Arc<BranchLog>],
        outcomes: &[Option<BranchOutcome<S>>],
        decided: usize,
    ) {
        for (i, (log, outcome)) in logs.iter().zip(outcomes).enumerate() {
            if i > decided || outcome.is_none() {
                log.mark_cancelled();
            }
        }
    }

    pub(super) fn join_par(
        &mut self,
        ids: Vec<TraceId>,
        logs: &[Arc<BranchLog>],
        outcomes: Vec<Option<BranchOutcome<S>>>,
        merge: fn(&mut S, S),
        collect: fn(Vec<AnyValue>, &mut dyn Feed<S>) -> Node<S>,
    ) -> Result<Node<S>, Unwind> {
        // Time and abort stop the fork wherever they happen; otherwise the first failure (or
        // exhausted budget) in declaration order decides.
        let interrupted = outcomes
            .iter()
            .position(|o| o.as_ref().is_some_and(BranchOutcome::interrupted));
        let failed = outcomes
            .iter()
            .position(|o| o.as_ref().is_some_and(|o| !o.succeeded()));
        if let Some(decided) = interrupted.or(failed) {
            Self::discard_after(logs, &outcomes, decided);
            let Some(Some(outcome)) = outcomes.into_iter().nth(decided) else {
                unreachable!("`decided` indexes a finished branch");
            };
            return Err(match outcome.result {
                // The run's failure, not the branch's: passed on as it is.
                Err(Unwind::Fail(error)) if error.fails_run() => Unwind::Fail(error),
                Err(Unwind::Fail(error)) => Unwind::Fail(ErrorKind::Branch {
                    id: ids[decided].clone(),
                    error: Box::new(error),
                }),
                Err(other) => other,
                Ok(_) => unreachable!("`decided` indexes an unsuccessful branch"),
            });
        }
        let mut values = Vec::with_capacity(outcomes.len());
        let mut merged: Option<S> = None;
        for outcome in outcomes {
            let Some(BranchOutcome {
                result: Ok(value),
                state,
            }) = outcome
            else {
                return Err(Unwind::Fail(ErrorKind::Internal(
                    "the scheduler dropped a par branch although none failed".into(),
                )));
            };
            values.push(value);
            match &mut merged {
                None => merged = Some(state),
                Some(acc) => merge(acc, state),
            }
        }
        if let Some(state) = merged {
            self.state = state;
        }
        self.record(EventKind::Join(event::Join {
            kind: ForkKind::Par,
            branch_ids: ids,
            winner: None,
        }));
        Ok(collect(values, &mut self.stack))
    }

    /// Decides a race from its branches' outcomes, and journals its winner (with the
    /// branches before it that had finished, failing). `seq` is the race's effect number
    /// and `recorded` the winner its journal recorded, if any.
    pub(super) fn join_race(
        &mut self,
        ids: Vec<TraceId>,
        logs: &[Arc<BranchLog>],
        outcomes: Vec<Option<BranchOutcome<S>>>,
        fork_span: &tracing::Span,
        seq: u64,
        recorded: Option<usize>,
    ) -> Result<Node<S>, Unwind> {
        let branches = outcomes.len();
        let decided = outcomes
            .iter()
            .position(|o| o.as_ref().is_some_and(BranchOutcome::interrupted))
            .or_else(|| {
                outcomes
                    .iter()
                    .position(|o| o.as_ref().is_some_and(BranchOutcome::decisive))
            });
        match decided {
            Some(decided) => {
                Self::discard_after(logs, &outcomes, decided);
                let failed_before: Vec<usize> = outcomes[..decided]
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.is_some())
                    .map(|(i, _)| i)
                    .collect();
                let Some(Some(outcome)) = outcomes.into_iter().nth(decided) else {
                    unreachable!("`decided` indexes a finished branch");
                };
                match outcome.result {
                    Ok(mut value) => {
                        self.journal_race_won(seq, branches, decided, failed_before);
                        spans::winner(fork_span, decided);
                        self.state = outcome.state;
                        self.record(EventKind::Join(event::Join {
                            kind: ForkKind::Race,
                            branch_ids: ids,
                            winner: Some(count(decided)),
                        }));
                        Ok(self.stack.feed(&mut *value))
                    }
                    Err(interrupt) => Err(interrupt),
                }
            }
            None => {
                if let Some(winner) = recorded {
                    // Replayed from the same answers, the recorded winner failed: the journal
                    // is not this program's.
                    let why = format!("it says branch {winner} won this race, but it failed");
                    return Err(
                        match self.rt.journal.as_ref().map(|j| j.key(&self.id, seq)) {
                            Some(key) => self.journal_misfit(&key, &why),
                            None => Unwind::Fail(ErrorKind::Internal(why)),
                        },
                    );
                }
                // Every branch failed: report the first.
                let first = outcomes.into_iter().next().flatten();
                match first.map(|o| o.result) {
                    Some(Err(Unwind::Fail(error))) => Err(Unwind::Fail(ErrorKind::Branch {
                        id: ids[0].clone(),
                        error: Box::new(error),
                    })),
                    _ => Err(Unwind::Fail(ErrorKind::Internal(
                        "the scheduler ended a race with neither a winner nor all failures".into(),
                    ))),
                }
            }
        }
    }
}

/// Runs a recorded race again: branches up to the recorded `winner` run concurrently until
/// the winner finishes (the others were cut off in the recording wherever their journal
/// ends, or failed); the winner decides it. A loser that succeeds here finished after the
/// race was decided in the recording, so it counts as cancelled, as it was.
async fn replay_race<S: Send + 'static>(
    branches: Vec<BranchFuture<S>>,
    winner: usize,
) -> Vec<Option<BranchOutcome<S>>> {
    use futures_util::stream::{FuturesUnordered, StreamExt};

    let mut outcomes: Vec<Option<BranchOutcome<S>>> = branches.iter().map(|_| None).collect();
    let mut running: FuturesUnordered<_> = branches
        .into_iter()
        .enumerate()
        .take(winner.saturating_add(1))
        .map(|(i, branch)| async move { (i, branch.await) })
        .collect();
    while let Some((i, outcome)) = running.next().await {
        if i == winner || !outcome.succeeded() {
            outcomes[i] = Some(outcome);
        }
        if i == winner {
            break;
        }
    }
    outcomes
}

/// What the journal recorded about a fork (see `Machine::fork_plan`).
struct ForkPlan {
    /// The fork's effect number in its branch.
    seq: u64,
    /// A replayed race's winner.
    winner: Option<usize>,
    /// A replayed cut: how the fork ends once `finished` have finished.
    cut: Option<Box<Unwind>>,
    finished: Vec<usize>,
}

/// The indices of the branches whose logs are finished.
fn finished(logs: &[Arc<BranchLog>]) -> Vec<usize> {
    logs.iter()
        .enumerate()
        .filter(|(_, log)| log.is_finished())
        .map(|(i, _)| i)
        .collect()
}

/// Runs a fork a deadline cut off in the recording, until the branches it had finished
/// have finished again (the others run until their journal ends, where they wait); then
/// the fork is cut off again, dropping them.
async fn replay_cut<S: Send + 'static>(
    branches: Vec<BranchFuture<S>>,
    finished: Vec<usize>,
) -> Vec<Option<BranchOutcome<S>>> {
    use futures_util::stream::{FuturesUnordered, StreamExt};

    let mut waiting = finished.len();
    let mut running: FuturesUnordered<_> = branches
        .into_iter()
        .enumerate()
        .map(|(i, branch)| async move { (i, branch.await) })
        .collect();
    while waiting > 0 {
        match running.next().await {
            Some((i, _)) if finished.contains(&i) => waiting -= 1,
            Some(_) => {}
            None => break,
        }
    }
    Vec::new()
}

/// A fork's branches, started (see `Machine::start_branches`).
struct Started<S> {
    ids: Vec<TraceId>,
    logs: Vec<Arc<BranchLog>>,
    branch_spans: Vec<tracing::Span>,
    fork_span: tracing::Span,
    futures: Vec<BranchFuture<S>>,
}
