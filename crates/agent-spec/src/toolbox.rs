//! The tools a spec's `[tools]` offers, as one toolbox: the built-in ones and those of its
//! MCP servers, which are started.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_agents::Toolbox;

use crate::error::SpecError;
use crate::spec::Spec;
use crate::tools;

/// The tools of a spec, and where each comes from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SpecTools {
    /// Every tool the spec offers. An MCP server is killed (its whole process group) when the
    /// last toolbox and tool set holding its tools is dropped.
    pub toolbox: Toolbox,
    /// Each tool's name and its source, `built-in` or `mcp:<server>`, in the toolbox's order.
    pub sources: Vec<(String, String)>,
}

/// Builds the toolbox of `spec`, starting its MCP servers. `base` is the directory the spec's
/// paths are relative to (usually [`Spec::dir`]); an MCP server's stderr goes to its
/// `stderr_log`, else to `<logs>.<server>.mcp.log` (`agent run` gives `logs` as the spec's
/// [`file_name`](crate::file_name) in the trace's directory).
///
/// Dropping the future before it finishes kills the servers it started. Two tools of one
/// name are refused ([`SpecError::Invalid`]); a server that does not start or list its tools
/// is a [`SpecError::Environment`] ending with the end of its stderr log.
pub async fn toolbox(spec: &Spec, base: &Path, logs: &Path) -> Result<SpecTools, SpecError> {
    let mut toolbox = Toolbox::new("spec");
    let mut sources = Vec::new();
    if let Some(read) = &spec.tools.read_file {
        let root = base.join(&read.root);
        let tool = tools::read_file(&root).map_err(|e| {
            SpecError::Invalid(format!(
                "tools.read_file.root: {} is not a readable directory: {e}",
                root.display()
            ))
        })?;
        toolbox = toolbox.with(tool);
        sources.push(("read_file".to_owned(), "built-in".to_owned()));
    }
    if let Some(http) = &spec.tools.http_get {
        let tool = tools::http_get(&http.allow)
            .map_err(|e| SpecError::Environment(format!("no HTTP client: {e}")))?;
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
                return Err(SpecError::Invalid(format!(
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
fn mcp_failed(error: agent_agents::McpError, log: &Path) -> SpecError {
    let said = std::fs::read(log)
        .map(|bytes| {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            lines[lines.len().saturating_sub(5)..].join("\n    ")
        })
        .unwrap_or_default();
    match error {
        error @ (agent_agents::McpError::Spawn { .. } | agent_agents::McpError::Log { .. }) => {
            SpecError::Environment(error.to_string())
        }
        error if said.is_empty() => SpecError::Environment(format!(
            "{error} (its stderr, empty, is in {})",
            log.display()
        )),
        error => SpecError::Environment(format!(
            "{error}; the end of its stderr ({}):\n    {said}",
            log.display()
        )),
    }
}
