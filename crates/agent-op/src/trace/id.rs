//! Human-readable trace ids, with branch ids derived from their parent's.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Names a run (`brave-otter-3f2a`) or one of its branches (`brave-otter-3f2a.2`,
/// `brave-otter-3f2a.2.0`). Cheap to clone.
///
/// Branch ids are derived from the parent id and the branch's number: a run or branch numbers
/// the branches it forks in order, `.0`, `.1`, ... for its first `par` or `race`, continuing
/// (`.2`, `.3`, ...) for the next one, so ids are unique within a run and every interpreter
/// names the same branch the same way.
///
/// ```
/// use agent_op::TraceId;
/// let root = TraceId::from("brave-otter-3f2a");
/// let branch = root.child(2);
/// assert_eq!(branch.as_str(), "brave-otter-3f2a.2");
/// assert_eq!(branch.parent(), Some(root.clone()));
/// assert_eq!(branch.child(0).root(), "brave-otter-3f2a");
/// ```
///
/// Ids order by their path: a run before its branches, and sibling branches by number
/// (`run.2` before `run.10`), so anything ordered by writer id — an
/// [`AppendLog`](crate::crdt::AppendLog)'s concurrent entries — follows the branches'
/// declaration order.
///
/// ```
/// use agent_op::TraceId;
/// let run = TraceId::from("brave-otter-3f2a");
/// let mut ids = vec![run.child(10), run.child(2), run.child(2).child(0), run.clone()];
/// ids.sort();
/// assert_eq!(ids, [run.clone(), run.child(2), run.child(2).child(0), run.child(10)]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceId(Arc<str>);

impl Ord for TraceId {
    /// Segment by segment (split at `.`): numbers by value, anything else by bytes, a prefix
    /// first. Equal only for equal strings, as `Eq` says.
    fn cmp(&self, other: &TraceId) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        let (mut a, mut b) = (self.0.split('.'), other.0.split('.'));
        loop {
            match (a.next(), b.next()) {
                (None, None) => return Ordering::Equal,
                (None, Some(_)) => return Ordering::Less,
                (Some(_), None) => return Ordering::Greater,
                (Some(x), Some(y)) => match compare_segments(x, y) {
                    Ordering::Equal => {}
                    unequal => return unequal,
                },
            }
        }
    }
}

