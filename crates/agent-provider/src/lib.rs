//! # agent-provider: model providers
//!
//! Implementations of the [`Provider`](agent_op::Provider) trait.
//!
//! - [`ScriptedProvider`]: answers from a script or a function and records every call, so
//!   programs can be tested deterministically without a model.

mod scripted;

pub use scripted::{RecordedCall, ScriptReport, ScriptedProvider};
