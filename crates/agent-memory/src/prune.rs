//! Prune rules shared by the backends: policy checks and near-duplicate merge planning.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use agent_op::{MemoryError, PrunePolicy};

use crate::vector::dot;

/// Rejects policies that cannot be applied: a `merge_similarity` that is not a number in
/// (0, 1].
pub(crate) fn validate(policy: &PrunePolicy) -> Result<(), MemoryError> {
    if let Some(t) = policy.merge_similarity {
        if !(t.is_finite() && t > 0.0 && t <= 1.0) {
            return Err(MemoryError::InvalidInput(format!(
                "prune merge_similarity must be in (0, 1], got {t}"
            )));
        }
    }
    Ok(())
}

/// One merge: `absorbed` entries fold into `keeper`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MergeGroup {
    pub keeper: i64,
    pub absorbed: Vec<i64>,
}

/// Tolerance of the merge comparison: a pair merges when its cosine similarity is at least
/// `threshold − SIMILARITY_TOLERANCE`, so f32 rounding cannot keep near-identical vectors
/// apart at `merge_similarity = 1.0`.
pub(crate) const SIMILARITY_TOLERANCE: f32 = 1e-6;

/// Candidates² × dimensions / 2 above which the comparisons are spread over threads.
const PARALLEL_MIN_FLOATS: usize = 1_000_000;

/// How many rows ahead of the one being applied the comparison threads may work: bounds the
/// neighbour lists waiting to be applied to `WINDOW × n` indices.
const WINDOW: usize = 64;

/// Entries whose vectors are copied into a [`MergeSet`] per hold of the store's read lock.
/// The whole copy is O(n · dimensions) (150 MB for 100,000 × 384): taken in one hold, it
/// would keep writers (and, on SQLite, the sync before every search) waiting for its whole
/// duration; 1,024 rows of 384 values take well under a millisecond.
pub(crate) const COPY_CHUNK: usize = 1024;

/// Upper bound of the floats compared when planning `entries` vectors of `dimensions` (for
/// [`crate::common::cpu`], before the set is built).
pub(crate) fn plan_work(entries: usize, dimensions: usize) -> usize {
    entries.saturating_mul(entries).saturating_mul(dimensions) / 2
}

/// The entries considered for merging, copied out of the store so planning runs without
/// holding any lock: ids, creation times and vectors (one flat row-major matrix, normalized
/// to unit length on the way in).
#[derive(Debug, Default)]
pub(crate) struct MergeSet {
    dimensions: usize,
    ids: Vec<i64>,
    created: Vec<i64>,
    vectors: Vec<f32>,
    /// Padding at the start of `vectors` that puts the first row on a cache line.
    offset: usize,
}

impl MergeSet {
    /// An empty set for vectors of `dimensions`, with room for `capacity` of them.
    pub(crate) fn with_capacity(dimensions: usize, capacity: usize) -> MergeSet {
        let mut vectors = Vec::with_capacity(capacity.saturating_mul(dimensions) + 16);
        // Rows start on a cache line when `dimensions` is a multiple of 16 (384, 768, 1536):
        // a row then spans the fewest lines.
        let misaligned = vectors.as_ptr() as usize % 64;
        let offset = (64 - misaligned) % 64 / std::mem::size_of::<f32>();
        vectors.resize(offset, 0.0);
        MergeSet {
            dimensions,
            ids: Vec::with_capacity(capacity),
            created: Vec::with_capacity(capacity),
            vectors,
            offset,
        }
    }

    /// Adds an entry. Its `vector` must have the set's dimension and unit length (or be all
    /// zero); others are ignored (the backends only pass vectors they have checked). Adding
    /// entries oldest first (`created_at`, then id), the order planning visits them in,
    /// spares planning a sorted copy.
    pub(crate) fn push(&mut self, id: i64, created_at: i64, vector: &[f32]) {
        if vector.len() != self.dimensions {
            return;
        }
        self.ids.push(id);
        self.created.push(created_at);
        self.vectors.extend_from_slice(vector);
    }

