//! The trampoline that runs one run or branch.
//!
//! A [`Machine`] walks a [`Node`] tree with an explicit stack of frames (continuations, loops,
//! scopes), so the Rust stack stays flat however long the program runs. Pure steps (binds,
//! state reads and writes, loops) run synchronously; only effects await.
//!
//! Here: the step loop, events, interrupts (abort token, deadlines) and scopes. The rest, by
//! concern: `stack` (the continuation stack and the nearest deadline), `effects` (model and
//! tool calls with budget reservations, memory, checkpoints) and `forks` (starting and
//! joining branches).

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use agent_op::interp::{AnyValue, Bind, Feed, Loop, Node, Scope, ScopeOk};
use agent_op::trace::event::{LimitStart, TimeoutStart};
use agent_op::{Event, EventKind, Exhausted, PREVIEW_CHARS, TimedOut, TraceId, preview};
use futures_util::FutureExt;
use serde_json::Value;
use tokio::time::Instant;

use crate::engine::branch_log::BranchLog;
use crate::engine::scheduler::Scheduler;
use crate::engine::scope::{ActiveScope, BudgetCell, ScopeExit, ScopeId};
use crate::engine::{Runtime, Unwind, spans};
use crate::error::ErrorKind;

mod effects;
mod forks;
mod journaled;
mod stack;

/// How many nodes run between checks of the abort token and deadlines (and cooperative
/// yields to the tokio scheduler).
const CHECK_EVERY: u32 = 64;

/// How many nodes a machine runs at most between yields to the tokio scheduler, whatever
/// the task's coop budget says (a multiple of [`CHECK_EVERY`]).
const YIELD_EVERY: u32 = CHECK_EVERY * 128;

/// How deeply forks (`par`, `race`) may nest: deeper forks fail the run with
/// [`ErrorKind::ForksTooDeep`](crate::ErrorKind::ForksTooDeep). Each level of nesting adds a few frames to the Rust stack of the
/// task polling the run, so the depth is bounded (with a clear error) rather than left to
/// overflow a small worker stack.
pub const MAX_FORK_DEPTH: usize = 128;

/// How deeply continuations may feed values straight into one another before the value is
/// stored and fed from the main loop instead (bounds Rust stack use for long `map` chains).
const MAX_FEED_DEPTH: u32 = 64;

enum Frame<S> {
    Bind(Box<dyn Bind<S>>),
    Loop(Box<dyn Loop<S>>),
    Scope(Box<ScopeFrame<S>>),
    /// The bottom of a machine's stack: stores the program's final value.
    Return(fn(&mut dyn Any) -> AnyValue),
}

struct ScopeFrame<S> {
    id: ScopeId,
    /// The state on entry, restored if the scope ends early (`None` for scopes that cannot).
    saved: Option<S>,
    ok: ScopeOk<S>,
    early: EarlyExit<S>,
}

enum EarlyExit<S> {
    Limit(fn(Exhausted, &mut dyn Feed<S>) -> Node<S>),
    Timeout(fn(TimedOut, &mut dyn Feed<S>) -> Node<S>),
    /// A `with_tools` scope: it only ends with its body.
    Never,
}

/// The continuation stack and the scopes in force. Separate from the state so a state read can
/// feed its value on while the state is borrowed.
struct Stack<S> {
    frames: Vec<Frame<S>>,
    /// Scopes entered by this machine, innermost last.
    scopes: Vec<ActiveScope>,
    /// For each of `scopes`, the earliest deadline of it and the scopes it is inside (of this
    /// machine): entering or leaving a scope updates the nearest deadline in O(1), however
    /// deeply scopes nest.
    scope_deadlines: Vec<Option<Instant>>,
    /// The earliest deadline of `inherited` (fixed for the machine's life).
    inherited_deadline: Option<Instant>,
    /// Scopes of the enclosing machines, outermost first.
    inherited: Arc<[ActiveScope]>,
    /// The earliest deadline of `inherited` and `scopes`.
    next_deadline: Option<Instant>,
    /// The earliest deadline of `scopes` alone. While a branch awaits, only these need
    /// watching: the machine awaiting the fork watches the inherited ones (and the abort
    /// token), and dropping the fork cancels the branch.
    own_deadline: Option<Instant>,
    /// Whether this is the run's root machine, the one that watches the abort token.
    root: bool,
    /// The program's final value, once the `Return` frame received it.
    done: Option<AnyValue>,
    depth: u32,
}

