//! Counters: [`GCounter`] (grow-only) and [`PNCounter`] (up and down).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Merge, TraceId};

/// A grow-only counter: every writer counts its own increments, and the value is their sum.
///
/// Merging takes each writer's larger count, so increments made in different branches all
/// count, and merging the same branch twice counts it once. Counts saturate at `u64::MAX`.
///
/// ```
/// use agent_op::{Merge, TraceId};
/// use agent_op::crdt::GCounter;
///
/// let run = TraceId::from("brave-otter-3f2a");
/// let mut base = GCounter::default();
/// base.increment(&run, 1);
///
/// let (mut a, mut b) = (base.clone(), base);
/// a.increment(&run.child(0), 2);
/// b.increment(&run.child(1), 3);
/// a.merge(b);
/// assert_eq!(a.value(), 6);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GCounter {
    counts: BTreeMap<TraceId, u64>,
}

impl GCounter {
    /// A counter at zero.
    pub fn new() -> GCounter {
        GCounter::default()
    }

    /// Adds `by` to the count of `writer` (the id of the run or branch making the change).
    pub fn increment(&mut self, writer: &TraceId, by: u64) {
        if by == 0 {
            return;
        }
        let count = self.counts.entry(writer.clone()).or_insert(0);
        *count = count.saturating_add(by);
    }

    /// The total over all writers (saturating at `u64::MAX`).
    pub fn value(&self) -> u64 {
        self.counts
            .values()
            .fold(0, |sum, &n| sum.saturating_add(n))
    }

    /// How much `writer` has added.
    pub fn count_of(&self, writer: &TraceId) -> u64 {
        self.counts.get(writer).copied().unwrap_or(0)
    }
}

impl Merge for GCounter {
    fn merge(&mut self, other: GCounter) {
        for (writer, theirs) in other.counts {
            let mine = self.counts.entry(writer).or_insert(0);
            *mine = (*mine).max(theirs);
        }
    }
}

/// A counter that goes up and down: two [`GCounter`]s, one of increments and one of
/// decrements.
///
/// ```
/// use agent_op::{Merge, TraceId};
/// use agent_op::crdt::PNCounter;
///
/// let run = TraceId::from("brave-otter-3f2a");
/// let (mut a, mut b) = (PNCounter::default(), PNCounter::default());
/// a.increment(&run.child(0), 5);
/// b.decrement(&run.child(1), 7);
/// a.merge(b);
/// assert_eq!(a.value(), -2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PNCounter {
    increments: GCounter,
    decrements: GCounter,
}

impl PNCounter {
    /// A counter at zero.
    pub fn new() -> PNCounter {
        PNCounter::default()
    }

    /// Adds `by`, as `writer`.
    pub fn increment(&mut self, writer: &TraceId, by: u64) {
        self.increments.increment(writer, by);
    }

    /// Subtracts `by`, as `writer`.
    pub fn decrement(&mut self, writer: &TraceId, by: u64) {
        self.decrements.increment(writer, by);
    }

    /// All increments minus all decrements.
    pub fn value(&self) -> i128 {
        i128::from(self.increments.value()) - i128::from(self.decrements.value())
    }
}

impl Merge for PNCounter {
    fn merge(&mut self, other: PNCounter) {
        self.increments.merge(other.increments);
        self.decrements.merge(other.decrements);
    }
}
