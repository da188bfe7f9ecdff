//! # agent-prompt: the context window as data
//!
//! A model call's context is built, not written: labeled [`Section`]s from different
//! sources (instructions, the recent conversation, memories, values from the program's
//! state), each with a priority, a relevance, a time and a size in tokens, plus the tools
//! and the observation to answer. That is a [`PromptIr`]. [`compile`] turns it into the
//! [`Prompt`](agent_op::Prompt) providers take, under a [`TokenBudget`]: critical sections
//! always, the rest by rank, shrunk before dropped — and says in a [`CompileReport`] what
//! happened to every section and why.
//!
//! - [`section`](Section): [`Section`], [`SectionSource`], [`SectionContent`], [`Priority`],
//!   [`CompositionMode`];
//! - [`ir`](PromptIr): [`PromptIr`], [`ToolDef`], [`PromptMeta`], and the [`ContextRequest`]
//!   an IR is hydrated from;
//! - budget: [`TokenBudget`], [`BudgetAllocation`], [`ContextStrategy`];
//! - tokens: [`TokenCounter`] and [`Encoding`] — OpenAI's o200k_base and cl100k_base by
//!   model name, an approximation for other models, counts cached by content hash;
//! - [`compile`], [`compose`], and the embedding heuristics [`estimate_impact`] and
//!   [`equivalent`].
//!
//! Compilation does no I/O. Only the hydration sources reach outside: [`Static::file`]
//! reads its file once, on first use (a small blocking read: prompt files are meant to be
//! small), and the memory sources go through the `MemoryBackend` they are given.
//!
//! ```
//! use agent_prompt::{compile, Priority, PromptIr, PromptMeta, Section, TokenBudget, TokenCounter};
//!
//! let counter = TokenCounter::for_model("gpt-4o-mini");
//! let now = chrono::Utc::now();
//! let mut ir = PromptIr::new("What did we decide?", PromptMeta::new(TokenBudget::new(60), now))
//!     .section(Section::text("rules", "## Rules", "Answer in one sentence.").with_priority(Priority::Critical))
//!     .section(Section::text("notes", "## Notes", "lorem ipsum dolor ".repeat(100)).with_priority(Priority::Low));
//! ir.count(&counter);
//! let compiled = compile(&ir, &counter)?;
//! assert!(compiled.report.tokens_after <= 54); // 60 tokens minus a 10% reserve
//! assert!(!compiled.report.sections[1].outcome.is_sent()); // the notes did not fit
//! # Ok::<(), agent_prompt::PromptError>(())
//! ```

mod analysis;
mod compile;
mod compose;
mod error;
mod hydrate;
mod ir;
mod pipeline;
mod render;
mod section;
mod tokens;
mod units;

pub use agent_op::context::{
    BudgetAllocation, CompileReport, ContextRequest, ContextStrategy, DropReason, Outcome,
    Priority, SectionReport, SectionSource, TokenBudget, ToolReport,
};
pub use analysis::{equivalent, estimate_impact};
pub use compile::{Compiled, compile};
pub use compose::compose;
pub use error::PromptError;
pub use hydrate::{
    Conditional, ContextSource, Conversation, FromState, Hydrated, Knowledge, Recalled, Semantic,
    SourceError, SourceFuture, Static,
};
pub use ir::{PromptIr, PromptMeta, ToolDef};
pub use pipeline::Pipeline;
pub use section::{CompositionMode, Section, SectionContent};
pub use tokens::{Encoding, MESSAGE_OVERHEAD, REPLY_PRIMING, TOOL_OVERHEAD, TokenCounter};
pub use units::message_units;
