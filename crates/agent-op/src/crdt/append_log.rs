//! [`AppendLog`]: an append-only log whose merged order is the same everywhere.

use std::collections::BTreeMap;

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};

use crate::{Merge, TraceId};

/// Where an entry sits in the log: its Lamport position, then its writer to order concurrent
/// appends.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key {
    position: u64,
    writer: TraceId,
}

/// An append-only log. Merging takes the union of the entries, and every replica orders them
/// the same way.
///
/// Each [`append`](AppendLog::append) gets a Lamport position one past the last entry the
/// replica holds, and the log is ordered by `(position, writer)`. So an entry comes after
/// every entry its writer had seen when appending it (in particular, each writer's own entries
/// stay in the order it appended them), and concurrent appends from different branches are
/// ordered by position, then by writer id: never by wall-clock time or by the order in which
/// branches were merged.
///
/// ```
/// use agent_op::{Merge, TraceId};
/// use agent_op::crdt::AppendLog;
///
/// let run = TraceId::from("brave-otter-3f2a");
/// let mut base = AppendLog::new();
/// base.append("start", &run);
///
/// let (mut a, mut b) = (base.clone(), base);
/// b.append("b: searched", &run.child(1));
/// b.append("b: read", &run.child(1));
/// a.append("a: planned", &run.child(0));
///
/// let mut ab = a.clone();
/// ab.merge(b.clone());
/// b.merge(a);
/// assert_eq!(ab, b);
/// assert_eq!(
///     ab.iter().copied().collect::<Vec<_>>(),
///     ["start", "a: planned", "b: searched", "b: read"],
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendLog<T> {
    entries: BTreeMap<Key, T>,
}

impl<T> AppendLog<T> {
    /// An empty log.
    pub fn new() -> AppendLog<T> {
        AppendLog {
            entries: BTreeMap::new(),
        }
    }

    /// Appends `item` as `writer` (the id of the run or branch making the change).
    pub fn append(&mut self, item: T, writer: &TraceId) {
        let last = self
            .entries
            .last_key_value()
            .map_or(0, |(key, _)| key.position);
        let key = Key {
            position: last.saturating_add(1),
            writer: writer.clone(),
        };
        self.entries.insert(key, item);
    }

    /// The items, in the log's order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.entries.values()
    }

    /// The items with their writers, in the log's order.
    pub fn iter_with_writers(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&TraceId, &T)> + ExactSizeIterator {
        self.entries.iter().map(|(key, item)| (&key.writer, item))
    }

    /// The last item in the log's order.
    pub fn last(&self) -> Option<&T> {
        self.entries.values().next_back()
    }

    /// How many items the log holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<T> Default for AppendLog<T> {
    fn default() -> AppendLog<T> {
        AppendLog::new()
    }
}

impl<T> Merge for AppendLog<T> {
    /// The union of the entries. An entry both sides hold is the same append (a writer's
    /// positions only grow), so either copy can be kept.
    fn merge(&mut self, other: AppendLog<T>) {
        if self.entries.is_empty() {
            self.entries = other.entries;
            return;
        }
        for (key, item) in other.entries {
            self.entries.entry(key).or_insert(item);
        }
    }
}

/// One entry as serialized: `{"position": 3, "writer": "brave-otter-3f2a.1", "item": ...}`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry<W, T> {
    position: u64,
    writer: W,
    item: T,
}

/// A list of entries in the log's order.
impl<T: Serialize> Serialize for AppendLog<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.entries.iter().map(|(key, item)| Entry {
            position: key.position,
            writer: &key.writer,
            item,
        }))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for AppendLog<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AppendLog<T>, D::Error> {
        let entries = Vec::<Entry<TraceId, T>>::deserialize(d)?;
        Ok(AppendLog {
            entries: entries
                .into_iter()
                .map(|e| {
                    let key = Key {
                        position: e.position,
                        writer: e.writer,
                    };
                    (key, e.item)
                })
                .collect(),
        })
    }
}
