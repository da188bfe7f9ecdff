//! `POST /v1/responses`: OpenAI's Responses API over the served agents. `model` names an
//! agent, `input` (text, or messages) is the run's input; `stream: true` gives the typed
//! events (`response.created` … `response.output_text.delta` … `response.completed` or
//! `response.failed`), each with a rising `sequence_number`.

use axum::extract::{Extension, State};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{OpenAiError, answer_text};
use crate::auth::KeyName;
use crate::error::{ApiError, JsonBody};
use crate::runs::{RunEvent, RunRecord, Runs, Spent};
use crate::sse;

/// The parts of a Responses request this server reads.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct ResponsesRequest {
    model: String,
    input: Input,
    instructions: Option<String>,
    #[serde(default)]
    stream: bool,
    metadata: Option<Value>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Item {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<ItemContent>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum ItemContent {
    Text(String),
    Parts(Vec<ItemPart>),
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ItemPart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// The run input of a Responses request: its messages in the `messages` form (the
/// instructions first, as a system message).
fn run_input(request: &ResponsesRequest) -> Result<Value, ApiError> {
    let mut turns = Vec::new();
    if let Some(instructions) = &request.instructions {
        turns.push(json!({"role": "system", "content": instructions}));
    }
    match &request.input {
        Input::Text(text) => turns.push(json!({"role": "user", "content": text})),
        Input::Items(items) => {
            for item in items {
                let role = match item.role.as_deref() {
                    Some("user") => "user",
                    Some("assistant") => "assistant",
                    Some("system" | "developer") => "system",
                    // Tool outputs and reasoning items: the agent runs its own tools.
                    _ => continue,
                };
                let content = match &item.content {
                    Some(ItemContent::Text(text)) => text.clone(),
                    Some(ItemContent::Parts(parts)) => {
                        let mut text = String::new();
                        for part in parts {
                            match (part.kind.as_str(), &part.text) {
                                ("input_text" | "output_text" | "text", Some(t)) => {
                                    text.push_str(t);
                                }
                                (kind, _) => {
                                    return Err(ApiError::bad_request(format!(
                                        "content parts of type `{kind}` are not supported (text only)"
                                    )));
                                }
                            }
                        }
                        text
                    }
                    None => String::new(),
                };
                turns.push(json!({"role": role, "content": content}));
            }
        }
    }
    match turns.last() {
        Some(last) if last["role"] == "user" => Ok(json!({"messages": turns})),
        _ => Err(ApiError::bad_request(
            "the input must end with the user's message (what the agent is asked)",
        )),
    }
}

fn usage(spent: &Spent) -> Value {
    json!({
        "input_tokens": spent.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": spent.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": spent.input_tokens.saturating_add(spent.output_tokens),
    })
}

/// The ids of one response and its message, from its run's id.
struct Ids {
    response: String,
    message: String,
    created_at: i64,
    model: String,
    instructions: Option<String>,
    metadata: Value,
}

impl Ids {
    fn new(record: &RunRecord, request: &ResponsesRequest) -> Ids {
        let hex = record.id.replace('-', "");
        Ids {
            response: format!("resp_{hex}"),
            message: format!("msg_{hex}"),
            created_at: record.created_at.timestamp(),
            model: request.model.clone(),
            instructions: request.instructions.clone(),
            metadata: request.metadata.clone().unwrap_or_else(|| json!({})),
        }
    }

    fn message(&self, status: &str, text: Option<&str>) -> Value {
        let content = match text {
            Some(text) => {
                json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}])
            }
            None => json!([]),
        };
        json!({"type": "message", "id": self.message, "status": status, "role": "assistant", "content": content})
    }

    /// The Response object.
    fn response(
        &self,
        status: &str,
        output: Vec<Value>,
        error: Value,
        spent: Option<&Spent>,
    ) -> Value {
        json!({
            "id": self.response,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": null,
            "instructions": self.instructions,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": false,
            "previous_response_id": null,
            "tools": [],
            "tool_choice": "auto",
            "temperature": null,
            "top_p": null,
            "metadata": self.metadata,
            "usage": spent.map(usage),
        })
    }
}

