//! # agent-interp-par: the concurrent interpreter
//!
//! Runs the same [`Op`] programs as `agent-interp-seq`, with the same
//! [`Config`], but `par` branches run concurrently and `race` really races: the first branch to
//! succeed wins and the others are cancelled. It is the sequential interpreter's engine with a
//! different branch scheduler ([`Concurrent`]), so for deterministic programs both interpreters
//! give the same result, final state and canonical trace (the property tests of this crate
//! check exactly that).
//!
//! - [`run`] runs a program;
//! - [`Concurrent`] is the scheduler, for use with `agent_interp_seq::Engine`;
//! - a budget around concurrent branches is shared by all of them: see
//!   [`agent_op::op::limit`] for the exact guarantee (a budget of N calls never admits more
//!   than N calls, however many branches race for it).
//!
//! ```
//! use std::time::Duration;
//! use agent_interp_par::run;
//! use agent_interp_seq::Config;
//! use agent_op::op::{self, Op};
//! use agent_op::{Prompt, Response};
//! use agent_provider::ScriptedProvider;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! // Each call takes 100 ms; three of them in a `par` take about 100 ms, not 300.
//! let provider = ScriptedProvider::from_fn(|_, p| Ok(Response::text(p.messages[0].content().to_uppercase())))
//!     .with_latency(Duration::from_millis(100));
//! let ask = |q: &str| op::infer_raw("m", Prompt::new().user(q)).map(|r| r.content);
//! let program: Op<(), Vec<String>> = op::par(vec![ask("a"), ask("b"), ask("c")]);
//! let started = std::time::Instant::now();
//! let outcome = run(&Config::new().provider(provider), (), program).await.unwrap();
//! assert_eq!(outcome.value, ["A", "B", "C"]);
//! assert!(started.elapsed() < Duration::from_millis(250));
//! # });
//! ```

mod scheduler;

pub use agent_interp_seq::{Config, Outcome, RunError};
pub use scheduler::Concurrent;

use agent_interp_seq::Engine;
use agent_op::Op;

/// Runs `program` from `initial_state`; the branches of every `par` and `race` run
/// concurrently (at most [`Config::max_concurrency`] of each fork at once).
///
/// Must be called inside a tokio runtime with the time driver enabled.
pub async fn run<S, A>(
    config: &Config,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Concurrent::with_limit(config.concurrency_limit()))
        .run(config, initial_state, program)
        .await
}
