//! Starting programs and talking to them: [`connect`], [`start`], [`RunHandle`].

use std::time::Duration;

use agent_engine::Outcome;
use agent_op::{Checkpoint, Steering, Trace};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use temporalio_client::errors::WorkflowGetResultError;
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, UntypedQuery, UntypedSignal,
    UntypedWorkflow, Url, WorkflowCancelOptions, WorkflowExecutionInfo,
    WorkflowFetchHistoryOptions, WorkflowGetResultOptions, WorkflowHandle, WorkflowQueryOptions,
    WorkflowSignalOptions, WorkflowStartOptions, WorkflowTerminateOptions,
};
use temporalio_common::data_converters::{PayloadConverter, RawValue};
use temporalio_common::protos::temporal::api::history::v1::history_event::Attributes;

use crate::error::TemporalError;
use crate::wire::{ProgramInput, ProgramOutput, Progress};
use crate::workflow::{CHECKPOINTS, STEER, TRACE};

/// How long [`connect`] waits for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`RunHandle::result`] keeps asking a server that does not answer.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(300);

/// How long a query or signal may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to the Temporal server at `address` (`host:port` or a URL), namespace
/// `default`, waiting at most [`CONNECT_TIMEOUT`].
pub async fn connect(address: &str) -> Result<Client, TemporalError> {
    connect_to(address, "default", CONNECT_TIMEOUT).await
}

/// Connects to the Temporal server at `address`, in `namespace`, waiting at most `timeout`.
pub async fn connect_to(
    address: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<Client, TemporalError> {
    let url = if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    };
    let failed = |message: String| TemporalError::Connect {
        address: address.to_owned(),
        message,
    };
    let url = Url::parse(&url).map_err(|e| failed(e.to_string()))?;
    let options = ConnectionOptions::new(url)
        .identity(format!("effect-agents@{}", std::process::id()))
        .build();
    let connection = tokio::time::timeout(timeout, Connection::connect(options))
        .await
        .map_err(|_| TemporalError::Unreachable {
            address: address.to_owned(),
            after: timeout,
        })?
        .map_err(|e| failed(e.to_string()))?;
    Client::new(connection, ClientOptions::new(namespace).build())
        .map_err(|e| failed(e.to_string()))
}

/// How to start a program.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StartOptions {
    /// The task queue whose workers run the program.
    pub task_queue: String,
    /// The workflow id (a fresh random one if `None`). Starting a second run with the id of a
    /// running one fails.
    pub workflow_id: Option<String>,
    /// How long the whole run may take, retries and all (no limit if `None`).
    pub execution_timeout: Option<Duration>,
}

impl StartOptions {
    /// Runs on `task_queue`, with a random workflow id and no time limit.
    pub fn new(task_queue: impl Into<String>) -> StartOptions {
        StartOptions {
            task_queue: task_queue.into(),
            workflow_id: None,
            execution_timeout: None,
        }
    }

    /// Sets the workflow id.
    pub fn workflow_id(mut self, id: impl Into<String>) -> StartOptions {
        self.workflow_id = Some(id.into());
        self
    }

    /// Limits the whole run to `timeout`.
    pub fn execution_timeout(mut self, timeout: Duration) -> StartOptions {
        self.execution_timeout = Some(timeout);
        self
    }
}

/// Starts the program registered as `program` on the workers of `options.task_queue`, with
/// `input`, and returns a handle on the run.
pub async fn start<In: Serialize>(
    client: &Client,
    program: &str,
    input: In,
    options: StartOptions,
) -> Result<RunHandle, TemporalError> {
    let input = serde_json::to_value(ProgramInput {
        input: serde_json::to_value(input).map_err(|source| TemporalError::Codec {
            what: "the program's input",
            source,
        })?,
        carried: None,
    })
    .map_err(|source| TemporalError::Codec {
        what: "the program's input",
        source,
    })?;
    let workflow_id = options
        .workflow_id
        .clone()
        .unwrap_or_else(|| format!("{program}-{:016x}", fastrand::u64(..)));
    let converter = PayloadConverter::serde_json();
    let start_options = WorkflowStartOptions::new(options.task_queue.clone(), workflow_id.clone())
        .maybe_execution_timeout(options.execution_timeout)
        .build();
    let handle = bounded(
        "starting a workflow",
        client.start_workflow(
            UntypedWorkflow::new(program),
            RawValue::from_value(&input, &converter),
            start_options,
        ),
    )
    .await?;
    // Signals and queries go to the workflow's current run: after continuing as new, the
    // run `start` began is closed.
    let latest = run_handle(client, &handle.info().namespace, &workflow_id, None);
    Ok(RunHandle {
        handle,
        latest,
        program: program.to_owned(),
        task_queue: options.task_queue,
        workflow_id,
    })
}

