//! [`Sequential`]: the reference scheduler, one branch after another.

use agent_engine::{BranchFuture, BranchOutcome, Scheduler};
use agent_op::BoxFuture;

/// Runs branches one after another in declaration order: the reference semantics.
///
/// A `par` stops at its first failing branch; a `race` at its first successful one. Branches
/// after that are never started.
#[derive(Copy, Clone, Debug, Default)]
pub struct Sequential;

impl Scheduler for Sequential {
    fn run_par<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        Box::pin(run_in_order(branches, |o| !o.succeeded()))
    }

    fn run_race<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        Box::pin(run_in_order(branches, |o| !o.failed()))
    }
}

async fn run_in_order<S>(
    branches: Vec<BranchFuture<S>>,
    stop_after: impl Fn(&BranchOutcome<S>) -> bool,
) -> Vec<Option<BranchOutcome<S>>> {
    let mut out = Vec::with_capacity(branches.len());
    let mut stopped = false;
    for branch in branches {
        if stopped {
            out.push(None);
            continue;
        }
        let outcome = branch.await;
        stopped = stop_after(&outcome);
        out.push(Some(outcome));
    }
    out
}
