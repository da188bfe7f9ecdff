//! [`Concurrent`]: runs the branches of a fork at the same time.

use std::cell::Cell;
use std::future::Future;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::task::{Context, Poll};

use agent_engine::{BranchFuture, BranchOutcome, Scheduler, Spawn};
use agent_op::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::task::coop::{consume_budget, unconstrained};

/// Runs every branch of a `par` or `race` concurrently, on the task that runs the program.
///
/// Branches are polled together (like `join_all`/`select`), so while one waits for a model or a
/// tool the others make progress; no branch is spawned, so dropping the run drops every branch
/// with it. (On tokio's multi-threaded runtime a durable run's journal commits run on a task
/// of their own, which the run waits for at its end: entries handed over before a run is
/// dropped are still committed, and a run that reads the same journal next waits for them.) CPU-heavy work belongs in tools that declare themselves
/// blocking ([`Tool::is_blocking`](agent_op::Tool::is_blocking)): the engine runs those on
/// tokio's blocking pool, where they cannot stall the other branches. (A blocking call that is
/// cancelled finishes on its thread; its result is discarded.) Long pure loops yield to the
/// scheduler cooperatively.
///
/// - `par`: all branches start at once (or as slots free up, with a concurrency limit, in
///   declaration order). When a branch fails or runs out of an enclosing budget, branches after
///   it are cancelled; branches before it are still awaited, so the error reported is always
///   that of the lowest index, as in the sequential interpreter. A branch stopped by time (an
///   enclosing `timeout` or time budget) or the abort token stops them all.
/// - `race`: the first branch to succeed wins; the others are cancelled and dropped before the
///   program continues. A branch that runs out of budget cancels the branches after it and
///   waits for those before it, which may still win.
#[derive(Copy, Clone, Debug, Default)]
pub struct Concurrent {
    limit: Option<NonZeroUsize>,
}

impl Concurrent {
    /// Runs all branches of a fork at once.
    pub fn new() -> Concurrent {
        Concurrent::default()
    }

    /// Runs at most `limit` branches of each fork at once.
    pub fn with_limit(limit: Option<NonZeroUsize>) -> Concurrent {
        Concurrent { limit }
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Mode {
    Par,
    Race,
}

impl Scheduler for Concurrent {
    fn is_concurrent(&self) -> bool {
        true
    }

    /// On the tokio runtime the run starts on, if it is a multi-threaded one: its workers
    /// run the task while this one polls the branches. (A current-thread runtime gains
    /// nothing from it, and one entered without being driven would never run it.)
    fn spawner(&self) -> Option<Spawn> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        Some(std::sync::Arc::new(move |task| drop(runtime.spawn(task))))
    }

    fn run_par<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        Box::pin(run_all(branches, self.limit, Mode::Par))
    }

    fn run_race<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        Box::pin(run_all(branches, self.limit, Mode::Race))
    }
}

/// A branch with its position in the fork, so the scheduler can tell which branches are still
/// in flight.
struct Indexed<S> {
    index: usize,
    branch: BranchFuture<S>,
}

impl<S> Future for Indexed<S> {
    type Output = (usize, BranchOutcome<S>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let index = self.index;
        poll_unconstrained(self.branch.as_mut(), cx).map(|outcome| (index, outcome))
    }
}

thread_local! {
    /// Whether this thread is polling a branch outside tokio's coop budget already.
    static UNCONSTRAINED: Cell<bool> = const { Cell::new(false) };
}

/// Polls a branch outside tokio's coop budget.
///
/// The budget belongs to the task, and every branch of a fork runs in the task that runs the
/// program: once a few branches had spent it, every other timer, socket or channel polled in
/// that turn would report "not ready" and ask to be polled again, so a fork of thousands of
/// branches would advance only ~128 resource polls per turn of the task and spend most of
/// its time going round the runtime (a 10,000-branch fan-out took about twice as long).
/// Fairness does not rest on the budget: a machine yields on its own every few thousand
/// nodes, and [`run_all`] spends the task's budget per branch that finishes.
///
/// Nested forks are already outside the budget; only the outermost one steps out of it, so
/// deep nesting costs no extra stack per level.
fn poll_unconstrained<F: Future + ?Sized>(
    branch: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    if UNCONSTRAINED.with(Cell::get) {
        return branch.poll(cx);
    }
    /// Clears the flag however the poll ends.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            UNCONSTRAINED.with(|flag| flag.set(false));
        }
    }
    UNCONSTRAINED.with(|flag| flag.set(true));
    let _reset = Reset;
    let mut outside = unconstrained(branch);
    Pin::new(&mut outside).poll(cx)
}

async fn run_all<S>(
    branches: Vec<BranchFuture<S>>,
    limit: Option<NonZeroUsize>,
    mode: Mode,
) -> Vec<Option<BranchOutcome<S>>> {
    let n = branches.len();
    let mut outcomes: Vec<Option<BranchOutcome<S>>> = Vec::with_capacity(n);
    outcomes.resize_with(n, || None);
    let slots = limit.map_or(usize::MAX, NonZeroUsize::get);
    let mut waiting = branches.into_iter().enumerate();
    let mut running = FuturesUnordered::new();
    // In a par, the lowest index that failed: later branches are no longer needed.
    let mut cutoff = n;
    loop {
        while running.len() < slots {
            let Some((index, branch)) = waiting.next() else {
                break;
            };
            if index < cutoff {
                running.push(Indexed { index, branch });
            }
        }
        let Some((i, outcome)) = running.next().await else {
            break;
        };
        // Branches finishing in a burst yield the task now and then to the rest of the
        // runtime.
        consume_budget().await;
        let stop = if outcome.interrupted() || (mode == Mode::Race && outcome.succeeded()) {
            true
        } else {
            // A par branch that failed, or any branch that ran out of budget or failed the
            // run, decides the fork
            // unless a branch before it does: cancel the branches after it, keep awaiting the
            // ones before (rare, so rebuilding the set is fine).
            let decisive = match mode {
                Mode::Par => !outcome.succeeded(),
                Mode::Race => outcome.exhausted() || outcome.fails_run(),
            };
            if decisive && i < cutoff {
                cutoff = i;
                running = std::mem::take(&mut running)
                    .into_iter()
                    .filter(|branch| branch.index < cutoff)
                    .collect();
            }
            false
        };
        outcomes[i] = Some(outcome);
        if stop {
            break;
        }
    }
    // Dropping `running` drops every branch still in flight, with its requests and tool calls,
    // before the program continues.
    drop(running);
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_get_a_task_of_their_own_only_on_a_multi_threaded_runtime() {
        assert!(Concurrent::new().spawner().is_none(), "outside a runtime");
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let entered = current.enter();
        assert!(
            Concurrent::new().spawner().is_none(),
            "on a current-thread runtime"
        );
        drop(entered);
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawn = multi.block_on(async { Concurrent::new().spawner() });
        let spawn = spawn.expect("on a multi-threaded runtime");
        spawn(Box::pin(async move { tx.send(()).unwrap() }));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the spawned task ran on the runtime's workers");
    }
}
