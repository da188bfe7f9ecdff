//! What goes to a model and what comes back: messages, prompts, options and responses.
//!
//! These types are provider-neutral; each provider client translates them to its wire format.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cost::MicroUsd;

/// Tokens a chat template may add per message (role markers, separators), beyond its text.
/// Part of [`Prompt::max_input_tokens`].
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 8;
/// Tokens a chat template may add per tool definition, beyond its name, description and
/// schema. Part of [`Prompt::max_input_tokens`].
pub const TOOL_OVERHEAD_TOKENS: u64 = 32;
/// Tokens a chat template may add once per prompt (reply priming). Part of
/// [`Prompt::max_input_tokens`].
pub const PROMPT_OVERHEAD_TOKENS: u64 = 16;
use crate::attachment::Attachment;
pub use crate::messages::{Iter, Messages};
use crate::tool::ToolDefinition;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
#[non_exhaustive]
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
        /// Images and other non-text parts, after the text.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
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
        /// Images and other non-text parts the tool returned.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
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
            attachments: Vec::new(),
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
            attachments: Vec::new(),
        }
    }

    /// The message answering the call `tool_call_id` with a tool's `output`. Text is the
    /// output's text (a JSON string as it is, other JSON compact). Content blocks as MCP
    /// writes them (`{"type": "text", "text"}`, `{"type": "image", "data", "mimeType"}`,
    /// alone or in an array) become the message's text and typed image attachments, so an
    /// image reaches the model as an image, not as base64 text.
    pub fn tool_output(tool_call_id: impl Into<String>, output: &Value) -> Message {
        let (content, attachments) = match content_blocks(output) {
            Some(split) => split,
            None => (
                match output {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                },
                Vec::new(),
            ),
        };
        Message::Tool {
            tool_call_id: tool_call_id.into(),
            content,
            attachments,
        }
    }

    /// Adds a non-text part (to a user or tool message; other roles carry none, and are
    /// returned unchanged).
    pub fn with_attachment(mut self, attachment: Attachment) -> Message {
        if let Message::User { attachments, .. } | Message::Tool { attachments, .. } = &mut self {
            attachments.push(attachment);
        }
        self
    }

    /// Its non-text parts.
    pub fn attachments(&self) -> &[Attachment] {
        match self {
            Message::User { attachments, .. } | Message::Tool { attachments, .. } => attachments,
            _ => &[],
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
            | Message::User { content, .. }
            | Message::Assistant { content, .. }
            | Message::Tool { content, .. } => content,
        }
    }
}

/// MCP-style content blocks split into text and images: `None` unless `output` is one block
/// or an array of blocks, each text or an image, with at least one image.
fn content_blocks(output: &Value) -> Option<(String, Vec<Attachment>)> {
    let blocks: &[Value] = match output {
        Value::Array(items) => items,
        Value::Object(_) => std::slice::from_ref(output),
        _ => return None,
    };
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block.get("text")?.as_str()?.to_owned()),
            Some("image") => {
                let media_type = block
                    .get("mimeType")
                    .or_else(|| block.get("mime_type"))
                    .and_then(Value::as_str)?;
                let data = block.get("data")?.as_str()?;
                let image = crate::attachment::Image::from_base64(media_type, data)?;
                texts.push(format!(
                    "[image {} · {} bytes · sha256:{}]",
                    image.media_type(),
                    image.size(),
                    &image.sha256()[..12]
                ));
                images.push(Attachment::Image(image));
            }
            _ => return None,
        }
    }
    if images.is_empty() {
        return None;
    }
    Some((texts.join("\n"), images))
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
#[non_exhaustive]
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
#[non_exhaustive]
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
///
/// Options will grow, so this is built with `InferOptions::default()` and its fields set one
/// by one, or through [`Prompt`]'s builder methods:
///
/// ```
/// use agent_op::{InferOptions, Prompt, ToolChoice};
/// let prompt = Prompt::new().user("Hi").max_tokens(64).stop(["\n\n"]).seed(7);
/// let mut options = InferOptions::default();
/// options.max_tokens = Some(64);
/// options.stop = vec!["\n\n".into()];
/// options.seed = Some(7);
/// assert_eq!(prompt.options, options);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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
    /// The conversation so far: shared with the conversation it was made from and with the
    /// prompts made from it before, not copied ([`Messages`]).
    pub messages: Messages,
    /// The tools the model may call: shared, so prompts made with the same tools (an agent
    /// loop's turns) and the trace keeping them hold one copy.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub tools: Arc<[ToolDefinition]>,
    /// Sampling and output options.
    #[serde(default)]
    pub options: InferOptions,
}

impl Prompt {
    /// An empty prompt.
    pub fn new() -> Prompt {
        Prompt::default()
    }

