//! A ready-made agent: [`AgentState`] (a conversation) and [`react`], the classic loop of
//! "ask the model; run the tools it calls; repeat until it answers".

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::message::{Message, Prompt};
use crate::messages::Messages;
use crate::op::{self, Op};
use crate::tool::ToolError;

/// The state of a conversational agent: its instructions and the conversation so far.
///
/// [`prompt`](AgentState::prompt) shares the conversation's messages instead of copying them;
/// append with [`push`](AgentState::push) and it also costs the same whatever the length of
/// the conversation, since the prompt list (system message first) grows in place beside it.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct AgentState {
    /// The system prompt.
    pub system_prompt: String,
    /// The conversation, oldest first (without the system prompt).
    pub messages: Messages,
    /// How many model calls the agent has made (saturating at `u32::MAX`).
    pub turns: u32,
    /// The next prompt's messages: the system message, then `messages` as `push` left them,
    /// sharing them. Valid while `system_prompt` and `messages` are as `push` left them
    /// (both are public and may have been changed directly).
    #[serde(skip)]
    sent: Messages,
    /// `messages` as `push` left them: a view of the same buffer, so while `messages` is
    /// still a view of that buffer with the same length, it holds the same messages (slots
    /// are written once).
    #[serde(skip)]
    pushed: Messages,
}

impl AgentState {
    /// An agent with these instructions and no conversation yet.
    pub fn new(system_prompt: impl Into<String>) -> AgentState {
        AgentState {
            system_prompt: system_prompt.into(),
            ..AgentState::default()
        }
    }

    /// The same state holding `messages` as its conversation.
    pub fn with_messages(mut self, messages: impl Into<Messages>) -> AgentState {
        self.messages = messages.into();
        self
    }

    /// The same state with this turn count.
    pub fn with_turns(mut self, turns: u32) -> AgentState {
        self.turns = turns;
        self
    }

    /// Appends `message` to the conversation.
    pub fn push(&mut self, message: Message) {
        let message = Arc::new(message);
        if self.system_prompt.is_empty() {
            self.messages.push_shared(message);
            return;
        }
        let current = self.sent_is_current();
        self.messages.push_shared(message.clone());
        if current {
            self.sent.push_shared(message);
        } else {
            // Once per change made behind `push`'s back; later pushes append in place.
            self.sent = self.fresh_prompt_messages();
        }
        self.pushed = self.messages.clone();
    }

    /// The prompt for the next model call: the system prompt, then the conversation.
    pub fn prompt(&self) -> Prompt {
        let messages = if self.system_prompt.is_empty() {
            self.messages.clone()
        } else if self.sent_is_current() {
            self.sent.clone()
        } else {
            self.fresh_prompt_messages()
        };
        Prompt::from_messages(messages)
    }

    /// Whether `sent` is the system message followed by exactly `messages`.
    fn sent_is_current(&self) -> bool {
        self.messages.same_buffer(&self.pushed)
            && self.messages.len() == self.pushed.len()
            && self.sent.len() == self.messages.len() + 1
            && matches!(
                self.sent.first(),
                Some(Message::System { content }) if *content == self.system_prompt
            )
    }

    /// The system message followed by the conversation, in a list of their own (the
    /// conversation's messages shared, not copied).
    fn fresh_prompt_messages(&self) -> Messages {
        self.messages
            .prepended(Message::system(self.system_prompt.clone()))
    }
}

impl PartialEq for AgentState {
    fn eq(&self, other: &AgentState) -> bool {
        self.system_prompt == other.system_prompt
            && self.messages == other.messages
            && self.turns == other.turns
    }
}

impl std::fmt::Debug for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentState")
            .field("system_prompt", &self.system_prompt)
            .field("messages", &self.messages)
            .field("turns", &self.turns)
            .finish()
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
    op::modify(move |s: &mut AgentState| s.push(Message::user(question)))
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
                            s.push(message);
                        })
                        .then(if calls.is_empty() {
                            op::pure(std::ops::ControlFlow::Break(reply.content))
                        } else {
                            op::for_each(calls, |call| {
                                op::tool(call.name, call.arguments).and_then(move |result| {
                                    let content = tool_output(&result);
                                    op::modify(move |s: &mut AgentState| {
                                        s.push(Message::tool_result(call.id, content))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_share_the_conversation_and_follow_direct_changes() {
        let mut state = AgentState::new("Be brief.");
        assert_eq!(state.prompt().messages, [Message::system("Be brief.")]);
        state.push(Message::user("Hi"));
        let first = state.prompt();
        state.push(Message::assistant("Hello!"));
        state.push(Message::user("Bye"));
        let second = state.prompt();
        assert_eq!(
            second.messages,
            [
                Message::system("Be brief."),
                Message::user("Hi"),
                Message::assistant("Hello!"),
                Message::user("Bye"),
            ]
        );
        // The second prompt continues the first's list: nothing was copied.
        assert_eq!(first.messages.shared_with(&second.messages), 2);
        assert!(first.messages.same_buffer(&second.messages));
        assert_eq!(second.messages.shared_with(&state.prompt().messages), 4);

        // Changes made to the public fields directly are seen by the next prompt.
        state.messages.truncate(1);
        assert_eq!(
            state.prompt().messages,
            [Message::system("Be brief."), Message::user("Hi")]
        );
        state.messages.push(Message::user("Again"));
        assert_eq!(state.prompt().messages.len(), 3);
        assert_eq!(state.prompt().messages[2], Message::user("Again"));
        state.system_prompt = "Be kind.".into();
        assert_eq!(state.prompt().messages[0], Message::system("Be kind."));
        state.push(Message::assistant("Sure"));
        let third = state.prompt();
        assert_eq!(
            third.messages,
            [
                Message::system("Be kind."),
                Message::user("Hi"),
                Message::user("Again"),
                Message::assistant("Sure"),
            ]
        );
        state.push(Message::user("More"));
        assert!(third.messages.same_buffer(&state.prompt().messages));

        // A clone grows on its own; the original's prompt is unchanged.
        let mut fork = state.clone();
        fork.push(Message::user("Fork"));
        state.push(Message::user("Main"));
        assert_eq!(fork.prompt().messages.last(), Some(&Message::user("Fork")));
        assert_eq!(state.prompt().messages.last(), Some(&Message::user("Main")));
        assert_eq!(fork.prompt().messages.len(), state.prompt().messages.len());
    }

    #[test]
    fn without_a_system_prompt_the_prompt_is_the_conversation() {
        let mut state = AgentState::new("");
        state.push(Message::user("Hi"));
        assert_eq!(state.prompt().messages, [Message::user("Hi")]);
        assert!(state.prompt().messages.same_buffer(&state.messages));
    }

    #[test]
    fn the_state_serializes_without_its_prompt_list() {
        let mut state = AgentState::new("Be brief.").with_turns(2);
        state.push(Message::user("Hi"));
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "system_prompt": "Be brief.",
                "messages": [{"role": "user", "content": "Hi"}],
                "turns": 2
            })
        );
        let back: AgentState = serde_json::from_value(json).unwrap();
        assert_eq!(back, state);
        assert_eq!(back.prompt().messages, state.prompt().messages);
    }
}