    /// How many entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Upper bound of the floats compared when planning (for [`crate::common::cpu`]).
    pub(crate) fn work(&self) -> usize {
        plan_work(self.len(), self.dimensions)
    }

    fn row(&self, i: usize) -> &[f32] {
        let start = self.offset + i * self.dimensions;
        &self.vectors[start..start + self.dimensions]
    }

    /// A copy holding the same entries oldest first (`created_at`, then id).
    fn sorted(&self) -> MergeSet {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by_key(|&i| (self.created[i], self.ids[i]));
        let mut sorted = MergeSet::with_capacity(self.dimensions, self.len());
        for i in order {
            sorted.push(self.ids[i], self.created[i], self.row(i));
        }
        sorted
    }

    /// Plans near-duplicate merges with the available cores. See [`MergeSet::plan_with`].
    pub(crate) fn plan(&self, threshold: f32) -> Vec<MergeGroup> {
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(8);
        self.plan_with(threshold, threads)
    }

    /// Plans near-duplicate merges. Entries are visited oldest first (`created_at`, then
    /// id); each one not yet absorbed absorbs every newer, not yet absorbed entry whose cosine
    /// similarity to it is at least `threshold` (less [`SIMILARITY_TOLERANCE`]). All-zero
    /// vectors never merge.
    ///
    /// The similarity of rows `i` and `j` is taken as `dot(i, j) / √(dot(i, i) · dot(j, j))`
    /// (compared squared, all in f32): dividing by the self-dot products as computed cancels
    /// their rounding, so two identical rows have similarity 1 up to an ulp or two, within
    /// the tolerance — identical content merges at `threshold = 1` even when f32 rounding
    /// puts the dot product of a unit vector with itself below 1.
    ///
    /// Cost: O(n² · dimensions) time in the worst case (nothing merges), less when entries
    /// merge (an absorbed entry is never compared again); memory O(n) beyond the set itself.
    /// `threads` threads (the calling one included) take rows in order and compute each
    /// row's neighbour list — the later rows not yet absorbed that are similar enough — at
    /// most [`WINDOW`] rows ahead of the next row to apply; whichever thread publishes the
    /// next row in line applies it (and the rows after it already waiting). So at most about
    /// `WINDOW × n` indices wait at once, there is no barrier between rows, and the result is
    /// the same as computing each list just before applying it (a list computed early can
    /// only hold extra rows, absorbed since, which applying it skips).
    pub(crate) fn plan_with(&self, threshold: f32, threads: usize) -> Vec<MergeGroup> {
        self.plan_counted(threshold, threads).0
    }

