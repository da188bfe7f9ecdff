//! The [`Merge`] trait: how `par` combines the end states of its branches.
//!
//! Ready-made joins live in [`crdt`](crate::crdt); `#[derive(Merge)]` makes a struct of them
//! merge-able field by field.

use std::marker::PhantomData;

/// A join of two states: `par` runs every branch from the pre-fork state and merges their end
/// states in declaration order with this.
///
/// Implementations must be a true join so the outcome never depends on which branch finished
/// first: commutative (`a ⊔ b = b ⊔ a`), associative (`(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`) and
/// idempotent (`a ⊔ a = a`). The types of [`crdt`](crate::crdt) are, and so is a struct of
/// them with `#[derive(Merge)]` (see the [`crdt`](crate::crdt) module for an example).
pub trait Merge {
    /// Merges `other` into `self`.
    fn merge(&mut self, other: Self);
}

impl Merge for () {
    fn merge(&mut self, _other: ()) {}
}

/// `None` is the bottom: merging `None` changes nothing, and `None` merged with `Some(x)` is
/// `Some(x)`. Two `Some`s merge their contents.
impl<T: Merge> Merge for Option<T> {
    fn merge(&mut self, other: Option<T>) {
        match (self.as_mut(), other) {
            (_, None) => {}
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (None, theirs) => *self = theirs,
        }
    }
}

/// Holds no data, so there is nothing to merge (this lets derived structs carry marker fields).
impl<T: ?Sized> Merge for PhantomData<T> {
    fn merge(&mut self, _other: PhantomData<T>) {}
}