    /// A prompt holding `messages` (a `Vec<Message>`, or a [`Messages`] list, which the prompt
    /// then shares rather than copies).
    pub fn from_messages(messages: impl Into<Messages>) -> Prompt {
        Prompt {
            messages: messages.into(),
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

    /// Sets the tools the model may call (a `Vec<ToolDefinition>`, or an `Arc` of them shared
    /// with other prompts).
    pub fn tools(mut self, tools: impl Into<Arc<[ToolDefinition]>>) -> Prompt {
        self.tools = tools.into();
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

    /// Sets the sequences that end the reply.
    pub fn stop<I>(mut self, stop: I) -> Prompt
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.options.stop = stop.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the sampling seed, for providers that support reproducible sampling.
    pub fn seed(mut self, seed: u64) -> Prompt {
        self.options.seed = Some(seed);
        self
    }

    /// Sets whether and which tools the model may call.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Prompt {
        self.options.tool_choice = Some(choice);
        self
    }

    /// An upper bound on the input tokens this prompt costs, the worst case budgets reserve
    /// before a call (see [`op::limit`](crate::op::limit)): every byte of the prompt as it is
    /// sent — messages, tool-call arguments, tool definitions and the `response_format` schema
    /// (its JSON encoding, which is at least as long as the text) — plus what chat templates
    /// add: [`PROMPT_OVERHEAD_TOKENS`] once, [`MESSAGE_OVERHEAD_TOKENS`] per message and
    /// [`TOOL_OVERHEAD_TOKENS`] per tool.
    ///
    /// A bound for byte-level tokenizers (every token covers at least one byte), which the
    /// models in use have. Counting serializes the prompt into a counter, without allocating.
    pub fn max_input_tokens(&self) -> u64 {
        /// Counts what is written, keeping nothing.
        struct Counter(u64);
        impl std::io::Write for Counter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 = self.0.saturating_add(buf.len() as u64);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter(0);
        // Serializing plain data into a writer that cannot fail does not fail; were it to,
        // nothing could be bounded, and the budget must then treat the call as unbounded.
        // Images count as what a model charges for one, not as their base64 text.
        let written =
            crate::attachment::with_bytes_up_to(0, || serde_json::to_writer(&mut counter, self));
        if written.is_err() {
            return u64::MAX;
        }
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let images: usize = self.messages.iter().map(|m| m.attachments().len()).sum();
        counter
            .0
            .saturating_add(crate::attachment::IMAGE_MAX_TOKENS.saturating_mul(count(images)))
            .saturating_add(PROMPT_OVERHEAD_TOKENS)
            .saturating_add(MESSAGE_OVERHEAD_TOKENS.saturating_mul(count(self.messages.len())))
            .saturating_add(TOOL_OVERHEAD_TOKENS.saturating_mul(count(self.tools.len())))
    }

    /// The most tokens one call with this prompt can use, input and output:
    /// [`max_input_tokens`](Prompt::max_input_tokens) plus `max_tokens`. `None` without
    /// `max_tokens` (the reply's length is then unbounded).
    pub fn max_total_tokens(&self) -> Option<u64> {
        let output = self.options.max_tokens?;
        Some(self.max_input_tokens().saturating_add(u64::from(output)))
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
    /// The model that answered, as the provider names it (often more specific than the one
    /// asked for: `gpt-4o-mini-2024-07-18` for `gpt-4o-mini`), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attachment::{IMAGE_MAX_TOKENS, Image};
    use serde_json::json;

    #[test]
    fn mcp_content_blocks_become_text_and_image_attachments() {
        let output = json!([
            {"type": "text", "text": "Here it is:"},
            {"type": "image", "data": "AQID", "mimeType": "image/png"},
        ]);
        let message = Message::tool_output("c1", &output);
        assert!(
            message
                .content()
                .starts_with("Here it is:\n[image image/png · 3 bytes"),
            "{message:?}"
        );
        assert!(!message.content().contains("AQID"));
        let image = message.attachments()[0].as_image().unwrap();
        assert_eq!(
            (image.media_type(), image.data()),
            ("image/png", Some(&[1u8, 2, 3][..]))
        );
        // Anything else is the output's text, as before.
        assert_eq!(
            Message::tool_output("c1", &json!("plain")).content(),
            "plain"
        );
        assert_eq!(
            Message::tool_output("c1", &json!({"a": 1})).content(),
            r#"{"a":1}"#
        );
        let text_only = json!([{"type": "text", "text": "t"}]);
        assert!(
            Message::tool_output("c1", &text_only)
                .attachments()
                .is_empty()
        );
        // A message with an image round-trips.
        let text = serde_json::to_string(&message).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&text).unwrap(), message);
    }

    #[test]
    fn an_image_counts_as_a_models_price_for_one_not_its_bytes() {
        let plain = Prompt::new().user("look");
        let big = Image::new("image/png", vec![0u8; 1_000_000]);
        let with = Prompt::from_messages(vec![
            Message::user("look").with_attachment(Attachment::Image(big)),
        ]);
        let extra = with.max_input_tokens() - plain.max_input_tokens();
        assert!(
            (IMAGE_MAX_TOKENS..IMAGE_MAX_TOKENS + 300).contains(&extra),
            "{extra}"
        );
    }
}
