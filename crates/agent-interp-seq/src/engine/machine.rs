//! The trampoline that runs one run or branch.
//!
//! A [`Machine`] walks a [`Node`] tree with an explicit stack of frames (continuations, loops,
//! scopes), so the Rust stack stays flat however long the program runs. Pure steps (binds,
//! state reads and writes, loops) run synchronously; only effects await.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use agent_op::interp::{AnyValue, Bind, Effect, Feed, Fork, Loop, LoopStep, Node, Scope, ScopeOk};
use agent_op::trace::event::{
    self, CheckpointReached, ForkKind, InferEnd, InferStart, LimitStart, TimeoutStart,
};
use agent_op::{
    BoxFuture, Checkpoint, Event, EventKind, Exhausted, MemoryBackend, NewMemory, PREVIEW_CHARS,
    Prompt, Provider, TimedOut, ToolError, TraceId, content_hash, preview,
};
use chrono::Utc;
use futures_util::FutureExt;
use serde_json::Value;
use tokio::time::{Instant, sleep_until};

use crate::engine::log::BranchLog;
use crate::engine::scheduler::{BranchFuture, BranchOutcome, Scheduler};
use crate::engine::scope::{
    ActiveScope, Admission, BudgetCell, Reservation, ScopeExit, ScopeId, WorstCase,
};
use crate::engine::{Runtime, Unwind};
use crate::error::ErrorKind;

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
    /// The state on entry, restored if the scope ends early.
    saved: S,
    ok: ScopeOk<S>,
    early: EarlyExit<S>,
}

enum EarlyExit<S> {
    Limit(fn(Exhausted, &mut dyn Feed<S>) -> Node<S>),
    Timeout(fn(TimedOut, &mut dyn Feed<S>) -> Node<S>),
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
}

impl<S> Stack<S> {
    fn new(
        finish: fn(&mut dyn Any) -> AnyValue,
        inherited: Arc<[ActiveScope]>,
        root: bool,
    ) -> Stack<S> {
        let inherited_deadline = inherited.iter().filter_map(|s| s.deadline).min();
        // Room for a few frames up front: most programs nest a handful deep.
        let mut frames = Vec::with_capacity(8);
        frames.push(Frame::Return(finish));
        Stack {
            frames,
            scopes: Vec::new(),
            scope_deadlines: Vec::new(),
            inherited_deadline,
            inherited,
            next_deadline: inherited_deadline,
            own_deadline: None,
            root,
            done: None,
            depth: 0,
        }
    }

    fn all_scopes(&self) -> impl Iterator<Item = &ActiveScope> {
        self.inherited.iter().chain(self.scopes.iter())
    }

    /// Enters `scope`, innermost.
    fn push_scope(&mut self, scope: ActiveScope) {
        let earliest = earliest(self.own_deadline, scope.deadline);
        self.scopes.push(scope);
        self.scope_deadlines.push(earliest);
        self.refresh_deadline();
    }

    /// Leaves the scopes from the `len`-th on.
    fn truncate_scopes(&mut self, len: usize) {
        self.scopes.truncate(len);
        self.scope_deadlines.truncate(len);
        self.refresh_deadline();
    }

    fn refresh_deadline(&mut self) {
        self.own_deadline = self.scope_deadlines.last().copied().flatten();
        self.next_deadline = earliest(self.inherited_deadline, self.own_deadline);
    }

    fn pop_scope(&mut self, id: ScopeId) {
        if let Some(pos) = self.scopes.iter().rposition(|s| s.id == id) {
            self.truncate_scopes(pos);
        }
    }

    /// The outermost scope whose deadline has passed, as an unwind. Looks for it only once
    /// the nearest deadline has passed, so checking costs O(1) while none has.
    fn expired(&self, now: Instant) -> Option<Unwind> {
        if self.next_deadline.is_none_or(|d| d > now) {
            return None;
        }
        self.all_scopes()
            .find(|s| s.deadline.is_some_and(|d| d <= now))
            .map(|s| Unwind::Exit {
                scope: s.id,
                exit: s.deadline_exit(now),
            })
    }
}

