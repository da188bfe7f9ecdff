//! [`WorkflowScheduler`]: runs the branches of a fork together inside a workflow, polling
//! them in declaration order.

use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use agent_engine::{BranchFuture, BranchOutcome, Scheduler};
use agent_op::BoxFuture;

/// Runs every branch of a `par` or `race` at once, with the same rules as
/// `agent-interp-par`'s `Concurrent` (see [`Scheduler`]), in a way a Temporal workflow
/// allows: nothing is spawned, nothing wakes itself, and branches are polled in declaration
/// order, only when something they wait on (an activity, a timer, a signal) resolved. The
/// commands a workflow task sends (activities and timers started, cancelled) therefore come
/// out in the same order on every replay.
#[derive(Copy, Clone, Debug, Default)]
pub struct WorkflowScheduler {
    limit: Option<NonZeroUsize>,
}

impl WorkflowScheduler {
    /// Runs at most `limit` branches of each fork at once (all of them with `None`).
    pub fn with_limit(limit: Option<NonZeroUsize>) -> WorkflowScheduler {
        WorkflowScheduler { limit }
    }
}

impl Scheduler for WorkflowScheduler {
    // A machine waking itself (`yield_now`, tokio's cooperative budget) would be a wake the
    // workflow cannot explain.
    const YIELDS: bool = false;

    fn is_concurrent(&self) -> bool {
        true
    }

    fn run_par<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        Box::pin(RunAll::new(branches, self.limit, Mode::Par))
    }

    fn run_race<S: Send + 'static>(
        &self,
        branches: Vec<BranchFuture<S>>,
    ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
        Box::pin(RunAll::new(branches, self.limit, Mode::Race))
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Mode {
    Par,
    Race,
}

/// The waker of the task polling a fork, shared by its branches' wakers.
struct ForkWake {
    parent: Mutex<Option<Waker>>,
}

/// One branch's waker: marks the branch for polling and wakes the fork.
struct BranchWake {
    woken: AtomicBool,
    fork: Arc<ForkWake>,
}

impl Wake for BranchWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let parent = self
            .fork
            .parent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(parent) = parent {
            parent.wake();
        }
    }
}

struct Slot<S> {
    branch: Option<BranchFuture<S>>,
    wake: Arc<BranchWake>,
    waker: Waker,
}

struct RunAll<S> {
    waiting: std::iter::Enumerate<std::vec::IntoIter<BranchFuture<S>>>,
    running: Vec<(usize, Slot<S>)>,
    outcomes: Vec<Option<BranchOutcome<S>>>,
    slots: usize,
    mode: Mode,
    /// In a par, the lowest index that failed: later branches are no longer needed.
    cutoff: usize,
    fork: Arc<ForkWake>,
    done: bool,
}

impl<S> RunAll<S> {
    fn new(branches: Vec<BranchFuture<S>>, limit: Option<NonZeroUsize>, mode: Mode) -> RunAll<S> {
        let n = branches.len();
        let mut outcomes = Vec::with_capacity(n);
        outcomes.resize_with(n, || None);
        RunAll {
            waiting: branches.into_iter().enumerate(),
            running: Vec::new(),
            outcomes,
            slots: limit.map_or(usize::MAX, NonZeroUsize::get),
            mode,
            cutoff: n,
            fork: Arc::new(ForkWake {
                parent: Mutex::new(None),
            }),
            done: false,
        }
    }

    fn start_waiting(&mut self) {
        while self.running.len() < self.slots {
            let Some((index, branch)) = self.waiting.next() else {
                break;
            };
            if index >= self.cutoff {
                continue;
            }
            let wake = Arc::new(BranchWake {
                woken: AtomicBool::new(true),
                fork: self.fork.clone(),
            });
            let waker = Waker::from(wake.clone());
            self.running.push((
                index,
                Slot {
                    branch: Some(branch),
                    wake,
                    waker,
                },
            ));
        }
    }

    /// Takes a finished branch's outcome; says whether the fork is decided.
    fn settle(&mut self, i: usize, outcome: BranchOutcome<S>) -> bool {
        let stop = outcome.interrupted() || (self.mode == Mode::Race && outcome.succeeded());
        if !stop {
            let decisive = match self.mode {
                Mode::Par => !outcome.succeeded(),
                Mode::Race => outcome.exhausted() || outcome.fails_run(),
            };
            if decisive && i < self.cutoff {
                self.cutoff = i;
                let cutoff = self.cutoff;
                // Dropping the branches after it cancels their activities and timers.
                self.running.retain(|(index, _)| *index < cutoff);
            }
        }
        self.outcomes[i] = Some(outcome);
        stop
    }
}

impl<S> Unpin for RunAll<S> {}

impl<S> Future for RunAll<S> {
    type Output = Vec<Option<BranchOutcome<S>>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.done {
            return Poll::Pending;
        }
        {
            let mut parent = this.fork.parent.lock().unwrap_or_else(|e| e.into_inner());
            if !parent.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *parent = Some(cx.waker().clone());
            }
        }
        loop {
            this.start_waiting();
            if this.running.is_empty() {
                this.done = true;
                return Poll::Ready(std::mem::take(&mut this.outcomes));
            }
            // Poll the woken branches in declaration order; a branch woken while another is
            // polled (a budget settling, say) is polled in this same pass or the next loop.
            let mut progressed = false;
            let mut k = 0;
            while k < this.running.len() {
                let (index, slot) = &mut this.running[k];
                let index = *index;
                if !slot.wake.woken.swap(false, Ordering::AcqRel) {
                    k += 1;
                    continue;
                }
                let Some(branch) = slot.branch.as_mut() else {
                    k += 1;
                    continue;
                };
                let mut branch_cx = Context::from_waker(&slot.waker);
                match branch.as_mut().poll(&mut branch_cx) {
                    Poll::Pending => k += 1,
                    Poll::Ready(outcome) => {
                        progressed = true;
                        this.running.remove(k);
                        if this.settle(index, outcome) {
                            // Dropping the rest cancels their activities and timers.
                            this.running.clear();
                            this.done = true;
                            return Poll::Ready(std::mem::take(&mut this.outcomes));
                        }
                        // `settle` may have dropped branches: start again from the lowest.
                        k = 0;
                    }
                }
            }
            let woken = this
                .running
                .iter()
                .any(|(_, s)| s.wake.woken.load(Ordering::Acquire));
            if !progressed && !woken {
                return Poll::Pending;
            }
        }
    }
}
