//! The Agent Protocol, as LangGraph's server shapes it (what `langgraph-sdk` calls):
//! assistants (our agents), threads, stateless and background runs, and their streams.

mod wire;

use std::collections::BTreeSet;

use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::agents::message_of;
use crate::auth::KeyName;
use crate::error::{ApiError, JsonBody};
use crate::runs::{
    Multitask, NewRun, RunEvent, RunHandle, RunRecord, RunStatus, Runs, Turn, Waited,
};
use crate::sse;
use wire::{AssistantSearch, CancelQuery, HistoryQuery, ListQuery, Modes, RunCreate, ThreadCreate};

/// The protocol's routes.
pub(crate) fn router() -> Router<Runs> {
    Router::new()
        .route("/assistants/search", post(search_assistants))
        .route("/assistants/{id}", get(get_assistant))
        .route("/assistants/{id}/schemas", get(assistant_schemas))
        .route("/threads", post(create_thread))
        .route("/threads/{tid}", get(get_thread))
        .route("/threads/{tid}/state", get(thread_state))
        .route(
            "/threads/{tid}/history",
            post(thread_history).get(thread_history_get),
        )
        .route("/runs", post(create_stateless))
        .route("/runs/wait", post(wait_stateless))
        .route("/runs/stream", post(stream_stateless))
        .route("/runs/{rid}", get(get_run))
        .route("/runs/{rid}/join", get(join_stateless))
        .route("/runs/{rid}/stream", get(join_stream_stateless))
        .route("/runs/{rid}/cancel", post(cancel_stateless))
        .route("/runs/{rid}/trace", get(trace))
        .route("/runs/{rid}/view", get(view))
        .route(
            "/threads/{tid}/runs",
            post(create_on_thread).get(list_thread_runs),
        )
        .route("/threads/{tid}/runs/wait", post(wait_on_thread))
        .route("/threads/{tid}/runs/stream", post(stream_on_thread))
        .route("/threads/{tid}/runs/{rid}", get(get_thread_run))
        .route("/threads/{tid}/runs/{rid}/join", get(join_on_thread))
        .route(
            "/threads/{tid}/runs/{rid}/stream",
            get(join_stream_on_thread),
        )
        .route("/threads/{tid}/runs/{rid}/cancel", post(cancel_on_thread))
}

// ---- assistants ----

/// When the agents were registered: the server's start.
fn started_at() -> &'static str {
    static AT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AT.get_or_init(|| wire::time(&chrono::Utc::now()))
}

fn assistant(name: &str, agent: &dyn crate::ServedAgent) -> wire::Assistant {
    let description = agent.description();
    wire::Assistant {
        assistant_id: name.to_owned(),
        graph_id: name.to_owned(),
        name: name.to_owned(),
        description: (!description.is_empty()).then(|| description.to_owned()),
        config: json!({}),
        context: json!({}),
        metadata: json!({}),
        version: 1,
        created_at: started_at().to_owned(),
        updated_at: started_at().to_owned(),
    }
}

async fn search_assistants(
    State(runs): State<Runs>,
    body: Option<JsonBody<AssistantSearch>>,
) -> Json<Vec<wire::Assistant>> {
    let search = body.map(|b| b.0).unwrap_or_default();
    let found = runs
        .agents()
        .filter(|(name, _)| {
            search
                .graph_id
                .as_deref()
                .is_none_or(|g| g == name.as_str())
                && search.name.as_deref().is_none_or(|n| name.contains(n))
        })
        .skip(search.offset.unwrap_or(0))
        .take(search.limit.unwrap_or(10))
        .map(|(name, agent)| assistant(name, agent.as_ref()))
        .collect();
    Json(found)
}

async fn get_assistant(
    State(runs): State<Runs>,
    Path(id): Path<String>,
) -> Result<Json<wire::Assistant>, ApiError> {
    let agent = runs
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("no assistant is named `{id}`")))?;
    Ok(Json(assistant(&id, agent.as_ref())))
}

