//! Ollama's native wire format (`/api/chat`, `/api/embed`): request bodies built by borrowing
//! from a [`Prompt`], and the response shapes we read.

use std::time::Duration;

use agent_op::{Message, Prompt, ProviderError, ResponseFormat, ToolCall, ToolChoice};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::json::nullable;
use crate::request::{self, WireTool};

/// How long Ollama keeps a model loaded after a request (its `keep_alive`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// Keep the model loaded this long (Ollama's default is five minutes). Sent in whole
    /// milliseconds, rounded up; a duration beyond what Go's `time.Duration` holds (about 292
    /// years) is sent as [`Forever`](KeepAlive::Forever).
    For(Duration),
    /// Keep the model loaded until the server stops.
    Forever,
    /// Unload the model as soon as the request is answered.
    UnloadNow,
}

/// The longest duration Go's `time.Duration` holds: `i64::MAX` nanoseconds (about 292 years).
const GO_MAX_DURATION_NANOS: u128 = i64::MAX as u128;

impl Serialize for KeepAlive {
    /// `For(d)` as a Go duration string in whole milliseconds (Ollama parses it exactly),
    /// rounded up so that a non-zero duration never becomes `"0ms"` (which unloads at once);
    /// a duration longer than Go's `time.Duration` holds (about 292 years) as `-1`, forever.
    /// `Forever` is `-1`, `UnloadNow` is `0`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            KeepAlive::For(d) => {
                let millis = d.as_nanos().div_ceil(1_000_000);
                if millis.saturating_mul(1_000_000) > GO_MAX_DURATION_NANOS {
                    serializer.serialize_i64(-1)
                } else {
                    serializer.serialize_str(&format!("{millis}ms"))
                }
            }
            KeepAlive::Forever => serializer.serialize_i64(-1),
            KeepAlive::UnloadNow => serializer.serialize_i64(0),
        }
    }
}

/// `POST /api/chat`.
#[derive(Serialize)]
pub(crate) struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<Format<'a>>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    options: Map<String, Value>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_alive: Option<KeepAlive>,
}

impl<'a> ChatRequest<'a> {
    /// The request for `prompt`: `base_options` (the client's) overridden by the prompt's own
    /// sampling options. Fails with [`InvalidRequest`](ProviderError::InvalidRequest) if a
    /// tool's parameters or the `format` schema are not JSON objects.
    pub(crate) fn new(
        model: &'a str,
        prompt: &'a Prompt,
        base_options: &Map<String, Value>,
        keep_alive: Option<KeepAlive>,
        stream: bool,
    ) -> Result<ChatRequest<'a>, ProviderError> {
        let o = &prompt.options;
        let mut options = base_options.clone();
        if let Some(t) = o.temperature {
            options.insert("temperature".into(), Value::from(t));
        }
        if let Some(n) = o.max_tokens {
            options.insert("num_predict".into(), Value::from(n));
        }
        if let Some(seed) = o.seed {
            options.insert("seed".into(), Value::from(seed));
        }
        if !o.stop.is_empty() {
            options.insert("stop".into(), Value::from(o.stop.clone()));
        }
        // Ollama has no tool_choice: `None` sends no tools, a named tool sends only that one.
        let tools = prompt.tools.iter().filter(|t| match &o.tool_choice {
            Some(ToolChoice::None) => false,
            Some(ToolChoice::Tool(name)) => &t.name == name,
            _ => true,
        });
        let messages: Vec<&Message> = prompt.messages.iter().collect();
        Ok(ChatRequest {
            model,
            messages: messages
                .iter()
                .enumerate()
                .map(|(i, m)| WireMessage::new(m, &messages[..i]))
                .collect::<Result<_, _>>()?,
            tools: request::tools(tools)?,
            format: match &o.response_format {
                None | Some(ResponseFormat::Text) => None,
                Some(ResponseFormat::JsonObject) => Some(Format::Json("json")),
                Some(ResponseFormat::JsonSchema { name, schema, .. }) => {
                    Some(Format::Schema(request::response_schema(name, schema)?))
                }
                Some(_) => return Err(request::unsupported("this response format")),
            },
            options,
            stream,
            keep_alive,
        })
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Format<'a> {
    Json(&'static str),
    Schema(&'a Value),
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCallOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// Images, base64 (for multimodal models), from a user message or a tool's result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<String>,
}

/// The attachments' images as base64; an image without bytes (read back from a trace) or an
/// attachment of another kind cannot be sent.
fn images(attachments: &[agent_op::Attachment]) -> Result<Vec<String>, ProviderError> {
    attachments
        .iter()
        .map(|a| {
            a.as_image()
                .and_then(agent_op::Image::base64)
                .ok_or_else(|| request::unsupported("an attachment without its bytes"))
        })
        .collect()
}

impl<'a> WireMessage<'a> {
    /// `message`, after `earlier` messages (where a tool result finds its tool's name: Ollama
    /// matches results to calls by name).
    fn new(
        message: &'a Message,
        earlier: &[&'a Message],
    ) -> Result<WireMessage<'a>, ProviderError> {
        let plain = |role, content| WireMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_name: None,
            tool_call_id: None,
            images: Vec::new(),
        };
        Ok(match message {
            Message::System { content } => plain("system", content),
            Message::User {
                content,
                attachments,
            } => WireMessage {
                images: images(attachments)?,
                ..plain("user", content)
            },
            Message::Assistant {
                content,
                tool_calls,
            } => WireMessage {
                tool_calls: tool_calls.iter().map(WireToolCallOut::from).collect(),
                ..plain("assistant", content)
            },
            Message::Tool {
                tool_call_id,
                content,
                attachments,
            } => WireMessage {
                tool_name: tool_name_of(tool_call_id, earlier),
                tool_call_id: Some(tool_call_id),
                images: images(attachments)?,
                ..plain("tool", content)
            },
            _ => return Err(request::unsupported("this kind of message")),
        })
    }
}

/// The name of the latest call with id `id` in `earlier`.
fn tool_name_of<'a>(id: &str, earlier: &[&'a Message]) -> Option<&'a str> {
    earlier.iter().rev().find_map(|m| match *m {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| c.id == id)
            .map(|c| c.name.as_str()),
        _ => None,
    })
}

