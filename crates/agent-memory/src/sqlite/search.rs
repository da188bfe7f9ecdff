//! Search: the vector and keyword rankings, their fusion, and recording recalls.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use agent_op::{Candidate, MemoryEntry, MemoryError, MemoryId, ScoredMemory, SearchOptions};
use sqlx::sqlite::SqliteConnection;

use super::cache::{VectorCache, read_cache};
use super::read::with_tags;
use super::retry::{DbError, read_tx, write_tx};
use super::{EntryRow, MAX_KEYWORD_POSTINGS, SqliteBackend, cache, json_ids};
use crate::clock::{ceil_micros, now_micros};
use crate::common::{cpu, distinct_ids, embed_checked, format_id, parse_id, validate_query};
use crate::rank::{candidates, fuse, keyword_terms};
use crate::text::{fts_match, fts_terms};
use crate::vector::{Hit, cosine, unit};

impl SqliteBackend {
    /// The fused ranking for `query`: the best `k` entry ids with their scores, best first,
    /// and the query's unit vector. Records nothing.
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
        let vector =
            embed_checked(self.inner.embedder.as_ref(), self.inner.dimensions, query).await?;
        let query_unit = unit(&vector);
        self.sync().await?;
        let candidates = candidates(k);
        let filter = Filter::new(options);
        let terms = fts_terms(query);
        let keywords = async {
            if terms.is_empty() {
                return Ok(Vec::new());
            }
            let entries = read_cache(&self.inner.cache).len() as u64;
            let limit = i64::try_from(candidates).unwrap_or(i64::MAX);
            read_tx!(self, "searching keywords", |conn| {
                keyword_search(&mut *conn, &terms, entries, limit, filter.as_ref()).await?
            })
        };
        let vector_scan = self.vector_ranking(vector, candidates, options, filter.as_ref());
        let (vector_hits, keyword_hits) = tokio::join!(vector_scan, keywords);
        let (vector_hits, keyword_hits) = (vector_hits?, keyword_hits?);
        let vector_hits: Vec<i64> = vector_hits.into_iter().map(|hit| hit.id).collect();

