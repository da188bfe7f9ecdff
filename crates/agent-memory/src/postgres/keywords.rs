//! The keyword ranking (PostgreSQL full-text search, read from the postings the schema's
//! triggers keep) and the SQL of search filters.
//!
//! Query text never reaches SQL as syntax: the query is split into terms (runs of letters
//! and digits, [`cased_terms`](crate::text::cased_terms)), each term travels as a bound
//! value, read by the same parser as the documents: `memory_single_lexeme` for a term of
//! one word, looked up in the postings, and `phraseto_tsquery('simple', …)` — which reads
//! its argument as plain words and makes a term of several words a phrase — for the rest,
//! OR-ed with the `memory_any_query` aggregate of the schema. So `"`, `&`, `|`, `!`, `<->`,
//! `:*` and SQL in a query are only ever searched as words, as on SQLite.

use std::collections::{BTreeSet, HashMap};

use agent_op::SearchOptions;
use sqlx::PgConnection;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;

use super::retry::DbError;
use crate::clock::ceil_micros;
use crate::rank::{MAX_KEYWORD_POSTINGS, keyword_terms};

/// `ts_rank`'s weights for D, C, B and A: content (A) 1, context (B) 0.5, as the SQLite
/// backend weights its BM25 columns. `keyword_postings` holds ranks computed with the same
/// constants (`memory_keyword_rank`, migration `0002_keyword_postings.sql`).
const WEIGHTS: &str = "{0.1, 0.2, 0.5, 1.0}";

/// The restrictions of [`SearchOptions`] as SQL on `entries e`.
pub(super) struct Filter {
    after: Option<i64>,
    before: Option<i64>,
    /// The distinct tags asked for.
    tags: Vec<String>,
}

impl Filter {
    /// The filter of `options`; `None` when they restrict nothing.
    pub(super) fn new(options: &SearchOptions) -> Option<Filter> {
        if options.is_unrestricted() {
            return None;
        }
        let tags: BTreeSet<&str> = options.tags.iter().map(|t| t.0.as_str()).collect();
        Some(Filter {
            after: options.created_after.map(ceil_micros),
            before: options.created_before.map(ceil_micros),
            tags: tags.into_iter().map(str::to_owned).collect(),
        })
    }

    /// Whether no entry can pass: a tag no stored tag can equal (PostgreSQL text holds no
    /// NUL, and such a value cannot even be sent).
    pub(super) fn admits_nothing(&self) -> bool {
        self.tags.iter().any(|t| t.contains('\0'))
    }

    /// The condition, its values numbered from parameter `$first` on, in the order
    /// [`bind`](Filter::bind) binds them. Only which restrictions are set shapes the SQL.
    pub(super) fn condition(&self, first: usize) -> String {
        let mut parts = Vec::new();
        let mut n = first;
        if self.after.is_some() {
            parts.push(format!("e.created_at >= ${n}"));
            n += 1;
        }
        if self.before.is_some() {
            parts.push(format!("e.created_at < ${n}"));
            n += 1;
        }
        if !self.tags.is_empty() {
            parts.push(format!(
                "e.id IN (SELECT entry_id FROM entry_tags WHERE tag = ANY(${n}) \
                 GROUP BY entry_id HAVING count(*) = cardinality(${n}))"
            ));
        }
        parts.join(" AND ")
    }

    /// Binds the values of `filter`'s [`condition`](Filter::condition), if there is one.
    pub(super) fn bind<'q, O>(
        filter: Option<&'q Filter>,
        mut query: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        let Some(filter) = filter else {
            return query;
        };
        if let Some(after) = filter.after {
            query = query.bind(after);
        }
        if let Some(before) = filter.before {
            query = query.bind(before);
        }
        if !filter.tags.is_empty() {
            query = query.bind(&filter.tags);
        }
        query
    }
}

