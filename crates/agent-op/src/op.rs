//! The DSL: [`Op<S, A>`], a program over state `S` that returns an `A`, and the constructors
//! of its operations.
//!
//! An `Op` is inert data. Nothing happens until an interpreter runs it, so the same program can
//! run sequentially, concurrently, or against recorded responses.
//!
//! ```
//! use agent_op::op::{self, Op};
//!
//! // Count to three in the state, then read it back.
//! let program: Op<u32, u32> = op::repeat(3, |_| op::modify(|n: &mut u32| *n += 1))
//!     .then(op::get());
//! # let _ = program;
//! ```

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::budget::{Budget, Exhausted, TimedOut};
use crate::interp::{
    AnyValue, Bind, CheckpointNode, Effect, Feed, Fork, Loop, LoopStep, Node, Scope, Subtree,
    box_value, dismantle, expect_value, rebox,
};
use crate::memory::{MemoryEntry, MemoryId, NewMemory, Tag};
use crate::merge::Merge;
use crate::message::{Prompt, Response};
use crate::steering::Steering;
use crate::tool::{ToolDefinition, ToolError};
use crate::trace::{EventKind, Trace, TraceId};

/// A program over state `S` that returns an `A`.
///
/// Programs are `Send + 'static` values, so interpreters can run branches on other tasks.
/// Build them with the functions of this module and combine them with [`Op::map`],
/// [`Op::and_then`] and [`Op::then`], or with the [`op!`](crate::op!) macro.
#[must_use = "an Op does nothing until an interpreter runs it"]
pub struct Op<S, A> {
    node: Node<S>,
    _returns: PhantomData<fn() -> A>,
}

impl<S, A> Op<S, A> {
    fn from_node(node: Node<S>) -> Op<S, A> {
        Op {
            node,
            _returns: PhantomData,
        }
    }

    /// The erased tree, for interpreters.
    pub fn into_node(self) -> Node<S> {
        self.node
    }
}

impl<S: 'static, A: Send + 'static> Op<S, A> {
    /// Transforms the result.
    pub fn map<B, F>(self, f: F) -> Op<S, B>
    where
        B: Send + 'static,
        F: FnOnce(A) -> B + Send + 'static,
    {
        Op::from_node(Node::Bind(Box::new(MapNode {
            inner: Some(self.into_node()),
            f: Some(f),
            _a: PhantomData,
        })))
    }

    /// Runs `self`, then the program `f` builds from its result.
    pub fn and_then<B, F>(self, f: F) -> Op<S, B>
    where
        B: Send + 'static,
        F: FnOnce(A) -> Op<S, B> + Send + 'static,
    {
        Op::from_node(Node::Bind(Box::new(AndThenNode {
            inner: Some(self.into_node()),
            f: Some(f),
            _a: PhantomData,
        })))
    }

    /// Runs `self`, discards its result, then runs `next`.
    pub fn then<B: Send + 'static>(self, next: Op<S, B>) -> Op<S, B> {
        Op::from_node(Node::Bind(Box::new(ThenNode {
            first: Some(self.into_node()),
            next: Some(next.into_node()),
            _a: PhantomData::<fn(A)>,
        })))
    }

    /// Discards the result.
    pub fn void(self) -> Op<S, ()> {
        self.map(|_| ())
    }
}

struct MapNode<S, A, F> {
    inner: Option<Node<S>>,
    /// `Some` until `resume` (an `Option` because the node has a `Drop`).
    f: Option<F>,
    _a: PhantomData<fn(A)>,
}

impl<S, A, B, F> Bind<S> for MapNode<S, A, F>
where
    A: Send + 'static,
    B: Send + 'static,
    F: FnOnce(A) -> B + Send,
{
    fn take(&mut self) -> Node<S> {
        self.inner.take().unwrap_or_else(Node::unit)
    }

    fn resume(mut self: Box<Self>, slot: &mut dyn Any, next: &mut dyn Feed<S>) -> Node<S> {
        match self.f.take() {
            Some(f) => next.feed(&mut Some(f(expect_value::<A>(slot)))),
            None => resumed_twice(),
        }
    }

    fn box_input(&self, slot: &mut dyn Any) -> AnyValue {
        rebox::<A>(slot)
    }
}

