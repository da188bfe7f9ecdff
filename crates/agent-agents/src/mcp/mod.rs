//! MCP: the tools of a Model Context Protocol server as [`Toolbox`] entries, through the
//! official Rust SDK (`rmcp`), over stdio or streamable HTTP; and a [`Toolbox`] served to
//! any MCP client.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agent_op::{BoxFuture, Tool, ToolError};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use crate::toolbox::Toolbox;

/// Why an MCP server could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The server process could not be started.
    #[error("could not start MCP server `{server}` (command `{command}`): {source}")]
    Spawn {
        /// The server's name.
        server: String,
        /// The command that could not be started.
        command: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The protocol failed (the handshake, a request, the server went away).
    #[error("MCP server `{server}`: {message}")]
    Protocol {
        /// The server's name.
        server: String,
        /// What failed.
        message: String,
    },
    /// The file the server's stderr should go to could not be opened.
    #[error("MCP server `{server}`: cannot write its stderr to {}", path.display())]
    Log {
        /// The server's name.
        server: String,
        /// The log file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The server did not answer in time.
    #[error("MCP server `{server}` did not answer within {after:?}")]
    Timeout {
        /// The server's name.
        server: String,
        /// How long it was given.
        after: Duration,
    },
}

mod command;
mod http;
mod process;

pub use command::McpCommand;
use process::ProcessGroup;
pub use process::kill_spawned_servers;

type Client = RunningService<RoleClient, ()>;

/// How long the handshake and each request may take unless [`McpServer::timeout`] says.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A client connected to an MCP server: a child process speaking MCP on stdio
/// ([`spawn`](McpServer::spawn)), a server at a URL ([`connect_http`](McpServer::connect_http)),
/// or one on any byte stream ([`connect`](McpServer::connect)).
///
/// [`McpServer::toolbox`] turns its tools into a [`Toolbox`], with the server's JSON schemas
/// and the capabilities you grant them, so they are scoped like any other tool: a tool of the
/// server is only callable where its capability is in scope.
///
/// Every request has a timeout (default 30 s). A server that crashes makes its tools' calls
/// tool errors (shown to the model), never a panic.
pub struct McpServer {
    name: String,
    connection: Arc<Connection>,
    timeout: Duration,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts `program` with `args` and connects to it over stdio (the MCP handshake is done
    /// when this returns). The server runs in its own process group, killed as a whole once
    /// the server and every toolbox made from it are dropped. [`McpCommand`] sets more: where
    /// the server's stderr goes, how long the handshake may take.
    pub async fn spawn(
        name: impl Into<String>,
        program: impl AsRef<std::ffi::OsStr>,
        args: &[&str],
    ) -> Result<McpServer, McpError> {
        McpCommand::new(name, program).args(args).spawn().await
    }

    /// Connects to a server already listening on `io` (a socket, a pipe, one end of
    /// `tokio::io::duplex`).
    pub async fn connect<IO>(name: impl Into<String>, io: IO) -> Result<McpServer, McpError>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        handshake(name.into(), io, DEFAULT_TIMEOUT, None).await
    }

    /// Connects to a server over MCP's streamable-HTTP transport at `url` (for example
    /// `http://127.0.0.1:3001/mcp`): each message is a POST answered with JSON or an SSE
    /// stream, in a session the server assigns. Connections must open within 10 s.
    pub async fn connect_http(
        name: impl Into<String>,
        url: impl Into<String>,
    ) -> Result<McpServer, McpError> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

        let name = name.into();
        let client =
            http::HttpClient::new(Duration::from_secs(10)).map_err(|e| McpError::Protocol {
                server: name.clone(),
                message: format!("the HTTP client could not be built: {e}"),
            })?;
        let url: String = url.into();
        let config = StreamableHttpClientTransportConfig::with_uri(url);
        handshake(
            name,
            StreamableHttpClientTransport::with_client(client, config),
            DEFAULT_TIMEOUT,
            None,
        )
        .await
    }

    /// Bounds every request to the server by `limit` (default 30 s).
    pub fn timeout(mut self, limit: Duration) -> McpServer {
        self.timeout = limit;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id of the server this process spawned (also the id of its process
    /// group); `None` for a server reached over a stream or HTTP.
    pub fn process_id(&self) -> Option<u32> {
        self.connection.group.as_ref()?.id()
    }

    /// The server's tools as a toolbox named after it, each needing `capabilities`.
    pub async fn toolbox(&self, capabilities: &[&str]) -> Result<Toolbox, McpError> {
        let listed =
            tokio::time::timeout(self.timeout, self.connection.client.list_all_tools()).await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => return Err(self.protocol(e.to_string())),
            Err(_) => {
                return Err(McpError::Timeout {
                    server: self.name.clone(),
                    after: self.timeout,
                });
            }
        };
        let mut toolbox = Toolbox::new(self.name.clone());
        for tool in tools {
            let mcp_tool = McpTool {
                server: self.name.clone(),
                connection: self.connection.clone(),
                name: tool.name.to_string(),
                description: tool.description.map(Cow::into_owned).unwrap_or_default(),
                schema: Value::Object((*tool.input_schema).clone()),
                timeout: self.timeout,
            };
            toolbox = toolbox.with_tool(Arc::new(mcp_tool), capabilities);
        }
        Ok(toolbox)
    }

    fn protocol(&self, message: String) -> McpError {
        McpError::Protocol {
            server: self.name.clone(),
            message,
        }
    }
}

/// Connects a client over `transport`, doing the MCP handshake within `timeout`. `group` is
/// the server's process group, if this process spawned it: held by the server and its tools,
/// and killed here if the handshake fails, times out or is dropped.
async fn handshake<T, E, A>(
    name: String,
    transport: T,
    timeout: Duration,
    group: Option<ProcessGroup>,
) -> Result<McpServer, McpError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(timeout, ().serve(transport)).await {
        Ok(Ok(client)) => Ok(McpServer {
            name,
            connection: Arc::new(Connection { client, group }),
            timeout: DEFAULT_TIMEOUT,
        }),
        Ok(Err(e)) => Err(McpError::Protocol {
            server: name,
            message: e.to_string(),
        }),
        Err(_) => Err(McpError::Timeout {
            server: name,
            after: timeout,
        }),
    }
}

