//! A ready-made agent: [`AgentState`] (a conversation) and [`react`], the classic loop of
//! "ask the model; run the tools it calls; repeat until it answers".

use serde::{Deserialize, Serialize};

use crate::message::{Message, Prompt};
use crate::op::{self, Op};
use crate::tool::ToolError;

/// The state of a conversational agent: its instructions and the conversation so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// The system prompt.
    pub system_prompt: String,
    /// The conversation, oldest first (without the system prompt).
    pub messages: Vec<Message>,
    /// How many model calls the agent has made (saturating at `u32::MAX`).
    pub turns: u32,
}

impl AgentState {
    /// An agent with these instructions and no conversation yet.
    pub fn new(system_prompt: impl Into<String>) -> AgentState {
        AgentState {
            system_prompt: system_prompt.into(),
            messages: Vec::new(),
            turns: 0,
        }
    }

    /// The prompt for the next model call: the system prompt, then the conversation.
    pub fn prompt(&self) -> Prompt {
        let mut messages = Vec::with_capacity(self.messages.len() + 1);
        if !self.system_prompt.is_empty() {
            messages.push(Message::system(self.system_prompt.clone()));
        }
        messages.extend(self.messages.iter().cloned());
        Prompt::from_messages(messages)
    }
}

/// Answers `question` with `model`: asks the model (offering every tool the run permits),
/// runs the tools it calls and feeds their results back, until it replies without calling
/// tools. Tool failures are shown to the model, not raised. Fails the run if the model has
/// not answered after `max_turns` calls.
///
/// ```
/// use agent_op::agent::{react, AgentState};
/// use agent_op::Op;
/// let program: Op<AgentState, String> = react("small-model", "What is the weather in Oslo?", 8);
/// # let _ = program;
/// ```
pub fn react(
    model: impl Into<String>,
    question: impl Into<String>,
    max_turns: u32,
) -> Op<AgentState, String> {
    let model = model.into();
    let question = question.into();
    op::modify(move |s: &mut AgentState| s.messages.push(Message::user(question)))
        .then(op::tool_definitions())
        .and_then(move |tools| {
            op::loop_fn(0u32, move |turn| {
                if turn >= max_turns {
                    return op::fail(format!(
                        "the agent did not answer within {max_turns} model calls"
                    ));
                }
                let tools = tools.clone();
                let model = model.clone();
                op::gets(move |s: &AgentState| s.prompt().tools(tools))
                    .and_then(move |prompt| op::infer_raw(model, prompt))
                    .and_then(move |reply| {
                        let calls = reply.tool_calls.clone();
                        let message = reply.to_message();
                        op::modify(move |s: &mut AgentState| {
                            // A state resumed from elsewhere may hold any count.
                            s.turns = s.turns.saturating_add(1);
                            s.messages.push(message);
                        })
                        .then(if calls.is_empty() {
                            op::pure(std::ops::ControlFlow::Break(reply.content))
                        } else {
                            op::for_each(calls, |call| {
                                op::tool(call.name, call.arguments).and_then(move |result| {
                                    let content = tool_output(&result);
                                    op::modify(move |s: &mut AgentState| {
                                        s.messages.push(Message::tool_result(call.id, content))
                                    })
                                })
                            })
                            .map(move |_| std::ops::ControlFlow::Continue(turn + 1))
                        })
                    })
            })
        })
}

fn tool_output(result: &Result<serde_json::Value, ToolError>) -> String {
    match result {
        Ok(serde_json::Value::String(s)) => s.clone(),
        Ok(value) => value.to_string(),
        Err(error) => format!("error: {error}"),
    }
}