struct AndThenNode<S, A, F> {
    inner: Option<Node<S>>,
    /// `Some` until `resume` (an `Option` because the node has a `Drop`).
    f: Option<F>,
    _a: PhantomData<fn(A)>,
}

impl<S, A, B, F> Bind<S> for AndThenNode<S, A, F>
where
    A: Send + 'static,
    F: FnOnce(A) -> Op<S, B> + Send,
{
    fn take(&mut self) -> Node<S> {
        self.inner.take().unwrap_or_else(Node::unit)
    }

    fn resume(mut self: Box<Self>, slot: &mut dyn Any, _next: &mut dyn Feed<S>) -> Node<S> {
        match self.f.take() {
            Some(f) => f(expect_value::<A>(slot)).into_node(),
            None => resumed_twice(),
        }
    }

    fn box_input(&self, slot: &mut dyn Any) -> AnyValue {
        rebox::<A>(slot)
    }
}

impl<S, A, F> Drop for MapNode<S, A, F> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            dismantle(inner);
        }
    }
}

impl<S, A, F> Drop for AndThenNode<S, A, F> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            dismantle(inner);
        }
    }
}

impl<S, A> Drop for ThenNode<S, A> {
    fn drop(&mut self) {
        // Two plain checks, not an iterator over both: a `then` node that ran holds neither,
        // and dropping it is on the path of every step (the iterator over the pair cost 75 of
        // the 557 instructions of a `seq.step` step).
        if let Some(first) = self.first.take() {
            dismantle(first);
        }
        if let Some(next) = self.next.take() {
            dismantle(next);
        }
    }
}

fn resumed_twice<S>() -> Node<S> {
    panic!("agent-op: a continuation was resumed twice (interpreter bug)")
}

struct ThenNode<S, A> {
    first: Option<Node<S>>,
    next: Option<Node<S>>,
    _a: PhantomData<fn(A)>,
}

impl<S, A: Send + 'static> Bind<S> for ThenNode<S, A> {
    fn take(&mut self) -> Node<S> {
        self.first.take().unwrap_or_else(Node::unit)
    }

    fn resume(mut self: Box<Self>, _slot: &mut dyn Any, _next: &mut dyn Feed<S>) -> Node<S> {
        // The first value is discarded: whoever owns the slot drops it.
        self.next.take().unwrap_or_else(Node::unit)
    }

    fn box_input(&self, slot: &mut dyn Any) -> AnyValue {
        rebox::<A>(slot)
    }
}

// ----------------------------------------------------------------------------------------
// Values and state
// ----------------------------------------------------------------------------------------

/// A program that returns `a` and does nothing else.
pub fn pure<S, A: Send + 'static>(a: A) -> Op<S, A> {
    if TypeId::of::<A>() == TypeId::of::<()>() {
        // `()` needs no storage: `Node::Unit` avoids allocating a slot for it.
        Op::from_node(Node::Unit)
    } else {
        Op::from_node(Node::Pure(box_value(a)))
    }
}

/// Returns a copy of the state.
pub fn get<S: Clone + Send + 'static>() -> Op<S, S> {
    Op::from_node(Node::Read(Box::new(|s: &S, next: &mut dyn Feed<S>| {
        next.feed(&mut Some(s.clone()))
    })))
}

/// Returns what `f` computes from the state (without copying the whole state).
pub fn gets<S, B, F>(f: F) -> Op<S, B>
where
    S: 'static,
    B: Send + 'static,
    F: FnOnce(&S) -> B + Send + 'static,
{
    Op::from_node(Node::Read(Box::new(
        move |s: &S, next: &mut dyn Feed<S>| next.feed(&mut Some(f(s))),
    )))
}