async fn assistant_schemas(
    State(runs): State<Runs>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = runs
        .agent(&id)
        .ok_or_else(|| ApiError::not_found(format!("no assistant is named `{id}`")))?;
    Ok(Json(json!({
        "graph_id": id,
        "input_schema": agent.input_schema(),
        "output_schema": agent.output_schema(),
        "state_schema": null,
        "config_schema": null,
        "context_schema": null,
    })))
}

// ---- threads ----

async fn create_thread(
    State(runs): State<Runs>,
    body: Option<JsonBody<ThreadCreate>>,
) -> Result<Json<Value>, ApiError> {
    let body = body.map(|b| b.0).unwrap_or_default();
    let id = body.thread_id.clone();
    if let Some(id) = &id {
        check_id(id)?;
    }
    match runs
        .create_thread(id.clone(), body.metadata.unwrap_or_else(|| json!({})))
        .await?
    {
        Some(thread) => Ok(Json(wire::thread(&thread))),
        None if body.if_exists.as_deref() == Some("do_nothing") => {
            let id = id.unwrap_or_default();
            Ok(Json(wire::thread(&runs.thread(&id).await?)))
        }
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "thread_exists",
            format!("a thread has the id `{}`", id.unwrap_or_default()),
        )),
    }
}

/// Ids the caller chooses are short and printable (they end up in URLs and logs).
pub(crate) fn check_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 128 || !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::unprocessable(
            "an id is 1 to 128 printable ASCII characters",
        ));
    }
    Ok(())
}

async fn get_thread(
    State(runs): State<Runs>,
    Path(tid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(wire::thread(&runs.thread(&tid).await?)))
}

