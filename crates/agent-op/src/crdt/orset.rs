//! [`ORSet`]: an observed-remove set, where an add wins over a concurrent remove.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::dot::{Dot, VersionVector, pairs};
use crate::{Merge, TraceId};

/// A set with adds and removes, where a remove only cancels the adds it has seen.
///
/// Every [`add`](ORSet::add) is tagged with a unique dot (its writer and that writer's
/// sequence number). [`remove`](ORSet::remove) drops the dots this replica holds for the
/// value; a concurrent add in another branch has a dot this replica never saw, so it survives
/// the merge: the add wins. (A remove in one branch still cancels adds the branch inherited
/// from before the fork.)
///
/// The set remembers, per writer, how many adds it has seen, but keeps no tombstones: removed
/// values take no space.
///
/// ```
/// use agent_op::{Merge, TraceId};
/// use agent_op::crdt::ORSet;
///
/// let run = TraceId::from("brave-otter-3f2a");
/// let mut base = ORSet::new();
/// base.add("todo: flights", &run);
/// base.add("todo: hotel", &run);
///
/// let (mut a, mut b) = (base.clone(), base);
/// a.remove(&"todo: flights"); // done in branch 0
/// a.remove(&"todo: hotel");
/// b.add("todo: hotel", &run.child(1)); // concurrently re-added in branch 1
///
/// a.merge(b);
/// assert_eq!(a.iter().copied().collect::<Vec<_>>(), ["todo: hotel"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(serialize = "T: Serialize", deserialize = "T: Ord + Deserialize<'de>"))]
pub struct ORSet<T> {
    /// The live dots of each value present (never an empty set).
    #[serde(with = "pairs")]
    entries: BTreeMap<T, BTreeSet<Dot>>,
    /// Every dot this replica has seen, live or removed.
    seen: VersionVector,
}

impl<T> ORSet<T> {
    /// An empty set.
    pub fn new() -> ORSet<T> {
        ORSet {
            entries: BTreeMap::new(),
            seen: VersionVector::default(),
        }
    }

    /// The values present, in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.entries.keys()
    }

    /// How many values are present.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no value is present.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<T: Ord> ORSet<T> {
    /// Adds `value` as `writer` (the id of the run or branch making the change).
    pub fn add(&mut self, value: T, writer: &TraceId) {
        let dot = self.seen.next(writer);
        // The new dot supersedes the ones this replica holds for the value: they are all in
        // `seen`, so dropping them here is what a merge with this state would do anyway.
        self.entries.insert(value, BTreeSet::from([dot]));
    }

    /// Removes `value` (every add of it this replica has seen); returns whether it was
    /// present.
    pub fn remove<Q>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.remove(value).is_some()
    }

    /// Whether `value` is present.
    pub fn contains<Q>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.contains_key(value)
    }
}

impl<T> Default for ORSet<T> {
    fn default() -> ORSet<T> {
        ORSet::new()
    }
}

impl<T: Ord> Merge for ORSet<T> {
    /// A dot survives if both sides hold it, or if one side holds it and the other has never
    /// seen it (so it cannot have removed it).
    fn merge(&mut self, other: ORSet<T>) {
        let ORSet {
            entries: mut theirs,
            seen: their_seen,
        } = other;
        let my_seen = &self.seen;
        self.entries.retain(|value, dots| {
            let their_dots = theirs.remove(value).unwrap_or_default();
            dots.retain(|dot| their_dots.contains(dot) || !their_seen.contains(dot));
            dots.extend(their_dots.into_iter().filter(|dot| !my_seen.contains(dot)));
            !dots.is_empty()
        });
        for (value, dots) in theirs {
            let dots: BTreeSet<Dot> = dots.into_iter().filter(|d| !my_seen.contains(d)).collect();
            if !dots.is_empty() {
                self.entries.insert(value, dots);
            }
        }
        self.seen.merge(their_seen);
    }
}
