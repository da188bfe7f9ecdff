//! The engine shared by every interpreter: a trampolined machine per run
//! or branch, `limit`/`timeout` scopes with shared budgets, branch logs, and a pluggable
//! [`Scheduler`] that decides only *when* branches run.

mod branch_log;
mod commit;
pub(crate) mod journal;
mod machine;
mod outcome;
pub mod scheduler;

pub use machine::MAX_FORK_DEPTH;
pub(crate) mod scope;
pub mod spans;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_op::interp::{rebox, take_value};
use agent_op::journal::{Entry, EntryKind, Journal, JournalError, Key};
use agent_op::{Checkpoint, Op, Trace, TraceEntry, TraceId};
use chrono::{DateTime, Utc};

use crate::clock::RunClock;
use crate::config::Config;
use crate::error::{ErrorKind, RunError};
use branch_log::BranchLog;
pub use journal::JournalReport;
use journal::{Journaling, Mode};
use machine::Machine;
use scheduler::Scheduler;
use scope::{ScopeExit, ScopeId};

/// How a run or branch stopped early.
#[derive(Clone)]
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
    /// For a run with a journal (replayed, durable, resumed): what it took from the journal
    /// and what it ran live.
    pub journal: Option<JournalReport>,
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
    /// The run's journal, when it keeps one.
    pub(crate) journal: Option<Arc<Journaling>>,
    /// In a journaled run, the clock `infer`'s context pipeline reads: the run's recorded
    /// start, so a replay compiles the same prompt.
    pub(crate) context_clock: Option<DateTime<Utc>>,
    /// Where the run reads time and waits.
    pub(crate) clock: RunClock,
    /// `op::random`'s generator, when the config seeds one.
    pub(crate) rng: Option<Mutex<fastrand::Rng>>,
}

