//! [`Toolbox`]: tools plus the capabilities they need, and [`with_toolbox`] to run a part of
//! a program with exactly those tools.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use agent_op::op::{self, Op};
use agent_op::{Tool, ToolDefinition, ToolScope, ToolSet};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::tool::TypedTool;

/// A set of tools and the capabilities they need (`fs.read`, `fs.write:./out`, `net`,
/// `shell`, or your own), as one value.
///
/// [`with_toolbox`] runs a part of a program with exactly these tools: the runtime (not the
/// prompt) refuses any other, tells the model, and records a `tool_denied` event. Toolboxes
/// only narrow: [`Toolbox::narrow`] refuses, when it is built, a tool the toolbox lacks, and
/// the runtime refuses, when it is entered, a nested toolbox with a tool or capability the
/// enclosing one lacks.
///
/// ```
/// use agent_agents::{tool, Toolbox};
/// use agent_op::ToolError;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Path { path: String }
///
/// let read = tool("read_file", "Reads a file", |p: Path| async move {
///     std::fs::read_to_string(&p.path).map_err(|e| ToolError::failed(e.to_string()))
/// })
/// .needs("fs.read");
/// let toolbox = Toolbox::new("reader").with(read);
/// assert!(toolbox.capabilities().contains("fs.read"));
/// assert_eq!(toolbox.needs("read_file"), Some(&["fs.read".to_owned()][..]));
/// let nothing = toolbox.narrow("nothing", &[])?;
/// assert!(nothing.is_empty());
/// assert!(toolbox.narrow("writer", &["write_file"]).is_err());
/// # Ok::<(), agent_agents::ToolboxError>(())
/// ```
#[derive(Clone, Default)]
pub struct Toolbox {
    name: String,
    tools: Vec<Entry>,
    granted: BTreeSet<String>,
}

#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    needs: Vec<String>,
    approval: bool,
}

/// Why a toolbox could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolboxError {
    /// A narrower toolbox named tools this one does not have.
    #[error("toolbox `{toolbox}` has no tool(s) {}: a narrower toolbox can only keep tools it has", .missing.join(", "))]
    MissingTools {
        /// The toolbox narrowed.
        toolbox: String,
        /// The names it lacks.
        missing: Vec<String>,
    },
}

impl Toolbox {
    /// An empty toolbox named `name` (the name shows in errors and the trace).
    pub fn new(name: impl Into<String>) -> Toolbox {
        Toolbox {
            name: name.into(),
            ..Toolbox::default()
        }
    }

    /// Adds a typed tool, with the capabilities it declared ([`TypedTool::needs`]).
    pub fn with<A, O>(mut self, tool: TypedTool<A, O>) -> Toolbox
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        O: Serialize + Send + 'static,
    {
        let needs = tool.marks().capabilities.clone();
        let approval = tool.marks().needs_approval;
        self.tools.push(Entry {
            tool: Arc::new(tool),
            needs,
            approval,
        });
        self
    }

    /// Adds any tool, needing `capabilities`.
    pub fn with_tool(mut self, tool: Arc<dyn Tool>, capabilities: &[&str]) -> Toolbox {
        self.tools.push(Entry {
            tool,
            needs: capabilities.iter().map(|c| (*c).to_owned()).collect(),
            approval: false,
        });
        self
    }

    /// Grants a capability no tool declared (for sub-agents and MCP servers that need it).
    pub fn grant(mut self, capability: impl Into<String>) -> Toolbox {
        self.granted.insert(capability.into());
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The capabilities it holds: those its tools need, and those granted.
    pub fn capabilities(&self) -> BTreeSet<String> {
        let mut all = self.granted.clone();
        for entry in &self.tools {
            all.extend(entry.needs.iter().cloned());
        }
        all
    }

    /// Whether it has no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools' names, in the order they were added.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|e| e.tool.name())
    }

    /// The capabilities the tool `name` needs, or `None` if the toolbox has no such tool.
    pub fn needs(&self, name: &str) -> Option<&[String]> {
        self.tools
            .iter()
            .find(|e| e.tool.name() == name)
            .map(|e| e.needs.as_slice())
    }

    /// The names of the tools that need approval before each call.
    pub fn needing_approval(&self) -> impl Iterator<Item = &str> {
        self.tools
            .iter()
            .filter(|e| e.approval)
            .map(|e| e.tool.name())
    }

    /// The definitions to offer a model.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.iter().map(|e| e.tool.definition()).collect()
    }

    /// The tools, as a run's [`ToolSet`] (for `Config::tools`).
    pub fn tool_set(&self) -> ToolSet {
        let mut set = ToolSet::new();
        for entry in &self.tools {
            set.insert(entry.tool.clone());
        }
        set
    }

    /// A toolbox named `name` with only the tools `keep` of this one (and their
    /// capabilities). Naming a tool this toolbox lacks is an error: toolboxes only narrow.
    pub fn narrow(&self, name: impl Into<String>, keep: &[&str]) -> Result<Toolbox, ToolboxError> {
        let missing: Vec<String> = keep
            .iter()
            .filter(|k| !self.tools.iter().any(|e| e.tool.name() == **k))
            .map(|k| (*k).to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(ToolboxError::MissingTools {
                toolbox: self.name.clone(),
                missing,
            });
        }
        Ok(Toolbox {
            name: name.into(),
            tools: self
                .tools
                .iter()
                .filter(|e| keep.contains(&e.tool.name()))
                .cloned()
                .collect(),
            granted: BTreeSet::new(),
        })
    }

    /// The runtime scope of this toolbox.
    pub fn scope(&self) -> ToolScope {
        ToolScope {
            name: self.name.clone(),
            tools: self.tool_set(),
            capabilities: self.capabilities(),
        }
    }
}

impl fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toolbox")
            .field("name", &self.name)
            .field("tools", &self.names().collect::<Vec<_>>())
            .field("capabilities", &self.capabilities())
            .finish()
    }
}

/// Runs `body` with exactly the tools of `toolbox` (see [`op::with_tools`]): other tools are
/// refused by the runtime, and the model is offered only these.
pub fn with_toolbox<S, A: Send + 'static>(toolbox: &Toolbox, body: Op<S, A>) -> Op<S, A> {
    op::with_tools(toolbox.scope(), body)
}