/// The earlier of two optional deadlines (`None` is no deadline).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<S> Feed<S> for Stack<S> {
    fn feed(&mut self, slot: &mut dyn Any) -> Node<S> {
        let Some(frame) = self.frames.pop() else {
            return Node::Effect(Box::new(Effect::Fail(
                "internal interpreter error: a value was produced with no continuation".into(),
            )));
        };
        if self.depth >= MAX_FEED_DEPTH {
            let stored = match &frame {
                Frame::Bind(bind) => Some(bind.box_input(slot)),
                Frame::Loop(body) => Some(body.box_input(slot)),
                // Scope and return frames only nest as deep as the program's own structure.
                Frame::Scope(_) | Frame::Return(_) => None,
            };
            if let Some(value) = stored {
                self.frames.push(frame);
                return Node::Pure(value);
            }
        }
        self.depth += 1;
        let next = match frame {
            Frame::Bind(bind) => bind.resume(slot, self),
            Frame::Loop(mut body) => match body.resume(slot, self) {
                LoopStep::Continue(next) => {
                    self.frames.push(Frame::Loop(body));
                    next
                }
                LoopStep::Done(next) => next,
            },
            Frame::Scope(scope) => {
                self.pop_scope(scope.id);
                (scope.ok)(slot, self)
            }
            Frame::Return(finish) => {
                self.done = Some(finish(slot));
                Node::Unit
            }
        };
        self.depth -= 1;
        next
    }
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
        }
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
            if let Some(unwind) = self.stack.expired(Instant::now()) {
                return Err(unwind);
            }
        }
        // Long pure loops must not starve other tasks (or sibling branches). Tokio's task
        // budget makes the machine yield when its task has done enough; a concurrent
        // scheduler may poll branches outside that budget (agent-interp-par's does), so a machine
        // also yields on its own every `YIELD_EVERY` nodes.
        tokio::task::coop::consume_budget().await;
        if self.ticks % YIELD_EVERY == 0 {
            tokio::task::yield_now().await;
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
                () = Box::pin(sleep_until(deadline)) => {}
                out = fut => return Ok(out),
            },
            // Boxed: most awaits have no deadline, and a timer is large to carry in every
            // effect's future.
            (true, Some(deadline)) => tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Unwind::Aborted),
                () = Box::pin(sleep_until(deadline)) => {}
                out = fut => return Ok(out),
            },
        }
        // A deadline passed: unwind to the outermost scope whose deadline it was.
        Err(self.stack.expired(Instant::now()).unwrap_or_else(|| {
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
        let now = Instant::now();
        let (active, body, ok, early) = match scope {
            Scope::Limit {
                budget,
                body,
                ok,
                exhausted,
            } => {
                self.record(EventKind::Limit(LimitStart {
                    budget: budget.clone(),
                }));
                let active = ActiveScope {
                    id,
                    started: now,
                    deadline: budget.time.and_then(|t| now.checked_add(t)),
                    budget: BudgetCell::new(budget),
                    is_timeout: false,
                };
                (active, body, ok, EarlyExit::Limit(exhausted))
            }
            Scope::Timeout {
                limit,
                body,
                ok,
                timed_out,
            } => {
                self.record(EventKind::Timeout(TimeoutStart { limit }));
                let active = ActiveScope {
                    id,
                    started: now,
                    // A deadline too far away to represent is no deadline.
                    deadline: now.checked_add(limit),
                    budget: None,
                    is_timeout: true,
                };
                (active, body, ok, EarlyExit::Timeout(timed_out))
            }
            _ => return Err(self.unsupported("a kind of scope")),
        };
        self.stack.push_scope(active);
        self.stack.frames.push(Frame::Scope(Box::new(ScopeFrame {
            id,
            saved: self.state.clone(),
            ok,
            early,
        })));
        Ok(body)
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
        if let Some(spos) = self.stack.scopes.iter().position(|s| s.id == scope) {
            self.stack.truncate_scopes(spos);
        }
        self.stack.depth = 0;
        self.state = frame.saved;
        let next = match (frame.early, exit) {
            (EarlyExit::Limit(feed_err), ScopeExit::Exhausted(exhausted)) => {
                self.record(EventKind::Exhausted(exhausted.clone()));
                feed_err(exhausted, &mut self.stack)
            }
            (EarlyExit::Timeout(feed_err), ScopeExit::TimedOut(timed_out)) => {
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

    // ------------------------------------------------------------------------------------
    // Effects
    // ------------------------------------------------------------------------------------

    /// Runs one effect and feeds its result to the next continuation. The I/O effects are boxed
    /// one by one: the machine's own future (which every branch allocates) stays small, and each
    /// call allocates only what it needs.
    async fn effect(&mut self, effect: Box<Effect>) -> Result<Node<S>, Unwind> {
        match *effect {
            Effect::InferRaw { model, prompt } => Box::pin(self.infer(model, prompt)).await,
            Effect::Tool { name, args } => Box::pin(self.call_tool(name, args)).await,
            Effect::ToolDefinitions => Ok(self
                .stack
                .feed(&mut Some(self.rt.config.tools.definitions()))),
            Effect::Emit(kind) => {
                self.record(kind);
                Ok(self.stack.feed(&mut Some(())))
            }
            Effect::GetTrace => Ok(self.stack.feed(&mut Some(self.log.snapshot()))),
            Effect::TraceId => Ok(self.stack.feed(&mut Some(self.id.clone()))),
            Effect::Check => {
                let steering = self.rt.config.steering.pop();
                if let Some(s) = &steering {
                    self.record(EventKind::Steering(s.clone()));
                }
                Ok(self.stack.feed(&mut Some(steering)))
            }
            Effect::Remember(memory) => Box::pin(self.remember(memory)).await,
            Effect::Recall { query, limit } => Box::pin(self.recall(query, limit)).await,
            Effect::Forget(id) => Box::pin(self.forget(id)).await,
            Effect::Fail(message) => Err(self.fail(ErrorKind::Program(message))),
            _ => Err(self.unsupported("an effect")),
        }
    }

    /// Reserves one model call on every budget in force, waiting while concurrent calls may
    /// still free room.
    async fn reserve(&mut self, worst: WorstCase) -> Result<Reservation, Unwind> {
        let cells: Vec<(ScopeId, Arc<BudgetCell>)> = self
            .stack
            .all_scopes()
            .filter_map(|s| s.budget.clone().map(|b| (s.id, b)))
            .collect();
        loop {
            let mut reservation = Reservation::new(worst);
            let mut blocked = None;
            for (scope, cell) in &cells {
                let settled = cell.settled();
                match cell.try_reserve(worst) {
                    Admission::Admitted => reservation.push(*scope, cell.clone()),
                    Admission::Exhausted(exhausted) => {
                        reservation.release();
                        return Err(Unwind::Exit {
                            scope: *scope,
                            exit: ScopeExit::Exhausted(exhausted),
                        });
                    }
                    Admission::Wait => {
                        blocked = Some(settled);
                        break;
                    }
                }
            }
            match blocked {
                None => return Ok(reservation),
                Some(settled) => {
                    reservation.release();
                    self.guarded(settled).await?;
                }
            }
        }
    }

    async fn infer(&mut self, model: String, prompt: Prompt) -> Result<Node<S>, Unwind> {
        let Some(provider) = self.rt.config.provider.clone() else {
            return Err(self.fail(ErrorKind::NoProvider));
        };
        let budgeted = self.stack.all_scopes().any(|s| s.budget.is_some());
        let reservation = if budgeted {
            // Worked out only under a budget: it serializes the prompt (into a counter).
            let worst = WorstCase {
                tokens: prompt.max_total_tokens(),
                cost: provider.max_cost(&model, &prompt),
            };
            Box::pin(self.reserve(worst)).await?
        } else {
            Reservation::new(WorstCase::default())
        };
        let iteration = self.iteration;
        self.record(EventKind::InferStart(InferStart {
            model: model.clone(),
            prompt_preview: prompt
                .messages
                .last()
                .map(|m| preview(m.content(), PREVIEW_CHARS))
                .unwrap_or_default(),
            messages: count(prompt.messages.len()),
            tools: count(prompt.tools.len()),
            iteration,
        }));
        self.iteration = self.iteration.saturating_add(1);
        let started = Instant::now();
        // If this is interrupted, dropping `reservation` counts the call with unknown usage.
        let result = if self.rt.stream {
            let rt = self.rt.clone();
            let id = self.id.clone();
            let mut forward = move |delta: agent_op::Delta| {
                for subscriber in &rt.config.subscribers {
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        subscriber.on_delta(&id, &delta);
                    }));
                }
            };
            self.guarded(provider.chat_stream(&model, &prompt, &mut forward))
                .await?
        } else {
            self.guarded(provider.chat(&model, &prompt)).await?
        };
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                // The call counts; with no known usage it cannot exceed a limit.
                let _ = reservation.settle(None, None);
                return Err(self.fail(ErrorKind::Provider { model, error }));
            }
        };
        let exceeded = reservation.settle(Some(response.usage), response.cost);
        self.record(EventKind::InferEnd(InferEnd {
            model,
            response_preview: preview(&response.content, PREVIEW_CHARS),
            tool_calls: count(response.tool_calls.len()),
            finish_reason: response.finish_reason.clone(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cost: response.cost,
            duration_us: micros(started.elapsed()),
            iteration,
        }));
        match exceeded {
            Some((scope, exhausted)) => Err(Unwind::Exit {
                scope,
                exit: ScopeExit::Exhausted(exhausted),
            }),
            None => Ok(self.stack.feed(&mut Some(response))),
        }
    }

    async fn call_tool(&mut self, name: String, args: Value) -> Result<Node<S>, Unwind> {
        let iteration = self.iteration;
        self.record(EventKind::ToolCall(event::ToolCall {
            name: name.clone(),
            args: args.clone(),
            iteration,
        }));
        let Some(tool) = self.rt.config.tools.get(&name).cloned() else {
            let permitted = self.rt.config.tools.names().map(str::to_owned).collect();
            return Err(self.fail(ErrorKind::UnknownTool { name, permitted }));
        };
        let started = Instant::now();
        let result: Result<Value, ToolError> = if tool.is_blocking() {
            // Blocking work runs on tokio's blocking pool so it cannot stall other branches.
            // If the call is cancelled the thread finishes on its own; its result is dropped.
            let handle = tokio::runtime::Handle::current();
            let task = tokio::task::spawn_blocking(move || handle.block_on(tool.call(args)));
            match self.guarded(task).await? {
                Ok(result) => result,
                Err(join_error) => Err(ToolError::panicked(match join_error.try_into_panic() {
                    Ok(payload) => panic_message(payload.as_ref()),
                    Err(e) => e.to_string(),
                })),
            }
        } else {
            let call = std::panic::catch_unwind(AssertUnwindSafe(|| tool.call(args)));
            match call {
                Ok(fut) => match self.guarded(AssertUnwindSafe(fut).catch_unwind()).await? {
                    Ok(result) => result,
                    Err(payload) => Err(ToolError::panicked(panic_message(payload.as_ref()))),
                },
                Err(payload) => Err(ToolError::panicked(panic_message(payload.as_ref()))),
            }
        };
        let output = match &result {
            Ok(value) => value_preview(value),
            Err(error) => preview(&error.to_string(), PREVIEW_CHARS),
        };
        self.record(EventKind::ToolResult(event::ToolResult {
            name,
            success: result.is_ok(),
            output_preview: output,
            duration_us: micros(started.elapsed()),
            iteration,
        }));
        Ok(self.stack.feed(&mut Some(result)))
    }

    fn memory(&mut self) -> Result<Arc<dyn MemoryBackend>, Unwind> {
        match self.rt.config.memory.clone() {
            Some(backend) => Ok(backend),
            None => Err(self.fail(ErrorKind::NoMemoryBackend)),
        }
    }

    async fn remember(&mut self, memory: NewMemory) -> Result<Node<S>, Unwind> {
        let backend = self.memory()?;
        let content_preview = preview(&memory.content, PREVIEW_CHARS);
        let hash = content_hash(&memory.content);
        let tags = memory.tags.clone();
        match self.guarded(backend.store(memory)).await? {
            Ok(id) => {
                self.record(EventKind::Remember(event::Remember {
                    id: id.clone(),
                    content_preview,
                    content_hash: hash,
                    tags,
                }));
                Ok(self.stack.feed(&mut Some(id)))
            }
            Err(e) => Err(self.fail(ErrorKind::Memory(e))),
        }
    }

    async fn forget(&mut self, id: agent_op::MemoryId) -> Result<Node<S>, Unwind> {
        let backend = self.memory()?;
        match self.guarded(backend.delete(&id)).await? {
            Ok(existed) => {
                self.record(EventKind::Forget(event::Forget { id, existed }));
                Ok(self.stack.feed(&mut Some(existed)))
            }
            Err(e) => Err(self.fail(ErrorKind::Memory(e))),
        }
    }

    async fn recall(&mut self, query: String, limit: usize) -> Result<Node<S>, Unwind> {
        let backend = self.memory()?;
        match self.guarded(backend.search(&query, limit)).await? {
            Ok(hits) => {
                let entries: Vec<_> = hits.into_iter().map(|hit| hit.entry).collect();
                self.record(EventKind::Recall(event::Recall {
                    query_preview: preview(&query, PREVIEW_CHARS),
                    query_hash: content_hash(&query),
                    results: count(entries.len()),
                    ids: entries.iter().map(|e| e.id.clone()).collect(),
                }));
                Ok(self.stack.feed(&mut Some(entries)))
            }
            Err(e) => Err(self.fail(ErrorKind::Memory(e))),
        }
    }

    fn checkpoint(
        &mut self,
        name: String,
        snapshot: fn(&S) -> Result<Value, String>,
    ) -> Result<(), Unwind> {
        let state = match snapshot(&self.state) {
            Ok(state) => state,
            Err(message) => return Err(self.fail(ErrorKind::Checkpoint { name, message })),
        };
        // One clock read for the event and the checkpoint: they are the same moment.
        let at = Utc::now();
        let reached = CheckpointReached { name: name.clone() };
        self.record_event(Event::at(at, EventKind::Checkpoint(reached)));
        let checkpoint = Checkpoint::new(name, self.id.clone(), self.log.count(), state, at);
        for subscriber in &self.rt.config.subscribers {
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                subscriber.on_checkpoint(&checkpoint);
            }));
        }
        self.rt.push_checkpoint(checkpoint);
        Ok(())
    }

    // ------------------------------------------------------------------------------------
    // Forks
    // ------------------------------------------------------------------------------------

    fn branch(
        &self,
        log: Arc<BranchLog>,
        inherited: Arc<[ActiveScope]>,
        finish: fn(&mut dyn Any) -> AnyValue,
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
        }
    }

    /// Boxed with an explicit `Send` bound: the recursion machine → fork → branch machine would
    /// otherwise ask the compiler to prove `Send` for a future that contains itself.
    fn fork(&mut self, fork: Fork<S>) -> BoxFuture<'_, Result<Node<S>, Unwind>> {
        Box::pin(self.fork_inner(fork))
    }

    async fn fork_inner(&mut self, fork: Fork<S>) -> Result<Node<S>, Unwind> {
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
        let first = self.forked;
        self.forked += branches.len();
        let ids: Vec<TraceId> = (first..self.forked).map(|i| self.id.child(i)).collect();
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
            .map(|(node, log)| {
                let mut machine = self.branch(log.clone(), inherited.clone(), finish);
                Box::pin(async move {
                    let result = machine.run_caught(node).await;
                    machine.finish();
                    BranchOutcome {
                        result,
                        state: machine.state,
                    }
                }) as BranchFuture<S>
            })
            .collect();
        let scheduled = match kind {
            ForkKind::Race => self.rt.scheduler.run_race(futures),
            // `kind` is one of the two set above.
            _ => self.rt.scheduler.run_par(futures),
        };
        let outcomes = match self.guarded(scheduled).await {
            Ok(outcomes) => outcomes,
            Err(unwind) => {
                // Interrupted from outside: every branch still running was cancelled.
                for log in logs.iter().filter(|l| !l.is_finished()) {
                    log.mark_cancelled();
                }
                return Err(unwind);
            }
        };
        match par {
            Some((merge, collect)) => self.join_par(ids, &logs, outcomes, merge, collect),
            None => self.join_race(ids, &logs, outcomes),
        }
    }

    /// Marks every branch after `decided` (and any branch that did not finish) cancelled: the
    /// sequential interpreter would never have started them.
    fn discard_after(
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

    fn join_par(
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

    fn join_race(
        &mut self,
        ids: Vec<TraceId>,
        logs: &[Arc<BranchLog>],
        outcomes: Vec<Option<BranchOutcome<S>>>,
    ) -> Result<Node<S>, Unwind> {
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
                let Some(Some(outcome)) = outcomes.into_iter().nth(decided) else {
                    unreachable!("`decided` indexes a finished branch");
                };
                match outcome.result {
                    Ok(mut value) => {
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

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn value_preview(value: &Value) -> String {
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

    /// Every branch of a fork allocates a machine's future, and every model call its infer
    /// future: letting them grow (an unboxed timer, a prompt moved in) costs fan-out speed.
    #[test]
    fn the_futures_every_branch_allocates_stay_small() {
        let rt = Arc::new(Runtime {
            config: crate::Config::new(),
            scheduler: crate::Sequential,
            stream: false,
            checkpoints: std::sync::Mutex::new(Vec::new()),
            next_scope: std::sync::atomic::AtomicU64::new(0),
        });
        let log = BranchLog::new(TraceId::from("x"), None);
        let mut m: Machine<(), crate::Sequential> =
            Machine::root(rt, log, (), agent_op::interp::rebox::<()>);
        let run = m.run(Node::Unit);
        assert!(
            std::mem::size_of_val(&run) <= 256,
            "{}",
            std::mem::size_of_val(&run)
        );
        drop(run);
        let infer = m.infer(String::new(), Prompt::new());
        assert!(
            std::mem::size_of_val(&infer) <= 1024,
            "{}",
            std::mem::size_of_val(&infer)
        );
    }
}
