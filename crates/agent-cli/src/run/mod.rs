//! `agent run SPEC`: builds the provider, tools, budget and memory a spec describes, runs the
//! agent loop under the parallel interpreter, streams the model's text to the terminal, and
//! writes the JSONL trace whatever happens (success, failure, Ctrl-C).

mod telemetry;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use agent_agents::Toolbox;
use agent_interp_seq::{Config, JsonlSubscriber, Subscriber};
use agent_op::{Delta, Event, EventKind, Provider, Response, TraceId};
use agent_spec::{OutputKind, Spec, SpecTools};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::error::CliError;

/// How a run uses a journal.
#[derive(Clone, Debug, Default)]
pub enum Mode {
    /// No journal.
    #[default]
    Live,
    /// Durably: every nondeterministic result committed to a new journal at this path
    /// before the agent sees it.
    Durable(PathBuf),
    /// Continuing the durable run of the journal at this path.
    Resume(PathBuf),
    /// Answered from the journal at this path, with no model or tool calls; with
    /// `live_after_divergence`, live from the first request it did not record.
    Replay {
        /// The journal.
        journal: PathBuf,
        /// Go on live where the run leaves the journal, instead of stopping.
        live_after_divergence: bool,
    },
}

/// What `agent run` was asked for besides the spec.
#[derive(Debug)]
pub struct RunOptions {
    /// Whether and how the run is journaled.
    pub mode: Mode,
    /// Where the trace goes.
    pub trace: PathBuf,
    /// Record the model's replies to this cassette (to replay the run offline).
    pub record: Option<PathBuf>,
    /// Print the answer as JSON (`{"answer": …, "trace": …}`).
    pub json: bool,
    /// Stream the model's text to stderr as it arrives.
    pub stream: bool,
    /// Where the run's spans are exported, if anywhere.
    pub otlp: crate::cli::OtlpArgs,
}

/// The answer of a successful run.
#[derive(Debug)]
pub struct Answer {
    /// The agent's answer: text, or the JSON value.
    pub value: Value,
    /// Where the trace was written.
    pub trace: PathBuf,
    /// Whether the model's text was streamed to stderr as it came.
    pub streamed: bool,
    /// For a journaled run: what it took from the journal and what it ran live.
    pub journal: Option<agent_interp_seq::JournalReport>,
}

/// What a spec builds besides its program.
pub(crate) struct Parts {
    pub(crate) spec: std::sync::Arc<Spec>,
    pub(crate) provider: Arc<dyn Provider>,
    pub(crate) toolbox: Toolbox,
    pub(crate) memory: Option<agent_memory::SqliteBackend>,
}

/// Waits for a signal that stops a command, and names it: Ctrl-C (SIGINT) and, on Unix,
/// SIGTERM (what `kill`, `timeout` and service managers send) and SIGHUP (its terminal went
/// away). Each stops a command as Ctrl-C does: the MCP servers started so far are killed (they
/// run in process groups of their own, which no signal to this process reaches), and a run
/// writes its trace. A signal that cannot be watched never arrives.
pub(crate) async fn stop_signal() -> &'static str {
    async fn ctrl_c() {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            return tokio::select! {
                () = ctrl_c() => "Ctrl-C",
                _ = term.recv() => "SIGTERM",
                _ = hup.recv() => "SIGHUP",
            };
        }
    }
    ctrl_c().await;
    "Ctrl-C"
}

/// Builds the toolbox of `spec` (read from `spec_path`), starting its MCP servers (their
/// stderr logged in `logs` unless the spec says where).
///
/// A Ctrl-C (or another [`stop_signal`]) while MCP servers start stops here, with every
/// server started so far killed.
pub(crate) async fn started_toolbox(
    spec: &Spec,
    spec_path: &Path,
    logs: &Path,
) -> Result<SpecTools, CliError> {
    let base = spec_path.parent().unwrap_or(Path::new("."));
    let logs = logs.join(agent_spec::file_name(spec_path));
    tokio::select! {
        tools = agent_spec::toolbox(spec, base, &logs) => Ok(tools?),
        // Dropping the unfinished toolbox future kills the servers it started.
        by = stop_signal() => Err(CliError::Interrupted(by)),
    }
}

/// Reads the spec at `spec_path` and builds its provider (recording to `record`), toolbox
/// (MCP servers' stderr logged in `logs` unless the spec says where) and memory.
///
/// With `offline` (a replay, which calls no model) the spec's model server is not set up:
/// replaying needs neither it nor its API key.
pub(crate) async fn parts(
    spec_path: &Path,
    record: Option<&Path>,
    logs: &Path,
    offline: bool,
) -> Result<Parts, CliError> {
    let spec = Spec::read(spec_path)?;
    let base = spec_path.parent().unwrap_or(Path::new("."));
    let provider: Arc<dyn Provider> = if offline {
        Arc::new(agent_provider::ScriptedProvider::new(Vec::<Response>::new()))
    } else {
        agent_spec::provider(&spec.model, base, record)?
    };
    let toolbox = started_toolbox(&spec, spec_path, logs).await?.toolbox;
    let memory = agent_spec::memory(&spec, base).await?;
    Ok(Parts {
        spec: std::sync::Arc::new(spec),
        provider,
        toolbox,
        memory,
    })
}

