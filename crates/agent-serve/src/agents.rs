//! The agents a server serves: a name, schemas, and how a run's program is made from its
//! input.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_engine::Config;
use agent_op::Op;
use serde_json::{Value, json};

use crate::runs::Turn;

/// What a run asks of an agent: its input, and the earlier turns of its thread.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The run's input, as the client sent it (already checked against the agent's input
    /// schema when it has one).
    pub input: &'a Value,
    /// The thread's conversation before this run (empty for a run without a thread).
    pub history: &'a [Turn],
}

/// An input an agent refuses, with what is wrong with it (answered as a 422).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

/// An agent a [`Server`](crate::Server) serves.
///
/// [`FnAgent`] makes one from a closure; the `agent serve` command makes one from each TOML
/// spec. Implement it for agents whose program or config depends on more than the input.
pub trait ServedAgent: Send + Sync + 'static {
    /// A description for people (and for the protocols' agent lists).
    fn description(&self) -> &str {
        ""
    }

    /// The JSON schema of the input it takes.
    fn input_schema(&self) -> Value {
        message_schema()
    }

    /// The JSON schema of its answer.
    fn output_schema(&self) -> Value {
        json!({"type": "string"})
    }

    /// The config its runs start from: provider, tools, memory. The server adds its own
    /// subscriber, cancellation token, steering queue and trace id to a clone of it.
    fn config(&self) -> Config;

    /// The program of a run, made from its request.
    fn program(&self, request: Request<'_>) -> Result<Op<(), Value>, InvalidInput>;
}

/// The input schema of agents that take one message: a string, `{"message": …}`, or the
/// LangGraph form `{"messages": [{"role", "content"}, …]}` (the last user message is the
/// input, the earlier ones its history).
pub fn message_schema() -> Value {
    json!({
        "anyOf": [
            {"type": "string"},
            {
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"]
            },
            {
                "type": "object",
                "properties": {"messages": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "role": {"type": "string"},
                            "type": {"type": "string"},
                            "content": {"type": "string"}
                        },
                        "required": ["content"]
                    }
                }},
                "required": ["messages"]
            }
        ]
    })
}

/// The user's message in an input of [`message_schema`]'s forms, and the turns it carries
/// before it (the `messages` form); `None` if the input has none of those forms.
pub fn message_of(input: &Value) -> Option<(String, Vec<Turn>)> {
    match input {
        Value::String(text) => Some((text.clone(), Vec::new())),
        Value::Object(map) => {
            if let Some(Value::String(text)) = map.get("message") {
                return Some((text.clone(), Vec::new()));
            }
            let Some(Value::Array(messages)) = map.get("messages") else {
                return None;
            };
            let mut turns = Vec::with_capacity(messages.len());
            for message in messages {
                let role = message
                    .get("role")
                    .or_else(|| message.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("user");
                let role = match role {
                    "human" | "user" => "user",
                    "ai" | "assistant" => "assistant",
                    "system" | "developer" => "system",
                    _ => return None,
                };
                let content = message.get("content").and_then(Value::as_str)?;
                turns.push(Turn {
                    role: role.to_owned(),
                    content: content.to_owned(),
                });
            }
            let last = turns.pop()?;
            (last.role == "user").then_some((last.content, turns))
        }
        _ => None,
    }
}

/// Makes a run's program from its request.
type Make = dyn Fn(Request<'_>) -> Result<Op<(), Value>, InvalidInput> + Send + Sync;

/// An agent made of a config and a closure from the request to the program.
///
/// ```
/// use agent_serve::{FnAgent, Request, message_of, InvalidInput};
/// use agent_engine::Config;
/// use agent_op::op;
///
/// let echo = FnAgent::new(Config::new(), |request: Request<'_>| {
///     let (message, _) = message_of(request.input)
///         .ok_or_else(|| InvalidInput("a message is needed".into()))?;
///     Ok(op::pure(serde_json::Value::String(message)))
/// })
/// .description("Says what it is told");
/// # let _ = echo;
/// ```
pub struct FnAgent {
    config: Config,
    make: Arc<Make>,
    description: String,
    input_schema: Value,
    output_schema: Value,
}

impl FnAgent {
    /// An agent whose runs start from `config` and run what `make` returns.
    pub fn new(
        config: Config,
        make: impl Fn(Request<'_>) -> Result<Op<(), Value>, InvalidInput> + Send + Sync + 'static,
    ) -> FnAgent {
        FnAgent {
            config,
            make: Arc::new(make),
            description: String::new(),
            input_schema: message_schema(),
            output_schema: json!({"type": "string"}),
        }
    }

    /// Its description.
    pub fn description(mut self, text: impl Into<String>) -> FnAgent {
        self.description = text.into();
        self
    }

    /// The JSON schema of its input (default: [`message_schema`]).
    pub fn input_schema(mut self, schema: Value) -> FnAgent {
        self.input_schema = schema;
        self
    }

    /// The JSON schema of its answer (default: a string).
    pub fn output_schema(mut self, schema: Value) -> FnAgent {
        self.output_schema = schema;
        self
    }
}

impl ServedAgent for FnAgent {
    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }

    fn output_schema(&self) -> Value {
        self.output_schema.clone()
    }

    fn config(&self) -> Config {
        self.config.clone()
    }

    fn program(&self, request: Request<'_>) -> Result<Op<(), Value>, InvalidInput> {
        (self.make)(request)
    }
}

/// The served agents, by name.
#[derive(Clone, Default)]
pub(crate) struct Agents {
    pub(crate) by_name: BTreeMap<String, Arc<dyn ServedAgent>>,
}

impl Agents {
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn ServedAgent>> {
        self.by_name.get(name)
    }
}