    /// [`plan_with`](MergeSet::plan_with), also reporting what it cost.
    fn plan_counted(&self, threshold: f32, threads: usize) -> (Vec<MergeGroup>, PlanCost) {
        let oldest_first = self
            .created
            .iter()
            .zip(&self.ids)
            .is_sorted_by_key(|(created, id)| (*created, *id));
        if !oldest_first {
            return self.sorted().plan_counted(threshold, threads);
        }
        let n = self.len();
        let d = self.dimensions;
        // `squares[p]` is dot(v, v) as computed in f32.
        let squares: Vec<f32> = (0..n).map(|p| dot(self.row(p), self.row(p))).collect();
        let effective = if threshold > 2.0 * SIMILARITY_TOLERANCE {
            threshold - SIMILARITY_TOLERANCE
        } else {
            threshold
        };
        let limit_squared = effective * effective;
        // Zero vectors neither absorb nor are absorbed: marked done up front. Flags only
        // ever go from false to true, so a comparison thread reading one late only lists a
        // row that applying the list then skips.
        let absorbed: Vec<AtomicBool> =
            squares.iter().map(|s| AtomicBool::new(*s == 0.0)).collect();
        // The later rows not (yet) absorbed whose similarity to row `p` reaches the
        // threshold, ascending. cos ≥ t ⟺ dot > 0 ∧ dot² ≥ t² · |p|² · |q|² (for t > 0).
        let neighbours = |p: usize| -> Vec<usize> {
            let row = self.row(p);
            let limit = limit_squared * squares[p];
            let mut found = Vec::new();
            let later = &self.vectors[self.offset + (p + 1) * d..];
            for (i, other) in later.chunks_exact(d).enumerate() {
                let q = p + 1 + i;
                if absorbed[q].load(Ordering::Relaxed) {
                    continue;
                }
                let dp = dot(row, other);
                if dp > 0.0 && dp * dp >= limit * squares[q] {
                    found.push(q);
                }
            }
            found
        };
        let outcome_of = |p: usize| {
            if absorbed[p].load(Ordering::Relaxed) {
                Outcome::Skipped
            } else {
                Outcome::Found(neighbours(p))
            }
        };
        let plan = Plan {
            set: self,
            absorbed: &absorbed,
            neighbours: &neighbours,
        };
        if threads <= 1 || self.work() < PARALLEL_MIN_FLOATS {
            let mut window = Window::default();
            for p in 0..n {
                window.publish(p, outcome_of(p), &plan);
            }
            return (window.groups, window.cost);
        }

        let pipeline = Pipeline {
            window: Mutex::new(Window::default()),
            advanced: Condvar::new(),
        };
        let next = AtomicUsize::new(0);
        let work = || {
            loop {
                let p = next.fetch_add(1, Ordering::Relaxed);
                if p >= n {
                    return;
                }
                // From here the row is published whatever happens (see `Claim`).
                let claim = Claim {
                    pipeline: &pipeline,
                    plan: &plan,
                    row: p,
                    published: false,
                };
                pipeline.wait_for_room(p);
                claim.publish(outcome_of(p));
            }
        };
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
            work();
            for helper in helpers {
                // A comparison thread cannot panic; if one did, its row was published as
                // lost and computed by whoever applied it.
                let _ = helper.join();
            }
        });
        let mut window = pipeline.lock();
        // Only if a thread died between taking a row and publishing it (it cannot).
        for p in window.applied..n {
            window.publish(p, outcome_of(p), &plan);
        }
        let window = std::mem::take(&mut *window);
        (window.groups, window.cost)
    }
}

/// What a comparison thread made of a row.
enum Outcome {
    /// The row was absorbed before its turn: nothing to compare.
    Skipped,
    /// Its neighbour list.
    Found(Vec<usize>),
    /// The thread failed before finishing it: whoever applies it computes it.
    Lost,
}

/// What applying a row needs.
struct Plan<'a> {
    set: &'a MergeSet,
    absorbed: &'a [AtomicBool],
    neighbours: &'a (dyn Fn(usize) -> Vec<usize> + Sync),
}

/// Rows computed ahead of the next one to apply, and what was applied so far.
#[derive(Default)]
struct Window {
    /// Rows before this one have been applied.
    applied: usize,
    waiting: HashMap<usize, Outcome>,
    /// Indices in the lists waiting now.
    listed: usize,
    groups: Vec<MergeGroup>,
    cost: PlanCost,
}

impl Window {
    /// Records row `row`'s outcome and applies every row that is next in line: the row
    /// absorbs the rows of its list not absorbed yet.
    fn publish(&mut self, row: usize, outcome: Outcome, plan: &Plan<'_>) {
        let n = plan.set.len();
        if let Outcome::Found(list) = &outcome {
            self.listed += list.len();
            self.cost.peak_listed = self.cost.peak_listed.max(self.listed);
            self.cost.compared += n - row - 1;
        }
        self.waiting.insert(row, outcome);
        while let Some(outcome) = self.waiting.remove(&self.applied) {
            let p = self.applied;
            self.applied += 1;
            let list = match outcome {
                Outcome::Skipped => continue,
                Outcome::Found(list) => {
                    self.listed -= list.len();
                    list
                }
                Outcome::Lost => (plan.neighbours)(p),
            };
            if plan.absorbed[p].load(Ordering::Relaxed) {
                continue;
            }
            let group: Vec<i64> = list
                .into_iter()
                .filter(|&q| !plan.absorbed[q].swap(true, Ordering::Relaxed))
                .map(|q| plan.set.ids[q])
                .collect();
            if !group.is_empty() {
                self.groups.push(MergeGroup {
                    keeper: plan.set.ids[p],
                    absorbed: group,
                });
            }
        }
    }
}