#[derive(Serialize)]
struct WireToolCallOut<'a> {
    id: &'a str,
    function: WireFunctionCallOut<'a>,
}

#[derive(Serialize)]
struct WireFunctionCallOut<'a> {
    name: &'a str,
    /// Ollama requires an object.
    arguments: Value,
}

impl<'a> From<&'a ToolCall> for WireToolCallOut<'a> {
    fn from(call: &'a ToolCall) -> WireToolCallOut<'a> {
        WireToolCallOut {
            id: &call.id,
            function: WireFunctionCallOut {
                name: &call.name,
                arguments: arguments_object(&call.arguments),
            },
        }
    }
}

/// Arguments as the object Ollama requires: arguments kept as text because they were not
/// valid JSON are parsed if they now are, and otherwise sent as `{}`.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::Object(Map::new()),
        },
        _ => Value::Object(Map::new()),
    }
}

/// `POST /api/embed`.
#[derive(Serialize)]
pub(crate) struct EmbedRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) input: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) keep_alive: Option<KeepAlive>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) dimensions: Option<usize>,
}

/// The `/api/embed` response.
#[derive(Deserialize)]
pub(crate) struct EmbedResponse {
    #[serde(default, deserialize_with = "crate::json::vectors")]
    pub(crate) embeddings: Vec<Vec<f32>>,
    #[serde(default)]
    pub(crate) prompt_eval_count: Option<u64>,
}

/// One `/api/chat` object: the whole reply, or one line of a stream.
#[derive(Deserialize)]
pub(crate) struct ChatChunk {
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) message: Option<ChunkMessage>,
    #[serde(default)]
    pub(crate) done: bool,
    #[serde(default)]
    pub(crate) done_reason: Option<String>,
    #[serde(default)]
    pub(crate) prompt_eval_count: Option<u64>,
    #[serde(default)]
    pub(crate) eval_count: Option<u64>,
    #[serde(default)]
    pub(crate) total_duration: Option<u64>,
    #[serde(default)]
    pub(crate) load_duration: Option<u64>,
    #[serde(default)]
    pub(crate) prompt_eval_duration: Option<u64>,
    #[serde(default)]
    pub(crate) eval_duration: Option<u64>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

#[derive(Deserialize)]
pub(crate) struct ChunkMessage {
    #[serde(default, deserialize_with = "nullable")]
    pub(crate) content: String,
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
    /// An object per the API; a JSON string is accepted too.
    #[serde(default)]
    pub(crate) arguments: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_op::ToolDefinition;
    use serde_json::json;

