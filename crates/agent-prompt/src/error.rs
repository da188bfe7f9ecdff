//! [`PromptError`]: why an IR could not be compiled.

/// Why an IR could not be compiled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// There is nothing to send: no section has content and the observation is empty.
    #[error("the prompt is empty: no section has content and there is no observation")]
    Empty,
    /// Two sections have the same id.
    #[error("two sections have the id `{id}`: section ids must be unique")]
    DuplicateSectionId {
        /// The id.
        id: String,
    },
    /// The critical sections, critical tools and the observation alone need more tokens
    /// than the budget makes available.
    #[error(
        "the critical sections, critical tools and observation need {needed} tokens but the budget makes {available} available ({} over)",
        .needed.saturating_sub(*.available)
    )]
    CriticalOverBudget {
        /// The tokens they need.
        needed: u32,
        /// The tokens available: total × (1 − reserve ratio).
        available: u32,
    },
}
