//! The keyword ranking (PostgreSQL full-text search) and the SQL of search filters.
//!
//! Query text never reaches SQL as syntax: the query is split into terms (runs of letters
//! and digits, [`cased_terms`](crate::text::cased_terms)), each term travels as a bound
//! value through `phraseto_tsquery('simple', …)` — which reads its argument as plain words
//! and makes a term of several words a phrase — and the terms are OR-ed with the
//! `memory_any_query` aggregate of the schema. So `"`, `&`, `|`, `!`, `<->`, `:*` and SQL
//! in a query are only ever searched as words, as on SQLite.

use std::collections::BTreeSet;

use agent_op::SearchOptions;
use sqlx::PgConnection;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;

use super::retry::DbError;
use crate::clock::ceil_micros;
use crate::rank::{MAX_KEYWORD_POSTINGS, keyword_terms};

/// `ts_rank`'s weights for D, C, B and A: content (A) 1, context (B) 0.5, as the SQLite
/// backend weights its BM25 columns.
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
/// entries, and the products are summed.
///
/// Which terms are searched: each term's document count is probed first (counting stops at
/// [`MAX_KEYWORD_POSTINGS`] + 1) and [`keyword_terms`] picks them as on SQLite (rarest
/// first within the budget, no stop words). `N` is counted up to twice the budget, beyond
/// which the planner's estimate of the table's size stands in.
pub(super) async fn keyword_ranking(
    conn: &mut PgConnection,
    terms: &[String],
    limit: i64,
    filter: Option<&Filter>,
) -> Result<Vec<i64>, DbError> {
    let cap = i64::try_from(MAX_KEYWORD_POSTINGS + 1).unwrap_or(i64::MAX);
    let (counts, counted, estimated): (Vec<Option<i64>>, i64, f64) = sqlx::query_as(
        "SELECT ARRAY(SELECT (SELECT count(*) FROM ( \
                     SELECT 1 FROM entries e \
                     WHERE e.search @@ phraseto_tsquery('simple', u.term) LIMIT $2) s) \
                 FROM unnest($1::text[]) WITH ORDINALITY AS u(term, i) ORDER BY u.i), \
             (SELECT count(*) FROM (SELECT 1 FROM entries LIMIT $3) s), \
             (SELECT reltuples::float8 FROM pg_class WHERE oid = 'entries'::regclass)",
    )
    .bind(terms)
    .bind(cap)
    .bind(cap.saturating_mul(2))
    .fetch_one(&mut *conn)
    .await?;
    let entries = if counted < cap.saturating_mul(2) {
        counted
    } else {
        // `reltuples` is -1 before the table was first analyzed; `as` saturates.
        counted.max(estimated as i64)
    };
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
    let chosen: Vec<String> = chosen.into_iter().map(str::to_owned).collect();
    let restriction = match filter {
        Some(filter) => format!("AND {}", filter.condition(4)),
        None => String::new(),
    };
    let sql = format!(
        "WITH q AS MATERIALIZED ( \
             SELECT phraseto_tsquery('simple', w.term) AS query, w.idf \
             FROM unnest($1::text[], $3::float8[]) AS w(term, idf)) \
         SELECT e.id FROM entries e \
         WHERE e.search @@ (SELECT memory_any_query(query) FROM q) {restriction} \
         ORDER BY (SELECT sum(q.idf * ts_rank('{WEIGHTS}', e.search, q.query, 1)) FROM q) DESC, \
             e.id \
         LIMIT $2"
    );
    let query = sqlx::query_as(&sql).bind(&chosen).bind(limit).bind(&idf);
    let query = match filter {
        Some(filter) => filter.bind(query),
        None => query,
    };
    let rows: Vec<(i64,)> = query.fetch_all(&mut *conn).await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}
