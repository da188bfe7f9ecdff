//! `agent worker --temporal` and `agent run --temporal`: a spec's agent as a Temporal program
//! (named after the agent, or else the spec file), served by workers and started from
//! anywhere.

use std::path::Path;

use std::time::Duration;

use agent_interp_temporal::{StartOptions, TemporalError, Worker, connect, start};
use agent_op::op;
use agent_spec::Spec;
use serde_json::Value;

use crate::error::CliError;
use crate::run::{self, Answer};

fn failed(error: TemporalError) -> CliError {
    CliError::Run(error.to_string())
}

/// Serves the agent `spec_path` describes (the program named after the spec) and the model,
/// tool and memory calls of every program on `task_queue`, until Ctrl-C.
pub async fn worker(spec_path: &Path, address: &str, task_queue: &str) -> Result<String, CliError> {
    let parts = run::parts(spec_path, None, Path::new("."), false).await?;
    let name = parts.spec.name();
    // Built once here so a spec that cannot make a program fails now, not in a workflow.
    let _checked = run::agent_program(&parts.spec, &parts.toolbox)?;
    let client = connect(address).await.map_err(failed)?;
    let (spec, toolbox) = (parts.spec.clone(), parts.toolbox.clone());
    let mut worker = Worker::new(client, task_queue)
        .shared_provider(parts.provider)
        .tools(parts.toolbox.tool_set())
        .program(name.clone(), move |(): ()| {
            run::agent_program(&spec, &toolbox).unwrap_or_else(|e| op::fail(e.to_string()))
        });
    if let Some(memory) = parts.memory {
        worker = worker.memory(memory);
    }
    eprintln!(
        "serving `{name}` on task queue `{task_queue}` at {address} (Ctrl-C or SIGTERM stops)"
    );
    // Stopped like a run (Ctrl-C, SIGTERM, SIGHUP): returning drops the toolbox, which kills
    // the MCP servers' process groups.
    worker
        .run(async {
            let _ = run::stop_signal().await;
        })
        .await
        .map_err(failed)?;
    Ok(String::new())
}

/// Starts the agent `spec_path` names on `task_queue`, prints its model and tool calls as
/// they happen, waits for its answer and writes its trace to `trace_path`.
pub async fn run(
    spec_path: &Path,
    address: &str,
    task_queue: &str,
    trace_path: &Path,
) -> Result<Answer, CliError> {
    let spec = Spec::read(spec_path)?;
    let client = connect(address).await.map_err(failed)?;
    let handle = start(&client, &spec.name(), (), StartOptions::new(task_queue))
        .await
        .map_err(failed)?;
    eprintln!(
        "started {} on task queue `{task_queue}`",
        handle.workflow_id()
    );
    let result = handle.result::<(), Value>();
    tokio::pin!(result);
    let mut shown = 0;
    let outcome = loop {
        tokio::select! {
            outcome = &mut result => break outcome,
            () = tokio::time::sleep(Duration::from_secs(1)) => {
                // Progress: the events the run recorded since the last look.
                if let Ok(trace) = handle.trace().await {
                    for entry in trace.events.iter().skip(shown) {
                        eprintln!("  {} {}", entry.trace_id, entry.event.kind.event_type());
                    }
                    shown = shown.max(trace.events.len());
                }
            }
        }
    };
    let write = |trace: &agent_op::Trace| {
        agent_op::trace::jsonl::write_trace_file(trace_path, trace).map_err(|source| CliError::Io {
            path: trace_path.to_owned(),
            action: "writing the trace",
            source,
        })
    };
    match outcome {
        Ok(outcome) => {
            write(&outcome.trace)?;
            Ok(Answer {
                value: outcome.value,
                trace: trace_path.to_owned(),
                streamed: false,
                journal: None,
            })
        }
        Err(error @ TemporalError::Run { .. }) => {
            // The failed workflow still answers queries (a worker replays it): keep its trace.
            match handle.trace().await {
                Ok(trace) => {
                    write(&trace)?;
                    Err(CliError::Run(format!(
                        "{error} (trace: {})",
                        trace_path.display()
                    )))
                }
                Err(_) => Err(failed(error)),
            }
        }
        Err(error) => Err(failed(error)),
    }
}
