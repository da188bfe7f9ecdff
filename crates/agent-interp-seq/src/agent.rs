//! [`run_agent`]: run a conversational agent program in one call.

use agent_op::agent::AgentState;
use agent_op::{Op, Provider, ToolSet};

use crate::{Config, RunError, run};

/// Runs `program` for an agent with `system_prompt`, using `provider` and permitting `tools`,
/// and returns what the program returned. For more control (subscribers, steering, memory,
/// the trace), build a [`Config`] and call [`run`].
///
/// ```
/// use agent_interp_seq::run_agent;
/// use agent_op::agent::react;
/// use agent_op::{Response, ToolSet};
/// use agent_provider::ScriptedProvider;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let provider = ScriptedProvider::new([Response::text("Paris.")]);
/// let answer = run_agent(provider, ToolSet::new(), "Answer briefly.", react("m", "Capital of France?", 4))
///     .await
///     .unwrap();
/// assert_eq!(answer, "Paris.");
/// # });
/// ```
pub async fn run_agent<A: Send + 'static>(
    provider: impl Provider + 'static,
    tools: ToolSet,
    system_prompt: impl Into<String>,
    program: Op<AgentState, A>,
) -> Result<A, RunError> {
    let config = Config::new().provider(provider).tools(tools);
    run(&config, AgentState::new(system_prompt), program)
        .await
        .map(|outcome| outcome.value)
}
