//! What the SQLite and PostgreSQL backends rank the same way: how many candidates each
//! ranking gets, which keyword terms are searched, and reciprocal rank fusion of the
//! rankings into one.

use std::collections::HashMap;

/// The RRF constant `k`: a hit at rank `r` (1-based) of a list contributes `1 / (k + r)`.
pub const RRF_K: f32 = 60.0;

/// Each of the vector and keyword searches ranks at least this many candidates (or `2k` if
/// larger) before fusion.
pub const MIN_CANDIDATES: usize = 50;

/// Keyword search reads at most this many postings (term × entry pairs): the query's terms
/// are taken rarest first while their document counts fit (see `docs/MEMORY.md`).
pub const MAX_KEYWORD_POSTINGS: u64 = 5_000;

/// A term must be in more entries than this (and in more than half of them) to be treated
/// as a stop word by keyword search.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) const STOP_WORD_MIN_DOCS: u64 = 50;

/// How many candidates each ranking of a top-`k` search gets.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn candidates(k: usize) -> usize {
    k.saturating_mul(2).max(MIN_CANDIDATES)
}

/// How long a fused ranking is for a top-`k` search: `k` hits and `k` spares, which take
/// the place of hits deleted between the ranking and the statement that reads (or records)
/// them. Both rankings hold [`candidates`]`(k) ≥ 2k` entries, so fusing them gives that many.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn ranked_len(k: usize) -> usize {
    k.saturating_mul(2)
}

/// The terms keyword search uses, rarest first, given each term's document count (counted
/// up to [`MAX_KEYWORD_POSTINGS`] + 1) and the number of `entries` (needed only up to
/// `2 × MAX_KEYWORD_POSTINGS`).
///
/// The ranking function must score every entry a term occurs in, so the cost is bounded:
/// terms are taken rarest first while their counts add up to at most
/// [`MAX_KEYWORD_POSTINGS`]; a term in more than half of the entries (and more than
/// [`STOP_WORD_MIN_DOCS`]) is a stop word and skipped — BM25 would give it no weight. In
/// small stores every other term is used; in large ones common words are left to vector
/// search. Terms found nowhere are dropped.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn keyword_terms(mut counts: Vec<(u64, &str)>, entries: u64) -> Vec<&str> {
    counts.retain(|(docs, _)| *docs <= STOP_WORD_MIN_DOCS || docs.saturating_mul(2) <= entries);
    counts.sort_by_key(|(docs, _)| *docs);
    let mut budget = MAX_KEYWORD_POSTINGS;
    let mut chosen = Vec::new();
    for (docs, term) in counts {
        if docs == 0 {
            continue;
        }
        if docs > budget {
            break;
        }
        budget -= docs;
        chosen.push(term);
    }
    chosen
}

/// Fuses best-first ranked lists of ids with reciprocal rank fusion and returns the best
/// `limit` ids with their scores, best first.
///
/// An id's raw score is the sum over the lists containing it of `1 / (RRF_K + rank)`. It is
/// then divided by the best raw score possible, `lists / (RRF_K + 1)` (first in every list),
/// so scores fall in (0, 1]. Ties go to the better best rank, then the lower id. `lists`
/// counts every list consulted, empty ones included: a hit found only by one of two searches
/// scores at most 0.5.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
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

    #[test]
    fn keyword_terms_are_rarest_first_within_the_budget() {
        let counts = vec![
            (3, "rare"),
            (0, "absent"),
            (4_000, "common"),
            (2_000, "medium"),
        ];
        // 3 + 2,000 fit; 4,000 more would not.
        assert_eq!(keyword_terms(counts.clone(), 100_000), ["rare", "medium"]);
        // In 3,000 entries, a term in 2,000 of them is a stop word (so is the one in 4,000).
        assert_eq!(keyword_terms(counts, 3_000), ["rare"]);
        // Small stores: anything in at most 50 entries counts, even in all of them.
        assert_eq!(keyword_terms(vec![(40, "all")], 40), ["all"]);
        assert_eq!(candidates(3), MIN_CANDIDATES);
        assert_eq!(candidates(100), 200);
    }
}