pub(crate) struct Machine<S, Sch> {
    rt: Arc<Runtime<Sch>>,
    log: Arc<BranchLog>,
    id: TraceId,
    pub(crate) state: S,
    stack: Stack<S>,
    /// Model calls made by this branch (and the ancestors before it forked).
    iteration: u32,
    /// Branches this machine has forked so far: the next branch is `id.forked`, so branch ids
    /// stay unique when one run or branch forks several times.
    forked: usize,
    ticks: u32,
    /// The tools the context of this branch's last model call left out (see `op::infer`):
    /// calling one is refused until the next model call.
    withheld: Option<Arc<[String]>>,
    /// This machine's `tracing` span: the run's, or its branch's.
    span: tracing::Span,
    /// The nearest span enclosing this machine that a subscriber records: its own, or,
    /// when that is filtered out (branch and fork spans are at `DEBUG`), its fork's or an
    /// ancestor's. New spans nest under it, so they keep a recorded parent.
    nest: tracing::Span,
    /// How many events this machine has recorded: the next event's sequence number.
    seq: u64,
    /// How many journaled effects (model and tool calls, memory, steering, clock, random,
    /// races, checkpoints) this machine started: the next one's [`Key::seq`](agent_op::journal::Key::seq). Counted
    /// apart from events, since some effects record none.
    effects: u64,
    /// Whether this branch lost a race the journal recorded: where the journal ends, it
    /// was cancelled.
    doomed: bool,
}