        let fused = if terms.is_empty() {
            fuse(&[&vector_hits], k)
        } else {
            fuse(&[&vector_hits, &keyword_hits], k)
        };
        Ok(Ranking { fused, query_unit })
    }

    /// The `k` entries whose vectors are nearest `vector` (cosine similarity, best first)
    /// among those `options` admits, with their similarity — vector search alone, for a
    /// caller that already has the query's embedding: no embedding call, no keyword search,
    /// no recall recorded. `vector` must have the store's dimension and finite values
    /// ([`MemoryError::Embedding`] otherwise).
    pub async fn nearest(
        &self,
        vector: &[f32],
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<(MemoryId, f32)>, MemoryError> {
        agent_op::check_embedding(vector, self.inner.dimensions)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        self.sync().await?;
        let filter = Filter::new(options);
        let hits = self
            .vector_ranking(vector.to_vec(), k, options, filter.as_ref())
            .await?;
        Ok(hits
            .into_iter()
            .map(|h| (format_id(h.id), h.score))
            .collect())
    }

    /// The vector ranking of [`rank`](SqliteBackend::rank): the handle's copy must be
    /// synced. Runs off the executor when large.
    async fn vector_ranking(
        &self,
        vector: Vec<f32>,
        count: usize,
        options: &SearchOptions,
        filter: Option<&Filter>,
    ) -> Result<Vec<Hit>, MemoryError> {
        // The entries the restrictions admit, as of now; the vector scan checks each row
        // that could make the top against this set, so the best admitted rows are found.
        let admitted: Option<HashSet<i64>> = match filter {
            Some(filter) => {
                let listed = read_tx!(self, "listing the entries a search may return", |conn| {
                    filter.admitted(&mut *conn).await?
                });
                Some(listed?)
            }
            None => None,
        };
        let exact = options.exact;
        let cost = read_cache(&self.inner.cache).search_cost(exact);
        let cache = self.inner.cache.clone();
        cpu(cost, move || {
            let copy = read_cache(&cache);
            match &admitted {
                Some(admitted) => {
                    copy.search_where(&vector, count, &|id| admitted.contains(&id), exact)
                }
                None => copy.search_where(&vector, count, &|_| true, exact),
            }
        })
        .await
    }

    pub(super) async fn search_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<ScoredMemory>, MemoryError> {
        let ranking = self.rank(query, k, options).await?;
        if ranking.fused.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ranking.fused.iter().map(|(id, _)| *id).collect();
        let mut by_id = self.recall(&ids).await?;
        Ok(ranking
            .fused
            .into_iter()
            .filter_map(|(id, score)| {
                // Deleted since it was ranked: not a result any more.
                let entry = by_id.remove(&id)?;
                Some(ScoredMemory { entry, score })
            })
            .collect())
    }

    pub(super) async fn search_candidates_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<Candidate>, MemoryError> {
        let ranking = self.rank(query, k, options).await?;
        if ranking.fused.is_empty() {
            return Ok(Vec::new());
        }
        let ids_json = json_ids(&ranking.fused.iter().map(|(id, _)| *id).collect::<Vec<_>>());
        let (cache, dimensions) = (&self.inner.cache, self.inner.dimensions);
        let query_unit = &ranking.query_unit;
        let (found, mut similarities) = read_tx!(self, "reading search candidates", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT id, content, context, created_at, accessed_at, access_count \
                 FROM entries WHERE id IN (SELECT value FROM json_each(?1))",
            )
            .bind(&ids_json)
            .fetch_all(&mut *conn)
            .await?;
            let ids: Vec<i64> = rows.iter().map(|row| row.0).collect();
            let similarities =
                candidate_similarities(&mut *conn, cache, dimensions, query_unit, &ids).await?;
            (with_tags(&mut *conn, rows).await?, similarities)
        })?;
        let mut by_id: HashMap<MemoryId, MemoryEntry> =
            found.into_iter().map(|e| (e.id.clone(), e)).collect();
        Ok(ranking
            .fused
            .into_iter()
            .filter_map(|(id, score)| {
                let entry = by_id.remove(&format_id(id))?;
                Some(Candidate {
                    hit: ScoredMemory { entry, score },
                    similarity: similarities.remove(&id),
                })
            })
            .collect())
    }

    /// Records a recall of the entries `ids` (access time now — never moved back — and count
    /// + 1) in one write transaction; returns the updated entries that still exist.
    pub(super) async fn recall(
        &self,
        ids: &[i64],
    ) -> Result<HashMap<i64, MemoryEntry>, MemoryError> {
        let ids_json = json_ids(ids);
        let now = now_micros(self.inner.clock.as_ref());
        let recalled = write_tx!(self, "recording a recall", |conn| {
            // `max`: `now` was read before waiting for the lock, and other processes' clocks
            // may be behind; an access time never moves back.
            let rows: Vec<EntryRow> = sqlx::query_as(
                "UPDATE entries SET accessed_at = max(accessed_at, ?1), \
                     access_count = access_count + 1 \
                 WHERE id IN (SELECT value FROM json_each(?2)) \
                 RETURNING id, content, context, created_at, accessed_at, access_count",
            )
            .bind(now)
            .bind(&ids_json)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })?;
        Ok(recalled
            .into_iter()
            .filter_map(|e| Some((parse_id(&e.id)?, e)))
            .collect())
    }

    pub(super) async fn record_access_inner(
        &self,
        ids: &[MemoryId],
    ) -> Result<Vec<MemoryEntry>, MemoryError> {
        let rows = distinct_ids(ids);
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut by_id = self.recall(&rows).await?;
        Ok(rows.iter().filter_map(|n| by_id.remove(n)).collect())
    }
}

/// A fused search ranking: entry ids with scores, best first, and the query's unit vector.
#[derive(Default)]
pub(super) struct Ranking {
    fused: Vec<(i64, f32)>,
    query_unit: Vec<f32>,
}

