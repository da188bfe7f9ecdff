//! Prune rules shared by the backends: policy checks and near-duplicate merge planning.

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

/// An entry considered for merging: id, creation time, unit vector.
pub(crate) struct MergeCandidate<'a> {
    pub id: i64,
    pub created_at: i64,
    pub vector: &'a [f32],
}

/// Candidates × dimensions above which the pairwise comparison is split across threads.
const PARALLEL_MIN_FLOATS: usize = 1_000_000;

/// Plans near-duplicate merges. Entries are visited oldest first (`created_at`, then id);
/// each one not yet absorbed absorbs every newer, not yet absorbed entry whose cosine
/// similarity to it is at least `threshold`. Vectors must be unit length (all-zero vectors
/// have similarity 0 to everything and so never merge). Cost: O(n² · dimensions), the
/// comparisons spread over the available cores.
pub(crate) fn plan_merges(candidates: Vec<MergeCandidate<'_>>, threshold: f32) -> Vec<MergeGroup> {
    let floats = candidates
        .len()
        .saturating_mul(candidates.first().map_or(0, |c| c.vector.len()));
    let threads = if floats >= PARALLEL_MIN_FLOATS {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(8)
    } else {
        1
    };
    plan_merges_with(candidates, threshold, threads)
}

/// [`plan_merges`] comparing with `threads` threads.
fn plan_merges_with(
    mut candidates: Vec<MergeCandidate<'_>>,
    threshold: f32,
    threads: usize,
) -> Vec<MergeGroup> {
    candidates.sort_by_key(|c| (c.created_at, c.id));
    let n = candidates.len();
    // similar[i]: every j > i with similarity ≥ threshold, ascending. Computed in parallel
    // (thread t takes rows t, t + T, …, which balances the triangle), consumed in order.
    let threads = threads.clamp(1, n.max(1));
    let neighbours = |i: usize| -> Vec<usize> {
        (i + 1..n)
            .filter(|&j| dot(candidates[i].vector, candidates[j].vector) >= threshold)
            .collect()
    };
    let mut similar: Vec<Vec<usize>> = vec![Vec::new(); n];
    if threads <= 1 {
        for (i, list) in similar.iter_mut().enumerate() {
            *list = neighbours(i);
        }
    } else {
        let parts: Vec<Vec<(usize, Vec<usize>)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let neighbours = &neighbours;
                    scope.spawn(move || {
                        (t..n)
                            .step_by(threads)
                            .map(|i| (i, neighbours(i)))
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .zip(0..threads)
                .map(|(h, t)| {
                    // A comparison thread cannot panic; if one did, its rows are redone here.
                    h.join().unwrap_or_else(|_| {
                        (t..n)
                            .step_by(threads)
                            .map(|i| (i, neighbours(i)))
                            .collect()
                    })
                })
                .collect()
        });
        for (i, list) in parts.into_iter().flatten() {
            similar[i] = list;
        }
    }
    let mut absorbed = vec![false; n];
    let mut groups = Vec::new();
    for i in 0..n {
        if absorbed[i] {
            continue;
        }
        let mut group = Vec::new();
        for &j in &similar[i] {
            if !absorbed[j] {
                absorbed[j] = true;
                group.push(candidates[j].id);
            }
        }
        if !group.is_empty() {
            groups.push(MergeGroup {
                keeper: candidates[i].id,
                absorbed: group,
            });
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_into_the_oldest_and_does_not_chain() {
        let a = [1.0f32, 0.0];
        // cos(a, b) = 0.8, cos(b, c) = 0.8, cos(a, c) = 0.28.
        let b = [0.8f32, 0.6];
        let c = [0.28f32, 0.96];
        let d = [1.0f32, 0.0];
        let groups = plan_merges(
            vec![
                MergeCandidate {
                    id: 4,
                    created_at: 40,
                    vector: &d,
                },
                MergeCandidate {
                    id: 3,
                    created_at: 30,
                    vector: &c,
                },
                MergeCandidate {
                    id: 2,
                    created_at: 20,
                    vector: &b,
                },
                MergeCandidate {
                    id: 1,
                    created_at: 10,
                    vector: &a,
                },
            ],
            0.75,
        );
        // a absorbs b and d; c is only similar to b, which is gone, so c stays.
        assert_eq!(
            groups,
            vec![MergeGroup {
                keeper: 1,
                absorbed: vec![2, 4]
            }]
        );
    }

    #[test]
    fn parallel_planning_matches_sequential() {
        // Clusters of near-duplicates, compared on 3 threads.
        let d = 64;
        let vectors: Vec<Vec<f32>> = (0..600u64)
            .map(|i| {
                let cluster = i % 40;
                let v: Vec<f32> = (0..d)
                    .map(|k| {
                        let base = ((cluster * 7919 + k as u64 * 104_729) % 1000) as f32 - 500.0;
                        let noise = ((i * 31 + k as u64 * 17) % 13) as f32;
                        base + noise
                    })
                    .collect();
                crate::vector::unit(&v)
            })
            .collect();
        let candidates = || {
            vectors
                .iter()
                .enumerate()
                .map(|(i, v)| MergeCandidate {
                    id: i as i64,
                    created_at: (i % 97) as i64,
                    vector: v,
                })
                .collect::<Vec<_>>()
        };
        let planned = plan_merges_with(candidates(), 0.999, 3);
        // The same plan computed naively.
        let mut sorted = candidates();
        sorted.sort_by_key(|c| (c.created_at, c.id));
        let mut absorbed = vec![false; sorted.len()];
        let mut naive = Vec::new();
        for i in 0..sorted.len() {
            if absorbed[i] {
                continue;
            }
            let mut group = Vec::new();
            for j in i + 1..sorted.len() {
                if !absorbed[j] && dot(sorted[i].vector, sorted[j].vector) >= 0.999 {
                    absorbed[j] = true;
                    group.push(sorted[j].id);
                }
            }
            if !group.is_empty() {
                naive.push(MergeGroup {
                    keeper: sorted[i].id,
                    absorbed: group,
                });
            }
        }
        assert!(!naive.is_empty());
        assert_eq!(planned, naive);
    }

    #[test]
    fn zero_vectors_never_merge_and_bad_thresholds_are_refused() {
        let z = [0.0f32, 0.0];
        let groups = plan_merges(
            vec![
                MergeCandidate {
                    id: 1,
                    created_at: 1,
                    vector: &z,
                },
                MergeCandidate {
                    id: 2,
                    created_at: 2,
                    vector: &z,
                },
            ],
            0.01,
        );
        assert!(groups.is_empty());
        for t in [0.0, -0.5, 1.5, f32::NAN, f32::INFINITY] {
            let policy = PrunePolicy {
                merge_similarity: Some(t),
                ..PrunePolicy::default()
            };
            assert!(validate(&policy).is_err(), "{t} accepted");
        }
        let ok = PrunePolicy {
            merge_similarity: Some(1.0),
            ..PrunePolicy::default()
        };
        assert!(validate(&ok).is_ok());
    }
}
