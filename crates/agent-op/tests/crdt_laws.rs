//! The laws of the `crdt` types (commutative, associative, idempotent merges) on states built
//! the way programs build them, their semantics, and their JSON round trips.
//!
//! A scenario is a common base built by writer `r`, then three replicas `r.0`, `r.1`, `r.2`
//! continuing from it. A replica's steps are its own operations and nested forks: two
//! sub-branches (`r.0.0`, `r.0.1`) continue from the replica's state and are merged back, as a
//! nested `par` would.

use std::collections::BTreeMap;
use std::fmt::Debug;

use agent_op::crdt::{
    AppendLog, GCounter, GSet, LwwRegister, MaxRegister, MergeMap, MinRegister, ORSet, PNCounter,
};
use agent_op::{Merge, TraceId};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

// ---- Scenarios ----

#[derive(Clone, Debug)]
enum Step<A> {
    Op(A),
    Fork(Vec<A>, Vec<A>),
}

#[derive(Clone, Debug)]
struct Scenario<A> {
    base: Vec<A>,
    replicas: [Vec<Step<A>>; 3],
}

impl<A> Scenario<A> {
    /// Every operation with its writer, in the order the replay applies them.
    fn ops(&self) -> Vec<(TraceId, &A)> {
        let root = root();
        let mut all: Vec<(TraceId, &A)> = self.base.iter().map(|a| (root.clone(), a)).collect();
        for (i, steps) in self.replicas.iter().enumerate() {
            let writer = root.child(i);
            for step in steps {
                match step {
                    Step::Op(a) => all.push((writer.clone(), a)),
                    Step::Fork(left, right) => {
                        all.extend(left.iter().map(|a| (writer.child(0), a)));
                        all.extend(right.iter().map(|a| (writer.child(1), a)));
                    }
                }
            }
        }
        all
    }

    /// The operations of replica `i` when it has no forks.
    fn flat(&self, i: usize) -> Vec<&A> {
        self.replicas[i]
            .iter()
            .filter_map(|step| match step {
                Step::Op(a) => Some(a),
                Step::Fork(..) => None,
            })
            .collect()
    }
}

fn root() -> TraceId {
    TraceId::from("r")
}

fn ops<A: Debug>(
    op: impl Strategy<Value = A> + Clone,
    max: usize,
) -> impl Strategy<Value = Vec<A>> + Clone {
    prop::collection::vec(op, 0..max)
}

/// A base and three replicas whose steps include nested forks.
fn scenario<A: Clone + Debug>(
    op: impl Strategy<Value = A> + Clone,
) -> impl Strategy<Value = Scenario<A>> {
    let step = prop_oneof![
        4 => op.clone().prop_map(Step::Op),
        1 => (ops(op.clone(), 4), ops(op.clone(), 4)).prop_map(|(l, r)| Step::Fork(l, r)),
    ];
    let steps = prop::collection::vec(step, 0..8);
    (ops(op, 8), [steps.clone(), steps.clone(), steps])
        .prop_map(|(base, replicas)| Scenario { base, replicas })
}

/// A base and three replicas without forks.
fn flat_scenario<A: Clone + Debug>(
    op: impl Strategy<Value = A> + Clone,
) -> impl Strategy<Value = Scenario<A>> {
    let steps = ops(op.clone().prop_map(Step::Op), 8);
    (ops(op, 8), [steps.clone(), steps.clone(), steps])
        .prop_map(|(base, replicas)| Scenario { base, replicas })
}

/// Replays a scenario from `init`: the base state and the three replicas' end states.
fn replay<S, A>(
    init: S,
    scenario: &Scenario<A>,
    apply: impl Fn(&mut S, &A, &TraceId),
) -> (S, [S; 3])
where
    S: Clone + Merge,
{
    let root = root();
    let mut base = init;
    for a in &scenario.base {
        apply(&mut base, a, &root);
    }
    let replicas = std::array::from_fn(|i| {
        let writer = root.child(i);
        let mut state = base.clone();
        for step in &scenario.replicas[i] {
            match step {
                Step::Op(a) => apply(&mut state, a, &writer),
                Step::Fork(left, right) => {
                    let branch = |ops: &Vec<A>, id: TraceId| {
                        let mut branch = state.clone();
                        for a in ops {
                            apply(&mut branch, a, &id);
                        }
                        branch
                    };
                    let mut merged = branch(left, writer.child(0));
                    merged.merge(branch(right, writer.child(1)));
                    state = merged;
                }
            }
        }
        state
    });
    (base, replicas)
}

