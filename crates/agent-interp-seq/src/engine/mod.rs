//! The engine shared by every interpreter: a trampolined machine per run
//! or branch, `limit`/`timeout` scopes with shared budgets, branch logs, and a pluggable
//! [`Scheduler`] that decides only *when* branches run.

mod branch_log;
mod machine;
pub mod scheduler;

pub use machine::MAX_FORK_DEPTH;
pub(crate) mod scope;
pub mod spans;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_op::interp::{rebox, take_value};
use agent_op::{Checkpoint, Op, Trace, TraceId};

use crate::config::Config;
use crate::error::{ErrorKind, RunError};
use branch_log::BranchLog;
use machine::Machine;
use scheduler::Scheduler;
use scope::{ScopeExit, ScopeId};

/// How a run or branch stopped early.
pub(crate) enum Unwind {
    /// The program failed (a `race` may try another branch).
    Fail(ErrorKind),
    /// A `limit` or `timeout` ended early; unwind to it.
    Exit { scope: ScopeId, exit: ScopeExit },
    /// The abort token was cancelled.
    Aborted,
}

impl Unwind {
    /// How the run or branch ended, as telemetry's `error.type`.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            Unwind::Fail(kind) => kind.kind_name(),
            Unwind::Exit {
                exit: ScopeExit::Exhausted(_),
                ..
            } => "exhausted",
            Unwind::Exit {
                exit: ScopeExit::TimedOut(_),
                ..
            } => "timed_out",
            Unwind::Aborted => "aborted",
        }
    }
}

/// A finished run: the program's value, its trace, its final state and its checkpoints.
#[derive(Debug)]
pub struct Outcome<S, A> {
    /// What the program returned.
    pub value: A,
    /// Everything that happened.
    pub trace: Trace,
    /// The final state.
    pub state: S,
    /// The checkpoints taken, in order.
    pub checkpoints: Vec<Checkpoint>,
}

impl<S, A> Outcome<S, A> {
    /// What the run's model calls used, with the calls of discarded branches (a `race`'s
    /// losers) reported apart from those whose work the run kept. See [`Trace::spend`].
    pub fn spend(&self) -> agent_op::Spend {
        self.trace.spend()
    }
}

/// What every machine of one run shares.
pub(crate) struct Runtime<Sch> {
    pub(crate) config: Config,
    pub(crate) scheduler: Sch,
    /// Whether some subscriber wants model replies as they stream in.
    pub(crate) stream: bool,
    pub(crate) checkpoints: Mutex<Vec<Checkpoint>>,
    pub(crate) next_scope: AtomicU64,
}

