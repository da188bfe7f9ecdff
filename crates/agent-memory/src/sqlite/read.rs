//! Listings and lookups: recent, by tag, by id, the count.

use std::collections::HashMap;

use agent_op::{MemoryEntry, MemoryError, MemoryId, Tag};
use sqlx::sqlite::SqliteConnection;

use super::retry::{DbError, read_tx};
use super::{EntryRow, SqliteBackend, json_ids, json_strings};
use crate::clock::from_micros;
use crate::common::{format_id, normalize_tags, parse_id};

impl SqliteBackend {
    pub(super) async fn recent_inner(&self, n: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        read_tx!(self, "listing recent memories", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT id, content, context, created_at, accessed_at, access_count \
                 FROM entries ORDER BY created_at DESC, id DESC LIMIT ?1",
            )
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })
    }

    pub(super) async fn by_tags_inner(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<MemoryEntry>, MemoryError> {
        let wanted: Vec<String> = normalize_tags(tags.to_vec())
            .into_iter()
            .map(|t| t.0)
            .collect();
        if wanted.is_empty() {
            return self.recent_inner(usize::MAX).await;
        }
        let tags_json = json_strings(&wanted);
        let need = i64::try_from(wanted.len()).unwrap_or(i64::MAX);
        read_tx!(self, "listing memories by tag", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT e.id, e.content, e.context, e.created_at, e.accessed_at, e.access_count \
                 FROM entries e JOIN ( \
                     SELECT entry_id FROM entry_tags \
                     WHERE tag IN (SELECT value FROM json_each(?1)) \
                     GROUP BY entry_id HAVING count(*) = ?2 \
                 ) m ON m.entry_id = e.id \
                 ORDER BY e.created_at DESC, e.id DESC",
            )
            .bind(&tags_json)
            .bind(need)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })
    }

    pub(super) async fn get_inner(
        &self,
        id: &MemoryId,
    ) -> Result<Option<MemoryEntry>, MemoryError> {
        let Some(n) = parse_id(id) else {
            return Ok(None);
        };
        let found = read_tx!(self, "reading a memory", |conn| {
            let rows: Vec<EntryRow> = sqlx::query_as(
                "SELECT id, content, context, created_at, accessed_at, access_count \
                 FROM entries WHERE id = ?1",
            )
            .bind(n)
            .fetch_all(&mut *conn)
            .await?;
            with_tags(&mut *conn, rows).await?
        })?;
        Ok(found.into_iter().next())
    }

    pub(super) async fn count_inner(&self) -> Result<u64, MemoryError> {
        let count = read_tx!(self, "counting memories", |conn| {
            let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM entries")
                .fetch_one(&mut *conn)
                .await?;
            count
        })?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

/// Turns entry rows into entries, loading their tags (sorted).
pub(super) async fn with_tags(
    conn: &mut SqliteConnection,
    rows: Vec<EntryRow>,
) -> Result<Vec<MemoryEntry>, DbError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let tag_rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT entry_id, tag FROM entry_tags \
         WHERE entry_id IN (SELECT value FROM json_each(?1)) ORDER BY entry_id, tag",
    )
    .bind(json_ids(&ids))
    .fetch_all(&mut *conn)
    .await?;
    let mut tags: HashMap<i64, Vec<Tag>> = HashMap::new();
    for (id, tag) in tag_rows {
        tags.entry(id).or_default().push(Tag(tag));
    }
    Ok(rows
        .into_iter()
        .map(|row| {
            let row_tags = tags.remove(&row.0).unwrap_or_default();
            entry_of(row, row_tags)
        })
        .collect())
}

/// The entry a row of `entries` holds, with its `tags`.
pub(super) fn entry_of(
    (id, content, context, created, accessed, count): EntryRow,
    tags: Vec<Tag>,
) -> MemoryEntry {
    MemoryEntry {
        id: format_id(id),
        content,
        context,
        tags,
        created_at: from_micros(created),
        accessed_at: from_micros(accessed),
        access_count: u64::try_from(count).unwrap_or(0),
    }
}