fn join<S: Merge + Clone>(a: &S, b: &S) -> S {
    let mut out = a.clone();
    out.merge(b.clone());
    out
}

fn join_all<S: Merge + Clone>(states: &[S; 3]) -> S {
    join(&join(&states[0], &states[1]), &states[2])
}

/// Commutativity, associativity, idempotence, and that a replica absorbs its ancestor.
fn check_laws<S>(base: &S, [a, b, c]: &[S; 3]) -> Result<(), TestCaseError>
where
    S: Merge + Clone + PartialEq + Debug,
{
    prop_assert_eq!(join(a, b), join(b, a), "a ⊔ b = b ⊔ a");
    prop_assert_eq!(join(b, c), join(c, b), "b ⊔ c = c ⊔ b");
    prop_assert_eq!(
        join(&join(a, b), c),
        join(a, &join(b, c)),
        "(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)"
    );
    prop_assert_eq!(&join(a, a), a, "a ⊔ a = a");
    let ab = join(a, b);
    prop_assert_eq!(&join(&ab, b), &ab, "(a ⊔ b) ⊔ b = a ⊔ b");
    prop_assert_eq!(&join(&ab, a), &ab, "(a ⊔ b) ⊔ a = a ⊔ b");
    prop_assert_eq!(&join(a, base), a, "a ⊔ base = a");
    prop_assert_eq!(&join(base, a), a, "base ⊔ a = a");
    Ok(())
}

fn check_round_trip<S>(state: &S) -> Result<(), TestCaseError>
where
    S: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let json = serde_json::to_string(state).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: S = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, state, "{}", json);
    Ok(())
}

// ---- Operations ----

#[derive(Clone, Debug)]
enum Count {
    Up(u64),
    Down(u64),
}

fn count() -> impl Strategy<Value = Count> + Clone {
    prop_oneof![
        (0u64..10).prop_map(Count::Up),
        (0u64..10).prop_map(Count::Down)
    ]
}

fn apply_gcounter(s: &mut GCounter, by: &u64, w: &TraceId) {
    s.increment(w, *by);
}

fn apply_pncounter(s: &mut PNCounter, op: &Count, w: &TraceId) {
    match op {
        Count::Up(n) => s.increment(w, *n),
        Count::Down(n) => s.decrement(w, *n),
    }
}

#[derive(Clone, Debug)]
enum SetOp {
    Add(u8),
    Remove(u8),
}

fn set_op() -> impl Strategy<Value = SetOp> + Clone {
    prop_oneof![
        3 => (0u8..6).prop_map(SetOp::Add),
        2 => (0u8..6).prop_map(SetOp::Remove),
    ]
}

fn apply_orset(s: &mut ORSet<u8>, op: &SetOp, w: &TraceId) {
    match op {
        SetOp::Add(v) => s.add(*v, w),
        SetOp::Remove(v) => {
            s.remove(v);
        }
    }
}

fn apply_counter_map(s: &mut MergeMap<u8, GCounter>, &(key, by): &(u8, u64), w: &TraceId) {
    s.update(key, |n| n.increment(w, by));
}

fn apply_set_map(s: &mut MergeMap<u8, ORSet<u8>>, (key, op): &(u8, SetOp), w: &TraceId) {
    s.update(*key, |set| apply_orset(set, op, w));
}

/// `None` (an op that leaves the state alone) or an increment of the counter, created if
/// absent.
fn apply_option(s: &mut Option<GCounter>, op: &Option<u64>, w: &TraceId) {
    if let Some(by) = op {
        s.get_or_insert_with(GCounter::default).increment(w, *by);
    }
}

// ---- The laws ----