/// Awaits a call to the server for at most [`CALL_TIMEOUT`]: no answer in time, or the
/// client's error, is [`TemporalError::Server`] naming `operation`.
async fn bounded<T, E: std::fmt::Display>(
    operation: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, TemporalError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(TemporalError::Server {
            operation,
            message: e.to_string(),
        }),
        Err(_) => Err(TemporalError::Server {
            operation,
            message: format!("no answer within {CALL_TIMEOUT:?}"),
        }),
    }
}

/// A handle on run `run_id` of workflow `workflow_id`, or (`None`) on whichever of its runs
/// is current.
fn run_handle(
    client: &Client,
    namespace: &str,
    workflow_id: &str,
    run_id: Option<String>,
) -> WorkflowHandle<Client, UntypedWorkflow> {
    WorkflowExecutionInfo::builder()
        .namespace(namespace.to_owned())
        .workflow_id(workflow_id.to_owned())
        .maybe_run_id(run_id)
        .build()
        .bind_untyped(client.clone())
}

/// A program running (or finished) on Temporal.
pub struct RunHandle {
    /// The run `start` began (its result follows the runs it continued as).
    handle: WorkflowHandle<Client, UntypedWorkflow>,
    /// Whichever run of the workflow is current.
    latest: WorkflowHandle<Client, UntypedWorkflow>,
    program: String,
    task_queue: String,
    workflow_id: String,
}

impl RunHandle {
    /// The run's workflow id.
    pub fn workflow_id(&self) -> &str {
        &self.workflow_id
    }

    /// Waits for the run's end and returns its value, final state, trace and checkpoints.
    ///
    /// A program no worker of the task queue knows is reported as
    /// [`TemporalError::UnknownProgram`] (and the workflow terminated) as soon as a worker
    /// has refused it, instead of waiting forever.
    pub async fn result<S: DeserializeOwned, A: DeserializeOwned>(
        &self,
    ) -> Result<Outcome<S, A>, TemporalError> {
        let converter = PayloadConverter::serde_json();
        let refused = self.refused();
        tokio::pin!(refused);
        let mut unavailable_since: Option<std::time::Instant> = None;
        let raw = loop {
            let attempt = self.handle.get_result(WorkflowGetResultOptions::default());
            let outcome = tokio::select! {
                raw = attempt => raw,
                message = &mut refused => {
                    // No worker will ever run it: end it rather than leave it waiting.
                    let _ = self
                        .handle
                        .terminate(
                            WorkflowTerminateOptions::builder()
                                .reason(format!("no program `{}` on this task queue", self.program))
                                .build(),
                        )
                        .await;
                    return Err(TemporalError::UnknownProgram {
                        program: self.program.clone(),
                        task_queue: self.task_queue.clone(),
                        message,
                    });
                }
            };
            match outcome {
                // The server went away for a moment (restarted, say): ask again, for a while.
                Err(WorkflowGetResultError::Rpc(status))
                    if unavailable_since
                        .get_or_insert_with(std::time::Instant::now)
                        .elapsed()
                        < UNAVAILABLE_FOR =>
                {
                    tracing::debug!(%status, "waiting for the Temporal server");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => break other,
            }
        };
        let raw: RawValue = raw.map_err(|e| self.failure(e))?;
        let output: ProgramOutput =
            serde_json::from_value(raw.to_value(&converter)).map_err(|source| {
                TemporalError::Codec {
                    what: "the program's result",
                    source,
                }
            })?;
        let codec = |source| TemporalError::Codec {
            what: "the program's result",
            source,
        };
        Ok(Outcome {
            value: serde_json::from_value(output.value).map_err(codec)?,
            state: serde_json::from_value(output.state).map_err(codec)?,
            trace: output.trace,
            checkpoints: output.checkpoints,
            journal: None,
        })
    }

    /// Resolves, with the worker's message, once a worker has refused the workflow's type
    /// (no program of that name). Pending forever otherwise.
    async fn refused(&self) -> String {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Ok(events) = self
                .handle
                .fetch_history(WorkflowFetchHistoryOptions::default())
                .into_events()
                .await
            else {
                continue;
            };
            let refusal = events.iter().find_map(|event| match &event.attributes {
                Some(Attributes::WorkflowTaskFailedEventAttributes(failed)) => failed
                    .failure
                    .as_ref()
                    .map(|f| f.message.clone())
                    .filter(|m| m.contains("not found")),
                _ => None,
            });
            if let Some(message) = refusal {
                return message;
            }
        }
    }