    #[test]
    fn images_travel_in_the_messages_images_field() {
        let image =
            || agent_op::Attachment::Image(agent_op::Image::new("image/png", vec![1u8, 2, 3]));
        let prompt = Prompt::from_messages(vec![
            Message::user("what is this?").with_attachment(image()),
            Message::tool_result("a", "a photo").with_attachment(image()),
        ]);
        let body =
            serde_json::to_value(ChatRequest::new("m", &prompt, &Map::new(), None, false).unwrap())
                .unwrap();
        assert_eq!(body["messages"][0]["images"], json!(["AQID"]));
        assert_eq!(body["messages"][0]["content"], "what is this?");
        assert_eq!(body["messages"][1]["images"], json!(["AQID"]));
    }

    #[test]
    fn a_full_request_body() {
        let prompt = Prompt::from_messages(vec![
            Message::system("sys"),
            Message::user("weather?"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_0".into(),
                    name: "weather".into(),
                    arguments: json!({"city": "Oslo"}),
                }],
            },
            Message::tool_result("call_0", "rain"),
        ])
        .tools(vec![
            ToolDefinition {
                name: "weather".into(),
                description: "w".into(),
                parameters: json!({"type": "object"}),
            },
            ToolDefinition {
                name: "other".into(),
                description: "o".into(),
                parameters: json!({}),
            },
        ])
        .temperature(0.25)
        .max_tokens(64)
        .stop(["\n\n"])
        .seed(1)
        .response_format(ResponseFormat::JsonSchema {
            name: "x".into(),
            schema: json!({"type": "object"}),
            strict: false,
        })
        .tool_choice(ToolChoice::Tool("weather".into()));
        let mut base = Map::new();
        base.insert("num_ctx".into(), json!(8192));
        base.insert("temperature".into(), json!(0.9));
        let body = serde_json::to_value(
            ChatRequest::new(
                "llama3.2",
                &prompt,
                &base,
                Some(KeepAlive::For(Duration::from_secs(90))),
                true,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "llama3.2",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "weather?"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_0", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
                    ]},
                    {"role": "tool", "content": "rain", "tool_name": "weather", "tool_call_id": "call_0"},
                ],
                "tools": [{"type": "function", "function": {"name": "weather", "description": "w", "parameters": {"type": "object"}}}],
                "format": {"type": "object"},
                "options": {"num_ctx": 8192, "temperature": 0.25, "num_predict": 64, "seed": 1, "stop": ["\n\n"]},
                "stream": true,
                "keep_alive": "90000ms",
            })
        );
    }

    #[test]
    fn formats_keep_alive_and_tool_choice_none() {
        let prompt = Prompt::new()
            .user("hi")
            .response_format(ResponseFormat::JsonObject)
            .tools(vec![ToolDefinition {
                name: "t".into(),
                description: String::new(),
                parameters: json!({}),
            }]);
        let mut prompt = prompt;
        prompt.options.tool_choice = Some(ToolChoice::None);
        let body = serde_json::to_value(
            ChatRequest::new("m", &prompt, &Map::new(), Some(KeepAlive::Forever), false).unwrap(),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "format": "json", "stream": false, "keep_alive": -1})
        );
        assert_eq!(
            serde_json::to_value(KeepAlive::UnloadNow).unwrap(),
            json!(0)
        );
    }

    #[test]
    fn keep_alive_durations_fit_go() {
        let wire = |d: Duration| serde_json::to_value(KeepAlive::For(d)).unwrap();
        assert_eq!(wire(Duration::ZERO), json!("0ms"));
        assert_eq!(wire(Duration::from_nanos(1)), json!("1ms"));
        assert_eq!(wire(Duration::from_micros(999)), json!("1ms"));
        assert_eq!(wire(Duration::from_micros(1500)), json!("2ms"));
        assert_eq!(wire(Duration::from_secs(90)), json!("90000ms"));
        // The longest whole number of milliseconds Go holds, and just beyond it.
        let max_millis = u64::try_from(i64::MAX / 1_000_000).unwrap();
        assert_eq!(
            wire(Duration::from_millis(max_millis)),
            json!(format!("{max_millis}ms"))
        );
        assert_eq!(wire(Duration::from_millis(max_millis + 1)), json!(-1));
        assert_eq!(wire(Duration::from_secs(300 * 365 * 24 * 3600)), json!(-1));
        assert_eq!(wire(Duration::MAX), json!(-1));
    }

    #[test]
    fn arguments_are_always_objects() {
        assert_eq!(arguments_object(&json!({"a": 1})), json!({"a": 1}));
        assert_eq!(arguments_object(&json!("{\"a\":1}")), json!({"a": 1}));
        assert_eq!(arguments_object(&json!("{\"a\":")), json!({}));
        assert_eq!(arguments_object(&json!([1])), json!({}));
    }
}
