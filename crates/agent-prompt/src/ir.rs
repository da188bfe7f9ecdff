//! [`PromptIr`], its [`ToolDef`]s and [`PromptMeta`].

use agent_op::{Timestamp, ToolDefinition};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agent_op::context::Priority;
use agent_op::context::{ContextStrategy, TokenBudget};

use crate::section::Section;
use crate::tokens::TokenCounter;

/// A tool the model may call, with the priority that decides whether it survives a tight
/// budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments.
    pub schema: Value,
    /// How much it matters: below `Critical`, a tool can be dropped from a tight prompt
    /// (before the sections of its priority), and a dropped tool cannot be called.
    pub priority: Priority,
    /// A precomputed embedding of its description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    /// Its size in tokens as last counted (`0` until counted).
    #[serde(default)]
    pub tokens: u32,
}

impl ToolDef {
    /// A high-priority tool from its definition.
    pub fn new(definition: ToolDefinition) -> ToolDef {
        ToolDef {
            name: definition.name,
            description: definition.description,
            schema: definition.parameters,
            priority: Priority::High,
            embedding: None,
            tokens: 0,
        }
    }

    /// With `priority`.
    pub fn with_priority(mut self, priority: Priority) -> ToolDef {
        self.priority = priority;
        self
    }

    /// The definition providers take.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.schema.clone(),
        }
    }

    /// Counts its tokens (name, description and schema as sent) with `counter`.
    pub fn count_with(&mut self, counter: &TokenCounter) {
        self.tokens = counter.count_tool(self);
    }
}

/// What is known about an IR as a whole, for tracing and optimisation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptMeta {
    /// The tokens of every section, tool and the observation, before compilation.
    pub total_tokens: u32,
    /// The budget to compile under.
    pub budget: TokenBudget,
    /// How the context was gathered.
    pub strategy: ContextStrategy,
    /// When the IR was made: the "now" recency is measured from, so compiling the same IR
    /// gives the same prompt whenever it runs.
    pub timestamp: Timestamp,
    /// Compiled tokens over total tokens, once compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_ratio: Option<f32>,
    /// An estimate of the answer's uncertainty, when something measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_entropy: Option<f32>,
    /// Whether every count came from the cache.
    #[serde(default)]
    pub cache_hit: bool,
}

impl PromptMeta {
    /// Metadata for an IR made at `timestamp` to be compiled under `budget`.
    pub fn new(budget: TokenBudget, timestamp: Timestamp) -> PromptMeta {
        PromptMeta {
            total_tokens: 0,
            budget,
            strategy: ContextStrategy::default(),
            timestamp,
            compression_ratio: None,
            estimated_entropy: None,
            cache_hit: false,
        }
    }
}

/// The context window as data: labeled sections, tool definitions, the observation, and
/// metadata. [`compile`](crate::compile) turns it into the [`Prompt`](agent_op::Prompt)
/// providers take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptIr {
    /// The sections, in order.
    pub sections: Vec<Section>,
    /// The tools the model may call.
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    /// The current input, sent last as the user's message (omitted when empty).
    pub observation: String,
    /// Budget, strategy, time and totals.
    pub meta: PromptMeta,
}

impl PromptIr {
    /// An IR with no sections or tools.
    pub fn new(observation: impl Into<String>, meta: PromptMeta) -> PromptIr {
        PromptIr {
            sections: Vec::new(),
            tools: Vec::new(),
            observation: observation.into(),
            meta,
        }
    }

    /// With `section` appended.
    pub fn section(mut self, section: Section) -> PromptIr {
        self.sections.push(section);
        self
    }

    /// With `tool` appended.
    pub fn tool(mut self, tool: ToolDef) -> PromptIr {
        self.tools.push(tool);
        self
    }

    /// Counts every section and tool with `counter` (cached by content hash), and sets
    /// [`PromptMeta::total_tokens`] and [`PromptMeta::cache_hit`].
    pub fn count(&mut self, counter: &TokenCounter) {
        let hits_before = counter.cache_hits();
        let mut lookups = 0u64;
        let mut total = counter.count_observation(&self.observation);
        for section in &mut self.sections {
            section.count_with(counter);
            lookups += 1;
            total = total.saturating_add(section.tokens);
        }
        for tool in &mut self.tools {
            tool.count_with(counter);
            total = total.saturating_add(tool.tokens);
        }
        self.meta.total_tokens = total;
        self.meta.cache_hit = lookups > 0 && counter.cache_hits() - hits_before == lookups;
    }
}
