//! For interpreter authors: the program tree interpreters walk.
//!
//! Programs are written with [`crate::op`](mod@crate::op) and run by the interpreters of
//! `agent-interp-seq` and `agent-interp-par`; nothing here is needed for that. This module is
//! the contract between the two sides, for whoever writes another interpreter or tool that
//! walks programs. It may change between minor versions more readily than the rest of the
//! crate.
//!
//! An [`Op<S, A>`](crate::Op) is a typed handle on a [`Node<S>`]: the same tree with the result
//! type erased, so an interpreter can run it in a loop with an explicit stack of continuations
//! (constant Rust stack, however long the program runs).
//!
//! # Passing values
//!
//! A value travels from the node that produces it to the continuation that consumes it as
//! `&mut dyn Any` pointing at an `Option<T>` (a *slot*, usually on the interpreter's stack):
//! the consumer takes the value out with [`take_value`] (`None` if the slot does not hold a
//! `T`, which well-typed programs never cause). Nothing is boxed on the way, so a pure
//! step costs no allocation beyond the nodes the program itself builds. A value that must be
//! stored (a finished branch, a `pure` node) is an [`AnyValue`]: a boxed slot.
//!
//! The interpreter supplies a [`Feed`]: "give this value to whatever runs next". Continuations
//! that compute a value directly (`map`, a loop's `break`) feed it on; the interpreter bounds
//! how deep such feeding may nest (see [`Bind::box_input`]).
//!
//! The typed constructors in [`crate::op`](mod@crate::op) guarantee every continuation receives
//! the type it expects, so a failed downcast is an interpreter bug, not bad input. Nothing
//! here panics on one: [`take_value`] answers `None`, and [`rebox`] boxes an empty slot, so
//! an interpreter can report the bug as an error.

use std::any::Any;
use std::time::Duration;

use serde_json::Value;

use crate::budget::{Budget, Exhausted, TimedOut};
use crate::memory::{MemoryId, NewMemory};
use crate::message::Prompt;
use crate::trace::EventKind;

/// A stored value: a boxed `Option<T>` slot holding `Some(value)`, for values that must
/// outlive the step that produced them.
pub type AnyValue = Box<dyn Any + Send>;

/// Boxes `value` as an [`AnyValue`].
pub fn box_value<T: Send + 'static>(value: T) -> AnyValue {
    Box::new(Some(value))
}

/// Takes the `T` out of a slot; `None` if it holds no `T` (an interpreter fed the wrong slot:
/// a bug, never caused by a well-typed program).
pub fn take_value<T: 'static>(slot: &mut dyn Any) -> Option<T> {
    slot.downcast_mut::<Option<T>>().and_then(Option::take)
}

/// Takes the `T` out of a slot inside the continuations [`crate::op`](mod@crate::op) builds,
/// whose types the constructors guarantee.
///
/// # Panics
/// If the slot does not hold a `T`: only an interpreter feeding a continuation the wrong slot
/// can cause that, and the interpreters of this workspace run continuations under
/// `catch_unwind`, reporting it as a failed run.
pub(crate) fn expect_value<T: 'static>(slot: &mut dyn Any) -> T {
    match take_value(slot) {
        Some(value) => value,
        None => panic!(
            "agent-op: a continuation expected a value of type `{}`; the interpreter fed it \
             another (interpreter bug)",
            std::any::type_name::<T>()
        ),
    }
}

/// Boxes the `T` in `slot` (a helper for [`Bind::box_input`] and friends). A slot holding no
/// `T` becomes an empty slot, which [`take_value`] then answers `None` for.
pub fn rebox<T: Send + 'static>(slot: &mut dyn Any) -> AnyValue {
    Box::new(take_value::<T>(slot))
}

/// The interpreter's side of value passing: gives a value to whatever runs next and returns
/// the node to run after that.
pub trait Feed<S> {
    /// Feeds the value in `slot` to the next continuation.
    fn feed(&mut self, slot: &mut dyn Any) -> Node<S>;
}

/// What a [`Node::Read`] runs: reads the state and feeds what it read on.
pub type ReadFn<S> = dyn FnOnce(&S, &mut dyn Feed<S>) -> Node<S> + Send;

/// One node of a program over state `S`.
#[non_exhaustive]
pub enum Node<S> {
    /// A finished computation yielding `()` (needs no allocation).
    Unit,
    /// A finished computation with a stored value.
    Pure(AnyValue),
    /// Run a node, then feed its value to a continuation.
    Bind(Box<dyn Bind<S>>),
    /// A loop that runs its body until the body breaks.
    Loop(Box<dyn Loop<S>>),
    /// Read the state: the closure feeds what it reads to the next continuation.
    Read(Box<ReadFn<S>>),
    /// Change the state. Yields `()`.
    Write(Box<dyn FnOnce(&mut S) + Send>),
    /// An effect whose result type is fixed by its kind; see [`Effect`]. (Boxed, like every
    /// large variant, so nodes stay a few words wide and cheap to move.)
    Effect(Box<Effect>),
    /// Take a checkpoint. Yields `()`.
    Checkpoint(Box<CheckpointNode<S>>),
    /// Run a body under a budget or time limit.
    Scope(Box<Scope<S>>),
    /// Run branches as a `par` or a `race`.
    Fork(Box<Fork<S>>),
}

