//! # agent-interp-temporal: programs as durable Temporal workflows
//!
//! The third interpreter, a peer of `agent-interp-seq` and `agent-interp-par`: the same
//! [`Op`](agent_op::Op) programs run as Temporal workflows, so a run survives the crash of
//! any machine and its model, tool and memory calls spread over a fleet of workers.
//!
//! - [`Worker`] registers programs by name (`.program("research", |input| program)`) and
//!   the effect handlers its activities use (provider, tools, memory), then serves a task
//!   queue; workers with no program serve activities only;
//! - [`connect`] reaches a server; [`start`] starts a program and returns a [`RunHandle`]:
//!   its [`result`](RunHandle::result), [`steer`](RunHandle::steer) (a signal feeding the
//!   steering queue), [`trace`](RunHandle::trace) and
//!   [`checkpoints`](RunHandle::checkpoints) (queries);
//! - [`WorkflowScheduler`] is the branch scheduler the workflows run the shared engine with;
//! - [`TemporalError`] is what can go wrong.
//!
//! Inside a workflow, the engine (`agent-engine`) runs unchanged: budgets, scopes, tool
//! permissions and CRDT merges stay in the workflow, so they hold across branches whose
//! activities run on different machines; every effect is a Temporal operation (model, tool
//! and memory calls are activities; `op::now` and `op::random` read the workflow's
//! deterministic time and randomness; deadlines are durable timers; a race's losers cancel
//! their activities). See `docs/DISTRIBUTED.md` for the mapping, the determinism rules and
//! the at-least-once boundary.
//!
//! This crate needs Rust 1.92 (the Temporal SDK's); it is behind the facade's `temporal`
//! feature, off by default.

mod activities;
mod client;
mod clock;
mod driver;
mod error;
mod proxy;
mod rollover;
mod scheduler;
mod wire;
mod worker;
mod workflow;

pub use client::{CONNECT_TIMEOUT, RunHandle, StartOptions, connect, connect_to, start};
pub use error::TemporalError;
pub use scheduler::WorkflowScheduler;
pub use temporalio_client::Client;
pub use worker::{
    DEFAULT_ACTIVITY_ATTEMPTS, DEFAULT_ACTIVITY_TIMEOUT, DEFAULT_CONTINUE_AS_NEW_AFTER,
    DEFAULT_HEARTBEAT_TIMEOUT, Worker,
};