/// Replaces the state.
pub fn put<S: Send + 'static>(state: S) -> Op<S, ()> {
    Op::from_node(Node::Write(Box::new(move |s: &mut S| *s = state)))
}

/// Changes the state in place.
pub fn modify<S, F>(f: F) -> Op<S, ()>
where
    S: 'static,
    F: FnOnce(&mut S) + Send + 'static,
{
    Op::from_node(Node::Write(Box::new(f)))
}

/// Like [`gets`], and records a `StateRead` event labelled `key`.
///
/// Plain state operations record nothing, so tight loops stay cheap; use the labelled ones for
/// the reads and writes worth seeing in a trace.
pub fn gets_labeled<S, B, F>(key: impl Into<String>, f: F) -> Op<S, B>
where
    S: 'static,
    B: Send + 'static,
    F: FnOnce(&S) -> B + Send + 'static,
{
    emit(EventKind::state_read(key)).then(gets(f))
}

/// Like [`modify`], and records a `StateWrite` event labelled `key`.
pub fn modify_labeled<S, F>(key: impl Into<String>, f: F) -> Op<S, ()>
where
    S: 'static,
    F: FnOnce(&mut S) + Send + 'static,
{
    emit(EventKind::state_write(key)).then(modify(f))
}

// ----------------------------------------------------------------------------------------
// Effects
// ----------------------------------------------------------------------------------------

fn effect<S, A>(effect: Effect) -> Op<S, A> {
    Op::from_node(Node::Effect(Box::new(effect)))
}

/// Calls `model` with a raw prompt. A provider error fails the run.
pub fn infer_raw<S>(model: impl Into<String>, prompt: Prompt) -> Op<S, Response> {
    effect(Effect::InferRaw {
        model: model.into(),
        prompt,
    })
}

/// Calls `model` with a prompt built from `request`: the run's
/// [`ContextPipeline`](crate::ContextPipeline) gathers context from its sources (static text,
/// the recent conversation, memory, the program's state…) and compiles it under the request's
/// token budget. The trace gets a [`Context`](crate::EventKind::Context) event saying what
/// every source produced and which sections and tools were kept, shrunk or dropped, and why,
/// before the model call's own events.
///
/// A source that fails (unless it is optional) or critical sections that do not fit the
/// budget fail the run. A tool the compiled prompt left out cannot be called until the
/// branch's next model call: the run answers such a call with a
/// [`ToolError`] of kind [`NotOffered`](crate::ToolErrorKind::NotOffered).
///
/// ```
/// use agent_op::context::{ContextRequest, TokenBudget};
/// use agent_op::op::{self, Op};
/// use agent_op::Response;
///
/// let ask: Op<(), Response> = op::infer(
///     "gpt-4o-mini",
///     ContextRequest::new("What did we decide about the launch?").with_budget(TokenBudget::new(4_000)),
/// );
/// # let _ = ask;
/// ```
pub fn infer<S>(
    model: impl Into<String>,
    request: crate::context::ContextRequest,
) -> Op<S, Response> {
    effect(Effect::Infer {
        model: model.into(),
        request,
    })
}

/// Calls the tool `name`. A failing tool is a value (`Err(ToolError)`) the program can feed
/// back to a model; a name the run does not permit fails the run.
pub fn tool<S>(name: impl Into<String>, args: Value) -> Op<S, Result<Value, ToolError>> {
    effect(Effect::Tool {
        name: name.into(),
        args,
        call_id: None,
    })
}

/// Runs a tool call a model asked for: [`tool`] with the call's id kept in the trace's
/// `tool_call` event and on the call's span (`gen_ai.tool.call.id`).
pub fn tool_call<S>(call: crate::ToolCall) -> Op<S, Result<Value, ToolError>> {
    effect(Effect::Tool {
        name: call.name,
        args: call.arguments,
        call_id: Some(call.id),
    })
}

/// The definitions of the tools this run permits, to offer them to a model.
pub fn tool_definitions<S>() -> Op<S, Vec<ToolDefinition>> {
    effect(Effect::ToolDefinitions)
}

