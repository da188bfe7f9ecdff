//! What goes to a model and what comes back: messages, prompts, options and responses.
//!
//! These types are provider-neutral; each provider client translates them to its wire format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cost::MicroUsd;
use crate::tool::ToolDefinition;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions that frame the conversation.
    System {
        /// The instruction text.
        content: String,
    },
    /// What the user said.
    User {
        /// The user's text.
        content: String,
    },
    /// What the model said: text, tool calls, or both.
    Assistant {
        /// The text of the reply (empty when the model only called tools).
        #[serde(default)]
        content: String,
        /// The tools the model asked to call.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, fed back to the model.
    Tool {
        /// The id of the [`ToolCall`] this answers.
        tool_call_id: String,
        /// The tool's output, usually JSON text.
        content: String,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Message {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Message {
        Message::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }

    /// A tool-result message answering the call with id `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content: content.into(),
        }
    }

    /// The message's role as the wire formats name it.
    pub fn role(&self) -> &'static str {
        match self {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        }
    }

    /// The message's text.
    pub fn content(&self) -> &str {
        match self {
            Message::System { content }
            | Message::User { content }
            | Message::Assistant { content, .. }
            | Message::Tool { content, .. } => content,
        }
    }
}

/// A model's request to call a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for this call; the tool result refers back to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON.
    pub arguments: Value,
}

/// Whether and which tools the model may call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call the named tool.
    Tool(String),
}

/// How the model must shape its reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema (structured output).
    JsonSchema {
        /// A name for the schema, required by some APIs.
        name: String,
        /// The JSON schema the reply must satisfy.
        schema: Value,
        /// Whether the provider must enforce the schema strictly.
        #[serde(default)]
        strict: bool,
    },
}

/// Sampling and output options for one model call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InferOptions {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// The most tokens the reply may have. Also bounds the worst case a budget reserves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sequences that end the reply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Seed for providers that support reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Required shape of the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Whether and which tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

/// Everything a raw model call sends: messages, tool definitions and options.
///
/// ```
/// use agent_op::Prompt;
/// let p = Prompt::new().system("Be brief.").user("What is 2+2?").max_tokens(16);
/// assert_eq!(p.messages.len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Sampling and output options.
    #[serde(default)]
    pub options: InferOptions,
}

impl Prompt {
    /// An empty prompt.
    pub fn new() -> Prompt {
        Prompt::default()
    }

    /// A prompt holding `messages`.
    pub fn from_messages(messages: Vec<Message>) -> Prompt {
        Prompt {
            messages,
            ..Prompt::default()
        }
    }

    /// Appends a message.
    pub fn message(mut self, message: Message) -> Prompt {
        self.messages.push(message);
        self
    }

    /// Appends a system message.
    pub fn system(self, content: impl Into<String>) -> Prompt {
        self.message(Message::system(content))
    }

    /// Appends a user message.
    pub fn user(self, content: impl Into<String>) -> Prompt {
        self.message(Message::user(content))
    }

    /// Sets the tools the model may call.
    pub fn tools(mut self, tools: Vec<ToolDefinition>) -> Prompt {
        self.tools = tools;
        self
    }

    /// Sets the options.
    pub fn options(mut self, options: InferOptions) -> Prompt {
        self.options = options;
        self
    }

    /// Sets the sampling temperature.
    pub fn temperature(mut self, temperature: f32) -> Prompt {
        self.options.temperature = Some(temperature);
        self
    }

    /// Sets the most tokens the reply may have.
    pub fn max_tokens(mut self, max_tokens: u32) -> Prompt {
        self.options.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the reply format.
    pub fn response_format(mut self, format: ResponseFormat) -> Prompt {
        self.options.response_format = Some(format);
        self
    }

    /// The number of bytes of text in the prompt: messages, tool-call arguments and tool
    /// definitions. An upper bound on its input tokens for the tokenizers in use (a token covers
    /// at least one byte), so budgets can reserve a worst case before a call.
    pub fn text_bytes(&self) -> u64 {
        let messages: usize = self
            .messages
            .iter()
            .map(|m| {
                let calls = match m {
                    Message::Assistant { tool_calls, .. } => tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum(),
                    _ => 0,
                };
                m.content().len() + calls
            })
            .sum();
        let tools: usize = self
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
            .sum();
        (messages + tools) as u64
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its reply (or hit a stop sequence).
    #[default]
    Stop,
    /// It hit the token limit.
    Length,
    /// It wants tools called.
    ToolCalls,
    /// The provider filtered the content.
    ContentFilter,
    /// Anything else the provider reported.
    Other(String),
}

/// Tokens a call consumed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub input_tokens: u64,
    /// Tokens of the reply.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// A model's reply to one call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The reply text (empty when the model only called tools).
    #[serde(default)]
    pub content: String,
    /// The tools the model asked to call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    #[serde(default)]
    pub finish_reason: FinishReason,
    /// Tokens consumed.
    #[serde(default)]
    pub usage: Usage,
    /// What the call cost, when the provider or a price table knows; never a guessed zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<MicroUsd>,
}

impl Response {
    /// A plain text reply with no usage, for tests and scripted providers.
    pub fn text(content: impl Into<String>) -> Response {
        Response {
            content: content.into(),
            ..Response::default()
        }
    }

    /// A reply that calls one tool.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Response {
        Response {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: name.into(),
                arguments,
            }],
            finish_reason: FinishReason::ToolCalls,
            ..Response::default()
        }
    }

    /// Sets the usage.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Response {
        self.usage = Usage {
            input_tokens,
            output_tokens,
        };
        self
    }

    /// Sets the cost.
    pub fn with_cost(mut self, cost: MicroUsd) -> Response {
        self.cost = Some(cost);
        self
    }

    /// The assistant message that records this reply in a conversation.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}
