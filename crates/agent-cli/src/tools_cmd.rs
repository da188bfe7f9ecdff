//! `agent tools SPEC`: every tool a spec offers the model (built-in and MCP), with the
//! capabilities it needs, its description and the JSON schema of its arguments.

use std::fmt::Write as _;
use std::path::Path;

use agent_spec::Spec;
use serde_json::json;

use crate::error::CliError;
use crate::run;

/// Lists the tools of the spec at `spec_path` (starting its MCP servers, whose stderr goes to
/// logs in the current directory), as text or JSON lines.
pub async fn list(spec_path: &Path, json: bool) -> Result<String, CliError> {
    let spec = Spec::read(spec_path)?;
    let tools = run::started_toolbox(&spec, spec_path, Path::new(".")).await?;
    let definitions = tools.toolbox.definitions();
    let mut out = String::new();
    if !json {
        let _ = writeln!(
            out,
            "{} offers {}",
            spec_path.display(),
            crate::trace_cmd::counted(definitions.len() as u64, "tool")
        );
    }
    for definition in definitions {
        let source = tools
            .sources
            .iter()
            .find(|(name, _)| *name == definition.name)
            .map_or("", |(_, source)| source.as_str());
        let needs = tools.toolbox.needs(&definition.name).unwrap_or_default();
        if json {
            let line = json!({
                "name": definition.name,
                "source": source,
                "capabilities": needs,
                "description": definition.description,
                "parameters": definition.parameters,
            });
            let _ = writeln!(out, "{line}");
            continue;
        }
        let needs = if needs.is_empty() {
            "needs no capability".to_owned()
        } else {
            format!("needs {}", needs.join(", "))
        };
        let _ = writeln!(out, "\n{} · {source} · {needs}", definition.name);
        for line in definition.description.lines() {
            let _ = writeln!(out, "  {line}");
        }
        let schema = serde_json::to_string_pretty(&definition.parameters).unwrap_or_default();
        let _ = writeln!(out, "  arguments:");
        for line in schema.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    Ok(out)
}
