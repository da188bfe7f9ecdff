//! Writing: inserting memories in bulk, deleting, and keeping the change log short.

use std::sync::OnceLock;

use agent_op::{MemoryError, MemoryId, NewMemory};
use sqlx::sqlite::SqliteConnection;

use super::SqliteBackend;
use super::open::META_CHANGES_FLOOR;
use super::retry::{DbError, write_tx};
use crate::clock::now_micros;
use crate::common::{
    embed_batch_checked, embed_checked, format_id, normalize_tags, parse_id, validate_new,
};
use crate::vector::to_blob;

/// Rows per multi-row `INSERT` statement when storing.
pub(super) const ROWS_PER_INSERT: usize = 500;

/// Change-log rows kept when the log is trimmed; older rows go (handles further behind
/// reload every vector). Prune trims it; so does any write that finds it holding more than
/// twice this many rows.
pub(super) const KEEP_CHANGES: i64 = 10_000;

/// A memory ready to insert: validated, tags normalized, vector encoded.
pub(super) struct PreparedRow {
    content: String,
    context: String,
    tags: Vec<String>,
    vector: Vec<u8>,
}

impl PreparedRow {
    fn new(memory: NewMemory, vector: &[f32]) -> PreparedRow {
        PreparedRow {
            content: memory.content,
            context: memory.context,
            tags: normalize_tags(memory.tags)
                .into_iter()
                .map(|t| t.0)
                .collect(),
            vector: to_blob(vector),
        }
    }
}