    fn failure(&self, error: WorkflowGetResultError) -> TemporalError {
        use temporalio_common::error::IncomingError;
        let program = self.program.clone();
        match error {
            WorkflowGetResultError::Failed(failure) => match *failure {
                IncomingError::Application(failure) => {
                    let message = failure.source_error().to_string();
                    match failure.type_name() {
                        Some("bad_input") => TemporalError::BadInput { program, message },
                        _ if message.contains("[TMPRL1100]") => TemporalError::Divergence {
                            program,
                            workflow_id: self.workflow_id.clone(),
                            message,
                        },
                        kind => TemporalError::Run {
                            program,
                            kind: kind.unwrap_or("failed").to_owned(),
                            message,
                        },
                    }
                }
                other => TemporalError::Stopped {
                    program,
                    message: other.to_string(),
                },
            },
            other => TemporalError::Stopped {
                program,
                message: other.to_string(),
            },
        }
    }

    /// The ids of the workflow runs this program has run as so far, first to last: one,
    /// unless it continued as new (see [`Worker::continue_as_new_after`]).
    ///
    /// [`Worker::continue_as_new_after`]: crate::Worker::continue_as_new_after
    pub async fn run_ids(&self) -> Result<Vec<String>, TemporalError> {
        let mut runs = Vec::new();
        let info = self.handle.info();
        let mut next = info
            .run_id
            .clone()
            .or_else(|| info.first_execution_run_id.clone());
        while let Some(run_id) = next.take() {
            let run = run_handle(
                self.handle.client(),
                &info.namespace,
                &self.workflow_id,
                Some(run_id.clone()),
            );
            let events = bounded(
                "reading a run's history",
                run.fetch_history(WorkflowFetchHistoryOptions::default())
                    .into_events(),
            )
            .await?;
            next = events
                .iter()
                .rev()
                .find_map(|event| match &event.attributes {
                    Some(Attributes::WorkflowExecutionContinuedAsNewEventAttributes(
                        attributes,
                    )) => Some(attributes.new_execution_run_id.clone()),
                    _ => None,
                });
            runs.push(run_id);
        }
        Ok(runs)
    }

    /// Asks the run to stop: the program is aborted where it is (its calls in flight are
    /// cancelled) and [`result`](RunHandle::result) returns [`TemporalError::Stopped`].
    pub async fn cancel(&self, reason: &str) -> Result<(), TemporalError> {
        let cancel = self.latest.cancel(
            WorkflowCancelOptions::builder()
                .reason(reason.to_owned())
                .build(),
        );
        bounded("cancelling a run", cancel).await
    }

    /// Sends `steering` to the run: the program's next `op::next_steering` or waiting
    /// `op::wait_steering` takes it.
    pub async fn steer(&self, steering: Steering) -> Result<(), TemporalError> {
        let converter = PayloadConverter::serde_json();
        let value = serde_json::to_value(&steering).map_err(|source| TemporalError::Codec {
            what: "a steering message",
            source,
        })?;
        let signal = self.latest.signal(
            UntypedSignal::new(STEER),
            RawValue::from_value(&value, &converter),
            WorkflowSignalOptions::default(),
        );
        bounded("steering", signal).await
    }

    async fn query(&self, name: &'static str) -> Result<Value, TemporalError> {
        let converter = PayloadConverter::serde_json();
        let query = self.latest.query(
            UntypedQuery::new(name),
            RawValue::from_value(&Value::Null, &converter),
            WorkflowQueryOptions::default(),
        );
        let raw: RawValue = bounded("a query", query).await?;
        Ok(raw.to_value(&converter))
    }

    /// The run's trace: its events so far while it runs, the whole trace once it has ended.
    pub async fn trace(&self) -> Result<Trace, TemporalError> {
        let progress: Progress =
            serde_json::from_value(self.query(TRACE).await?).map_err(|source| {
                TemporalError::Codec {
                    what: "the trace query's answer",
                    source,
                }
            })?;
        Ok(match progress.trace {
            Some(trace) => trace,
            None => {
                let mut trace = Trace::new(agent_op::TraceId::from(self.workflow_id.as_str()));
                trace.events = progress.events;
                trace
            }
        })
    }

    /// The checkpoints the run has taken so far.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, TemporalError> {
        serde_json::from_value(self.query(CHECKPOINTS).await?).map_err(|source| {
            TemporalError::Codec {
                what: "the checkpoints query's answer",
                source,
            }
        })
    }
}