/// Whether the run's provider makes `model`'s replies follow a JSON schema given as
/// [`ResponseFormat::JsonSchema`](crate::ResponseFormat::JsonSchema) (see
/// [`Provider::supports_json_schema`](crate::Provider::supports_json_schema)): typed output
/// asks before choosing between the native format and instructions in the prompt.
pub fn supports_json_schema<S>(model: impl Into<String>) -> Op<S, bool> {
    effect(Effect::SupportsJsonSchema {
        model: model.into(),
    })
}

/// Records an event in the trace.
pub fn emit<S>(kind: impl Into<EventKind>) -> Op<S, ()> {
    effect(Effect::Emit(kind.into()))
}

/// The trace of this run (or of this branch) so far.
pub fn get_trace<S>() -> Op<S, Trace> {
    effect(Effect::GetTrace)
}

/// The id of the run or branch this runs in (`brave-otter-3f2a`, `brave-otter-3f2a.1`, ...):
/// the same under every interpreter, so CRDT state can use it to name the writer of a change.
pub fn trace_id<S>() -> Op<S, TraceId> {
    effect(Effect::TraceId)
}

/// Like [`modify`], with the id of the run or branch making the change (see [`trace_id`]).
///
/// ```
/// use agent_op::crdt::GCounter;
/// use agent_op::op::{self, Op};
///
/// let hit: Op<GCounter, ()> = op::modify_as(|hits: &mut GCounter, me| hits.increment(me, 1));
/// # let _ = hit;
/// ```
pub fn modify_as<S, F>(f: F) -> Op<S, ()>
where
    S: 'static,
    F: FnOnce(&mut S, &TraceId) + Send + 'static,
{
    trace_id().and_then(move |id| modify(move |s| f(s, &id)))
}

/// Takes a checkpoint named `name`: records a `Checkpoint` event and a
/// [`Checkpoint`](crate::Checkpoint) holding the state serialized to JSON and how many events
/// the run (or branch) had recorded, so [`Checkpoint::events_in`](crate::Checkpoint::events_in)
/// finds them in the final trace. It costs what serializing the state costs, not a copy of
/// the trace. A state that fails to serialize fails the run. Checkpoints are for inspecting a
/// run; resuming from one is not implemented yet.
pub fn checkpoint<S: Serialize>(name: impl Into<String>) -> Op<S, ()> {
    fn snapshot<S: Serialize>(s: &S) -> Result<Value, serde_json::Error> {
        serde_json::to_value(s)
    }
    Op::from_node(Node::Checkpoint(Box::new(CheckpointNode {
        name: name.into(),
        snapshot: snapshot::<S>,
    })))
}

/// Takes the next steering message queued from outside the run, if any. Taking it consumes
/// it: a branch that takes a message and is then cancelled has still taken it.
pub fn next_steering<S>() -> Op<S, Option<Steering>> {
    effect(Effect::Check)
}

/// Waits for the next steering message, at most `limit`: `None` if none came in time. The
/// run's abort token and enclosing deadlines still stop it. For a program that must pause
/// for a person (an approval, an answer).
pub fn wait_steering<S>(limit: Duration) -> Op<S, Option<Steering>> {
    effect(Effect::AwaitSteering(limit))
}

/// The old name of [`next_steering`], which says better that it takes a message.
#[deprecated(since = "0.2.0", note = "renamed to `next_steering`")]
pub fn check<S>() -> Op<S, Option<Steering>> {
    next_steering()
}

/// The current time. Programs read the clock through this rather than `Utc::now()`: the run's
/// journal records the reading, so a replay or a resumed run sees the same time.
///
/// ```
/// use agent_op::op::{self, Op};
///
/// let stamp: Op<(), String> = op::now().map(|t| t.to_rfc3339());
/// # let _ = stamp;
/// ```
pub fn now<S>() -> Op<S, chrono::DateTime<chrono::Utc>> {
    effect(Effect::Now)
}