impl SqliteBackend {
    /// Stores many memories at once: one embedding batch
    /// ([`EmbeddingProvider::embed_batch`](agent_op::EmbeddingProvider::embed_batch)) and one transaction, so either all are stored or
    /// none. Returns the ids in input order.
    pub async fn store_batch(
        &self,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryId>, MemoryError> {
        for memory in &memories {
            validate_new(memory)?;
        }
        if memories.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = memories.iter().map(|m| m.content.clone()).collect();
        let vectors =
            embed_batch_checked(self.inner.embedder.as_ref(), self.inner.dimensions, &texts)
                .await?;
        let rows: Vec<PreparedRow> = memories
            .into_iter()
            .zip(&vectors)
            .map(|(m, v)| PreparedRow::new(m, v))
            .collect();
        let now = now_micros(self.inner.clock.as_ref());
        let ids = write_tx!(self, "storing memories", |conn| {
            insert(&mut *conn, &rows, now).await?
        });
        self.note_write();
        let ids = ids?;
        Ok(ids.into_iter().map(format_id).collect())
    }

    pub(super) async fn store_inner(&self, memory: NewMemory) -> Result<MemoryId, MemoryError> {
        validate_new(&memory)?;
        let vector = embed_checked(
            self.inner.embedder.as_ref(),
            self.inner.dimensions,
            &memory.content,
        )
        .await?;
        let row = PreparedRow::new(memory, &vector);
        let now = now_micros(self.inner.clock.as_ref());
        let ids = write_tx!(self, "storing a memory", |conn| {
            insert(&mut *conn, std::slice::from_ref(&row), now).await?
        });
        self.note_write();
        let ids = ids?;
        ids.into_iter()
            .next()
            .map(format_id)
            .ok_or_else(|| MemoryError::UnexpectedData {
                operation: "storing a memory".to_owned(),
                location: Some(self.inner.path.display().to_string()),
                found: "no id was assigned".to_owned(),
            })
    }

    pub(super) async fn delete_inner(&self, id: &MemoryId) -> Result<bool, MemoryError> {
        let Some(n) = parse_id(id) else {
            return Ok(false);
        };
        let deleted = write_tx!(self, "deleting a memory", |conn| {
            let done = sqlx::query("DELETE FROM entries WHERE id = ?1")
                .bind(n)
                .execute(&mut *conn)
                .await?;
            trim_change_log_if_long(&mut *conn).await?;
            done.rows_affected() > 0
        });
        self.note_write();
        deleted
    }
}

/// Inserts prepared memories (entries, embeddings, tags) with multi-row statements; returns
/// their row ids in order. Must run in the write transaction: ids are assigned here, after
/// the largest ever used (so ids are never reused, as with `AUTOINCREMENT`).
pub(super) async fn insert(
    conn: &mut SqliteConnection,
    rows: &[PreparedRow],
    now: i64,
) -> Result<Vec<i64>, DbError> {
    let (first,): (i64,) = sqlx::query_as(
        "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'entries'), 0), \
                    coalesce((SELECT max(id) FROM entries), 0)) + 1",
    )
    .fetch_one(&mut *conn)
    .await?;
    let ids: Vec<i64> = (first..).take(rows.len()).collect();
    let mut tag_pairs: Vec<(i64, &str)> = Vec::new();
    for (chunk, chunk_ids) in rows
        .chunks(ROWS_PER_INSERT)
        .zip(ids.chunks(ROWS_PER_INSERT))
    {
        let sql = Bulk::Entries.sql(chunk.len());
        let mut query = sqlx::query(&sql);
        for (row, id) in chunk.iter().zip(chunk_ids) {
            query = query
                .bind(*id)
                .bind(&row.content)
                .bind(&row.context)
                .bind(now)
                .bind(now);
        }
        query.execute(&mut *conn).await?;

        let sql = Bulk::Embeddings.sql(chunk.len());
        let mut query = sqlx::query(&sql);
        for (row, id) in chunk.iter().zip(chunk_ids) {
            query = query.bind(*id).bind(&row.vector);
        }
        query.execute(&mut *conn).await?;

        for (row, id) in chunk.iter().zip(chunk_ids) {
            tag_pairs.extend(row.tags.iter().map(|t| (*id, t.as_str())));
        }
    }
    if !tag_pairs.is_empty() {
        // Tags are user text: they travel as one bound JSON document, never as SQL.
        let json = serde_json::to_string(&tag_pairs).map_err(DbError::Encode)?;
        sqlx::query(
            "INSERT INTO entry_tags (entry_id, tag) SELECT value ->> 0, value ->> 1 FROM json_each(?1)",
        )
        .bind(json)
        .execute(&mut *conn)
        .await?;
    }
    trim_change_log_if_long(&mut *conn).await?;
    Ok(ids)
}

/// The tables filled with multi-row `INSERT` statements.
#[derive(Copy, Clone)]
pub(super) enum Bulk {
    Entries,
    Embeddings,
}

impl Bulk {
    /// The `INSERT` of `n` rows into this table. Only the count shapes the SQL; values are
    /// always bound. The full-size statement ([`ROWS_PER_INSERT`] rows) is built once.
    fn sql(self, n: usize) -> std::borrow::Cow<'static, str> {
        static ENTRIES: OnceLock<String> = OnceLock::new();
        static EMBEDDINGS: OnceLock<String> = OnceLock::new();
        let (prefix, row, full) = match self {
            Bulk::Entries => (
                "INSERT INTO entries (id, content, context, created_at, accessed_at, access_count) VALUES ",
                "(?, ?, ?, ?, ?, 0)",
                &ENTRIES,
            ),
            Bulk::Embeddings => (
                "INSERT INTO embeddings (entry_id, vector) VALUES ",
                "(?, ?)",
                &EMBEDDINGS,
            ),
        };
        let build = |n: usize| {
            let mut sql = String::with_capacity(prefix.len() + n * (row.len() + 2));
            sql.push_str(prefix);
            for i in 0..n {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(row);
            }
            sql
        };
        if n == ROWS_PER_INSERT {
            std::borrow::Cow::Borrowed(full.get_or_init(|| build(n)).as_str())
        } else {
            std::borrow::Cow::Owned(build(n))
        }
    }
}

/// Trims the change log when it holds more than twice [`KEEP_CHANGES`] rows (two indexed
/// look-ups otherwise). Run by every write that adds to the log, so the log stays bounded
/// even if prune never runs.
pub(super) async fn trim_change_log_if_long(conn: &mut SqliteConnection) -> Result<(), DbError> {
    let (first, last): (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT (SELECT min(seq) FROM changes), (SELECT max(seq) FROM changes)")
            .fetch_one(&mut *conn)
            .await?;
    if let (Some(first), Some(last)) = (first, last) {
        if last - first >= 2 * KEEP_CHANGES {
            trim_change_log(conn).await?;
        }
    }
    Ok(())
}

/// Drops change-log rows more than [`KEEP_CHANGES`] behind the newest and raises the floor.
pub(super) async fn trim_change_log(conn: &mut SqliteConnection) -> Result<(), DbError> {
    let (last,): (i64,) = sqlx::query_as("SELECT coalesce(max(seq), 0) FROM changes")
        .fetch_one(&mut *conn)
        .await?;
    let floor = last - KEEP_CHANGES;
    if floor <= 0 {
        return Ok(());
    }
    sqlx::query("DELETE FROM changes WHERE seq <= ?1")
        .bind(floor)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "INSERT INTO store_meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .bind(META_CHANGES_FLOOR)
    .bind(floor.to_string())
    .execute(&mut *conn)
    .await?;
    Ok(())
}
