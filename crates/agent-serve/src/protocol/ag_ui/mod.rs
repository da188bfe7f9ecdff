//! AG-UI (protocol 1.0): `POST /ag-ui/{agent}` takes a `RunAgentInput` and answers the run
//! as AG-UI's event stream over SSE, for front ends such as CopilotKit.
//!
//! The input's `threadId` is a thread of the run model: a new one is made with the
//! conversation the input carries, an existing one already has its turns and only the last
//! user message is new. A run that waits for a person (a tool approval) ends its stream with
//! `RUN_FINISHED` whose outcome is an interrupt; the front end answers it with a new request
//! on the thread whose `resume` names the interrupt, and that request's stream shows the run
//! going on.

mod translate;
mod wire;

use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::response::sse::Event;
use axum::routing::post;
use serde_json::{Value, json};

use crate::auth::KeyName;
use crate::error::{ApiError, JsonBody};
use crate::protocol::agent_protocol::check_id;
use crate::runs::{NewRun, Runs, RunsError};
use crate::sse;
use translate::Translate;
pub(crate) use wire::RunAgentInput;

/// The protocol version this endpoint speaks (sent on `RUN_STARTED`).
pub(crate) const PROTOCOL_VERSION: &str = "1.0";

/// The AG-UI route.
pub(crate) fn router() -> Router<Runs> {
    Router::new().route("/ag-ui/{agent}", post(run_agent))
}

/// `POST /ag-ui/{agent}`.
async fn run_agent(
    State(runs): State<Runs>,
    Extension(key): Extension<KeyName>,
    Path(agent): Path<String>,
    JsonBody(input): JsonBody<RunAgentInput>,
) -> Result<Response, ApiError> {
    if runs.agent(&agent).is_none() {
        return Err(ApiError::not_found(format!("no agent is named `{agent}`")));
    }
    if let Some(version) = &input.protocol_version {
        if !version.starts_with("1.") && version != "1" {
            return Err(ApiError::unprocessable(format!(
                "protocolVersion `{version}` is not spoken here: {PROTOCOL_VERSION}"
            )));
        }
    }
    check_id(&input.thread_id)?;
    let resume = input.resume.as_deref().unwrap_or_default();
    let (handle, after) = if let Some(first) = resume.first() {
        if let Some(waiting) = runs.interrupt(&input.thread_id) {
            if waiting.id != first.interrupt_id {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "not_interrupted",
                    format!(
                        "the run on thread `{}` waits on interrupt `{}`, not `{}`",
                        input.thread_id, waiting.id, first.interrupt_id
                    ),
                ));
            }
        }
        let handle = runs.resume(&input.thread_id, first.answer()).await?;
        let after = handle.resumed_from();
        (handle, after)
    } else {
        let message = wire::conversation(&input.messages)?;
        let known = match runs.thread(&input.thread_id).await {
            Ok(_) => true,
            Err(RunsError::UnknownThread(_)) => false,
            Err(other) => return Err(other.into()),
        };
        // A thread of ours has the earlier turns; a new one starts with those sent.
        let run_input = if known {
            json!({ "message": message.last })
        } else {
            runs.create_thread(Some(input.thread_id.clone()), json!({"api": "ag-ui"}))
                .await?;
            message.all
        };
        let mut new = NewRun::new(agent, run_input)
            .thread(input.thread_id.clone())
            .metadata(json!({"api": "ag-ui", "ag_ui_run_id": input.run_id}));
        if let Some(name) = key.0 {
            new = new.key(name);
        }
        (runs.start(new).await?, 0)
    };
    let mut translate = Translate::new(&input.thread_id, &input.run_id, &handle.record);
    let first = translate.opening(after > 0);
    Ok(sse::respond_until(
        first.into_iter().map(data).collect(),
        handle.events(after),
        move |numbered| {
            let (events, over) = translate.event(numbered);
            (events.into_iter().map(data).collect(), over)
        },
        Vec::new(),
    ))
}

/// An AG-UI event on the wire: a `data:` line of its JSON, with no event name.
fn data(event: Value) -> Event {
    Event::default().data(event.to_string())
}

/// The route's operation in the OpenAPI document.
pub(crate) fn operations(
    generator: &mut schemars::generate::SchemaGenerator,
) -> Vec<crate::openapi::Operation> {
    use crate::openapi::Operation;
    vec![
        Operation::new(
            "post",
            "/ag-ui/{agent}",
            "ag-ui",
            "Run an agent as AG-UI's event stream",
        )
        .body(generator.subschema_for::<RunAgentInput>())
        .ok(
            "200",
            "text/event-stream",
            json!({"type": "string", "description": "AG-UI events, one JSON object per `data:` line"}),
        ),
    ]
}