/// The agent program the spec describes.
#[cfg(feature = "temporal")]
pub(crate) fn agent_program(
    spec: &Spec,
    toolbox: &Toolbox,
) -> Result<agent_op::Op<(), Value>, CliError> {
    Ok(agent_spec::program(spec, toolbox)?)
}

/// Runs the agent `spec_path` describes.
pub async fn run(spec_path: &Path, options: &RunOptions) -> Result<Answer, CliError> {
    let Parts {
        spec,
        provider,
        toolbox,
        memory,
    } = parts(
        spec_path,
        options.record.as_deref(),
        trace_dir(&options.trace),
        matches!(
            options.mode,
            Mode::Replay {
                live_after_divergence: false,
                ..
            }
        ),
    )
    .await?;
    let journal = match &options.mode {
        Mode::Live => None,
        Mode::Durable(path) => {
            let journal = crate::journal_cmd::open_for_run(path, false).await?;
            let held = journal
                .entries()
                .await
                .map_err(|source| CliError::Journal {
                    path: path.clone(),
                    source,
                })?;
            if !held.is_empty() {
                return Err(CliError::Invalid(format!(
                    "{}: already holds a run ({} entries): `agent resume {0} SPEC` continues it; give a new file for a new run",
                    path.display(),
                    held.len()
                )));
            }
            Some(journal)
        }
        Mode::Resume(path) | Mode::Replay { journal: path, .. } => {
            Some(crate::journal_cmd::open_for_run(path, true).await?)
        }
    };

    let mut config = Config::new()
        .shared_provider(provider)
        .tools(toolbox.tool_set())
        .trace_id(TraceId::random());
    if let Some(name) = &spec.agent.name {
        config = config.name(name.clone());
    }
    let telemetry = telemetry::start(&options.otlp, &spec.name())?;
    config = config
        .goal(spec.agent.goal.clone())
        .export_content(options.otlp.otlp_content);
    if let Some(memory) = memory {
        config = config.memory(memory);
    }
    // Streamed to the file as the run goes (a crash keeps what happened), replaced by the
    // complete trace at the end.
    let _ = std::fs::remove_file(&options.trace);
    let (streamed, _) = JsonlSubscriber::open(&options.trace).map_err(|e| match e {
        agent_op::trace::jsonl::JsonlError::Io(source) => CliError::Io {
            path: options.trace.clone(),
            action: "writing the trace",
            source,
        },
        source => CliError::Trace {
            path: options.trace.clone(),
            source,
        },
    })?;
    let progress = Arc::new(Progress::new(Stream::choose(
        options.stream,
        &spec.output.kind,
    )));
    config = config
        .subscribe(streamed)
        .subscribe(ProgressSubscriber(progress.clone()));

    let program = agent_spec::program(&spec, &toolbox)?;
    let abort = config.abort_handle().clone();
    // Which signal stopped the run, if one did.
    let stopped = Arc::new(std::sync::OnceLock::<&'static str>::new());
    let watcher = {
        let stopped = stopped.clone();
        tokio::spawn(async move {
            let _ = stopped.set(stop_signal().await);
            abort.cancel();
            // A second one while the run winds down stops at once.
            let again = stop_signal().await;
            eprintln!("aborted again ({again}): exiting without waiting");
            // `exit` runs no destructors: the MCP servers are killed here.
            agent_agents::kill_spawned_servers();
            std::process::exit(130);
        })
    };
    let outcome = match (&options.mode, journal) {
        (Mode::Durable(_), Some(journal)) => {
            agent_interp_par::run_durable(&config, journal, (), program).await
        }
        (Mode::Resume(_), Some(journal)) => {
            agent_interp_par::resume(&config, journal, (), program).await
        }
        (
            Mode::Replay {
                live_after_divergence: false,
                ..
            },
            Some(journal),
        ) => agent_interp_par::replay(&config, &*journal, (), program).await,
        (Mode::Replay { .. }, Some(journal)) => {
            agent_interp_par::replay_then_live(&config, &*journal, None, (), program).await
        }
        _ => agent_interp_par::run(&config, (), program).await,
    };
    watcher.abort();
    progress.finish();
    telemetry::finish(telemetry);

    let trace = match &outcome {
        Ok(done) => &done.trace,
        Err(error) => &error.trace,
    };
    agent_op::trace::jsonl::write_trace_file(&options.trace, trace).map_err(|source| {
        CliError::Io {
            path: options.trace.clone(),
            action: "writing the trace",
            source,
        }
    })?;
    match outcome {
        Ok(done) => Ok(Answer {
            value: done.value,
            trace: options.trace.clone(),
            streamed: progress.streamed.load(Ordering::Relaxed),
            journal: done.journal,
        }),
        Err(_) if stopped.get().is_some() => Err(CliError::Aborted {
            trace: options.trace.clone(),
            by: stopped.get().copied().unwrap_or("Ctrl-C"),
        }),
        Err(error) => Err(CliError::Run(format!(
            "{} (trace: {})",
            error.kind,
            options.trace.display()
        ))),
    }
}

/// The directory a trace is written in (its MCP servers' logs go beside it).
fn trace_dir(trace: &Path) -> &Path {
    match trace.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Where the model's text goes while a run streams it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Stream {
    /// Nowhere (`--quiet`).
    Off,
    /// Onto stderr, where it stays.
    Full,
    /// Onto the progress line, which is cleared at the end: a typed answer, printed on
    /// stdout, would otherwise be on the screen twice (once as the streamed JSON) when
    /// stdout and stderr are one terminal.
    Transient,
}

impl Stream {
    /// How a run streams: `wanted` unless `--quiet`; on the progress line when the answer
    /// is typed JSON and stdout and stderr both show on a terminal.
    fn choose(wanted: bool, output: &OutputKind) -> Stream {
        use std::io::IsTerminal as _;
        if !wanted {
            Stream::Off
        } else if *output == OutputKind::Json
            && std::io::stdout().is_terminal()
            && std::io::stderr().is_terminal()
        {
            Stream::Transient
        } else {
            Stream::Full
        }
    }
}

/// The most characters of streamed text the progress line shows.
const LINE_TAIL: usize = 60;

/// A progress line on stderr (drawn only on a terminal) and the model's text as it arrives.
struct Progress {
    bar: ProgressBar,
    stream: Stream,
    calls: AtomicU64,
    tools: AtomicU64,
    branches: AtomicU64,
    /// Whether text was streamed onto stderr to stay.
    streamed: std::sync::atomic::AtomicBool,
    /// The end of the text streamed so far, for [`Stream::Transient`].
    tail: std::sync::Mutex<String>,
}

impl Progress {
    fn new(stream: Stream) -> Progress {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress {
            bar,
            stream,
            calls: AtomicU64::new(0),
            tools: AtomicU64::new(0),
            branches: AtomicU64::new(0),
            streamed: std::sync::atomic::AtomicBool::new(false),
            tail: std::sync::Mutex::default(),
        }
    }

    fn update(&self) {
        use crate::trace_cmd::counted;
        let tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        let text = if tail.is_empty() {
            String::new()
        } else {
            format!(" · {tail}")
        };
        self.bar.set_message(format!(
            "{} · {} · {} running{text}",
            counted(self.calls.load(Ordering::Relaxed), "model call"),
            counted(self.tools.load(Ordering::Relaxed), "tool call"),
            counted(self.branches.load(Ordering::Relaxed), "branch"),
        ));
    }

    /// Keeps the last [`LINE_TAIL`] characters of the streamed text, on one line.
    fn follow(&self, text: &str) {
        {
            let mut tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
            tail.extend(
                text.chars()
                    .map(|c| if c.is_whitespace() { ' ' } else { c }),
            );
            let extra = tail.chars().count().saturating_sub(LINE_TAIL);
            if extra > 0 {
                let cut = tail.char_indices().nth(extra).map_or(0, |(i, _)| i);
                tail.drain(..cut);
            }
        }
        self.update();
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
        if self.streamed.load(Ordering::Relaxed) {
            eprintln!();
        }
    }
}

struct ProgressSubscriber(Arc<Progress>);

impl Subscriber for ProgressSubscriber {
    fn on_event(&self, _trace_id: &TraceId, event: &Event) {
        let p = &self.0;
        match &event.kind {
            EventKind::InferStart(_) => {
                p.calls.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::ToolCall(_) => {
                p.tools.fetch_add(1, Ordering::Relaxed);
            }
            EventKind::Fork(fork) => {
                p.branches
                    .fetch_add(u64::from(fork.branch_count), Ordering::Relaxed);
            }
            EventKind::Join(join) => {
                let n = join.branch_ids.len() as u64;
                let _ = p
                    .branches
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                        Some(b.saturating_sub(n))
                    });
            }
            _ => return,
        }
        p.update();
    }

    fn wants_deltas(&self) -> bool {
        self.0.stream != Stream::Off
    }

    fn on_delta(&self, _trace_id: &TraceId, delta: &Delta) {
        let Delta::Text(text) = delta else {
            return;
        };
        match self.0.stream {
            Stream::Off => {}
            Stream::Full => {
                self.0.streamed.store(true, Ordering::Relaxed);
                self.0.bar.suspend(|| eprint!("{text}"));
            }
            Stream::Transient => self.0.follow(text),
        }
    }
}
