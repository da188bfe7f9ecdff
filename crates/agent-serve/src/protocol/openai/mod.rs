//! OpenAI's APIs over the served agents: `GET /v1/models` (one model per agent),
//! `POST /v1/chat/completions` (the messages are the run's input and history; `stream`
//! gives `chat.completion.chunk` events and `[DONE]`) and `POST /v1/responses` (the
//! Responses API, typed stream events with a rising `sequence_number`), with OpenAI's error
//! body.

mod responses;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::KeyName;
use crate::error::{ApiError, JsonBody, with_retry};
use crate::runs::{NewRun, RunEvent, RunRecord, Runs, Spent};
use crate::sse;

/// The routes.
pub(crate) fn router() -> Router<Runs> {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(completions))
        .route("/v1/responses", post(responses::responses))
}

/// An [`ApiError`] in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> OpenAiError {
        OpenAiError(error)
    }
}

impl From<crate::runs::RunsError> for OpenAiError {
    fn from(error: crate::runs::RunsError) -> OpenAiError {
        OpenAiError(error.into())
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let error = self.0;
        let kind = match error.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        let body = json!({"error": {
            "message": error.message,
            "type": kind,
            "param": null,
            "code": error.code,
        }});
        let mut response = with_retry(error.status, error.retry_after, Json(body));
        // The SDK retries 409s and 5xx: a run that failed would run (and spend) again.
        if error.status.is_server_error() || error.status == StatusCode::CONFLICT {
            response
                .headers_mut()
                .insert("x-should-retry", "false".parse().expect("static header"));
        }
        response
    }
}

async fn models(State(runs): State<Runs>) -> Json<Value> {
    let created = chrono::Utc::now().timestamp();
    let data: Vec<Value> = runs
        .agents()
        .map(|(name, _)| json!({"id": name, "object": "model", "created": created, "owned_by": "effect-agents"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// The parts of a chat request this server reads (the rest is accepted and ignored:
/// sampling settings belong to the agent's own model).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

impl Content {
    fn text(&self) -> Result<String, ApiError> {
        match self {
            Content::Text(text) => Ok(text.clone()),
            Content::Parts(parts) => {
                let mut text = String::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(ApiError::bad_request(format!(
                                "content parts of type `{kind}` are not supported (text only)"
                            )));
                        }
                    }
                }
                Ok(text)
            }
        }
    }
}

/// The run input of a chat: its messages in the `messages` form, tool messages left out
/// (the agent runs its own tools).
fn input(messages: &[ChatMessage]) -> Result<Value, ApiError> {
    let mut turns = Vec::with_capacity(messages.len());
    for message in messages {
        let role = match message.role.as_str() {
            "user" => "user",
            "assistant" => "assistant",
            "system" | "developer" => "system",
            "tool" | "function" => continue,
            other => {
                return Err(ApiError::bad_request(format!(
                    "`{other}` is not a message role (user, assistant, system, developer, tool)"
                )));
            }
        };
        let content = match &message.content {
            Some(content) => content.text()?,
            None => String::new(),
        };
        turns.push(json!({"role": role, "content": content}));
    }
    match turns.last() {
        Some(last) if last["role"] == "user" => Ok(json!({"messages": turns})),
        _ => Err(ApiError::bad_request(
            "the last message must be the user's (what the agent is asked)",
        )),
    }
}

fn answer_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn usage(spent: &Spent) -> Value {
    json!({
        "prompt_tokens": spent.input_tokens,
        "completion_tokens": spent.output_tokens,
        "total_tokens": spent.input_tokens.saturating_add(spent.output_tokens),
    })
}

/// Starts a run of the agent `model` names (404 in OpenAI's shape if none does), recording
/// which of the OpenAI APIs asked for it.
async fn start(
    runs: &Runs,
    model: &str,
    input: Value,
    api: &str,
    key: KeyName,
) -> Result<crate::runs::RunHandle, OpenAiError> {
    if runs.agent(model).is_none() {
        return Err(OpenAiError(ApiError::not_found(format!(
            "the model `{model}` does not exist (GET /v1/models lists the agents)"
        ))));
    }
    Ok(runs
        .start(NewRun {
            agent: model.to_owned(),
            thread_id: None,
            input,
            metadata: json!({ "api": api }),
            key: key.0,
            // No thread: nothing to share.
            multitask: crate::runs::Multitask::default(),
        })
        .await?)
}

/// What a client is told of a failed run.
fn failure_message(failure: &crate::runs::Failure) -> String {
    format!(
        "the agent's run failed ({}): {}",
        failure.kind, failure.message
    )
}

/// A failed run, as an OpenAI error: 502, not to be retried.
fn failed(record: &RunRecord) -> OpenAiError {
    let message = record
        .failure
        .as_ref()
        .map_or("the run failed".to_owned(), failure_message);
    OpenAiError(ApiError::new(
        StatusCode::BAD_GATEWAY,
        "run_failed",
        message,
    ))
}

async fn completions(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    body: Result<JsonBody<ChatRequest>, ApiError>,
) -> Result<Response, OpenAiError> {
    let request = body?.0;
    let handle = start(
        &runs,
        &request.model,
        input(&request.messages)?,
        "openai.chat.completions",
        key,
    )
    .await?;
    let id = format!("chatcmpl-{}", handle.record.id.replace('-', ""));
    let created = handle.record.created_at.timestamp();
    if !request.stream {
        let record = handle.wait().await?;
        let Some(output) = &record.output else {
            return Err(failed(&record));
        };
        return Ok(Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": request.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": answer_text(output), "refusal": null},
                "finish_reason": "stop",
                "logprobs": null,
            }],
            "usage": usage(&record.spent),
            "system_fingerprint": null,
        }))
        .into_response());
    }
    let include_usage = request.stream_options.is_some_and(|o| o.include_usage);
    let model = request.model;
    let chunk_json = move |delta: Value, finish: Option<&str>| -> Value {
        let mut chunk = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        });
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    };
    let chunk = {
        let chunk_json = chunk_json.clone();
        move |delta: Value, finish: Option<&str>| -> Event {
            Event::default().data(chunk_json(delta, finish).to_string())
        }
    };
    let first = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    // The text streamed by the model call going on; the answer is sent whole at the end
    // when the streamed text was not it (a typed answer repaired, text before tool calls).
    let mut call_text = String::new();
    let mut streamed_any = false;
    let map = move |numbered: &crate::runs::Numbered| -> Vec<Event> {
        match &numbered.event {
            RunEvent::Token { text } => {
                call_text.push_str(text);
                streamed_any = true;
                vec![chunk(json!({"content": text}), None)]
            }
            RunEvent::Trace { event, .. } if event["type"] == "infer_start" => {
                call_text.clear();
                Vec::new()
            }
            RunEvent::Output { value, spent } => {
                let answer = answer_text(value);
                let mut out = Vec::new();
                if call_text.trim() != answer.trim() {
                    let sep = if streamed_any { "\n\n" } else { "" };
                    out.push(chunk(json!({"content": format!("{sep}{answer}")}), None));
                }
                out.push(chunk(json!({}), Some("stop")));
                if include_usage {
                    let mut last = chunk_json(json!({}), None);
                    last["choices"] = json!([]);
                    last["usage"] = usage(spent);
                    out.push(Event::default().data(last.to_string()));
                }
                out
            }
            RunEvent::Failed { failure, .. } => {
                let error = json!({"error": {
                    "message": failure_message(failure),
                    "type": "server_error",
                    "param": null,
                    "code": "run_failed",
                }});
                vec![Event::default().data(error.to_string())]
            }
            _ => Vec::new(),
        }
    };
    Ok(sse::respond(
        first,
        handle.events(0),
        map,
        vec![Event::default().data("[DONE]")],
    ))
}

