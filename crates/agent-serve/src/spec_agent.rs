//! [`SpecAgent`]: the agent a TOML spec describes, served.

use std::path::Path;

use agent_engine::Config;
use agent_op::Op;
use agent_spec::{Input, Role, Spec, SpecError};
use serde_json::{Value, json};

use crate::agents::{InvalidInput, Request, ServedAgent, message_of, message_schema};

/// The agent of a TOML spec (what `agent run` runs), served: each run's message becomes the
/// agent's goal (the spec's own goal stays as its standing task) and the thread's earlier
/// turns its context.
pub struct SpecAgent {
    spec: Spec,
    toolbox: agent_agents::Toolbox,
    config: Config,
}

impl SpecAgent {
    /// Reads the spec at `path` and builds its provider, tools (starting its MCP servers,
    /// their stderr logged beside `logs` unless the spec says where) and memory.
    pub async fn load(path: impl AsRef<Path>, logs: &Path) -> Result<SpecAgent, SpecError> {
        let spec = Spec::read(path.as_ref())?;
        SpecAgent::from_spec(spec, logs).await
    }

    /// Builds what `spec` describes.
    pub async fn from_spec(spec: Spec, logs: &Path) -> Result<SpecAgent, SpecError> {
        let base = spec.dir().to_path_buf();
        let provider = agent_spec::provider(&spec.model, &base, None)?;
        let tools = agent_spec::toolbox(&spec, &base, &logs.join(spec.name())).await?;
        let mut config = Config::new()
            .shared_provider(provider)
            .tools(tools.toolbox.tool_set())
            .goal(spec.agent.goal.clone());
        if let Some(memory) = agent_spec::memory(&spec, &base).await? {
            config = config.memory(memory);
        }
        Ok(SpecAgent {
            spec,
            toolbox: tools.toolbox,
            config,
        })
    }

    /// The name the spec gives its agent (`[agent] name`, else the file's name).
    pub fn name(&self) -> String {
        self.spec.name()
    }

    /// The spec.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }
}

/// A spec agent's input: the spec's own form (`{"message", "history"}`), else one of
/// [`message_schema`]'s.
fn spec_input(input: &Value) -> Result<Input, InvalidInput> {
    if let Ok(input) = serde_json::from_value::<Input>(input.clone()) {
        return Ok(input);
    }
    let (message, earlier) = message_of(input).ok_or_else(|| {
        InvalidInput(
            "the input is a message: a string, {\"message\": …}, or {\"messages\": [{\"role\", \"content\"}, …]}"
                .into(),
        )
    })?;
    let mut spec_input = Input::message(message);
    spec_input.history = turns(&earlier);
    Ok(spec_input)
}

/// The user and assistant turns of a conversation, in the spec's terms.
fn turns(turns: &[crate::runs::Turn]) -> Vec<agent_spec::Turn> {
    turns
        .iter()
        .filter_map(|turn| {
            let role = match turn.role.as_str() {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                _ => return None,
            };
            Some(agent_spec::Turn {
                role,
                content: turn.content.clone(),
            })
        })
        .collect()
}

impl ServedAgent for SpecAgent {
    fn description(&self) -> &str {
        &self.spec.agent.goal
    }

    fn input_schema(&self) -> Value {
        json!({"anyOf": [self.spec.input_schema(), message_schema()]})
    }

    fn output_schema(&self) -> Value {
        self.spec.output_schema()
    }

    fn config(&self) -> Config {
        self.config.clone()
    }

    fn program(&self, request: Request<'_>) -> Result<Op<(), Value>, InvalidInput> {
        let mut input = spec_input(request.input)?;
        let mut history = turns(request.history);
        history.append(&mut input.history);
        input.history = history;
        agent_spec::program_for(&self.spec, &self.toolbox, &input)
            .map_err(|e| InvalidInput(e.to_string()))
    }
}
