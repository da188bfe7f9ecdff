//! Search: the vector ranking (HNSW or exact), fusion with the keyword ranking, and
//! recording recalls.

use std::collections::HashMap;

use agent_op::{Candidate, MemoryEntry, MemoryError, MemoryId, ScoredMemory, SearchOptions};
use sqlx::PgConnection;

use super::keywords::{Filter, keyword_ranking};
use super::retry::{DbError, statement};
use super::{ENTRY_COLUMNS, EntryRow, PostgresBackend, entry};
use crate::clock::now_micros;
use crate::common::{distinct_ids, embed_checked, validate_query};
use crate::rank::{candidates, fuse, ranked_len};
use crate::text::cased_terms;
use crate::vector::unit;

/// A fused search ranking: entry ids with scores, best first, and the query's unit vector.
#[derive(Default)]
pub(super) struct Ranking {
    fused: Vec<(i64, f32)>,
    query_unit: Vec<f32>,
}

/// How the vector ranking reads the vectors.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Scan {
    /// Through the HNSW index (approximate).
    Index,
    /// Every vector the filter admits (exact).
    Exact,
}

impl PostgresBackend {
    /// The fused ranking for `query`: the best [`ranked_len`]`(k)` entry ids with their
    /// scores, best first (the first `k` are the hits, the rest stand in for hits deleted
    /// before they are read), and the query's unit vector. Records nothing.
    pub(super) async fn rank(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Ranking, MemoryError> {
        validate_query(query)?;
        if k == 0 {
            return Ok(Ranking::default());
        }
        let filter = Filter::new(options);
        if filter.as_ref().is_some_and(Filter::admits_nothing) {
            return Ok(Ranking::default());
        }
        let vector =
            embed_checked(self.inner.embedder.as_ref(), self.inner.dimensions, query).await?;
        let query_unit = unit(&vector);
        let candidates = candidates(k);
        let limit = i64::try_from(candidates).unwrap_or(i64::MAX);
        let terms = cased_terms(query);

        // The two rankings run at the same time, on two pooled connections.
        let vector_ranking = async {
            if query_unit.iter().all(|x| *x == 0.0) {
                // An all-zero query is similar to nothing.
                return Ok(Vec::new());
            }
            self.vector_ranking(&query_unit, limit, filter.as_ref(), options.exact)
                .await
        };
        let keywords = async {
            if terms.is_empty() {
                return Ok(Vec::new());
            }
            statement!(self, "searching keywords", |conn| {
                keyword_ranking(&mut *conn, &terms, limit, filter.as_ref()).await?
            })
        };
        let (vector_hits, keyword_hits) = tokio::join!(vector_ranking, keywords);
        let (vector_hits, keyword_hits) = (vector_hits?, keyword_hits?);
        let fused = if terms.is_empty() {
            fuse(&[&vector_hits], ranked_len(k))
        } else {
            fuse(&[&vector_hits, &keyword_hits], ranked_len(k))
        };
        Ok(Ranking { fused, query_unit })
    }

    /// The vector ranking: up to `limit` entry ids by cosine distance to `query` (a unit
    /// vector), best first, only positive similarities.
    ///
    /// Approximate through the HNSW index unless `exact`, the store has no index, or a
    /// filter is set and pgvector lacks iterative scans (before 0.8 an HNSW scan stops after
    /// `hnsw.ef_search` rows, filtered or not, so a filter could leave too few). An index
    /// scan that yields fewer than `limit` rows — a store smaller than that, a filter that
    /// admits few entries, or an iterative scan that gave up at `hnsw.max_scan_tuples` — is
    /// redone exactly, so the best admitted entries are never missed for the index's sake.
    async fn vector_ranking(
        &self,
        query: &[f32],
        limit: i64,
        filter: Option<&Filter>,
        exact: bool,
    ) -> Result<Vec<i64>, MemoryError> {
        let approximate =
            !exact && self.inner.indexed && (filter.is_none() || self.inner.iterative);
        let scan = if approximate {
            Scan::Index
        } else {
            Scan::Exact
        };
        let mut hits = statement!(self, "searching vectors", |conn| {
            nearest(&mut *conn, query, limit, filter, scan).await?
        })?;
        if scan == Scan::Index && i64::try_from(hits.len()).unwrap_or(i64::MAX) < limit {
            hits = statement!(self, "searching vectors", |conn| {
                nearest(&mut *conn, query, limit, filter, Scan::Exact).await?
            })?;
        }
        // Iterative scans may return rows slightly out of order (`relaxed_order`).
        hits.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        // Cosine distance is 1 − similarity: only positive similarities count (NaN, from an
        // all-zero stored vector, does not).
        Ok(hits
            .into_iter()
            .filter(|(_, distance)| *distance < 1.0)
            .map(|(id, _)| id)
            .collect())
    }

    pub(super) async fn search_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<ScoredMemory>, MemoryError> {
        for attempt in 1..=RANK_ATTEMPTS {
            let ranking = self.rank(query, k, options).await?;
            if ranking.fused.is_empty() {
                return Ok(Vec::new());
            }
            let last = attempt == RANK_ATTEMPTS;
            if let Some(hits) = self.recall_ranked(&ranking.fused, k, last).await? {
                return Ok(hits);
            }
        }
        Ok(Vec::new())
    }

    /// Records a recall of the first `k` entries of `ranked` still stored, locking ranked
    /// entries first (in id order, so concurrent recalls cannot deadlock; at least every one
    /// it updates) so none can be deleted before the update; returns them in ranking order.
    /// `None`, recording nothing, when entries were deleted and fewer than `k` are left,
    /// unless `last`.
    ///
    /// Almost always every one of the first `k` is still stored: then one statement locks and
    /// updates just those ([`recall`](Self::recall), all or none). Only when one was deleted since the ranking does
    /// a second statement look at the spares, deciding inside it (`go`) and touching nothing
    /// when the answer is "no".
    pub(super) async fn recall_ranked(
        &self,
        ranked: &[(i64, f32)],
        k: usize,
        last: bool,
    ) -> Result<Option<Vec<ScoredMemory>>, MemoryError> {
        let now = now_micros(self.inner.clock.as_ref());
        let ids: Vec<i64> = ranked.iter().map(|(id, _)| *id).collect();
        let head = &ids[..k.min(ids.len())];
        let by_id = self.recall(now, head, true).await?;
        if by_id.len() == head.len() {
            return Ok(Some(in_ranking_order(ranked, by_id)));
        }
        let wanted = i64::try_from(k).unwrap_or(i64::MAX);
        // `greatest`: `now` was read before waiting for the row locks, and other processes'
        // clocks may be behind; an access time never moves back.
        let sql = format!(
            "WITH locked AS MATERIALIZED ( \
                 SELECT id FROM entries WHERE id = ANY($2) ORDER BY id FOR UPDATE), \
             chosen AS MATERIALIZED ( \
                 SELECT r.id FROM unnest($2::int8[]) WITH ORDINALITY AS r(id, i) \
                 WHERE r.id IN (SELECT id FROM locked) ORDER BY r.i LIMIT $3), \
             go AS MATERIALIZED ( \
                 SELECT (SELECT count(*) FROM chosen) >= $3 \
                     OR (SELECT count(*) FROM locked) >= cardinality($2::int8[]) \
                     OR $4 AS yes) \
             UPDATE entries e SET accessed_at = greatest(e.accessed_at, $1), \
                 access_count = e.access_count + 1 \
             FROM chosen c WHERE e.id = c.id AND (SELECT yes FROM go) \
             RETURNING {ENTRY_COLUMNS}"
        );
        let rows = statement!(self, "recording a recall", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(&sql)
                .bind(now)
                .bind(&ids)
                .bind(wanted)
                .bind(last)
                .fetch_all(&mut *conn)
                .await?;
            rows
        })?;
        // Nothing updated means "no" (`ranked` is never empty, so a "yes" updates at least
        // one entry unless every one was deleted, which only the last attempt accepts).
        if rows.is_empty() && !last {
            return Ok(None);
        }
        let by_id: HashMap<i64, MemoryEntry> =
            rows.into_iter().map(|row| (row.0, entry(row))).collect();
        Ok(Some(in_ranking_order(ranked, by_id)))
    }

