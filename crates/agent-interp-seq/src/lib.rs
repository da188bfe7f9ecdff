//! # agent-interp-seq: the sequential interpreter
//!
//! Runs [`Op`] programs one operation at a time. Its behaviour is the reference
//! semantics of the DSL: every interpreter runs the same engine (`agent-engine`) and only
//! swaps the branch [`Scheduler`], so all give the same result, state and trace for the same
//! program. This crate is that engine with the [`Sequential`] scheduler.
//!
//! - [`run`] runs a program; [`Config`] says what it may use; [`run_agent`] runs an agent
//!   program in one call;
//! - [`run_durable`], [`resume`], [`replay`], [`replay_then_live`] and [`resume_from`] run
//!   it with a journal (`agent-journal`): write-ahead, resumed after a crash without paying
//!   twice, replayed with no calls, or diverging on purpose;
//! - [`Outcome`] is what a finished run returns, [`RunError`] what a failed one returns (with
//!   its trace and checkpoints: nothing recorded is lost);
//! - [`Subscriber`] observes events live; [`JsonlSubscriber`] streams them to a file;
//! - [`Engine`], [`Scheduler`] and the rest of `agent-engine` are re-exported for other
//!   interpreters and for code that names them through this crate.

mod agent;
mod sequential;

pub use agent::run_agent;
pub use agent_engine::{
    BranchFuture, BranchOutcome, CancellationToken, Clock, Config, Engine, ErrorKind,
    JournalReport, JsonlSubscriber, MAX_FORK_DEPTH, Outcome, RunError, Scheduler, ScopeWidening,
    SteeringQueue, Subscriber, TokioClock, spans,
};
pub use sequential::Sequential;

use std::sync::Arc;

use agent_op::journal::Journal;
use agent_op::{Checkpoint, Op};

/// Runs `program` from `initial_state`, one operation at a time; `par` branches run one after
/// another in declaration order, and `race` tries its branches in order.
///
/// Must be called inside a tokio runtime with the time driver enabled.
///
/// ```
/// use agent_interp_seq::{run, Config};
/// use agent_op::op::{self, Op};
/// use agent_op::{Prompt, Response};
/// use agent_provider::ScriptedProvider;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let config = Config::new().provider(ScriptedProvider::new([Response::text("hi!")]));
/// let program: Op<u32, String> = op::infer_raw("m", Prompt::new().user("hello"))
///     .and_then(|reply| op::modify(|turns: &mut u32| *turns += 1).map(move |_| reply.content));
/// let outcome = run(&config, 0, program).await.unwrap();
/// assert_eq!(outcome.value, "hi!");
/// assert_eq!(outcome.state, 1);
/// assert_eq!(outcome.trace.infer_calls(), 1);
/// # });
/// ```
pub async fn run<S, A>(
    config: &Config,
    initial_state: S,
    program: Op<S, A>,
) -> Result<Outcome<S, A>, RunError>
where
    S: Clone + Send + 'static,
    A: Send + 'static,
{
    Engine::new(Sequential)
        .run(config, initial_state, program)
        .await
}

/// Replays the run recorded in `journal` (one operation at a time): see [`Engine::replay`]. No provider
/// call, no tool execution; a changed or missing request is an
/// [`ErrorKind::Divergence`].
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
    Engine::new(Sequential)
        .replay(config, journal, initial_state, program)
        .await
}

/// Replays `journal` while the program asks the same questions, then runs live (one operation at a time):
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
    Engine::new(Sequential)
        .replay_then_live(config, journal, record_to, initial_state, program)
        .await
}

/// Runs `program` durably (one operation at a time), committing every nondeterministic result to
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
    Engine::new(Sequential)
        .run_durable(config, journal, initial_state, program)
        .await
}

/// Continues the durable run of `journal` after a crash (one operation at a time): see
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
    Engine::new(Sequential)
        .resume(config, journal, initial_state, program)
        .await
}

/// Goes back to `checkpoint` of the durable run of `journal` and continues live from there
/// (one operation at a time): see [`Engine::resume_from`].
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
    Engine::new(Sequential)
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
