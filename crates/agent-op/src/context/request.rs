//! What a program asks for ([`ContextRequest`]) and the vocabulary sections are described
//! with ([`Priority`], [`SectionSource`]).

use serde::{Deserialize, Serialize};

use super::budget::{ContextStrategy, TokenBudget};

/// What a program asks the model, before any context is gathered: the observation to answer,
/// an optional goal, how to gather context and how much of it fits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextRequest {
    /// The current input: the user's message, or what the agent just observed.
    pub observation: String,
    /// What the agent is trying to do, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// How to gather context.
    #[serde(default)]
    pub strategy: ContextStrategy,
    /// How much context fits.
    #[serde(default)]
    pub budget: TokenBudget,
}

impl ContextRequest {
    /// A request to answer `observation`, with the default strategy and budget.
    pub fn new(observation: impl Into<String>) -> ContextRequest {
        ContextRequest {
            observation: observation.into(),
            ..ContextRequest::default()
        }
    }

    /// With `goal`.
    pub fn with_goal(mut self, goal: impl Into<String>) -> ContextRequest {
        self.goal = Some(goal.into());
        self
    }

    /// With `strategy`.
    pub fn with_strategy(mut self, strategy: ContextStrategy) -> ContextRequest {
        self.strategy = strategy;
        self
    }

    /// With `budget`.
    pub fn with_budget(mut self, budget: TokenBudget) -> ContextRequest {
        self.budget = budget;
        self
    }
}

/// Where a section came from: its provenance, kept in the IR and the trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SectionSource {
    /// Fixed text: written in code, or loaded from the named file.
    Static {
        /// The file it was read from, or `"code"` (a `Cow`, so the common `"code"` costs no
        /// allocation when sections and reports are copied).
        origin: std::borrow::Cow<'static, str>,
    },
    /// The recent conversation.
    Temporal,
    /// A semantic search of memory; `score` is the best match's similarity (0–1).
    Semantic {
        /// The similarity of the best match.
        score: f32,
    },
    /// Long-term knowledge: memory entries of a kind.
    Knowledge,
    /// A value read from the program's state (`"project"`, `"clock"`, …).
    State {
        /// What was read.
        key: String,
    },
    /// Included because a condition held.
    Conditional {
        /// The condition, as a label.
        condition: String,
    },
    /// A model's summary of sections that did not fit the budget.
    Summary {
        /// The ids of the sections summarized.
        of: Vec<String>,
    },
}

/// How much a section matters when the budget is tight.
///
/// Ordered from least to most important, so `Priority::Critical > Priority::Low`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Dropped first.
    Low,
    /// Dropped when the budget is tight.
    Medium,
    /// Kept unless only critical sections fit.
    High,
    /// Never dropped or shrunk: a compilation that cannot fit every critical section fails.
    Critical,
}

impl Priority {
    /// The weight of this priority in a section's value (critical sections are never ranked).
    pub fn weight(self) -> f64 {
        match self {
            Priority::Low => 1.0,
            Priority::Medium => 2.0,
            Priority::High => 4.0,
            Priority::Critical => 8.0,
        }
    }
}