impl<S> Node<S> {
    /// A finished computation yielding `()`.
    pub fn unit() -> Node<S> {
        Node::Unit
    }
}

/// A node held inside a scope or fork: dropped without recursion (see [`dismantle`]),
/// however deeply scopes and forks nest, while the rest of the tree drops as usual.
///
/// Bind nodes do the same for the nodes they hold, so any program can be dropped unrun.
pub struct Subtree<S>(Option<Node<S>>);

impl<S> Subtree<S> {
    /// Holds `node`.
    pub fn new(node: Node<S>) -> Subtree<S> {
        Subtree(Some(node))
    }

    /// The node, to run it.
    pub fn into_node(mut self) -> Node<S> {
        self.0.take().unwrap_or(Node::Unit)
    }
}

impl<S> Drop for Subtree<S> {
    fn drop(&mut self) {
        if let Some(node) = self.0.take() {
            dismantle(node);
        }
    }
}

/// Drops a node without recursing down its binds, scopes and forks.
///
/// A long chain (built with `fold`, or a loop wrapping a program in `timeout` and `map` again
/// and again) or forks nested thousands deep would overflow the stack if dropped recursively.
/// Bind nodes and [`Subtree`]s call this on the nodes they hold, so dropping any node is safe;
/// an interpreter may call it directly on a node it drops unrun.
pub fn dismantle<S>(node: Node<S>) {
    let mut current = Some(node);
    let mut pending: Vec<Node<S>> = Vec::new();
    loop {
        match current.take() {
            // `bind` now holds nothing, so dropping it is shallow.
            Some(Node::Bind(mut bind)) => current = Some(bind.take()),
            Some(Node::Scope(scope)) => match *scope {
                Scope::Limit { mut body, .. }
                | Scope::Timeout { mut body, .. }
                | Scope::Tools { mut body, .. }
                | Scope::Agent { mut body, .. } => {
                    current = body.0.take();
                }
            },
            Some(Node::Fork(fork)) => match *fork {
                Fork::Par { branches, .. } | Fork::Race { branches, .. } => {
                    pending.extend(branches.into_iter().map(Subtree::into_node));
                }
            },
            Some(leaf) => drop(leaf),
            None => match pending.pop() {
                Some(next) => current = Some(next),
                None => break,
            },
        }
    }
}

/// A checkpoint to take.
pub struct CheckpointNode<S> {
    /// The checkpoint's name.
    pub name: String,
    /// Serializes the state (captured where `S: Serialize` was known).
    pub snapshot: fn(&S) -> Result<Value, serde_json::Error>,
}

/// A node followed by a continuation. Interpreters call [`Bind::take`] once to get the node to
/// run, keep the `Bind` on their stack, and [`Bind::resume`] it with the node's value.
pub trait Bind<S>: Send {
    /// Takes the node to run first. Called exactly once, before `resume`.
    fn take(&mut self) -> Node<S>;

    /// Gives the first node's value to the continuation; returns the node to run next (the
    /// continuation may instead compute a value and `next.feed` it on).
    fn resume(self: Box<Self>, slot: &mut dyn Any, next: &mut dyn Feed<S>) -> Node<S>;

    /// Boxes the value in `slot` (of the type `resume` expects), so an interpreter can store
    /// it instead of feeding it right away when feeding nests too deep.
    fn box_input(&self, slot: &mut dyn Any) -> AnyValue;
}

/// What a loop does after one run of its body.
pub enum LoopStep<S> {
    /// Run this node (the body again), then resume the loop with its value.
    Continue(Node<S>),
    /// The loop is done and has fed its value on; run this node next.
    Done(Node<S>),
}

/// A loop. Interpreters call [`Loop::start`] once, then [`Loop::resume`] with each value of the
/// body until it is done, keeping the loop on their stack, so a loop of any length runs in
/// constant memory.
pub trait Loop<S>: Send {
    /// The first run of the body. Called exactly once.
    fn start(&mut self) -> Node<S>;

    /// Feeds the body's value back: run the body again, or finish (feeding the loop's value to
    /// `next`).
    fn resume(&mut self, slot: &mut dyn Any, next: &mut dyn Feed<S>) -> LoopStep<S>;

    /// Boxes a value of the body's type (see [`Bind::box_input`]).
    fn box_input(&self, slot: &mut dyn Any) -> AnyValue;
}

