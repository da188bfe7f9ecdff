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
//! - [`Concurrent`] is the scheduler, for use with `agent_engine::Engine`;
//! - a budget around concurrent branches is shared by all of them: see
//!   [`agent_op::op::limit`] for the exact guarantee (a budget of N calls never admits more
//!   than N calls, however many branches race for it).
//!
//! ```
//! use std::time::Duration;
//! use agent_interp_par::run;
//! use agent_interp_par::Config;
//! use agent_op::op::{self, Op};
//! use agent_op::{Prompt, Response};
//! use agent_provider::ScriptedProvider;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
//! // Each call takes 100 ms; three of them in a `par` take 100 ms, not 300. (This runtime's
//! // clock is paused: waits take no real time, and the 100 ms are exact.)
//! let provider = ScriptedProvider::from_fn(|_, p| Ok(Response::text(p.messages[0].content().to_uppercase())))
//!     .with_latency(Duration::from_millis(100));
//! let ask = |q: &str| op::infer_raw("m", Prompt::new().user(q)).map(|r| r.content);
//! let program: Op<(), Vec<String>> = op::par(vec![ask("a"), ask("b"), ask("c")]);
//! let started = tokio::time::Instant::now();
//! let outcome = run(&Config::new().provider(provider), (), program).await.unwrap();
//! assert_eq!(outcome.value, ["A", "B", "C"]);
//! assert_eq!(started.elapsed(), Duration::from_millis(100));
//! # });
//! ```

mod scheduler;

pub use agent_engine::{Config, JournalReport, Outcome, RunError};
pub use scheduler::Concurrent;

use std::sync::Arc;

use agent_engine::Engine;
use agent_op::journal::Journal;
use agent_op::{Checkpoint, Op};

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

/// Replays the run recorded in `journal` (with concurrent branches): see [`Engine::replay`]. No provider
/// call, no tool execution; a changed or missing request is an
/// [`ErrorKind::Divergence`](agent_engine::ErrorKind::Divergence).
pub async fn replay<S, A>(
    config: &Config,
    journal: &dyn Journal,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Concurrent::with_limit(config.concurrency_limit()))
        .replay(config, journal, initial_state, program)
        .await
}

/// Replays `journal` while the program asks the same questions, then runs live (with concurrent branches):
/// see [`Engine::replay_then_live`].
pub async fn replay_then_live<S, A>(
    config: &Config,
    journal: &dyn Journal,
    record_to: Option<Arc<dyn Journal>>,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Concurrent::with_limit(config.concurrency_limit()))
        .replay_then_live(config, journal, record_to, initial_state, program)
        .await
}

/// Runs `program` durably (with concurrent branches), committing every nondeterministic result to
/// `journal` before the program sees it: see [`Engine::run_durable`].
pub async fn run_durable<S, A>(
    config: &Config,
    journal: Arc<dyn Journal>,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Concurrent::with_limit(config.concurrency_limit()))
        .run_durable(config, journal, initial_state, program)
        .await
}

/// Continues the durable run of `journal` after a crash (with concurrent branches): see
/// [`Engine::resume`] (and its at-least-once boundary).
pub async fn resume<S, A>(
    config: &Config,
    journal: Arc<dyn Journal>,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Concurrent::with_limit(config.concurrency_limit()))
        .resume(config, journal, initial_state, program)
        .await
}

/// Goes back to `checkpoint` of the durable run of `journal` and continues live from there
/// (with concurrent branches): see [`Engine::resume_from`].
pub async fn resume_from<S, A>(
    config: &Config,
    journal: &dyn Journal,
    checkpoint: &Checkpoint,
    record_to: Option<Arc<dyn Journal>>,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Concurrent::with_limit(config.concurrency_limit()))
        .resume_from(
            config,
            journal,
            checkpoint,
            record_to,
            initial_state,
            program,
        )
        .await
}