async fn thread_state(
    State(runs): State<Runs>,
    Path(tid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let thread = runs.thread(&tid).await?;
    let latest = runs.thread_history(&tid, 1).await?;
    Ok(Json(match latest.first() {
        Some(state) => wire::state(&tid, state),
        None => json!({
            "values": wire::values(&thread.turns, thread.last_output.as_ref()),
            "next": [],
            "tasks": [],
            "interrupts": [],
            "checkpoint": null,
            "metadata": {},
            "created_at": null,
            "parent_checkpoint": null,
        }),
    }))
}

async fn thread_history(
    State(runs): State<Runs>,
    Path(tid): Path<String>,
    body: Option<JsonBody<HistoryQuery>>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let limit = body.and_then(|b| b.0.limit).unwrap_or(10);
    let states = runs.thread_history(&tid, limit).await?;
    Ok(Json(states.iter().map(|s| wire::state(&tid, s)).collect()))
}

async fn thread_history_get(
    State(runs): State<Runs>,
    Path(tid): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let states = runs.thread_history(&tid, query.limit.unwrap_or(10)).await?;
    Ok(Json(states.iter().map(|s| wire::state(&tid, s)).collect()))
}

// ---- runs ----

/// Starts the run a body asks for.
async fn start(
    runs: &Runs,
    key: KeyName,
    thread: Option<String>,
    body: RunCreate,
) -> Result<RunHandle, ApiError> {
    if let Some(command) = &body.command {
        return resume(runs, thread.as_deref(), command).await;
    }
    let multitask = match body.multitask_strategy.as_deref() {
        None => Multitask::default(),
        Some(name) => Multitask::from_name(name).ok_or_else(|| {
            ApiError::unprocessable(format!(
                "`{name}` is no multitask_strategy: reject, interrupt, rollback or enqueue"
            ))
        })?,
    };
    let Some(input) = body.input else {
        return Err(ApiError::unprocessable("the run needs an `input`"));
    };
    if let Some(tid) = &thread {
        if body.if_not_exists.as_deref() == Some("create") {
            check_id(tid)?;
            runs.create_thread(Some(tid.clone()), json!({})).await?;
        }
    }
    let handle = runs
        .start(NewRun {
            agent: body.assistant_id,
            thread_id: thread,
            input,
            metadata: body.metadata.unwrap_or_else(|| json!({})),
            key: key.0,
            multitask,
        })
        .await?;
    Ok(handle)
}

/// `command: {"resume": …}`: the answer to the interrupt a run on the thread waits on (a
/// string, or `{interrupt id: answer}`; anything but a string is given as its JSON text).
async fn resume(runs: &Runs, thread: Option<&str>, command: &Value) -> Result<RunHandle, ApiError> {
    let Some(thread) = thread else {
        return Err(ApiError::unprocessable(
            "`command` resumes an interrupted run on a thread: use /threads/{thread_id}/runs…",
        ));
    };
    let Some(answer) = command.get("resume") else {
        return Err(ApiError::unprocessable(
            "`command` supports `resume` only (`update` and `goto` have no meaning for these agents)",
        ));
    };
    let answer = match answer {
        Value::Object(by_id) if by_id.len() == 1 => {
            by_id.values().next().cloned().unwrap_or_default()
        }
        other => other.clone(),
    };
    let answer = match answer {
        Value::String(text) => text,
        other => other.to_string(),
    };
    Ok(runs.resume(thread, answer).await?)
}

/// The stream modes a body asks for (default `values`).
fn modes(modes: Option<Modes>) -> Result<BTreeSet<String>, ApiError> {
    let list = match modes {
        None => vec!["values".to_owned()],
        Some(Modes::One(mode)) => vec![mode],
        Some(Modes::Many(modes)) => modes,
    };
    const KNOWN: [&str; 7] = [
        "values",
        "updates",
        "messages",
        "messages-tuple",
        "events",
        "custom",
        "debug",
    ];
    for mode in &list {
        if !KNOWN.contains(&mode.as_str()) {
            return Err(ApiError::unprocessable(format!(
                "stream_mode `{mode}` is not one of {}",
                KNOWN.join(", ")
            )));
        }
    }
    Ok(list.into_iter().collect())
}

/// Where a run lives in the protocol's paths.
fn location(record: &RunRecord) -> String {
    match &record.thread_id {
        Some(tid) => format!("/threads/{tid}/runs/{}", record.id),
        None => format!("/runs/{}", record.id),
    }
}

fn with_location(mut response: Response, record: &RunRecord, stream: bool) -> Response {
    let base = location(record);
    if let Ok(value) = HeaderValue::from_str(&base) {
        response.headers_mut().insert("content-location", value);
    }
    // The SDK reconnects (with Last-Event-ID) to `Location` while the run goes.
    if stream {
        if let Ok(value) = HeaderValue::from_str(&format!("{base}/stream")) {
            response.headers_mut().insert("location", value);
        }
    }
    response
}

/// A run's final values (what `runs.wait` and `join` answer): the conversation and the
/// answer, or `__error__` for a failed run.
async fn final_values(runs: &Runs, record: &RunRecord) -> Result<Value, ApiError> {
    if let Some(failure) = &record.failure {
        return Ok(json!({"__error__": {"error": failure.kind, "message": failure.message}}));
    }
    let turns = match &record.thread_id {
        Some(tid) => runs.thread(tid).await?.turns,
        None => {
            let mut turns = match message_of(&record.input) {
                Some((message, mut history)) => {
                    history.push(Turn {
                        role: "user".into(),
                        content: message,
                    });
                    history
                }
                None => Vec::new(),
            };
            if let Some(output) = &record.output {
                turns.push(Turn {
                    role: "assistant".into(),
                    content: match output {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                });
            }
            turns
        }
    };
    Ok(wire::values(&turns, record.output.as_ref()))
}

/// The SSE stream of `handle` in `modes`, after event `after`.
fn stream(handle: &RunHandle, modes: BTreeSet<String>, after: u64, first: bool) -> Response {
    let record = handle.record.clone();
    let mut prelude = Vec::new();
    if first {
        prelude.push(sse::json_event(
            "metadata",
            &json!({"run_id": record.id, "thread_id": record.thread_id, "attempt": 1}),
        ));
    }
    let message_id = format!("run-{}", record.id);
    let input_turns: Vec<Turn> = match message_of(&record.input) {
        Some((message, mut history)) => {
            history.push(Turn {
                role: "user".into(),
                content: message,
            });
            history
        }
        None => Vec::new(),
    };
    let map = move |numbered: &crate::runs::Numbered| -> Vec<Event> {
        let mut out = Vec::new();
        match &numbered.event {
            RunEvent::Token { text } => {
                let chunk = json!({"type": "AIMessageChunk", "content": text, "id": message_id});
                let meta = json!({"run_id": record.id, "langgraph_node": "agent"});
                if modes.contains("messages-tuple") || modes.contains("messages") {
                    out.push(sse::json_event("messages", &json!([chunk, meta])));
                }
            }
            RunEvent::Trace { trace_id, event } => {
                // The event's JSON is made once for all the streams that send it.
                let data = numbered.trace_json();
                let kind = event.get("type").map_or("null".into(), Value::to_string);
                let id = Value::from(trace_id.as_str()).to_string();
                if modes.contains("events") {
                    out.push(Event::default().event("events").data(format!(
                        r#"{{"event":{kind},"trace_id":{id},"data":{data}}}"#
                    )));
                }
                if modes.contains("custom") {
                    out.push(
                        Event::default()
                            .event("custom")
                            .data(format!(r#"{{"trace_id":{id},"event":{data}}}"#)),
                    );
                }
                if modes.contains("debug") {
                    out.push(
                        Event::default()
                            .event("debug")
                            .data(format!(r#"{{"type":"trace","payload":{data}}}"#)),
                    );
                }
            }
            RunEvent::Output { value, spent } => {
                let mut turns = input_turns.clone();
                turns.push(Turn {
                    role: "assistant".into(),
                    content: match value {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                });
                if modes.contains("values") {
                    out.push(sse::json_event(
                        "values",
                        &wire::values(&turns, Some(value)),
                    ));
                }
                if modes.contains("updates") {
                    out.push(sse::json_event(
                        "updates",
                        &json!({"agent": {"output": value, "messages": wire::messages(&turns[turns.len() - 1..])}}),
                    ));
                }
                if modes.contains("custom") {
                    out.push(sse::json_event("custom", &json!({"spent": spent})));
                }
            }
            RunEvent::Failed { failure, .. } => {
                out.push(sse::json_event(
                    "error",
                    &json!({"error": failure.kind, "message": failure.message}),
                ));
            }
            RunEvent::Interrupted { id, value } => {
                let interrupt = json!({"__interrupt__": [{"value": value, "id": id}]});
                if modes.contains("values") {
                    out.push(sse::json_event("values", &interrupt));
                }
                if modes.contains("updates") {
                    out.push(sse::json_event("updates", &interrupt));
                }
            }
            RunEvent::Started { .. } | RunEvent::Ended { .. } => {}
        }
        out
    };
    sse::respond(prelude, handle.events(after), map, Vec::new())
}

async fn create_stateless(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    body: Result<JsonBody<RunCreate>, ApiError>,
) -> Result<Response, ApiError> {
    let handle = start(&runs, key, None, body?.0).await?;
    let record = handle.record.clone();
    Ok(with_location(
        Json(wire::run(&record)).into_response(),
        &record,
        false,
    ))
}

async fn create_on_thread(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    Path(tid): Path<String>,
    body: Result<JsonBody<RunCreate>, ApiError>,
) -> Result<Response, ApiError> {
    let handle = start(&runs, key, Some(tid), body?.0).await?;
    let record = handle.record.clone();
    Ok(with_location(
        Json(wire::run(&record)).into_response(),
        &record,
        false,
    ))
}

async fn wait_stateless(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    body: Result<JsonBody<RunCreate>, ApiError>,
) -> Result<Response, ApiError> {
    let handle = start(&runs, key, None, body?.0).await?;
    wait_response(&runs, &handle).await
}

async fn wait_on_thread(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    Path(tid): Path<String>,
    body: Result<JsonBody<RunCreate>, ApiError>,
) -> Result<Response, ApiError> {
    let handle = start(&runs, key, Some(tid), body?.0).await?;
    wait_response(&runs, &handle).await
}

async fn wait_response(runs: &Runs, handle: &RunHandle) -> Result<Response, ApiError> {
    let (record, interrupt) = match handle.wait_or_interrupt().await? {
        Waited::Done(record) => (record, None),
        Waited::Interrupted(record, interrupt) => (record, Some(interrupt)),
    };
    let mut values = final_values(runs, &record).await?;
    if let Some(interrupt) = interrupt {
        values["__interrupt__"] = json!([{"value": interrupt.value, "id": interrupt.id}]);
    }
    Ok(with_location(Json(values).into_response(), &record, false))
}

async fn stream_stateless(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    body: Result<JsonBody<RunCreate>, ApiError>,
) -> Result<Response, ApiError> {
    let body = body?.0;
    let modes = modes(body.stream_mode.clone())?;
    let handle = start(&runs, key, None, body).await?;
    let response = stream(&handle, modes, handle.resumed_from(), true);
    Ok(with_location(response, &handle.record, true))
}

async fn stream_on_thread(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    Path(tid): Path<String>,
    body: Result<JsonBody<RunCreate>, ApiError>,
) -> Result<Response, ApiError> {
    let body = body?.0;
    let modes = modes(body.stream_mode.clone())?;
    let handle = start(&runs, key, Some(tid), body).await?;
    let response = stream(&handle, modes, handle.resumed_from(), true);
    Ok(with_location(response, &handle.record, true))
}

/// The run `rid`, which must be on thread `tid` (or on none, for `None`).
async fn run_on(runs: &Runs, tid: Option<&str>, rid: &str) -> Result<RunHandle, ApiError> {
    let handle = runs.get(rid).await?;
    if let Some(tid) = tid {
        if handle.record.thread_id.as_deref() != Some(tid) {
            return Err(ApiError::not_found(format!(
                "thread `{tid}` has no run `{rid}`"
            )));
        }
    }
    Ok(handle)
}

async fn get_run(
    State(runs): State<Runs>,
    Path(rid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(wire::run(&run_on(&runs, None, &rid).await?.record)))
}

async fn get_thread_run(
    State(runs): State<Runs>,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(wire::run(
        &run_on(&runs, Some(&tid), &rid).await?.record,
    )))
}

async fn list_thread_runs(
    State(runs): State<Runs>,
    Path(tid): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Vec<Value>>, ApiError> {
    runs.thread(&tid).await?;
    let status = match query.status.as_deref() {
        None => None,
        Some(name) => Some(
            RunStatus::from_name(name)
                .ok_or_else(|| ApiError::unprocessable(format!("`{name}` is not a run status")))?,
        ),
    };
    let list = runs
        .list(
            Some(&tid),
            status,
            query.limit.unwrap_or(10),
            query.offset.unwrap_or(0),
        )
        .await?;
    Ok(Json(list.iter().map(wire::run).collect()))
}

async fn join_stateless(
    State(runs): State<Runs>,
    Path(rid): Path<String>,
) -> Result<Response, ApiError> {
    let handle = run_on(&runs, None, &rid).await?;
    wait_response(&runs, &handle).await
}

async fn join_on_thread(
    State(runs): State<Runs>,
    Path((tid, rid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let handle = run_on(&runs, Some(&tid), &rid).await?;
    wait_response(&runs, &handle).await
}

/// `?stream_mode=` of a join (repeatable).
fn query_modes(query: &str) -> Result<BTreeSet<String>, ApiError> {
    let asked: Vec<String> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| *k == "stream_mode")
        .map(|(_, v)| v.replace("%2D", "-"))
        .collect();
    modes((!asked.is_empty()).then_some(Modes::Many(asked)))
}

async fn join_stream_stateless(
    State(runs): State<Runs>,
    Path(rid): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Response, ApiError> {
    let handle = run_on(&runs, None, &rid).await?;
    let modes = query_modes(uri.query().unwrap_or(""))?;
    let after = sse::last_event_id(&headers).unwrap_or(0);
    Ok(stream(&handle, modes, after, false))
}

async fn join_stream_on_thread(
    State(runs): State<Runs>,
    Path((tid, rid)): Path<(String, String)>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Response, ApiError> {
    let handle = run_on(&runs, Some(&tid), &rid).await?;
    let modes = query_modes(uri.query().unwrap_or(""))?;
    let after = sse::last_event_id(&headers).unwrap_or(0);
    Ok(stream(&handle, modes, after, false))
}

async fn cancel_stateless(
    State(runs): State<Runs>,
    Path(rid): Path<String>,
    Query(query): Query<CancelQuery>,
) -> Result<Response, ApiError> {
    let handle = run_on(&runs, None, &rid).await?;
    cancel(&handle, &query).await
}

async fn cancel_on_thread(
    State(runs): State<Runs>,
    Path((tid, rid)): Path<(String, String)>,
    Query(query): Query<CancelQuery>,
) -> Result<Response, ApiError> {
    let handle = run_on(&runs, Some(&tid), &rid).await?;
    cancel(&handle, &query).await
}

async fn cancel(handle: &RunHandle, query: &CancelQuery) -> Result<Response, ApiError> {
    handle.cancel();
    if matches!(query.wait.as_deref(), Some("1" | "true")) {
        handle.wait().await?;
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

async fn trace(State(runs): State<Runs>, Path(rid): Path<String>) -> Result<Response, ApiError> {
    match runs.trace(&rid).await? {
        Some(bytes) => Ok(([("content-type", "application/x-ndjson")], bytes).into_response()),
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_going",
            format!("run `{rid}` has no trace yet: it is still going"),
        )),
    }
}

/// The run's trace in the HTML viewer (the page `agent trace view` writes).
async fn view(State(runs): State<Runs>, Path(rid): Path<String>) -> Result<Response, ApiError> {
    let Some(bytes) = runs.trace(&rid).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_going",
            format!("run `{rid}` has no trace yet: it is still going"),
        ));
    };
    let read = agent_op::trace::jsonl::read_jsonl(&bytes[..]).map_err(|e| {
        tracing::error!(run = %rid, error = %e, "agent-serve: a stored trace does not read");
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "trace_unreadable",
            format!("run `{rid}`'s stored trace does not read as a trace"),
        )
    })?;
    let page = agent_viewer::render(&read.trace, &format!("run {rid}"));
    Ok((
        [
            ("content-type", "text/html; charset=utf-8"),
            ("content-security-policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"),
        ],
        page,
    )
        .into_response())
}

// ---- the OpenAPI document ----

/// The protocol's operations, for `/openapi.json`.
pub(crate) fn operations(
    generator: &mut schemars::generate::SchemaGenerator,
) -> Vec<crate::openapi::Operation> {
    use crate::openapi::{Operation, object};
    let string = json!({"type": "string"});
    let status = json!({"type": "string", "enum": ["pending", "running", "success", "error", "timeout", "interrupted"]});
    let run = object(
        json!({
            "run_id": string, "thread_id": {"type": ["string", "null"]}, "assistant_id": string,
            "created_at": string, "updated_at": string, "status": status,
            "metadata": {}, "multitask_strategy": string,
            "spent": object(json!({"calls": {"type": "integer"}, "input_tokens": {"type": "integer"},
                "output_tokens": {"type": "integer"}, "cost_micro_usd": {"type": "integer"}}), &[]),
            "error": {"type": ["object", "null"]},
        }),
        &[
            "run_id",
            "assistant_id",
            "status",
            "created_at",
            "updated_at",
        ],
    );
    let values = json!({"type": "object", "description": "the conversation and answer (`messages`, `output`), or `__error__` for a failed run"});
    let thread = object(
        json!({"thread_id": string, "created_at": string, "updated_at": string, "metadata": {},
            "status": {"type": "string", "enum": ["idle", "busy", "interrupted", "error"]}, "values": values}),
        &["thread_id", "status"],
    );
    let state = object(
        json!({"values": values, "next": {"type": "array"}, "checkpoint": {}}),
        &["values"],
    );
    let assistant: Value = generator.subschema_for::<wire::Assistant>().into();
    let run_body: Value = generator.subschema_for::<RunCreate>().into();
    let events = json!({"type": "string", "description": "Server-Sent Events"});
    let array = |items: &Value| json!({"type": "array", "items": items});
    let limit = json!({"type": "integer", "minimum": 0});
    let mut ops = vec![
        Operation::new(
            "post",
            "/assistants/search",
            "assistants",
            "List the served agents",
        )
        .body(generator.subschema_for::<AssistantSearch>())
        .ok("200", "application/json", array(&assistant)),
        Operation::new("get", "/assistants/{id}", "assistants", "An agent").ok(
            "200",
            "application/json",
            assistant.clone(),
        ),
        Operation::new(
            "get",
            "/assistants/{id}/schemas",
            "assistants",
            "An agent's input and output schemas",
        ),
        Operation::new("post", "/threads", "threads", "Create a thread")
            .body(generator.subschema_for::<ThreadCreate>())
            .ok("200", "application/json", thread.clone()),
        Operation::new("get", "/threads/{tid}", "threads", "A thread").ok(
            "200",
            "application/json",
            thread,
        ),
        Operation::new("get", "/threads/{tid}/state", "threads", "A thread's state").ok(
            "200",
            "application/json",
            state.clone(),
        ),
        Operation::new(
            "post",
            "/threads/{tid}/history",
            "threads",
            "A thread's states, newest first",
        )
        .body(generator.subschema_for::<HistoryQuery>())
        .ok("200", "application/json", array(&state)),
        Operation::new(
            "get",
            "/threads/{tid}/runs",
            "runs",
            "A thread's runs, newest first",
        )
        .query("limit", limit.clone())
        .query("offset", limit)
        .query("status", status)
        .ok("200", "application/json", array(&run)),
    ];
    for (base, tag) in [("/runs", "stateless runs"), ("/threads/{tid}/runs", "runs")] {
        ops.push(
            Operation::new("post", base, tag, "Start a run in the background")
                .body(run_body.clone())
                .ok("200", "application/json", run.clone()),
        );
        ops.push(
            Operation::new(
                "post",
                format!("{base}/wait"),
                tag,
                "Run and wait for the answer",
            )
            .body(run_body.clone())
            .ok("200", "application/json", values.clone()),
        );
        ops.push(
            Operation::new(
                "post",
                format!("{base}/stream"),
                tag,
                "Run and stream its events",
            )
            .body(run_body.clone())
            .ok("200", "text/event-stream", events.clone()),
        );
        ops.push(
            Operation::new("get", format!("{base}/{{rid}}"), tag, "A run").ok(
                "200",
                "application/json",
                run.clone(),
            ),
        );
        ops.push(
            Operation::new(
                "get",
                format!("{base}/{{rid}}/join"),
                tag,
                "Wait for a run's answer",
            )
            .ok("200", "application/json", values.clone()),
        );
        ops.push(
            Operation::new(
                "get",
                format!("{base}/{{rid}}/stream"),
                tag,
                "Join a run's event stream (Last-Event-ID resumes)",
            )
            .query("stream_mode", json!({"type": "string"}))
            .ok("200", "text/event-stream", events.clone()),
        );
        ops.push(
            Operation::new(
                "post",
                format!("{base}/{{rid}}/cancel"),
                tag,
                "Cancel a run",
            )
            .query("wait", json!({"type": "string"}))
            .ok("202", "application/json", json!({})),
        );
    }
    ops.push(
        Operation::new(
            "get",
            "/runs/{rid}/trace",
            "stateless runs",
            "A finished run's JSONL trace",
        )
        .ok("200", "application/x-ndjson", json!({"type": "string"})),
    );
    ops.push(
        Operation::new(
            "get",
            "/runs/{rid}/view",
            "stateless runs",
            "A finished run's trace in the HTML viewer",
        )
        .ok("200", "text/html", json!({"type": "string"})),
    );
    ops
}