impl<Sch> Runtime<Sch> {
    pub(crate) fn next_scope_id(&self) -> ScopeId {
        self.next_scope.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn push_checkpoint(&self, checkpoint: Checkpoint) {
        self.checkpoints
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(checkpoint);
    }

    fn take_checkpoints(&self) -> Vec<Checkpoint> {
        std::mem::take(&mut *self.checkpoints.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Orders checkpoints as their `Checkpoint` events appear in the final trace (concurrent
/// branches take them in whatever order they run; the trace order is the deterministic one)
/// and marks those taken by cancelled branches.
///
/// A checkpoint's event sits at the start of its branch's block of the trace plus its
/// `events` count, so one pass over the trace (finding where each block starts) places them
/// all, without copying ids or names.
fn settle_checkpoints(trace: &Trace, checkpoints: Vec<Checkpoint>) -> Vec<Checkpoint> {
    use std::collections::HashMap;

    if checkpoints.is_empty() {
        return checkpoints;
    }
    let mut starts: HashMap<&str, usize> = HashMap::new();
    let mut last = None;
    for cp in &checkpoints {
        // Runs of checkpoints of one branch are the common case: one insert per run.
        let id = cp.trace_id.as_str();
        if last != Some(id) {
            starts.insert(id, usize::MAX);
            last = Some(id);
        }
    }
    let mut unplaced = starts.len();
    for (position, entry) in trace.events.iter().enumerate() {
        // The entry starts the block of its own branch and of every ancestor not seen yet.
        let mut id = entry.trace_id.as_str();
        loop {
            if let Some(start) = starts.get_mut(id) {
                if *start != usize::MAX {
                    // Its ancestors' blocks started no later.
                    break;
                }
                *start = position;
                unplaced -= 1;
            }
            match id.rfind('.') {
                Some(dot) => id = &id[..dot],
                None => break,
            }
        }
        if unplaced == 0 {
            break;
        }
    }
    let positions: Vec<usize> = checkpoints
        .iter()
        .map(|cp| {
            starts
                .get(cp.trace_id.as_str())
                .and_then(|start| start.checked_add(cp.events.checked_sub(1)?))
                .unwrap_or(usize::MAX)
        })
        .collect();
    let cancelled = |position: usize| trace.events.get(position).is_some_and(|e| e.cancelled);
    if positions.is_sorted() {
        // Taken in trace order (always, sequentially): no need to move them.
        let mut checkpoints = checkpoints;
        for (cp, position) in checkpoints.iter_mut().zip(positions) {
            cp.cancelled = cancelled(position);
        }
        return checkpoints;
    }
    let mut placed: Vec<(usize, Checkpoint)> = positions.into_iter().zip(checkpoints).collect();
    for (position, cp) in &mut placed {
        cp.cancelled = cancelled(*position);
    }
    placed.sort_by_key(|(position, _)| *position);
    placed.into_iter().map(|(_, cp)| cp).collect()
}

/// Runs programs with a given branch [`Scheduler`]. The sequential interpreter is
/// `Engine::new(Sequential)`; the parallel interpreter plugs in a concurrent scheduler.
#[derive(Clone, Debug, Default)]
pub struct Engine<Sch> {
    scheduler: Sch,
}

impl<Sch: Scheduler + Clone> Engine<Sch> {
    /// An engine running forks with `scheduler`.
    pub fn new(scheduler: Sch) -> Engine<Sch> {
        Engine { scheduler }
    }

    /// Runs `program` from `state` with `config`. Needs a tokio runtime (for timers); the
    /// `time` driver must be enabled.
    pub async fn run<S, A>(
        &self,
        config: &Config,
        state: S,
        program: Op<S, A>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let id = config.trace_id.clone().unwrap_or_else(TraceId::random);
        let runtime = Arc::new(Runtime {
            config: config.clone(),
            scheduler: self.scheduler.clone(),
            stream: config.subscribers.iter().any(|s| s.wants_deltas()),
            checkpoints: Mutex::new(Vec::new()),
            next_scope: AtomicU64::new(0),
        });
        let span = spans::run(&id, config.name.as_deref());
        let root = BranchLog::new(id, None);
        let mut machine = Machine::root(runtime.clone(), root.clone(), state, rebox::<A>, span);
        let result = machine.run_caught(program.into_node()).await;
        machine.finish();
        drop(machine.end_spans(&result));
        let trace = root.take();
        for subscriber in &config.subscribers {
            // A panicking observer must not take the run down with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                subscriber.on_run_end(&trace);
            }));
        }
        let checkpoints = settle_checkpoints(&trace, runtime.take_checkpoints());
        let kind = match result.map(|mut value| take_value::<A>(&mut *value)) {
            Ok(Some(value)) => {
                return Ok(Outcome {
                    value,
                    trace,
                    state: machine.state,
                    checkpoints,
                });
            }
            Ok(None) => ErrorKind::Internal(format!(
                "the program's value is not a `{}`",
                std::any::type_name::<A>()
            )),
            Err(Unwind::Fail(kind)) => kind,
            Err(Unwind::Aborted) => ErrorKind::Aborted,
            Err(Unwind::Exit { scope, exit }) => ErrorKind::Internal(format!(
                "scope {scope} ended early ({exit:?}) but no frame owned it"
            )),
        };
        Err(RunError {
            kind,
            trace,
            checkpoints,
        })
    }
}
