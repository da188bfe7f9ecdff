//! The TOML spec: its tables as types, and [`Spec::read`], which parses and checks a file.
//! Every table refuses keys it does not know, naming the key and the ones it allows. The
//! repository's `docs/SPEC.md` is its reference, checked against these types (through their
//! JSON schema) by a test.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::SpecError;

/// An agent described in a file.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
    /// The file the spec was read from ([`Spec::read`], [`Spec::parse`]); not a key of the
    /// file.
    #[serde(skip)]
    path: Option<PathBuf>,
}

/// Where the model is served.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileSpec {
    /// The directory files are read under, relative to the spec.
    pub root: PathBuf,
}

/// `http_get`'s allowed hosts.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpGetSpec {
    /// Host names it may fetch from.
    pub allow: Vec<String>,
}

/// An MCP server started on stdio.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// The SQLite file, relative to the spec (created if missing).
    pub db: PathBuf,
}

/// What the answer must be.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
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
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Free text.
    #[default]
    Text,
    /// JSON, checked against `schema`.
    Json,
}

/// The name the spec at `path` goes by: its file name without the extension (`research` for
/// `research.toml`), or `agent`. `agent run` names traces and MCP logs after it, and
/// [`Spec::name`] unnamed agents.
pub fn file_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "agent".into())
}

impl Spec {
    /// Reads and checks the spec at `path`, which it records (see [`Spec::dir`] and
    /// [`Spec::name`]).
    pub fn read(path: &Path) -> Result<Spec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Io {
            path: path.to_owned(),
            action: "reading",
            source,
        })?;
        Spec::parse(&text, path)
    }

    /// Parses and checks a spec's text read from `path`, which names it in errors and is
    /// recorded as where it came from (its relative paths are relative to `path`'s
    /// directory).
    pub fn parse(text: &str, path: &Path) -> Result<Spec, SpecError> {
        let mut spec: Spec = toml::from_str(text).map_err(|e| {
            SpecError::Invalid(format!("{}: {}", path.display(), e.to_string().trim()))
        })?;
        for (i, mcp) in spec.tools.mcp.iter().enumerate() {
            for (key, secs) in [
                ("handshake_timeout_secs", mcp.handshake_timeout_secs),
                ("timeout_secs", mcp.timeout_secs),
            ] {
                if secs.is_some_and(|s| !(s.is_finite() && s > 0.0 && s <= 1e6)) {
                    return Err(SpecError::Invalid(format!(
                        "{}: `tools.mcp[{i}].{key}` must be a number of seconds above 0 (at most 1000000)",
                        path.display()
                    )));
                }
            }
        }
        if spec.output.kind == OutputKind::Json && spec.output.schema.is_none() {
            return Err(SpecError::Invalid(format!(
                "{}: `output.type = \"json\"` needs `output.schema`",
                path.display()
            )));
        }
        spec.path = Some(path.to_owned());
        Ok(spec)
    }

    /// The file the spec was read from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The spec's directory, which the relative paths in it (`tools.read_file.root`,
    /// `memory.db`, a cassette, MCP logs) are relative to: its file's parent, or `.` for a
    /// file name alone or a spec without a file.
    pub fn dir(&self) -> &Path {
        match self.path.as_deref().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        }
    }

    /// The agent's name: `agent.name`, else the spec file's ([`file_name`] of its path), else
    /// `agent`.
    pub fn name(&self) -> String {
        match (&self.agent.name, &self.path) {
            (Some(name), _) => name.clone(),
            (None, Some(path)) => file_name(path),
            (None, None) => "agent".to_owned(),
        }
    }

    /// The JSON schema of the [`Input`](crate::Input) a served agent takes: an object with an
    /// optional `message` (the agent's goal for this request; the spec's `agent.goal` when
    /// absent) and an optional `history` of earlier turns, each a `role` (`user` or
    /// `assistant`) and its `content`. Unknown keys are refused, as
    /// [`Input`](crate::Input)'s deserializer refuses them.
    pub fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "message": {
                    "type": "string",
                    "description": "What the agent is asked (default: the spec's goal)",
                    "default": self.agent.goal,
                },
                "history": {
                    "type": "array",
                    "description": "The conversation so far, oldest first",
                    "items": {
                        "type": "object",
                        "properties": {
                            "role": { "type": "string", "enum": ["user", "assistant"] },
                            "content": { "type": "string" },
                        },
                        "required": ["role", "content"],
                        "additionalProperties": false,
                    },
                },
            },
            "additionalProperties": false,
        })
    }

    /// The JSON schema of the agent's answer: `[output].schema` for a `json` answer, else
    /// `{"type": "string"}`.
    pub fn output_schema(&self) -> Value {
        match (&self.output.kind, self.output.json_schema()) {
            (OutputKind::Json, Some(schema)) => schema,
            _ => json!({ "type": "string" }),
        }
    }
}

impl OutputSpec {
    /// `schema` as JSON.
    pub(crate) fn json_schema(&self) -> Option<Value> {
        self.schema
            .as_ref()
            .map(|schema| serde_json::to_value(schema).unwrap_or(Value::Null))
    }
}