/// The keyword ranking: entry ids best first by BM25 (content weight 1, context 0.5), at
/// most `limit`.
///
/// Which terms are searched: BM25 must score every entry a term occurs in, so each term's
/// document count is probed first (counting stops at [`MAX_KEYWORD_POSTINGS`] + 1), and
/// [`keyword_terms`] picks the terms (rarest first, within the budget, no stop words).
pub(super) async fn keyword_search(
    conn: &mut SqliteConnection,
    terms: &[String],
    entries: u64,
    limit: i64,
    filter: Option<&Filter>,
) -> Result<Vec<i64>, DbError> {
    let cap = i64::try_from(MAX_KEYWORD_POSTINGS + 1).unwrap_or(i64::MAX);
    let cap_param = terms.len() + 1;
    let sql = (1..=terms.len())
        .map(|i| {
            format!(
                "SELECT {i}, count(*) FROM (SELECT 1 FROM entries_fts \
                 WHERE entries_fts MATCH ?{i} LIMIT ?{cap_param})"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut probe = sqlx::query_as::<_, (i64, i64)>(&sql);
    for term in terms {
        probe = probe.bind(fts_match(&[term.as_str()]));
    }
    let counts = probe.bind(cap).fetch_all(&mut *conn).await?;
    let counted: Vec<(u64, &str)> = counts
        .into_iter()
        .filter_map(|(i, docs)| {
            let term = terms.get(usize::try_from(i - 1).ok()?)?;
            Some((u64::try_from(docs).unwrap_or(0), term.as_str()))
        })
        .collect();
    let chosen = keyword_terms(counted, entries);
    let Some(expr) = fts_match(&chosen) else {
        return Ok(Vec::new());
    };
    let rows: Vec<(i64,)> = match filter {
        None => {
            sqlx::query_as(
                "SELECT rowid FROM entries_fts WHERE entries_fts MATCH ?1 \
                 ORDER BY bm25(entries_fts, 1.0, 0.5), rowid LIMIT ?2",
            )
            .bind(expr)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?
        }
        Some(filter) => {
            let sql = format!(
                "SELECT entries_fts.rowid FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid \
                 WHERE entries_fts MATCH ?1 AND {} \
                 ORDER BY bm25(entries_fts, 1.0, 0.5), entries_fts.rowid LIMIT ?2",
                Filter::CONDITION
            );
            filter
                .bind(sqlx::query_as(&sql).bind(expr).bind(limit))
                .fetch_all(&mut *conn)
                .await?
        }
    };
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The restrictions of [`SearchOptions`] as SQL on `entries e`; `None` when there are none.
pub(super) struct Filter {
    after: Option<i64>,
    before: Option<i64>,
    /// The distinct tags asked for, as a JSON array.
    tags: String,
    tag_count: i64,
}

impl Filter {
    /// The condition, with the filter's values bound as parameters 3 to 6 (1 and 2 are the
    /// query's own).
    const CONDITION: &'static str = "(?3 IS NULL OR e.created_at >= ?3) \
         AND (?4 IS NULL OR e.created_at < ?4) \
         AND (?5 = 0 OR e.id IN (SELECT entry_id FROM entry_tags \
              WHERE tag IN (SELECT value FROM json_each(?6)) \
              GROUP BY entry_id HAVING count(*) = ?5))";

    pub(super) fn new(options: &SearchOptions) -> Option<Filter> {
        if options.is_unrestricted() {
            return None;
        }
        let tags: std::collections::BTreeSet<&str> =
            options.tags.iter().map(|t| t.0.as_str()).collect();
        Some(Filter {
            after: options.created_after.map(ceil_micros),
            before: options.created_before.map(ceil_micros),
            tag_count: i64::try_from(tags.len()).unwrap_or(i64::MAX),
            tags: serde_json::Value::from(tags.into_iter().collect::<Vec<_>>()).to_string(),
        })
    }

    /// Binds the filter's values as parameters 3 to 6 of `query`.
    fn bind<'q, O>(
        &'q self,
        query: sqlx::query::QueryAs<'q, sqlx::Sqlite, O, sqlx::sqlite::SqliteArguments<'q>>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Sqlite, O, sqlx::sqlite::SqliteArguments<'q>> {
        query
            .bind(self.after)
            .bind(self.before)
            .bind(self.tag_count)
            .bind(&self.tags)
    }

    /// Every entry the filter admits.
    async fn admitted(&self, conn: &mut SqliteConnection) -> Result<HashSet<i64>, DbError> {
        // Parameters 1 and 2 are unused here; bound so the numbering matches `CONDITION`.
        let sql = format!(
            "SELECT e.id FROM entries e WHERE ?1 IS NULL AND ?2 IS NULL AND {}",
            Filter::CONDITION
        );
        let rows: Vec<(i64,)> = self
            .bind(sqlx::query_as(&sql).bind(None::<i64>).bind(None::<i64>))
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

/// The cosine similarity of the unit vector `query` and the vector of each of `ids` that has
/// a usable one. `conn` must be in the read transaction the ids were read in.
///
/// Most come from the vector copy. An id the copy lacks — stored by another handle after the
/// copy was last synced (the keyword search reads a newer snapshot than the sync), or
/// removed from it by a later sync — has its vector read from `conn`'s snapshot and decoded
/// here, so a usable vector is never missed. Taking some from the copy and some from the
/// file is consistent because a stored vector never changes and ids are never reused. Ids
/// left out have no usable vector (damaged, see [`cache::decode`]).
pub(super) async fn candidate_similarities(
    conn: &mut SqliteConnection,
    cache: &RwLock<VectorCache>,
    dimensions: usize,
    query: &[f32],
    ids: &[i64],
) -> Result<HashMap<i64, f32>, DbError> {
    let mut found = HashMap::with_capacity(ids.len());
    let mut missing = Vec::new();
    {
        // A few dot products: cheap enough to do under the lock on the executor.
        let copy = read_cache(cache);
        for &id in ids {
            match copy.similarity(query, id) {
                Some(similarity) => {
                    found.insert(id, similarity);
                }
                None => missing.push(id),
            }
        }
    }
    if missing.is_empty() {
        return Ok(found);
    }
    let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
        "SELECT entry_id, CAST(vector AS BLOB) FROM embeddings \
         WHERE entry_id IN (SELECT value FROM json_each(?1))",
    )
    .bind(json_ids(&missing))
    .fetch_all(&mut *conn)
    .await?;
    for (id, blob) in rows {
        if let Ok(vector) = cache::decode(&blob, dimensions) {
            // As the copy holds it: scaled to unit length.
            found.insert(id, cosine(query, &unit(&vector)));
        }
    }
    Ok(found)
}
