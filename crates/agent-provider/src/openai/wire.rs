//! The chat-completions and embeddings wire format: request bodies built by borrowing from a
//! [`Prompt`], and the response shapes we read.

use agent_op::{
    Message, Messages, Prompt, ProviderError, Response, ResponseFormat, ToolCall, ToolChoice, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::{MaxTokensField, StructuredOutput};
use crate::json::{arguments_text, arguments_value, nullable};
use crate::reply;
use crate::request::{self, WireTool};

// ---------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------

/// `POST /chat/completions`.
#[derive(Serialize)]
pub(crate) struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> ChatRequest<'a> {
    /// The request for `prompt`. Fails with
    /// [`InvalidRequest`](agent_op::ProviderError::InvalidRequest) if a tool's parameters or
    /// the response format's schema are not JSON objects.
    pub(crate) fn new(
        model: &'a str,
        prompt: &'a Prompt,
        max_tokens_field: MaxTokensField,
        stream: bool,
    ) -> Result<ChatRequest<'a>, ProviderError> {
        let options = &prompt.options;
        let (max_tokens, max_completion_tokens) = match max_tokens_field {
            MaxTokensField::MaxTokens => (options.max_tokens, None),
            MaxTokensField::MaxCompletionTokens => (None, options.max_tokens),
        };
        Ok(ChatRequest {
            model,
            messages: wire_messages(&prompt.messages)?,
            tools: request::tools(prompt.tools.iter())?,
            // Without tools, a `tool_choice` is an error for OpenAI (and means nothing).
            tool_choice: options
                .tool_choice
                .as_ref()
                .filter(|_| !prompt.tools.is_empty())
                .map(WireToolChoice::new)
                .transpose()?,
            temperature: options.temperature,
            max_tokens,
            max_completion_tokens,
            stop: &options.stop,
            seed: options.seed,
            response_format: options
                .response_format
                .as_ref()
                .map(WireResponseFormat::new)
                .transpose()?,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        })
    }

    /// Sends a JSON-schema response format the way `style` says.
    pub(crate) fn structured_output(mut self, style: StructuredOutput) -> ChatRequest<'a> {
        if style == StructuredOutput::JsonObjectWithSchema
            && let Some(WireResponseFormat::JsonSchema { json_schema }) = &self.response_format
        {
            self.response_format = Some(WireResponseFormat::JsonObject {
                schema: Some(json_schema.schema),
            });
        }
        self
    }

    /// Leaves `stream_options` out when `send` is false (for servers that reject it).
    pub(crate) fn stream_options(mut self, send: bool) -> ChatRequest<'a> {
        if !send {
            self.stream_options = None;
        }
        self
    }
}

/// The messages on the wire. Images a tool returned travel in a user message after the tool
/// messages (the API takes images in user messages only, and the tool messages answering
/// one reply must follow it without a break).
fn wire_messages(messages: &Messages) -> Result<Vec<WireMessage<'_>>, ProviderError> {
    let mut wire = Vec::with_capacity(messages.len());
    let mut returned: Vec<WirePart> = Vec::new();
    for message in messages {
        if !matches!(message, Message::Tool { .. }) && !returned.is_empty() {
            wire.push(WireMessage::User {
                content: UserContent::Parts(std::mem::take(&mut returned)),
            });
        }
        if let Message::Tool {
            tool_call_id,
            attachments,
            ..
        } = message
            && !attachments.is_empty()
        {
            returned.push(WirePart::Text {
                text: format!("The images the tool call {tool_call_id} returned:"),
            });
            for attachment in attachments {
                returned.push(WirePart::image(attachment)?);
            }
        }
        wire.push(WireMessage::new(message)?);
    }
    if !returned.is_empty() {
        wire.push(WireMessage::User {
            content: UserContent::Parts(returned),
        });
    }
    Ok(wire)
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// Always a string, `""` when the message only calls tools. The API also allows
        /// `null` there, but servers whose chat template reads `content` as text (llama.cpp's,
        /// and many Jinja templates) fail on it, while `""` works everywhere.
        content: &'a str,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCallOut<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> WireMessage<'a> {
    fn new(message: &'a Message) -> Result<WireMessage<'a>, ProviderError> {
        Ok(match message {
            Message::System { content } => WireMessage::System { content },
            Message::User {
                content,
                attachments,
            } if attachments.is_empty() => WireMessage::User {
                content: UserContent::Text(content),
            },
            Message::User {
                content,
                attachments,
            } => {
                let mut parts = vec![WirePart::Text {
                    text: content.clone(),
                }];
                for attachment in attachments {
                    parts.push(WirePart::image(attachment)?);
                }
                WireMessage::User {
                    content: UserContent::Parts(parts),
                }
            }
            Message::Assistant {
                content,
                tool_calls,
            } => WireMessage::Assistant {
                content,
                tool_calls: tool_calls.iter().map(WireToolCallOut::from).collect(),
            },
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => WireMessage::Tool {
                tool_call_id,
                content,
            },
            _ => return Err(request::unsupported("this kind of message")),
        })
    }
}

/// A user message's content: its text, or typed parts when it carries images.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart {
    Text { text: String },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Serialize)]
