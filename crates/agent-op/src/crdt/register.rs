//! Registers that only move one way: [`MaxRegister`] and [`MinRegister`].

use serde::{Deserialize, Serialize};

use crate::Merge;

/// A value that only grows: [`set`](MaxRegister::set) and merging keep the larger value.
///
/// `T`'s `Ord` must agree with its `Eq` (values that compare equal are equal), as for every
/// well-behaved `Ord`.
///
/// `Default` starts at `T::default()`, which acts as a floor: a later `set` below it is
/// ignored. That is the right start when `T::default()` is `T`'s least value, as for unsigned
/// integers, `bool`, `String`, `Vec` and `Option`; for signed numbers start with
/// [`new`](MaxRegister::new) and the least value you need, or use `Option<MaxRegister<T>>`
/// (`None` is below everything).
///
/// ```
/// use agent_op::Merge;
/// use agent_op::crdt::MaxRegister;
///
/// let mut best = MaxRegister::new(3);
/// best.set(2);
/// assert_eq!(*best.get(), 3);
/// best.merge(MaxRegister::new(8));
/// assert_eq!(*best.get(), 8);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MaxRegister<T> {
    value: T,
}

impl<T: Ord> MaxRegister<T> {
    /// A register holding `value`.
    pub fn new(value: T) -> MaxRegister<T> {
        MaxRegister { value }
    }

    /// Keeps `value` if it is larger than the current value.
    pub fn set(&mut self, value: T) {
        if value > self.value {
            self.value = value;
        }
    }

    /// The largest value set so far.
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The value, consuming the register.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T: Ord> Merge for MaxRegister<T> {
    fn merge(&mut self, other: MaxRegister<T>) {
        self.set(other.value);
    }
}

/// A value that only shrinks: [`set`](MinRegister::set) and merging keep the smaller value.
///
/// `T`'s `Ord` must agree with its `Eq`. There is no `Default`: `T::default()` is usually the
/// least value (0, `""`, `false`), which would make every later `set` a no-op. Start with
/// [`new`](MinRegister::new), or use `Option<MinRegister<T>>` in a state that needs
/// `Default` (`None` means "nothing seen yet" and merges as the bottom).
///
/// ```
/// use agent_op::Merge;
/// use agent_op::crdt::MinRegister;
///
/// let mut cheapest = MinRegister::new(120);
/// cheapest.set(150);
/// assert_eq!(*cheapest.get(), 120);
/// cheapest.merge(MinRegister::new(95));
/// assert_eq!(*cheapest.get(), 95);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MinRegister<T> {
    value: T,
}

impl<T: Ord> MinRegister<T> {
    /// A register holding `value`.
    pub fn new(value: T) -> MinRegister<T> {
        MinRegister { value }
    }

    /// Keeps `value` if it is smaller than the current value.
    pub fn set(&mut self, value: T) {
        if value < self.value {
            self.value = value;
        }
    }

    /// The smallest value set so far.
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The value, consuming the register.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T: Ord> Merge for MinRegister<T> {
    fn merge(&mut self, other: MinRegister<T>) {
        self.set(other.value);
    }
}