proptest! {
    #[test]
    fn gcounter_is_a_join(s in scenario(0u64..10)) {
        let (base, replicas) = replay(GCounter::new(), &s, apply_gcounter);
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn pncounter_is_a_join(s in scenario(count())) {
        let (base, replicas) = replay(PNCounter::new(), &s, apply_pncounter);
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn max_register_is_a_join(s in scenario(-50i32..50)) {
        let (base, replicas) = replay(MaxRegister::new(i32::MIN), &s, |r, v, _| r.set(*v));
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn min_register_is_a_join(s in scenario(-50i32..50)) {
        let (base, replicas) = replay(MinRegister::new(i32::MAX), &s, |r, v, _| r.set(*v));
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn lww_register_is_a_join(s in scenario(0u8..4)) {
        let (base, replicas) = replay(LwwRegister::new(0), &s, |r, v, w| r.set(*v, w));
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn gset_is_a_join(s in scenario(0u8..16)) {
        let (base, replicas) = replay(GSet::new(), &s, |set, v, _| {
            set.insert(*v);
        });
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn orset_is_a_join(s in scenario(set_op())) {
        let (base, replicas) = replay(ORSet::new(), &s, apply_orset);
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn append_log_is_a_join(s in scenario(0u32..100)) {
        let (base, replicas) = replay(AppendLog::new(), &s, |log, v, w| log.append(*v, w));
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn merge_map_of_counters_is_a_join(s in scenario((0u8..4, 0u64..10))) {
        let (base, replicas) = replay(MergeMap::new(), &s, apply_counter_map);
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn merge_map_of_orsets_is_a_join(s in scenario((0u8..3, set_op()))) {
        let (base, replicas) = replay(MergeMap::new(), &s, apply_set_map);
        check_laws(&base, &replicas)?;
    }

    #[test]
    fn option_is_a_join(s in scenario(prop::option::weighted(0.3, 0u64..10))) {
        let (base, replicas) = replay(None, &s, apply_option);
        check_laws(&base, &replicas)?;
    }
}

// ---- Semantics ----

proptest! {
    #[test]
    fn gcounter_counts_every_increment(s in scenario(0u64..10)) {
        let (_, replicas) = replay(GCounter::new(), &s, apply_gcounter);
        let total: u64 = s.ops().into_iter().map(|(_, by)| *by).sum();
        prop_assert_eq!(join_all(&replicas).value(), total);
    }

    #[test]
    fn pncounter_counts_every_change(s in scenario(count())) {
        let (_, replicas) = replay(PNCounter::new(), &s, apply_pncounter);
        let total: i128 = s
            .ops()
            .into_iter()
            .map(|(_, op)| match op {
                Count::Up(n) => i128::from(*n),
                Count::Down(n) => -i128::from(*n),
            })
            .sum();
        prop_assert_eq!(join_all(&replicas).value(), total);
    }

    #[test]
    fn registers_keep_the_extremes(s in scenario(-50i32..50)) {
        let (_, max) = replay(MaxRegister::new(i32::MIN), &s, |r, v, _| r.set(*v));
        let (_, min) = replay(MinRegister::new(i32::MAX), &s, |r, v, _| r.set(*v));
        let values: Vec<i32> = s.ops().into_iter().map(|(_, v)| *v).collect();
        prop_assert_eq!(*join_all(&max).get(), values.iter().copied().max().unwrap_or(i32::MIN));
        prop_assert_eq!(*join_all(&min).get(), values.iter().copied().min().unwrap_or(i32::MAX));
    }

    /// The replica with the most writes since the fork wins; among equals, the larger id.
    #[test]
    fn lww_keeps_the_latest_write(s in flat_scenario(any::<u8>())) {
        let (base, replicas) = replay(LwwRegister::new(0), &s, |r, v, w| r.set(*v, w));
        let merged = join_all(&replicas);
        let winner = (0..3)
            .filter(|&i| !s.flat(i).is_empty())
            .max_by_key(|&i| (s.flat(i).len(), root().child(i)));
        match winner {
            None => prop_assert_eq!(&merged, &base),
            Some(i) => {
                let last = s.flat(i).last().copied().copied();
                prop_assert_eq!(Some(*merged.get()), last);
                prop_assert_eq!(merged.clock(), base.clock() + s.flat(i).len() as u64);
                prop_assert_eq!(merged.writer(), Some(&root().child(i)));
            }
        }
    }

    /// A value is present after the merge iff some replica's last operation on it was an add
    /// (its own add, unseen by the others, survives), or it was in the base and no replica
    /// touched it.
    #[test]
    fn orset_adds_win_over_concurrent_removes(s in flat_scenario(set_op())) {
        let (base, replicas) = replay(ORSet::new(), &s, apply_orset);
        let merged = join_all(&replicas);
        for v in 0u8..6 {
            let last_ops: Vec<Option<bool>> = (0..3)
                .map(|i| {
                    s.flat(i).into_iter().rev().find_map(|op| match op {
                        SetOp::Add(x) if *x == v => Some(true),
                        SetOp::Remove(x) if *x == v => Some(false),
                        _ => None,
                    })
                })
                .collect();
            let added = last_ops.contains(&Some(true));
            let untouched = last_ops.iter().all(Option::is_none);
            prop_assert_eq!(merged.contains(&v), added || (untouched && base.contains(&v)), "{}", v);
        }
    }

    #[test]
    fn append_log_keeps_every_writers_order(s in scenario(any::<u32>())) {
        let (base, replicas) = replay(AppendLog::new(), &s, |log, v, w| log.append(*v, w));
        let merged = join_all(&replicas);
        let all = s.ops();
        prop_assert_eq!(merged.len(), all.len());

        let mut expected: BTreeMap<TraceId, Vec<u32>> = BTreeMap::new();
        for (writer, item) in all {
            expected.entry(writer).or_default().push(*item);
        }
        let mut actual: BTreeMap<TraceId, Vec<u32>> = BTreeMap::new();
        for (writer, item) in merged.iter_with_writers() {
            actual.entry(writer.clone()).or_default().push(*item);
        }
        prop_assert_eq!(actual, expected);

        // The base comes first: every append saw it.
        let prefix: Vec<&u32> = merged.iter().take(base.len()).collect();
        prop_assert_eq!(prefix, base.iter().collect::<Vec<_>>());
    }

    #[test]
    fn append_log_order_does_not_depend_on_merge_order(s in scenario(any::<u32>())) {
        let (_, [a, b, c]) = replay(AppendLog::new(), &s, |log, v, w| log.append(*v, w));
        let orders = [[&a, &b, &c], [&a, &c, &b], [&b, &a, &c], [&b, &c, &a], [&c, &a, &b], [&c, &b, &a]];
        let merged: Vec<Vec<u32>> = orders
            .iter()
            .map(|[x, y, z]| join(&join(*x, *y), *z).iter().copied().collect())
            .collect();
        for order in &merged[1..] {
            prop_assert_eq!(order, &merged[0]);
        }
    }

    #[test]
    fn merge_map_merges_values_per_key(s in scenario((0u8..4, 0u64..10))) {
        let (_, replicas) = replay(MergeMap::new(), &s, apply_counter_map);
        let merged = join_all(&replicas);
        for key in 0u8..4 {
            // The merged value is the merge of the replicas' values...
            let mut expected: Option<GCounter> = None;
            for replica in &replicas {
                expected.merge(replica.get(&key).cloned());
            }
            prop_assert_eq!(merged.get(&key), expected.as_ref());
            // ...so it counts every increment made under that key.
            let total: u64 = s.ops().into_iter().filter(|(_, (k, _))| *k == key).map(|(_, (_, by))| *by).sum();
            prop_assert_eq!(merged.get(&key).map_or(0, GCounter::value), total);
        }
    }

    #[test]
    fn states_survive_json(
        counts in scenario(count()),
        sets in scenario(set_op()),
        items in scenario(any::<u32>()),
        keyed in scenario((0u8..4, set_op())),
    ) {
        let (_, pn) = replay(PNCounter::new(), &counts, apply_pncounter);
        let (_, or) = replay(ORSet::new(), &sets, apply_orset);
        let (_, log) = replay(AppendLog::new(), &items, |log, v, w| log.append(*v, w));
        let (_, lww) = replay(LwwRegister::new(0), &items, |r, v, w| r.set(*v, w));
        let (_, map) = replay(MergeMap::new(), &keyed, apply_set_map);
        let (_, gset) = replay(GSet::new(), &items, |set, v, _| {
            set.insert(*v);
        });
        check_round_trip(&join_all(&pn))?;
        check_round_trip(&join_all(&or))?;
        check_round_trip(&join_all(&log))?;
        check_round_trip(&join_all(&lww))?;
        check_round_trip(&join_all(&map))?;
        check_round_trip(&join_all(&gset))?;
        check_round_trip(&MaxRegister::new(3))?;
        check_round_trip(&MinRegister::new("x".to_string()))?;
    }
}

// ---- Examples ----

#[test]
fn lww_ties_at_equal_clocks_go_to_the_larger_writer() {
    let run = root();
    let base = LwwRegister::new("base");
    let (mut a, mut b) = (base.clone(), base);
    a.set("from r.1", &run.child(1));
    b.set("from r.0", &run.child(0));
    assert_eq!(a.clock(), b.clock());
    assert_eq!(*join(&a, &b).get(), "from r.1");
    assert_eq!(*join(&b, &a).get(), "from r.1");
}

#[test]
fn lww_a_later_clock_wins_over_a_larger_writer() {
    let run = root();
    let base = LwwRegister::new("base");
    let (mut a, mut b) = (base.clone(), base);
    a.set("r.0 first", &run.child(0));
    a.set("r.0 second", &run.child(0));
    b.set("r.1 once", &run.child(1));
    assert_eq!(*join(&a, &b).get(), "r.0 second");
    assert_eq!(*join(&b, &a).get(), "r.0 second");

    // A write made after a merge wins over everything merged.
    let mut c = join(&a, &b);
    c.set("after", &run);
    assert_eq!(*join(&join(&a, &b), &c).get(), "after");
}

#[test]
fn orset_add_wins_over_a_concurrent_remove() {
    let run = root();
    let mut base = ORSet::new();
    base.add("x", &run);
    base.add("y", &run);
    let (mut a, mut b) = (base.clone(), base);
    assert!(a.remove(&"x"));
    assert!(a.remove(&"y"));
    b.add("x", &run.child(1));
    for merged in [join(&a, &b), join(&b, &a)] {
        assert!(merged.contains(&"x"), "the concurrent add survives");
        assert!(!merged.contains(&"y"), "the remove cancels the add it saw");
        assert_eq!(merged.len(), 1);
    }
    // Removing again after the merge removes the surviving add too.
    let mut after = join(&a, &b);
    after.remove(&"x");
    assert!(after.is_empty());
    assert!(join(&after, &a).is_empty());
}

#[test]
fn option_none_is_the_bottom() {
    let w = root();
    let mut some = Some(GCounter::new());
    if let Some(c) = some.as_mut() {
        c.increment(&w, 2);
    }
    assert_eq!(join(&None, &some), some);
    assert_eq!(join(&some, &None), some);
    assert_eq!(join(&None::<GCounter>, &None), None);
}

#[test]
fn serialized_shapes_are_readable() {
    let w = TraceId::from("calm-owl-0001.1");
    let mut counter = GCounter::new();
    counter.increment(&w, 3);
    assert_eq!(
        serde_json::to_value(&counter).unwrap(),
        serde_json::json!({"calm-owl-0001.1": 3})
    );
    let mut log = AppendLog::new();
    log.append("hello", &w);
    assert_eq!(
        serde_json::to_value(&log).unwrap(),
        serde_json::json!([{"position": 1, "writer": "calm-owl-0001.1", "item": "hello"}])
    );
    assert_eq!(
        serde_json::to_value(MaxRegister::new(4)).unwrap(),
        serde_json::json!(4)
    );
}

#[test]
fn extreme_deserialized_states_do_not_panic() {
    let w = TraceId::from("r.0");
    let mut log: AppendLog<u8> = serde_json::from_value(
        serde_json::json!([{"position": u64::MAX, "writer": "r.0", "item": 1}]),
    )
    .unwrap();
    log.append(2, &w);
    log.append(3, &TraceId::from("r.1"));
    assert!(log.len() >= 2);

    let mut counter: GCounter =
        serde_json::from_value(serde_json::json!({"r.0": u64::MAX, "r.1": u64::MAX})).unwrap();
    counter.increment(&w, 5);
    assert_eq!(counter.value(), u64::MAX);
    let mut pn = PNCounter::new();
    pn.increment(&w, u64::MAX);
    pn.decrement(&w, u64::MAX);
    pn.decrement(&TraceId::from("r.1"), u64::MAX);
    // Both totals saturate at u64::MAX.
    assert_eq!(pn.value(), 0);

    let mut lww: LwwRegister<u8> =
        serde_json::from_value(serde_json::json!({"value": 1, "clock": u64::MAX, "writer": null}))
            .unwrap();
    lww.set(2, &w);
    assert_eq!(*lww.get(), 2);

    let mut set: ORSet<u8> = serde_json::from_value(
        serde_json::json!({"entries": [[1, [{"writer": "r.0", "seq": u64::MAX}]]], "seen": {"r.0": u64::MAX}}),
    )
    .unwrap();
    set.add(2, &w);
    set.remove(&1);
    set.merge(ORSet::new());
    assert!(set.contains(&2));
}
