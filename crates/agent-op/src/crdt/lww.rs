//! [`LwwRegister`]: the last write wins, by logical clock and then by writer id.

use serde::{Deserialize, Serialize};

use crate::{Merge, TraceId};

/// A value where the last write wins.
///
/// "Last" is logical, never wall-clock time: each [`set`](LwwRegister::set) advances a Lamport
/// clock (one past the clock of the latest write this replica has seen), and merging keeps
/// the write with the larger `(clock, writer)`. A write made after seeing another therefore
/// always wins over it, and two concurrent writes at the same clock are ordered by their
/// writers' ids (`brave-otter-3f2a.1` beats `brave-otter-3f2a.0`), so every interpreter and
/// every merge order picks the same one.
///
/// The initial value of [`new`](LwwRegister::new) (and `Default`) is at clock 0 with no
/// writer, below every write. Replicas that merge should start from clones of one register,
/// as `par` branches do; two registers built separately with different initial values and
/// never written have no deterministic winner.
///
/// ```
/// use agent_op::{Merge, TraceId};
/// use agent_op::crdt::LwwRegister;
///
/// let run = TraceId::from("brave-otter-3f2a");
/// let base = LwwRegister::new("draft");
///
/// // Concurrent writes at the same clock: the larger writer id wins.
/// let (mut a, mut b) = (base.clone(), base.clone());
/// a.set("plan A", &run.child(0));
/// b.set("plan B", &run.child(1));
/// a.merge(b.clone());
/// assert_eq!(*a.get(), "plan B");
///
/// // A replica that wrote twice is at a later clock, and wins whatever its id.
/// let mut c = base;
/// c.set("plan C", &run.child(0));
/// c.set("plan C, revised", &run.child(0));
/// c.merge(b);
/// assert_eq!(*c.get(), "plan C, revised");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LwwRegister<T> {
    value: T,
    clock: u64,
    writer: Option<TraceId>,
}

impl<T> LwwRegister<T> {
    /// A register holding `value` at clock 0, below every write.
    pub fn new(value: T) -> LwwRegister<T> {
        LwwRegister {
            value,
            clock: 0,
            writer: None,
        }
    }

    /// Writes `value` as `writer` (the id of the run or branch making the change), at the next
    /// clock tick.
    pub fn set(&mut self, value: T, writer: &TraceId) {
        self.value = value;
        self.clock = self.clock.saturating_add(1);
        self.writer = Some(writer.clone());
    }

    /// The current value.
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The Lamport clock of the current value's write (0 for the initial value).
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Who wrote the current value (`None` for the initial value).
    pub fn writer(&self) -> Option<&TraceId> {
        self.writer.as_ref()
    }

    /// The value, consuming the register.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> Merge for LwwRegister<T> {
    /// Keeps the write with the larger `(clock, writer)`. Equal keys name the same write (a
    /// writer id is used by one replica at a time, and each of its writes advances the clock),
    /// so they hold the same value and either can be kept.
    fn merge(&mut self, other: LwwRegister<T>) {
        if (other.clock, other.writer.as_ref()) > (self.clock, self.writer.as_ref()) {
            *self = other;
        }
    }
}
