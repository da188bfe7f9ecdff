//! The `agent` command line of effect-agents, as a library so its commands can be tested
//! and reused. The command line (its commands, flags, output and exit codes) is what this
//! crate's version promises; this library is its implementation and may change in any
//! release (it is left out of the workspace's `cargo-semver-checks`):
//!
//! - [`cli`]: the command line (clap);
//! - [`run`]: `agent run SPEC`, an agent described in TOML (read and built by the
//!   `agent-spec` crate);
//! - [`tools_cmd`]: `agent tools SPEC`, the tools a spec offers with their schemas;
//! - [`trace_cmd`]: `agent trace summary | tree | events | diff | view`;
//! - [`memory_cmd`]: `agent memory add | search | list | forget | prune | stats`;
//! - [`journal_cmd`]: `agent journal show | diff`, for the journals of durable runs;
//! - [`viewer`]: a trace as one self-contained HTML page;
//! - [`error`]: failures and their exit codes.

pub mod chat_cmd;
pub mod cli;
pub mod error;
pub mod journal_cmd;
pub mod memory_cmd;
pub mod run;
pub mod serve_cmd;
#[cfg(feature = "temporal")]
pub mod temporal_cmd;
pub mod tools_cmd;
pub mod trace_cmd;
/// The HTML trace viewer (the `agent-viewer` crate, which `agent serve` shares).
pub mod viewer {
    pub use agent_viewer::*;
}

use std::io::Write as _;

use cli::{Command, JournalCommand, KeysCommand, MemoryCommand, TraceCommand};
use error::CliError;

/// Runs one parsed command, printing its output on stdout.
pub async fn execute(command: Command) -> Result<u8, CliError> {
    let out = match command {
        Command::Run {
            spec,
            journal,
            record,
            output,
            otlp,
            #[cfg(feature = "temporal")]
            temporal,
            #[cfg(feature = "temporal")]
            task_queue,
        } => {
            let mode = journal.map_or(run::Mode::Live, run::Mode::Durable);
            let options = run_options(&spec, mode, record, &output, otlp);
            #[cfg(feature = "temporal")]
            let answer = match temporal {
                Some(_) if options.otlp.otlp.is_some() => {
                    return Err(CliError::Invalid(
                        "--otlp exports a local run's spans; with --temporal the run is on the workers".into(),
                    ));
                }
                Some(_) if !matches!(options.mode, run::Mode::Live) => {
                    return Err(CliError::Invalid(
                        "--journal makes a local run durable; a run with --temporal is durable on the cluster already".into(),
                    ));
                }
                Some(address) => {
                    temporal_cmd::run(&spec, &address, &task_queue, &options.trace).await?
                }
                None => run::run(&spec, &options).await?,
            };
            #[cfg(not(feature = "temporal"))]
            let answer = run::run(&spec, &options).await?;
            answered(answer, output.json)
        }
        Command::Resume {
            journal,
            spec,
            output,
            otlp,
        } => {
            let options = run_options(&spec, run::Mode::Resume(journal), None, &output, otlp);
            answered(run::run(&spec, &options).await?, output.json)
        }
        Command::Replay {
            journal,
            spec,
            live_after_divergence,
            output,
            otlp,
        } => {
            let mode = run::Mode::Replay {
                journal,
                live_after_divergence,
            };
            let options = run_options(&spec, mode, None, &output, otlp);
            answered(run::run(&spec, &options).await?, output.json)
        }
        #[cfg(feature = "temporal")]
        Command::Worker {
            spec,
            temporal,
            task_queue,
        } => temporal_cmd::worker(&spec, &temporal, &task_queue).await?,
        Command::Tools { spec, json } => tools_cmd::list(&spec, json).await?,
        Command::Serve {
            specs,
            listen,
            store,
            keys,
            grace,
            cors_origins,
        } => {
            if !(grace.is_finite() && (0.0..=3600.0).contains(&grace)) {
                return Err(CliError::Invalid(
                    "--grace is a number of seconds from 0 to 3600".into(),
                ));
            }
            serve_cmd::serve(serve_cmd::ServeOptions {
                specs,
                listen,
                store,
                keys,
                grace: std::time::Duration::from_secs_f64(grace),
                cors_origins,
            })
            .await?
        }
        Command::Chat { spec, trace } => chat_cmd::chat(&spec, trace).await?,
        Command::Keys {
            command: KeysCommand::New { name, file },
        } => serve_cmd::new_key(&name, &file)?,
        Command::Trace { command } => return trace(command),
        Command::Memory { db, command } => match command {
            MemoryCommand::Add {
                content,
                context,
                tags,
                json,
            } => memory_cmd::add(&db, content, context, tags, json).await?,
            MemoryCommand::Search { query, limit, json } => {
                memory_cmd::search(&db, &query, limit, json).await?
            }
            MemoryCommand::List { limit, json } => memory_cmd::list(&db, limit, json).await?,
            MemoryCommand::Forget { id, json } => memory_cmd::forget(&db, &id, json).await?,
            MemoryCommand::Prune {
                max_entries,
                max_age_days,
                json,
            } => memory_cmd::prune(&db, max_entries, max_age_days, json).await?,
            MemoryCommand::Stats { json } => memory_cmd::stats(&db, json).await?,
        },
        Command::Journal { command } => match command {
            JournalCommand::Show { file, json } => journal_cmd::show(&file, json).await?,
            JournalCommand::Diff { left, right, json } => {
                let (text, code) = journal_cmd::diff(&left, &right, json).await?;
                print(&text);
                return Ok(code);
            }
        },
        Command::Completions { shell } => {
            let mut command = <cli::Cli as clap::CommandFactory>::command();
            let mut buffer = Vec::new();
            clap_complete::generate(shell, &mut command, "agent", &mut buffer);
            String::from_utf8_lossy(&buffer).into_owned()
        }
    };
    print(&out);
    Ok(0)
}

