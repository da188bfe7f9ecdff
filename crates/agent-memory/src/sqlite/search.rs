//! Search: the vector and keyword rankings, their fusion, and recording recalls.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, RwLock};

use agent_op::{Candidate, MemoryEntry, MemoryError, MemoryId, ScoredMemory, SearchOptions, Tag};
use sqlx::sqlite::SqliteConnection;

use super::cache::{VectorCache, read_cache};
use super::read::{entry_of, with_tags};
use super::retry::{DbError, read_each, read_tx, write_one, write_tx};
use super::{EntryRow, MAX_KEYWORD_POSTINGS, SqliteBackend, cache, json_ids};
use crate::clock::{ceil_micros, now_micros};
use crate::common::{
    cpu, distinct_ids, embed_checked, format_id, parse_id, runs_here, validate_query,
};
use crate::rank::{candidates, fuse, keyword_terms, ranked_len};
use crate::text::{fts_match, fts_terms};
use crate::vector::{Hit, IdHasher, Restriction, cosine, unit};

impl SqliteBackend {
    /// The query's vector and words, embedded and parsed once for every ranking of one
    /// search; `None` for `k = 0`.
    async fn prepare(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Option<Prepared>, MemoryError> {
        validate_query(query)?;
        if k == 0 {
            return Ok(None);
        }
        let vector =
            embed_checked(self.inner.embedder.as_ref(), self.inner.dimensions, query).await?;
        Ok(Some(Prepared {
            query_unit: unit(&vector),
            vector,
            terms: fts_terms(query),
            filter: Filter::new(options),
            exact: options.exact,
            k,
        }))
    }

    /// The fused ranking for a prepared query: the best [`ranked_len`] entry ids with their
    /// scores, best first (the first `k` are the hits, the rest stand in for hits deleted
    /// before they are read). Records nothing.
    ///
    /// The keyword search is polled first, so its first statement runs on its connection's
    /// thread while the graph walk runs here, and (without restrictions) the check that
    /// nothing was committed since the copy was synced runs beside the walk too (see
    /// [`on_current_copy`](SqliteBackend::on_current_copy)): a search of an unchanged store
    /// waits for the walk, not for round trips before it.
    async fn rank(&self, prepared: &Prepared) -> Result<Vec<(i64, f32)>, MemoryError> {
        let candidates = candidates(prepared.k);
        let filter = prepared.filter.as_ref();
        let terms = &prepared.terms;
        let cache = &self.inner.cache;
        let keywords = async {
            if terms.is_empty() {
                return Ok(Vec::new());
            }
            let entries = read_cache(cache).len() as u64;
            let limit = i64::try_from(candidates).unwrap_or(i64::MAX);
            read_each!(self, "searching keywords", |conn| {
                keyword_search(&mut *conn, terms, entries, limit, filter).await?
            })
        };
        let vector_scan = async {
            let Some(filter) = filter else {
                let read = || {
                    vector_ranking(
                        cache,
                        prepared.vector.clone(),
                        candidates,
                        prepared.exact,
                        None,
                    )
                };
                // As in `nearest`: a scan big enough for the blocking pool waits for the
                // check instead of being redone after a commit elsewhere.
                if runs_here(read_cache(cache).search_cost(prepared.exact)) {
                    return self.on_current_copy(read).await;
                }
                self.sync().await?;
                return read().await;
            };
            self.sync().await?;
            // The entries the restrictions admit, as of now; the vector scan checks each row
            // that could make the top against this set, so the best admitted rows are found.
            let admitted = read_tx!(self, "listing the entries a search may return", |conn| {
                filter.admitted(&mut *conn).await?
            })?;
            vector_ranking(
                cache,
                prepared.vector.clone(),
                candidates,
                prepared.exact,
                Some(admitted),
            )
            .await
        };
        let (keyword_hits, vector_hits) = tokio::join!(keywords, vector_scan);
        Ok(prepared.fuse(&vector_hits?, &keyword_hits?))
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
        let cache = &self.inner.cache;
        let hits = match Filter::new(options) {
            None => {
                let read = || vector_ranking(cache, vector.to_vec(), k, options.exact, None);
                // A graph walk (or a small exact scan) runs on this thread while the check's
                // statement runs on its connection's. A scan big enough for the blocking
                // pool waits for the check instead: a commit elsewhere would cost a second.
                if runs_here(read_cache(cache).search_cost(options.exact)) {
                    self.on_current_copy(read).await?
                } else {
                    self.sync().await?;
                    read().await?
                }
            }
            Some(filter) => {
                self.sync().await?;
                let admitted = read_tx!(self, "listing the entries a search may return", |conn| {
                    filter.admitted(&mut *conn).await?
                })?;
                vector_ranking(cache, vector.to_vec(), k, options.exact, Some(admitted)).await?
            }
        };
        Ok(hits
            .into_iter()
            .map(|h| (format_id(h.id), h.score))
            .collect())
    }

    pub(super) async fn search_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<ScoredMemory>, MemoryError> {
        let Some(prepared) = self.prepare(query, k, options).await? else {
            return Ok(Vec::new());
        };
        let ranked = self.rank(&prepared).await?;
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_micros(self.inner.clock.as_ref());
        if let Some(hits) = self.recall_best(&ranked, k, now).await? {
            return Ok(hits);
        }
        let cache = &self.inner.cache;
        let prepared = &prepared;
        let hits = write_tx!(self, "recording a recall", |conn| {
            // Under the write lock nothing can be deleted: the hits still stored now are
            // the ones returned and recorded.
            let chosen = match still_stored(&mut *conn, &ranked, k).await? {
                Some(chosen) => chosen,
                None => rank_locked(&mut *conn, cache, prepared).await?,
            };
            let ids: Vec<i64> = chosen.iter().map(|(id, _)| *id).collect();
            let by_id = recall_in(&mut *conn, &ids, now).await?;
            scored(&chosen, by_id)
        })?;
        Ok(hits)
    }

    pub(super) async fn search_candidates_inner(
        &self,
        query: &str,
        k: usize,
        options: &SearchOptions,
    ) -> Result<Vec<Candidate>, MemoryError> {
        let Some(prepared) = self.prepare(query, k, options).await? else {
            return Ok(Vec::new());
        };
        let ranked = self.rank(&prepared).await?;
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let (cache, dimensions) = (&self.inner.cache, self.inner.dimensions);
        let prepared = &prepared;
        let read = read_tx!(self, "reading search candidates", |conn| {
            match still_stored(&mut *conn, &ranked, k).await? {
                Some(chosen) => {
                    Some(read_candidates(&mut *conn, cache, dimensions, prepared, chosen).await?)
                }
                None => None,
            }
        })?;
        if let Some(candidates) = read {
            return Ok(candidates);
        }
        // A hit was deleted (or stored after this snapshot: the copy synced past it) and the
        // spare hits ran out: ranked again where nothing can change meanwhile, under the
        // write lock (rare: only a delete racing this search gets here).
        write_tx!(self, "reading search candidates", |conn| {
            let chosen = rank_locked(&mut *conn, cache, prepared).await?;
            read_candidates(&mut *conn, cache, dimensions, prepared, chosen).await?
        })
    }

    /// A search's hits and the recall recorded of them, in one statement, when the best `k`
    /// of `ranked` are all still stored (the common case); `None`, with nothing recorded,
    /// when one of them is gone, for the transaction that picks spares in their place.
    pub(super) async fn recall_best(
        &self,
        ranked: &[(i64, f32)],
        k: usize,
        now: i64,
    ) -> Result<Option<Vec<ScoredMemory>>, MemoryError> {
        let best = &ranked[..k.min(ranked.len())];
        let ids: Vec<i64> = best.iter().map(|(id, _)| *id).collect();
        let ids_json = json_ids(&ids);
        let wanted = i64::try_from(ids.len()).unwrap_or(i64::MAX);
        let rows: Vec<TaggedRow> = write_one!(self, "recording a recall", |conn| {
            sqlx::query_as(RECALL_ALL_OR_NONE)
                .bind(now)
                .bind(&ids_json)
                .bind(wanted)
                .fetch_all(&mut *conn)
                .await?
        })?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut by_id = HashMap::with_capacity(rows.len());
        for (id, content, context, created, accessed, count, tags) in rows {
            let tags: Vec<String> = serde_json::from_str(&tags).map_err(|e| {
                super::storage(
                    &self.inner.path,
                    "recording a recall",
                    DbError::Corrupt(format!("the tags of entry {id} read as {tags:?}: {e}")),
                )
            })?;
            let tags = tags.into_iter().map(Tag).collect();
            let row = (id, content, context, created, accessed, count);
            by_id.insert(id, entry_of(row, tags));
        }
        Ok(Some(scored(best, by_id)))
    }

    /// Records a recall of the entries `ids` (access time now — never moved back — and count
    /// + 1) in one write transaction; returns the updated entries that still exist.
    pub(super) async fn recall(
        &self,
        ids: &[i64],
    ) -> Result<HashMap<i64, MemoryEntry>, MemoryError> {
        let now = now_micros(self.inner.clock.as_ref());
        write_tx!(self, "recording a recall", |conn| {
            recall_in(&mut *conn, ids, now).await?
        })
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

/// The entries of `chosen` (ranked ids with their scores) found in `by_id`, in rank order.
fn scored(chosen: &[(i64, f32)], mut by_id: HashMap<i64, MemoryEntry>) -> Vec<ScoredMemory> {
    chosen
        .iter()
        .filter_map(|&(id, score)| {
            let entry = by_id.remove(&id)?;
            Some(ScoredMemory { entry, score })
        })
        .collect()
}

/// A row of `entries` with its tags, sorted, as a JSON array.
type TaggedRow = (i64, String, String, i64, i64, i64, String);

/// Records a recall of the entries `?2` (a JSON array of ids) at `?1` (see [`recall_in`])
/// and returns them with their tags, if all `?3` of them are stored; else changes nothing
/// and returns nothing. One statement: atomic without a transaction around it.
const RECALL_ALL_OR_NONE: &str = "UPDATE entries SET accessed_at = max(accessed_at, ?1), \
         access_count = access_count + 1 \
     WHERE id IN (SELECT value FROM json_each(?2)) \
       AND (SELECT count(*) FROM entries WHERE id IN (SELECT value FROM json_each(?2))) = ?3 \
     RETURNING id, content, context, created_at, accessed_at, access_count, \
         (SELECT json_group_array(tag) FROM \
             (SELECT tag FROM entry_tags WHERE entry_id = entries.id ORDER BY tag))";

/// A search's query, embedded and parsed: what every ranking of it needs.
struct Prepared {
    vector: Vec<f32>,
    query_unit: Vec<f32>,
    terms: Vec<String>,
    filter: Option<Filter>,
    exact: bool,
    k: usize,
}

impl Prepared {
    /// The vector and keyword rankings fused, [`ranked_len`] long.
    fn fuse(&self, vector_hits: &[Hit], keyword_hits: &[i64]) -> Vec<(i64, f32)> {
        let vector_hits: Vec<i64> = vector_hits.iter().map(|hit| hit.id).collect();
        let limit = ranked_len(self.k);
        if self.terms.is_empty() {
            fuse(&[&vector_hits], limit)
        } else {
            fuse(&[&vector_hits, keyword_hits], limit)
        }
    }
}

/// The first `k` entries of `ranked` still stored (as of `conn`'s transaction), in order;
/// `None` when some were gone and fewer than `k` are left: the caller ranks again.
async fn still_stored(
    conn: &mut SqliteConnection,
    ranked: &[(i64, f32)],
    k: usize,
) -> Result<Option<Vec<(i64, f32)>>, DbError> {
    let ids: Vec<i64> = ranked.iter().map(|(id, _)| *id).collect();
    let rows: Vec<(i64,)> =
        sqlx::query_as("SELECT id FROM entries WHERE id IN (SELECT value FROM json_each(?1))")
            .bind(json_ids(&ids))
            .fetch_all(&mut *conn)
            .await?;
    let stored: HashSet<i64> = rows.into_iter().map(|(id,)| id).collect();
    let chosen: Vec<(i64, f32)> = ranked
        .iter()
        .filter(|(id, _)| stored.contains(id))
        .take(k)
        .copied()
        .collect();
    let complete = chosen.len() == k || stored.len() == ranked.len();
    Ok(complete.then_some(chosen))
}

/// The best `k` hits of `prepared` ranked entirely inside `conn`'s write transaction: the
/// vector copy synced to it, the filter and the keywords read in it. Nothing can change
/// meanwhile, so every hit is stored.
async fn rank_locked(
    conn: &mut SqliteConnection,
    cache: &Arc<RwLock<VectorCache>>,
    prepared: &Prepared,
) -> Result<Vec<(i64, f32)>, DbError> {
    cache::sync(&mut *conn, cache).await?;
    let candidates = candidates(prepared.k);
    let filter = prepared.filter.as_ref();
    let admitted = match filter {
        Some(filter) => Some(filter.admitted(&mut *conn).await?),
        None => None,
    };
    let keyword_hits = if prepared.terms.is_empty() {
        Vec::new()
    } else {
        let entries = read_cache(cache).len() as u64;
        let limit = i64::try_from(candidates).unwrap_or(i64::MAX);
        keyword_search(&mut *conn, &prepared.terms, entries, limit, filter).await?
    };
    let vector_hits = vector_ranking(
        cache,
        prepared.vector.clone(),
        candidates,
        prepared.exact,
        admitted,
    )
    .await?;
    let mut fused = prepared.fuse(&vector_hits, &keyword_hits);
    fused.truncate(prepared.k);
    Ok(fused)
}

/// The vector ranking: the best `count` rows of the copy (`cache`, which must be synced)
/// among `admitted` (all rows when `None`). Runs off the executor when large.
async fn vector_ranking(
    cache: &Arc<RwLock<VectorCache>>,
    vector: Vec<f32>,
    count: usize,
    exact: bool,
    admitted: Option<Vec<i64>>,
) -> Result<Vec<Hit>, MemoryError> {
    let cost = read_cache(cache).search_cost(exact);
    let cache = cache.clone();
    cpu(cost, move || {
        let copy = read_cache(&cache);
        match &admitted {
            Some(listed) => {
                let set: HashSet<i64, BuildHasherDefault<IdHasher>> =
                    listed.iter().copied().collect();
                let admit = |id: i64| set.contains(&id);
                copy.search_where(&vector, count, &Restriction::listed(&admit, listed), exact)
            }
            None => copy.search_where(&vector, count, &Restriction::all(), exact),
        }
    })
    .await
}

/// Records a recall of the entries `ids` at `now` (the access time never moves back, count
/// + 1) in `conn`'s write transaction; returns the updated entries that exist.
async fn recall_in(
    conn: &mut SqliteConnection,
    ids: &[i64],
    now: i64,
) -> Result<HashMap<i64, MemoryEntry>, DbError> {
    // `max`: `now` was read before waiting for the lock, and other processes' clocks may be
    // behind; an access time never moves back.
    let rows: Vec<EntryRow> = sqlx::query_as(
        "UPDATE entries SET accessed_at = max(accessed_at, ?1), \
             access_count = access_count + 1 \
         WHERE id IN (SELECT value FROM json_each(?2)) \
         RETURNING id, content, context, created_at, accessed_at, access_count",
    )
    .bind(now)
    .bind(json_ids(ids))
    .fetch_all(&mut *conn)
    .await?;
    Ok(with_tags(&mut *conn, rows)
        .await?
        .into_iter()
        .filter_map(|e| Some((parse_id(&e.id)?, e)))
        .collect())
}

/// The entries of `chosen` (ranked ids with their fused scores) as candidates, in order,
/// with their cosine similarity to the query; entries gone from `conn`'s snapshot are left
/// out.
async fn read_candidates(
    conn: &mut SqliteConnection,
    cache: &RwLock<VectorCache>,
    dimensions: usize,
    prepared: &Prepared,
    chosen: Vec<(i64, f32)>,
) -> Result<Vec<Candidate>, DbError> {
    let ids: Vec<i64> = chosen.iter().map(|(id, _)| *id).collect();
    let rows: Vec<EntryRow> = sqlx::query_as(
        "SELECT id, content, context, created_at, accessed_at, access_count \
         FROM entries WHERE id IN (SELECT value FROM json_each(?1))",
    )
    .bind(json_ids(&ids))
    .fetch_all(&mut *conn)
    .await?;
    let found: Vec<i64> = rows.iter().map(|row| row.0).collect();
    let mut similarities =
        candidate_similarities(&mut *conn, cache, dimensions, &prepared.query_unit, &found).await?;
    let mut by_id: HashMap<MemoryId, MemoryEntry> = with_tags(&mut *conn, rows)
        .await?
        .into_iter()
        .map(|e| (e.id.clone(), e))
        .collect();
    Ok(chosen
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

    /// Every entry the filter admits, ascending. Read through the indexes: with tags, the
    /// entries of each tag (`entry_tags_by_tag`), joined to `entries` only for a time range;
    /// with a time range alone, the range of `entries_by_created`. The cost follows the
    /// entries the tags or the range hold, not the store's size.
    async fn admitted(&self, conn: &mut SqliteConnection) -> Result<Vec<i64>, DbError> {
        let timed = self.after.is_some() || self.before.is_some();
        let (after, before) = (
            self.after.unwrap_or(i64::MIN),
            self.before.unwrap_or(i64::MAX),
        );
        let rows: Vec<(i64,)> = if self.tag_count > 0 && timed {
            sqlx::query_as(
                "SELECT t.entry_id FROM entry_tags t JOIN entries e ON e.id = t.entry_id \
                 WHERE t.tag IN (SELECT value FROM json_each(?1)) \
                 AND e.created_at >= ?3 AND e.created_at < ?4 \
                 GROUP BY t.entry_id HAVING count(*) = ?2",
            )
            .bind(&self.tags)
            .bind(self.tag_count)
            .bind(after)
            .bind(before)
            .fetch_all(&mut *conn)
            .await?
        } else if self.tag_count > 0 {
            sqlx::query_as(
                "SELECT entry_id FROM entry_tags \
                 WHERE tag IN (SELECT value FROM json_each(?1)) \
                 GROUP BY entry_id HAVING count(*) = ?2",
            )
            .bind(&self.tags)
            .bind(self.tag_count)
            .fetch_all(&mut *conn)
            .await?
        } else {
            // Stored times are below i64::MAX (the latest representable time is 8.3 × 10¹⁸ µs).
            sqlx::query_as(
                "SELECT id FROM entries WHERE created_at >= ?1 AND created_at < ?2 ORDER BY id",
            )
            .bind(after)
            .bind(before)
            .fetch_all(&mut *conn)
            .await?
        };
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
