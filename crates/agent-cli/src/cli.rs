//! The command line, as clap reads it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Run LLM agents from a spec, and inspect their traces and memories.
///
/// Exit codes: 0 success; 1 the run failed (a model server that cannot be reached fails the
/// run), or `trace diff` or `journal diff` found a difference; 2 the command line could not
/// be parsed; 3 invalid input (a file, a spec, a flag value); 4 the environment lacks
/// something (an API key variable, an MCP server that does not start); 130 aborted by Ctrl-C
/// (or SIGTERM, SIGHUP).
#[derive(Debug, Parser)]
#[command(name = "agent", version, about, long_about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent a TOML spec describes; writes its JSONL trace.
    Run {
        /// The spec.
        spec: PathBuf,
        /// Run durably: commit every model reply, tool result and memory answer to this
        /// journal (SQLite; a `.jsonl` name for JSON Lines) before the agent sees it, so
        /// `agent resume` continues after a crash and `agent replay` re-runs it for free.
        #[arg(long, value_name = "FILE")]
        journal: Option<PathBuf>,
        /// Record the model's replies to this cassette, to replay the run offline.
        #[arg(long)]
        record: Option<PathBuf>,
        /// Where the answer and trace go.
        #[command(flatten)]
        output: RunOutput,
        /// The OpenTelemetry export of the run.
        #[command(flatten)]
        otlp: OtlpArgs,
        /// Run on the Temporal cluster at this address (`host:port`) instead of here; an
        /// `agent worker` of the same spec must serve the task queue.
        #[cfg(feature = "temporal")]
        #[arg(long, value_name = "ADDRESS")]
        temporal: Option<String>,
        /// The Temporal task queue (with `--temporal`).
        #[cfg(feature = "temporal")]
        #[arg(long, default_value = "agents")]
        task_queue: String,
    },
    /// Continue the durable run of a journal (`agent run --journal`) after a crash or Ctrl-C:
    /// what it committed is replayed with no calls made, then it goes on live, committing.
    Resume {
        /// The journal.
        journal: PathBuf,
        /// The spec it was run from (unchanged: a changed request is a divergence).
        spec: PathBuf,
        /// Where the answer and trace go.
        #[command(flatten)]
        output: RunOutput,
        /// The OpenTelemetry export of the run.
        #[command(flatten)]
        otlp: OtlpArgs,
    },
    /// Re-run a journal's run with no model or tool calls: the same answer and trace. A spec
    /// that asks something the journal did not record stops with the divergence (exit 1).
    Replay {
        /// The journal.
        journal: PathBuf,
        /// The spec to run (the recorded one, or a changed one with
        /// `--live-after-divergence`).
        spec: PathBuf,
        /// Answer from the journal while the run asks what it recorded, then run live (for
        /// iterating on a spec without paying for the unchanged start). The journal is not
        /// changed.
        #[arg(long)]
        live_after_divergence: bool,
        /// Where the answer and trace go.
        #[command(flatten)]
        output: RunOutput,
        /// The OpenTelemetry export of the replayed run (its spans, as the run's own).
        #[command(flatten)]
        otlp: OtlpArgs,
    },
    /// Serve a spec's agent, and the model, tool and memory calls of its task queue, as a
    /// Temporal worker (until Ctrl-C).
    #[cfg(feature = "temporal")]
    Worker {
        /// The spec.
        spec: PathBuf,
        /// The Temporal server (`host:port`).
        #[arg(long, value_name = "ADDRESS")]
        temporal: String,
        /// The task queue to serve.
        #[arg(long, default_value = "agents")]
        task_queue: String,
    },
    /// Serve specs' agents over HTTP until Ctrl-C or SIGTERM: the Agent Protocol's runs,
    /// threads and event streams (what LangGraph's SDK calls), OpenAI's chat API
    /// (`/v1/chat/completions`, `/v1/models`: `model` names an agent), each run's trace.
    /// Runs are durable: started again on the same store, the server resumes the runs it
    /// left unfinished. See docs/SERVE.md.
    Serve {
        /// The specs; each agent is served under its `[agent] name` (else the file's name).
        #[arg(required = true)]
        specs: Vec<PathBuf>,
        /// The address to listen on. Any address but a loopback one needs --keys.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// The SQLite store of runs, threads, their events and journals.
        #[arg(long, value_name = "FILE", default_value = "agent-serve.db")]
        store: PathBuf,
        /// Accept only the API keys of this file (`agent keys new` makes them); every route
        /// but /healthz and /readyz then needs `Authorization: Bearer KEY` or `X-Api-Key`.
        #[arg(long, value_name = "FILE")]
        keys: Option<PathBuf>,
        /// Seconds running runs may go on after SIGTERM before they are stopped at their
        /// next commit (and resumed by the next server).
        #[arg(long, value_name = "SECS", default_value_t = 10.0)]
        grace: f64,
        /// Let pages from this origin (`https://app.example.com`, or `*` for any) call the
        /// API from a browser; repeat for more. Without it no route sends CORS headers (the
        /// chat page at / is same-origin and needs none).
        #[arg(long = "cors-origin", value_name = "ORIGIN")]
        cors_origins: Vec<String>,
    },
    /// Chat with a spec's agent in the terminal (in-process, over the same run model as
    /// `agent serve`): each line a turn, the reply streamed, the conversation remembered.
    /// `/reset` starts over, `/trace` writes the last turn's trace, `/cost` shows the spend;
    /// Ctrl-C stops a turn, Ctrl-D or `/exit` ends the chat.
    Chat {
        /// The spec.
        spec: PathBuf,
        /// Where `/trace` writes (default `<agent>.chat.trace.jsonl`).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
    },
    /// API keys for `agent serve --keys`.
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// List every tool a spec offers (built-in and from its MCP servers, which are started
    /// for it): capabilities, description, and the JSON schema of the arguments.
    Tools {
        /// The spec.
        spec: PathBuf,
        /// Print one JSON object per tool, per line.
        #[arg(long)]
        json: bool,
    },
    /// Inspect a JSONL trace.
    Trace {
        /// How.
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// Inspect the journal of a durable run (SQLite or JSON Lines).
    Journal {
        /// How.
        #[command(subcommand)]
        command: JournalCommand,
    },
    /// The SQLite memory from the shell.
    Memory {
        /// The database file.
        #[arg(long, global = true, default_value = "memory.db")]
        db: PathBuf,
        /// What to do.
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Where a run's answer and trace go.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOutput {
    /// Where to write the trace (default: `<spec name>.trace.jsonl` here).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Print `{"answer": …, "trace": …}` instead of the answer alone.
    #[arg(long)]
    pub json: bool,
    /// Do not stream the model's text to stderr.
    ///
    /// Without it the model's text streams to stderr as it arrives and stdout gets the
    /// answer alone, so `agent run SPEC > answer.json` keeps just the answer and
    /// `2>/dev/null` shows just the answer. When both show on one terminal, the answer is
    /// shown once: a text answer as it streams, a JSON answer on stdout (its text streams on
    /// the progress line, which is cleared at the end).
    #[arg(long)]
    pub quiet: bool,
}

/// Exporting a run's spans (GenAI semantic conventions) to an OpenTelemetry backend.
#[derive(Debug, Clone, clap::Args)]
pub struct OtlpArgs {
    /// Export spans over OTLP: to ENDPOINT (`--otlp=http://127.0.0.1:4318`), else to
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, else to the protocol's local default. Export is also on
    /// whenever `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.
    /// The protocol comes from `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, or `grpc`).
    #[arg(
        long,
        value_name = "ENDPOINT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub otlp: Option<String>,
    /// Put prompts, replies and tool arguments and results on the exported spans (they stay
    /// off the wire unless asked for).
    #[arg(long)]
    pub otlp_content: bool,
}

/// `agent trace …`.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Totals: events, branches, tokens, cost, time, calls per model and tool.
    Summary {
        /// The trace.
        file: PathBuf,
        /// Read the readable prefix of a corrupt file (warning about the bad line).
        #[arg(long)]
        lenient: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The branch tree with timings.
    Tree {
        /// The trace.
        file: PathBuf,
        /// Read the readable prefix of a corrupt file (warning about the bad line).
        #[arg(long)]
        lenient: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The events, filtered.
    Events {
        /// The trace.
        file: PathBuf,
        /// Read the readable prefix of a corrupt file (warning about the bad line).
        #[arg(long)]
        lenient: bool,
        /// Only these event types (comma-separated: `infer_end,tool_call`).
        #[arg(long = "type")]
        types: Option<String>,
        /// Only this branch (and its branches).
        #[arg(long)]
        branch: Option<String>,
        /// Only events at or after: an RFC 3339 time, or seconds after the trace's start.
        #[arg(long)]
        since: Option<String>,
        /// Only events at or before: an RFC 3339 time, or seconds after the trace's start.
        #[arg(long)]
        until: Option<String>,
        /// Print the trace's JSONL lines.
        #[arg(long)]
        json: bool,
    },
    /// The first divergence between two traces (canonical events, timings left out).
    Diff {
        /// The first trace.
        left: PathBuf,
        /// The second trace.
        right: PathBuf,
        /// Read the readable prefix of a corrupt file (warning about the bad line).
        #[arg(long)]
        lenient: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the HTML viewer and print its `file://` URL.
    View {
        /// The trace.
        file: PathBuf,
        /// Read the readable prefix of a corrupt file (warning about the bad line).
        #[arg(long)]
        lenient: bool,
        /// Where to write it (default: beside the trace, `.html`).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Open it in the browser as well.
        #[arg(long)]
        open: bool,
    },
}

/// `agent journal …`.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// The run's id, then every committed entry: position, kind, fingerprint, the request
    /// and its result.
    Show {
        /// The journal (a SQLite database or a JSON Lines file).
        file: PathBuf,
        /// Print the entries as JSON Lines.
        #[arg(long)]
        json: bool,
    },
    /// The first position where two journals asked different questions (exit code 1),
    /// with the readable diff a replay's divergence shows.
    Diff {
        /// The first journal.
        left: PathBuf,
        /// The second journal.
        right: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `agent memory …`.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Store a memory (creates the database if missing).
    Add {
        /// What to remember.
        content: String,
        /// How and why it was learned.
        #[arg(long, default_value = "")]
        context: String,
        /// Labels (repeat for several).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The memories most relevant to a query, with their scores.
    Search {
        /// The query.
        query: String,
        /// How many.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// The newest memories.
    List {
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Delete a memory by id.
    Forget {
        /// Its id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove memories by count or age.
    Prune {
        /// Keep at most this many (the least used go first).
        #[arg(long)]
        max_entries: Option<u64>,
        /// Remove memories not used (stored or recalled) for this many days.
        #[arg(long)]
        max_age_days: Option<u64>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Counts, dimensions, size on disk.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `agent keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a key: its hash is appended to the file, the key printed once (keep it: only
    /// its hash is stored).
    New {
        /// The key's name (shown in logs and per-key limits).
        name: String,
        /// The keys file (created if missing).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
    },
}
