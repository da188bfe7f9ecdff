//! # agent-engine: the engine every interpreter shares
//!
//! Runs [`Op`](agent_op::Op) programs: a trampolined machine per run or branch, `limit` and
//! `timeout` scopes with budgets shared across branches, journaling (durable runs, resume,
//! replay), the trace and live events. What it leaves to an interpreter is *when* the
//! branches of a `par` or `race` run: that is a [`Scheduler`], and each interpreter crate is
//! a scheduler plus its `run` functions.
//!
//! - [`Engine`] runs programs with a given scheduler; [`Outcome`] is what a finished run
//!   returns, [`RunError`] what a failed one returns (with its trace and checkpoints);
//! - [`Config`] says what a run may use (provider, tools, memory, subscribers, steering);
//!   [`Clock`] is where it reads time and waits (tokio's unless the config brings one);
//! - [`Scheduler`], [`BranchFuture`] and [`BranchOutcome`] are the contract with interpreters
//!   ([`Spawn`]: how a scheduler that may start tasks lets journal commits run beside a run);
//! - [`Subscriber`] observes events live; [`JsonlSubscriber`] streams them to a file;
//! - [`spans`] maps runs onto `tracing` spans.
//!
//! Programs are usually run through an interpreter: `agent-interp-seq` (one branch after
//! another, the reference semantics) or `agent-interp-par` (branches polled together).

mod clock;
mod config;
mod engine;
mod error;
mod subscriber;

pub use clock::{Clock, TokioClock};
pub use config::{Config, SteeringQueue};
pub use engine::scheduler::{BranchFuture, BranchOutcome, Scheduler, Spawn};
pub use engine::spans;
pub use engine::{Engine, JournalReport, MAX_FORK_DEPTH, Outcome};
pub use error::{ErrorKind, RunError, ScopeWidening};
pub use subscriber::{JsonlSubscriber, Subscriber};
pub use tokio_util::sync::CancellationToken;