/// The keyword ranking: entry ids best first, at most `limit`; ties by id.
///
/// PostgreSQL's `ts_rank` weighs every term alike, however common: an entry holding many
/// common words of the query outranks the one holding its rare word (SQLite's BM25 does
/// the opposite). So each chosen term's `ts_rank` (content weight 1, context 0.5, divided
/// by 1 + the log of the document's length) is multiplied by the term's BM25 inverse
/// document frequency, `ln(1 + (N − n + 0.5) / (n + 0.5))` for a term in `n` of `N`
/// entries, and the products are summed in the order of the chosen terms.
///
/// Which terms are searched: each term's document count, up to one more than
/// [`MAX_KEYWORD_POSTINGS`], is read first and [`keyword_terms`] picks them as on SQLite
/// (rarest first within the budget, no stop words).
///
/// Where the numbers come from: a term that is one lexeme (almost every term: a run of
/// letters and digits) has its count in `keyword_docs` (summed over its stripes) and each
/// entry's `ts_rank` for it in `keyword_postings`, kept by triggers (migration
/// `0002_keyword_postings.sql`). One statement reads the counts and, for the terms that
/// could be chosen, their postings; the terms are chosen and the postings scored here, so a
/// search costs one round trip and reads at most about the budget of postings. A term the
/// parser splits into a phrase is counted through the GIN index, and when one is chosen the
/// ranking computes `ts_rank` over the matching entries' documents in SQL instead. Both
/// ways give the same scores, bit for bit: the stored rank is `ts_rank` of the same
/// document and query, the products are the same float8 products, they are added in the
/// order of the chosen terms in both (an absent term's zero changes nothing), and ties go
/// to the lower id.
pub(super) async fn keyword_ranking(
    conn: &mut PgConnection,
    terms: &[String],
    limit: i64,
    filter: Option<&Filter>,
) -> Result<Vec<i64>, DbError> {
    let read = read_terms(conn, terms, filter).await?;
    let counted: Vec<(u64, &str)> = terms
        .iter()
        .zip(&read.terms)
        .map(|(term, row)| (row.docs, term.as_str()))
        .collect();
    let chosen = keyword_terms(counted, read.entries);
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    // Positions in `terms` of the chosen terms, in the chosen order.
    let at: Vec<usize> = chosen
        .iter()
        .filter_map(|term| terms.iter().position(|t| t == term))
        .collect();
    let idf: Vec<f64> = at
        .iter()
        .map(|&i| {
            let docs = read.terms[i].docs as f64;
            let all = (read.entries as f64).max(docs);
            (1.0 + (all - docs + 0.5) / (docs + 0.5)).ln()
        })
        .collect();
    let fetched: Option<Vec<&Postings>> = at
        .iter()
        .map(|&i| read.terms[i].postings.as_ref())
        .collect();
    if let Some(postings) = fetched {
        return Ok(score(&postings, &idf, limit));
    }
    // A phrase was chosen (or, never expected, a term whose postings were not read: see
    // `read_terms`): the documents' way.
    let chosen: Vec<String> = chosen.into_iter().map(str::to_owned).collect();
    let sql = ranking_from_documents(filter);
    let query = sqlx::query_as(&sql).bind(&chosen).bind(limit).bind(&idf);
    let query = Filter::bind(filter, query);
    let rows: Vec<(i64,)> = query.fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The entries holding a lexeme (those the filter admits) and each one's stored `ts_rank`
/// for it, in the same order.
struct Postings {
    ids: Vec<i64>,
    ranks: Vec<f32>,
}

/// What a search reads about its terms.
struct ReadTerms {
    /// Per term, in order.
    terms: Vec<ReadTerm>,
    /// How many entries there are.
    entries: u64,
}

/// What a search reads about one term.
struct ReadTerm {
    /// Entries holding it, counted up to `MAX_KEYWORD_POSTINGS + 1`.
    docs: u64,
    /// Its postings, when it is a single lexeme that could be chosen.
    postings: Option<Postings>,
}

/// A row of [`read_terms`]' statement: docs, entries, whether postings were read, and
/// the postings packed (see [`postings`]).
type TermRow = (Option<i64>, Option<i64>, bool, Vec<u8>);

/// Reads each term's document count, the count of entries, and the postings of
/// every single-lexeme term that [`keyword_terms`] could choose, in one statement.
///
/// Which postings are read: taking the terms rarest first (ties in query order), those
/// whose running total of counts stays within [`MAX_KEYWORD_POSTINGS`]. That is a superset
/// of the chosen terms: `keyword_terms` takes the same prefix after leaving out stop words
/// and absent terms, and a stop word is commoner than any term it keeps, so leaving it in
/// the running total only adds it at the end. Nothing depends on this beyond speed: were a
/// chosen term's postings not read, the ranking would be computed over the documents.
///
/// The terms are numbered by `memory_search_terms` (migration `0003_search_terms.sql`), not
/// `unnest`, so that PostgreSQL keeps one generic plan of the unfiltered statement instead
/// of planning it at every search (see docs/MEMORY.md).
///
/// Each term's postings come from its own index-only scan, parameterized by the lexeme, as
/// one `bytea` of packed postings: a generic plan of the prepared statement cannot turn them
/// into a scan of the whole table (an `= ANY($1)` join planned generically once hashed all
/// of it), and summing and sorting thousands of rows here costs far less than grouping them
/// in SQL (0.4 ms instead of 1.6 ms for 4,874 postings at 100,000 entries). Packed rather
/// than as an `int8[]` and a `real[]`: PostgreSQL sends an array through each element's
/// send function, which cost more than reading the postings (the read took 0.49 ms with
/// arrays, 0.41 ms packed, for the benchmark's queries at 100,000 entries).
async fn read_terms(
    conn: &mut PgConnection,
    terms: &[String],
    filter: Option<&Filter>,
) -> Result<ReadTerms, DbError> {
    let cap = i64::try_from(MAX_KEYWORD_POSTINGS + 1).unwrap_or(i64::MAX);
    let budget = i64::try_from(MAX_KEYWORD_POSTINGS).unwrap_or(i64::MAX);
    let (join, restriction) = match filter {
        Some(filter) => (
            "JOIN entries e ON e.id = p.entry_id",
            format!("AND {}", filter.condition(4)),
        ),
        None => ("", String::new()),
    };
    let sql = format!(
        "WITH t AS MATERIALIZED ( \
             SELECT u.i, u.term, memory_single_lexeme(u.term) AS lexeme \
             FROM memory_search_terms($1::text[]) AS u), \
         c AS MATERIALIZED ( \
             SELECT t.i, t.lexeme, CASE WHEN t.lexeme IS NOT NULL THEN least(coalesce( \
                     (SELECT sum(d.docs)::int8 FROM keyword_docs d WHERE d.lexeme = t.lexeme), \
                     0), $2) \
                 ELSE (SELECT count(*) FROM ( \
                     SELECT 1 FROM entries e \
                     WHERE e.search @@ phraseto_tsquery('simple', t.term) LIMIT $2) s) END AS docs \
             FROM t), \
         f AS MATERIALIZED ( \
             SELECT c.*, c.lexeme IS NOT NULL \
                 AND sum(c.docs) OVER (ORDER BY c.docs, c.i) <= $3 AS fetch FROM c) \
         SELECT f.docs, (SELECT sum(entries)::int8 FROM keyword_totals), f.fetch, \
             s.postings \
         FROM f CROSS JOIN LATERAL ( \
             SELECT coalesce(string_agg(int8send(p.entry_id) || float4send(p.rank), ''::bytea), \
                 ''::bytea) AS postings \
             FROM keyword_postings p {join} \
             WHERE f.fetch AND p.lexeme = f.lexeme {restriction}) s \
         ORDER BY f.i"
    );
    let query = sqlx::query_as(&sql).bind(terms).bind(cap).bind(budget);
    let query = Filter::bind(filter, query);
    let rows: Vec<TermRow> = query.fetch_all(&mut *conn).await?;
    if rows.len() != terms.len() {
        return Err(DbError::Corrupt(format!(
            "{} rows of counts were read for {} search terms",
            rows.len(),
            terms.len()
        )));
    }
    // Every row carries the same count of entries.
    let entries = match rows.first() {
        None => 0,
        Some((_, Some(n), ..)) => u64::try_from(*n)
            .map_err(|_| DbError::Corrupt(format!("keyword_totals sums to {n} entries")))?,
        Some((_, None, ..)) => {
            return Err(DbError::Corrupt(
                "keyword_totals holds no row (the count of entries)".to_owned(),
            ));
        }
    };
    let mut read = Vec::with_capacity(rows.len());
    for ((docs, _, fetched, packed), term) in rows.into_iter().zip(terms) {
        let docs = match docs {
            None => 0,
            Some(d) => u64::try_from(d).map_err(|_| {
                DbError::Corrupt(format!("keyword_docs sums to {d} entries for {term:?}"))
            })?,
        };
        let postings = if fetched {
            Some(postings(&packed, term)?)
        } else {
            None
        };
        read.push(ReadTerm { docs, postings });
    }
    Ok(ReadTerms {
        terms: read,
        entries,
    })
}

/// The bytes of one posting: the entry id (`int8send`) and the rank (`float4send`).
const POSTING_BYTES: usize = 12;

/// Postings from the bytes of `term`'s postings: [`POSTING_BYTES`] per posting, big-endian
/// as PostgreSQL sends them.
fn postings(packed: &[u8], term: &str) -> Result<Postings, DbError> {
    if packed.len() % POSTING_BYTES != 0 {
        return Err(DbError::Corrupt(format!(
            "keyword postings of {term:?}: {} bytes, not a whole number of {POSTING_BYTES}-byte \
             postings",
            packed.len()
        )));
    }
    let n = packed.len() / POSTING_BYTES;
    let mut ids = Vec::with_capacity(n);
    let mut ranks = Vec::with_capacity(n);
    for posting in packed.chunks_exact(POSTING_BYTES) {
        let (id, rank) = posting.split_at(8);
        ids.push(i64::from_be_bytes(id.try_into().unwrap_or_default()));
        ranks.push(f32::from_be_bytes(rank.try_into().unwrap_or_default()));
    }
    Ok(Postings { ids, ranks })
}

/// The best `limit` entries by the sum over the terms, in order, of `idf × rank`, best
/// first, ties by id (as SQL's `ORDER BY score DESC, id`).
fn score(postings: &[&Postings], idf: &[f64], limit: i64) -> Vec<i64> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if limit == 0 {
        return Vec::new();
    }
    let total: usize = postings.iter().map(|p| p.ids.len()).sum();
    let mut scores: HashMap<i64, f64> = HashMap::with_capacity(total);
    for (p, idf) in postings.iter().zip(idf) {
        for (id, rank) in p.ids.iter().zip(&p.ranks) {
            *scores.entry(*id).or_insert(0.0) += idf * f64::from(*rank);
        }
    }
    let order = |a: &(f64, i64), b: &(f64, i64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    let mut ranked: Vec<(f64, i64)> = scores.into_iter().map(|(id, s)| (s, id)).collect();
    if ranked.len() > limit {
        ranked.select_nth_unstable_by(limit - 1, order);
        ranked.truncate(limit);
    }
    ranked.sort_unstable_by(order);
    ranked.into_iter().map(|(_, id)| id).collect()
}

/// The ranking SQL over the entries' documents (`ts_rank` computed here), for chosen terms
/// that are phrases: `$1` the chosen terms, `$2` the limit, `$3` their inverse document
/// frequencies, the filter's values from `$4`.
fn ranking_from_documents(filter: Option<&Filter>) -> String {
    let restriction = match filter {
        Some(filter) => format!("AND {}", filter.condition(4)),
        None => String::new(),
    };
    format!(
        "WITH q AS MATERIALIZED ( \
             SELECT phraseto_tsquery('simple', w.term) AS query, w.idf \
             FROM unnest($1::text[], $3::float8[]) AS w(term, idf)) \
         SELECT e.id FROM entries e \
         WHERE e.search @@ (SELECT memory_any_query(query) FROM q) {restriction} \
         ORDER BY (SELECT sum(q.idf * ts_rank('{WEIGHTS}', e.search, q.query, 1)) FROM q) DESC, \
             e.id \
         LIMIT $2"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_postings_are_read_whole_or_refused() {
        let mut packed = Vec::new();
        for (id, rank) in [(7_i64, 0.25_f32), (1 << 40, 1e-7)] {
            packed.extend_from_slice(&id.to_be_bytes());
            packed.extend_from_slice(&rank.to_be_bytes());
        }
        let read = postings(&packed, "w").expect("whole postings");
        assert_eq!(read.ids, [7, 1 << 40]);
        assert_eq!(read.ranks, [0.25, 1e-7]);
        assert!(postings(&[], "w").expect("none").ids.is_empty());
        let torn = postings(&packed[..20], "w");
        assert!(matches!(torn, Err(DbError::Corrupt(m)) if m.contains("20 bytes")));
    }
}