    pub(super) async fn search_candidates_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<Candidate>, MemoryError> {
        for attempt in 1..=RANK_ATTEMPTS {
            let ranking = self.rank(query, k, options).await?;
            if ranking.fused.is_empty() {
                return Ok(Vec::new());
            }
            let (candidates, complete) = self.read_candidates(&ranking, k).await?;
            if complete || attempt == RANK_ATTEMPTS {
                return Ok(candidates);
            }
        }
        Ok(Vec::new())
    }

    /// The first `k` entries of `ranking` still stored, as candidates with their similarity
    /// to the query, and whether they are complete: `k` of them, or nothing was deleted.
    async fn read_candidates(
        &self,
        ranking: &Ranking,
        k: usize,
    ) -> Result<(Vec<Candidate>, bool), MemoryError> {
        let ids: Vec<i64> = ranking.fused.iter().map(|(id, _)| *id).collect();
        let sql = format!(
            "SELECT {ENTRY_COLUMNS}, (SELECT 1 - (v.embedding <=> $2::real[]::vector) \
                 FROM embeddings v WHERE v.entry_id = e.id) \
             FROM entries e WHERE e.id = ANY($1)"
        );
        let query_unit = &ranking.query_unit;
        let rows = statement!(self, "reading search candidates", |conn| {
            let rows: Vec<CandidateRow> = sqlx::query_as(&sql)
                .bind(&ids)
                .bind(query_unit)
                .fetch_all(&mut *conn)
                .await?;
            rows
        })?;
        let found = rows.len();
        let mut by_id: HashMap<i64, (MemoryEntry, Option<f32>)> = rows
            .into_iter()
            .map(
                |(id, content, context, created, accessed, count, tags, similarity)| {
                    let found = entry((id, content, context, created, accessed, count, tags));
                    (id, (found, similarity.map(similarity_of)))
                },
            )
            .collect();
        let candidates: Vec<Candidate> = ranking
            .fused
            .iter()
            .filter_map(|&(id, score)| {
                let (entry, similarity) = by_id.remove(&id)?;
                Some(Candidate {
                    hit: ScoredMemory { entry, score },
                    similarity,
                })
            })
            .take(k)
            .collect();
        let complete = candidates.len() == k || found == ids.len();
        Ok((candidates, complete))
    }