/// A random number. Programs draw randomness through this rather than a generator of their
/// own: the run's journal records the value, so a replay or a resumed run draws the same.
///
/// ```
/// use agent_op::op::{self, Op};
///
/// let coin: Op<(), bool> = op::random().map(|n| n % 2 == 0);
/// # let _ = coin;
/// ```
pub fn random<S>() -> Op<S, u64> {
    effect(Effect::Random)
}

/// Fails the run (or, inside a `race`, this branch) with `message`.
pub fn fail<S, A>(message: impl Into<String>) -> Op<S, A> {
    effect(Effect::Fail(message.into()))
}

/// Stores a memory in the run's memory backend.
pub fn remember<S>(
    content: impl Into<String>,
    context: impl Into<String>,
    tags: Vec<Tag>,
) -> Op<S, MemoryId> {
    effect(Effect::Remember(NewMemory {
        content: content.into(),
        context: context.into(),
        tags,
    }))
}

/// The memories most relevant to `query`, best first, at most `limit` of them.
pub fn recall<S>(query: impl Into<String>, limit: usize) -> Op<S, Vec<MemoryEntry>> {
    effect(Effect::Recall {
        query: query.into(),
        limit,
    })
}

/// Deletes a memory; returns whether it existed.
pub fn forget<S>(id: MemoryId) -> Op<S, bool> {
    effect(Effect::Forget(id))
}

// ----------------------------------------------------------------------------------------
// Scopes
// ----------------------------------------------------------------------------------------

fn feed_ok<S, A: Send + 'static, E: Send + 'static>(
    slot: &mut dyn Any,
    next: &mut dyn Feed<S>,
) -> Node<S> {
    let a = expect_value::<A>(slot);
    next.feed(&mut Some(Ok::<A, E>(a)))
}

fn feed_err<S, A: Send + 'static, E: Send + 'static>(error: E, next: &mut dyn Feed<S>) -> Node<S> {
    next.feed(&mut Some(Err::<A, E>(error)))
}

/// Runs `body` under `budget`. If any limit is exceeded the body is stopped and this returns
/// `Err(Exhausted)`; the body's events stay in the trace (they happened, and may have cost
/// money) but its state changes are discarded. Nested limits all count: every model call is
/// charged to every `limit` around it, and when several are exceeded the outermost one stops.
///
/// # The guarantee, with concurrent branches
///
/// A budget is shared by everything inside its `limit`, including branches that run at the
/// same time. Before each model call the interpreter *reserves* on every enclosing budget, and
/// *settles* with the real usage afterwards:
///
/// - **calls**: a call starts only if `calls made + calls in flight + 1 <= limit`, so a budget
///   of N calls never admits more than N calls, however many branches race for it;
/// - **tokens** and **cost**: a call starts alone only if `spent < limit`, and alongside calls
///   in flight only if `spent + their worst cases + its worst case <= limit`. A call's worst
///   case is [`Prompt::max_total_tokens`](crate::Prompt::max_total_tokens) tokens — every byte
///   sent (messages, tools, the `response_format` schema) plus chat-template overhead plus
///   `max_tokens` — and [`Provider::max_cost`](crate::Provider::max_cost) dollars, worked out
///   from the same estimate; when it is unknown (no `max_tokens`, no prices), the call counts
///   as taking everything that is left, so it runs alone. Calls that cannot start yet wait for
///   calls in flight to settle;
/// - **time**: the body is stopped when the time is up, like a [`timeout`], but the result is
///   `Err(Exhausted { resource: Time, .. })`.
///
/// After a call settles, spending above a limit stops the body. A single call can overshoot a
/// tokens or cost limit (nobody knows a reply's length in advance), but no call *starts* once a
/// limit is reached. A call cut short by a timeout still counts as a call, with unknown usage.
///
/// Put as a formula: when every call uses at most its worst case (true for byte-level
/// tokenizers, and for `max_cost` from real prices), then under either interpreter, for every
/// program,
///
/// ```text
/// spent  <=  limit - 1 + largest single call
/// ```
///
/// for tokens and for cost alike (each call counted whole, including calls that were cut
/// short after they started, which a provider may still bill). Accounting saturates at
/// `u64::MAX` and never wraps. A provider reporting *more* than the worst case loosens the
/// bound only by that excess. The property tests of `agent-interp-par` check the formula on
/// generated `par` programs under both interpreters.
/// Cost counts only calls whose cost is known: pair a cost budget with a calls or tokens budget
/// when the provider reports no prices.
///
/// Run sequentially, calls never overlap, so the rules reduce to "call while some budget is
/// left; stop once it is exceeded". With concurrent branches, *which* branch gets the last
/// call can depend on timing; the outcome is still reported in declaration order (a failure
/// or an exhausted budget in an earlier branch wins over one in a later branch), so programs
/// whose branches do not compete for the last of a budget behave the same under every
/// interpreter.
pub fn limit<S, A: Send + 'static>(budget: Budget, body: Op<S, A>) -> Op<S, Result<A, Exhausted>> {
    Op::from_node(Node::Scope(Box::new(Scope::Limit {
        budget,
        body: Subtree::new(body.into_node()),
        ok: feed_ok::<S, A, Exhausted>,
        exhausted: feed_err::<S, A, Exhausted>,
    })))
}

