//! `#[derive(Merge)]`: named, tuple, unit and generic structs, and that a derived merge is the
//! field-by-field merge.

#![cfg(feature = "derive")]

use std::marker::PhantomData;

use agent_op::crdt::{AppendLog, GCounter, GSet, LwwRegister, MaxRegister, ORSet};
use agent_op::{Merge, TraceId};
use proptest::prelude::*;

#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Named {
    hits: GCounter,
    tags: ORSet<u8>,
    status: LwwRegister<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Tuple(GCounter, GSet<u8>);

#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Unit;

#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Empty {}

#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct EmptyTuple();

/// Type parameters with a default, an existing bound, a where clause and a marker field.
#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Generic<T: Clone, U = GCounter>
where
    U: Default,
{
    left: T,
    right: U,
    marker: PhantomData<fn() -> T>,
}

/// Field names that match the names the derive uses internally.
#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Tricky {
    other: GCounter,
    field0: GCounter,
    field1: MaxRegister<u8>,
}

/// Derived structs nest, and `Option` fields merge with `None` as the bottom.
#[derive(Clone, Debug, Default, PartialEq, Merge)]
struct Outer {
    named: Named,
    tuple: Option<Tuple>,
    unit: Unit,
    log: AppendLog<String>,
}

fn join<S: Merge + Clone>(a: &S, b: &S) -> S {
    let mut out = a.clone();
    out.merge(b.clone());
    out
}

fn writers() -> (TraceId, TraceId) {
    let run = TraceId::from("calm-owl-0001");
    (run.child(0), run.child(1))
}

#[test]
fn named_structs_merge_each_field() {
    let (w0, w1) = writers();
    let mut a = Named::default();
    a.hits.increment(&w0, 2);
    a.tags.add(1, &w0);
    a.status.set(10, &w0);
    let mut b = Named::default();
    b.hits.increment(&w1, 3);
    b.tags.add(2, &w1);
    b.status.set(20, &w1);

    let merged = join(&a, &b);
    assert_eq!(merged.hits.value(), 5);
    assert_eq!(merged.tags.iter().copied().collect::<Vec<_>>(), [1, 2]);
    assert_eq!(*merged.status.get(), 20);
    assert_eq!(merged, join(&b, &a));
}

#[test]
fn tuple_structs_merge_each_field() {
    let (w0, w1) = writers();
    let mut a = Tuple::default();
    a.0.increment(&w0, 1);
    a.1.insert(7);
    let mut b = Tuple::default();
    b.0.increment(&w1, 1);
    b.1.insert(8);

    let merged = join(&a, &b);
    assert_eq!(merged.0.value(), 2);
    assert_eq!(merged.1.iter().copied().collect::<Vec<_>>(), [7, 8]);
}

#[test]
fn unit_and_empty_structs_merge() {
    assert_eq!(join(&Unit, &Unit), Unit);
    assert_eq!(join(&Empty {}, &Empty {}), Empty {});
    assert_eq!(join(&EmptyTuple(), &EmptyTuple()), EmptyTuple());
}

#[test]
fn generic_structs_merge_with_their_parameters() {
    let (w0, w1) = writers();
    let mut a: Generic<MaxRegister<u8>> = Generic::default();
    a.left.set(4);
    a.right.increment(&w0, 1);
    let mut b: Generic<MaxRegister<u8>> = Generic::default();
    b.left.set(9);
    b.right.increment(&w1, 1);
    let merged = join(&a, &b);
    assert_eq!(*merged.left.get(), 9);
    assert_eq!(merged.right.value(), 2);

    let mut c: Generic<GSet<u8>, Option<GCounter>> = Generic::default();
    c.left.insert(1);
    let d: Generic<GSet<u8>, Option<GCounter>> = Generic {
        right: Some(GCounter::new()),
        ..Generic::default()
    };
    let merged = join(&c, &d);
    assert_eq!(merged.left.len(), 1);
    assert_eq!(merged.right, Some(GCounter::new()));
}

#[test]
fn internal_names_do_not_clash_with_fields() {
    let (w0, w1) = writers();
    let mut a = Tricky::default();
    a.other.increment(&w0, 1);
    a.field0.increment(&w0, 2);
    a.field1.set(3);
    let mut b = Tricky::default();
    b.other.increment(&w1, 10);
    b.field0.increment(&w1, 20);
    b.field1.set(30);
    let merged = join(&a, &b);
    assert_eq!(merged.other.value(), 11);
    assert_eq!(merged.field0.value(), 22);
    assert_eq!(*merged.field1.get(), 30);
}

#[test]
fn nested_and_optional_fields_merge() {
    let (w0, w1) = writers();
    let mut a = Outer::default();
    a.named.hits.increment(&w0, 1);
    a.log.append("a".into(), &w0);
    let mut b = Outer {
        tuple: Some(Tuple::default()),
        ..Outer::default()
    };
    b.log.append("b".into(), &w1);
    let merged = join(&a, &b);
    assert_eq!(merged.named.hits.value(), 1);
    assert_eq!(merged.tuple, Some(Tuple::default()));
    assert_eq!(merged.log.len(), 2);
    assert_eq!(merged, join(&b, &a));
}

#[derive(Clone, Debug)]
enum Op {
    Hit(u64),
    Tag(u8),
    Untag(u8),
    Status(u8),
}

fn op() -> impl Strategy<Value = Op> + Clone {
    prop_oneof![
        (0u64..5).prop_map(Op::Hit),
        (0u8..4).prop_map(Op::Tag),
        (0u8..4).prop_map(Op::Untag),
        any::<u8>().prop_map(Op::Status),
    ]
}

fn apply(state: &mut Named, ops: &[Op], writer: &TraceId) {
    for op in ops {
        match op {
            Op::Hit(n) => state.hits.increment(writer, *n),
            Op::Tag(t) => state.tags.add(*t, writer),
            Op::Untag(t) => {
                state.tags.remove(t);
            }
            Op::Status(s) => state.status.set(*s, writer),
        }
    }
}

proptest! {
    /// Replicas diverging from a common base: the derived merge equals merging each field by
    /// hand, and is a join.
    #[test]
    fn derived_merge_is_the_field_by_field_merge(
        base_ops in prop::collection::vec(op(), 0..8),
        a_ops in prop::collection::vec(op(), 0..8),
        b_ops in prop::collection::vec(op(), 0..8),
        c_ops in prop::collection::vec(op(), 0..8),
    ) {
        let run = TraceId::from("r");
        let mut base = Named::default();
        apply(&mut base, &base_ops, &run);
        let [a, b, c] = [&a_ops, &b_ops, &c_ops].map(|ops| ops.as_slice());
        let replica = |i: usize, ops: &[Op]| {
            let mut state = base.clone();
            apply(&mut state, ops, &run.child(i));
            state
        };
        let (a, b, c) = (replica(0, a), replica(1, b), replica(2, c));

        let derived = join(&a, &b);
        let by_hand = Named {
            hits: join(&a.hits, &b.hits),
            tags: join(&a.tags, &b.tags),
            status: join(&a.status, &b.status),
        };
        prop_assert_eq!(&derived, &by_hand);

        prop_assert_eq!(&derived, &join(&b, &a));
        prop_assert_eq!(join(&derived, &c), join(&a, &join(&b, &c)));
        prop_assert_eq!(&join(&a, &a), &a);
        prop_assert_eq!(&join(&derived, &b), &derived);
    }
}
