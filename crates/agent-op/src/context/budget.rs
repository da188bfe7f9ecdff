//! [`TokenBudget`], [`BudgetAllocation`] and [`ContextStrategy`]: how much context, and how
//! to gather it.

use serde::{Deserialize, Serialize};

/// How many tokens a compiled prompt may use.
///
/// The sections, tools and observation get `total × (1 − reserve_ratio)`; the reserve is
/// headroom for the model's answer and for counting error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenBudget {
    /// The context window to fill, in tokens.
    pub total: u32,
    /// The share of `total` kept free, 0–1 (values outside are clamped).
    pub reserve_ratio: f32,
    /// How the budget is shared out.
    #[serde(default)]
    pub allocation: BudgetAllocation,
}

impl TokenBudget {
    /// A budget of `total` tokens with a 10% reserve, allocated by relevance.
    pub fn new(total: u32) -> TokenBudget {
        TokenBudget {
            total,
            reserve_ratio: 0.1,
            allocation: BudgetAllocation::RelevanceWeighted,
        }
    }

    /// With `ratio` of the total kept free.
    pub fn with_reserve(mut self, ratio: f32) -> TokenBudget {
        self.reserve_ratio = ratio;
        self
    }

    /// With `allocation`.
    pub fn with_allocation(mut self, allocation: BudgetAllocation) -> TokenBudget {
        self.allocation = allocation;
        self
    }

    /// The tokens the prompt may use: `total × (1 − reserve_ratio)`, rounded down. A NaN
    /// reserve counts as no reserve.
    pub fn available(&self) -> u32 {
        let reserve = if self.reserve_ratio.is_nan() {
            0.0
        } else {
            // Rounded to six places: 0.1f32 is 0.10000000149 as f64, which would cost a
            // token of a round budget.
            (f64::from(self.reserve_ratio).clamp(0.0, 1.0) * 1e6).round() / 1e6
        };
        // Both factors are in range, so the product is in 0..=total.
        (f64::from(self.total) * (1.0 - reserve)).floor() as u32
    }

    /// The reserved tokens: `total − available()`.
    pub fn reserve(&self) -> u32 {
        self.total - self.available()
    }
}

impl Default for TokenBudget {
    fn default() -> Self {
        TokenBudget::new(8_192)
    }
}

/// How a budget is shared among sections.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetAllocation {
    /// Fixed shares of the available tokens, each a cap: `system` for hierarchical and
    /// constraint sections, `context` for the other sections and the tools, `observation`
    /// for the observation. Shares are normalised when they sum to more than 1.
    FixedRatios {
        /// The share of system sections.
        system: f32,
        /// The share of context sections and tools.
        context: f32,
        /// The share of the observation.
        observation: f32,
    },
    /// Sections are ranked by priority × information density × recency, where information
    /// density is the share of distinct words among a section's words (a cheap proxy: a
    /// repetitive log is worth less per token than varied prose).
    InformationWeighted,
    /// Sections are ranked by priority × relevance × recency (the default).
    #[default]
    RelevanceWeighted,
}

/// How to gather the context of a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextStrategy {
    /// How many of the most recent conversation messages to include.
    pub temporal_window: usize,
    /// The most memory entries a semantic search returns.
    pub semantic_limit: usize,
    /// The least similarity (0–1) a semantic match needs.
    pub semantic_threshold: f32,
    /// How a section's value decays with its age, per hour (0.995: about 11% a day).
    pub recency_decay: f32,
    /// Whether long-term knowledge is included.
    pub include_knowledge: bool,
}

impl Default for ContextStrategy {
    fn default() -> Self {
        ContextStrategy {
            temporal_window: 20,
            semantic_limit: 5,
            semantic_threshold: 0.3,
            recency_decay: 0.995,
            include_knowledge: true,
        }
    }
}