/// The OpenAI routes' operations, for `/openapi.json`.
pub(crate) fn operations(
    generator: &mut schemars::generate::SchemaGenerator,
) -> Vec<crate::openapi::Operation> {
    use crate::openapi::{Operation, object};
    let string = json!({"type": "string"});
    let integer = json!({"type": "integer"});
    let models = object(
        json!({"object": string, "data": {"type": "array", "items": object(
            json!({"id": string, "object": string, "created": integer, "owned_by": string}),
            &["id", "object", "created", "owned_by"],
        )}}),
        &["object", "data"],
    );
    let completion = object(
        json!({"id": string, "object": string, "created": integer, "model": string,
            "choices": {"type": "array"}, "usage": {"type": "object"}}),
        &["id", "object", "created", "model", "choices"],
    );
    let response = object(
        json!({"id": string, "object": string, "created_at": integer, "status": string,
            "model": string, "output": {"type": "array"}}),
        &["id", "object", "created_at", "status", "model", "output"],
    );
    let or_stream = |schema: Value| json!({"anyOf": [schema, {"type": "string", "description": "Server-Sent Events, with `stream: true`"}]});
    vec![
        Operation::new("get", "/v1/models", "openai", "The agents, as models")
            .ok("200", "application/json", models)
            .openai(),
        Operation::new(
            "post",
            "/v1/chat/completions",
            "openai",
            "A chat completion from an agent",
        )
        .body(generator.subschema_for::<ChatRequest>())
        .ok("200", "application/json", or_stream(completion))
        .openai(),
        Operation::new(
            "post",
            "/v1/responses",
            "openai",
            "A response from an agent (the Responses API)",
        )
        .body(generator.subschema_for::<responses::ResponsesRequest>())
        .ok("200", "application/json", or_stream(response))
        .openai(),
    ]
}