fn failure(record: &RunRecord) -> Value {
    match &record.failure {
        Some(f) => {
            json!({"code": "server_error", "message": super::failure_message(f)})
        }
        None => json!({"code": "server_error", "message": "the run failed"}),
    }
}

pub(super) async fn responses(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    body: Result<JsonBody<ResponsesRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let request = body?.0;
    let input = run_input(&request)?;
    let handle = super::start(&runs, &request.model, input, "openai.responses", key).await?;
    let ids = Ids::new(&handle.record, &request);
    if !request.stream {
        let record = handle.wait().await?;
        let body = match &record.output {
            Some(output) => {
                let text = answer_text(output);
                ids.response(
                    "completed",
                    vec![ids.message("completed", Some(&text))],
                    Value::Null,
                    Some(&record.spent),
                )
            }
            None => ids.response("failed", Vec::new(), failure(&record), Some(&record.spent)),
        };
        return Ok(axum::Json(body).into_response());
    }
    let mut sequence = 0u64;
    let mut event = move |kind: &str, mut data: Value| -> Event {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        Event::default().event(kind).data(data.to_string())
    };
    let first = vec![
        event(
            "response.created",
            json!({"response": ids.response("in_progress", Vec::new(), Value::Null, None)}),
        ),
        event(
            "response.in_progress",
            json!({"response": ids.response("in_progress", Vec::new(), Value::Null, None)}),
        ),
        event(
            "response.output_item.added",
            json!({"output_index": 0, "item": ids.message("in_progress", None)}),
        ),
        event(
            "response.content_part.added",
            json!({"item_id": ids.message, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
        ),
    ];
    // As on the chat route: the text streams as the model writes it, and the answer follows
    // whole when it is not what the last model call streamed.
    let mut text = String::new();
    let mut call_text = String::new();
    let map = move |numbered: &crate::runs::Numbered| -> Vec<Event> {
        let delta = |event: &mut dyn FnMut(&str, Value) -> Event, piece: &str| {
            event(
                "response.output_text.delta",
                json!({"item_id": ids.message, "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []}),
            )
        };
        match &numbered.event {
            RunEvent::Token { text: piece } => {
                text.push_str(piece);
                call_text.push_str(piece);
                vec![delta(&mut event, piece)]
            }
            RunEvent::Trace { event: e, .. } if e["type"] == "infer_start" => {
                call_text.clear();
                Vec::new()
            }
            RunEvent::Output { value, spent } => {
                let answer = answer_text(value);
                let mut out = Vec::new();
                if call_text.trim() != answer.trim() {
                    let piece = if text.is_empty() {
                        answer.clone()
                    } else {
                        format!("\n\n{answer}")
                    };
                    text.push_str(&piece);
                    out.push(delta(&mut event, &piece));
                }
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                out.push(event(
                    "response.output_text.done",
                    json!({"item_id": ids.message, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
                ));
                out.push(event(
                    "response.content_part.done",
                    json!({"item_id": ids.message, "output_index": 0, "content_index": 0, "part": part}),
                ));
                let item = ids.message("completed", Some(&text));
                out.push(event(
                    "response.output_item.done",
                    json!({"output_index": 0, "item": item}),
                ));
                out.push(event(
                    "response.completed",
                    json!({"response": ids.response("completed", vec![item], Value::Null, Some(spent))}),
                ));
                out
            }
            RunEvent::Failed { failure, spent } => {
                let error = json!({"code": "server_error",
                    "message": super::failure_message(failure)});
                vec![event(
                    "response.failed",
                    json!({"response": ids.response("failed", Vec::new(), error, Some(spent))}),
                )]
            }
            _ => Vec::new(),
        }
    };
    Ok(sse::respond(first, handle.events(0), map, Vec::new()))
}
