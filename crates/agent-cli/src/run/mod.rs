//! `agent run SPEC`: builds the provider, tools, budget and memory a spec describes, runs the
//! agent loop under the parallel interpreter, streams the model's text to the terminal, and
//! writes the JSONL trace whatever happens (success, failure, Ctrl-C).

pub mod spec;
mod telemetry;
pub mod tools;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use agent_agents::{Agent, Toolbox, agent};
use agent_interp_seq::{Config, JsonlSubscriber, Subscriber};
use agent_op::op::{self, Op};
use agent_op::{
    Budget, Delta, Event, EventKind, MicroUsd, Provider, Response, Tag, ToolCall, TraceId,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::error::CliError;
use spec::{ModelSpec, OutputKind, Reply, Spec};

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

/// The tools of a spec, and where each comes from.
pub(crate) struct SpecTools {
    /// Every tool the spec offers.
    pub(crate) toolbox: Toolbox,
    /// Each tool's name and its source: `built-in`, or `mcp:<server>`.
    pub(crate) sources: Vec<(String, String)>,
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
    let logs = logs.join(spec::file_name(spec_path));
    tokio::select! {
        tools = toolbox(spec, base, &logs) => tools,
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
        provider(&spec.model, base, record)?
    };
    let toolbox = started_toolbox(&spec, spec_path, logs).await?.toolbox;
    let memory = match &spec.memory {
        Some(memory) => Some(crate::memory_cmd::open(&base.join(&memory.db), true).await?),
        None => None,
    };
    Ok(Parts {
        spec: std::sync::Arc::new(spec),
        provider,
        toolbox,
        memory,
    })
}

/// The agent program the spec describes.
#[cfg(feature = "temporal")]
pub(crate) fn agent_program(spec: &Spec, toolbox: &Toolbox) -> Result<Op<(), Value>, CliError> {
    program(spec, toolbox)
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
    let telemetry = telemetry::start(&options.otlp, &spec.agent_name(spec_path))?;
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

    let program = program(&spec, &toolbox)?;
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

/// The provider the spec names, wrapped in a recorder with `--record`.
fn provider(
    model: &ModelSpec,
    base: &Path,
    record: Option<&Path>,
) -> Result<Arc<dyn Provider>, CliError> {
    use agent_provider::cassette::ReplayProvider;
    use agent_provider::{OllamaClient, OpenAiClient, ScriptedProvider};

    let inner: Arc<dyn Provider> = match model {
        ModelSpec::Openai {
            base_url,
            api_key_env,
            ..
        } => {
            let mut builder = OpenAiClient::builder();
            if let Some(url) = base_url
                .clone()
                .or_else(|| std::env::var("OPENAI_BASE_URL").ok())
            {
                builder = builder.base_url(url);
            }
            builder = match api_key_env.as_deref() {
                Some("") => builder.no_api_key(),
                Some(var) => builder.api_key_from_env(var),
                None => builder.api_key_from_env("OPENAI_API_KEY"),
            };
            Arc::new(builder.build().map_err(config_error)?)
        }
        ModelSpec::Ollama { host, .. } => {
            let mut builder = OllamaClient::builder();
            if let Some(host) = host.clone().or_else(|| std::env::var("OLLAMA_HOST").ok()) {
                builder = builder.host(host);
            }
            Arc::new(builder.build().map_err(config_error)?)
        }
        ModelSpec::Cassette { cassette, .. } => {
            let path = base.join(cassette);
            Arc::new(ReplayProvider::open(&path).map_err(|e| {
                CliError::Invalid(format!("{}: not a readable cassette: {e}", path.display()))
            })?)
        }
        ModelSpec::Scripted { replies, .. } => {
            let responses = replies
                .iter()
                .enumerate()
                .map(|(i, reply)| scripted(i, reply))
                .collect::<Vec<_>>();
            Arc::new(ScriptedProvider::new(responses))
        }
    };
    match record {
        None => Ok(inner),
        Some(path) => Ok(Arc::new(
            agent_provider::cassette::RecordingProvider::create(inner, path).map_err(|e| {
                CliError::Invalid(format!("{}: cannot record to it: {e}", path.display()))
            })?,
        )),
    }
}

fn config_error(error: agent_provider::ConfigError) -> CliError {
    match error {
        agent_provider::ConfigError::MissingApiKey { var } => CliError::Environment(format!(
            "the API key variable `{var}` is not set (set it, or `api_key_env = \"\"` for a server without keys)"
        )),
        other => CliError::Invalid(format!("the model's settings are wrong: {other}")),
    }
}

fn scripted(i: usize, reply: &Reply) -> Response {
    match reply {
        Reply::Text(text) => Response::text(text.clone()),
        Reply::Calls { calls } => {
            let mut response = Response::text("");
            response.tool_calls = calls
                .iter()
                .enumerate()
                .map(|(j, call)| ToolCall {
                    id: format!("call_{i}_{j}"),
                    name: call.tool.clone(),
                    arguments: serde_json::to_value(&call.args).unwrap_or(Value::Null),
                })
                .collect();
            response
        }
    }
}

/// The directory a trace is written in (its MCP servers' logs go beside it).
fn trace_dir(trace: &Path) -> &Path {
    match trace.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The spec's tools as one toolbox. MCP servers' stderr goes to the spec's `stderr_log`, else
/// to `<logs>.<server>.mcp.log`.
async fn toolbox(spec: &Spec, base: &Path, logs: &Path) -> Result<SpecTools, CliError> {
    let mut toolbox = Toolbox::new("spec");
    let mut sources = Vec::new();
    if let Some(read) = &spec.tools.read_file {
        let root = base.join(&read.root);
        let tool = tools::read_file(&root).map_err(|e| {
            CliError::Invalid(format!(
                "tools.read_file.root: {} is not a readable directory: {e}",
                root.display()
            ))
        })?;
        toolbox = toolbox.with(tool);
        sources.push(("read_file".to_owned(), "built-in".to_owned()));
    }
    if let Some(http) = &spec.tools.http_get {
        let tool = tools::http_get(&http.allow)
            .map_err(|e| CliError::Environment(format!("no HTTP client: {e}")))?;
        toolbox = toolbox.with(tool);
        sources.push(("http_get".to_owned(), "built-in".to_owned()));
    }
    for mcp in &spec.tools.mcp {
        let log = match &mcp.stderr_log {
            Some(path) => base.join(path),
            None => {
                let mut name = logs.as_os_str().to_owned();
                name.push(format!(".{}.mcp.log", mcp.name));
                PathBuf::from(name)
            }
        };
        let mut command = agent_agents::McpCommand::new(mcp.name.clone(), &mcp.command)
            .args(&mcp.args)
            .stderr_log(&log);
        if let Some(secs) = mcp.handshake_timeout_secs {
            command = command.handshake_timeout(Duration::from_secs_f64(secs));
        }
        if let Some(secs) = mcp.timeout_secs {
            command = command.timeout(Duration::from_secs_f64(secs));
        }
        // MCP errors name their server already.
        let server = command.spawn().await.map_err(|e| mcp_failed(e, &log))?;
        let capabilities: Vec<&str> = mcp.capabilities.iter().map(String::as_str).collect();
        let served = server
            .toolbox(&capabilities)
            .await
            .map_err(|e| mcp_failed(e, &log))?;
        let set = served.tool_set();
        for name in served.names() {
            // Two definitions of one name would be refused by the model's API, or worse,
            // one would silently shadow the other.
            if toolbox.names().any(|n| n == name) {
                return Err(CliError::Invalid(format!(
                    "two tools are named `{name}` (MCP server `{}` and another source)",
                    mcp.name
                )));
            }
            if let Some(tool) = set.get(name) {
                toolbox = toolbox.with_tool(tool.clone(), &capabilities);
                sources.push((name.to_owned(), format!("mcp:{}", mcp.name)));
            }
        }
    }
    Ok(SpecTools { toolbox, sources })
}

/// An MCP server that would not start or list its tools, with the end of its stderr log
/// (where servers say why).
fn mcp_failed(error: agent_agents::McpError, log: &Path) -> CliError {
    let said = std::fs::read(log)
        .map(|bytes| {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            lines[lines.len().saturating_sub(5)..].join("\n    ")
        })
        .unwrap_or_default();
    match error {
        error @ (agent_agents::McpError::Spawn { .. } | agent_agents::McpError::Log { .. }) => {
            CliError::Environment(error.to_string())
        }
        error if said.is_empty() => CliError::Environment(format!(
            "{error} (its stderr, empty, is in {})",
            log.display()
        )),
        error => CliError::Environment(format!(
            "{error}; the end of its stderr ({}):\n    {said}",
            log.display()
        )),
    }
}

/// Builds the agent's program from what was recalled from memory.
type MakeAgent = Arc<dyn Fn(Vec<String>) -> Op<(), Value> + Send + Sync>;

/// The agent loop the spec describes, answering a `T`.
fn configured<T: agent_agents::LlmOutput>(spec: &Spec, toolbox: &Toolbox) -> Agent<(), T> {
    let mut agent = agent::<(), T>(
        spec.model.name().to_owned(),
        toolbox,
        spec.agent.goal.clone(),
    )
    .max_turns(spec.agent.max_turns.unwrap_or(8));
    if !spec.agent.system.is_empty() {
        agent = agent.instructions(spec.agent.system.clone());
    }
    for section in &spec.agent.context {
        agent = agent.context(section.clone());
    }
    agent
}

/// The program: recall from memory (if any), the agent loop under the budget, remember the
/// answer. A text answer is a JSON string; a JSON answer must satisfy the spec's schema
/// (checked, and refusals given back to the model, up to three rounds).
fn program(spec: &Spec, toolbox: &Toolbox) -> Result<Op<(), Value>, CliError> {
    let goal = spec.agent.goal.clone();
    let make: MakeAgent = match (&spec.output.kind, &spec.output.schema) {
        (OutputKind::Json, Some(schema)) => {
            let schema = serde_json::to_value(schema).unwrap_or(Value::Null);
            let validator = Arc::new(jsonschema::validator_for(&schema).map_err(|e| {
                CliError::Invalid(format!("output.schema is not a valid JSON schema: {e}"))
            })?);
            let base = configured::<Value>(spec, toolbox).context(format!(
                "Answer with JSON that satisfies this JSON schema: {schema}"
            ));
            Arc::new(move |memories| {
                let validator = validator.clone();
                let mut agent = base.clone();
                for memory in memories {
                    agent = agent.context(format!("From memory: {memory}"));
                }
                agent
                    .verified(3, move |answer: &Value| {
                        let errors: Vec<String> = validator
                            .iter_errors(answer)
                            .map(|e| format!("{e} at {}", e.instance_path()))
                            .collect();
                        op::pure(if errors.is_empty() {
                            Ok(())
                        } else {
                            Err(format!(
                                "the answer does not satisfy the schema: {}",
                                errors.join("; ")
                            ))
                        })
                    })
                    .run()
                    .and_then(|answer| answered(answer.map_err(|e| e.to_string())))
            })
        }
        _ => {
            let base = configured::<String>(spec, toolbox);
            Arc::new(move |memories| {
                let mut agent = base.clone();
                for memory in memories {
                    agent = agent.context(format!("From memory: {memory}"));
                }
                agent.run().and_then(|answer| {
                    answered(answer.map(Value::String).map_err(|e| e.to_string()))
                })
            })
        }
    };
    let budget = budget(&spec.budget);
    let memory = spec.memory.is_some();
    let recalled: Op<(), Vec<String>> = if memory {
        op::recall(goal.clone(), 5).map(|entries| entries.into_iter().map(|e| e.content).collect())
    } else {
        op::pure(Vec::new())
    };
    Ok(recalled.and_then(move |memories| {
        let run = op::limit(budget, make(memories)).and_then(|limited| match limited {
            Ok(answer) => op::pure(answer),
            Err(spent) => op::fail(format!("the budget ran out: {spent}")),
        });
        run.and_then(move |answer| {
            if !memory {
                return op::pure(answer);
            }
            let content = match &answer {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            op::remember(content, goal, vec![Tag("answer".into())]).map(move |_| answer)
        })
    }))
}

/// The agent's answer, or its failure as the run's error (so the trace's `run_end`, the
/// summary and the exit code all say the run failed).
fn answered(answer: Result<Value, String>) -> Op<(), Value> {
    match answer {
        Ok(value) => op::pure(value),
        Err(failure) => op::fail(failure),
    }
}

fn budget(spec: &spec::BudgetSpec) -> Budget {
    let mut budget = Budget::new();
    if let Some(calls) = spec.calls {
        budget = budget.calls(calls);
    }
    if let Some(tokens) = spec.tokens {
        budget = budget.tokens(tokens);
    }
    if let Some(usd) = spec.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
        budget = budget.cost(MicroUsd((usd * 1e6) as u64));
    }
    if let Some(secs) = spec.seconds.filter(|s| s.is_finite() && *s > 0.0) {
        budget = budget.time(Duration::from_secs_f64(secs.min(1e9)));
    }
    budget
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
