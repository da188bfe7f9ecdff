//! Dots (one write, named by its writer and that writer's sequence number) and the version
//! vectors that summarize which dots a replica has seen.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::TraceId;

/// One write: the `seq`-th write of `writer`. Unique as long as a writer id is used by one
/// replica at a time, which trace ids guarantee (concurrent branches have distinct ids).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct Dot {
    pub(crate) writer: TraceId,
    pub(crate) seq: u64,
}

/// For every writer, how many of its writes this replica has seen. A writer's writes are
/// sequential, so "the first `n`" describes them exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct VersionVector(BTreeMap<TraceId, u64>);

impl VersionVector {
    /// Records a new write by `writer` and returns its dot.
    pub(crate) fn next(&mut self, writer: &TraceId) -> Dot {
        let seq = self.0.entry(writer.clone()).or_insert(0);
        *seq = seq.saturating_add(1);
        Dot {
            writer: writer.clone(),
            seq: *seq,
        }
    }

    /// Whether this replica has seen `dot`.
    pub(crate) fn contains(&self, dot: &Dot) -> bool {
        self.0.get(&dot.writer).is_some_and(|&seen| dot.seq <= seen)
    }

    /// Pointwise max.
    pub(crate) fn merge(&mut self, other: VersionVector) {
        for (writer, seen) in other.0 {
            let mine = self.0.entry(writer).or_insert(0);
            *mine = (*mine).max(seen);
        }
    }
}

/// Serializes a `BTreeMap` as a list of `[key, value]` pairs, so keys need not be strings
/// (JSON objects only have string keys).
pub(crate) mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<K, V, S>(map: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize,
        V: Serialize,
        S: Serializer,
    {
        s.collect_seq(map)
    }

    pub(crate) fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}
