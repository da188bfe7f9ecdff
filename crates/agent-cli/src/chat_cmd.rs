//! `agent chat SPEC`: a conversation with a spec's agent in the terminal, over the same run
//! model `agent serve` uses (in-process: no server), one thread per session.
//!
//! Each line is a turn: the reply streams as it comes, the thread keeps the history, and
//! `/reset`, `/trace`, `/cost`, `/exit` do what they say. Ctrl-C stops the turn going (the
//! run ends interrupted, the session goes on); Ctrl-D or `/exit` ends the session.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use agent_serve::runs::{Multitask, NewRun, RunEvent, Spent};
use agent_serve::{Server, SpecAgent};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

use crate::error::CliError;

/// Chats with the agent of `spec` until Ctrl-D or `/exit`; the last turn's trace goes to
/// `trace` on `/trace`.
pub async fn chat(spec: &Path, trace: Option<PathBuf>) -> Result<String, CliError> {
    let logs = std::env::temp_dir();
    let agent = tokio::select! {
        agent = SpecAgent::load(spec, &logs) => agent?,
        by = crate::run::stop_signal() => return Err(CliError::Interrupted(by)),
    };
    let name = agent.name();
    let trace = trace.unwrap_or_else(|| PathBuf::from(format!("{name}.chat.trace.jsonl")));
    // The session's runs live in memory: nothing is left behind.
    let server = Server::builder()
        .agent(name.clone(), agent)
        .store(":memory:")
        .build()
        .await
        .map_err(|e| CliError::Environment(format!("cannot start the chat: {e}")))?;
    let runs = server.runs().clone();
    let new_thread = || async {
        runs.create_thread(None, json!({}))
            .await
            .ok()
            .flatten()
            .map(|t| t.id)
            .ok_or_else(|| CliError::Environment("cannot start a conversation".into()))
    };
    let mut thread = new_thread().await?;
    let mut session = Spent::default();
    let mut last_run: Option<String> = None;
    eprintln!(
        "Chatting with {name}. /reset starts over, /trace writes the last turn's trace, /cost shows the spend; Ctrl-C stops a turn, Ctrl-D or /exit ends."
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        prompt();
        let line = tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => return Err(CliError::Environment(format!("cannot read the terminal: {e}"))),
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\n(no turn is going: Ctrl-D or /exit ends the chat)");
                continue;
            }
        };
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                thread = new_thread().await?;
                eprintln!("(a new conversation)");
                continue;
            }
            "/cost" => {
                eprintln!("({})", spent_line(&session));
                continue;
            }
            "/trace" => {
                match &last_run {
                    None => eprintln!("(no turn yet)"),
                    Some(id) => match runs.trace(id).await {
                        Ok(Some(bytes)) => match std::fs::write(&trace, bytes) {
                            Ok(()) => eprintln!(
                                "(the last turn's trace is in {}: `agent trace view {0}`)",
                                trace.display()
                            ),
                            Err(e) => eprintln!("(cannot write {}: {e})", trace.display()),
                        },
                        _ => eprintln!("(the last turn has no trace)"),
                    },
                }
                continue;
            }
            command if command.starts_with('/') => {
                eprintln!("(unknown command {command}: /reset, /trace, /cost, /exit)");
                continue;
            }
            _ => {}
        }
        let handle = match runs
            .start(
                NewRun::new(name.clone(), json!({ "message": line }))
                    .thread(thread.clone())
                    .metadata(json!({"api": "agent chat"}))
                    .multitask(Multitask::Reject),
            )
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                eprintln!("(the turn could not start: {e})");
                continue;
            }
        };
        last_run = Some(handle.record.id.clone());
        let mut events = handle.events(0);
        let mut streamed = String::new();
        let mut stdout = std::io::stdout();
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                _ = tokio::signal::ctrl_c() => {
                    handle.cancel();
                    // What the stopped turn spent counts toward the session.
                    if let Ok(record) = handle.wait().await {
                        add(&mut session, &record.spent);
                    }
                    eprintln!("\n(stopped)");
                    break;
                }
            };
            let Some(event) = event else {
                break;
            };
            match &event.event {
                RunEvent::Token { text } => {
                    streamed.push_str(text);
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
                RunEvent::Trace { event, .. } if event["type"] == "infer_start" => {
                    if !streamed.is_empty() {
                        let _ = writeln!(stdout);
                    }
                    streamed.clear();
                }
                RunEvent::Trace { event, .. } if event["type"] == "tool_call" => {
                    let call = &event["data"];
                    eprintln!(
                        "  · {} {}",
                        call["name"].as_str().unwrap_or("tool"),
                        call["args"]
                    );
                }
                RunEvent::Output { value, spent } => {
                    let answer = match value {
                        Value::String(text) => text.clone(),
                        other => serde_json::to_string_pretty(other).unwrap_or_default(),
                    };
                    if streamed.trim() != answer.trim() {
                        if !streamed.is_empty() {
                            let _ = writeln!(stdout);
                        }
                        let _ = write!(stdout, "{answer}");
                    }
                    let _ = writeln!(stdout);
                    add(&mut session, spent);
                }
                RunEvent::Failed { failure, spent } => {
                    eprintln!("\n(the turn failed: {}: {})", failure.kind, failure.message);
                    add(&mut session, spent);
                }
                _ => {}
            }
        }
    }
    eprintln!("({})", spent_line(&session));
    Ok(String::new())
}

fn prompt() {
    eprint!("> ");
    let _ = std::io::stderr().flush();
}

fn add(total: &mut Spent, spent: &Spent) {
    total.calls = total.calls.saturating_add(spent.calls);
    total.input_tokens = total.input_tokens.saturating_add(spent.input_tokens);
    total.output_tokens = total.output_tokens.saturating_add(spent.output_tokens);
    total.cost_micro_usd = total.cost_micro_usd.saturating_add(spent.cost_micro_usd);
}

fn spent_line(spent: &Spent) -> String {
    use crate::trace_cmd::counted;
    let cost = if spent.cost_micro_usd > 0 {
        format!(", ${:.4}", spent.cost_micro_usd as f64 / 1e6)
    } else {
        String::new()
    };
    format!(
        "this session: {}, {}{cost}",
        counted(spent.calls, "model call"),
        counted(
            spent.input_tokens.saturating_add(spent.output_tokens),
            "token"
        ),
    )
}