struct WireImageUrl {
    url: String,
}

impl WirePart {
    /// An image as a `data:` URL part; an image without bytes (read back from a trace) or an
    /// attachment of another kind cannot be sent.
    fn image(attachment: &agent_op::Attachment) -> Result<WirePart, ProviderError> {
        let url = attachment
            .as_image()
            .and_then(agent_op::Image::data_url)
            .ok_or_else(|| request::unsupported("an attachment without its bytes"))?;
        Ok(WirePart::ImageUrl {
            image_url: WireImageUrl { url },
        })
    }
}

#[derive(Serialize)]
struct WireToolCallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCallOut<'a>,
}

#[derive(Serialize)]
struct WireFunctionCallOut<'a> {
    name: &'a str,
    /// The arguments as JSON text, as the API requires.
    arguments: String,
}

impl<'a> From<&'a ToolCall> for WireToolCallOut<'a> {
    fn from(call: &'a ToolCall) -> WireToolCallOut<'a> {
        WireToolCallOut {
            id: &call.id,
            kind: "function",
            function: WireFunctionCallOut {
                name: &call.name,
                arguments: arguments_text(&call.arguments),
            },
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: NamedFunction<'a>,
    },
}

#[derive(Serialize)]
struct NamedFunction<'a> {
    name: &'a str,
}

impl<'a> WireToolChoice<'a> {
    fn new(choice: &'a ToolChoice) -> Result<WireToolChoice<'a>, ProviderError> {
        Ok(match choice {
            ToolChoice::Auto => WireToolChoice::Mode("auto"),
            ToolChoice::None => WireToolChoice::Mode("none"),
            ToolChoice::Required => WireToolChoice::Mode("required"),
            ToolChoice::Tool(name) => WireToolChoice::Named {
                kind: "function",
                function: NamedFunction { name },
            },
            _ => return Err(request::unsupported("this tool choice")),
        })
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    Text,
    JsonObject {
        /// Only with [`StructuredOutput::JsonObjectWithSchema`].
        #[serde(skip_serializing_if = "Option::is_none")]
        schema: Option<&'a Value>,
    },
    JsonSchema {
        json_schema: JsonSchema<'a>,
    },
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

impl<'a> WireResponseFormat<'a> {
    /// `format` in wire form; a schema that is not a JSON object is an invalid request.
    fn new(format: &'a ResponseFormat) -> Result<WireResponseFormat<'a>, ProviderError> {
        Ok(match format {
            ResponseFormat::Text => WireResponseFormat::Text,
            ResponseFormat::JsonObject => WireResponseFormat::JsonObject { schema: None },
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => WireResponseFormat::JsonSchema {
                json_schema: JsonSchema {
                    name,
                    schema: request::response_schema(name, schema)?,
                    strict: *strict,
                },
            },
            _ => return Err(request::unsupported("this response format")),
        })
    }
}

/// `POST /embeddings`.
#[derive(Serialize)]
pub(crate) struct EmbeddingsRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) input: &'a [String],
    pub(crate) encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dimensions: Option<usize>,
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// A `chat.completion` object.
#[derive(Deserialize)]
pub(crate) struct ChatCompletion {
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) choices: Vec<Choice>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    /// Some servers answer 200 with an error object.
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

#[derive(Deserialize)]
pub(crate) struct Choice {
    #[serde(default)]
    pub(crate) index: u32,
    pub(crate) message: ChoiceMessage,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct ChoiceMessage {
    #[serde(default)]
    pub(crate) content: Option<String>,
    #[serde(default)]
    pub(crate) refusal: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) tool_calls: Vec<WireToolCallIn>,
}

#[derive(Deserialize)]
pub(crate) struct WireToolCallIn {
    #[serde(default)]
    pub(crate) id: Option<String>,
    pub(crate) function: WireFunctionCallIn,
}

#[derive(Deserialize)]
pub(crate) struct WireFunctionCallIn {
    #[serde(default)]
    pub(crate) name: String,
    /// A JSON string per the API; some servers send a JSON object.
    #[serde(default)]
    pub(crate) arguments: Value,
}

#[derive(Copy, Clone, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) prompt_tokens: u64,
    #[serde(default)]
    pub(crate) completion_tokens: u64,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        }
    }
}