/// The [`Window`] shared by the comparison threads; whichever publishes the next row in
/// line applies it (applying is cheap next to comparing).
struct Pipeline {
    window: Mutex<Window>,
    /// Rows were applied: threads waiting for room may go on.
    advanced: Condvar,
}

impl Pipeline {
    fn lock(&self) -> MutexGuard<'_, Window> {
        // Nothing panics while the lock is held; a poisoned lock still guards sound data.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until row `p` is within [`WINDOW`] rows of the next one to apply.
    fn wait_for_room(&self, p: usize) {
        let mut window = self.lock();
        while p >= window.applied + WINDOW {
            window = self
                .advanced
                .wait(window)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn publish(&self, row: usize, outcome: Outcome, plan: &Plan<'_>) {
        let mut window = self.lock();
        let before = window.applied;
        window.publish(row, outcome, plan);
        let moved = window.applied != before;
        drop(window);
        if moved {
            self.advanced.notify_all();
        }
    }
}

/// A row a comparison thread took: published as [`Outcome::Lost`] if the thread fails
/// before publishing it, so the rows after it are still applied.
struct Claim<'a> {
    pipeline: &'a Pipeline,
    plan: &'a Plan<'a>,
    row: usize,
    published: bool,
}

impl Claim<'_> {
    fn publish(mut self, outcome: Outcome) {
        self.published = true;
        self.pipeline.publish(self.row, outcome, self.plan);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.pipeline.publish(self.row, Outcome::Lost, self.plan);
        }
    }
}

/// What planning cost: rows scanned (an upper bound on the pairs compared) and the most
/// neighbour indices held at once.
#[derive(Copy, Clone, Debug, Default)]
struct PlanCost {
    compared: usize,
    peak_listed: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::{pseudo_random, unit};

    fn set(rows: &[(i64, i64, &[f32])]) -> MergeSet {
        let d = rows.first().map_or(0, |r| r.2.len());
        let mut set = MergeSet::with_capacity(d, rows.len());
        for (id, created, v) in rows {
            set.push(*id, *created, &unit(v));
        }
        set
    }

    #[test]
    fn merges_into_the_oldest_and_does_not_chain() {
        let a = [1.0f32, 0.0];
        // cos(a, b) = 0.8, cos(b, c) = 0.8, cos(a, c) = 0.28.
        let b = [0.8f32, 0.6];
        let c = [0.28f32, 0.96];
        let d = [1.0f32, 0.0];
        let groups = set(&[(4, 40, &d), (3, 30, &c), (2, 20, &b), (1, 10, &a)]).plan(0.75);
        // a absorbs b and d; c is only similar to b, which is gone, so c stays.
        assert_eq!(
            groups,
            vec![MergeGroup {
                keeper: 1,
                absorbed: vec![2, 4]
            }]
        );
    }

    /// The rule applied literally: one row at a time, comparing with every later row.
    fn naive(set: &MergeSet, threshold: f32) -> Vec<MergeGroup> {
        let mut order: Vec<usize> = (0..set.len()).collect();
        order.sort_by_key(|&i| (set.created[i], set.ids[i]));
        let cos = |i: usize, j: usize| {
            let (a, b) = (set.row(i), set.row(j));
            let d = f64::from(dot(a, b));
            let n = f64::from(dot(a, a)) * f64::from(dot(b, b));
            if n == 0.0 { 0.0 } else { d / n.sqrt() }
        };
        let mut absorbed = vec![false; order.len()];
        let mut groups = Vec::new();
        for p in 0..order.len() {
            if absorbed[p] {
                continue;
            }
            let mut group = Vec::new();
            for q in p + 1..order.len() {
                if !absorbed[q] && cos(order[p], order[q]) >= f64::from(threshold) {
                    absorbed[q] = true;
                    group.push(set.ids[order[q]]);
                }
            }
            if !group.is_empty() {
                groups.push(MergeGroup {
                    keeper: set.ids[order[p]],
                    absorbed: group,
                });
            }
        }
        groups
    }

