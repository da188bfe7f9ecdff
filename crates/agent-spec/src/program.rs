//! The agent program a spec describes, for `agent run` ([`program`]) or for one message of a
//! conversation ([`program_for`]), and its budget.

use std::sync::Arc;
use std::time::Duration;

use agent_agents::{Agent, Toolbox, agent};
use agent_op::op::{self, Op};
use agent_op::{Budget, MicroUsd, Tag};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::SpecError;
use crate::spec::{BudgetSpec, OutputKind, Spec};

/// What an agent is asked when it is served: a message, and the conversation before it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct Input {
    /// What the agent is asked: its goal for this run. `None` runs the spec's `agent.goal`,
    /// as `agent run` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The turns before this one, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Turn>,
}

impl Input {
    /// `message` alone, with no earlier turns.
    pub fn message(message: impl Into<String>) -> Input {
        Input {
            message: Some(message.into()),
            history: Vec::new(),
        }
    }
}

/// One earlier turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct Turn {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl Turn {
    /// What the user said.
    pub fn user(content: impl Into<String>) -> Turn {
        Turn {
            role: Role::User,
            content: content.into(),
        }
    }

    /// What the agent answered.
    pub fn assistant(content: impl Into<String>) -> Turn {
        Turn {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Who said a [`Turn`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The person asking (`user`).
    User,
    /// The agent (`assistant`).
    Assistant,
}

impl Role {
    /// The role as the conversation section writes it: `user` or `assistant`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// The program `agent run` runs: [`program_for`] with no message (the spec's goal) and no
/// earlier turns.
pub fn program(spec: &Spec, toolbox: &Toolbox) -> Result<Op<(), Value>, SpecError> {
    program_for(spec, toolbox, &Input::default())
}

/// The program answering `input` with the agent `spec` describes, over `toolbox` (usually
/// [`toolbox`](crate::toolbox)'s): recall from memory (if the spec has one), the agent loop
/// under the spec's budget, remember the answer. A text answer is a JSON string; a `json`
/// answer must satisfy the spec's `[output].schema` (checked, and refusals given back to the
/// model, up to three rounds). A failed agent, or a spent budget, fails the program.
///
/// The agent's goal is `input.message`, else the spec's `agent.goal`. When a message
/// replaces it (one that differs from it), the spec's goal is shown as a context section
/// (`Your standing task: …`) before the spec's own `agent.context`, and earlier turns as one
/// after them (`Earlier in this conversation:` and a `user: …` or `assistant: …` line each).
/// Memory is recalled for, and the answer remembered under, the goal the agent was given.
///
/// Only a `json` output whose schema is not a JSON schema fails here
/// ([`SpecError::Invalid`]).
pub fn program_for(
    spec: &Spec,
    toolbox: &Toolbox,
    input: &Input,
) -> Result<Op<(), Value>, SpecError> {
    let goal = input
        .message
        .clone()
        .unwrap_or_else(|| spec.agent.goal.clone());
    let mut sections = Vec::new();
    if goal != spec.agent.goal && !spec.agent.goal.is_empty() {
        sections.push(format!("Your standing task: {}", spec.agent.goal));
    }
    sections.extend(spec.agent.context.iter().cloned());
    if !input.history.is_empty() {
        let mut earlier = String::from("Earlier in this conversation:");
        for turn in &input.history {
            earlier.push('\n');
            earlier.push_str(turn.role.as_str());
            earlier.push_str(": ");
            earlier.push_str(&turn.content);
        }
        sections.push(earlier);
    }
    let make: MakeAgent = match (&spec.output.kind, spec.output.json_schema()) {
        (OutputKind::Json, Some(schema)) => {
            let validator = Arc::new(jsonschema::validator_for(&schema).map_err(|e| {
                SpecError::Invalid(format!("output.schema is not a valid JSON schema: {e}"))
            })?);
            let base = configured::<Value>(spec, toolbox, &goal, &sections).context(format!(
                "Answer with JSON that satisfies this JSON schema: {schema}"
            ));
            Arc::new(move |memories| {
                let validator = validator.clone();
                let mut agent = base.clone();
                for memory in memories {
                    agent = agent.context(format!("From memory: {memory}"));
                }
                agent
                    .verified(3, move |answer: &Value| {
                        let errors: Vec<String> = validator
                            .iter_errors(answer)
                            .map(|e| format!("{e} at {}", e.instance_path()))
                            .collect();
                        op::pure(if errors.is_empty() {
                            Ok(())
                        } else {
                            Err(format!(
                                "the answer does not satisfy the schema: {}",
                                errors.join("; ")
                            ))
                        })
                    })
                    .run()
                    .and_then(|answer| answered(answer.map_err(|e| e.to_string())))
            })
        }
        _ => {
            let base = configured::<String>(spec, toolbox, &goal, &sections);
            Arc::new(move |memories| {
                let mut agent = base.clone();
                for memory in memories {
                    agent = agent.context(format!("From memory: {memory}"));
                }
                agent.run().and_then(|answer| {
                    answered(answer.map(Value::String).map_err(|e| e.to_string()))
                })
            })
        }
    };
    let budget = budget(&spec.budget);
    let memory = spec.memory.is_some();
    let recalled: Op<(), Vec<String>> = if memory {
        op::recall(goal.clone(), 5).map(|entries| entries.into_iter().map(|e| e.content).collect())
    } else {
        op::pure(Vec::new())
    };
    Ok(recalled.and_then(move |memories| {
        let run = op::limit(budget, make(memories)).and_then(|limited| match limited {
            Ok(answer) => op::pure(answer),
            Err(spent) => op::fail(format!("the budget ran out: {spent}")),
        });
        run.and_then(move |answer| {
            if !memory {
                return op::pure(answer);
            }
            let content = match &answer {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            op::remember(content, goal, vec![Tag("answer".into())]).map(move |_| answer)
        })
    }))
}

/// Builds the agent's program from what was recalled from memory.
type MakeAgent = Arc<dyn Fn(Vec<String>) -> Op<(), Value> + Send + Sync>;

/// The agent loop the spec describes, given `goal` and the context `sections`, answering a
/// `T`.
fn configured<T: agent_agents::LlmOutput>(
    spec: &Spec,
    toolbox: &Toolbox,
    goal: &str,
    sections: &[String],
) -> Agent<(), T> {
    let mut agent = agent::<(), T>(spec.model.name().to_owned(), toolbox, goal.to_owned())
        .max_turns(spec.agent.max_turns.unwrap_or(8));
    if !spec.agent.system.is_empty() {
        agent = agent.instructions(spec.agent.system.clone());
    }
    for section in sections {
        agent = agent.context(section.clone());
    }
    agent
}

/// The agent's answer, or its failure as the run's error (so the trace's `run_end`, the
/// summary and the exit code all say the run failed).
fn answered(answer: Result<Value, String>) -> Op<(), Value> {
    match answer {
        Ok(value) => op::pure(value),
        Err(failure) => op::fail(failure),
    }
}

/// The limits `[budget]` sets: model calls, tokens, dollars and seconds. A cost below zero
/// or not finite, and seconds not above zero, set no limit.
pub fn budget(spec: &BudgetSpec) -> Budget {
    let mut budget = Budget::new();
    if let Some(calls) = spec.calls {
        budget = budget.calls(calls);
    }
    if let Some(tokens) = spec.tokens {
        budget = budget.tokens(tokens);
    }
    if let Some(usd) = spec.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
        budget = budget.cost(MicroUsd((usd * 1e6) as u64));
    }
    if let Some(secs) = spec.seconds.filter(|s| s.is_finite() && *s > 0.0) {
        budget = budget.time(Duration::from_secs_f64(secs.min(1e9)));
    }
    budget
}
