//! [`MergeMap`]: a map whose values merge key by key.

use std::borrow::Borrow;
use std::collections::{BTreeMap, btree_map};

use serde::{Deserialize, Serialize};

use crate::Merge;

/// A map from keys to merge-able values. Merging merges the values of keys both sides hold
/// and keeps the keys only one side holds. Keys are never removed (put an
/// [`ORSet`](super::ORSet) or an `Option` in the value to model absence).
///
/// Serialized as a map, so in JSON (checkpoints) keys must serialize as strings or integers.
///
/// ```
/// use agent_op::{Merge, TraceId};
/// use agent_op::crdt::{GCounter, MergeMap};
///
/// let run = TraceId::from("brave-otter-3f2a");
/// let (mut a, mut b) = (MergeMap::new(), MergeMap::new());
/// a.update("search", |n: &mut GCounter| n.increment(&run.child(0), 2));
/// b.update("search", |n: &mut GCounter| n.increment(&run.child(1), 1));
/// b.update("fetch", |n: &mut GCounter| n.increment(&run.child(1), 4));
///
/// a.merge(b);
/// assert_eq!(a.get(&"search").map(GCounter::value), Some(3));
/// assert_eq!(a.get(&"fetch").map(GCounter::value), Some(4));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(
    transparent,
    bound(
        serialize = "K: Serialize, V: Serialize",
        deserialize = "K: Ord + Deserialize<'de>, V: Deserialize<'de>"
    )
)]
pub struct MergeMap<K, V> {
    entries: BTreeMap<K, V>,
}

impl<K, V> MergeMap<K, V> {
    /// An empty map.
    pub fn new() -> MergeMap<K, V> {
        MergeMap {
            entries: BTreeMap::new(),
        }
    }

    /// The entries, in ascending key order.
    pub fn iter(&self) -> btree_map::Iter<'_, K, V> {
        self.entries.iter()
    }

    /// The keys, in ascending order.
    pub fn keys(&self) -> btree_map::Keys<'_, K, V> {
        self.entries.keys()
    }

    /// The values, in ascending key order.
    pub fn values(&self) -> btree_map::Values<'_, K, V> {
        self.entries.values()
    }

    /// How many keys the map holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<K: Ord, V> MergeMap<K, V> {
    /// The value at `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get(key)
    }

    /// The value at `key`, to change through its own operations.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get_mut(key)
    }

    /// Whether the map holds `key`.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.contains_key(key)
    }

    /// Changes the value at `key` with `f`, starting from `V::default()` if the key is new.
    pub fn update(&mut self, key: K, f: impl FnOnce(&mut V))
    where
        V: Default,
    {
        f(self.entries.entry(key).or_default());
    }

    /// Merges `value` into the value at `key`, or inserts it if the key is new.
    pub fn merge_in(&mut self, key: K, value: V)
    where
        V: Merge,
    {
        match self.entries.entry(key) {
            btree_map::Entry::Occupied(mut mine) => mine.get_mut().merge(value),
            btree_map::Entry::Vacant(slot) => {
                slot.insert(value);
            }
        }
    }
}

impl<K, V> Default for MergeMap<K, V> {
    fn default() -> MergeMap<K, V> {
        MergeMap::new()
    }
}

impl<K: Ord, V: Merge> Merge for MergeMap<K, V> {
    fn merge(&mut self, other: MergeMap<K, V>) {
        for (key, value) in other.entries {
            self.merge_in(key, value);
        }
    }
}

impl<K: Ord, V: Merge> FromIterator<(K, V)> for MergeMap<K, V> {
    /// Collects the pairs, merging the values of repeated keys.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> MergeMap<K, V> {
        let mut map = MergeMap::new();
        for (key, value) in iter {
            map.merge_in(key, value);
        }
        map
    }
}

impl<'a, K, V> IntoIterator for &'a MergeMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = btree_map::Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}
