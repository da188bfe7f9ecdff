//! Writing: inserting memories (one statement, or binary `COPY` in one transaction for large
//! batches, with the rule for rebuilding the HNSW index) and deleting.

use agent_op::{MemoryError, MemoryId, NewMemory};

use sqlx::PgConnection;

use super::PostgresBackend;
use super::copy::Encoder;
use super::open::CREATE_HNSW;
use super::retry::{DbError, statement, transaction};
use crate::clock::now_micros;
use crate::common::{
    embed_batch_checked, embed_checked, format_id, normalize_tags, parse_id, validate_new,
};
use crate::vector::unit;

/// Inserts memories: entries, vectors and tags in one statement, so all land or none.
///
/// Parameters: `$1` contents, `$2` contexts (text arrays, one element per memory), `$3` the
/// time, `$4` every vector one after the other (a flat `real[]` sliced per row: one binary
/// parameter instead of text literals), `$5` the dimension, `$6`/`$7` tag pairs (the
/// memory's 1-based position, the tag). Ids are drawn from the sequence first and numbered
/// in ascending order, so a batch's ids ascend in input order (`recent` lists later input
/// as newer); the statement returns them in that order.
const INSERT: &str = "\
WITH ids AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('entries', 'id')) AS id
    FROM generate_series(1, cardinality($1::text[]))
), numbered AS (
    SELECT id, row_number() OVER (ORDER BY id) AS n FROM ids
), input AS (
    SELECT b.id, u.content, u.context, u.n
    FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(content, context, n)
    JOIN numbered b ON b.n = u.n
), stored AS (
    INSERT INTO entries (id, content, context, created_at, accessed_at)
    SELECT id, content, context, $3, $3 FROM input
), vectors AS (
    INSERT INTO embeddings (entry_id, embedding)
    SELECT id, (($4::real[])[((n - 1) * $5 + 1)::int : (n * $5)::int])::vector FROM input
), tags AS (
    INSERT INTO entry_tags (entry_id, tag)
    SELECT b.id, t.tag FROM unnest($6::bigint[], $7::text[]) AS t(n, tag)
    JOIN numbered b ON b.n = t.n
)
SELECT id FROM numbered ORDER BY n";

/// Batches of at least this many memories are stored with binary `COPY` (several
/// statements in one transaction) rather than the one-statement [`INSERT`].
pub(super) const COPY_MIN_ROWS: usize = 1_000;

/// The rule for the HNSW index on a bulk load: a `COPY` batch of at least this many memories
/// that is at least as large as the store already is (counting the vectors stored) drops the
/// index, loads, and builds the index again over every vector, all in the load's
/// transaction. Building over `2n` vectors in memory (in parallel) costs less than inserting
/// `n` into the graph one by one, so with this rule the rebuild costs at most about twice
/// what building over the new vectors alone would; smaller batches into larger stores are
/// inserted into the existing index. While a rebuilding load runs, vector searches (and
/// other writes of vectors) wait for it to commit; listings, lookups and counts do not.
pub(super) const REBUILD_MIN_ROWS: usize = 1_000;

/// The most `maintenance_work_mem` a load asks for to build the HNSW index (the server's
/// own setting is kept when it is larger).
const MAX_BUILD_MEMORY: i64 = 1 << 30;

/// The `max_parallel_maintenance_workers` a load asks for to build the HNSW index (the
/// server's own setting is kept when it is larger; the server caps it by
/// `max_parallel_workers` and `max_worker_processes`).
const BUILD_WORKERS: i64 = 2;

/// Memories ready to insert, as the columns of [`INSERT`]'s parameters.
#[derive(Default)]
struct Prepared {
    contents: Vec<String>,
    contexts: Vec<String>,
    vectors: Vec<f32>,
    tag_rows: Vec<i64>,
    tags: Vec<String>,
}

