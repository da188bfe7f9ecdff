//! What hydrating and compiling a context did, as the trace records it: [`ContextReport`]
//! (per source, per section, per tool, and the totals).

use serde::{Deserialize, Serialize};

use super::request::{Priority, SectionSource};

/// What compilation did with each section and tool: enough to answer "why did the model not
/// see X?" from the trace alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompileReport {
    /// Every section, in IR order.
    pub sections: Vec<SectionReport>,
    /// Every tool, in IR order.
    pub tools: Vec<ToolReport>,
    /// The tokens of everything before compilation (overheads included).
    pub tokens_before: u32,
    /// The tokens of the compiled prompt.
    pub tokens_after: u32,
    /// The budget's total.
    pub budget: u32,
    /// The tokens held in reserve.
    pub reserve: u32,
    /// The tokens the prompt could use.
    pub available: u32,
    /// `tokens_after / tokens_before` (1 when nothing was there).
    pub compression_ratio: f32,
}

/// What happened to one section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SectionReport {
    /// The section's id.
    pub id: String,
    /// Where it came from.
    pub source: SectionSource,
    /// Its priority.
    pub priority: Priority,
    /// Its tokens in the IR.
    pub tokens_before: u32,
    /// Its tokens in the prompt (0 when dropped).
    pub tokens_after: u32,
    /// Kept, shrunk or dropped (in JSON: `"outcome"`, and `"reason"` when dropped).
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What happened to one tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolReport {
    /// The tool's name.
    pub name: String,
    /// Its priority.
    pub priority: Priority,
    /// Its tokens.
    pub tokens: u32,
    /// Kept or dropped (a tool is never shrunk). A dropped tool cannot be called. In JSON:
    /// `"outcome"`, and `"reason"` when dropped.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What compilation did with a section or tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Sent whole.
    Kept,
    /// Sent in part, to fit.
    Shrunk,
    /// Not sent.
    Dropped {
        /// Why.
        reason: DropReason,
    },
}

impl Outcome {
    /// Whether it was sent, whole or in part.
    pub fn is_sent(&self) -> bool {
        !matches!(self, Outcome::Dropped { .. })
    }
}

/// Why a section or tool was not sent.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DropReason {
    /// Higher-ranked items used the budget.
    OverBudget,
    /// Its share of a [`BudgetAllocation::FixedRatios`](super::BudgetAllocation::FixedRatios) budget was used up.
    OverAllocation,
    /// Another section has the same label and content.
    Duplicate,
    /// It has no content.
    Empty,
    /// It did not fit, and a summary of it (the section of source
    /// [`Summary`](super::SectionSource::Summary)) was sent instead.
    Summarized,
}

/// What one context source did during hydration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    /// The source's name.
    pub name: String,
    /// How many sections it produced (0 when dropped).
    pub sections: u32,
    /// How long it took, in microseconds (zeroed by
    /// [`EventKind::without_timing`](crate::EventKind::without_timing)).
    pub elapsed_us: u64,
    /// Whether its sections were used.
    #[serde(flatten)]
    pub outcome: SourceOutcome,
}

/// Whether a source's sections were used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SourceOutcome {
    /// It answered; its sections went to compilation (which may still drop them).
    Hydrated,
    /// It is optional and failed: the context was built without it.
    Dropped {
        /// Its error.
        error: String,
    },
    /// It had nothing to add this time (a condition did not hold, nothing matched).
    Skipped,
}

/// Everything the trace records about one [`op::infer`](crate::op::infer) call's context:
/// what each source produced and how long it took, what compilation did with each section
/// and tool, and the totals. The payload of [`EventKind::Context`](crate::EventKind::Context).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextReport {
    /// The model the context was compiled for.
    pub model: String,
    /// The token encoding counts were made with (`o200k_base`, `cl100k_base`,
    /// `approximate`).
    pub encoding: String,
    /// Every source, in the pipeline's order.
    pub sources: Vec<SourceReport>,
    /// How long hydration took in all, in microseconds (sources run concurrently under the
    /// parallel interpreter, so this can be less than their sum).
    pub hydrate_us: u64,
    /// How long counting and compiling took, in microseconds.
    pub compile_us: u64,
    /// Sections and tools, kept, shrunk or dropped, and the totals.
    #[serde(flatten)]
    pub compile: CompileReport,
}

impl ContextReport {
    /// This report with its measured durations set to zero.
    pub fn without_timing(&self) -> ContextReport {
        let mut report = self.clone();
        report.hydrate_us = 0;
        report.compile_us = 0;
        for source in &mut report.sources {
            source.elapsed_us = 0;
        }
        report
    }

    /// The names of the tools compilation dropped: the model was not offered them, so the
    /// run refuses to call them until the branch's next model call.
    pub fn dropped_tools(&self) -> impl Iterator<Item = &str> {
        self.compile
            .tools
            .iter()
            .filter(|tool| !tool.outcome.is_sent())
            .map(|tool| tool.name.as_str())
    }

    /// Why the section `id` was or was not sent: its report, if the context had such a
    /// section.
    pub fn section(&self, id: &str) -> Option<&SectionReport> {
        self.compile.sections.iter().find(|s| s.id == id)
    }
}