/// Runs `body` for at most `after`. If time runs out, in-flight work is cancelled and this
/// returns `Err(TimedOut)`, with the same rules as [`limit`] for events and state.
pub fn timeout<S, A: Send + 'static>(
    after: Duration,
    body: Op<S, A>,
) -> Op<S, Result<A, TimedOut>> {
    Op::from_node(Node::Scope(Box::new(Scope::Timeout {
        limit: after,
        body: Subtree::new(body.into_node()),
        ok: feed_ok::<S, A, TimedOut>,
        timed_out: feed_err::<S, A, TimedOut>,
    })))
}

/// Runs `body` with exactly the tools of `scope` (see [`ToolScope`](crate::ToolScope)): other
/// tool names are refused with a [`ToolError`] of kind
/// [`Denied`](crate::ToolErrorKind::Denied) and a `tool_denied` trace event; the model is
/// offered only these tools. Nested scopes only narrow: one naming a tool or capability the
/// enclosing scope lacks fails the run when entered.
///
/// ```
/// use agent_op::op::{self, Op};
/// use agent_op::{FnTool, ToolScope, ToolSet};
/// use serde_json::{json, Value};
///
/// let read = FnTool::new("read", "Reads a file", json!({"type": "object"}), |_: Value| async { Ok(json!("…")) });
/// let scope = ToolScope::new("reader", ToolSet::new().with(read)).grant("fs.read");
/// let program: Op<(), _> = op::with_tools(scope, op::tool("write", json!({})));
/// # let _ = program;
/// ```
pub fn with_tools<S, A: Send + 'static>(scope: crate::ToolScope, body: Op<S, A>) -> Op<S, A> {
    fn pass<S>(slot: &mut dyn Any, next: &mut dyn Feed<S>) -> Node<S> {
        next.feed(slot)
    }
    Op::from_node(Node::Scope(Box::new(Scope::Tools {
        scope: std::sync::Arc::new(scope),
        body: Subtree::new(body.into_node()),
        pass: pass::<S>,
    })))
}

/// Runs `body` as the agent `name`: the value and the trace are `body`'s, and telemetry
/// shows it as an `invoke_agent {name}` span. With `call_id` (the tool call a model made
/// to reach this agent, as for a sub-agent offered as a tool), the agent's span nests in an
/// `execute_tool {name}` span for that call, as the GenAI conventions draw an agent used as a
/// tool.
pub fn invoke_agent<S, A: Send + 'static>(
    name: impl Into<String>,
    call_id: Option<String>,
    body: Op<S, A>,
) -> Op<S, A> {
    fn pass<S>(slot: &mut dyn Any, next: &mut dyn Feed<S>) -> Node<S> {
        next.feed(slot)
    }
    Op::from_node(Node::Scope(Box::new(Scope::Agent {
        name: name.into(),
        call_id,
        body: Subtree::new(body.into_node()),
        pass: pass::<S>,
    })))
}

