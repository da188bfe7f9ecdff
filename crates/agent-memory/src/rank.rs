//! Reciprocal rank fusion: one ranking from several.

use std::collections::HashMap;

/// The RRF constant `k`: a hit at rank `r` (1-based) of a list contributes `1 / (k + r)`.
pub const RRF_K: f32 = 60.0;

/// Fuses best-first ranked lists of ids with reciprocal rank fusion and returns the best
/// `limit` ids with their scores, best first.
///
/// An id's raw score is the sum over the lists containing it of `1 / (RRF_K + rank)`. It is
/// then divided by the best raw score possible, `lists / (RRF_K + 1)` (first in every list),
/// so scores fall in (0, 1]. Ties go to the better best rank, then the lower id. `lists`
/// counts every list consulted, empty ones included: a hit found only by one of two searches
/// scores at most 0.5.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // used by the SQLite backend
pub(crate) fn fuse(lists: &[&[i64]], limit: usize) -> Vec<(i64, f32)> {
    let mut scores: HashMap<i64, (f32, usize)> = HashMap::new();
    for list in lists {
        for (i, id) in list.iter().enumerate() {
            let rank = i + 1;
            let slot = scores.entry(*id).or_insert((0.0, rank));
            slot.0 += 1.0 / (RRF_K + rank as f32);
            slot.1 = slot.1.min(rank);
        }
    }
    let best = lists.len().max(1) as f32 / (RRF_K + 1.0);
    let mut fused: Vec<(i64, f32, usize)> = scores
        .into_iter()
        .map(|(id, (score, best_rank))| (id, (score / best).min(1.0), best_rank))
        .collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)).then(a.0.cmp(&b.0)));
    fused.truncate(limit);
    fused
        .into_iter()
        .map(|(id, score, _)| (id, score))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_wins_and_scores_are_normalized() {
        let vector = [1, 2, 3];
        let keyword = [3, 4];
        let fused = fuse(&[&vector, &keyword], 10);
        let ids: Vec<i64> = fused.iter().map(|f| f.0).collect();
        // 3 is in both lists; 1 is first of one list; 2 and 4 are both second of one list
        // and tie, so the lower id comes first.
        assert_eq!(ids, [3, 1, 2, 4]);
        let top = 1.0 / 63.0 + 1.0 / 61.0;
        assert!((fused[0].1 - top / (2.0 / 61.0)).abs() < 1e-6);
        assert!((fused[1].1 - 0.5).abs() < 1e-6);
        assert_eq!(fuse(&[&vector], 1), vec![(1, 1.0)]);
        assert!(fuse(&[&[], &[]], 5).is_empty());
    }
}
