//! The keyword ranking (PostgreSQL full-text search) and the SQL of search filters.
//!
//! Query text never reaches SQL as syntax: the query is split into terms (runs of letters
//! and digits, [`cased_terms`](crate::text::cased_terms)), each term travels as a bound
//! value through `phraseto_tsquery('simple', …)` — which reads its argument as plain words
//! and makes a term of several words a phrase — and the terms are OR-ed with the
//! `memory_any_query` aggregate of the schema. So `"`, `&`, `|`, `!`, `<->`, `:*` and SQL
//! in a query are only ever searched as words, as on SQLite.

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
/// constants (migration `0002_keyword_postings.sql`).
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

    /// Binds the values of [`condition`](Filter::condition).
    pub(super) fn bind<'q, O>(
        &'q self,
        mut query: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        if let Some(after) = self.after {
            query = query.bind(after);
        }
        if let Some(before) = self.before {
            query = query.bind(before);
        }
        if !self.tags.is_empty() {
            query = query.bind(&self.tags);
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
/// `0002_keyword_postings.sql`), so a search reads only the postings of the chosen terms
/// (at most the budget) and scores them here. A term the parser splits into a phrase is
/// counted through the GIN index, and when one is chosen the ranking computes `ts_rank`
/// over the matching entries' documents in SQL instead; both ways give the same scores, bit
/// for bit (the stored rank is `ts_rank` of the same document and query, and an absent
/// term adds an exact zero).
pub(super) async fn keyword_ranking(
    conn: &mut PgConnection,
    terms: &[String],
    limit: i64,
    filter: Option<&Filter>,
) -> Result<Vec<i64>, DbError> {
    let cap = i64::try_from(MAX_KEYWORD_POSTINGS + 1).unwrap_or(i64::MAX);
    let (counts, lexemes, entries): (Vec<Option<i64>>, Vec<Option<String>>, Option<i64>) =
        sqlx::query_as(
            "WITH t AS MATERIALIZED ( \
                 SELECT u.i, u.term, memory_single_lexeme(u.term) AS lexeme \
                 FROM unnest($1::text[]) WITH ORDINALITY AS u(term, i)) \
             SELECT ARRAY(SELECT CASE WHEN t.lexeme IS NOT NULL THEN least(coalesce( \
                         (SELECT sum(d.docs)::int8 FROM keyword_docs d WHERE d.lexeme = t.lexeme), \
                         0), $2) \
                     ELSE (SELECT count(*) FROM ( \
                         SELECT 1 FROM entries e \
                         WHERE e.search @@ phraseto_tsquery('simple', t.term) LIMIT $2) s) END \
                 FROM t ORDER BY t.i), \
                 ARRAY(SELECT t.lexeme FROM t ORDER BY t.i), \
                 (SELECT sum(entries)::int8 FROM keyword_totals)",
        )
        .bind(terms)
        .bind(cap)
        .fetch_one(&mut *conn)
        .await?;
    if counts.len() != terms.len() || lexemes.len() != terms.len() {
        return Err(DbError::Corrupt(format!(
            "{} document counts and {} lexemes were read for {} search terms",
            counts.len(),
            lexemes.len(),
            terms.len()
        )));
    }
    let entries = entries.ok_or_else(|| {
        DbError::Corrupt("keyword_totals holds no row (the count of entries)".to_owned())
    })?;
    let entries = u64::try_from(entries).unwrap_or(0);
    let counted: Vec<(u64, &str)> = terms
        .iter()
        .zip(counts)
        .map(|(term, docs)| {
            (
                docs.and_then(|d| u64::try_from(d).ok()).unwrap_or(0),
                term.as_str(),
            )
        })
        .collect();
    let chosen = keyword_terms(counted.clone(), entries);
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let idf: Vec<f64> = chosen
        .iter()
        .map(|term| {
            let docs = counted
                .iter()
                .find(|(_, t)| t == term)
                .map_or(0, |(docs, _)| *docs) as f64;
            let all = (entries as f64).max(docs);
            (1.0 + (all - docs + 0.5) / (docs + 0.5)).ln()
        })
        .collect();
    // The lexeme of each chosen term, when every one has a single lexeme.
    let chosen_lexemes: Option<Vec<String>> = chosen
        .iter()
        .map(|term| {
            let at = terms.iter().position(|t| t == term)?;
            lexemes[at].clone()
        })
        .collect();
    if let Some(lexemes) = chosen_lexemes {
        return ranking_from_postings(conn, &lexemes, &idf, limit, filter).await;
    }
    let chosen: Vec<String> = chosen.into_iter().map(str::to_owned).collect();
    let sql = ranking_from_documents(filter);
    let query = sqlx::query_as(&sql).bind(&chosen).bind(limit).bind(&idf);
    let query = match filter {
        Some(filter) => filter.bind(query),
        None => query,
    };
    let rows: Vec<(i64,)> = query.fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The keyword ranking from `keyword_postings`: each of `lexemes`' postings (the entries the
/// filter admits) read in one statement, scored here.
///
/// The database only reads: one row per lexeme, its entries and their ranks as two arrays
/// (an index-only scan each, parameterized by the lexeme, so a generic plan of the prepared
/// statement cannot turn it into a scan of the whole table). Scoring here costs far less
/// than grouping and sorting thousands of rows in SQL (0.4 ms instead of 1.6 ms at 100,000
/// entries), and it sums in the order of the terms exactly as the documents' way does in
/// SQL: the same float8 products, the same additions in the same order (an absent term's
/// zero changes nothing), ties by id — the same ranking bit for bit.
async fn ranking_from_postings(
    conn: &mut PgConnection,
    lexemes: &[String],
    idf: &[f64],
    limit: i64,
    filter: Option<&Filter>,
) -> Result<Vec<i64>, DbError> {
    let (join, restriction) = match filter {
        Some(filter) => (
            "JOIN entries e ON e.id = p.entry_id",
            format!("AND {}", filter.condition(2)),
        ),
        None => ("", String::new()),
    };
    let sql = format!(
        "SELECT s.ids, s.ranks FROM unnest($1::text[]) WITH ORDINALITY AS u(lexeme, i) \
         CROSS JOIN LATERAL ( \
             SELECT coalesce(array_agg(p.entry_id), '{{}}') AS ids, \
                 coalesce(array_agg(p.rank), '{{}}') AS ranks \
             FROM keyword_postings p {join} WHERE p.lexeme = u.lexeme {restriction}) s \
         ORDER BY u.i"
    );
    let query = sqlx::query_as(&sql).bind(lexemes);
    let query = match filter {
        Some(filter) => filter.bind(query),
        None => query,
    };
    let rows: Vec<(Vec<i64>, Vec<f32>)> = query.fetch_all(&mut *conn).await?;
    if rows.len() != lexemes.len() || rows.iter().any(|(ids, ranks)| ids.len() != ranks.len()) {
        return Err(DbError::Corrupt(format!(
            "keyword postings: {} rows of unequal entries and ranks were read for {} lexemes",
            rows.len(),
            lexemes.len()
        )));
    }
    let postings: usize = rows.iter().map(|(ids, _)| ids.len()).sum();
    let mut scores: HashMap<i64, f64> = HashMap::with_capacity(postings);
    for ((ids, ranks), idf) in rows.iter().zip(idf) {
        for (id, rank) in ids.iter().zip(ranks) {
            *scores.entry(*id).or_insert(0.0) += idf * f64::from(*rank);
        }
    }
    Ok(best(scores, usize::try_from(limit).unwrap_or(usize::MAX)))
}

/// The `limit` best-scored entries, best first, ties by id (as SQL's `ORDER BY score DESC,
/// id`).
fn best(scores: HashMap<i64, f64>, limit: usize) -> Vec<i64> {
    let order = |a: &(f64, i64), b: &(f64, i64)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    let mut ranked: Vec<(f64, i64)> = scores.into_iter().map(|(id, s)| (s, id)).collect();
    if limit == 0 {
        return Vec::new();
    }
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
