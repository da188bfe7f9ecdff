//! The data of [`op::infer`](crate::op::infer): what a program asks for, and what the trace
//! records about the context built for it.
//!
//! A program asks with a [`ContextRequest`] (the observation, an optional goal, a
//! [`ContextStrategy`] for gathering context and a [`TokenBudget`] for fitting it). The
//! interpreter hands it to the run's [`ContextPipeline`], which gathers sections from its
//! sources and compiles them into a [`Prompt`](crate::Prompt); the trace gets a
//! [`ContextReport`] saying what every source produced and what happened to every section
//! and tool. The sections, their compilation and the standard sources live in
//! `agent-prompt`; only what programs, interpreters and traces share is here.

mod budget;
mod pipeline;
mod report;
mod request;

pub use budget::{BudgetAllocation, ContextStrategy, TokenBudget};
pub use pipeline::{
    ContextError, ContextInput, ContextPipeline, PreparedContext, ResumeFn, Summarize,
};
pub use report::{
    CompileReport, ContextReport, DropReason, Outcome, SectionReport, SourceOutcome, SourceReport,
    ToolReport,
};
pub use request::{ContextRequest, Priority, SectionSource};