// ----------------------------------------------------------------------------------------
// Branches
// ----------------------------------------------------------------------------------------

/// Runs every branch from the current state and returns their results in declaration order.
/// The branches' end states are merged in declaration order with [`Merge`]. If a branch fails,
/// the `par` fails with the error of the failing branch that comes first in declaration order.
pub fn par<S: Merge + 'static, B: Send + 'static>(branches: Vec<Op<S, B>>) -> Op<S, Vec<B>> {
    fn merge<S: Merge>(into: &mut S, other: S) {
        into.merge(other);
    }
    fn collect<S, B: Send + 'static>(values: Vec<AnyValue>, next: &mut dyn Feed<S>) -> Node<S> {
        let values: Vec<B> = values
            .into_iter()
            .map(|mut v| expect_value::<B>(&mut *v))
            .collect();
        next.feed(&mut Some(values))
    }
    Op::from_node(Node::Fork(Box::new(Fork::Par {
        branches: branches
            .into_iter()
            .map(|branch| Subtree::new(branch.into_node()))
            .collect(),
        finish: rebox::<B>,
        merge: merge::<S>,
        collect: collect::<S, B>,
    })))
}

/// Runs the branches from the current state; the first to succeed wins, and its result and end
/// state are kept. Fails with the first branch's error if all fail, and on an empty race.
///
/// # Losers and budgets
///
/// The sequential interpreter runs the branches one after another and stops at the first
/// success, so later branches never start. The concurrent interpreter starts them all and
/// cancels the losers when one wins — after they may already have called models. Those calls
/// really happened: they count against every enclosing [`limit`] (a budget counts real
/// spend, whichever interpreter runs), their events stay in the trace marked
/// [`cancelled`](crate::TraceEntry::cancelled), and
/// [`Trace::spend`](crate::Trace::spend) reports them as `discarded`, apart from the spend
/// whose work was kept. So a race whose losers call models can leave less budget after it
/// under the concurrent interpreter than under the sequential one: a program that spends
/// the last of a budget after such a race may succeed sequentially and run out concurrently.
pub fn race<S, B: Send + 'static>(branches: Vec<Op<S, B>>) -> Op<S, B> {
    Op::from_node(Node::Fork(Box::new(Fork::Race {
        branches: branches
            .into_iter()
            .map(|branch| Subtree::new(branch.into_node()))
            .collect(),
        finish: rebox::<B>,
    })))
}

// ----------------------------------------------------------------------------------------
// Loops and sequences (all run in constant stack and memory)
// ----------------------------------------------------------------------------------------

/// Runs `body` with an accumulator until it returns `ControlFlow::Break`.
///
/// ```
/// use std::ops::ControlFlow;
/// use agent_op::op::{self, Op};
///
/// // Sum 1..=10 without touching the state.
/// let sum: Op<(), u64> = op::loop_fn((1u64, 0u64), |(i, acc)| {
///     op::pure(if i > 10 { ControlFlow::Break(acc) } else { ControlFlow::Continue((i + 1, acc + i)) })
/// });
/// # let _ = sum;
/// ```
pub fn loop_fn<S, Acc, B, F>(init: Acc, body: F) -> Op<S, B>
where
    S: 'static,
    Acc: Send + 'static,
    B: Send + 'static,
    F: FnMut(Acc) -> Op<S, ControlFlow<B, Acc>> + Send + 'static,
{
    Op::from_node(Node::Loop(Box::new(LoopNode {
        init: Some(init),
        body,
        _types: PhantomData,
    })))
}

struct LoopNode<S, Acc, B, F> {
    init: Option<Acc>,
    body: F,
    _types: PhantomData<fn(S) -> B>,
}