/// The options of a run of `spec`: the trace goes to `--trace`, else `<spec name>.trace.jsonl`
/// here.
fn run_options(
    spec: &std::path::Path,
    mode: run::Mode,
    record: Option<std::path::PathBuf>,
    output: &cli::RunOutput,
    otlp: cli::OtlpArgs,
) -> run::RunOptions {
    let trace = output.trace.clone().unwrap_or_else(|| {
        std::path::PathBuf::from(format!("{}.trace.jsonl", agent_spec::file_name(spec)))
    });
    run::RunOptions {
        mode,
        trace,
        record,
        json: output.json,
        stream: !output.quiet,
        otlp,
    }
}

/// What a run prints: the answer (or `{"answer", "trace", "journal"}` with `json`); where the
/// trace went and what the journal answered go to stderr.
fn answered(answer: run::Answer, json: bool) -> String {
    let journal = answer.journal.as_ref().map(|report| {
        serde_json::json!({
            "replayed": report.replayed,
            "live": report.live,
            "diverged": report.diverged.as_ref().map(ToString::to_string),
        })
    });
    if json {
        let mut out = serde_json::json!({"answer": answer.value, "trace": answer.trace});
        if let Some(journal) = journal {
            out["journal"] = journal;
        }
        return format!("{out}\n");
    }
    eprintln!("trace: {}", answer.trace.display());
    if let Some(report) = &answer.journal {
        let left = match &report.diverged {
            Some(divergence) => format!("; left the journal at {divergence}"),
            None => String::new(),
        };
        eprintln!(
            "journal: {} answered from it, {} run live{left}",
            trace_cmd::counted(report.replayed, "effect"),
            report.live
        );
    }
    use std::io::IsTerminal as _;
    // Streamed to the same terminal already: printing it again shows it twice.
    // Redirected, stdout still gets it.
    if answer.streamed
        && answer.value.is_string()
        && std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal()
    {
        String::new()
    } else {
        match answer.value {
            serde_json::Value::String(text) => format!("{text}\n"),
            other => format!("{other:#}\n"),
        }
    }
}

fn trace(command: TraceCommand) -> Result<u8, CliError> {
    let (out, code) = match command {
        TraceCommand::Summary {
            file,
            lenient,
            json,
        } => {
            let summary = trace_cmd::summarize(&trace_cmd::read(&file, lenient)?);
            if json {
                (format!("{}\n", serde_json::json!(summary)), 0)
            } else {
                (trace_cmd::summary_text(&summary), 0)
            }
        }
        TraceCommand::Tree {
            file,
            lenient,
            json,
        } => {
            let tree = trace_cmd::tree(&trace_cmd::read(&file, lenient)?);
            if json {
                (format!("{}\n", serde_json::json!(tree)), 0)
            } else {
                (trace_cmd::tree_text(&tree), 0)
            }
        }
        TraceCommand::Events {
            file,
            lenient,
            types,
            branch,
            since,
            until,
            json,
        } => {
            let trace = trace_cmd::read(&file, lenient)?;
            if let Some(branch) = &branch {
                trace_cmd::known_branch(&trace, branch, &file)?;
            }
            let start = trace_cmd::origin(&trace);
            let filter = trace_cmd::Filter {
                types: match types {
                    Some(list) => trace_cmd::Filter::parse_types(&list)?,
                    None => Vec::new(),
                },
                branch,
                since: since
                    .map(|s| trace_cmd::Filter::parse_time(&s, start))
                    .transpose()?,
                until: until
                    .map(|s| trace_cmd::Filter::parse_time(&s, start))
                    .transpose()?,
            };
            (trace_cmd::events_text(&trace, &filter, json), 0)
        }
        TraceCommand::Diff {
            left,
            right,
            lenient,
            json,
        } => {
            let divergence = trace_cmd::diff(
                &trace_cmd::read(&left, lenient)?,
                &trace_cmd::read(&right, lenient)?,
            );
            let code = u8::from(divergence.is_some());
            if json {
                (format!("{}\n", serde_json::json!(divergence)), code)
            } else {
                (trace_cmd::diff_text(&divergence, &left, &right), code)
            }
        }
        TraceCommand::View {
            file,
            lenient,
            out,
            open,
        } => {
            let trace = trace_cmd::read(&file, lenient)?;
            let path = trace_cmd::view(&trace, &file, out)?;
            let url = trace_cmd::file_url(&path);
            if open {
                trace_cmd::open_in_browser(&url);
            }
            (format!("{url}\n"), 0)
        }
    };
    print(&out);
    Ok(code)
}

/// Prints to stdout; a closed pipe (`agent … | head`) is not an error.
fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}
