//! Writing: inserting memories (one statement for any number of them) and deleting.

use agent_op::{MemoryError, MemoryId, NewMemory};

use super::PostgresBackend;
use super::retry::{DbError, statement};
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
    /// ([`EmbeddingProvider::embed_batch`](agent_op::EmbeddingProvider::embed_batch)) and
    /// one statement, so either all are stored or none. Returns the ids in input order.
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
        self.insert(&prepared, "storing memories").await
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