    /// Records a recall of the entries `ids` (access time `now` — never moved back — and
    /// count plus one) in one statement; returns the updated entries that still exist. Rows
    /// are locked in id order, so concurrent recalls of overlapping entries cannot deadlock.
    /// With `all_or_none`, nothing is recorded (and nothing returned) unless every one of
    /// `ids` is still stored.
    pub(super) async fn recall(
        &self,
        now: i64,
        ids: &[i64],
        all_or_none: bool,
    ) -> Result<HashMap<i64, MemoryEntry>, MemoryError> {
        let whole = if all_or_none {
            "AND (SELECT count(*) FROM locked) = cardinality($2::int8[])"
        } else {
            ""
        };
        // `greatest`: `now` was read before waiting for the row locks, and other processes'
        // clocks may be behind; an access time never moves back.
        let sql = format!(
            "WITH locked AS MATERIALIZED ( \
                 SELECT id FROM entries WHERE id = ANY($2) ORDER BY id FOR UPDATE) \
             UPDATE entries e SET accessed_at = greatest(e.accessed_at, $1), \
                 access_count = e.access_count + 1 \
             FROM locked l WHERE e.id = l.id {whole} \
             RETURNING {ENTRY_COLUMNS}"
        );
        let rows = statement!(self, "recording a recall", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(&sql)
                .bind(now)
                .bind(ids)
                .fetch_all(&mut *conn)
                .await?;
            rows
        })?;
        Ok(rows.into_iter().map(|row| (row.0, entry(row))).collect())
    }

    pub(super) async fn record_access_inner(
        &self,
        ids: &[MemoryId],
    ) -> Result<Vec<MemoryEntry>, MemoryError> {
        let rows = distinct_ids(ids);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_micros(self.inner.clock.as_ref());
        let mut by_id = self.recall(now, &rows, false).await?;
        Ok(rows.iter().filter_map(|n| by_id.remove(n)).collect())
    }
}

/// Rankings a search makes at most when the entries it ranked keep being deleted before
/// they are read: each ranking holds `k` spares, so one is almost always enough.
const RANK_ATTEMPTS: usize = 5;

/// The entries of `by_id` as hits, in the order of `ranked` (with its scores).
fn in_ranking_order(
    ranked: &[(i64, f32)],
    mut by_id: HashMap<i64, MemoryEntry>,
) -> Vec<ScoredMemory> {
    ranked
        .iter()
        .filter_map(|&(id, score)| {
            let entry = by_id.remove(&id)?;
            Some(ScoredMemory { entry, score })
        })
        .collect()
}

/// An entry row with the similarity of its vector to the query.
type CandidateRow = (i64, String, String, i64, i64, i64, Vec<String>, Option<f64>);

/// A similarity computed by pgvector as a search reports it: in [-1, 1], and 0 when either
/// vector is all zero (pgvector's NaN).
fn similarity_of(similarity: f64) -> f32 {
    if similarity.is_nan() {
        0.0
    } else {
        (similarity as f32).clamp(-1.0, 1.0)
    }
}

/// Up to `limit` (entry id, cosine distance) pairs nearest to `query` among the entries
/// `filter` admits. [`Scan::Exact`] orders by an expression the HNSW index cannot provide
/// (`distance + 0`), so the planner computes every admitted distance (a sequential or
/// filtered scan with a top-N sort) instead of walking the index.
///
/// The limit is written into the SQL rather than bound: planned with `LIMIT $n`, a generic
/// plan assumes a tenth of the table is wanted and always looks dearer than a custom plan,
/// so PostgreSQL planned the statement anew at every search (0.1 ms of 0.8). A search asks
/// for [`candidates`]`(k)` rows, which is the same for every `k` up to 25, so the
/// statement cache holds one form in practice.
async fn nearest(
    conn: &mut PgConnection,
    query: &[f32],
    limit: i64,
    filter: Option<&Filter>,
    scan: Scan,
) -> Result<Vec<(i64, f64)>, DbError> {
    const DISTANCE: &str = "(v.embedding <=> $1::real[]::vector)";
    let order = match scan {
        Scan::Index => DISTANCE.to_owned(),
        Scan::Exact => format!("{DISTANCE} + 0"),
    };
    let sql = match filter {
        None => {
            format!(
                "SELECT v.entry_id, {DISTANCE} FROM embeddings v ORDER BY {order} LIMIT {limit}"
            )
        }
        Some(filter) => format!(
            "SELECT v.entry_id, {DISTANCE} FROM embeddings v JOIN entries e ON e.id = v.entry_id \
             WHERE {} ORDER BY {order} LIMIT {limit}",
            filter.condition(2)
        ),
    };
    let query = sqlx::query_as(&sql).bind(query);
    let query = Filter::bind(filter, query);
    Ok(query.fetch_all(&mut *conn).await?)
}
