//! [`GSet`]: a grow-only set.

use std::borrow::Borrow;
use std::collections::{BTreeSet, btree_set};

use serde::{Deserialize, Serialize};

use crate::Merge;

/// A set that only grows: merging takes the union. (To remove values too, use
/// [`ORSet`](super::ORSet).)
///
/// ```
/// use agent_op::Merge;
/// use agent_op::crdt::GSet;
///
/// let mut a: GSet<&str> = ["arxiv.org"].into_iter().collect();
/// let mut b = GSet::new();
/// b.insert("docs.rs");
/// a.merge(b);
/// assert_eq!(a.iter().copied().collect::<Vec<_>>(), ["arxiv.org", "docs.rs"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent, bound(deserialize = "T: Ord + Deserialize<'de>"))]
pub struct GSet<T> {
    items: BTreeSet<T>,
}

impl<T> GSet<T> {
    /// An empty set.
    pub fn new() -> GSet<T> {
        GSet {
            items: BTreeSet::new(),
        }
    }

    /// The values, in ascending order.
    pub fn iter(&self) -> btree_set::Iter<'_, T> {
        self.items.iter()
    }

    /// How many values the set holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<T: Ord> GSet<T> {
    /// Adds `value`; returns whether it was new.
    pub fn insert(&mut self, value: T) -> bool {
        self.items.insert(value)
    }

    /// Whether the set holds `value`.
    pub fn contains<Q>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.items.contains(value)
    }
}

impl<T> Default for GSet<T> {
    fn default() -> GSet<T> {
        GSet::new()
    }
}

impl<T: Ord> Merge for GSet<T> {
    fn merge(&mut self, other: GSet<T>) {
        self.items.extend(other.items);
    }
}

impl<T: Ord> FromIterator<T> for GSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> GSet<T> {
        GSet {
            items: iter.into_iter().collect(),
        }
    }
}

impl<T: Ord> Extend<T> for GSet<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        self.items.extend(iter);
    }
}

impl<'a, T> IntoIterator for &'a GSet<T> {
    type Item = &'a T;
    type IntoIter = btree_set::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}