/// An `embedding` list.
#[derive(Deserialize)]
pub(crate) struct EmbeddingsResponse {
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) data: Vec<EmbeddingData>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
}

#[derive(Deserialize)]
pub(crate) struct EmbeddingData {
    #[serde(default)]
    pub(crate) index: usize,
    #[serde(deserialize_with = "crate::json::vector")]
    pub(crate) embedding: Vec<f32>,
}

impl ChatCompletion {
    /// The reply of the first choice; a completion without choices is an error.
    pub(crate) fn into_response(self) -> Option<(Response, Option<Usage>)> {
        let usage = self.usage.map(Usage::from);
        let model = self.model.filter(|m| !m.is_empty());
        let choice = self.choices.into_iter().min_by_key(|c| c.index)?;
        let ChoiceMessage {
            content,
            refusal,
            tool_calls,
        } = choice.message;
        let tool_calls: Vec<ToolCall> = tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{i}")),
                name: call.function.name,
                arguments: arguments_value(call.function.arguments),
            })
            .collect();
        let finish_reason = reply::finish_reason(
            reply::parse_finish_reason(choice.finish_reason.as_deref()),
            !tool_calls.is_empty(),
        );
        // A refusal is what the model said instead of content; keep it as the reply's text.
        let mut content = content.unwrap_or_default();
        content.push_str(refusal.as_deref().unwrap_or_default());
        let response = Response {
            content,
            tool_calls,
            finish_reason,
            usage: usage.unwrap_or_default(),
            cost: None,
            model,
        };
        Some((response, usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_op::ToolDefinition;
    use serde_json::json;

    #[test]
    fn a_full_request_body() {
        let prompt = Prompt::from_messages(vec![
            Message::system("sys"),
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "add".into(),
                    arguments: json!({"a": 1}),
                }],
            },
            Message::tool_result("call_1", "2"),
            Message::assistant("done"),
        ])
        .tools(vec![ToolDefinition {
            name: "add".into(),
            description: "adds".into(),
            parameters: json!({"type": "object"}),
        }])
        .temperature(0.5)
        .max_tokens(10)
        .stop(["END"])
        .seed(7)
        .response_format(ResponseFormat::JsonSchema {
            name: "out".into(),
            schema: json!({"type": "object"}),
            strict: true,
        })
        .tool_choice(ToolChoice::Tool("add".into()));
        let body = serde_json::to_value(
            ChatRequest::new("m", &prompt, MaxTokensField::MaxCompletionTokens, true).unwrap(),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "2"},
                    {"role": "assistant", "content": "done"},
                ],
                "tools": [{"type": "function", "function": {"name": "add", "description": "adds", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "add"}},
                "temperature": 0.5,
                "max_completion_tokens": 10,
                "stop": ["END"],
                "seed": 7,
                "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}},
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }

    #[test]
    fn images_travel_as_image_parts_and_a_tools_after_its_answers() {
        let image =
            || agent_op::Attachment::Image(agent_op::Image::new("image/png", vec![1u8, 2, 3]));
        let prompt = Prompt::from_messages(vec![
            Message::user("what is this?").with_attachment(image()),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![
                    ToolCall {
                        id: "a".into(),
                        name: "snap".into(),
                        arguments: json!({}),
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "snap".into(),
                        arguments: json!({}),
                    },
                ],
            },
            Message::tool_result("a", "a photo").with_attachment(image()),
            Message::tool_result("b", "nothing"),
        ]);
        let body = serde_json::to_value(
            ChatRequest::new("m", &prompt, MaxTokensField::MaxTokens, false).unwrap(),
        )
        .unwrap();
        let url = "data:image/png;base64,AQID";
        assert_eq!(
            body["messages"][0],
            json!({"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": url}},
            ]})
        );
        // Both tool answers follow the call without a break; the image comes after them.
        assert_eq!(body["messages"][2]["role"], "tool");
        assert_eq!(body["messages"][2]["content"], "a photo");
        assert_eq!(body["messages"][3]["role"], "tool");
        assert_eq!(
            body["messages"][4],
            json!({"role": "user", "content": [
                {"type": "text", "text": "The images the tool call a returned:"},
                {"type": "image_url", "image_url": {"url": url}},
            ]})
        );
        assert_eq!(body["messages"].as_array().unwrap().len(), 5);
        // An image read back from a trace without its bytes cannot be sent.
        let hashed: agent_op::Image = serde_json::from_value(json!({
            "media_type": "image/png", "sha256": "00", "size": 3
        }))
        .unwrap();
        let prompt = Prompt::from_messages(vec![
            Message::user("x").with_attachment(agent_op::Attachment::Image(hashed)),
        ]);
        assert!(ChatRequest::new("m", &prompt, MaxTokensField::MaxTokens, false).is_err());
    }

    #[test]
    fn a_minimal_request_body() {
        let prompt = Prompt::new().user("hi").max_tokens(5);
        let body = serde_json::to_value(
            ChatRequest::new("m", &prompt, MaxTokensField::MaxTokens, false).unwrap(),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        );
    }

    #[test]
    fn no_tool_choice_without_tools_and_optional_stream_options() {
        let prompt = Prompt::new().user("hi").tool_choice(ToolChoice::Required);
        let body = serde_json::to_value(
            ChatRequest::new("m", &prompt, MaxTokensField::MaxTokens, true)
                .unwrap()
                .stream_options(false),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true})
        );
        let body = serde_json::to_value(
            ChatRequest::new("m", &prompt, MaxTokensField::MaxTokens, true).unwrap(),
        )
        .unwrap();
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert!(body.get("tool_choice").is_none());
    }

    #[test]
    fn tool_choice_modes() {
        for (choice, wire) in [
            (ToolChoice::Auto, json!("auto")),
            (ToolChoice::None, json!("none")),
            (ToolChoice::Required, json!("required")),
        ] {
            assert_eq!(
                serde_json::to_value(WireToolChoice::new(&choice).unwrap()).unwrap(),
                wire
            );
        }
        assert_eq!(
            serde_json::to_value(WireResponseFormat::new(&ResponseFormat::JsonObject).unwrap())
                .unwrap(),
            json!({"type": "json_object"})
        );
    }

    #[test]
    fn json_schemas_in_either_style() {
        let schema = json!({"type": "object", "properties": {"b": {}, "a": {}}});
        let prompt = Prompt::new()
            .user("q")
            .response_format(ResponseFormat::JsonSchema {
                name: "out".into(),
                schema: schema.clone(),
                strict: true,
            });
        let body = |style| {
            let request = ChatRequest::new("m", &prompt, MaxTokensField::MaxTokens, false)
                .unwrap()
                .structured_output(style);
            serde_json::to_value(request).unwrap()["response_format"].clone()
        };
        assert_eq!(
            body(StructuredOutput::JsonSchema),
            json!({"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": true}})
        );
        assert_eq!(
            body(StructuredOutput::JsonObjectWithSchema),
            json!({"type": "json_object", "schema": schema})
        );
        // A plain JSON-object format is the same in both styles.
        let plain = Prompt::new()
            .user("q")
            .response_format(ResponseFormat::JsonObject);
        let request = ChatRequest::new("m", &plain, MaxTokensField::MaxTokens, false)
            .unwrap()
            .structured_output(StructuredOutput::JsonObjectWithSchema);
        assert_eq!(
            serde_json::to_value(request).unwrap()["response_format"],
            json!({"type": "json_object"})
        );
    }
}