impl<Sch> Runtime<Sch> {
    /// A random `u64` for `op::random`: from the seeded generator if the config has one.
    pub(crate) fn random(&self) -> u64 {
        match &self.rng {
            None => fastrand::u64(..),
            Some(rng) => rng.lock().unwrap_or_else(|e| e.into_inner()).u64(..),
        }
    }

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
        self.run_inner(config, state, program, id, None).await
    }

    /// Runs `program` with every nondeterministic effect (model and tool calls, memory,
    /// steering, `now`, `random`, race outcomes) answered from `journal`: no provider call,
    /// no tool execution, no memory access but what `op::infer`'s context sources read. The
    /// result, final state and canonical trace are the recorded run's.
    ///
    /// A question the journal did not record at that position (another model, prompt,
    /// tool or arguments), or a position the journal lacks (it is truncated, or from another
    /// program), stops the run with [`ErrorKind::Divergence`], saying where and how the
    /// requests differ.
    pub async fn replay<S, A>(
        &self,
        config: &Config,
        journal: &dyn Journal,
        state: S,
        program: Op<S, A>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let entries = load(config, journal).await?;
        let source = (journal.describe(), entries);
        self.run_journaled(config, state, program, Mode::Replay, source, None)
            .await
    }

    /// Replays `journal` as far as the program asks the same questions, then runs live:
    /// every effect whose request matches the journal at its position is answered from it,
    /// any other runs for real. For iterating on a prompt without paying for the unchanged
    /// prefix. [`JournalReport::diverged`] says where the run first left the journal.
    ///
    /// With `record_to`, the new run is journaled there (replayed entries copied, live ones
    /// committed before the program sees them), so it can be replayed or resumed in turn.
    pub async fn replay_then_live<S, A>(
        &self,
        config: &Config,
        journal: &dyn Journal,
        record_to: Option<Arc<dyn Journal>>,
        state: S,
        program: Op<S, A>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let entries = load(config, journal).await?;
        self.run_journaled(
            config,
            state,
            program,
            Mode::ReplayThenLive,
            (journal.describe(), entries),
            record_to,
        )
        .await
    }

    /// Runs `program` durably: every nondeterministic result is committed to `journal`
    /// before the program sees it (write-ahead), so after a crash [`resume`](Engine::resume)
    /// continues where the run stopped without repeating a committed call. `journal` must be
    /// empty ([`JournalError::NotEmpty`] otherwise).
    pub async fn run_durable<S, A>(
        &self,
        config: &Config,
        journal: Arc<dyn Journal>,
        state: S,
        program: Op<S, A>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let entries = load(config, &*journal).await?;
        if !entries.is_empty() {
            let error = JournalError::NotEmpty {
                journal: journal.describe(),
                entries: entries.len(),
            };
            return Err(not_started(config, ErrorKind::Journal(Box::new(error))));
        }
        self.resume(config, journal, state, program).await
    }

    /// Continues the durable run of `journal` (or starts it, if the journal is empty): the
    /// committed prefix is replayed with no calls made, then the run goes on live, committing
    /// as [`run_durable`](Engine::run_durable) does.
    ///
    /// At-least-once boundary: a call whose result was committed is never made again; a call
    /// that was in flight when the process died (started, result not yet committed) is made
    /// again. With concurrent branches, that is at most one call per branch running at the
    /// crash. Tools with side effects can use the call's idempotency key
    /// ([`agent_op::CallContext`]), which is the same in the resumed run.
    ///
    /// The program must be the one that was running: a changed request at a committed
    /// position is an [`ErrorKind::Divergence`].
    pub async fn resume<S, A>(
        &self,
        config: &Config,
        journal: Arc<dyn Journal>,
        state: S,
        program: Op<S, A>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let entries = load(config, &*journal).await?;
        self.run_journaled(
            config,
            state,
            program,
            Mode::Durable,
            (journal.describe(), entries),
            Some(journal),
        )
        .await
    }

    /// Goes back to `checkpoint` of the durable run of `journal`: replays what the run had
    /// committed when it took the checkpoint, then continues live (as
    /// [`replay_then_live`](Engine::replay_then_live), optionally journaling the new run to
    /// `record_to`). A checkpoint is a resume point: take another path from it after
    /// changing the program or the world, without paying for what came before.
    ///
    /// Fails with [`ErrorKind::CheckpointNotJournaled`] if the journal has no marker of
    /// `checkpoint` (markers are committed by durable runs).
    pub async fn resume_from<S, A>(
        &self,
        config: &Config,
        journal: &dyn Journal,
        checkpoint: &Checkpoint,
        record_to: Option<Arc<dyn Journal>>,
        state: S,
        program: Op<S, A>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let entries = load(config, journal).await?;
        let (id, _) = run_entry(config, &journal.describe(), &entries)
            .map_err(|error| not_started(config, ErrorKind::Journal(Box::new(error))))?;
        // The run entry comes first in every journal, so the prefix keeps the run's id.
        let Some(before) = journal::before_checkpoint(entries, &id, checkpoint) else {
            return Err(not_started(
                config,
                ErrorKind::CheckpointNotJournaled {
                    name: checkpoint.name.clone(),
                },
            ));
        };
        self.run_journaled(
            config,
            state,
            program,
            Mode::ReplayThenLive,
            (journal.describe(), before),
            record_to,
        )
        .await
    }

    /// Runs `program` in `mode` over the recorded entries of `source` (the journal's name
    /// and its entries), committing to `sink`. The run takes the id and start time the
    /// entries record (or new ones), and a sink that lacks them gets them first: a fresh
    /// durable journal, or the new journal of a replay-then-live run (which also gets copies
    /// of the replayed entries).
    async fn run_journaled<S, A>(
        &self,
        config: &Config,
        state: S,
        program: Op<S, A>,
        mode: Mode,
        source: (String, Vec<Entry>),
        sink: Option<Arc<dyn Journal>>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let (name, entries) = source;
        let (id, started) = run_entry(config, &name, &entries)
            .map_err(|error| not_started(config, ErrorKind::Journal(Box::new(error))))?;
        let new_journal = mode == Mode::ReplayThenLive;
        let has_run = entries.iter().any(|e| e.kind == EntryKind::Run);
        if let Some(sink) = &sink
            && (new_journal || !has_run)
        {
            let entry = run_marker(&id, started);
            if let Err(error) = sink.append(vec![entry]).await {
                return Err(not_started(config, ErrorKind::Journal(Box::new(error))));
            }
        }
        let spawn = self.scheduler.spawner();
        let journaling = Journaling::new(mode, name, entries, sink, spawn, id.clone())
            .map_err(|error| not_started(config, ErrorKind::Journal(Box::new(error))))?;
        self.run_inner(config, state, program, id, Some((journaling, started)))
            .await
    }

    async fn run_inner<S, A>(
        &self,
        config: &Config,
        state: S,
        program: Op<S, A>,
        id: TraceId,
        journal: Option<(Journaling, DateTime<Utc>)>,
    ) -> Result<Outcome<S, A>, RunError>
    where
        S: Clone + Send + 'static,
        A: Send + 'static,
    {
        let (journal, context_clock) = match journal {
            Some((journal, started)) => (Some(Arc::new(journal)), Some(started)),
            None => (None, None),
        };
        let runtime = Arc::new(Runtime {
            config: config.clone(),
            scheduler: self.scheduler.clone(),
            stream: config.subscribers.iter().any(|s| s.wants_deltas()),
            checkpoints: Mutex::new(Vec::new()),
            next_scope: AtomicU64::new(0),
            journal,
            context_clock,
            clock: RunClock::new(config.clock.clone()),
            rng: config
                .random_seed
                .map(|seed| Mutex::new(fastrand::Rng::with_seed(seed))),
        });
        let span = spans::run(&id, config.name.as_deref());
        if config.exports_content()
            && let Some(goal) = &config.goal
        {
            spans::run_goal(&span, goal);
        }
        let root = BranchLog::new(id, None);
        let mut machine = Machine::root(runtime.clone(), root.clone(), state, rebox::<A>, span);
        let result = machine.run_caught(program.into_node()).await;
        machine.finish();
        // Open until the run's end is known (what it spent, its answer); closed before the
        // subscribers' end-of-run work, which is theirs.
        let run_span = machine.end_spans(&result);
        // Markers and race outcomes after the run's last commit, and every commit still
        // under way.
        let flushed = match &runtime.journal {
            Some(journal) => journal.settle().await,
            None => Ok(()),
        };
        let result = match (result, flushed) {
            (Ok(_), Err(error)) => Err(Unwind::Fail(ErrorKind::Journal(Box::new(error)))),
            (result, _) => result,
        };
        let result = match result.map(|mut value| take_value::<A>(&mut *value)) {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(ErrorKind::Internal(format!(
                "the program's value is not a `{}`",
                std::any::type_name::<A>()
            ))),
            Err(Unwind::Fail(kind)) => Err(kind),
            Err(Unwind::Aborted) => Err(ErrorKind::Aborted),
            Err(Unwind::Exit { scope, exit }) => Err(ErrorKind::Internal(format!(
                "scope {scope} ended early ({exit:?}) but no frame owned it"
            ))),
        };
        let mut trace = root.take();
        let ended = outcome::run_end(&trace, result.as_ref());
        if let agent_op::EventKind::RunEnd(end) = &ended.kind {
            // The whole answer, not the event's preview, for a backend to show.
            let answer = match &result {
                Ok(value) if config.exports_content() && !run_span.is_disabled() => {
                    outcome::any_text(value as &dyn std::any::Any)
                }
                _ => None,
            };
            spans::run_ended(&run_span, end, answer.as_deref());
        }
        drop(run_span);
        trace.events.push(TraceEntry {
            trace_id: trace.id.clone(),
            cancelled: false,
            event: ended,
        });
        if let Some(last) = trace.events.last() {
            for subscriber in &config.subscribers {
                // A panicking observer must not take the run down with it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    subscriber.on_event(&trace.id, &last.event);
                    subscriber.on_run_end(&trace);
                }));
            }
        }
        let checkpoints = settle_checkpoints(&trace, runtime.take_checkpoints());
        match result {
            Ok(value) => Ok(Outcome {
                value,
                trace,
                state: machine.state,
                checkpoints,
                journal: runtime.journal.as_ref().map(|j| j.report()),
            }),
            Err(kind) => Err(RunError {
                kind,
                trace,
                checkpoints,
            }),
        }
    }
}