/// A live connection, and the process group of the server behind it (if spawned here).
struct Connection {
    client: Client,
    /// Dropped after the client: the group dies with the last server or tool holding it.
    group: Option<ProcessGroup>,
}

/// One tool of an MCP server.
struct McpTool {
    server: String,
    connection: Arc<Connection>,
    name: String,
    description: String,
    schema: Value,
    timeout: Duration,
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.schema.clone()
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<Value, ToolError>> {
        Box::pin(async move {
            let arguments = match args {
                Value::Object(map) => map,
                Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::invalid_arguments(format!(
                        "MCP tools take a JSON object, not {other}"
                    )));
                }
            };
            let request = CallToolRequestParams::new(self.name.clone()).with_arguments(arguments);
            let answer =
                tokio::time::timeout(self.timeout, self.connection.client.call_tool(request)).await;
            match answer {
                Ok(Ok(result)) => result_value(result),
                Ok(Err(e)) => Err(ToolError::unavailable(format!(
                    "MCP server `{}` failed on `{}`: {e}",
                    self.server, self.name
                ))),
                Err(_) => Err(ToolError::timed_out(format!(
                    "MCP server `{}` did not answer `{}` within {:?}",
                    self.server, self.name, self.timeout
                ))),
            }
        })
    }
}

/// An MCP result as a tool result: its structured content if any, else its text (one block)
/// or its blocks as JSON; `isError` results are tool errors with their text.
fn result_value(result: CallToolResult) -> Result<Value, ToolError> {
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect();
    if result.is_error == Some(true) {
        return Err(ToolError::failed(texts.join("\n")));
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    if texts.len() == result.content.len() && texts.len() == 1 {
        return Ok(Value::String(texts.into_iter().next().unwrap_or_default()));
    }
    serde_json::to_value(&result.content)
        .map_err(|e| ToolError::failed(format!("the MCP result could not be read: {e}")))
}

/// A toolbox served as an MCP server: its tools (with their schemas) listed and called over
/// MCP, so any MCP client (an IDE, another agent framework) can use them. Calls of unknown
/// tools are protocol errors; tool errors are MCP tool-level errors with their message.
#[derive(Clone, Debug)]
pub struct ToolboxServer {
    toolbox: Toolbox,
    /// The toolbox's tools by name, built once (every call looks one up).
    tools: agent_op::ToolSet,
}

impl ToolboxServer {
    /// Serves `toolbox`.
    pub fn new(toolbox: Toolbox) -> ToolboxServer {
        let tools = toolbox.tool_set();
        ToolboxServer { toolbox, tools }
    }

    /// Serves on this process's stdin and stdout until the client disconnects.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        self.serve_on(rmcp::transport::stdio()).await
    }

    /// Serves on `io` (a socket, a pipe, one end of `tokio::io::duplex`) until the client
    /// disconnects.
    pub async fn serve_io<IO>(self, io: IO) -> Result<(), McpError>
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        self.serve_on(io).await
    }

    async fn serve_on<T, E, A>(self, transport: T) -> Result<(), McpError>
    where
        T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let name = self.toolbox.name().to_owned();
        let running = self
            .serve(transport)
            .await
            .map_err(|e| McpError::Protocol {
                server: name.clone(),
                message: e.to_string(),
            })?;
        running.waiting().await.map_err(|e| McpError::Protocol {
            server: name,
            message: e.to_string(),
        })?;
        Ok(())
    }
}

impl rmcp::ServerHandler for ToolboxServer {
    fn get_info(&self) -> rmcp::model::ServerInfo {
        rmcp::model::ServerInfo::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
        .with_instructions(format!(
            "The tools of the `{}` toolbox.",
            self.toolbox.name()
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let tools = self
            .toolbox
            .definitions()
            .into_iter()
            .map(|d| {
                let schema = match d.parameters {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                rmcp::model::Tool::new(d.name, d.description, Arc::new(schema))
            })
            .collect();
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<CallToolResult, rmcp::ErrorData> {
        let Some(tool) = self.tools.get(&request.name) else {
            return Err(rmcp::ErrorData::invalid_params(
                format!(
                    "no tool `{}` in toolbox `{}`",
                    request.name,
                    self.toolbox.name()
                ),
                None,
            ));
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        Ok(match tool.call(args).await {
            Ok(Value::String(text)) => {
                CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)])
            }
            Ok(value) => {
                let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(
                    value.to_string(),
                )]);
                result.structured_content = Some(value);
                result
            }
            Err(e) => CallToolResult::error(vec![rmcp::model::ContentBlock::text(e.to_string())]),
        })
    }
}