/// Effects with fixed result types. The interpreter feeds exactly the type listed for each.
#[derive(Debug)]
#[non_exhaustive]
pub enum Effect {
    /// Call a model. Yields [`Response`](crate::Response).
    InferRaw {
        /// The model.
        model: String,
        /// The prompt.
        prompt: Prompt,
    },
    /// Build a prompt from a request with the run's
    /// [`ContextPipeline`](crate::ContextPipeline), then call a model with it. Yields
    /// [`Response`](crate::Response).
    Infer {
        /// The model.
        model: String,
        /// What to ask, and how to gather and fit the context.
        request: crate::context::ContextRequest,
    },
    /// Call a tool. Yields `Result<serde_json::Value, ToolError>`; an unknown tool fails the run.
    Tool {
        /// The tool's name.
        name: String,
        /// Its arguments.
        args: Value,
        /// The id the model gave the call, when a model asked for it.
        call_id: Option<String>,
    },
    /// The definitions of the tools this run permits. Yields `Vec<ToolDefinition>`.
    ToolDefinitions,
    /// Whether the run's provider enforces JSON-schema response formats for a model
    /// ([`Provider::supports_json_schema`](crate::Provider::supports_json_schema)). Yields
    /// `bool` (`false` without a provider).
    SupportsJsonSchema {
        /// The model.
        model: String,
    },
    /// Record an event. Yields `()`.
    Emit(EventKind),
    /// The trace so far. Yields [`Trace`](crate::Trace).
    GetTrace,
    /// The id of the run or branch running this. Yields [`TraceId`](crate::TraceId).
    TraceId,
    /// The next steering message, if any. Yields `Option<Steering>`.
    Check,
    /// Wait for the next steering message, at most this long. Yields `Option<Steering>`
    /// (`None` when the time passed first).
    AwaitSteering(Duration),
    /// Store a memory. Yields [`MemoryId`].
    Remember(NewMemory),
    /// Search memory. Yields `Vec<MemoryEntry>`.
    Recall {
        /// The query text.
        query: String,
        /// Most entries to return.
        limit: usize,
    },
    /// Delete a memory. Yields `bool` (whether it existed).
    Forget(MemoryId),
    /// Fail the run (or the branch) with a message. Yields nothing.
    Fail(String),
    /// Read the clock. Yields `chrono::DateTime<chrono::Utc>` (journaled, so a replay reads
    /// the recorded time).
    Now,
    /// Draw a random number. Yields `u64` (journaled, so a replay draws the recorded one).
    Random,
}

/// Continues after a scope's body returned normally: takes the body's value from the slot,
/// wraps it as `Ok`, and feeds it on.
pub type ScopeOk<S> = fn(&mut dyn Any, &mut dyn Feed<S>) -> Node<S>;

/// A budget, time limit, tool scope or agent marker around a body.
#[non_exhaustive]
pub enum Scope<S> {
    /// `limit(budget, body)`: yields `Result<A, Exhausted>`.
    Limit {
        /// The budget.
        budget: Budget,
        /// The body.
        body: Subtree<S>,
        /// Feeds `Ok(value)` on.
        ok: ScopeOk<S>,
        /// Feeds `Err(exhausted)` on.
        exhausted: fn(Exhausted, &mut dyn Feed<S>) -> Node<S>,
    },
    /// `with_tools(scope, body)`: yields `A`.
    Tools {
        /// The tools in scope.
        scope: std::sync::Arc<crate::tool::ToolScope>,
        /// The body.
        body: Subtree<S>,
        /// Feeds the body's value on.
        pass: ScopePass<S>,
    },
    /// `invoke_agent(name, call_id, body)`: yields `A`. Marks `body` as the run of the agent
    /// `name` (a sub-agent, answering the tool call `call_id` when a model asked for it), so
    /// telemetry shows it as one.
    Agent {
        /// The agent's name.
        name: String,
        /// The id of the tool call it answers, if any.
        call_id: Option<String>,
        /// The body.
        body: Subtree<S>,
        /// Feeds the body's value on.
        pass: ScopePass<S>,
    },
    /// `timeout(limit, body)`: yields `Result<A, TimedOut>`.
    Timeout {
        /// The time limit.
        limit: Duration,
        /// The body.
        body: Subtree<S>,
        /// Feeds `Ok(value)` on.
        ok: ScopeOk<S>,
        /// Feeds `Err(timed_out)` on.
        timed_out: fn(TimedOut, &mut dyn Feed<S>) -> Node<S>,
    },
}

/// Continues after a tool scope's body: feeds its value on unchanged.
pub type ScopePass<S> = fn(&mut dyn Any, &mut dyn Feed<S>) -> Node<S>;

/// Branches that run from the same state.
#[non_exhaustive]
pub enum Fork<S> {
    /// All branches run; yields `Vec<B>` in declaration order; end states are merged.
    Par {
        /// The branches.
        branches: Vec<Subtree<S>>,
        /// Boxes a branch's final value (a `B`).
        finish: fn(&mut dyn Any) -> AnyValue,
        /// `Merge::merge` for the state type.
        merge: fn(&mut S, S),
        /// Builds the `Vec<B>` from the branches' values and feeds it on.
        collect: fn(Vec<AnyValue>, &mut dyn Feed<S>) -> Node<S>,
    },
    /// The first branch to succeed wins; yields its `B` and its end state.
    Race {
        /// The branches.
        branches: Vec<Subtree<S>>,
        /// Boxes a branch's final value (a `B`).
        finish: fn(&mut dyn Any) -> AnyValue,
    },
}
