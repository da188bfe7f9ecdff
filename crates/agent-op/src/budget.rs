//! Budgets for `limit`, and what `limit` and `timeout` return when they cut a program short.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cost::MicroUsd;
use crate::serde_util::{duration_ms, opt_duration_ms};

/// Limits on what a program may spend. Unset limits are unlimited.
///
/// ```
/// use std::time::Duration;
/// use agent_op::{Budget, MicroUsd};
/// let b = Budget::new().calls(10).tokens(50_000).cost(MicroUsd::from_dollars(0.50)).time(Duration::from_secs(60));
/// assert_eq!(b.calls, Some(10));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Budget {
    /// Most money the program may spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<MicroUsd>,
    /// Most tokens (input plus output) it may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Most wall time it may take (serialized as milliseconds).
    #[serde(
        default,
        with = "opt_duration_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub time: Option<Duration>,
    /// Most model calls it may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
}

impl Budget {
    /// An unlimited budget.
    pub fn new() -> Budget {
        Budget::default()
    }

    /// Limits money.
    pub fn cost(mut self, limit: MicroUsd) -> Budget {
        self.cost = Some(limit);
        self
    }

    /// Limits tokens.
    pub fn tokens(mut self, limit: u64) -> Budget {
        self.tokens = Some(limit);
        self
    }

    /// Limits wall time.
    pub fn time(mut self, limit: Duration) -> Budget {
        self.time = Some(limit);
        self
    }

    /// Limits model calls.
    pub fn calls(mut self, limit: u64) -> Budget {
        self.calls = Some(limit);
        self
    }
}

/// A budgeted resource.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Resource {
    /// Money, in micro-dollars.
    Cost,
    /// Tokens.
    Tokens,
    /// Wall time, in milliseconds.
    Time,
    /// Model calls.
    Calls,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Cost => "cost",
            Resource::Tokens => "tokens",
            Resource::Time => "time",
            Resource::Calls => "calls",
        })
    }
}

/// A budget ran out. `spent` and `limit` are in the resource's unit (micro-dollars, tokens,
/// milliseconds or calls).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{resource} budget exhausted: spent {spent} of {limit}")]
pub struct Exhausted {
    /// Which resource.
    pub resource: Resource,
    /// How much was spent when the program was stopped.
    pub spent: u64,
    /// The limit.
    pub limit: u64,
}

/// A `timeout` passed before its program finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("timed out after {limit:?}")]
pub struct TimedOut {
    /// The time limit (serialized as milliseconds).
    #[serde(with = "duration_ms")]
    pub limit: Duration,
}
