//! The [`Merge`] trait: how `par` combines the end states of its branches.

/// A join of two states: `par` runs every branch from the pre-fork state and merges their end
/// states in declaration order with this.
///
/// Implementations must be a true join so the outcome never depends on which branch finished
/// first: commutative (`a ⊔ b = b ⊔ a`), associative (`(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`) and
/// idempotent (`a ⊔ a = a`).
pub trait Merge {
    /// Merges `other` into `self`.
    fn merge(&mut self, other: Self);
}

impl Merge for () {
    fn merge(&mut self, _other: ()) {}
}