impl<S, Sch> Machine<S, Sch>
where
    S: Clone + Send + 'static,
    Sch: Scheduler,
{
    pub(crate) fn root(
        rt: Arc<Runtime<Sch>>,
        log: Arc<BranchLog>,
        state: S,
        finish: fn(&mut dyn Any) -> AnyValue,
        span: tracing::Span,
    ) -> Self {
        Machine {
            id: log.id().clone(),
            rt,
            log,
            state,
            stack: Stack::new(finish, Arc::from(Vec::new()), true),
            iteration: 0,
            forked: 0,
            ticks: 0,
            withheld: None,
            nest: span.clone(),
            span,
            seq: 0,
            effects: 0,
            doomed: false,
        }
    }

    /// The span new spans of this machine nest under: its innermost recorded scope's, or
    /// its own (see [`Machine::nest`]).
    fn parent_span(&self) -> &tracing::Span {
        self.stack
            .scopes
            .last()
            .map_or(&self.nest, |scope| &scope.nest)
    }

    /// The sequence number of the last event this machine recorded.
    pub(crate) fn last_seq(&self) -> u64 {
        self.seq.saturating_sub(1)
    }

    /// Runs `node` to its end. Returns its value, or how it stopped.
    pub(crate) async fn run(&mut self, node: Node<S>) -> Result<AnyValue, Unwind> {
        if self.rt.config.cancel.is_cancelled() {
            return Err(Unwind::Aborted);
        }
        let mut node = node;
        loop {
            self.ticks = self.ticks.wrapping_add(1);
            if self.ticks % CHECK_EVERY == 0 {
                if let Err(unwind) = self.poll_interrupts().await {
                    node = self.unwind(unwind)?;
                    continue;
                }
            }
            node = match node {
                Node::Unit => {
                    if let Some(value) = self.stack.done.take() {
                        return Ok(value);
                    }
                    self.stack.feed(&mut Some(()))
                }
                Node::Pure(mut value) => self.stack.feed(&mut *value),
                Node::Bind(mut bind) => {
                    let first = bind.take();
                    self.stack.frames.push(Frame::Bind(bind));
                    first
                }
                Node::Loop(mut body) => {
                    let first = body.start();
                    self.stack.frames.push(Frame::Loop(body));
                    first
                }
                Node::Read(read) => read(&self.state, &mut self.stack),
                Node::Write(write) => {
                    write(&mut self.state);
                    self.stack.feed(&mut Some(()))
                }
                Node::Effect(effect) => match self.effect(effect).await {
                    Ok(next) => next,
                    Err(unwind) => self.unwind(unwind)?,
                },
                Node::Checkpoint(cp) => match self.checkpoint(cp.name, cp.snapshot) {
                    Ok(()) => self.stack.feed(&mut Some(())),
                    Err(unwind) => self.unwind(unwind)?,
                },
                Node::Scope(scope) => match self.enter_scope(*scope) {
                    Ok(body) => body,
                    Err(unwind) => self.unwind(unwind)?,
                },
                Node::Fork(fork) => match self.fork(*fork).await {
                    Ok(next) => next,
                    Err(unwind) => self.unwind(unwind)?,
                },
                _ => {
                    let unwind = self.unsupported("a kind of program node");
                    self.unwind(unwind)?
                }
            };
        }
    }

    /// Like [`Machine::run`], but a panic in the program's own code (a closure passed to `map`,
    /// `and_then` or `modify`, a `Merge` implementation, a provider) becomes an error of this
    /// run or branch instead of unwinding through the caller: the trace so far is kept, and a
    /// `race` can recover from a panicking branch.
    pub(crate) async fn run_caught(&mut self, node: Node<S>) -> Result<AnyValue, Unwind> {
        match AssertUnwindSafe(self.run(node)).catch_unwind().await {
            Ok(result) => result,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                Err(self.fail(ErrorKind::Panicked { message }))
            }
        }
    }

    /// Marks this machine's log finished.
    pub(crate) fn finish(&self) {
        self.log.finish();
    }

    /// Ends this machine's spans: records the events its span covers and, on failure, marks
    /// it and every scope it is still inside as failed. Returns its span, so the caller can
    /// close it before slow work of its own (a subscriber's flush) stretches it.
    pub(crate) fn end_spans(&mut self, result: &Result<AnyValue, Unwind>) -> tracing::Span {
        if let Err(unwind) = result {
            let kind = unwind.kind_name();
            for scope in self.stack.scopes.iter().rev() {
                spans::failed(&scope.span, kind);
                if let Some(outer) = &scope.outer_span {
                    spans::failed(outer, kind);
                }
            }
            spans::failed(&self.span, kind);
        }
        if self.seq > 0 {
            spans::covers(&self.span, 0, self.seq - 1);
        }
        std::mem::replace(&mut self.span, tracing::Span::none())
    }

    // ------------------------------------------------------------------------------------
    // Events
    // ------------------------------------------------------------------------------------

    fn record(&mut self, kind: EventKind) {
        self.record_event(Event::now(kind));
    }

    fn record_event(&mut self, event: Event) {
        for subscriber in &self.rt.config.subscribers {
            // A panicking observer must not take the run down with it.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                subscriber.on_event(&self.id, &event);
            }));
        }
        self.log.push(event);
        self.seq += 1;
    }

    /// Fails on a node, effect, scope or fork this engine does not know: the program was built
    /// with a newer `agent-op` than the interpreter understands.
    fn unsupported(&mut self, what: &str) -> Unwind {
        self.fail(ErrorKind::Internal(format!(
            "this interpreter cannot run {what} the program uses (is `agent-op` newer than \
             the interpreter?)"
        )))
    }

    /// Records the failure where it happened and starts unwinding.
    fn fail(&mut self, kind: ErrorKind) -> Unwind {
        self.record(EventKind::error(kind.to_string()));
        Unwind::Fail(kind)
    }

    // ------------------------------------------------------------------------------------
    // Interrupts: abort token and deadlines
    // ------------------------------------------------------------------------------------

    async fn poll_interrupts(&mut self) -> Result<(), Unwind> {
        if self.rt.config.cancel.is_cancelled() {
            return Err(Unwind::Aborted);
        }
        if self.stack.next_deadline.is_some() {
            if let Some(unwind) = self.stack.expired(self.rt.clock.now()) {
                return Err(unwind);
            }
        }
        // Long pure loops must not starve other tasks (or sibling branches). Tokio's task
        // budget makes the machine yield when its task has done enough; a concurrent
        // scheduler may poll branches outside that budget (agent-interp-par's does), so a machine
        // also yields on its own every `YIELD_EVERY` nodes.
        if Sch::YIELDS {
            tokio::task::coop::consume_budget().await;
            if self.ticks % YIELD_EVERY == 0 {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }

    /// Awaits `fut` unless the run is aborted or a deadline in force passes first; then `fut`
    /// is dropped, cancelling whatever it was doing. A branch leaves the abort token and the
    /// inherited deadlines to the machine awaiting its fork, which drops the whole fork.
    async fn guarded<F: Future>(&mut self, fut: F) -> Result<F::Output, Unwind> {
        let cancel = &self.rt.config.cancel;
        match (self.stack.root, self.stack.own_deadline) {
            (false, None) => return Ok(fut.await),
            (true, None) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Unwind::Aborted),
                out = fut => return Ok(out),
            },
            (false, Some(deadline)) => tokio::select! {
                biased;
                () = self.rt.clock.sleep_until(deadline) => {}
                out = fut => return Ok(out),
            },
            (true, Some(deadline)) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Unwind::Aborted),
                () = self.rt.clock.sleep_until(deadline) => {}
                out = fut => return Ok(out),
            },
        }
        // A deadline passed: unwind to the outermost scope whose deadline it was.
        Err(self.stack.expired(self.rt.clock.now()).unwrap_or_else(|| {
            Unwind::Fail(ErrorKind::Internal(
                "a deadline fired but no scope had expired".into(),
            ))
        }))
    }

    // ------------------------------------------------------------------------------------
    // Scopes
    // ------------------------------------------------------------------------------------

    fn enter_scope(&mut self, scope: Scope<S>) -> Result<Node<S>, Unwind> {
        let id = self.rt.next_scope_id();
        let now = self.rt.clock.now();
        let (active, body, ok, early) = match scope {
            Scope::Limit {
                budget,
                body,
                ok,
                exhausted,
            } => {
                let span = spans::scope(self.parent_span(), "limit", Some(self.seq));
                let nest = spans::nest(&span, self.parent_span());
                self.record(EventKind::Limit(LimitStart {
                    budget: budget.clone(),
                }));
                let active = ActiveScope {
                    id,
                    started: now,
                    deadline: budget.time.and_then(|t| now.checked_add(t)),
                    budget: BudgetCell::new(budget),
                    is_timeout: false,
                    tools: None,
                    span,
                    outer_span: None,
                    nest,
                };
                (active, body, ok, EarlyExit::Limit(exhausted))
            }
            Scope::Timeout {
                limit,
                body,
                ok,
                timed_out,
            } => {
                let span = spans::scope(self.parent_span(), "timeout", Some(self.seq));
                let nest = spans::nest(&span, self.parent_span());
                self.record(EventKind::Timeout(TimeoutStart { limit }));
                let active = ActiveScope {
                    id,
                    started: now,
                    // A deadline too far away to represent is no deadline.
                    deadline: now.checked_add(limit),
                    budget: None,
                    is_timeout: true,
                    tools: None,
                    span,
                    outer_span: None,
                    nest,
                };
                (active, body, ok, EarlyExit::Timeout(timed_out))
            }
            Scope::Tools { scope, body, pass } => {
                self.check_narrows(&scope)?;
                // No event opens a tool scope, so it claims none.
                let span = spans::scope(self.parent_span(), "with_tools", None);
                let nest = spans::nest(&span, self.parent_span());
                let active = ActiveScope {
                    id,
                    started: now,
                    deadline: None,
                    budget: None,
                    is_timeout: false,
                    tools: Some(scope),
                    span,
                    outer_span: None,
                    nest,
                };
                (active, body, pass, EarlyExit::Never)
            }
            Scope::Agent {
                name,
                call_id,
                body,
                pass,
            } => {
                let (outer_span, span) =
                    spans::agent(self.parent_span(), &name, call_id.as_deref());
                let nest = spans::nest(&span, self.parent_span());
                let active = ActiveScope {
                    id,
                    started: now,
                    deadline: None,
                    budget: None,
                    is_timeout: false,
                    tools: None,
                    span,
                    outer_span,
                    nest,
                };
                (active, body, pass, EarlyExit::Never)
            }
            _ => return Err(self.unsupported("a kind of scope")),
        };
        self.stack.push_scope(active);
        // Only scopes that can end early restore the state they were entered with.
        let saved = match early {
            EarlyExit::Never => None,
            _ => Some(self.state.clone()),
        };
        self.stack.frames.push(Frame::Scope(Box::new(ScopeFrame {
            id,
            saved,
            ok,
            early,
        })));
        Ok(body.into_node())
    }

    /// Fails unless `scope` grants only tools and capabilities the enclosing scope (or, at
    /// the top, the run's config) grants.
    fn check_narrows(&mut self, scope: &agent_op::ToolScope) -> Result<(), Unwind> {
        let (enclosing, tools, capabilities) = match self.stack.tool_scope() {
            Some(outer) => (
                outer.name.clone(),
                scope
                    .tools
                    .names()
                    .filter(|n| outer.tools.get(n).is_none())
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
                scope
                    .capabilities
                    .difference(&outer.capabilities)
                    .cloned()
                    .collect::<Vec<_>>(),
            ),
            // A replay runs no tool, so it needs none configured: the recording checked
            // the scope against the config it ran with.
            None if self.rt.journal.as_ref().is_some_and(|j| j.replays_only()) => return Ok(()),
            None => (
                "the run's config".to_owned(),
                scope
                    .tools
                    .names()
                    .filter(|n| self.rt.config.tools.get(n).is_none())
                    .map(str::to_owned)
                    .collect(),
                Vec::new(),
            ),
        };
        if tools.is_empty() && capabilities.is_empty() {
            return Ok(());
        }
        Err(self.fail(ErrorKind::ScopeWidens(Box::new(
            crate::error::ScopeWidening {
                scope: scope.name.clone(),
                enclosing,
                tools,
                capabilities,
            },
        ))))
    }

    /// Handles an unwind: if one of this machine's scopes is its target, ends that scope early
    /// (restoring its entry state) and continues after it; otherwise the machine stops.
    fn unwind(&mut self, unwind: Unwind) -> Result<Node<S>, Unwind> {
        let Unwind::Exit { scope, exit } = unwind else {
            return Err(unwind);
        };
        let Some(pos) = self
            .stack
            .frames
            .iter()
            .rposition(|f| matches!(f, Frame::Scope(s) if s.id == scope))
        else {
            return Err(Unwind::Exit { scope, exit });
        };
        self.stack.frames.truncate(pos + 1);
        let Some(Frame::Scope(frame)) = self.stack.frames.pop() else {
            unreachable!("the frame at `pos` is the scope frame");
        };
        let frame = *frame;
        let mut scope_span = None;
        if let Some(spos) = self.stack.scopes.iter().position(|s| s.id == scope) {
            scope_span = Some(self.stack.scopes[spos].span.clone());
            self.stack.truncate_scopes(spos);
        }
        self.stack.depth = 0;
        if let Some(saved) = frame.saved {
            self.state = saved;
        }
        let next = match (frame.early, exit) {
            (EarlyExit::Limit(feed_err), ScopeExit::Exhausted(exhausted)) => {
                if let Some(span) = &scope_span {
                    spans::ended_early(span, "exhausted");
                }
                self.record(EventKind::Exhausted(exhausted.clone()));
                feed_err(exhausted, &mut self.stack)
            }
            (EarlyExit::Timeout(feed_err), ScopeExit::TimedOut(timed_out)) => {
                if let Some(span) = &scope_span {
                    spans::ended_early(span, "timed_out");
                }
                self.record(EventKind::TimedOut(timed_out.clone()));
                feed_err(timed_out, &mut self.stack)
            }
            (_, exit) => {
                return Err(Unwind::Fail(ErrorKind::Internal(format!(
                    "scope {scope} ended with {exit:?}, which does not match its kind"
                ))));
            }
        };
        Ok(next)
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(super) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A preview of a JSON value: a string as its text, anything else as its compact JSON.
pub(super) fn value_preview(value: &Value) -> String {
    match value {
        Value::String(s) => preview(s, PREVIEW_CHARS),
        other => preview(&other.to_string(), PREVIEW_CHARS),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BranchFuture, BranchOutcome};
    use agent_op::{BoxFuture, Prompt};

    /// A scheduler for machines that never fork.
    #[derive(Clone)]
    struct NoForks;

    impl Scheduler for NoForks {
        fn run_par<S: Send + 'static>(
            &self,
            _: Vec<BranchFuture<S>>,
        ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
            unreachable!("the machine under test never forks")
        }

        fn run_race<S: Send + 'static>(
            &self,
            _: Vec<BranchFuture<S>>,
        ) -> BoxFuture<'static, Vec<Option<BranchOutcome<S>>>> {
            unreachable!("the machine under test never forks")
        }
    }

    /// Every branch of a fork allocates a machine's future, and every model call its infer
    /// future: letting them grow (an unboxed timer, a prompt moved in) costs fan-out speed.
    #[test]
    fn the_futures_every_branch_allocates_stay_small() {
        let rt = Arc::new(Runtime {
            config: crate::Config::new(),
            scheduler: NoForks,
            stream: false,
            checkpoints: std::sync::Mutex::new(Vec::new()),
            next_scope: std::sync::atomic::AtomicU64::new(0),
            journal: None,
            context_clock: None,
            clock: crate::clock::RunClock::default(),
            rng: None,
        });
        let log = BranchLog::new(TraceId::from("x"), None);
        let mut m: Machine<(), NoForks> = Machine::root(
            rt,
            log,
            (),
            agent_op::interp::rebox::<()>,
            tracing::Span::none(),
        );
        // Errors travel through every frame of a deep fork nest (in `Result`s the debug build
        // does not overlap on the stack): a bigger `ErrorKind` overflowed the 128-deep nest
        // on a 2 MiB stack. Large payloads are boxed.
        assert!(std::mem::size_of::<ErrorKind>() <= 88);
        let run = m.run(Node::Unit);
        assert!(
            std::mem::size_of_val(&run) <= 256,
            "{}",
            std::mem::size_of_val(&run)
        );
        drop(run);
        // Journaling added the effect's journal answer (16 bytes) and two small awaits. The
        // prompt comes shared (an `async fn` holds an argument twice: 432 bytes for a
        // `Prompt`): this was 1,096 bytes with the prompt passed by value.
        let infer = m.call_model(String::new(), Arc::new(Prompt::new()));
        assert!(
            std::mem::size_of_val(&infer) <= 640,
            "{}",
            std::mem::size_of_val(&infer)
        );
        drop(infer);
        // What `op::infer_raw` boxes per call: the model call's future and little more.
        let raw = m.infer_raw(String::new(), Prompt::new());
        assert!(
            std::mem::size_of_val(&raw) <= 688,
            "{}",
            std::mem::size_of_val(&raw)
        );
        drop(raw);
        // Allocated once per `op::infer` call (it holds the request, the prepared context and
        // the model call's boxed future), not per branch.
        let infer = m.infer(String::new(), agent_op::ContextRequest::new(""));
        assert!(
            std::mem::size_of_val(&infer) <= 2048,
            "{}",
            std::mem::size_of_val(&infer)
        );
    }
}