/// The committed entries of `journal`, or the run error saying why they could not be read.
/// Read once the commits a dropped run handed over to it are appended.
async fn load(config: &Config, journal: &dyn Journal) -> Result<Vec<Entry>, RunError> {
    commit::settled(journal).await;
    journal
        .entries()
        .await
        .map_err(|error| not_started(config, ErrorKind::Journal(Box::new(error))))
}

/// A run that failed before it started: a trace of its `run_end` only.
fn not_started(config: &Config, kind: ErrorKind) -> RunError {
    let id = config.trace_id.clone().unwrap_or_else(TraceId::random);
    let mut trace = Trace::new(id);
    trace.end = Some(trace.start);
    let ended = outcome::run_end(&trace, Err::<&(), _>(&kind));
    trace.events.push(TraceEntry {
        trace_id: trace.id.clone(),
        cancelled: false,
        event: ended,
    });
    RunError {
        kind,
        trace,
        checkpoints: Vec::new(),
    }
}

/// The run's id and start time: the journal's (its run entry), else the config's id (or a
/// new one) and now. A run entry that does not parse is refused (the journal `name` does not
/// fit).
fn run_entry(
    config: &Config,
    name: &str,
    entries: &[Entry],
) -> Result<(TraceId, DateTime<Utc>), JournalError> {
    let Some(entry) = entries.iter().find(|e| e.kind == EntryKind::Run) else {
        return Ok((
            config.trace_id.clone().unwrap_or_else(TraceId::random),
            RunClock::new(config.clock.clone()).wall(),
        ));
    };
    /// What a run entry records.
    #[derive(serde::Deserialize)]
    struct Run {
        trace_id: String,
        started_at: DateTime<Utc>,
    }
    let run = serde_json::from_str::<Run>(entry.result.get()).ok();
    let (id, started) = match run {
        Some(run) => (Some(run.trace_id), Some(run.started_at)),
        None => (None, None),
    };
    match (id, started) {
        (Some(id), Some(started)) if entry.key == Key::run() => Ok((TraceId::from(id), started)),
        _ => Err(JournalError::Malformed {
            journal: name.to_owned(),
            at: "the run's entry".to_owned(),
            cause: agent_op::Cause::new(std::io::Error::other(
                "it records no trace id and start time",
            )),
        }),
    }
}

/// The journal entry recording a run's id and start.
fn run_marker(id: &TraceId, started: DateTime<Utc>) -> Entry {
    let request = serde_json::json!({"run": null});
    Entry {
        key: Key::run(),
        kind: EntryKind::Run,
        fingerprint: agent_op::journal::fingerprint(&request),
        request: journal::raw(&request),
        result: journal::raw(&serde_json::json!({"trace_id": id, "started_at": started})),
    }
}
