//! [`McpCommand`]: how to start an MCP server on stdio.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::transport::TokioChildProcess;

use super::process::{ProcessGroup, own_group};
use super::{DEFAULT_TIMEOUT, McpError, McpServer, handshake};

/// How to start an MCP server as a child process speaking MCP on stdio: the program and its
/// arguments, where its stderr goes, how long its handshake and requests may take.
///
/// The server runs as the leader of its own process group. The whole group (a launcher such
/// as `npx` and the server it starts) is killed if the handshake fails or times out, if the
/// future of [`spawn`](McpCommand::spawn) is dropped (a Ctrl-C while starting), and once the
/// server and every toolbox made from it are dropped.
///
/// ```no_run
/// # async fn start() -> Result<(), agent_agents::McpError> {
/// use std::time::Duration;
/// use agent_agents::McpCommand;
///
/// let server = McpCommand::new("files", "npx")
///     .args(["-y", "@modelcontextprotocol/server-filesystem", "."])
///     .stderr_log("files.mcp.log")
///     .handshake_timeout(Duration::from_secs(60))
///     .spawn()
///     .await?;
/// let toolbox = server.toolbox(&["fs.read"]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct McpCommand {
    name: String,
    program: OsString,
    args: Vec<OsString>,
    stderr_log: Option<PathBuf>,
    handshake_timeout: Duration,
    timeout: Duration,
}

impl McpCommand {
    /// The server `name` (used in errors and as its toolbox's name), started as `program`.
    pub fn new(name: impl Into<String>, program: impl AsRef<OsStr>) -> McpCommand {
        McpCommand {
            name: name.into(),
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            stderr_log: None,
            handshake_timeout: DEFAULT_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Adds arguments.
    pub fn args<I, A>(mut self, args: I) -> McpCommand
    where
        I: IntoIterator<Item = A>,
        A: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Appends the server's stderr to this file (created if missing) instead of this
    /// process's stderr, where its logging would be mixed with the user's output.
    pub fn stderr_log(mut self, path: impl Into<PathBuf>) -> McpCommand {
        self.stderr_log = Some(path.into());
        self
    }

    /// How long the server may take to start and answer the MCP handshake (default 30 s).
    pub fn handshake_timeout(mut self, limit: Duration) -> McpCommand {
        self.handshake_timeout = limit;
        self
    }

    /// How long each request to the server may take (default 30 s).
    pub fn timeout(mut self, limit: Duration) -> McpCommand {
        self.timeout = limit;
        self
    }

    /// Starts the server and does the MCP handshake.
    pub async fn spawn(self) -> Result<McpServer, McpError> {
        let stderr = match &self.stderr_log {
            None => Stdio::inherit(),
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| McpError::Log {
                    server: self.name.clone(),
                    path: path.clone(),
                    source,
                })?
                .into(),
        };
        let mut command = tokio::process::Command::new(&self.program);
        command.args(&self.args);
        own_group(&mut command);
        let spawned = TokioChildProcess::builder(command).stderr(stderr).spawn();
        let (transport, _) = spawned.map_err(|source| McpError::Spawn {
            server: self.name.clone(),
            command: self.program.to_string_lossy().into_owned(),
            source,
        })?;
        let group = ProcessGroup::led_by(transport.id());
        let server = handshake(self.name, transport, self.handshake_timeout, Some(group)).await?;
        Ok(server.timeout(self.timeout))
    }
}
