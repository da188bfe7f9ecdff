//! The program tree that interpreters walk.
//!
//! An [`Op<S, A>`](crate::Op) is a typed handle on a [`Node<S>`]: the same tree with the result
//! type erased, so an interpreter can run it in a loop with an explicit stack of continuations
//! (constant Rust stack, however long the program runs). Values travel between nodes as
//! [`AnyValue`]s; the typed constructors in [`crate::op`] guarantee every continuation receives
//! the type it expects, so a failed downcast is an interpreter bug, not bad input.
//!
//! This module is for interpreter authors. Programs are written with [`crate::op`].

use std::any::Any;
use std::time::Duration;

use serde_json::Value;

use crate::budget::{Budget, Exhausted, TimedOut};
use crate::memory::{MemoryId, NewMemory};
use crate::message::Prompt;
use crate::trace::EventKind;

/// A value whose type is known to the nodes that produce and consume it.
/// (Boxing a zero-sized value such as `()` does not allocate.)
pub type AnyValue = Box<dyn Any + Send>;

/// Unwraps a value the program's types guarantee to be an `A`.
///
/// # Panics
/// If the value is not an `A`. Well-typed programs built with [`crate::op`] never trigger this;
/// it can only be reached by an interpreter that feeds a continuation the wrong value.
pub fn take_value<A: 'static>(value: AnyValue) -> A {
    match value.downcast::<A>() {
        Ok(a) => *a,
        Err(_) => panic!(
            "agent-op: a continuation expected a value of type `{}`; the interpreter fed it \
             another type (interpreter bug)",
            std::any::type_name::<A>()
        ),
    }
}

/// One node of a program over state `S`.
pub enum Node<S> {
    /// A finished computation with its value.
    Pure(AnyValue),
    /// Run a node, then feed its value to a continuation.
    Bind(Box<dyn Bind<S>>),
    /// A loop that runs its body until the body breaks.
    Loop(Box<dyn Loop<S>>),
    /// Read the state (the closure returns the value).
    Read(Box<dyn FnOnce(&S) -> AnyValue + Send>),
    /// Change the state. Yields `()`.
    Write(Box<dyn FnOnce(&mut S) + Send>),
    /// An effect whose result type is fixed by its kind; see [`Effect`].
    Effect(Effect),
    /// Take a checkpoint. Yields `()`.
    Checkpoint {
        /// The checkpoint's name.
        name: String,
        /// Serializes the state (captured where `S: Serialize` was known).
        snapshot: fn(&S) -> Result<Value, String>,
    },
    /// Run a body under a budget or time limit.
    Scope(Box<Scope<S>>),
    /// Run branches as a `par` or a `race`.
    Fork(Box<Fork<S>>),
}

impl<S> Node<S> {
    /// A finished computation yielding `()` (no allocation).
    pub fn unit() -> Node<S> {
        Node::Pure(Box::new(()))
    }
}

/// A node followed by a continuation. Interpreters call [`Bind::take`] once to get the node to
/// run, keep the `Bind` on their stack, and [`Bind::resume`] it with the node's value.
pub trait Bind<S>: Send {
    /// Takes the node to run first. Called exactly once, before `resume`.
    fn take(&mut self) -> Node<S>;
    /// Feeds the first node's value to the continuation, giving the node to run next.
    fn resume(self: Box<Self>, value: AnyValue) -> Node<S>;
}

/// What a loop does after one run of its body.
pub enum LoopStep<S> {
    /// Run this node (the body again) and resume the loop with its value.
    Continue(Node<S>),
    /// The loop is done; this is its value.
    Break(AnyValue),
}

/// A loop. Interpreters call [`Loop::start`] once, then [`Loop::resume`] with each value of the
/// body until it breaks, keeping the loop on their stack, so a loop of any length runs in
/// constant memory.
pub trait Loop<S>: Send {
    /// The first run of the body. Called exactly once.
    fn start(&mut self) -> Node<S>;
    /// Feeds the body's value back; continue with another run or break.
    fn resume(&mut self, value: AnyValue) -> LoopStep<S>;
}

/// Effects with fixed result types. The interpreter boxes exactly the type listed for each.
#[derive(Debug)]
pub enum Effect {
    /// Call a model. Yields [`Response`](crate::Response).
    InferRaw {
        /// The model.
        model: String,
        /// The prompt.
        prompt: Prompt,
    },
    /// Call a tool. Yields `Result<serde_json::Value, ToolError>`; an unknown tool fails the run.
    Tool {
        /// The tool's name.
        name: String,
        /// Its arguments.
        args: Value,
    },
    /// The definitions of the tools this run permits. Yields `Vec<ToolDefinition>`.
    ToolDefinitions,
    /// Record an event. Yields `()`.
    Emit(EventKind),
    /// The trace so far. Yields [`Trace`](crate::Trace).
    GetTrace,
    /// The next steering message, if any. Yields `Option<Steering>`.
    Check,
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
}

/// A budget or time limit around a body.
pub enum Scope<S> {
    /// `limit(budget, body)`: yields `Result<A, Exhausted>`.
    Limit {
        /// The budget.
        budget: Budget,
        /// The body.
        body: Node<S>,
        /// Wraps the body's value as `Ok`.
        ok: fn(AnyValue) -> AnyValue,
        /// Makes the `Err` value.
        exhausted: fn(Exhausted) -> AnyValue,
    },
    /// `timeout(limit, body)`: yields `Result<A, TimedOut>`.
    Timeout {
        /// The time limit.
        limit: Duration,
        /// The body.
        body: Node<S>,
        /// Wraps the body's value as `Ok`.
        ok: fn(AnyValue) -> AnyValue,
        /// Makes the `Err` value.
        timed_out: fn(TimedOut) -> AnyValue,
    },
}

/// Branches that run from the same state.
pub enum Fork<S> {
    /// All branches run; yields `Vec<B>` in declaration order; end states are merged.
    Par {
        /// The branches.
        branches: Vec<Node<S>>,
        /// `Merge::merge` for the state type.
        merge: fn(&mut S, S),
        /// Builds the `Vec<B>` from the branches' values.
        collect: fn(Vec<AnyValue>) -> AnyValue,
    },
    /// The first branch to succeed wins; yields its `B` and its end state.
    Race {
        /// The branches.
        branches: Vec<Node<S>>,
    },
}