impl Prepared {
    /// Adds a memory and its vector (scaled to unit length: cosine similarity does not
    /// depend on the scale, and pgvector's f32 arithmetic is then safe from under- and
    /// overflow for every finite vector).
    fn push(&mut self, memory: NewMemory, vector: &[f32]) {
        let position = i64::try_from(self.contents.len() + 1).unwrap_or(i64::MAX);
        self.contents.push(memory.content);
        self.contexts.push(memory.context);
        self.vectors.extend(unit(vector));
        for tag in normalize_tags(memory.tags) {
            self.tag_rows.push(position);
            self.tags.push(tag.0);
        }
    }
}

/// Refuses text PostgreSQL cannot store: `text` values cannot hold the NUL character.
pub(super) fn check_no_nul(memory: &NewMemory) -> Result<(), MemoryError> {
    let texts = [("content", &memory.content), ("context", &memory.context)];
    let tags = memory.tags.iter().map(|t| ("a tag", &t.0));
    for (what, text) in texts.into_iter().chain(tags) {
        if text.contains('\0') {
            return Err(MemoryError::InvalidInput(format!(
                "memory {what} contains the NUL character, which PostgreSQL text cannot hold"
            )));
        }
    }
    Ok(())
}

impl PostgresBackend {
    /// Stores many memories at once: one embedding batch
    /// ([`EmbeddingProvider::embed_batch`](agent_op::EmbeddingProvider::embed_batch)), then
    /// either all are stored or none. Returns the ids in input order.
    ///
    /// Fewer than 1,000 memories are inserted in one statement. Larger batches are loaded
    /// with binary `COPY` in one transaction, whose statements the
    /// [statement timeout](super::PostgresBuilder::statement_timeout) does not limit; a batch of 1,000 or more that is at least as
    /// large as the store already is also drops the HNSW index and builds it again over
    /// every vector before committing (much faster than growing the graph one vector at a
    /// time), during which vector searches and other writes of vectors wait for the load.
    /// See `docs/MEMORY.md` ("Bulk loads").
    pub async fn store_batch(
        &self,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryId>, MemoryError> {
        for memory in &memories {
            validate_new(memory)?;
            check_no_nul(memory)?;
        }
        if memories.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = memories.iter().map(|m| m.content.clone()).collect();
        let vectors =
            embed_batch_checked(self.inner.embedder.as_ref(), self.inner.dimensions, &texts)
                .await?;
        let mut prepared = Prepared::default();
        for (memory, vector) in memories.into_iter().zip(&vectors) {
            prepared.push(memory, vector);
        }
        drop(vectors);
        if prepared.contents.len() >= COPY_MIN_ROWS {
            self.load(&prepared).await
        } else {
            self.insert(&prepared, "storing memories").await
        }
    }

    /// Stores a large batch with binary `COPY` (see [`COPY_MIN_ROWS`] and
    /// [`REBUILD_MIN_ROWS`]), in one transaction; returns the new ids in input order.
    async fn load(&self, rows: &Prepared) -> Result<Vec<MemoryId>, MemoryError> {
        const WHAT: &str = "storing memories";
        let now = now_micros(self.inner.clock.as_ref());
        let n = rows.contents.len();
        let count = i64::try_from(n).unwrap_or(i64::MAX);
        let dimensions = self.inner.dimensions;
        let indexed = self.inner.indexed;
        let ids = transaction!(self, WHAT, |conn| {
            // A load's statements take time in proportion to the batch (the keyword
            // postings of its entries, the index build): the statement timeout, which is
            // there to stop runaway statements, would refuse large batches outright. So a
            // load is not limited, as setting a store up is not (until the commit).
            sqlx::query("SELECT set_config('statement_timeout', '0', true)")
                .execute(&mut *conn)
                .await?;
            // Locks in the order every writer takes them (entries, then embeddings), so a
            // prune (which locks entries first) waits here instead of deadlocking with us.
            sqlx::query("LOCK TABLE entries IN ROW EXCLUSIVE MODE")
                .execute(&mut *conn)
                .await?;
            // Some(vectors stored) when the index is to be built again.
            let rebuild = if indexed && n >= REBUILD_MIN_ROWS {
                let (stored,): (i64,) =
                    sqlx::query_as("SELECT count(*) FROM (SELECT 1 FROM embeddings LIMIT $1) s")
                        .bind(count.saturating_add(1))
                        .fetch_one(&mut *conn)
                        .await?;
                (stored <= count).then_some(stored)
            } else {
                None
            };
            if rebuild.is_some() {
                // Readers of the vectors wait from here to the commit; the index comes back
                // below, and a rollback restores the old one.
                sqlx::query("DROP INDEX IF EXISTS embeddings_hnsw")
                    .execute(&mut *conn)
                    .await?;
            }
            let (mut ids,): (Vec<i64>,) = sqlx::query_as(
                "SELECT coalesce(array_agg(nextval(pg_get_serial_sequence('entries', 'id'))), \
                     '{}') FROM generate_series(1, $1)",
            )
            .bind(count)
            .fetch_one(&mut *conn)
            .await?;
            if ids.len() != n {
                return Err(DbError::Corrupt(format!(
                    "{} ids were drawn for {n} memories",
                    ids.len()
                )));
            }
            // Ascending in input order, as the one-statement insert numbers them.
            ids.sort_unstable();
            copy_entries(&mut *conn, rows, &ids, now).await?;
            copy_vectors(&mut *conn, rows, &ids, dimensions).await?;
            if !rows.tags.is_empty() {
                copy_tags(&mut *conn, rows, &ids).await?;
            }
            if let Some(stored) = rebuild {
                build_index(&mut *conn, stored.saturating_add(count), dimensions).await?;
            }
            ids
        })?;
        Ok(ids.into_iter().map(format_id).collect())
    }

    pub(super) async fn store_inner(&self, memory: NewMemory) -> Result<MemoryId, MemoryError> {
        validate_new(&memory)?;
        check_no_nul(&memory)?;
        let vector = embed_checked(
            self.inner.embedder.as_ref(),
            self.inner.dimensions,
            &memory.content,
        )
        .await?;
        let mut prepared = Prepared::default();
        prepared.push(memory, &vector);
        let ids = self.insert(&prepared, "storing a memory").await?;
        ids.into_iter()
            .next()
            .ok_or_else(|| MemoryError::UnexpectedData {
                operation: "storing a memory".to_owned(),
                location: Some(self.inner.location.clone()),
                found: "no id was assigned".to_owned(),
            })
    }

    /// Runs [`INSERT`]; returns the new ids in input order.
    async fn insert(&self, rows: &Prepared, what: &str) -> Result<Vec<MemoryId>, MemoryError> {
        let now = now_micros(self.inner.clock.as_ref());
        let dimensions = i32::try_from(self.inner.dimensions).unwrap_or(i32::MAX);
        let ids = statement!(self, what, |conn| {
            let ids: Vec<(i64,)> = sqlx::query_as(INSERT)
                .bind(&rows.contents)
                .bind(&rows.contexts)
                .bind(now)
                .bind(&rows.vectors)
                .bind(dimensions)
                .bind(&rows.tag_rows)
                .bind(&rows.tags)
                .fetch_all(&mut *conn)
                .await?;
            ids
        })?;
        if ids.len() != rows.contents.len() {
            return Err(self.error(
                what,
                DbError::Corrupt(format!(
                    "{} ids were assigned to {} memories",
                    ids.len(),
                    rows.contents.len()
                )),
            ));
        }
        Ok(ids.into_iter().map(|(id,)| format_id(id)).collect())
    }

    pub(super) async fn delete_inner(&self, id: &MemoryId) -> Result<bool, MemoryError> {
        let Some(n) = parse_id(id) else {
            return Ok(false);
        };
        statement!(self, "deleting a memory", |conn| {
            let done = sqlx::query("DELETE FROM entries WHERE id = $1")
                .bind(n)
                .execute(&mut *conn)
                .await?;
            done.rows_affected() > 0
        })
    }
}

/// Streams `rows` into `statement` (a `COPY … FROM STDIN (FORMAT binary)`), each written by
/// `encode`, in the encoder's chunks.
async fn copy_in<T>(
    conn: &mut PgConnection,
    statement: &str,
    rows: impl IntoIterator<Item = T>,
    mut encode: impl FnMut(&mut Encoder, T) -> Result<(), DbError>,
) -> Result<(), DbError> {
    let mut copy = conn.copy_in_raw(statement).await?;
    let mut e = Encoder::new();
    for row in rows {
        encode(&mut e, row)?;
        if let Some(chunk) = e.full_chunk() {
            copy.send(chunk).await?;
        }
    }
    copy.send(e.finish()).await?;
    copy.finish().await?;
    Ok(())
}

/// Copies the entries: ids, texts and times (the search document is generated).
async fn copy_entries(
    conn: &mut PgConnection,
    rows: &Prepared,
    ids: &[i64],
    now: i64,
) -> Result<(), DbError> {
    copy_in(
        conn,
        "COPY entries (id, content, context, created_at, accessed_at) \
         FROM STDIN (FORMAT binary)",
        ids.iter().zip(&rows.contents).zip(&rows.contexts),
        |e, ((id, content), context)| {
            e.row(5);
            e.bigint(*id);
            e.text(content)?;
            e.text(context)?;
            e.bigint(now);
            e.bigint(now);
            Ok(())
        },
    )
    .await
}

/// Copies the vectors (already unit length), `dimensions` floats each.
async fn copy_vectors(
    conn: &mut PgConnection,
    rows: &Prepared,
    ids: &[i64],
    dimensions: usize,
) -> Result<(), DbError> {
    copy_in(
        conn,
        "COPY embeddings (entry_id, embedding) FROM STDIN (FORMAT binary)",
        ids.iter().zip(rows.vectors.chunks(dimensions.max(1))),
        |e, (id, vector)| {
            e.row(2);
            e.bigint(*id);
            e.vector(vector)?;
            Ok(())
        },
    )
    .await
}

/// Copies the tags (`tag_rows` holds each tag's 1-based position in the batch).
async fn copy_tags(conn: &mut PgConnection, rows: &Prepared, ids: &[i64]) -> Result<(), DbError> {
    copy_in(
        conn,
        "COPY entry_tags (entry_id, tag) FROM STDIN (FORMAT binary)",
        rows.tag_rows.iter().zip(&rows.tags),
        |e, (position, tag)| {
            let id = usize::try_from(*position - 1)
                .ok()
                .and_then(|i| ids.get(i))
                .ok_or_else(|| {
                    DbError::Corrupt(format!("tag of memory {position} out of range"))
                })?;
            e.row(2);
            e.bigint(*id);
            e.text(tag)?;
            Ok(())
        },
    )
    .await
}

/// Builds the HNSW index over the `vectors` now stored, inside the load's transaction, with
/// parallel workers and enough memory for the graph (never less than the server gives
/// already).
async fn build_index(
    conn: &mut PgConnection,
    vectors: i64,
    dimensions: usize,
) -> Result<(), DbError> {
    let (memory, workers): (i64, i64) = sqlx::query_as(
        "SELECT pg_size_bytes(current_setting('maintenance_work_mem')), \
                current_setting('max_parallel_maintenance_workers')::bigint",
    )
    .fetch_one(&mut *conn)
    .await?;
    // pgvector's graph holds each vector (8 + 4 × dimensions bytes) with its neighbour
    // lists (2 × m = 32 at layer 0, about 16 bytes each) and some bookkeeping.
    let per_vector = i64::try_from(dimensions)
        .unwrap_or(i64::MAX)
        .saturating_mul(4)
        .saturating_add(1_024);
    let wanted = vectors.saturating_mul(per_vector).saturating_mul(5) / 4;
    let memory = memory.max(wanted.min(MAX_BUILD_MEMORY));
    let workers = workers.max(BUILD_WORKERS);
    sqlx::query(
        "SELECT set_config('maintenance_work_mem', $1, true), \
                set_config('max_parallel_maintenance_workers', $2, true)",
    )
    .bind(format!("{}kB", memory / 1024))
    .bind(workers.to_string())
    .execute(&mut *conn)
    .await?;
    sqlx::query(CREATE_HNSW).execute(&mut *conn).await?;
    Ok(())
}