    #[test]
    fn parallel_planning_matches_the_literal_rule() {
        // Clusters of near-duplicates, with exact copies, compared on 1 and 3 threads.
        let d = 64;
        let mut merge_set = MergeSet::with_capacity(d, 900);
        for i in 0..900u64 {
            let cluster = i % 40;
            let v: Vec<f32> = (0..d)
                .map(|k| {
                    let base = ((cluster * 7919 + k as u64 * 104_729) % 1000) as f32 - 500.0;
                    let noise = if i % 3 == 0 {
                        0.0
                    } else {
                        ((i * 31 + k as u64 * 17) % 13) as f32
                    };
                    base + noise
                })
                .collect();
            merge_set.push(i as i64, (i % 97) as i64, &unit(&v));
        }
        let want = naive(&merge_set, 0.999);
        assert!(want.len() >= 30, "{} groups", want.len());
        for threads in [1, 3] {
            assert_eq!(
                merge_set.plan_with(0.999, threads),
                want,
                "{threads} threads"
            );
        }
    }

    #[test]
    fn identical_vectors_merge_at_threshold_one() {
        // Unit vectors whose f32 dot product with themselves rounds below 1.
        let d = 384;
        let below: Vec<Vec<f32>> = (0..400)
            .map(|seed| unit(&pseudo_random(seed + 1, d)))
            .filter(|v| dot(v, v) < 1.0)
            .take(20)
            .collect();
        assert!(!below.is_empty(), "no vector exercised the tolerance");
        let mut merge_set = MergeSet::with_capacity(d, 2 * below.len());
        for (i, v) in below.iter().enumerate() {
            merge_set.push(2 * i as i64 + 1, 0, v);
            merge_set.push(2 * i as i64 + 2, 1, v);
        }
        let groups = merge_set.plan(1.0);
        assert_eq!(groups.len(), below.len());
        for (i, g) in groups.iter().enumerate() {
            assert_eq!(g.keeper, 2 * i as i64 + 1);
            assert_eq!(g.absorbed, [2 * i as i64 + 2]);
        }
    }

    #[test]
    fn many_identical_entries_take_linear_memory_and_time() {
        let d = 16;
        let n = 5000;
        let v = unit(&pseudo_random(9, d));
        let mut merge_set = MergeSet::with_capacity(d, n);
        for i in 0..n {
            merge_set.push(i as i64 + 1, i as i64, &v);
        }
        for threads in [1, 4] {
            let (groups, cost) = merge_set.plan_counted(0.99, threads);
            assert_eq!(groups.len(), 1);
            assert_eq!(groups[0].keeper, 1);
            assert_eq!(groups[0].absorbed.len(), n - 1);
            // Row 0 absorbs everything; at most the rows computed ahead of it (the window)
            // were scanned too: O(n) comparisons and neighbour indices, not n² / 2.
            let bound = (WINDOW + threads) * n;
            assert!(cost.compared <= bound, "{threads}: {cost:?}");
            assert!(cost.peak_listed <= bound, "{threads}: {cost:?}");
            assert!(bound < n * (n - 1) / 2 / 10);
        }
        // With nothing to merge every pair is compared, but lists stay empty.
        let mut distinct = MergeSet::with_capacity(d, 500);
        for i in 0..500u64 {
            distinct.push(i as i64, 0, &unit(&pseudo_random(i + 100, d)));
        }
        let (groups, cost) = distinct.plan_counted(0.999_999, 2);
        assert!(groups.is_empty());
        assert_eq!(cost.compared, 500 * 499 / 2);
        assert_eq!(cost.peak_listed, 0);
    }

    #[test]
    fn zero_vectors_never_merge_and_bad_thresholds_are_refused() {
        let z = [0.0f32, 0.0];
        assert!(set(&[(1, 1, &z), (2, 2, &z)]).plan(0.01).is_empty());
        for t in [0.0, -0.5, 1.5, f32::NAN, f32::INFINITY] {
            let policy = PrunePolicy::new().merge_similarity(t);
            assert!(validate(&policy).is_err(), "{t} accepted");
        }
        let ok = PrunePolicy::new().merge_similarity(1.0);
        assert!(validate(&ok).is_ok());
    }
}
