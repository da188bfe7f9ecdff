//! Branch schedulers: how the branches of a `par` or `race` are run.
//!
//! The engine is the same for every interpreter; only this decides whether branches run one
//! after another (`agent-interp-seq`'s `Sequential`, the reference semantics) or
//! concurrently (`agent-interp-par`'s `Concurrent`). The engine, not the scheduler, decides
//! the outcome from what the scheduler returns, so every interpreter reports the same
//! result, error, state and trace for the same program.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agent_op::BoxFuture;
use agent_op::interp::AnyValue;

use agent_op::Resource;

use crate::engine::Unwind;
use crate::engine::scope::ScopeExit;

/// Starts a task beside a run's branches, to run to its end on its own (see
/// [`Scheduler::spawner`]).
pub type Spawn = Arc<dyn Fn(BoxFuture<'static, ()>) + Send + Sync>;

/// One branch, ready to run: a future that runs the branch's program to its end.
pub type BranchFuture<S> = Pin<Box<dyn Future<Output = BranchOutcome<S>> + Send>>;

/// How a branch ended.
pub struct BranchOutcome<S> {
    pub(crate) result: Result<AnyValue, Unwind>,
    pub(crate) state: S,
}

impl<S> BranchOutcome<S> {
    /// The branch returned a value.
    pub fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    /// The branch failed in a way a `race` may recover from (the program failed: a provider
    /// error, an unknown tool, `fail`, ...).
    pub fn failed(&self) -> bool {
        matches!(&self.result, Err(Unwind::Fail(kind)) if !kind.fails_run())
    }

    /// The branch hit a failure of the whole run (a divergence from the journal, a journal
    /// that failed: [`ErrorKind::fails_run`](crate::ErrorKind::fails_run)). Like running
    /// out of budget, no fork recovers from it, and it is ordered like a failure.
    pub fn fails_run(&self) -> bool {
        matches!(&self.result, Err(Unwind::Fail(kind)) if kind.fails_run())
    }

    /// The branch ran out of an enclosing budget (calls, tokens or cost). The fork cannot
    /// recover from that, but it is ordered like a failure: the branch that comes first in
    /// declaration order decides, so branches before this one must still be awaited.
    pub fn exhausted(&self) -> bool {
        matches!(
            &self.result,
            Err(Unwind::Exit { exit: ScopeExit::Exhausted(e), .. }) if e.resource != Resource::Time
        )
    }

    /// The branch was stopped by time or by the abort token (an enclosing `timeout`, a time
    /// budget, an abort): the whole fork must stop at once.
    pub fn interrupted(&self) -> bool {
        matches!(self.result, Err(Unwind::Exit { .. } | Unwind::Aborted)) && !self.exhausted()
    }

    /// The branch decides its fork's outcome unless a branch before it does: it succeeded,
    /// ran out of budget, failed the run or was interrupted (only a plain failure lets a
    /// `race` go on).
    pub(crate) fn decisive(&self) -> bool {
        !self.failed()
    }
}

/// Runs the branches of forks. Implementations decide only *when* branches run; see each
/// method for what they must guarantee.
pub trait Scheduler: Send + Sync + 'static {
    /// Whether machines yield to tokio now and then (tokio's cooperative budget, and a
    /// `yield_now` every few thousand nodes of a long pure loop), so that they do not starve
    /// other tasks. An executor that is not tokio's, where a machine waking itself is not
    /// allowed (a Temporal workflow), turns it off.
    const YIELDS: bool = true;

    /// Whether this scheduler runs branches concurrently. Context sources of `op::infer`
    /// then run concurrently too (the result does not depend on it).
    fn is_concurrent(&self) -> bool {
        false
    }

    /// How to start work beside the run's branches, if this scheduler allows it: a durable
    /// run's journal commits then happen on a task of their own (on another thread, with
    /// tokio's multi-threaded runtime), which builds and appends the entries the branches
    /// hand over while they go on. The spawned task must run even while the run is not
    /// polled (a multi-threaded runtime's workers). `None` (the default): nothing is
    /// spawned, and each branch
    /// commits its own entries (`Sequential`, a Temporal workflow, where the workflow's
    /// thread must do all the work). Asked once, when a journaled run starts.
    fn spawner(&self) -> Option<Spawn> {
        None
    }

    /// Runs the branches of a `par`. Returns one entry per branch, in declaration order: the
    /// outcome of each branch that ran to its end, `None` for branches cancelled or never
    /// started.
    ///
    /// Every branch must run to its end, except: once a branch has failed or run out of budget
    /// ([`BranchOutcome::exhausted`]), branches *after* it may be cancelled (dropped); branches
    /// before it must still be awaited. A branch [interrupted](BranchOutcome::interrupted) by
    /// time or the abort token stops everything at once.
    fn run_par<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>>;

    /// Runs the branches of a `race`. Returns one entry per branch, as for `run_par`.
    ///
    /// Must stop as soon as one branch succeeds or is interrupted (cancelling the others).
    /// Once a branch has run out of budget or failed the run ([`BranchOutcome::fails_run`]),
    /// branches after it may be cancelled, but branches before it must still be awaited
    /// (one of them may yet win). Otherwise every branch runs to its end.
    fn run_race<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>>;
}
