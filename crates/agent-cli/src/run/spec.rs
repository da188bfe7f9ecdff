//! The TOML spec `agent run` reads. Every table refuses keys it does not know, naming the
//! key and the ones it allows. `docs/SPEC.md` is its reference, checked against these types
//! (through their JSON schema) by a test.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::CliError;

/// An agent described in a file.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// The model and where it is served.
    pub model: ModelSpec,
    /// What the agent is asked and told.
    pub agent: AgentSpec,
    /// The tools it may use.
    #[serde(default)]
    pub tools: ToolsSpec,
    /// Limits on the run.
    #[serde(default)]
    pub budget: BudgetSpec,
    /// A SQLite memory the run may remember into and recall from.
    pub memory: Option<MemorySpec>,
    /// What the answer must be.
    #[serde(default)]
    pub output: OutputSpec,
}

/// Where the model is served.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case", tag = "provider")]
pub enum ModelSpec {
    /// An OpenAI-compatible server.
    Openai {
        /// The model.
        name: String,
        /// The API root (default: `OPENAI_BASE_URL`, else the OpenAI API).
        base_url: Option<String>,
        /// The variable holding the API key (default `OPENAI_API_KEY`); `""` for none.
        api_key_env: Option<String>,
    },
    /// An Ollama server.
    Ollama {
        /// The model.
        name: String,
        /// The server (default: `OLLAMA_HOST`, else `127.0.0.1:11434`).
        host: Option<String>,
    },
    /// A recorded run: replies replayed from a cassette, no network.
    Cassette {
        /// The model.
        name: String,
        /// The cassette file, relative to the spec.
        cassette: PathBuf,
    },
    /// Replies written in the spec, in order (for trying a spec offline, and for recording
    /// cassettes with `--record`).
    Scripted {
        /// The model.
        name: String,
        /// The replies.
        replies: Vec<Reply>,
    },
}

impl ModelSpec {
    /// The model's name.
    pub fn name(&self) -> &str {
        match self {
            ModelSpec::Openai { name, .. }
            | ModelSpec::Ollama { name, .. }
            | ModelSpec::Cassette { name, .. }
            | ModelSpec::Scripted { name, .. } => name,
        }
    }
}

/// One scripted reply: text, or tool calls.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Reply {
    /// A text reply.
    Text(String),
    /// A reply calling tools.
    Calls {
        /// The calls, in order.
        calls: Vec<ScriptedCall>,
    },
}

/// One scripted tool call.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    #[serde(default)]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub args: toml::Table,
}

/// What the agent is asked and told.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Its name (the run's `invoke_agent` span).
    pub name: Option<String>,
    /// The system prompt.
    #[serde(default)]
    pub system: String,
    /// What it must do.
    pub goal: String,
    /// Prompt sections shown with the goal.
    #[serde(default)]
    pub context: Vec<String>,
    /// At most this many model calls (default 8).
    pub max_turns: Option<u32>,
}

/// The tools an agent may use.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsSpec {
    /// `read_file` under a root directory.
    pub read_file: Option<ReadFileSpec>,
    /// `http_get` to allowed hosts.
    pub http_get: Option<HttpGetSpec>,
    /// MCP servers whose tools are offered.
    #[serde(default)]
    pub mcp: Vec<McpSpec>,
}

/// `read_file`'s root.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileSpec {
    /// The directory files are read under, relative to the spec.
    pub root: PathBuf,
}

/// `http_get`'s allowed hosts.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpGetSpec {
    /// Host names it may fetch from.
    pub allow: Vec<String>,
}

/// An MCP server started on stdio.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    /// Its name.
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// The capabilities its tools need.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Seconds it may take to start and answer the MCP handshake (default 30).
    pub handshake_timeout_secs: Option<f64>,
    /// Seconds each tool call may take (default 30).
    pub timeout_secs: Option<f64>,
    /// The file its stderr is appended to, relative to the spec (default:
    /// `<spec name>.<server name>.mcp.log` beside the trace).
    pub stderr_log: Option<PathBuf>,
}

/// Limits on the run.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    /// Model calls.
    pub calls: Option<u64>,
    /// Tokens, input and output.
    pub tokens: Option<u64>,
    /// Dollars.
    pub cost_usd: Option<f64>,
    /// Seconds of wall time.
    pub seconds: Option<f64>,
}

/// The memory database.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// The SQLite file, relative to the spec (created if missing).
    pub db: PathBuf,
}

/// What the answer must be.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// `text` (default) or `json`.
    #[serde(rename = "type", default)]
    pub kind: OutputKind,
    /// For `json`: the JSON schema the answer must satisfy.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub schema: Option<toml::Table>,
}

/// The kinds of answer.
#[derive(Debug, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Free text.
    #[default]
    Text,
    /// JSON, checked against `schema`.
    Json,
}

/// The name the spec at `path` goes by: its file name without the extension (`research` for
/// `research.toml`), or `agent`. Traces, MCP logs and unnamed agents are named after it.
pub fn file_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "agent".into())
}

impl Spec {
    /// The agent's name: `agent.name`, else the spec file's ([`file_name`] of `path`).
    pub fn agent_name(&self, path: &Path) -> String {
        self.agent.name.clone().unwrap_or_else(|| file_name(path))
    }

    /// Reads and checks the spec at `path`.
    pub fn read(path: &Path) -> Result<Spec, CliError> {
        let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
            path: path.to_owned(),
            action: "reading",
            source,
        })?;
        Spec::parse(&text, path)
    }

    /// Parses and checks a spec's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Spec, CliError> {
        let spec: Spec = toml::from_str(text).map_err(|e| {
            CliError::Invalid(format!("{}: {}", path.display(), e.to_string().trim()))
        })?;
        for (i, mcp) in spec.tools.mcp.iter().enumerate() {
            for (key, secs) in [
                ("handshake_timeout_secs", mcp.handshake_timeout_secs),
                ("timeout_secs", mcp.timeout_secs),
            ] {
                if secs.is_some_and(|s| !(s.is_finite() && s > 0.0 && s <= 1e6)) {
                    return Err(CliError::Invalid(format!(
                        "{}: `tools.mcp[{i}].{key}` must be a number of seconds above 0 (at most 1000000)",
                        path.display()
                    )));
                }
            }
        }
        if spec.output.kind == OutputKind::Json && spec.output.schema.is_none() {
            return Err(CliError::Invalid(format!(
                "{}: `output.type = \"json\"` needs `output.schema`",
                path.display()
            )));
        }
        Ok(spec)
    }
}