impl<S, Acc, B, F> Loop<S> for LoopNode<S, Acc, B, F>
where
    S: 'static,
    Acc: Send + 'static,
    B: Send + 'static,
    F: FnMut(Acc) -> Op<S, ControlFlow<B, Acc>> + Send,
{
    fn start(&mut self) -> Node<S> {
        match self.init.take() {
            Some(acc) => (self.body)(acc).into_node(),
            None => panic!("agent-op: a loop was started twice (interpreter bug)"),
        }
    }

    fn resume(&mut self, slot: &mut dyn Any, next: &mut dyn Feed<S>) -> LoopStep<S> {
        match expect_value::<ControlFlow<B, Acc>>(slot) {
            ControlFlow::Continue(acc) => LoopStep::Continue((self.body)(acc).into_node()),
            ControlFlow::Break(b) => LoopStep::Done(next.feed(&mut Some(b))),
        }
    }

    fn box_input(&self, slot: &mut dyn Any) -> AnyValue {
        rebox::<ControlFlow<B, Acc>>(slot)
    }
}

/// Runs `step(0)`, `step(1)`, ..., `step(n - 1)` in order, discarding their results.
pub fn repeat<S, A, F>(n: u64, step: F) -> Op<S, ()>
where
    S: 'static,
    A: Send + 'static,
    F: FnMut(u64) -> Op<S, A> + Send + 'static,
{
    if n == 0 {
        return pure(());
    }
    Op::from_node(Node::Loop(Box::new(RepeatNode {
        i: 0,
        n,
        step,
        _a: PhantomData::<fn() -> A>,
    })))
}

/// `repeat` needs no accumulator, so unlike `loop_fn` its body needs no `map` to build a
/// `ControlFlow`: one allocation less per iteration.
struct RepeatNode<A, F> {
    i: u64,
    n: u64,
    step: F,
    _a: PhantomData<fn() -> A>,
}

impl<S, A, F> Loop<S> for RepeatNode<A, F>
where
    S: 'static,
    A: Send + 'static,
    F: FnMut(u64) -> Op<S, A> + Send,
{
    fn start(&mut self) -> Node<S> {
        self.i = 1;
        (self.step)(0).into_node()
    }

    fn resume(&mut self, _slot: &mut dyn Any, next: &mut dyn Feed<S>) -> LoopStep<S> {
        if self.i >= self.n {
            LoopStep::Done(next.feed(&mut Some(())))
        } else {
            let i = self.i;
            self.i += 1;
            LoopStep::Continue((self.step)(i).into_node())
        }
    }

    fn box_input(&self, slot: &mut dyn Any) -> AnyValue {
        rebox::<A>(slot)
    }
}

/// Runs the programs one after another and collects their results in order.
pub fn sequence<S, A>(ops: Vec<Op<S, A>>) -> Op<S, Vec<A>>
where
    S: 'static,
    A: Send + 'static,
{
    let results = Vec::with_capacity(ops.len());
    loop_fn(
        (ops.into_iter(), results),
        |(mut rest, mut results)| match rest.next() {
            None => pure(ControlFlow::Break(results)),
            Some(op) => op.map(move |a| {
                results.push(a);
                ControlFlow::Continue((rest, results))
            }),
        },
    )
}

/// Runs `f` on every item, in order, and collects the results.
pub fn for_each<S, T, A, I, F>(items: I, mut f: F) -> Op<S, Vec<A>>
where
    S: 'static,
    T: Send + 'static,
    A: Send + 'static,
    I: IntoIterator<Item = T>,
    I::IntoIter: Send + 'static,
    F: FnMut(T) -> Op<S, A> + Send + 'static,
{
    let results = Vec::new();
    loop_fn(
        (items.into_iter(), results),
        move |(mut rest, mut results)| match rest.next() {
            None => pure(ControlFlow::Break(results)),
            Some(item) => f(item).map(move |a| {
                results.push(a);
                ControlFlow::Continue((rest, results))
            }),
        },
    )
}