impl PartialOrd for TraceId {
    fn partial_cmp(&self, other: &TraceId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Two path segments: by numeric value when both are numbers (without parsing, so any length
/// works; leading zeros, which this crate never writes, break ties by bytes), else by bytes.
fn compare_segments(x: &str, y: &str) -> std::cmp::Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if numeric(x) && numeric(y) {
        let (xs, ys) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
        xs.len()
            .cmp(&ys.len())
            .then_with(|| xs.cmp(ys))
            .then_with(|| x.cmp(y))
    } else {
        x.cmp(y)
    }
}

const ADJECTIVES: [&str; 64] = [
    "amber", "ancient", "bold", "brave", "bright", "brisk", "calm", "clever", "cosmic", "crisp",
    "curious", "daring", "dawn", "deft", "eager", "early", "fancy", "fierce", "gentle", "glad",
    "golden", "grand", "happy", "hidden", "humble", "icy", "jolly", "keen", "kind", "lively",
    "lucky", "lunar", "merry", "misty", "modest", "noble", "nimble", "odd", "patient", "plucky",
    "proud", "quick", "quiet", "rapid", "rare", "restless", "rosy", "rustic", "shy", "silent",
    "silver", "sleek", "smooth", "snowy", "solar", "steady", "stormy", "sunny", "swift", "tidy",
    "vivid", "warm", "wild", "wise",
];

const NOUNS: [&str; 64] = [
    "badger", "beacon", "bear", "bison", "brook", "canyon", "cedar", "comet", "condor", "coral",
    "crane", "dune", "eagle", "ember", "falcon", "fern", "finch", "fjord", "fox", "glacier",
    "grove", "harbor", "hawk", "heron", "ibis", "island", "jaguar", "koala", "lark", "lynx",
    "maple", "marten", "meadow", "moose", "moth", "newt", "oak", "orca", "otter", "owl", "panda",
    "pebble", "pine", "prairie", "quail", "raven", "reef", "river", "robin", "sparrow", "spruce",
    "stone", "summit", "swan", "thistle", "tiger", "tundra", "valley", "walrus", "willow", "wolf",
    "wren", "yak", "zebra",
];

/// 28 random-looking bits per call, without a dependency on a random-number crate.
///
/// A process-wide counter goes through a permutation of the 28-bit space keyed by
/// `RandomState` (which the OS seeds), so the first 2^28 ids of a process are all distinct and
/// different processes get different sequences. (Hashing the counter and truncating the hash
/// to 28 bits would repeat an id within 10,000 draws about one time in six.)
fn random_bits() -> u64 {
    const MASK: u64 = (1 << 28) - 1;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static KEY: OnceLock<u64> = OnceLock::new();
    let key = *KEY.get_or_init(|| RandomState::new().build_hasher().finish());
    let mut x = COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_add(key) & MASK;
    // Every step is a bijection of 28-bit values: multiplying by an odd number, xor-shifting
    // right, and xoring a constant.
    for round in 0..3 {
        x = x.wrapping_mul(0x9e37_79b1) & MASK;
        x ^= x >> 15;
        x ^= (key >> (12 * round + 28)) & MASK;
    }
    x
}

impl TraceId {
    /// A fresh random id such as `brave-otter-3f2a`.
    pub fn random() -> TraceId {
        let r = random_bits();
        let adjective = ADJECTIVES[(r & 63) as usize];
        let noun = NOUNS[((r >> 6) & 63) as usize];
        let suffix = (r >> 12) & 0xffff;
        TraceId(format!("{adjective}-{noun}-{suffix:04x}").into())
    }

    /// The id of branch `index` of this trace.
    pub fn child(&self, index: usize) -> TraceId {
        // Forks create one id per branch, so build it in a stack buffer: one allocation (the
        // `Arc`), no formatting machinery.
        let mut digits = [0u8; 20];
        let mut n = index;
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = &digits[start..];
        let mut buf = [0u8; 96];
        let len = self.0.len() + 1 + digits.len();
        if len > buf.len() {
            return TraceId(format!("{}.{index}", self.0).into());
        }
        buf[..self.0.len()].copy_from_slice(self.0.as_bytes());
        buf[self.0.len()] = b'.';
        buf[self.0.len() + 1..len].copy_from_slice(digits);
        match std::str::from_utf8(&buf[..len]) {
            Ok(id) => TraceId(id.into()),
            // Unreachable (a valid id plus ASCII), but never worth a panic.
            Err(_) => TraceId(format!("{}.{index}", self.0).into()),
        }
    }

    /// The id of the trace this branch forked from, if it is a branch.
    pub fn parent(&self) -> Option<TraceId> {
        let (head, tail) = self.0.rsplit_once('.')?;
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(TraceId(head.into()))
    }

    /// The run's id: this id without any branch suffix.
    pub fn root(&self) -> &str {
        match self.0.find('.') {
            Some(i) => &self.0[..i],
            None => &self.0,
        }
    }

    /// How many forks deep this branch is (0 for a run).
    pub fn depth(&self) -> usize {
        self.0.bytes().filter(|&b| b == b'.').count()
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for TraceId {
    fn from(s: &str) -> TraceId {
        TraceId(s.into())
    }
}

impl From<String> for TraceId {
    fn from(s: String) -> TraceId {
        TraceId(s.into())
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for TraceId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TraceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TraceId, D::Error> {
        struct IdVisitor;
        impl serde::de::Visitor<'_> for IdVisitor {
            type Value = TraceId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a trace id string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<TraceId, E> {
                Ok(TraceId::from(s))
            }
        }
        d.deserialize_str(IdVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_readable_and_distinct() {
        let a = TraceId::random();
        let b = TraceId::random();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.as_str().split('-').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert!(ADJECTIVES.contains(&parts[0]));
        assert!(NOUNS.contains(&parts[1]));
        assert_eq!(parts[2].len(), 4);
        assert_eq!(a.depth(), 0);
        assert_eq!(a.parent(), None);
    }

    #[test]
    fn branch_ids_nest() {
        let root = TraceId::from("calm-owl-0001");
        let leaf = root.child(3).child(10);
        assert_eq!(leaf.as_str(), "calm-owl-0001.3.10");
        assert_eq!(leaf.depth(), 2);
        assert_eq!(leaf.parent(), Some(root.child(3)));
        assert_eq!(leaf.root(), "calm-owl-0001");
    }
}
